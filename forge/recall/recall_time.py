"""Time in a recall, beside the channels: what a question's period searches (`told`: what may
tell of it) and which rows come first (`period_first`), what the JSON says of the window,
`--as-of` (the store as it stood then), and the newer of two facts first.

The window itself is read by forge/core/when.py (from the question, or --since/--until) and
goes into every channel's query (recall_rank.recall, channels, recall_sparse, the backends);
nothing here cuts rows afterwards.

The newer of two facts (with no window): two rows state a changed fact about the same thing
when they are deliberate entries of one kind and project, share a content word (function
words out: the word channel's lists) and

- they differ only by the value they give: each holds one or two content words the other
  lacks, and they share at least twice as many (`mon forfait mobile est chez Bouygues` /
  `mon forfait mobile est maintenant chez Sosh`; `Le serveur a 8 Go de RAM` / `Le serveur a
  maintenant 24 Go de RAM`); the words that say a change (now, currently, maintenant,
  désormais...) do not count; or
- one of them says the change, and counting every word, each lacks at most three of the
  other's and they share more than that (`Ma voiture est une Renault Clio 4` / `Ma voiture est
  maintenant une Peugeot 208`); or
- one says what the other says, negated: the same content words once the negation words are
  out, and negation words in one only (`I drink coffee every morning` / `I no longer drink
  coffee every morning`).

These are the two shapes of the conflicts detector (forge/memory/conflicts.py, `forge memory
conflicts`: two values for one thing, a negation), read here on a recall's rows alone: the
recall ring does not import the memory ring above it. The one created later (then the larger
id) is the newer: it moves up to just before the older one, which carries `newer` (its id).
"""
from __future__ import annotations

import re
from datetime import timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..core.when import Window
    from ..store.common import Entry
    from ..store.rag import Store
    from ..store.search_results import SearchRow

# How long before a period a question names an entry may announce it (told).
ANNOUNCED = timedelta(days=14)
# Words that say a value changed; not content for the comparison.
CHANGE_WORDS = frozenset({
    "now", "currently", "nowadays", "today", "since", "maintenant", "désormais",
    "desormais", "actuellement", "dorénavant", "dorenavant", "aujourd", "hui", "depuis"})
MAX_DIFFERENT = 2      # content words one row holds and the other lacks, at most
MIN_SHARED = 2         # content words both hold, at least (and twice the difference)
MAX_DIFFERENT_SAID = 3  # words of all, when one row says the change
# Negation words (English and French; `longer` of `no longer`, `plus` of `ne ... plus`).
NEGATIONS = frozenset({"not", "no", "never", "longer", "anymore", "without", "nor", "pas",
                       "plus", "jamais", "sans", "aucun", "aucune", "non", "ni"})


def arguments(settings: Any, since: str | None = None, until: str | None = None,
              as_of: str | None = None, *, prefix: str = "--") -> dict[str, Any]:
    """`since`/`until`/`as_of` as typed (recall --since/--until/--as-of, GET /search, the MCP
    tools; each WHEN an ISO date or datetime or an expression) as recall_rank.recall's
    `window` and `as_of` ({} when none is given), read against FORGE_NOW or the clock. The one
    check of these arguments at every door: ForgeError, one line naming the argument (its
    name after `prefix`: "--since" for the CLI, "since" for HTTP and MCP)."""
    if since is None and until is None and as_of is None:
        return {}
    from ..core import when

    out: dict[str, Any] = {}
    window = when.options(since, until, now=settings.now,
                          names=(f"{prefix}since", f"{prefix}until"))
    if window is not None:
        out["window"] = window
    if as_of is not None:
        out["as_of"] = when.as_of(as_of, now=settings.now,
                                  name=f"{prefix}{'as-of' if prefix == '--' else 'as_of'}")
    return out


def until_as_of(window: "Window | None", as_of: str) -> "Window":
    """`window` cut at `as_of` (a stored time: entries created before it)."""
    from ..core.when import Window

    if window is None:
        return Window(None, as_of, None)
    until = as_of if window.until is None else min(window.until, as_of)
    return Window(window.since, until, window.from_query)


def told(period: "Window") -> "Window | None":
    """The window every channel searches for a period a question names: what may tell of it.
    A question names when something happened, and a store holds when it was said: an event is
    told during its period or after it ("the NAS I ordered in May has arrived"), or announced
    shortly before it ("I start the new job on the 3rd"), never long before. So: from
    ANNOUNCED before the period's start, with no end (None when the period has no start:
    "before August 3" bounds nothing). Measured on bench/time_questions.py and LoCoMo
    (docs/time.md): the period alone as a window lost LoCoMo questions whose answer was told in
    a later session, or a few days before the date the question names."""
    from ..core.when import STAMP, Window

    if period.since is None:
        return None
    from datetime import datetime

    start = datetime.strptime(period.since, STAMP) - ANNOUNCED
    return Window(start.strftime(STAMP), None, period.from_query)


def period_first(rows: list["SearchRow"], period: "Window") -> list["SearchRow"]:
    """In place, stable: the rows said during `period` before the others (said before or after
    it). Returns `rows`."""
    rows.sort(key=lambda r: not period.holds(r.entry.created))
    return rows


