"""The three stores on disk: the history, the traces, the deliberate store (rag.py, its backends).

- `rag.py`      the deliberate store's public API: primitives, writes, folds, reindex; no search logic
- `backend.py`  the contract (the Backend protocol and its open modes)
- `common.py`   what every backend shares: dataclasses, validation, dedup keys, the rarity rule
- `identity.py` the embedding identity, its comparison, the fingerprint and the cutoff
- `sqlite.py`   the SQLite backend (sqlite-vec + FTS5): every SQL statement on the store
- `postgres.py` the PostgreSQL + pgvector backend; `transfer.py` copies and snapshots between them

Nothing outside this package imports a backend module or runs SQL on the deliberate store.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..core.settings import Settings
    from .backend import Backend


def backend_for(settings: "Settings") -> Any:
    """The backend module the settings select: the one place a new backend plugs in
    (`FORGE_DATABASE_URL=postgresql://…` → `forge.store.postgres`). Each module has
    `open_backend(settings, *, mode, path=None)`."""
    if getattr(settings, "database_url", None):
        from . import postgres

        return postgres
    from . import sqlite

    return sqlite


def open_backend(settings: "Settings", *, mode: str = "write",
                 path: Path | str | None = None) -> "Backend":
    """Open the configured store in `mode` (backend.OPEN_MODES). `path` always names a SQLite
    file (`--db`, a snapshot, a harness copy), whatever the configured backend."""
    if path is not None:
        from . import sqlite

        return sqlite.open_backend(settings, mode=mode, path=path)
    return backend_for(settings).open_backend(settings, mode=mode)
