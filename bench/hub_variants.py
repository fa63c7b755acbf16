"""Hubs: an entry near every question, first for many it does not answer. Treatments measured
as bench/recall_sets.py variants (`shipped + hubs: …`), each a context manager that changes
one thing in-process while a variant runs (nothing here is Forge's shipped behaviour).

bench/hub_time.py runs bench/time_questions.py's set under one of them.

A hub is an entry whose similarity to every question is high (short entries near many short
questions). Each treatment reads an entry's *hubness* r_e, how near it stands to a set of
references, and rescales the channel's score by it:

- references: `refs`, the 120 generic questions of bench/hub_references.json (French and
  English, written once before any variant was measured), embedded as queries (as a question
  is) and passed through the latent head (as a question is); or `store`, the store's other
  entries (as passages);
- r_e: the mean similarity of the entry to its `k` nearest references (cosine for the vector
  channel, the latent dot product for the latent channel);
- the rescaled score:
  * `csls` (cross-domain similarity local scaling): 2 s(q, e) - r_e (the question's own
    r_q is the same for every candidate and leaves the order alone);
  * `nicdm` (local scaling on distances): d(q, e) / sqrt(mu_e), mu_e the mean distance of
    the entry to its k nearest references;
  * `isoftmax` (inverted softmax): beta s(q, e) - log sum over the references of
    exp(beta s(r, e)): the entry's share of its own attention, not the question's;
  * `mp` (mutual proximity, its Gaussian form): 1 - P(D_e > d) P(D_q > d), D_e the entry's
    distances to every reference and D_q the question's, each read as a normal law: how
    unusually near the two stand for both of them;
- the pool: the channel's usual 30 candidates rescored, or `deeper` (60 fetched, rescored,
  the best 30 kept) so an entry a hub pushed just out of the pool can come back.

Only the channel's scores change (the vector channel's distances as the fusion reads them,
the latent channel's dot products); the word channel and the fusion are the shipped ones.
"""
from __future__ import annotations

import contextlib
import json
import math
from pathlib import Path
from typing import Iterator

from latent_variants import _patched

REFERENCES = Path(__file__).resolve().parent / "hub_references.json"

_ref_vectors = None            # (R, dim) unit rows: the reference questions embedded as queries
_ref_terms: list[dict[int, float]] | None = None   # their latent terms
_hubness: dict[tuple, dict[int, float]] = {}       # (store file, channel, refs, k, how) -> r_e


def references() -> list[str]:
    return json.loads(REFERENCES.read_text(encoding="utf-8"))["questions"]


def _store_key(store) -> str:
    return str(getattr(store.backend, "path", id(store.backend)))


def reference_vectors(embedder=None):
    """The reference questions embedded as queries, (R, dim) unit rows: embedded by `embedder`
    the first time, then kept for the process."""
    import numpy as np

    global _ref_vectors
    if _ref_vectors is None:
        _ref_vectors = np.asarray([np.asarray(embedder.embed_query(q), dtype=np.float32)
                                   for q in references()])
    return _ref_vectors


def _refs(store):
    """reference_vectors, embedded by the store's embedder only the first time."""
    return _ref_vectors if _ref_vectors is not None else reference_vectors(store.checked_embedder())


def _reference_terms(store) -> list[dict[int, float]]:
    global _ref_terms
    if _ref_terms is None:
        _ref_terms = [dict(store.embedder.sparse_query(q)) for q in references()]
    return _ref_terms


def _all_vectors(store):
    import numpy as np

    ids, rows = [], []
    for chunk_ids, matrix in store.backend.iter_vectors():
        ids.extend(int(i) for i in chunk_ids)
        rows.append(matrix)
    return ids, (np.vstack(rows) if rows else np.zeros((0, 384), dtype=np.float32))


def vector_hubness(store, refs: str, k: int, how: str, beta: float = 20.0) -> dict[int, float]:
    """entry id -> r_e for the vector channel: the mean cosine of the entry to its k nearest
    references (how="csls"), their mean distance (how="nicdm"), or log sum exp(beta cos)
    over every reference (how="isoftmax"); computed once for every entry of the store."""
    key = (_store_key(store), "vector", refs, k, how, beta)
    if key not in _hubness:
        ids, matrix = _all_vectors(store)
        _hubness[key] = _vector_hubness(store, ids, matrix, refs, k, how, beta)
    return _hubness[key]