def describe(window: "Window", as_of: str | None, *,
             searched: "Window | None" = None) -> dict[str, Any]:
    """The JSON's "time": since, until (the window of --since/--until, or the period a question
    names), from_query (the question's words, None for options), searched (the window every
    channel searched: {since, until}, None when nothing bounded them), as_of, excluded (set when
    the searched window held no row: how many it left out)."""
    return {**window.to_dict(), "searched": None if searched is None else searched.bounds(),
            "as_of": as_of, "excluded": None}


def as_they_stood(store: "Store", entries: dict[int, "Entry"], as_of: str) -> dict[int, "Entry"]:
    """`entries` as they stood at `as_of`: one replaced by an entry created after then was
    not replaced yet (its link is left out of the row)."""
    from dataclasses import replace

    from ..store import rag

    replaced = [e for e in entries.values() if rag.is_replaced(e)]
    if not replaced:
        return entries
    by = rag.entries_by_id(store, {e.superseded_by for e in replaced})
    out = dict(entries)
    for e in replaced:
        newer = by.get(e.superseded_by)   # type: ignore[arg-type]
        if newer is None or newer.created >= as_of:
            out[e.id] = replace(e, superseded_by=None, superseded_reason=None)
    return out


# --------------------------------------------------------------------------- the newer fact

_WORD = re.compile(r"[^\W_]+")
_MARKS = re.compile("[\u0300-\u036f]")


class Words:
    """A row's words for the comparison: all of them (case and accents folded, the change words
    out), its content words (letter runs of three or more and numbers, the word channel's
    function words out: recall_words), and whether it says a change."""

    __slots__ = ("all", "content", "says_change")

    def __init__(self, text: str, function_words: frozenset[str]):
        folded = text.casefold()
        if not folded.isascii():
            import unicodedata

            folded = _MARKS.sub("", unicodedata.normalize("NFKD", folded))
        words = set(_WORD.findall(folded))
        self.says_change = not words.isdisjoint(CHANGE_WORDS)
        self.all = frozenset(words - CHANGE_WORDS)
        self.content = frozenset(w for w in self.all if (w[0].isdigit() or len(w) >= 3)
                                 and w not in function_words)


def changed_value(a: "Words", b: "Words") -> bool:
    """Two rows differ only by the value they give: one or two content words each that the
    other lacks, and at least twice as many shared (MIN_SHARED at least); or, when one of them
    says a change (`now`, `maintenant`...), up to MAX_DIFFERENT_SAID words of all each that the
    other lacks, more words shared than either lacks, and a content word in common."""
    shared = len(a.content & b.content)
    only_a, only_b = len(a.content - b.content), len(b.content - a.content)
    if (1 <= only_a <= MAX_DIFFERENT and 1 <= only_b <= MAX_DIFFERENT
            and shared >= max(MIN_SHARED, 2 * max(only_a, only_b))):
        return True
    if not (a.says_change or b.says_change) or not shared:
        return False
    shared_all = len(a.all & b.all)
    diff_a, diff_b = len(a.all - b.all), len(b.all - a.all)
    return (1 <= diff_a <= MAX_DIFFERENT_SAID and 1 <= diff_b <= MAX_DIFFERENT_SAID
            and shared_all > max(diff_a, diff_b))


def negated(a: "Words", b: "Words") -> bool:
    """One row says what the other says, negated: the same content words once the negation
    words are out, and negation words in one of them only."""
    neg_a, neg_b = a.all & NEGATIONS, b.all & NEGATIONS
    return bool(neg_a) != bool(neg_b) and a.content - NEGATIONS == b.content - NEGATIONS


def changed_fact(a: "Entry", b: "Entry", words: dict[int, "Words"]) -> bool:
    """`a` and `b` state a changed fact about the same thing (see the module docstring)."""
    wa, wb = words[a.id], words[b.id]
    if not wa.content & wb.content:
        return False
    return changed_value(wa, wb) or negated(wa, wb)


def newer_first(rows: list["SearchRow"]) -> list["SearchRow"]:
    """In place: for each pair of rows stating a changed fact, the newer moves up to just
    before the older, which is marked `newer`. Returns `rows`."""
    from ..store.common import ARCHIVE_KIND

    notes = [r for r in rows if r.entry.kind != ARCHIVE_KIND and r.entry.superseded_by is None]
    if len(notes) < 2:
        return rows
    from .recall_words import function_words

    skip = function_words()
    words = {r.entry.id: Words(r.entry.content, skip) for r in notes}
    pairs = []
    for i, x in enumerate(notes):
        for y in notes[i + 1:]:
            a, b = x.entry, y.entry
            if a.kind == b.kind and a.project == b.project and changed_fact(a, b, words):
                old, new = sorted((x, y), key=lambda r: (r.entry.created, r.entry.id))
                pairs.append((old, new))
    for old, new in pairs:
        current = old.newer
        if current is None or _later(new.entry, next(r.entry for r in rows
                                                     if r.entry.id == current)):
            old.newer = new.entry.id
        at_old, at_new = rows.index(old), rows.index(new)
        if at_new > at_old:
            rows.insert(at_old, rows.pop(at_new))
    return rows


def _later(a: "Entry", b: "Entry") -> bool:
    return (a.created, a.id) > (b.created, b.id)
