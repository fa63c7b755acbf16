#!/usr/bin/env python3
"""What a forget that leaves no byte of the text costs, on a SQLite store of 10k entries.

    python bench/forget_erase.py [--size 10000] [--secrets 30] [--rounds 3] [--postgres]
                                 [--write-docs]

A store written one entry a transaction as `forge remember` writes it, `--secrets` entries
holding a GitHub token. On a fresh copy: forget one, forget them all, redact them; each timed,
then every file read raw for the tokens (whole, or their FTS5 word; target: none), then the file
rewritten once more (`rag.vacuum`, the rewrite's own cost). `--postgres`: the same on PostgreSQL,
then a plain VACUUM, then `rag.vacuum` (VACUUM FULL), the tokens counted after each.
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import string
import tempfile
import time
from pathlib import Path

import docs_figures
import harness
import numpy as np
from recall_latency import KINDS, PROJECTS, Precomputed, sentences, unit_vectors
from tabulate import tabulate


def embedder(n: int, rng) -> Precomputed:
    """n random vectors and n lists of 64 latent terms: a real store's tables, no model."""
    return Precomputed(unit_vectors(n, rng), [[(int(a), 1.01 - k / 64) for k, a in enumerate(
        rng.choice(16384, size=64, replace=False))] for _ in range(n)], head="bench: 64 random")


def settings_for(folder: Path, url: str | None = None):
    return harness.data_settings(folder, LLAMA_CPP_URL="http://127.0.0.1:9", FORGE_KEEP_SECRETS="1",
                                 **({"FORGE_DATABASE_URL": url} if url else {}))


def build(folder: Path, size: int, secrets: int, url: str | None = None,
          batch: int = 1) -> list[str]:
    """The store in `folder` (or at `url`); returns the tokens its secret entries hold."""
    from forge.store import rag

    rng = np.random.default_rng(7)
    texts = [t + f" ({n})" for n, t in enumerate(sentences(size, rng, longest=30))]
    alphabet = list(string.ascii_letters + string.digits)
    tokens = ["ghp_" + "".join(rng.choice(alphabet, size=36)) for _ in range(secrets)]
    for n, at in enumerate(sorted(rng.choice(size, size=secrets, replace=False))):
        texts[at] += f" — my GitHub token is {tokens[n]}"
    with rag.open_store(settings_for(folder, url), embedder=embedder(size, rng)) as store:
        for start in range(0, size, batch):
            rag.remember_many(store, [rag.NewEntry(KINDS[i % 5], texts[i], PROJECTS[i % 5])
                                      for i in range(start, min(start + batch, size))],
                              batch_size=batch)
    return tokens


def copies(paths, tokens: list[str]) -> tuple[int, int]:
    """(copies of the whole tokens, copies of their FTS5 words) in the files `paths`."""
    whole = words = 0
    for path in (p for p in paths if p.is_file()):
        data = path.read_bytes()
        whole += sum(data.count(t.encode()) for t in tokens)
        # the word's end: FTS5 stores a term after the prefix it shares with the one before
        words += sum(data.count(t[-24:].lower().encode()) for t in tokens)
    return whole, words


