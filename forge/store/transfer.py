"""`forge store migrate`: copy a whole deliberate store from one backend to another, verified.

What is copied, with its ids: every entry (kind, project, content, source, refs, created and
whether it is known, updated, dedup key, `superseded_by` links), every vector, every latent term (the
identity names the head that wrote them, so the copy answers the latent channel at once),
every note's sentence-model row (byte for byte, with the `sentence` identity that wrote them),
the message refs (rebuilt from each entry's refs, as a write makes them), the event log with its
times, and the identity metadata (`identity`, `identity_check`: the embedder that wrote the
vectors, its probe, its fingerprint).
The word index follows the entries (SQLite's FTS5 triggers; PostgreSQL's tsvector column, folded
by forge/store/fold.py). The target must be empty; everything is written in ONE transaction of
the target, so a failure leaves it as empty as it was.

Verified after the commit by reading the target back: the counts (entries, events, vectors,
message refs, latent terms, sentence rows) and `checksum()` of both sides must be equal, and the
digests of the vectors, of the latent terms and of the sentence rows too.

Each backend's side is a few SQL statements here (reading every row, and inserting rows with
their own ids and times, which the Backend protocol's writes never do). Targets are named by
URL: `sqlite:///PATH` (three slashes, then the path: `sqlite:////abs/path.db` for an absolute
one) or `postgresql://…` / `postgres://…`.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator

from ..core.errors import StoreError
from ..core.settings import is_database_url, redact_url

if TYPE_CHECKING:
    import numpy as np

    from ..core.settings import Settings

META_KEYS = ("identity", "identity_check", "sentence")  # a reindex under way ("reindex") is refused
ENTRY_COLUMNS = ("id", "kind", "project", "content", "source", "refs", "created", "updated",
                 "superseded_by", "dedup_key", "superseded_reason", "created_known")
LINK_COLUMNS = ("superseded_by", "superseded_reason")   # written after every entry
EVENT_COLUMNS = ("at", "event", "entry_id", "kind", "link", "info")


class TargetError(ValueError):
    """The --to value is not a store URL this command knows (a usage error)."""


@dataclass(frozen=True)
class Target:
    backend: str          # "sqlite" | "postgres"
    path: Path | None     # the SQLite file
    url: str | None       # the PostgreSQL URL (with its password: never print it)

    @property
    def shown(self) -> str:
        return f"sqlite:///{self.path}" if self.path is not None else redact_url(self.url or "")


def parse_target(text: str) -> Target:
    """`sqlite:///PATH` or a PostgreSQL URL; anything else is a TargetError (one line, the
    password hidden)."""
    raw = text.strip()
    if raw.lower().startswith("sqlite:///"):
        path = raw[len("sqlite:///"):]
        if not path:
            raise TargetError("sqlite:/// needs a file path: sqlite:///PATH (relative) or "
                              "sqlite:////abs/path.db")
        return Target("sqlite", Path(path).expanduser(), None)
    if is_database_url(raw):
        return Target("postgres", None, raw)
    raise TargetError(f"expected sqlite:///PATH or a postgresql:// URL, got {redact_url(raw)!r}")


def source_of(settings: "Settings") -> Target:
    """The configured store: FORGE_DATABASE_URL, else the SQLite file RAG_DB_FILE."""
    if settings.database_url:
        return Target("postgres", None, settings.database_url)
    return Target("sqlite", Path(settings.rag_db_file), None)


# ---------------------------------------------------------------------------- the checksum

def _canonical(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def _decoded(text: Any) -> Any:
    """refs / info as stored (JSON text, or already decoded), as a value; empty = None."""
    if text is None or text == "":
        return None
    return json.loads(text) if isinstance(text, str) else text


def checksum(entries: Iterable[dict[str, Any]], events: Iterable[dict[str, Any]],
             identity: Any = None) -> str:
    """The content checksum of a store, whatever its backend: sha256 over every entry by id
    (id, kind, project, content, source, refs, created, updated, superseded_by, dedup key, and
    why it is superseded when it is, and that its time is unknown when it is),
    then every event in order (at, event, entry_id, kind, link, info), then the identity.
    JSON values (refs, info, identity) are compared as values, not as the text a backend kept."""
    digest = hashlib.sha256()
    for e in sorted(entries, key=lambda e: int(e["id"])):
        digest.update(_canonical(["entry", int(e["id"]), e["kind"], e["project"], e["content"],
                                  e["source"], _decoded(e["refs"]) or {}, e["created"],
                                  e["updated"], e["superseded_by"], e.get("dedup_key")]
                                 + ([e.get("superseded_reason")] if e["superseded_by"] is not None
                                    else [])
                                 + ([] if e.get("created_known", True) else
                                    [["created_known", False]])).encode())
        digest.update(b"\n")
    for ev in events:
        digest.update(_canonical(["event", ev["at"], ev["event"], ev["entry_id"], ev["kind"],
                                  ev["link"], _decoded(ev["info"])]).encode())
        digest.update(b"\n")
    digest.update(_canonical(["identity", identity]).encode())
    return digest.hexdigest()


def vectors_digest(vectors: Iterable[tuple[int, "np.ndarray"]]) -> str:
    """sha256 over (id, float32 bytes) by id: the copied vectors are bit for bit the same."""
    import numpy as np

    digest = hashlib.sha256()
    for entry_id, vec in sorted(vectors, key=lambda iv: iv[0]):
        digest.update(int(entry_id).to_bytes(8, "little", signed=True))
        digest.update(np.asarray(vec, dtype=np.float32).tobytes())
    return digest.hexdigest()


def sentence_digest(rows: Iterable[tuple[int, bytes]]) -> str:
    """sha256 over (entry id, row bytes) by id: the copied sentence rows are byte for byte the
    same."""
    digest = hashlib.sha256()
    for entry_id, row in sorted((int(i), bytes(r)) for i, r in rows):
        digest.update(entry_id.to_bytes(8, "little", signed=True))
        digest.update(len(row).to_bytes(4, "little"))
        digest.update(row)
    return digest.hexdigest()


def latent_digest(rows: Iterable[tuple[int, int, float]]) -> str:
    """sha256 over (entry id, term, float64 weight) by entry and term: the copied latent-term
    index is bit for bit the same (both backends keep the weight as a double)."""
    import struct

    digest = hashlib.sha256()
    for entry_id, term, weight in sorted((int(e), int(t), float(w)) for e, t, w in rows):
        digest.update(struct.pack("<qqd", entry_id, term, weight))
    return digest.hexdigest()


# ---------------------------------------------------------------------------- the sides

class _Side:
    """One open store, read or written at the row level."""

    backend: str
    shown: str
    placeholder = "?"

    def __init__(self, opened: Any, shown: str):
        self.opened = opened   # the Backend (forge/store/backend.py): owns the connection
        self.conn = opened.conn
        self.shown = shown

    def close(self) -> None:
        self.opened.close()

    def _rows(self, sql: str, args: tuple = ()) -> list[tuple]:
        return list(self.conn.execute(sql, args).fetchall())

    def _table_exists(self, name: str) -> bool:
        raise NotImplementedError

    # -- reading
    def entries(self) -> list[dict[str, Any]]:
        cols = ", ".join(ENTRY_COLUMNS)
        rows = [dict(zip(ENTRY_COLUMNS, r))
                for r in self._rows(f"select {cols} from memory_entries order by id")]
        for e in rows:   # SQLite keeps 0/1, PostgreSQL a boolean
            e["created_known"] = bool(e["created_known"])
        return rows

    def events(self) -> list[dict[str, Any]]:
        cols = ", ".join(EVENT_COLUMNS)
        return [dict(zip(EVENT_COLUMNS, r))
                for r in self._rows(f"select {cols} from memory_events order by id")]

    def meta(self) -> dict[str, Any]:
        rows = self._rows("select key, value from " + self.meta_table)
        return {k: _decoded(v) for k, v in rows}

    def count(self, table: str) -> int:
        if not self._table_exists(table):
            return 0
        return int(self._rows(f"select count(*) from {table}")[0][0])

    def counts(self) -> dict[str, int]:
        return {"entries": self.count("memory_entries"), "events": self.count("memory_events"),
                "vectors": self.count("memory_vectors"),
                "message_refs": self.count("memory_message_refs"),
                "latent_terms": self.count("memory_sparse"),
                "sentence_rows": self.count("memory_sentence")}

    def vector_dim(self) -> int | None:
        return self.opened.vector_dim()

    def vectors(self) -> Iterator[tuple[int, "np.ndarray"]]:
        for ids, matrix in self.opened.iter_vectors():
            yield from zip((int(i) for i in ids), matrix)

    def latent_terms(self) -> list[tuple[int, int, float]]:
        """(entry id, term, weight) of the latent-term index, by entry and term."""
        if not self._table_exists("memory_sparse"):
            return []
        return [(int(e), int(t), float(w)) for e, t, w in self._rows(
            "select entry_id, term, weight from memory_sparse order by entry_id, term")]

    def sentence_rows(self) -> list[tuple[int, bytes]]:
        """(entry id, row) of every stored sentence row, by id."""
        if not self._table_exists("memory_sentence"):
            return []
        return [(int(i), bytes(r)) for i, r in self._rows(
            "select entry_id, row from memory_sentence order by entry_id")]

    def insert_sentence_rows(self, rows: list[tuple[int, bytes]]) -> None:
        for entry_id, row in rows:
            self.opened.write_sentence(entry_id, row)

    def staged(self) -> bool:
        return self.opened.staged_count() is not None or "reindex" in self.meta()

    def transaction(self):
        return self.opened.transaction()

    def ensure_vectors(self, dim: int) -> None:
        self.opened.ensure_vectors(dim)

    def is_empty(self) -> bool:
        counts = self.counts()
        return counts["entries"] == 0 and counts["events"] == 0 and not (
            set(self.meta()) & set(META_KEYS))

    # -- writing (inside `transaction()`)
    def insert_entry(self, e: dict[str, Any]) -> None:
        cols = [c for c in ENTRY_COLUMNS if c not in LINK_COLUMNS]
        marks = ", ".join([self.placeholder] * len(cols))
        self.conn.execute(f"insert into memory_entries({', '.join(cols)}) values ({marks})",
                          tuple(_stored(e[c]) for c in cols))

    def link(self, entry_id: int, superseded_by: int, reason: str | None) -> None:
        p = self.placeholder
        self.conn.execute(f"update memory_entries set superseded_by = {p}, "
                          f"superseded_reason = {p} where id = {p}",
                          (superseded_by, reason or "fold", entry_id))

    def insert_event(self, ev: dict[str, Any]) -> None:
        marks = ", ".join([self.placeholder] * len(EVENT_COLUMNS))
        self.conn.execute(f"insert into memory_events({', '.join(EVENT_COLUMNS)}) values ({marks})",
                          tuple(_stored(ev[c]) for c in EVENT_COLUMNS))

    def write_meta(self, key: str, value: Any) -> None:
        self.opened.write_meta(key, value)

    meta_table = "meta"


def _stored(value: Any) -> Any:
    """refs / info as the JSON text both schemas keep (the value itself when it is no dict)."""
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False)
    return value


class _SqliteSide(_Side):
    backend = "sqlite"

    def _table_exists(self, name: str) -> bool:
        return self.conn.execute("select 1 from sqlite_master where name = ?",
                                 (name,)).fetchone() is not None

    def meta(self) -> dict[str, Any]:
        rows = self._rows("select key, value from meta where key != 'schema_version'")
        return {k: _decoded(v) for k, v in rows}

    def insert_vector(self, entry_id: int, vec: "np.ndarray", project: str | None) -> None:
        import numpy as np

        self.conn.execute("insert into memory_vectors(rowid, embedding, project) values (?, ?, ?)",
                          (entry_id, np.asarray(vec, dtype=np.float32).tobytes(), project or ""))

    def insert_latent_terms(self, rows: list[tuple[int, int, float]]) -> None:
        self.conn.executemany("insert into memory_sparse(entry_id, term, weight) values (?, ?, ?)",
                              rows)

    def insert_sentence_rows(self, rows: list[tuple[int, bytes]]) -> None:
        self.conn.executemany("insert into memory_sentence(entry_id, row) values (?, ?)", rows)

    def insert_message_refs(self, entry_id: int, refs: dict) -> None:
        for message_id in sorted({int(m) for m in refs.get("messages") or []}):
            self.conn.execute("insert or ignore into memory_message_refs(message_id, entry_id) "
                              "values (?, ?)", (message_id, entry_id))

    def id_floor(self) -> int:
        """The highest entry id ever given (a forgotten one included): AUTOINCREMENT's floor."""
        row = self.conn.execute("select seq from sqlite_sequence where name = 'memory_entries'"
                                ).fetchone() if self._table_exists("sqlite_sequence") else None
        return int(row[0]) if row else 0

    def finish(self, id_floor: int) -> None:
        """Ids are never reused: the next one follows the source's highest ever given."""
        self.conn.execute("insert or ignore into sqlite_sequence(name, seq) "
                          "values ('memory_entries', 0)")
        self.conn.execute("update sqlite_sequence set seq = max(seq, ?) "
                          "where name = 'memory_entries'", (id_floor,))


