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
from typing import TYPE_CHECKING, Any, Iterable

if TYPE_CHECKING:
    from ..core.when import Window
    from ..store.common import Entry
    from ..store.rag import Store
    from ..store.search_results import SearchResult, SearchRow

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

def newer_first(rows: list["SearchRow"]) -> list["SearchRow"]:
    """In place: for each pair of rows stating a changed fact (core/facts.changed_fact), the
    newer moves up to just before the older, which is marked `newer`. Returns `rows`."""
    from ..store.common import ARCHIVE_KIND

    notes = [r for r in rows if r.entry.kind != ARCHIVE_KIND and r.entry.superseded_by is None]
    if len(notes) < 2:
        return rows
    from ..core import facts

    # only pairs that may state one are read in full (they share a word; a negation or a
    # change word in one of them, or a number in both): reading a note costs ~20-80 µs
    held = [facts.held(r.entry.content) for r in notes]
    candidates = [(i, j) for i in range(len(notes)) for j in range(i + 1, len(notes))
                  if notes[i].entry.kind == notes[j].entry.kind
                  and notes[i].entry.project == notes[j].entry.project
                  and held[i].may_change(held[j])]
    if not candidates:
        return rows
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
            old.newer, old.newer_reason = new.entry.id, "changed fact (words)"
        at_old, at_new = rows.index(old), rows.index(new)
        if at_new > at_old:
            rows.insert(at_old, rows.pop(at_new))
    return rows


def _later(a: "Entry", b: "Entry") -> bool:
    return (a.created, a.id) > (b.created, b.id)


# --------------------------------------------------------------------------- the same thing, by meaning

# How many passing candidates after the rows recall looks at: a newer statement of a row's
# fact ranked just outside the budget comes in (it is usually worded less like the question
# than the older one it replaces, which is why it ranks lower).
SPARE = 6
# Two notes speak of the same thing when the sentence model's rows of them are at least this
# near (cosine). Measured on tests/fixtures/true_now_dev.json (bench/true_now_dev.py): facts
# changed in other words have a median of 0.47 (10th percentile 0.18), unrelated note pairs a
# 90th percentile of 0.19 and a maximum of 0.59, pairs that both stay true 0.31-0.64.
SAME_THING = 0.40

# Two notes written less than this apart are not a fact that changed over time (a store filled
# at once, an import without dates: the later id is no newer value).
APART = timedelta(days=1)


def apart(a: str, b: str) -> bool:
    """Whether two stored times are at least APART from each other."""
    from datetime import datetime

    from ..core.when import STAMP

    try:
        return abs(datetime.strptime(a, STAMP) - datetime.strptime(b, STAMP)) >= APART
    except ValueError:
        return a[:10] != b[:10]


# A note that says it adds to what is there, not that it replaces it ("a second cat", "I also
# speak German"): never the newer statement of another note. Whole words, any case.
ADDS = ("second", "seconde", "another", "also", "too", "as well", "additional", "extra",
        "aussi", "également", "deuxième", "un autre", "une autre", "en plus", "de plus",
        "encore un", "encore une")

# A question about a former value: its words, the one closed list (docs/time.md shows it).
# Whole words, any case, with or without accents; ’ read as '.
PAST_WORDS = {
    "en": ("before", "previous", "previously", "used to", "use to", "former", "formerly", "first",
           "earlier", "originally"),
    "fr": ("avant", "auparavant", "ancien", "ancienne", "anciens", "anciennes", "précédent",
           "précédente", "précédents", "précédentes", "premier", "première", "avais-je",
           "j'avais", "avait-il", "avait-elle", "étais-je", "j'étais", "était"),
}
_patterns: dict[str, Any] = {}


def _words_pattern(name: str, words: Iterable[str]) -> Any:
    if name not in _patterns:
        import re

        from ..core.words import fold

        forms = set(words) | {fold(w) for w in words}
        alternatives = sorted((re.escape(w).replace(r"\ ", r"\s+") for w in forms), key=len,
                              reverse=True)
        _patterns[name] = re.compile(r"(?<![\w'-])(?:" + "|".join(alternatives) + r")(?![\w'-])",
                                     re.IGNORECASE)
    return _patterns[name]


def asks_past(question: str) -> bool:
    """Whether `question` asks about a former value: it holds one of PAST_WORDS."""
    words = [w for ws in PAST_WORDS.values() for w in ws]
    return _words_pattern("past", words).search(question.replace("’", "'")) is not None


def adds(text: str) -> bool:
    """Whether a note says it adds to what is there (ADDS)."""
    return _words_pattern("adds", ADDS).search(text.replace("’", "'")) is not None


# Two notes that share more than this share of the shorter one's words (three letters or more,
# or a number; function words left out) are worded alike: their words decide whether they are
# one thing.
ALIKE = 0.5


