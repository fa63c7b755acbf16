"""Two rows that say one thing: the fuller first.

Notes written at different times often repeat a fact in other words (`HP ProDesk 600, i5-8500T,
16Go RAM` / `Serveur : HP ProDesk 600 G4, processeur i5-8500T, 16 Go de RAM`); the aggregation
tier folds them (`forge aggregate`), and until it has, a recall that brings both back shows the
one that says more first, whichever the channels put higher. A row is *fuller* than a row above
it when both are deliberate notes of one kind and project and it holds every word of the other
and more (the notes' tokenizer: `16Go` = `16 Go`), none of its extra words a negation
(`Serveur : jamais 32 Go de RAM` holds every word of `Serveur : 32 Go de RAM` and says the
opposite: their order stays the ranking's). The fuller row takes the place of the other, which
takes its place; every row keeps its own scores.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..core.words import NEGATIONS, word_set
from ..store.common import ARCHIVE_KIND

if TYPE_CHECKING:
    from ..store.search_results import SearchRow


def fuller_first(rows: "list[SearchRow]") -> "list[SearchRow]":
    """`rows` with each row that a row below says in full, and more, swapped with the fullest
    such row."""
    rows = list(rows)
    sets = [None if r.entry.kind == ARCHIVE_KIND else word_set(r.entry.content) for r in rows]
    for i, row in enumerate(rows):
        held = sets[i]
        if held is None:
            continue
        best = None
        for j in range(i + 1, len(rows)):
            other = sets[j]
            if other is None or rows[j].entry.kind != row.entry.kind \
                    or rows[j].entry.project != row.entry.project:
                continue
            if held < other and (other - held).isdisjoint(NEGATIONS) \
                    and (best is None or len(other) > len(sets[best])):
                best = j
        if best is not None:
            rows[i], rows[best] = rows[best], rows[i]
            sets[i], sets[best] = sets[best], sets[i]
    return rows
