"""The contract every deliberate-store backend keeps (SQLite today, PostgreSQL next).

`forge/store/rag.py` holds the logic once (validation, dedup keys, embedding, the identity check,
forget / edit / fold / unfold / reindex as sequences of steps, the hybrid search); a backend
holds the SQL. A backend only stores, finds and counts: it never embeds, never validates user
input and never words a message for a human beyond an error naming what failed.

How a backend is opened: each backend module (`forge/store/sqlite.py`, `forge/store/postgres.py`)
has a module-level

    open_backend(settings: Settings, *, mode: str, path: Path | None = None) -> Backend

and `forge.store.open_backend` picks the module (`forge.store.backend_for(settings)`). `mode`:

- "write": create the store if needed and migrate it (migrations ordered and versioned:
  `schema_version()` == `SCHEMA_VERSION` after the open), make the word index ready, sweep
  whatever a crash or a foreign client left inconsistent. A store that cannot be written fails
  here with one line saying why (`StoreReadOnly`).
- "read": a vector or word search. Never creates a store: a missing one opens as an empty
  stand-in with `missing = True`. A store that cannot be written opens read-only (`readonly`).
- "rows": as "read", for listings that read no vector: must not import numpy or load a vector
  extension (`forge memory ls` stays light).
- "inspect": doctor's look: an existing store as it stands, nothing migrated, swept or created
  (`schema_version()` may be below `SCHEMA_VERSION`, even 0; then only the meta, count and
  capability methods are called). A missing store: `missing = True`, schema_version() 0.
- "readonly": calibrate's: an existing store, read-only, nothing migrated or created (the
  caller refuses a schema other than `SCHEMA_VERSION`); vectors and words readable. A missing
  store: `missing = True`.

Transactions: every method that writes must run inside `with backend.transaction():`, and
every call made inside it (reads included) sees and joins that one transaction. Write
transactions are serialised across processes (SQLite: BEGIN IMMEDIATE; PostgreSQL: suggested
`pg_advisory_xact_lock` on one store-wide key taken at BEGIN), so a read-then-write inside one
(the dedup re-check, the fold conflict re-check, reindex's "nothing left unstaged") is safe
against a second machine. Any exception rolls everything back; nothing is half-written.
Methods outside a transaction are single consistent reads.

Values crossing the seam are plain: ids are ints, vectors are numpy float32 arrays (unit
length, L2 distance between them) — except the query vector of `search_vector`, which may
also be an `array.array('f')` (the embedded model's query, embedded without numpy so that
`forge recall` on a store below RECALL_SCAN_MIN_ENTRIES imports none: a backend reads it
through the buffer protocol, e.g. `np.asarray(qvec, dtype=np.float32)` or its bytes, and
imports numpy only where it needs it), words are the already folded tokens of `query_words`,
`refs`/`info` are JSON-able dicts, times are `history.utc_now()` strings. No SQL, no FTS5 match
syntax, no vec0 blobs, no rowids other than the entry id cross it.

Optional (not in the Protocol; rag asks with getattr): `word_reader() -> Backend | None`, a
second handle on the same store on its own connection, which `recall.channels.search_channels` reads the
word channel from in another thread while this one scans the vectors. It must give exactly
what this handle would (the same data, no open transaction of this one's unseen), be safe to
use from one other thread at a time, and be closed by `close()`. None, or no such method: the
channels run in turn (the SQLite backend offers it from RECALL_SCAN_MIN_ENTRIES entries).
"""
from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping, Protocol, Sequence

from .common import BACKEND_MODES as OPEN_MODES  # noqa: F401  (the modes described above)

if TYPE_CHECKING:
    import numpy as np

    from ..embedders import QueryVector
    from .common import Entry, NewEntry