def words_decide(a: str, b: str) -> bool:
    """Whether two notes' words, not their meaning, say whether they are one thing (the
    word-level readings of newer_first and `memory conflicts`): both labelled before a colon
    (the same label: `Desktop: Ryzen tower` / `Desktop: Mac mini`, two machines under one
    label; two labels name two things, `Laptop: ThinkPad T14` / `Desktop: Mac mini`), or
    worded alike (ALIKE: `Camera #2` / `Camera #3`, `Thé vert` / `Thé vert, sans sucre`), or
    one holds a negation, or both give an amount of one unit (`8 Go de RAM` / `32 GB RAM`)."""
    import re

    from ..core.words import fold, words

    if re.match(r"\s*[^:\n]{1,40}?\s*:", a) and re.match(r"\s*[^:\n]{1,40}?\s*:", b):
        return True
    from ..core.words import NEGATIONS

    said = [words(t) for t in (a, b)]
    if any(w in NEGATIONS for ws in said for w in ws):
        return True   # a negation: `memory conflicts`' negation reading
    units = [{_UNITS.get(u, u) for u in re.findall(r"\d\s*([^\W\d_]{1,4})\b", fold(t))}
             for t in (a, b)]
    if units[0] & units[1]:
        return True   # two amounts of one unit: its number reading (`8 Go` / `32 GB` of RAM)
    from .query_words import function_words

    grammar = function_words()
    wa, wb = ({w for w in ws if (len(w) >= 3 or w.isdigit()) and w not in grammar}
              for ws in said)
    if not wa or not wb:
        return True
    return len(wa & wb) > ALIKE * min(len(wa), len(wb))


_UNITS = {"go": "gb", "to": "tb", "mo": "mb", "ko": "kb"}


def same_thing_first(store: "Store", result: "SearchResult", question: str) -> None:
    """In place: the rows (and `result.spare`, the candidates just after them) that speak of
    the same thing by meaning, grouped around the best-ranked row of each group (each member
    linked to it); in each
    group the newest comes to the place of its best-ranked row (a spare one comes in only for
    the group of the first row, and then the last row of no group leaves: a row lower down is
    not what was asked, and a note that stays true below it must not leave), the older ones stay, marked `newer` with the reason "same thing
    (meaning)". For a question about the past (asks_past), the older note nearest the newest
    (the value it replaced) takes that place instead (result.order = "past"), the newest stays
    where it was.

    Same thing: two deliberate, active notes of one kind and project, each the other's nearest
    among the notes compared by the sentence model's rows, at least SAME_THING near and APART
    in time, neither a note that adds (ADDS), their words not deciding it (words_decide),
    neither in a pair newer_first marked; or a pair newer_first marked. The rows are those the sentence model read for this recall (kept in the process:
    no model pass is added); with RECALL_SENTENCE=off nothing is grouped by meaning (the
    word-level newer_first still runs)."""
    from . import sentence

    if not store.settings.recall_sentence or sentence._model is None:
        return
    from ..store.common import ARCHIVE_KIND

    rows = result.rows
    notes = [r for r in rows + result.spare
             if r.entry.kind != ARCHIVE_KIND and r.entry.superseded_by is None]
    if len(notes) < 2:
        return
    past = asks_past(question)
    vectors = sentence.rows_of(sentence._model, [r.entry.content for r in notes])
    sims = vectors @ vectors.T
    add = [adds(r.entry.content) for r in notes]
    place = {id(r): n for n, r in enumerate(notes)}

    # a note the word-level reading already paired (newer_first) has its partner: its words
    # said which thing it is about, meaning is not asked again
    worded = {r.entry.id for r in notes if r.newer is not None} | {r.newer for r in notes}

    def may_pair(i: int, j: int) -> bool:
        a, b = notes[i].entry, notes[j].entry
        return (a.kind == b.kind and a.project == b.project and not add[i] and not add[j]
                and a.id not in worded and b.id not in worded
                and not words_decide(a.content, b.content))

    # each note's nearest among those it may be paired with: a pair by meaning is two notes
    # each the other's nearest (a note near several others is about none of them in particular)
    nearest = {}
    for i in range(len(notes)):
        others = [j for j in range(len(notes)) if j != i and may_pair(i, j)]
        if others:
            nearest[i] = max(others, key=lambda j: sims[i, j])

    def linked(i: int, j: int) -> bool:
        a, b = notes[i], notes[j]
        if a.newer == b.entry.id or b.newer == a.entry.id:
            return True
        return bool(nearest.get(i) == j and nearest.get(j) == i and sims[i, j] >= SAME_THING
                    and apart(a.entry.created, b.entry.created) and may_pair(i, j))

    used: set[int] = set()
    changed = False
    for anchor in list(rows):
        i = place.get(id(anchor))
        if i is None or i in used:
            continue
        members = [i] + [j for j in range(len(notes))
                         if j != i and j not in used and linked(i, j)]
        if len(members) < 2:
            continue
        used.update(members)
        group = [notes[j] for j in members]
        by_time = sorted(group, key=lambda r: (r.entry.created, r.entry.id))
        newest = by_time[-1]
        first = (max(by_time[:-1], key=lambda r: sims[place[id(r)], place[id(newest)]])
                 if past else newest)
        if any(r is first for r in rows):
            _remove(rows, first)
        elif rows[0] is not anchor:
            continue   # a spare one comes in only beside the first row: what was asked
        else:   # a spare one comes in: the last row of no group leaves
            out = next((r for r in reversed(rows) if place.get(id(r)) not in used), None)
            if out is None:
                continue
            _remove(rows, out)
            _remove(result.spare, first)
            result.spare.insert(0, out)
        ids = {id(r) for r in group}
        best = min((n for n, r in enumerate(rows) if id(r) in ids), default=len(rows))
        rows.insert(best, first)
        for r in by_time[:-1]:
            if r.newer is None and any(x is r for x in rows):
                r.newer, r.newer_reason = newest.entry.id, "same thing (meaning)"
        changed = True
    if changed and past:
        result.order = "past"


def _remove(rows: list["SearchRow"], row: "SearchRow") -> None:
    """`row` itself out of `rows` (not a row equal to it)."""
    del rows[next(n for n, r in enumerate(rows) if r is row)]
