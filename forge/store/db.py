"""The one SQLite connection helper every command uses.

Binding: `sqlean.py` (a sqlite3 work-alike bundling a recent SQLite that can load extensions
everywhere) first, then the standard `sqlite3` where it can load extensions, then `pysqlite3`.
`FORGE_SQLITE_BINDING=sqlean|sqlite3|pysqlite3` forces one. Every connection: WAL, a busy
timeout so a concurrent forge process is waited for, sqlite-vec loaded and checked with
`vec_version()`, FTS5 probed once.

Migrations are an ordered list of small functions; `migrate` applies the missing ones on open,
each in its own transaction, and `PRAGMA user_version` records how many ran.
"""
from __future__ import annotations

import contextlib
import importlib
import os
import time
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterator, NamedTuple, Sequence

from ..core.errors import DamagedStoreError, StoreError
from ..core.log import log

BUSY_TIMEOUT_MS = 10_000
BINDINGS = ("sqlean", "sqlite3", "pysqlite3")
_IMPORT_NAME = {"sqlean": "sqlean", "sqlite3": "sqlite3", "pysqlite3": "pysqlite3.dbapi2"}


class Binding(NamedTuple):
    """The SQLite binding in use: its name (BINDINGS) and its DB-API module. (A NamedTuple:
    a frozen dataclass cost ~0.7 ms of every command's start.)"""

    name: str
    module: ModuleType

    @property
    def sqlite_version(self) -> str:
        return self.module.sqlite_version


def _can_load_extensions(module: ModuleType) -> bool:
    return hasattr(module.Connection, "enable_load_extension")


_binding: Binding | None = None


def binding() -> Binding:
    """The first binding that can load extensions (cached)."""
    global _binding
    if _binding is not None:
        return _binding
    forced = os.environ.get("FORGE_SQLITE_BINDING", "").strip()
    if forced and forced not in BINDINGS:
        raise StoreError(f"FORGE_SQLITE_BINDING: unknown binding {forced!r}; expected one of "
                         f"{', '.join(BINDINGS)}")
    tried = []
    for name in ([forced] if forced else BINDINGS):
        try:
            module = importlib.import_module(_IMPORT_NAME[name])
        except ImportError:
            tried.append(f"{name} (not installed)")
            continue
        if not _can_load_extensions(module):
            tried.append(f"{name} (cannot load extensions)")
            continue
        _binding = Binding(name, module)
        return _binding
    raise StoreError("no SQLite binding here can load sqlite-vec: tried " + ", ".join(tried)
                     + "; install one with `pip install sqlean.py`")


def vec_extension_path() -> str:
    """The sqlite-vec loadable extension, found without importing the `sqlite_vec` module:
    that import pulls numpy (~0.3 s), which a command that only lists rows must not pay."""
    import importlib.util

    spec = importlib.util.find_spec("sqlite_vec")
    if spec is None or not spec.submodule_search_locations:
        raise StoreError("sqlite-vec is not installed; `pip install sqlite-vec`")
    folder = Path(list(spec.submodule_search_locations)[0])
    for name in ("vec0.so", "vec0.dylib", "vec0.dll"):
        if (folder / name).exists():
            return str(folder / "vec0")  # SQLite adds the platform's suffix itself
    try:  # an unusual layout: ask the package (imports numpy, still correct)
        import sqlite_vec
    except ImportError:
        raise StoreError("sqlite-vec is not installed; `pip install sqlite-vec`") from None
    return sqlite_vec.loadable_path()


def _load_vec(conn: Any) -> str:
    path = vec_extension_path()
    try:
        conn.enable_load_extension(True)
        conn.load_extension(path)
        conn.enable_load_extension(False)
        (version,) = conn.execute("select vec_version()").fetchone()
    except Exception as e:  # the binding's OperationalError, AttributeError on odd builds
        raise StoreError(f"cannot load sqlite-vec with the {binding().name} binding: {e}") from None
    return version


