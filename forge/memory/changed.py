"""A fact changed in other words: two active notes that speak of the same thing and give it
another value, found by meaning (the newer one names its new value in its own words: a new
employer, a tool replaced by another, often in the other language), for `forge remember`'s
"may replace" and `forge memory conflicts`' reason "changed".

Precision first (a wrong pair costs more trust than a missed one). Two deliberate, active notes
of one kind and project are a changed pair when:
- each is the other's nearest by the sentence model (recall/sentence.py: multilingual, good at
  paraphrase) among its NEIGHBOURS nearest notes by the stored vectors (the store's embedder:
  no embedding of the store is needed to find them);
- their sentence-model cosine is at least CHANGED;
- neither says it adds to what is there (recall/timeline.ADDS: "a second cat", "aussi"),
  they were written at least a day apart (recall/timeline.APART: a store filled at once holds
  no change over time), and they are not worded so alike that their words decide (recall/timeline.words_decide: the
  same label before a colon, or words that differ only by numbers: `Camera #2` / `Camera #3`).
Measured on tests/fixtures/true_now_dev.json (bench/true_now_dev.py): mutual nearest at 0.45
listed 21 pairs, 19 right (precision 0.90, recall 0.59); the nearest of one side only, or a
lower cosine, listed more wrong pairs than right ones gained.

Its cost: the sentence model's load (~0.3 s a process) and a pass per note read (~1-3 ms):
`forge remember` reads the new note's neighbours and theirs; `memory conflicts` reads every
active note once. Nothing runs with RECALL_SENTENCE=off.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable

if TYPE_CHECKING:
    from ..store.common import Entry
    from ..store.rag import Store

CHANGED = 0.45
NEIGHBOURS = 10
REASON = "same thing, other value"


def _active(entry: "Entry | None") -> bool:
    from ..store.common import ARCHIVE_KIND

    return entry is not None and entry.kind != ARCHIVE_KIND and entry.superseded_by is None


def _neighbours(store: "Store", entry: "Entry", vector: Any) -> list["Entry"]:
    """The active notes of `entry`'s kind and project nearest it by the stored vectors."""
    from ..store import rag

    hits = store.backend.search_vector(vector, k=NEIGHBOURS + 1, kind=entry.kind,
                                       project=entry.project)
    found = rag.entries_by_id(store, [i for i, _ in hits if i != entry.id])
    return [found[i] for i, _ in hits if i in found and _active(found[i])
            and found[i].project == entry.project and found[i].kind == entry.kind]


def _nearest(rows: dict[str, Any], entry: "Entry", others: Iterable["Entry"]
             ) -> tuple["Entry | None", float]:
    """The other note nearest `entry` by the sentence model, and its cosine; notes that add
    are never one."""
    from ..recall.timeline import adds, words_decide

    best, score = None, -2.0
    for other in others:
        if words_decide(entry.content, other.content) or adds(other.content):
            continue
        sim = float(rows[entry.content] @ rows[other.content])
        if sim > score:
            best, score = other, sim
    return best, score


def _rows(texts: Iterable[str]) -> dict[str, Any]:
    from ..recall import sentence

    texts = list(dict.fromkeys(texts))
    return dict(zip(texts, sentence.rows_of(sentence.model(), texts)))


def may_replace(store: "Store", entry: "Entry") -> list[dict[str, Any]]:
    """The active notes written before `entry` that it may replace (a changed pair): [{id,
    content, reason}] ([] or one). [] with RECALL_SENTENCE=off, for an archived exchange or a
    note that adds."""
    from ..recall.timeline import adds, apart

    if not store.settings.recall_sentence or not _active(entry) or adds(entry.content):
        return []
    vectors = store.backend.vectors_of([entry.id])
    if entry.id not in vectors:
        return []
    around = _neighbours(store, entry, vectors[entry.id])
    if not around:
        return []
    rows = _rows([entry.content] + [o.content for o in around])
    other, score = _nearest(rows, entry, around)
    if other is None or score < CHANGED or (other.created, other.id) > (entry.created, entry.id) \
            or not apart(other.created, entry.created):
        return []
    theirs = _neighbours(store, other, store.backend.vectors_of([other.id])[other.id])
    rows.update(_rows([o.content for o in theirs if o.content not in rows]))
    back, _ = _nearest(rows, other, theirs)
    if back is None or back.id != entry.id:
        return []
    return [{"id": other.id, "content": other.content, "reason": REASON}]


def pairs(store: "Store", entries: list["Entry"]) -> list[tuple["Entry", "Entry", float]]:
    """Every changed pair among `entries` (active notes of one kind and project), older first:
    mutual nearest by the sentence model among each one's NEIGHBOURS nearest by the stored
    vectors (computed here from `vectors_of`, no embedder call)."""
    import numpy as np

    from ..recall.timeline import adds, apart

    notes = [e for e in entries if _active(e)]
    stored = store.backend.vectors_of([e.id for e in notes])
    notes = [e for e in notes if e.id in stored]
    if len(notes) < 2:
        return []
    matrix = np.stack([stored[e.id] for e in notes]).astype(np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True) + 1e-12
    rows = _rows(e.content for e in notes)
    nearest: dict[int, tuple[int, float]] = {}
    step = 512
    for start in range(0, len(notes), step):
        sims = matrix[start:start + step] @ matrix.T
        for k, line in enumerate(sims):
            i = start + k
            line[i] = -2.0
            near = np.argsort(-line)[:NEIGHBOURS]
            other, score = _nearest(rows, notes[i], (notes[j] for j in near))
            if other is not None:
                nearest[notes[i].id] = (other.id, score)
    by_id = {e.id: e for e in notes}
    out = []
    for a, (b, score) in nearest.items():
        if a < b and nearest.get(b, (None,))[0] == a and score >= CHANGED \
                and not adds(by_id[a].content) and apart(by_id[a].created, by_id[b].created):
            older, newer = sorted((by_id[a], by_id[b]), key=lambda e: (e.created, e.id))
            out.append((older, newer, round(score, 3)))
    return sorted(out, key=lambda p: (p[0].id, p[1].id))