class _PostgresSide(_Side):
    backend = "postgres"
    placeholder = "%s"
    meta_table = "forge_meta"

    def _table_exists(self, name: str) -> bool:
        return self.conn.execute("select to_regclass(%s) is not null", (name,)).fetchone()[0]

    def meta(self) -> dict[str, Any]:
        rows = self._rows("select key, value from forge_meta where key != 'schema_version'")
        return {k: _decoded(v) for k, v in rows}

    def insert_entry(self, e: dict[str, Any]) -> None:
        from . import fold
        from .postgres import tsvector_literal

        tsv, length = tsvector_literal(fold.words(e["content"]))
        cols = [c for c in ENTRY_COLUMNS if c not in LINK_COLUMNS]
        self.conn.execute(
            f"insert into memory_entries({', '.join(cols)}, words, word_count) overriding system "
            f"value values ({', '.join(['%s'] * len(cols))}, %s::tsvector, %s)",
            (*(_stored(e[c]) for c in cols), tsv, length))

    def insert_event(self, ev: dict[str, Any]) -> None:
        self.conn.execute(f"insert into memory_events({', '.join(EVENT_COLUMNS)}) values "
                          f"({', '.join(['%s'] * len(EVENT_COLUMNS))})",
                          tuple(_stored(ev[c]) for c in EVENT_COLUMNS))

    def insert_vector(self, entry_id: int, vec: "np.ndarray", project: str | None) -> None:
        from .postgres import _vec_text

        self.conn.execute("insert into memory_vectors(id, project, embedding) values "
                          "(%s, %s, %s::vector)", (entry_id, project or "", _vec_text(vec)))

    def insert_latent_terms(self, rows: list[tuple[int, int, float]]) -> None:
        for start in range(0, len(rows), 50_000):   # one statement a chunk, not one a row
            chunk = rows[start:start + 50_000]
            self.conn.execute("insert into memory_sparse(entry_id, term, weight) select * from "
                              "unnest(%s::bigint[], %s::integer[], %s::float8[])",
                              ([r[0] for r in chunk], [r[1] for r in chunk], [r[2] for r in chunk]))

    def insert_sentence_rows(self, rows: list[tuple[int, bytes]]) -> None:
        for start in range(0, len(rows), 5_000):   # one statement a chunk, not one a row
            chunk = rows[start:start + 5_000]
            self.conn.execute("insert into memory_sentence(entry_id, row) select * from "
                              "unnest(%s::bigint[], %s::bytea[])",
                              ([r[0] for r in chunk], [r[1] for r in chunk]))

    def insert_message_refs(self, entry_id: int, refs: dict) -> None:
        message_ids = sorted({int(m) for m in refs.get("messages") or []})
        if message_ids:
            self.conn.execute(
                "insert into memory_message_refs(history, message_id, entry_id) "
                "select %s, m, %s from unnest(%s::bigint[]) m on conflict do nothing",
                (str(refs.get("history") or ""), entry_id, message_ids))

    def id_floor(self) -> int:
        """The highest entry id ever given (a forgotten one included): the identity's sequence."""
        row = self.conn.execute("select pg_sequence_last_value(pg_get_serial_sequence("
                                "'memory_entries', 'id')::regclass)").fetchone()
        return int(row[0]) if row and row[0] is not None else 0

    def finish(self, id_floor: int) -> None:
        """The entries' identity continues after the source's highest id ever given (ids were
        inserted explicitly, which does not move it)."""
        self.conn.execute("select setval(pg_get_serial_sequence('memory_entries', 'id'), "
                          "greatest((select coalesce(max(id), 0) from memory_entries), %s, 1))",
                          (id_floor,))