def connect(path: Path | str, *, readonly: bool = False, untouched: bool = False,
            vec: bool = True) -> Any:
    """Open `path` (":memory:" allowed) with WAL, a busy timeout and sqlite-vec.

    `readonly` opens without changing the database. Even so, a read of a WAL database creates
    its `-wal` and `-shm` side files when no other connection has them open; `untouched`
    (doctor, which must write nothing) then opens the file immutable instead: with no `-wal`
    file there is no other connection and nothing outside the main file to read. Autocommit
    mode: writes go through `transaction()`.
    """
    b = binding()
    readonly = readonly or untouched
    if str(path) != ":memory:" and not readonly:
        folder = Path(path).parent
        if folder.exists() and not folder.is_dir():
            raise StoreError(f"{folder} is a file, not a folder: FORGE_DATA_DIR (or the store's "
                             "own setting) must name a folder")
        folder.mkdir(parents=True, exist_ok=True)
    try:
        if readonly:
            idle = untouched and not Path(f"{path}-wal").exists()
            from urllib.parse import quote

            uri = f"file:{quote(str(Path(path).resolve()))}?{'immutable=1' if idle else 'mode=ro'}"
            conn = b.module.connect(uri, uri=True, timeout=BUSY_TIMEOUT_MS / 1000,
                                    isolation_level=None, check_same_thread=False)
        else:
            conn = b.module.connect(str(path), timeout=BUSY_TIMEOUT_MS / 1000,
                                    isolation_level=None, check_same_thread=False)
        conn.execute(f"pragma busy_timeout = {BUSY_TIMEOUT_MS}")
        if not readonly and str(path) != ":memory:":
            _set_wal(conn, b.module)
            conn.execute("pragma synchronous = normal")
        conn.execute("pragma foreign_keys = on")
        conn.execute("select count(*) from sqlite_master")  # a file that is no database fails here
    except b.module.Error as e:
        if is_damage(e):
            raise damaged(path, e) from None
        raise StoreError(f"cannot open {path}: {e}") from None
    if vec:
        _load_vec(conn)
    return conn if str(path) == ":memory:" else Connection(conn, str(path))


# SQLITE_CORRUPT, SQLITE_NOTADB (primary codes; extended codes share the low byte)
_DAMAGE_CODES = (11, 26)
_DAMAGE_WORDS = ("malformed", "not a database", "corrupt", "blob read error")


def is_damage(e: BaseException) -> bool:
    """Whether a SQLite error says the file itself is damaged (not locked, not a bug)."""
    code = getattr(e, "sqlite_errorcode", None)
    if isinstance(code, int) and code & 0xFF in _DAMAGE_CODES:
        return True
    return any(word in str(e).lower() for word in _DAMAGE_WORDS)


def damaged(path: Path | str, e: BaseException) -> DamagedStoreError:
    problem = ("the file is not a database" if "not a database" in str(e).lower()
               else f"the database is damaged ({e})")
    return DamagedStoreError(str(path), problem)


class Connection:
    """The binding's connection, except that an error saying the file is damaged (whenever a
    page is read: at open, in a query, while fetching rows) becomes one DamagedStoreError naming
    the file, so every command and compaction see the same failure."""

    def __init__(self, raw: Any, path: str):
        self.raw = raw
        self.path = path

    def execute(self, sql: str, params: Any = ()) -> "Cursor":
        with self._translated():
            return Cursor(self.raw.execute(sql, params), self)

    def executemany(self, sql: str, rows: Any) -> "Cursor":
        with self._translated():
            return Cursor(self.raw.executemany(sql, rows), self)

    @contextlib.contextmanager
    def _translated(self) -> Iterator[None]:
        try:
            yield
        except binding().module.DatabaseError as e:
            if is_damage(e):
                raise damaged(self.path, e) from None
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw, name)

    def __enter__(self) -> "Connection":
        self.raw.__enter__()
        return self

    def __exit__(self, *exc: Any) -> Any:
        return self.raw.__exit__(*exc)


class Cursor:
    def __init__(self, raw: Any, conn: Connection):
        self.raw = raw
        self._conn = conn

    def fetchone(self) -> Any:
        with self._conn._translated():
            return self.raw.fetchone()

    def fetchall(self) -> list[Any]:
        with self._conn._translated():
            return self.raw.fetchall()

    def fetchmany(self, size: int = 1) -> list[Any]:
        with self._conn._translated():
            return self.raw.fetchmany(size)

    def __iter__(self) -> Iterator[Any]:
        while True:
            rows = self.fetchmany(256)
            if not rows:
                return
            yield from rows

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw, name)


