"""Time in a recall, beside the channels: what a question's period searches (`told`: what may
tell of it) and which rows come first (`period_first`), what the JSON says of the window,
`--as-of` (the store as it stood then), and the newer of two facts first.

The window itself is read by forge/core/when.py (from the question, or --since/--until) and
goes into every channel's query (rank.recall, channels, sparse, the backends);
nothing here cuts rows afterwards.

The newer of two facts (with no window): two rows state a changed fact about the same thing
when they are deliberate entries of one kind and project and forge/core/facts.py's
`changed_fact` holds, the one reading `forge memory conflicts` has of "the same thing": they
conflict (a negation bearing on words the other states, two values for the same thing: the
note's head in every detail's context, the names the notes give, what a value measures), or
the value one gives changed in the other, which says so (`mon forfait mobile est chez Bouygues`
/ `mon forfait mobile est maintenant chez Sosh`, names included). The names are judged on the
rows compared (how they write their words), as `forge remember` judges them on its candidates.
The one created later (then the larger id) is the newer: it moves up to just before the older
one, which carries `newer` (its id).
"""
from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..core.when import Window
    from ..store.common import Entry
    from ..store.rag import Store
    from ..store.search_results import SearchRow

# How long before a period a question names an entry may announce it (told).
ANNOUNCED = timedelta(days=14)


def arguments(settings: Any, since: str | None = None, until: str | None = None,
              as_of: str | None = None, *, prefix: str = "--") -> dict[str, Any]:
    """`since`/`until`/`as_of` as typed (recall --since/--until/--as-of, GET /search, the MCP
    tools; each WHEN an ISO date or datetime or an expression) as rank.recall's
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

    if window is None:   # the store as it stood: an unknown time is when it was stored
        return Window(None, as_of, None, unknown_time=True)
    until = as_of if window.until is None else min(window.until, as_of)
    return Window(window.since, until, window.from_query, window.unknown_time)


def told(period: "Window") -> "Window | None":
    """The window every channel searches for a period a question names: what may tell of it.
    A question names when something happened, and a store holds when it was said: an event is
    told during its period or after it ("the NAS I ordered in May has arrived"), or announced
    shortly before it ("I start the new job on the 3rd"), never long before. So: from
    ANNOUNCED before the period's start, with no end (None when the period has no start:
    "before August 3" bounds nothing). Measured on bench/true_now.py --set time and LoCoMo
    (docs/time.md): the period alone as a window lost LoCoMo questions whose answer was told in
    a later session, or a few days before the date the question names."""
    from ..core.timestamps import utc_text
    from ..core.when import STAMP, Window

    if period.since is None:
        return None
    from datetime import datetime

    try:
        start = datetime.strptime(period.since, STAMP) - ANNOUNCED
    except OverflowError:   # within a fortnight of the first day a store holds: all of it
        return None
    return Window(utc_text(start), None, period.from_query, unknown_time=True)


def period_first(rows: list["SearchRow"], period: "Window") -> list["SearchRow"]:
    """In place, stable: the rows said during `period` before the others (said before or after
    it, or at an unknown time). Returns `rows`."""
    rows.sort(key=lambda r: not (known(r.entry) and period.holds(r.entry.created)))
    return rows


def known(entry: "Entry") -> bool:
    """Whether `entry`'s time is when it was said: False for an import without times, whose
    `created` is only when it was stored. Such a time never places a row in a period, nor
    makes it newer or older than another."""
    return entry.created_known


def unknown_left_out(store: "Store", project: str | None, kind: str | None) -> int:
    """How many entries whose time is unknown --since/--until left out (the JSON's
    `time.unknown_time_excluded`)."""
    return store.backend.count_unknown_time(project=project, kind=kind)


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

def newer_first(rows: list["SearchRow"], *, past: bool = False) -> bool:
    """In place: for each pair of rows stating a changed fact (core/facts.changed_fact), the
    newer moves up to just before the older, which is marked `newer`; a row whose time is
    unknown is in no pair. `past` (a question about a former value: asks_past): the older
    moves up to just before the newer instead, still marked. Whether a pair was found."""
    from ..store.common import ARCHIVE_KIND

    notes = [r for r in rows if r.entry.kind != ARCHIVE_KIND and r.entry.superseded_by is None
             and known(r.entry)]
    if len(notes) < 2:
        return False
    from ..core import facts

    # only pairs that may state one are read in full (they share a word; a negation or a
    # change word in one of them, or a number in both): reading a note costs ~20-80 µs
    held = [facts.held(r.entry.content) for r in notes]
    candidates = [(i, j) for i in range(len(notes)) for j in range(i + 1, len(notes))
                  if notes[i].entry.kind == notes[j].entry.kind
                  and notes[i].entry.project == notes[j].entry.project
                  and held[i].may_change(held[j])]
    if not candidates:
        return False
    compared = sorted({n for pair in candidates for n in pair})
    seen = facts.evidence(notes[n].entry.content for n in compared)
    sides = {n: facts.read_side(notes[n].entry, seen) for n in compared}
    pairs = []
    for i, j in candidates:
        if sides[i] is not None and sides[j] is not None and facts.changed_fact(sides[i],
                                                                               sides[j]):
            pairs.append(tuple(sorted((notes[i], notes[j]),
                                      key=lambda r: (r.entry.created, r.entry.id))))
    for old, new in pairs:
        current = old.newer
        if current is None or _later(new.entry, next(r.entry for r in rows
                                                     if r.entry.id == current)):
            old.newer = new.entry.id
        at_old, at_new = rows.index(old), rows.index(new)
        if past and at_old > at_new:
            rows.insert(at_new, rows.pop(at_old))
        elif not past and at_new > at_old:
            rows.insert(at_old, rows.pop(at_new))
    return bool(pairs)


def replaced_first(rows: list["SearchRow"], *, oldest: bool = False) -> None:
    """In place, for a question about a former value: a row an entry replaced (its `newer`,
    set by rank.fill from the link) moves up to just before the row of what replaced it. Of
    the replaced rows of one chain, the one fewest links from its end comes first: "before"
    asks for the value just before the newest; `oldest` (the question asks for the first:
    FIRST_WORDS), the chain's start."""
    linked = [r for r in rows if r.newer is not None and r.entry.superseded_by == r.newer]
    for row in linked:
        at_new = next((i for i, r in enumerate(rows) if r.entry.id == row.newer), None)
        at_old = rows.index(row)
        if at_new is not None and at_old > at_new:
            rows.insert(at_new, rows.pop(at_old))
    newer = {r.entry.id: r.newer for r in linked}
    chains: dict[int, list[tuple[int, "SearchRow"]]] = {}
    for row in linked:   # each row's chain (its end among the rows) and its links to that end
        end, walked = row.entry.id, [row.entry.id]
        while end in newer and newer[end] not in walked:   # a cycle (none written) ends it
            end = newer[end]
            walked.append(end)
        chains.setdefault(end, []).append((len(walked), row))
    for end, steps in chains.items():
        if len(steps) < 2:
            continue
        # by the links, not the dates: a replacement may be written with an earlier --at
        steps.sort(key=lambda step: step[0], reverse=oldest)
        chain = [row for _, row in steps]
        chain += [r for r in rows if r.entry.id == end and r not in chain]   # then the newest
        at = min(rows.index(r) for r in chain)
        rows[:] = [r for r in rows if r not in chain]
        rows[at:at] = chain