def open_side(settings: "Settings", target: Target, *, create: bool) -> _Side:
    """Open a store at `target` for the row-level copy: `create` makes (and migrates) it, else
    it must exist. No embedder is loaded and no identity is checked."""
    if target.backend == "postgres":
        from . import postgres

        opened = postgres.open_backend(settings, mode="write" if create else "read", url=target.url)
        if opened.missing:
            opened.close()
            raise StoreError(f"{target.shown}: no Forge store there yet (nothing to migrate)")
        return _PostgresSide(opened, target.shown)
    from . import sqlite

    path = target.path
    if not create and not Path(path).exists():
        raise StoreError(f"{path}: no store there yet (nothing to migrate)")
    opened = sqlite.open_backend(settings, mode="write" if create else "read", path=path)
    return _SqliteSide(opened, target.shown)


# ---------------------------------------------------------------------------- migrate

@dataclass
class Migrated:
    source: str          # shown without a password
    target: str
    entries: int
    events: int
    vectors: int
    message_refs: int
    latent_terms: int    # rows of the latent-term index
    sentence_rows: int   # the notes' sentence-model rows
    checksum: str        # equal on both sides: that is the verification
    vectors_digest: str
    latent_digest: str
    sentence_digest: str
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def store_summary(side: _Side) -> tuple[dict[str, int], str, str, str]:
    """(counts, checksum, vectors digest, latent-term digest) of one store as it stands (the
    sentence rows' digest: `sentence_digest(side.sentence_rows())`)."""
    meta = side.meta()
    return (side.counts(), checksum(side.entries(), side.events(), meta.get("identity")),
            vectors_digest(side.vectors()), latent_digest(side.latent_terms()))