def sidecar_path(store_path: Path | str) -> Path:
    """The memory-mapped vector copy beside a SQLite store (forge/store/vector_scan.py)."""
    return Path(str(store_path) + ".vectors")


def writable(path: Path | str) -> bool:
    """Whether a store at `path` can be written: its folder (SQLite creates the `-wal` and
    `-shm` files there) and the file itself when it exists. False on a read-only mount too."""
    path = Path(path)
    folder = path.parent
    if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
        return False
    return not path.exists() or os.access(path, os.W_OK)


def _set_wal(conn: Any, module: ModuleType) -> None:
    """`journal_mode = wal`, retried: on a brand-new file that another process is switching at
    the same moment, SQLite answers "database is locked" at once instead of calling the busy
    handler (two `forge remember` on a fresh install)."""
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            conn.execute("pragma journal_mode = wal")
            return
        except module.OperationalError as e:
            if not ("locked" in str(e) or "busy" in str(e)) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


_fts5: dict[str, bool] = {}


def has_fts5(conn: Any) -> bool:
    """Whether this SQLite was built with FTS5 (probed once per binding)."""
    name = binding().name
    if name not in _fts5:
        try:
            conn.execute("create virtual table temp._forge_fts5_probe using fts5(x)")
            conn.execute("drop table temp._forge_fts5_probe")
            _fts5[name] = True
        except Exception:
            _fts5[name] = False
    return _fts5[name]


def vec_version(conn: Any) -> str | None:
    try:
        return conn.execute("select vec_version()").fetchone()[0]
    except Exception:
        return None


@contextlib.contextmanager
def busy_timeout(conn: Any, ms: int) -> Iterator[None]:
    """`conn` waits at most `ms` for a lock inside the block (0: refused at once), then
    BUSY_TIMEOUT_MS again, whatever the block raised."""
    conn.execute(f"pragma busy_timeout = {int(ms)}")
    try:
        yield
    finally:
        conn.execute(f"pragma busy_timeout = {BUSY_TIMEOUT_MS}")


@contextlib.contextmanager
def transaction(conn: Any) -> Iterator[Any]:
    """BEGIN IMMEDIATE … COMMIT, ROLLBACK on any exception. Takes the write lock up front, so
    a second writer waits (busy timeout) instead of failing half-way."""
    try:
        conn.execute("begin immediate")
    except binding().module.OperationalError as e:
        raise StoreError(_locked_message(conn, e)) from None
    try:
        yield conn
    except BaseException:
        conn.execute("rollback")
        raise
    else:
        conn.execute("commit")


def _locked_message(conn: Any, e: Exception) -> str:
    if "locked" in str(e) or "busy" in str(e):
        return (f"the database is locked by another process for more than "
                f"{BUSY_TIMEOUT_MS // 1000}s: {e}")
    return str(e)


Migration = Callable[[Any], None]


def schema_version(conn: Any) -> int:
    return conn.execute("pragma user_version").fetchone()[0]


def migrate(conn: Any, migrations: Sequence[Migration]) -> list[str]:
    """Apply the migrations not applied yet, in order, each in a transaction. Returns their names."""
    applied = []
    current = schema_version(conn)
    if current > len(migrations):
        raise StoreError(f"this store has schema version {current}, newer than this forge "
                         f"({len(migrations)}); upgrade forge")
    for number, step in enumerate(migrations[current:], start=current + 1):
        with transaction(conn):
            if schema_version(conn) >= number:  # another process migrated meanwhile
                continue
            step(conn)
            conn.execute(f"pragma user_version = {number}")
        applied.append(step.__name__)
    return applied


def snapshot(source: Path, dest: Path) -> Path:
    """A consistent copy of a live store via SQLite's backup API (a plain file copy of a WAL
    database misses the pages still in the WAL). Used by every `bench/` harness."""
    if not Path(source).exists():
        raise StoreError(f"no database at {source}")
    dest = Path(dest)
    if dest.exists():
        dest.unlink()
    src = connect(source, readonly=True, vec=False)
    dst = connect(dest, vec=False)
    try:
        src.raw.backup(dst.raw)
    finally:
        src.close()
        dst.close()
    return dest
