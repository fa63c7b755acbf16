"""Conflicts: two notes that say opposite things are found and shown, never folded.

What a conflict is (a negation, two values for the same thing; the same thing: the head in
every detail's context, the names the notes give, what a value measures) is read by
forge/core/facts.py, which recall's newer of two facts first reads alike. Here, the store:
`find` lists every conflicting pair among the active entries (rows only, no embedding);
`against` checks one entry against candidates the word index finds (`forge remember`);
`subject_conflict` is the aggregation tier's `conflict` gate. Nothing here but `remember`
writes.
"""
from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from ..core.facts import (KINDS, MONTHS, Conflict, Side, conflict, evidence, names_a_thing,
                          negated_clause, numbers, ordered, read_clause, read_side)
from ..core.notes import parse_note
from ..core.words import NEGATIONS

__all__ = ["Conflict", "ConflictReport", "Noted", "Side", "against", "conflict", "evidence",
           "find", "in_time", "may_replace", "may_replace_written", "read_clause", "read_side",
           "remember", "remember_many", "subject_conflict"]

if TYPE_CHECKING:
    from ..store.rag import Entry, Store

# `forge remember`: how many entries the word index proposes as candidates.
REMEMBER_CANDIDATES = 40
REMEMBER_WORDS = 6

# --------------------------------------------------------------------------- the aggregation gate

def subject_conflict(entries: Sequence[Any]) -> Conflict | None:
    """The aggregation tier's `conflict` gate: the first conflicting pair in one subject."""
    seen = evidence(e.content for e in entries)
    sides = [s for s in (read_side(e, seen) for e in entries) if s is not None]
    for i, a in enumerate(sides):
        for b in sides[i + 1:]:
            found = conflict(a, b)
            if found:
                return found
    return None


# --------------------------------------------------------------------------- the store

@dataclass
class ConflictReport:
    conflicts: list[Conflict]
    entries_scanned: int
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"conflicts": [c.to_dict() for c in self.conflicts],
                "entries_scanned": self.entries_scanned, "seconds": self.seconds}


def find(store: "Store", *, project: str | None = None, kind: str | None = None) -> ConflictReport:
    """Every conflicting pair among the active entries (not archive, not superseded) of one
    kind and project: rows only, no embedding, no vector. `forge memory conflicts` calls it."""
    from ..store import rag

    started = time.perf_counter()
    if kind is not None:
        kind = rag.normalize_kind(kind)
    entries = [e for e in rag.hot_entries(store, project=project)
               if kind is None or e.kind == kind]
    by_space: dict[tuple[str, str | None], list[Any]] = {}
    for e in entries:
        by_space.setdefault((e.kind, e.project), []).append(e)
    by_id = {e.id: e for e in entries}
    found: list[Conflict] = []
    for (k, p), members in by_space.items():
        seen = evidence(e.content for e in members)
        sides = [s for s in (read_side(e, seen) for e in members) if s is not None]
        for c in _space_conflicts(sides):
            c.kind, c.project = k, p
            found.append(in_time(c, by_id))
    found.sort(key=lambda c: c.ids)
    return ConflictReport(found, len(entries), round(time.perf_counter() - started, 4))