class Backend(Protocol):
    """One open deliberate store. Attributes are set by `open_backend`."""

    name: str           # "sqlite" | "postgres"
    location: str       # what messages name: the file path, or the URL WITHOUT its password
    path: Path | None   # the SQLite file; None for a server-backed store
    missing: bool       # no store there yet: an empty stand-in answers reads (mode read/rows)
    readonly: bool      # opened read-only (a read-only folder): every write raises
    fts: bool           # the word channel is available (SQLite: FTS5 present and index built)
    SCHEMA_VERSION: int  # the number of migrations this code knows

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Release the connection. Idempotent."""

    def transaction(self, *, erase: bool = False) -> AbstractContextManager[None]:
        """One write transaction (see the module docstring): serialised with every other
        writer of this store, committed on exit, rolled back on any exception.

        `erase=True`: the transaction deletes entries and the deletion must be real (a
        forget is a forget): SQLite zeroes freed pages (`secure_delete`), drops the entry's
        tokens from the word index at once (FTS5 `secure-delete`), and after the commit
        rewrites the file (VACUUM) and empties the WAL; PostgreSQL deletes the rows (dead
        tuples stay until VACUUM: `vacuum`, docs/postgres.md)."""

    def vacuum(self) -> list[str]:
        """Outside any transaction, rewrite what holds the entries so no byte of what erasing
        transactions deleted stays in its files; returns what was rewritten. PostgreSQL: VACUUM
        FULL of the tables that hold an entry's text, words, vector and terms. SQLite: the
        file rewrite every erasing transaction already runs (this finishes one that another
        process held past the busy timeout)."""

    def schema_version(self) -> int:
        """The store's migration count (0: no schema yet)."""

    def word_index(self) -> tuple[bool | None, bool]:
        """(the engine can hold a word index, the index is built): doctor's facts. A backend
        whose full-text search is always there answers (True, True)."""

    def reindex_lock(self) -> AbstractContextManager[None]:
        """Held for a whole `forge reindex`: on a store shared by several machines a second
        reindex fails at once with one line (PostgreSQL: a session advisory lock) instead of
        racing the first. SQLite: a no-op (its swap re-checks under the write lock)."""

    # ------------------------------------------------------------------ meta

    def read_meta(self, key: str) -> Any | None:
        """The JSON value stored under `key` in the metadata table, None when absent. Keys in
        use: "identity" (the embedding identity with its probe vector, base64), "identity_check"
        (the embedder's answer at the last probe and when), "reindex" (the target identity of a
        reindex under way). Works in every mode, "inspect" included."""

    def write_meta(self, key: str, value: Any) -> None:
        """Insert or replace `key` (inside a transaction)."""

    def delete_meta(self, key: str) -> None:
        """Remove `key` if present (inside a transaction)."""

    def try_write_meta(self, key: str, value: Any) -> bool:
        """Best effort, its own short transaction that never waits long for another writer
        (the identity-check cache): False, nothing written, when the store is busy."""

    # ------------------------------------------------------------------ reading entries

    def entries_by_id(self, ids: Iterable[int]) -> dict[int, "Entry"]:
        """The entries among `ids` that exist (any number of ids), keyed by id."""

    def list_entries(self, *, kind: str | None = None, project: str | None = None) -> list["Entry"]:
        """Every entry (filtered by exact kind and/or project when given), by id."""

    def list_page(self, *, kind: str | None = None, project: str | None = None,
                  contains: str | None = None, after_id: int = 0, limit: int = 100,
                  since: str | None = None, until: str | None = None
                  ) -> tuple[list["Entry"], int]:
        """One page of list_entries: the first `limit` entries with an id above `after_id`, by
        id, whose content holds `contains` (case-insensitive substring, `%` and `_` literal),
        created in [since, until) when given (stored times, compared bytewise); and how many
        entries match the filters in all (every page)."""

    def hot_entries(self, *, project: str | None = None) -> list["Entry"]:
        """The hot tier: every entry whose kind is not `archive` and that is not superseded,
        (filtered by project when given), ordered by (created, id)."""

    def projects(self) -> list[str]:
        """The distinct non-null project names, sorted."""

    def count_entries(self) -> int:
        """Every entry, archive and superseded included."""

    def counts_by_kind(self, *, project: str | None = None, since: str | None = None,
                       until: str | None = None) -> dict[str, int]:
        """kind -> count, ordered by kind (filtered by project, and created in [since, until),
        when given)."""

    def count_unknown_time(self, *, project: str | None = None, kind: str | None = None) -> int:
        """Active entries (no `superseded_by`) whose time is unknown (`created_known` false),
        of `project` and `kind` when given: what --since/--until leave out."""

    def count_superseded(self) -> int:
        """Entries whose `superseded_by` is set."""

    def sources_of(self, entry_id: int) -> list[int]:
        """The ids whose `superseded_by` is `entry_id` (what an aggregate speaks for), by id."""

    def id_for_dedup_key(self, key: str | None) -> int | None:
        """The entry holding dedup key `key`, None for None or no such entry. Dedup keys
        are unique in the store (a unique constraint): two machines writing the same key at
        once store it once."""

    def archive_for_messages(self, message_ids: Sequence[int], *,
                             history: str | None = None) -> dict[int, int]:
        """History message id -> the smallest id of an `archive` entry holding it (any number
        of ids; compaction's crash recovery). `history` (a history file's `history_id`): only
        that history's entries, and those written before histories had ids (their refs name
        none); message ids of two machines' histories are two different messages."""

    def adjacent_ids(self, entry_id: int, *, kind: str, project: str | None) -> list[int]:
        """The ids of the nearest entries of `kind` in the same project (None matches None)
        just before and just after `entry_id`, in that order, each when it exists."""

    def iter_texts(self) -> Iterator[tuple[int, str]]:
        """(id, content) of every entry, by id, streamed (aggregate's document frequency)."""

    def events_for(self, entry_id: int) -> list[dict[str, Any]]:
        """The event log rows whose entry_id or link is `entry_id`, oldest first, as
        {at, event, entry_id, kind, link, info} (info decoded, None when absent)."""

    # ------------------------------------------------------------------ writing entries
    # (each inside `transaction()`)

    def ensure_vectors(self, dim: int) -> None:
        """Create the vector storage for `dim` dimensions at the first vector write; raise
        StoreError naming `location` when it exists with another dimension (nothing written)."""

    def insert_entry(self, item: "NewEntry", dedup_key: str | None, vector: "np.ndarray",
                     now: str) -> int:
        """Insert one validated entry: its row (created = `item.created` or now, updated = now,
        refs as JSON), its
        vector (kept with the entry's project so the KNN filters inside), its words in the word
        index, and one message ref per `refs["messages"]` id. Returns the new id (ids grow and
        are never reused). No event: the caller logs it."""

    def update_entry(self, entry_id: int, *, kind: str, content: str, dedup_key: str | None,
                     updated: str) -> None:
        """Change an entry's kind, content and dedup key in place; the word index follows the
        new content (the old words are gone at once)."""

    def update_refs(self, entry_id: int, refs: dict) -> None:
        """Change an entry's refs in place (their secrets redacted: `memory scan --redact`)."""

    def replace_vector(self, entry_id: int, vector: "np.ndarray", project: str | None) -> None:
        """The entry's new vector; a vector staged for it by a reindex under way is dropped
        (the reindex embeds it again)."""

    def write_sentence(self, entry_id: int, row: bytes | None) -> None:
        """(inside a transaction) Put an entry's sentence-model row (512 float32 as bytes, kept
        byte for byte; None removes it). The row goes with the entry when it is deleted
        (`delete_entry`, and a foreign client's DELETE)."""
        ...

    def sentence_rows(self, ids: Iterable[int]) -> dict[int, bytes]:
        """entry id -> its stored sentence row, for those of `ids` that have one (a store
        without the table: {})."""
        ...

    def notes_without_sentence(self, limit: int, after: int = 0) -> list[tuple[int, str]]:
        """(id, content) of at most `limit` deliberate notes (not archives) after id `after`
        that have no sentence row, by id."""
        ...

    def count_notes_without_sentence(self) -> int:
        """How many deliberate notes have no sentence row."""
        ...

    def clear_sentence(self) -> None:
        """(inside a transaction) Drop every sentence row (a reindex under another model)."""
        ...

    sparse_index: bool   # the backend keeps the latent-term index

    def write_sparse(self, entry_id: int, terms: Sequence[tuple[int, float]]) -> None:
        """(inside a transaction) Replace an entry's latent terms ((term, weight) pairs,
        weights kept as doubles, so both backends score the same). The terms go with the entry
        when it is deleted (`delete_entry`, and a foreign client's DELETE). A no-op where the
        backend has no index."""
        ...

    def clear_sparse(self) -> None:
        """(inside a transaction) Drop every entry's latent terms (a reindex with the channel
        off)."""
        ...

    def sparse_frequency(self, terms: Sequence[int]) -> dict[int, int]:
        """term -> how many entries hold it among their indexed terms (archive and superseded
        included); terms in no entry are absent. {} without an index."""
        ...

    def search_sparse(self, terms: Sequence[tuple[int, float]], *, k: int,
                      project: str | None = None, kind: str | None = None,
                      since: str | None = None, until: str | None = None,
                      unknown_time: bool = False) -> list[tuple[int, float]]:
        """(entry id, dot product over `terms`) of the `k` best entries (filtered by exact
        project and/or kind, and by a time window, when given: inside the query, as every
        channel's), best first, ties by id; rows scoring 0 left out.
        [] without an index, for k <= 0 or no terms."""
        ...

    def set_superseded(self, entry_id: int, by: int | None, updated: str,
                       reason: str | None = None) -> None:
        """Set (or clear, `by=None`) an entry's `superseded_by`, its `superseded_reason`
        ("fold" when not given, "replace"; cleared with the link) and its `updated` time.
        An entry read with no link has no reason, whatever the column kept."""

    def delete_entry(self, entry_id: int) -> None:
        """A real forget of one entry: its row, its vector, its words in the word index, its
        message refs and any vector a reindex staged for it, all gone in the caller's
        transaction (with `transaction(erase=True)`, gone from the files too). Entries it
        superseded are released by the caller first; no event (the caller logs it)."""

    def log_event(self, event: str, entry_id: int | None, kind: str | None = None,
                  link: int | None = None, info: dict | None = None) -> None:
        """Append to the event log (at = now): ids, kinds, links, and `info` without content."""

    # ------------------------------------------------------------------ vectors

    def has_vectors(self) -> bool:
        """The vector storage exists (a store that never held a vector needs no embedding)."""

    def vector_dim(self) -> int | None:
        """The dimension the vector storage was created with; None when there is none. Must
        not need numpy or a vector extension (mode "inspect")."""

    def count_vectors(self) -> int:
        """Stored vectors (0 without a vector storage)."""

    def search_vector(self, qvec: "QueryVector", *, k: int, project: str | None = None,
                      kind: str | None = None, since: str | None = None,
                      until: str | None = None, unknown_time: bool = False
                      ) -> list[tuple[int, float]]:
        """(entry id, L2 distance) of the k nearest vectors to `qvec` (a numpy float32 array
        or an `array.array('f')`), nearest first. The project filter and the time window
        (entries created in [since, until), stored times compared bytewise) run INSIDE the
        KNN: k rows come back whenever k such entries have vectors (never a global top-k
        filtered afterwards); an entry whose time is unknown is in the window as `unknown_time`
        says (common.entry_filters: False, left out; True, bounded by `until` only). With `kind`, an exact scan of that kind's entries (and project). [] without a vector storage or for k <= 0. Rows may name an
        entry deleted by a foreign client (an orphan): callers skip ids with no entry."""

    def vectors_of(self, ids: Iterable[int]) -> dict[int, "np.ndarray"]:
        """The stored vector of each id that has one (float32)."""

    def iter_vectors(self, *, project: str | None = None, chunk: int = 4096
                     ) -> Iterator[tuple["np.ndarray", "np.ndarray"]]:
        """Every stored vector (of `project`'s entries when given) as (ids int64 array,
        float32 matrix) chunks of at most `chunk` rows: calibrate's one pass over the store."""

    # ------------------------------------------------------------------ words (admission)

    def query_words(self, text: str) -> list[str]:
        """`text` cut and folded exactly as the word index cuts and folds documents (SQLite's
        `unicode61 remove_diacritics 2`: case and accents folded), distinct, in order."""

    def document_frequency(self, words: Sequence[str]) -> dict[str, int]:
        """word -> the number of entries (archive and superseded included) holding it; words
        in no entry are absent. The caller admits words with `is_informative`."""

    def holders(self, groups: Mapping[str, Sequence[str]], ids: Sequence[int]
                ) -> dict[str, set[int]]:
        """For each key of `groups`, the entries among `ids` whose text holds any of its words
        (folded index words: a question's word and its inflected forms): rank's
        coverage of a question's words by the word channel's candidates."""

    def words_with_prefix(self, prefix: str, *, limit: int) -> list[str]:
        """Up to `limit` words of the store's word index (as `query_words` folds them) that
        start with `prefix`, in order: the inflected forms query_words looks a stem up in."""

    def search_words(self, words: Sequence[str], *, k: int, project: str | None = None,
                     kind: str | None = None, since: str | None = None,
                     until: str | None = None, unknown_time: bool = False
                     ) -> list[tuple[int, float]]:
        """(entry id, score) of the best k entries holding ANY of `words` (already admitted
        tokens, never user syntax; filtered by project, kind and time window inside the query
        when given), best first; the score is "lower is better" (SQLite's
        bm25(); another backend documents its ranking and negates it to match). [] without a
        word index, for k <= 0 or no words."""

    # ------------------------------------------------------------------ reindex staging
    # `forge reindex` embeds every entry again into a staging area, one transaction per batch,
    # so an interrupted run resumes; one last transaction swaps the staged vectors in.

    def staged_count(self) -> int | None:
        """Vectors staged by a reindex; None when there is no staging area."""

    def reset_staging(self) -> None:
        """(inside a transaction) An empty staging area, dropping any previous one."""

    def unstaged(self, limit: int) -> list[tuple[int, str]]:
        """(id, content) of up to `limit` entries with no staged vector yet, by id."""

    def stage_vectors(self, rows: Sequence[tuple[int, "np.ndarray"]]) -> None:
        """(inside a transaction) Stage (insert or replace) these entries' new vectors."""

    def swap_in_staged(self, dim: int) -> int:
        """(inside a transaction) Replace the whole vector storage by the staged vectors of
        entries that still exist (created for `dim`, each with its entry's project), drop the
        staging area and any leftover orphan bookkeeping. Returns the vectors swapped in."""