def snapshot(settings: "Settings", backend: Any, dest: Path | str) -> Path:
    """A consistent copy of the whole store `backend` holds as a new SQLite file at `dest`
    (which must not exist): resplit's --backup, harness snapshots. SQLite: its backup API;
    PostgreSQL: `forge store migrate --to sqlite:///DEST`, verified. Returns `dest`.
    Here rather than a backend method: the PostgreSQL backend would import this module back."""
    dest = Path(dest)
    if backend.path is not None:
        from . import db

        return db.snapshot(backend.path, dest)
    if dest.exists():
        raise StoreError(f"{dest} exists; a snapshot never overwrites a file")
    migrate(dataclasses.replace(settings, database_url=backend.url), Target("sqlite", dest, None))
    return dest


def migrate(settings: "Settings", to: str | Target, *, progress=None) -> Migrated:
    """Copy the configured store (FORGE_DATABASE_URL, else RAG_DB_FILE) to `to`, an empty store
    (created when missing), then verify the copy by its counts and checksums.

    Raises TargetError for a URL it does not know, StoreError when the target is the source,
    holds anything, or the copy does not verify (the target keeps nothing then: one
    transaction). `progress(done, total)` is called as entries are copied.
    """
    target = parse_target(to) if isinstance(to, str) else to
    source = source_of(settings)
    if target == source or (target.path is not None and source.path is not None
                            and Path(target.path).resolve() == Path(source.path).resolve()):
        raise StoreError(f"{target.shown} is the configured store itself; name another target")
    started = time.monotonic()
    src = open_side(settings, source, create=False)
    try:
        if src.staged():
            raise StoreError(f"{src.shown} has a `forge reindex` under way; finish it "
                             "(run `forge reindex` again) before migrating")
        dst = open_side(settings, target, create=True)
        try:
            if not dst.is_empty():
                raise StoreError(f"{dst.shown} is not empty ({dst.counts()['entries']} entries); "
                                 "migrate into a new, empty store")
            _copy(src, dst, progress)
            counts, sum_src, vec_src, latent_src = store_summary(src)
            counts_dst, sum_dst, vec_dst, latent_dst = store_summary(dst)
            sentence_src = sentence_digest(src.sentence_rows())
            sentence_dst = sentence_digest(dst.sentence_rows())
            if (counts != counts_dst or sum_src != sum_dst or vec_src != vec_dst
                    or latent_src != latent_dst or sentence_src != sentence_dst):
                raise StoreError(f"the copy at {dst.shown} does not match its source "
                                 f"({counts} vs {counts_dst}); it holds a partial store now: "
                                 "drop it before trying again")
        finally:
            dst.close()
    finally:
        src.close()
    return Migrated(source.shown, target.shown, counts["entries"], counts["events"],
                    counts["vectors"], counts["message_refs"], counts["latent_terms"],
                    counts["sentence_rows"], sum_src, vec_src, latent_src, sentence_src,
                    round(time.monotonic() - started, 3))