def pool_hubness(store, ids: list[int], k: int, how: str, beta: float = 20.0
                 ) -> dict[int, float]:
    """r_e against the reference questions for the pool's entries only, their vectors read
    from the store: what a recall would pay (no per-store cache)."""
    import numpy as np

    found = store.backend.vectors_of(ids)
    kept = [i for i in ids if i in found]
    if not kept:
        return {}
    matrix = np.vstack([found[i] for i in kept])
    return _vector_hubness(store, kept, matrix, "refs", k, how, beta)


def _vector_hubness(store, ids, matrix, refs: str, k: int, how: str, beta: float
                    ) -> dict[int, float]:
    """entry id -> r_e of the rows of `matrix` (the vectors of `ids`)."""
    import numpy as np

    if refs == "refs":
        sims = matrix @ _refs(store).T
    else:
        sims = matrix @ matrix.T
        np.fill_diagonal(sims, -np.inf)
    if how == "mp":   # the mean and spread of the entry's distances to every reference
        d = np.sqrt(np.maximum(0.0, 2.0 - 2.0 * sims))
        return {i: (float(m), float(s)) for i, m, s in zip(ids, d.mean(axis=1), d.std(axis=1))}
    if how == "isoftmax":
        m = sims.max(axis=1, keepdims=True)
        values = m[:, 0] * beta + np.log(np.exp(beta * (sims - m)).sum(axis=1))
    else:
        top = -np.sort(-sims, axis=1)[:, :max(1, min(k, sims.shape[1] - (refs == "store")))]
        values = (np.sqrt(np.maximum(0.0, 2.0 - 2.0 * top)).mean(axis=1) if how == "nicdm"
                  else top.mean(axis=1))
    return {i: float(v) for i, v in zip(ids, values)}


def _beyond(d: float, mean: float, spread: float) -> float:
    """P(X > d) for X normal with this mean and spread (mutual proximity's Gaussian form)."""
    return 0.5 * math.erfc((d - mean) / (max(spread, 1e-6) * math.sqrt(2.0)))


def _query_spread(store, qvec) -> tuple[float, float]:
    """The mean and spread of the question's distances to every reference question."""
    import numpy as np

    d = np.sqrt(np.maximum(0.0, 2.0 - 2.0 * (_refs(store)
                                              @ np.asarray(qvec, dtype=np.float32))))
    return float(d.mean()), float(d.std())


def _entry_terms(store) -> dict[int, dict[int, float]]:
    out: dict[int, dict[int, float]] = {}
    for entry_id, term, weight in store.backend.conn.execute(
            "select entry_id, term, weight from memory_sparse"):
        out.setdefault(entry_id, {})[term] = weight
    return out


def latent_hubness(store, refs: str, k: int) -> dict[int, float]:
    """entry id -> r_e for the latent channel: the mean of the entry's k largest dot products
    with the references' latent terms (the questions', or the store's other entries')."""
    key = (_store_key(store), "latent", refs, k)
    if key not in _hubness:
        terms = _entry_terms(store)
        others = _reference_terms(store) if refs == "refs" else list(terms.values())
        values = {}
        for entry_id, own in terms.items():
            dots = sorted((sum(w * other.get(t, 0.0) for t, w in own.items())
                           for other in others if other is not own), reverse=True)[:k]
            values[entry_id] = sum(dots) / max(1, len(dots))
        _hubness[key] = values
    return _hubness[key]