def _space_conflicts(sides: list[Side]) -> list[Conflict]:
    """Every conflicting pair of one kind and project. Each negated detail looks only at notes
    holding its rarest word; each detail with a number
    at notes holding the rarest of its words around the number (one of the two contexts holds
    the other, so the pair is found from the smaller one's side), and at notes holding every
    name it gives and its unit (two notes of one named thing: one names all the other does)."""
    postings: dict[str, list[int]] = {}
    keys = [s.words | {UNIT_KEY + u for c in s.clauses for u in c.values}
            | ({THING_KEY + s.thing} if s.thing else set()) for s in sides]
    for i, held in enumerate(keys):
        for w in held:
            postings.setdefault(w, []).append(i)
    found: dict[tuple[int, int], Conflict] = {}

    def candidates(i: int, key: frozenset[str]) -> Iterable[int]:
        lists = [postings.get(w, ()) for w in key]
        if not lists or not all(lists):
            return ()
        return (j for j in min(lists, key=len) if j != i and key <= keys[j])

    for i, s in enumerate(sides):
        for n, c in enumerate(s.clauses):
            if c.negated:
                # its partner states every word of it (with the label and head, unless the
                # two notes name their thing: then the detail's own words); or it denies a
                # kind and its partner is about a member, said first
                kind = (s.label if c.bare else c.content) if len(c.content or s.label) == 1 \
                    else frozenset()
                members = [frozenset({THING_KEY + m}) for k in kind
                           for m in (k, *KINDS.get(k, ()))]
                for j in itertools.chain(candidates(i, c.content or s.stated(n)),
                                         *(candidates(i, key) for key in members)):
                    pair = (min(i, j), max(i, j))
                    if pair not in found:
                        hit = negated_clause(s, n, sides[j])
                        if hit:
                            found[pair] = ordered(s, sides[j], *hit)
            if not c.values:
                continue
            around = frozenset(w for w in s.around(n) if not w[0].isdigit())
            searches = [around] if names_a_thing(around, c) else []
            if s.common:
                # the thing both notes are about, said first, and the unit
                searches += [frozenset({THING_KEY + s.thing, UNIT_KEY + u}) for u in c.values if u]
            if s.names[n]:
                # a date or a time of one named thing dates the same event: its words too; a
                # bare number is a value only in the same context
                when = [u for u in c.values if u == "time" or u in MONTHS]
                searches += [s.names[n] | {UNIT_KEY + u} | (s.attribute(n) if u in when else
                                                            frozenset())
                             for u in c.values if u and (u not in when or s.attribute(n))]
            for key in searches:
                for j in candidates(i, key):
                    pair = (min(i, j), max(i, j))
                    if pair in found:
                        continue
                    for m, d in enumerate(sides[j].clauses):
                        hit = (numbers(s, n, sides[j], m) if d.values and not
                               c.values.keys().isdisjoint(d.values) else None)
                        if hit:
                            found[pair] = ordered(s, sides[j], *hit)
                            break
    return [found[k] for k in sorted(found)]


# A unit, and what a note is about said first, in the candidate index (no word starts with them).
UNIT_KEY = "\x00"
THING_KEY = "\x01"


def against(store: "Store", entry: "Entry") -> list[Conflict]:
    """The active entries `entry` may contradict (same kind and project), found through the
    word index: its REMEMBER_WORDS rarest words (by count; no admission rule, no stopword
    list) in one word query of REMEMBER_CANDIDATES rows."""
    from ..store import rag
    from ..recall import channels

    if parse_note(entry) is None:
        return []
    words = [w for w in dict.fromkeys(rag.query_words(store, entry.content))
             if (w[0].isdigit() or len(w) >= 3) and w not in NEGATIONS]
    # The rarest of them, by the store's own counts (a partner shares most of them; a word in
    # this entry only finds nothing): a short word query, whatever the store's size.
    counts = rag.word_counts(store, words)
    words = sorted((w for w in words if counts.get(w, 0) >= 2), key=lambda w: counts[w])
    hits = channels.search_lexical(store, words[:REMEMBER_WORDS], k=REMEMBER_CANDIDATES,
                              project=entry.project, kind=entry.kind)
    rows = [other for other in rag.entries_by_id(store, [i for i, _ in hits if i != entry.id]
                                                  ).values()
            if other.superseded_by is None and other.project == entry.project
            and other.kind == entry.kind]
    seen = evidence([entry.content] + [other.content for other in rows])
    side = read_side(entry, seen)
    out = []
    for other in rows:
        o = read_side(other, seen)
        found = conflict(side, o) if side is not None and o is not None else None
        if found:
            found.kind, found.project = entry.kind, entry.project
            out.append(in_time(found, {entry.id: entry, other.id: other}))
    out.sort(key=lambda c: c.ids)
    return out


def in_time(c: Conflict, entries: "dict[int, Entry]") -> Conflict:
    """`c` with its two notes in the order of their times (the one created first, then the
    lower id, first): a note told after the fact (`remember --at`) is the older though written
    second. A note whose time is unknown (an import without times) is neither older nor
    newer: the pair keeps the order it was written in and `time_unknown` names it."""
    a, b = (entries.get(i) for i in c.ids)
    if a is None or b is None:
        return c
    c.time_unknown = [e.id for e in (a, b) if not e.created_known]
    if not c.time_unknown and (b.created, b.id) < (a.created, a.id):
        c.ids, c.details, c.contents = c.ids[::-1], c.details[::-1], c.contents[::-1]
    return c



# --------------------------------------------------------------------------- remember

