"""The one helper every store harness uses: a fresh snapshot of the store, never the store.

`fresh_snapshot(source, settings)` copies `source` (default: the configured store) with SQLite's
backup API (pages still in the WAL included) into a new temporary folder; a PostgreSQL store
becomes a scratch SQLite file by `forge store migrate`'s transfer. `refuse_live(path, settings)`
stops a harness about to open the live RAG_DB_FILE itself.
"""
from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


class LiveStoreRefused(RuntimeError):
    """A harness was about to open (or write) the live store."""


def refuse_live(path: Path | str, settings: Any = None) -> Path:
    """`path`, unless it is the live RAG_DB_FILE (same file, whatever the spelling)."""
    from forge.core.settings import load_settings

    live = Path((settings or load_settings()).rag_db_file)
    try:
        same = os.path.samefile(path, live)
    except FileNotFoundError:
        same = Path(os.path.abspath(path)) == Path(os.path.abspath(live))
    if same:
        raise LiveStoreRefused(f"refusing to open the live store {live} (RAG_DB_FILE): harnesses "
                               "run on a fresh snapshot (store_snapshot.fresh_snapshot)")
    return Path(path)


def fresh_snapshot(source: Path | str | None = None, settings: Any = None, *,
                   folder: Path | str | None = None) -> Path:
    """A consistent copy of `source` (default: the configured store) in a new temporary folder,
    always a SQLite file."""
    from forge.core.settings import is_database_url, load_settings
    from forge.store import db

    settings = settings or load_settings()
    url = str(source) if is_database_url(str(source or "")) else \
        settings.database_url if source is None else None
    source = Path(source) if source is not None else Path(settings.rag_db_file)
    if not url and not source.exists():
        raise FileNotFoundError(f"no store at {source} to snapshot (--db PATH)")
    folder = Path(folder) if folder is not None else Path(tempfile.mkdtemp(prefix="forge-bench-"))
    dest = refuse_live(folder / "snapshot.db", settings)
    if not url:
        return db.snapshot(source, dest)
    import dataclasses

    from forge.store import postgres, transfer

    pg = dataclasses.replace(settings, database_url=url)
    backend = postgres.open_backend(pg, mode="rows")
    try:
        return transfer.snapshot(pg, backend, dest)
    finally:
        backend.close()


def open_snapshot(source: Path | str | None, settings: Any, *, embedder: Any = None,
                  readonly: bool = True) -> Any:
    """A Store on a fresh snapshot of `source` (the cutoff off when `readonly`, as calibrate)."""
    from forge.recall import calibrate
    from forge.store import rag

    copy = refuse_live(fresh_snapshot(source, settings), settings)
    if readonly:
        return calibrate.open_readonly(settings, path=copy, embedder=embedder)
    return rag.open_store(settings, path=copy, embedder=embedder)