def _copy(src: _Side, dst: _Side, progress) -> None:
    entries = src.entries()
    events = src.events()
    meta = src.meta()
    dim = src.vector_dim()
    vectors = dict(src.vectors()) if dim else {}
    total = len(entries)
    with dst.transaction():
        if dim:
            dst.ensure_vectors(dim)
        for n, e in enumerate(entries, 1):
            dst.insert_entry(e)
            refs = _decoded(e["refs"]) or {}
            dst.insert_message_refs(int(e["id"]), refs)
            vec = vectors.get(int(e["id"]))
            if vec is not None:
                dst.insert_vector(int(e["id"]), vec, e["project"])
            if progress and (n % 500 == 0 or n == total):
                progress(n, total)
        dst.insert_latent_terms(src.latent_terms())   # after their entries (PostgreSQL's key)
        dst.insert_sentence_rows(src.sentence_rows())
        for e in entries:  # links last: an aggregate has a higher id than what it speaks for
            if e["superseded_by"] is not None:
                dst.link(int(e["id"]), int(e["superseded_by"]), e.get("superseded_reason"))
        for ev in events:
            dst.insert_event(ev)
        for key in META_KEYS:
            if key in meta:
                dst.write_meta(key, meta[key])
        dst.finish(max([src.id_floor(), *(int(e["id"]) for e in entries)]))