# A question about a former value, by its words: the one closed list (docs/time.md shows it).
# Whole words, any case, with or without accents; ’ is read as '.
PAST_WORDS = {
    "en": ("before", "previous", "previously", "used to", "use to", "former", "formerly",
           "first", "earlier", "originally", "my old", "our old", "the old"),
    "fr": ("avant", "auparavant", "ancien", "ancienne", "anciens", "anciennes", "précédent",
           "précédente", "précédents", "précédentes", "premier", "première", "avais-je",
           "j'avais", "avait-il", "avait-elle", "étais-je", "j'étais", "était"),
}
# Of those, the ones that ask for the first of the former values, not the one just before.
FIRST_WORDS = ("first", "originally", "premier", "première")
_past: Any = None
_first: Any = None


def asks_past(question: str) -> bool:
    """Whether `question` asks about a former value: it holds one of PAST_WORDS."""
    global _past
    if _past is None:
        _past = _words_pattern({w for ws in PAST_WORDS.values() for w in ws})
    return _past.search(question.replace("’", "'")) is not None


def asks_first(question: str) -> bool:
    """Whether `question` asks for the first of the former values: it holds one of
    FIRST_WORDS."""
    global _first
    if _first is None:
        _first = _words_pattern(set(FIRST_WORDS))
    return _first.search(question.replace("’", "'")) is not None


def _words_pattern(forms: set[str]) -> Any:
    """Whole words of `forms`, any case, with or without accents, a space any run of spaces."""
    import re

    from ..core.words import fold

    forms |= {fold(w) for w in forms}
    alternatives = sorted((re.escape(w).replace(r"\ ", r"\s+") for w in forms), key=len,
                          reverse=True)
    return re.compile(r"(?<![\w'-])(?:" + "|".join(alternatives) + r")(?![\w'-])",
                      re.IGNORECASE)


def _later(a: "Entry", b: "Entry") -> bool:
    return (a.created, a.id) > (b.created, b.id)