@dataclass
class Noted:
    """What `forge remember` wrote and what it may contradict."""

    id: int
    created: bool
    replaced: list[int]
    conflicts: list[Conflict]
    secrets_redacted: dict[str, int] = field(default_factory=dict)   # by type

    @property
    def conflict_ids(self) -> list[int]:
        return [c.ids[0] if c.ids[1] == self.id else c.ids[1] for c in self.conflicts]

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "created": self.created, "replaced": self.replaced,
                "conflicts": self.conflict_ids, "secrets_redacted": self.secrets_redacted}

    def notes(self) -> list[str]:
        """One line per conflict, for stderr (the CLI, the REPL) and the chat tool."""
        out = []
        for other, c in zip(self.conflict_ids, self.conflicts):
            text = c.contents[0] if c.ids[0] == other else c.contents[1]
            if c.time_unknown:
                unknown = " and ".join(f"#{i}" for i in c.time_unknown)
                settle = (f"time unknown for {unknown}: forge memory supersede OLD --by NEW "
                          "with the one that is over")
            elif c.ids[0] == other:
                settle = f"forge memory supersede {other} --by {self.id} if this replaces it"
            else:   # this note was told after the fact: the other is the newer
                settle = f"forge memory supersede {self.id} --by {other} if it replaces this"
            out.append(f'#{other} may say otherwise: "{text}" ({c.reason}; {settle})')
        return out


def remember(store: "Store", kind: str | None, content: str, *, project: str | None = None,
             source: str = "remember", refs: dict | None = None,
             replaces: Sequence[int] = (), created: str | None = None) -> Noted:
    """`rag.remember` (with `replaces`: insert and link in one transaction; `created`: when
    it happened), then the active entries the new one may contradict. The entry is written
    either way, with its sentence row (recall/writing.py)."""
    from ..recall.writing import rows_written
    from ..store import rag

    result = rag.remember(rows_written(store), kind, content, project=project, source=source, refs=refs,
                          replaces=replaces, created=created)
    return _noted(store, result)


# How many notes `may_replace` names: with 5, the older note of a fact changed in other words is
# among them for 26/32, 26/32 and 30/35 of the labelled stores' changes (bench/true_now.py
# --linked); each one more is ~20 tokens more in the agent's context on every write.
MAY_REPLACE_ROWS = 5


# What `may_replace` shows of each note: enough to judge it (`memory show ID` has the rest)
MAY_REPLACE_CHARS = 300


def may_replace(store: "Store", entry_id: int, rows: int = MAY_REPLACE_ROWS) -> list[dict]:
    """The notes a new one may replace, for a reader to judge ({id, content (its first
    MAY_REPLACE_CHARS), created, created_known}): the first `rows` of a recall of its content
    (no time read, a full pool: a note of no project is read past other projects' notes) of its
    kind and project, not replaced, written before it or of unknown time (never older nor
    newer). No rule of Forge pairs a fact changed in other words (docs/benchmarks/true-now.md);
    a model or a person reading these does, links them (`supersede`), and recall follows."""
    from ..recall import rank
    from ..store import rag

    entry = rag.get_entry(store, entry_id)
    found = rank.recall(store, entry.content, limit=max(rank.MIN_POOL, rows + 5),
                        kind=entry.kind, project=entry.project, neighbours=False,
                        read_time=False)
    named = [r.entry for r in found.rows if r.entry.id != entry.id
             and r.entry.project == entry.project and not rag.is_replaced(r.entry)
             and (not r.entry.created_known or r.entry.created < entry.created)]
    return [{"id": e.id, "content": _cut(e.content), "created": e.created,
             "created_known": e.created_known} for e in named[:rows]]


def may_replace_written(store: "Store", noted: Noted) -> list[dict]:
    """`may_replace` for what `remember` just wrote (every front's one call): nothing for a
    duplicate (nothing was written) nor for a write that named what it replaces."""
    return may_replace(store, noted.id) if noted.created and not noted.replaced else []


def _cut(text: str) -> str:
    return text if len(text) <= MAY_REPLACE_CHARS else text[:MAY_REPLACE_CHARS - 1] + "…"


def remember_many(store: "Store", items: list[Any], **kwargs: Any) -> list[Noted]:
    """`rag.remember_many`, then each new entry's conflicts (the batch's own entries included:
    they are written first), the notes with their sentence rows (recall/writing.py)."""
    from ..recall.writing import rows_written
    from ..store import rag

    return [_noted(store, r) for r in rag.remember_many(rows_written(store), items, **kwargs)]


def _noted(store: "Store", result: Any) -> Noted:
    from ..store import rag

    found: list[Conflict] = []
    if result.created:
        found = against(store, rag.get_entry(store, result.id))
    return Noted(result.id, result.created, list(result.replaced), found,
                 dict(result.secrets_redacted))