def operate(store, op: str, tokens: list[str]) -> tuple[float, list[str]]:
    """Forget one secret entry, forget them all or redact them: (seconds, the tokens gone)."""
    from forge.memory.scan import entries_holding_secrets
    from forge.store import rag

    texts = dict(rag.texts(store))
    ids = [i for i, text in texts.items() if "ghp_" in text]
    ids = ids[len(ids) // 2:][:1] if op == "forget one" else ids
    started = time.perf_counter()
    if op == "redact all":
        rag.redact_entries(store, entries_holding_secrets(rag.texts(store)))
    else:
        rag.forget_many(store, ids)
    return time.perf_counter() - started, [t for t in tokens if any(t in texts[i] for i in ids)]


def run(source: Path, work: Path, op: str, tokens: list[str]) -> tuple[float, float, int, int]:
    """One operation on a fresh copy: (seconds, a second rewrite's seconds, tokens left whole,
    FTS5 words left)."""
    from forge.store import rag

    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(source, work)
    fresh = embedder(2 * len(tokens), np.random.default_rng(8))   # what a redaction embeds
    with rag.open_store(settings_for(work), embedder=fresh) as store:
        seconds, gone = operate(store, op, tokens)
    found = copies(work.rglob("*"), gone)
    with rag.open_store(settings_for(work), embedder=fresh) as store:
        return (seconds, rag.vacuum(store)["seconds"], *found)


def pg_left(url: str, tokens: list[str]) -> int:
    """Copies of the tokens (whole, or as a word) in the files of the database at `url`, after a
    CHECKPOINT, the planner's statistics (pg_statistic) left out: nothing here runs ANALYZE."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("checkpoint")
        folder = Path(conn.execute("show data_directory").fetchone()[0])
        oid = conn.execute("select oid from pg_database where datname = current_database()"
                           ).fetchone()[0]
        stats = str(conn.execute("select pg_relation_filenode('pg_statistic')").fetchone()[0])
    return sum(copies((p for p in (folder / "base" / str(oid)).iterdir()
                       if p.name.split("_")[0].split(".")[0] != stats), tokens))


def postgres_part(size: int, secrets: int, rounds: int) -> None:
    """Forget one / redact on PostgreSQL, then a plain VACUUM, then `rag.vacuum` (VACUUM FULL),
    each timed, the tokens counted in the database's files after each."""
    import postgres_latency as pl

    from forge.store import rag

    with pl.server_and_folder(None, "forge-erase-pg-") as (server, folder):   # gone after
        source = pl.database(server, "forge_erase_source")
        started = time.perf_counter()
        tokens = build(folder, size, secrets, url=source, batch=500)
        print(f"\nPostgreSQL: built {size} entries ({secrets} with a token) in "
              f"{time.perf_counter() - started:.0f} s")
        rows: dict[str, list[tuple]] = {}
        for _ in range(rounds):
            for op in ("forget one", "redact all"):
                pl.admin(server, 'drop database if exists "forge_erase_work" with (force)')
                pl.admin(server, 'create database "forge_erase_work" template "forge_erase_source"')
                work = server.rsplit("/", 1)[0] + "/forge_erase_work"
                fresh = embedder(2 * secrets, np.random.default_rng(8))
                with rag.open_store(settings_for(folder, work), embedder=fresh) as store:
                    op_s, gone = operate(store, op, tokens)
                    after_op = pg_left(work, gone)
                    tables = ", ".join(t for t in store.backend.VACUUM_TABLES
                                       if store.backend._table_exists(t))
                    t0 = time.perf_counter()
                    store.backend.conn.execute(f"vacuum {tables}")
                    plain_s = time.perf_counter() - t0
                    after_plain = pg_left(work, gone)
                    full_s = rag.vacuum(store)["seconds"]
                    rows.setdefault(op, []).append((op_s, plain_s, full_s, after_op, after_plain,
                                                    pg_left(work, gone)))
        print(tabulate([[op.replace("all", str(secrets)), *(x for k in range(3) for x in (
            statistics.median(r[k] for r in runs), runs[-1][3 + k]))] for op, runs in rows.items()],
            headers=["operation", "op s", "left", "VACUUM s", "left", "VACUUM FULL s", "left"],
            floatfmt=".2f"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=10000)
    parser.add_argument("--secrets", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--postgres", action="store_true",
                        help="also on PostgreSQL (a server started for the run)")
    parser.add_argument("--write-docs", action="store_true", help=docs_figures.HELP)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="forge-erase-") as tmp, \
            docs_figures.tee("forget_erase", args.write_docs):
        base = Path(tmp) / "store"
        base.mkdir()
        started = time.perf_counter()
        tokens = build(base, args.size, args.secrets)
        print(f"built {args.size} entries ({args.secrets} with a token) in "
              f"{time.perf_counter() - started:.0f} s")
        whole, words = copies(base.rglob("*"), tokens)
        size = ", ".join(f"{p.name} {p.stat().st_size / 1e6:.1f} MB"
                         for p in sorted(base.iterdir()))
        print(f"store: {size}; before any forget: {whole} copies of the {len(tokens)} tokens, "
              f"{words} of their FTS5 words")
        found: dict[str, list[tuple[float, float, int, int]]] = {}
        for _ in range(args.rounds):   # rounds interleaved: the load weighs on every operation
            for op in ("forget one", "forget all", "redact all"):
                found.setdefault(op, []).append(run(base, Path(tmp) / "work", op, tokens))
        print("\n" + tabulate([[op.replace("all", str(args.secrets)),
                                *(statistics.median(r[k] for r in runs) for k in (0, 1)),
                                *runs[-1][2:]] for op, runs in found.items()],
                               headers=["operation", "median s", "rewrite s", "tokens left",
                                        "FTS5 words left"], floatfmt=".2f"))
        print("rewrite s: the file rewritten once more right after (rag.vacuum), what the "
              "rewrite inside each operation costs; medians of the rounds, a shared machine")
        if args.postgres:
            postgres_part(args.size, args.secrets, args.rounds)


if __name__ == "__main__":
    main()