def vector(refs: str = "refs", k: int = 10, how: str = "csls", deeper: bool = False,
           beta: float = 20.0, weight: float = 1.0):
    """The vector channel's pool rescored by each candidate's hubness; the distances the
    fusion reads become 2 - score (lower is better, as a distance). `weight`: csls's
    2 cos - weight x r_e (1: CSLS itself)."""
    from forge.recall import channels

    shipped = channels.search_vector
    K = k   # the references' k (the function below takes the pool's k)

    def search_vector(store, qvec, *, k: int, **filters):
        hits = shipped(store, qvec, k=2 * k if deeper else k, **filters)
        if not hits:
            return hits
        hub = (pool_hubness(store, [i for i, _ in hits], K, how, beta) if refs == "refs"
               else vector_hubness(store, refs, K, how, beta))
        if how == "mp":
            query = _query_spread(store, qvec)
        scored = []
        for entry_id, d in hits:
            cos = 1.0 - d * d / 2.0
            r = hub.get(entry_id, (0.0, 1.0) if how == "mp" else 0.0)
            if how == "nicdm":
                value = d / math.sqrt(max(r, 1e-6))
            elif how == "mp":
                value = 1.0 - _beyond(d, *r) * _beyond(d, *query)
            elif how == "isoftmax":
                value = 2.0 - (beta * cos - r) / beta
            else:
                value = 2.0 - (2.0 * cos - weight * r)
            scored.append((entry_id, value))
        scored.sort(key=lambda p: (p[1], p[0]))
        return scored[:k]

    return _patched(channels, "search_vector", search_vector)


def latent(refs: str = "refs", k: int = 10, deeper: bool = False, weight: float = 1.0):
    """The latent channel's pool rescored: 2 s - weight x r_e (CSLS on the dot product)."""
    from forge.recall import sparse

    shipped = sparse._search_on
    K = k   # the references' k (the function below takes the pool's k)

    def search_on(store, backend, query, k, project, kind, terms, window=None):
        hits = shipped(store, backend, query, 2 * k if deeper else k, project, kind, terms,
                       window)
        if not hits:
            return hits
        hub = latent_hubness(store, refs, K)
        scored = sorted(((i, 2.0 * s - weight * hub.get(i, 0.0)) for i, s in hits),
                        key=lambda p: (-p[1], p[0]))
        # a share is min-max over the pool: a negative value is fine; keep the best k
        return scored[:k]

    return _patched(sparse, "_search_on", search_on)


@contextlib.contextmanager
def both(vector_args: dict, latent_args: dict) -> Iterator[None]:
    with vector(**vector_args), latent(**latent_args):
        yield


def variants() -> dict:
    """name -> what to call for the context manager: the variants bench/recall_sets.py scores
    (as `shipped + hubs: NAME`)."""
    import functools

    def v(**kw):
        return functools.partial(vector, **kw)

    def lat(**kw):
        return functools.partial(latent, **kw)

    return {
        "vector CSLS, questions k=10": v(k=10),
        "vector CSLS, questions k=3": v(k=3),
        "vector CSLS, questions k=30": v(k=30),
        "vector CSLS, questions k=10, pool of 60": v(k=10, deeper=True),
        "vector CSLS, questions k=3, pool of 60": v(k=3, deeper=True),
        "vector CSLS, questions k=5, pool of 60": v(k=5, deeper=True),
        "vector CSLS, questions k=10, r_e x 0.5, pool of 60": v(k=10, deeper=True, weight=0.5),
        "vector CSLS, entries k=10": v(refs="store", k=10),
        "vector CSLS, entries k=10, pool of 60": v(refs="store", k=10, deeper=True),
        "vector CSLS, entries k=3": v(refs="store", k=3),
        "vector local scaling (NICDM), questions k=10": v(k=10, how="nicdm"),
        "vector inverted softmax, questions beta=20": v(how="isoftmax", beta=20.0),
        "vector mutual proximity, questions": v(how="mp"),
        "vector mutual proximity, questions, pool of 60": v(how="mp", deeper=True),
        "latent CSLS, questions k=10": lat(k=10),
        "latent CSLS, questions k=3": lat(k=3),
        "latent CSLS, questions k=10, pool of 60": lat(k=10, deeper=True),
        "vector + latent CSLS, questions k=10": functools.partial(
            both, {"k": 10}, {"k": 10}),
        "vector + latent CSLS, questions k=10, vector pool of 60": functools.partial(
            both, {"k": 10, "deeper": True}, {"k": 10}),
        "vector + latent CSLS, questions k=10, vector pool of 60, latent r_e x 0.5":
            functools.partial(both, {"k": 10, "deeper": True}, {"k": 10, "weight": 0.5}),
        "vector + latent CSLS, questions k=10, r_e x 0.5": functools.partial(
            both, {"k": 10, "weight": 0.5}, {"k": 10, "weight": 0.5}),
        "vector + latent CSLS, questions k=10, r_e x 2": functools.partial(
            both, {"k": 10, "weight": 2.0}, {"k": 10, "weight": 2.0}),
    }
