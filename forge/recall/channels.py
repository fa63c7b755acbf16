"""The channels of one recall, over the store's primitives (forge/store/rag.py): the query
prepared (its vector, the cutoff in force, the fingerprint), the vector channel, the word
channel's admitted words (query_words) and its query, both channels side by side
(search_channels), and their union on entry id with a budget per channel (search_hybrid:
recall --vector-k/--lexical-k, calibrate, GET /search). rank fuses the same channels into one
ranking.
A recall's query goes down from here to the store and never climbs back."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Sequence

from ..core.log import log
from ..store import rag
from ..store.common import beyond_cutoff
from ..store.identity import query_fingerprint, resolve_cutoff

if TYPE_CHECKING:
    import numpy as np

    from ..core.when import Window
    from ..embedders import QueryVector
    from ..store.backend import Backend
    from ..store.rag import Store
    from .query_words import Reading
    from ..store.search_results import SearchResult


def prepare_query(store: "Store", query: str, query_vector: "np.ndarray | None" = None
                  ) -> tuple["np.ndarray | None", float | None, str]:
    """What every recall starts with: the query's vector (embedded unless given, and not at
    all when the store has no vector yet), the cutoff in force and the fingerprint. A stale or
    untagged cutoff is warned about once per store."""
    qvec = query_vector
    if qvec is None and rag.has_vectors(store):
        qvec = store.checked_embedder().embed_query(query)
    return (qvec, *query_cutoff(store))


def query_cutoff(store: "Store") -> tuple[float | None, str]:
    """The cutoff in force and the fingerprint (prepare_query's last two)."""
    fingerprint = query_fingerprint(store.settings, store.identity)
    cutoff, warning = resolve_cutoff(store.settings, fingerprint)
    if warning and not store._cutoff_warned:
        log.warning(warning)
        store._cutoff_warned = True
    return cutoff, fingerprint


def query_vector_later(store: "Store", query: str, query_vector: "QueryVector | None" = None
                       ) -> "Callable[[], QueryVector | None]":
    """prepare_query's vector, embedded in a second thread from now: what to call for it (the
    embedder's error is raised there). The identity check reads the store, so it runs here,
    first; the model load and pass touch no connection, so `forge recall` reads the word
    channel meanwhile (a fresh process: ~15 ms of model load beside ~10-15 ms of SQL)."""
    if query_vector is not None or not rag.has_vectors(store):
        return lambda: query_vector
    from ..core.background import Job

    embedder = store.checked_embedder()
    return Job(lambda: embedder.embed_query(query), "forge-query-vector").result


def span(window: "Window | None") -> dict[str, Any]:
    """A time window as the backend's filter arguments ({} without one)."""
    return {} if window is None else {**window.bounds(), "unknown_time": window.unknown_time}


def search_vector(store: "Store", qvec: "np.ndarray | None", *, k: int,
                  project: str | None = None, kind: str | None = None,
                  window: "Window | None" = None) -> list[tuple[int, float]]:
    """(entry id, distance) of the k nearest, the project filter and the time window inside
    the KNN. With `kind`, an exact scan of that kind's vectors."""
    if k <= 0 or qvec is None:
        return []
    return store.backend.search_vector(qvec, k=k, project=project, kind=kind, **span(window))


def admitted_words(store: "Store", text: str) -> list[str]:
    """The query's words the word channel searches in this store (`is_informative` admits them)."""
    return _admitted_words(store.backend, store.settings.recall_lexical_max_df, text)


def _admitted_words(backend: "Backend", max_df: float, text: str) -> list[str]:
    """The word channel's admission (query_words.py): no function word, rare in the store,
    with the store's inflected forms of each word."""
    return _words_read(backend, max_df, text).admitted


def _words_read(backend: "Backend", max_df: float, text: str) -> "Reading":
    """The word channel's reading of `text` (query_words.read): its admitted words, and the
    forms and frequencies rank's word coverage reads again."""
    from . import query_words

    return query_words.read(backend, max_df, text)


def search_lexical(store: "Store", words: Sequence[str], *, k: int,
                   project: str | None = None, kind: str | None = None,
                   window: "Window | None" = None) -> list[tuple[int, float]]:
    """(entry id, score) of the best k entries holding any admitted word, best first (lower
    is better: SQLite's bm25)."""
    return _search_lexical(store.backend, words, k=k, project=project, kind=kind, window=window)


def _search_lexical(backend: "Backend", words: Sequence[str], *, k: int,
                    project: str | None, kind: str | None,
                    window: "Window | None" = None) -> list[tuple[int, float]]:
    if k <= 0 or not words or not backend.fts:
        return []
    return backend.search_words(words, k=k, project=project, kind=kind, **span(window))


def search_channels(store: "Store", query: str,
                    qvec: "QueryVector | None | Callable[[], QueryVector | None]", *,
                    vector_k: int, lexical_k: int, project: str | None = None,
                    kind: str | None = None,
                    on_words: "Callable[[list[tuple[int, float]], Reading], None] | None" = None,
                    window: "Window | None" = None
                    ) -> tuple[list[tuple[int, float]], list[str], list[tuple[int, float]]]:
    """Both channels of one recall: (vector hits, admitted words, word hits), exactly as
    `search_vector`, `admitted_words` and `search_lexical` give them; `window` (a time window)
    inside each channel's query. `qvec` may be what to
    call for the vector (`query_vector_later`): it is called once the word channel has run.
    `on_words`: called with the word hits and the word channel's reading of the query
    (query_words.Reading) as soon as they are in, in this thread (rank's word coverage, which
    then runs while the query's model pass does, before the vector wait).

    On a large store the word channel (document frequencies, then the FTS5 query) costs as
    much as the vector scan; a backend that offers `word_reader()` (SQLite from
    RECALL_SCAN_MIN_ENTRIES entries: a second connection to the same file) runs it in a
    second thread while this one scans the vectors — SQLite and numpy both let go of the GIL,
    so the recall takes about the time of the slower channel. The same statements read the
    same file: the same rows in the same order with the same scores. An error in the word
    thread is raised here, as it would have been in turn; the thread is always waited for.
    """
    vector_now = qvec if callable(qvec) else lambda: qvec
    make_reader = getattr(store.backend, "word_reader", None)  # optional (forge/store/backend.py)
    reader = make_reader() if make_reader is not None and lexical_k > 0 else None
    max_df = store.settings.recall_lexical_max_df
    if reader is None:
        read = _words_read(store.backend, max_df, query)
        lexical = search_lexical(store, read.admitted, k=lexical_k, project=project, kind=kind,
                                 window=window)
        if on_words is not None:
            on_words(lexical, read)
        return (search_vector(store, vector_now(), k=vector_k, project=project, kind=kind,
                              window=window), read.admitted, lexical)
    from ..core.background import Job

    def word_channel() -> "tuple[Reading, list[tuple[int, float]]]":
        read = _words_read(reader, max_df, query)
        return read, _search_lexical(reader, read.admitted, k=lexical_k, project=project,
                                     kind=kind, window=window)

    job = Job(word_channel, "forge-word-channel")
    try:
        vector = search_vector(store, vector_now(), k=vector_k, project=project, kind=kind,
                               window=window)
    finally:
        job.wait()
    read, lexical = job.result()
    if on_words is not None:
        on_words(lexical, read)
    return vector, read.admitted, lexical


# `forge recall`'s query is a question, not a document: past this it is refused (the embedded
# model reads about 512 tokens, some 2,900 characters of prose, and would silently cut it).
MAX_QUERY_CHARS = 2000


def search_hybrid(store: "Store", query: str, *, project: str | None = None, vector_k: int = 5,
                  lexical_k: int = 5, query_vector: "np.ndarray | None" = None,
                  kind: str | None = None, replaced: bool = False,
                  window: "Window | None" = None, words_query: str | None = None,
                  as_of: str | None = None) -> "SearchResult":
    """The union of the channels on entry id, each within its own budget — vector rows by
    distance, then word-only rows by bm25; the distance cutoff applies to vector-only rows.
    Raises ServerError when the embedder is down.

    `query_vector`: an already embedded query (calibration, benchmarks) — no embedding call.
    `kind`: that kind's entries only. `replaced`: keep entries a newer one replaced.
    `window`: a time window inside each channel's query; `words_query`: what the word channel
    reads instead of `query` (the question without its time expression); `as_of`: an entry
    replaced by one created after it is a row again.
    """
    from ..store.search_results import SearchResult, SearchRow

    qvec, cutoff, fingerprint = prepare_query(store, query, query_vector)
    vector, words, lexical = search_channels(store, words_query or query, qvec,
                                             vector_k=vector_k, lexical_k=lexical_k,
                                             project=project, kind=kind, window=window)
    entries = rag.entries_by_id(store, [i for i, _ in vector] + [i for i, _ in lexical])
    if as_of is not None and not replaced:
        from .timeline import as_they_stood

        entries = as_they_stood(store, entries, as_of)
    if not replaced:
        entries = {i: e for i, e in entries.items() if not rag.is_replaced(e)}
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
