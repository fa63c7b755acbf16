"""Conflicts (A2 amended, A8): two notes that say opposite things are found and shown, never folded.

A note is read as the aggregation tier reads it (A1: an optional label, comma-separated
details). Two notes of one kind and project *conflict* when

- **negation**: a detail of one is negated and every content word of it (its label's words
  included) is stated, without a negation, by the other note (its label and its positive
  details): `never 16 GB RAM` / `16 GB RAM`; `Le NiPoGi n'a pas 32 Go` / `Le NiPoGi a 32 Go`;
  `Allergies : pas d'arachides` / `Allergies : arachides`. A negated detail with no word of
  its own (`Allergies : aucune`) conflicts with any positive detail under the same label.
  A detail that brings its own negation as something new (`Thé vert` / `Thé vert, sans sucre`:
  `sucre` is stated nowhere else) is an addition, not a conflict.
- **number**: two details of the same polarity give different values for *the same thing*:
  the same unit (the word right after the number: `Go`, `avril`; the letters glued before it:
  `v3`; a month before a day at the end: `April 3`; a time: `03:00`), the same numbers that
  name which thing (see below), and the same words around the number, label included, one
  detail's set inside the other's, among which a word naming the thing (three letters or
  more, not a unit, not a month; two of them when the values are dates or times):
  `8 Go de RAM` / `64 Go de RAM`, `Forge v3` / `Forge v4`, `Réunion de chantier le 3 avril` /
  `... le 30 avril`, but not `Caroline on 8 May` / `Caroline on 11 May` (two moments). A number that names which thing is
  not a value: after `numéro`, `number`, `no`, `n°`, `#`, or alone at the end of a detail after
  a word (`disque 1` / `disque 2`, `serveur numéro 3`): those must be equal, never compared.

Negations (closed lists, English and French, independent of any stopword list): not, no,
never, without, none, nor, n't, no longer, pas, jamais, sans, aucun, aucune, ni, non, and
`plus` only after `ne`/`n'` in the same detail. Content words: letter runs of three or more
and numbers, case and accents folded, a final plural `s` dropped; the negations, `ne`/`n'`,
`longer` after `no` and `do/does/did` before `not` are grammar, not content; `has/have/had`,
`is/are/was/were` are one word each.

`find` lists every conflicting pair among the active entries (rows only, no embedding);
`against` checks one entry against candidates the word index finds (`forge remember`);
`subject_conflict` is the aggregation tier's `conflict` gate. Nothing here writes.
"""
from __future__ import annotations

import functools
import re
import time
import unicodedata
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from .notes import parse_note

if TYPE_CHECKING:
    from ..store.rag import Entry, Store

NEGATIONS = frozenset({"not", "no", "never", "without", "none", "nor",
                       "pas", "jamais", "sans", "aucun", "aucune", "ni", "non"})
LABEL_NEGATIONS = frozenset({"aucun", "aucune", "none", "never", "jamais"})
FRENCH_NE = frozenset({"ne", "n"})            # `plus` negates only after one of these
EN_DO = frozenset({"do", "does", "did"})      # grammar when right before `not`
SAME_WORD = {"has": "have", "had": "have", "is": "be", "are": "be", "was": "be", "were": "be"}
NUMBERING = frozenset({"numero", "number", "num", "nr"})
VERSION = frozenset({"version", "v", "release", "build"})
MONTHS = frozenset({
    "january", "february", "march", "april", "may", "june", "july", "august", "september",
    "october", "november", "december", "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep",
    "sept", "oct", "nov", "dec", "janvier", "fevrier", "mars", "avril", "mai", "juin", "juillet",
    "aout", "septembre", "octobre", "novembre", "decembre"})
# The words around a number name the thing when at least this many of them are words of three
# letters or more that are neither a unit nor a month (a date or a time needs two).
MIN_NAMING, MIN_NAMING_WHEN = 1, 2
# `forge remember`: how many entries the word index proposes as candidates.
REMEMBER_CANDIDATES = 40
REMEMBER_WORDS = 6

_MARKS = re.compile("[\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f]")
_NT = re.compile(r"(?<=[a-z])n['\u2019]t\b")
_TOKEN = re.compile(r"\d+(?:[.,:h]\d+)*|[^\W\d_]+|[%€$£°]", re.UNICODE)


def _fold(text: str) -> str:
    text = text.casefold()
    if not text.isascii():   # most notes are: no accents to strip
        text = _MARKS.sub("", unicodedata.normalize("NFKD", text))
    return _NT.sub(" not", text.replace("cannot", "can not"))


@functools.lru_cache(maxsize=65536)
def _stem(word: str) -> str:
    word = SAME_WORD.get(word, word)
    return word[:-1] if len(word) > 3 and word.endswith("s") else word


def _content(word: str) -> bool:
    return word[0].isdigit() or len(word) >= 3


def _number(raw: str) -> str:
    return raw.replace(",", ".")


@dataclass
class Clause:
    """One detail, read for conflicts."""

    surface: str
    negations: list[str]                      # the negation words, as folded
    content: frozenset[str]                   # content stems (negations and grammar out)
    scope: frozenset[str]                     # content stems after the first negation
    letters: frozenset[str]                   # every letter word's stem (the words around)
    names: frozenset[str]                     # numbers that name which thing
    values: dict[str, frozenset[str]]         # unit -> the values given for it
    units: dict[str, str] = field(default_factory=dict)   # unit -> its surface
    bare: bool = False                        # nothing but negation words (`aucune`, `none`)

    @property
    def negated(self) -> bool:
        return bool(self.negations)


def read_clause(surface: str) -> Clause:
    text = _fold(surface)
    if not _DIGIT.search(text):
        plain = _plain_clause(surface, text)
        if plain is not None:
            return plain
    spans = [(m.group(), m.start(), m.end()) for m in _TOKEN.finditer(text)]
    toks = [s[0] for s in spans]
    negs: list[int] = []
    grammar: set[int] = set()
    for i, t in enumerate(toks):
        if t in NEGATIONS or (t == "plus" and any(p in FRENCH_NE for p in toks[:i])):
            negs.append(i)
        elif t in FRENCH_NE:
            grammar.add(i)
        elif t == "longer" and i and toks[i - 1] == "no":
            grammar.add(i)
        elif t in EN_DO and i + 1 < len(toks) and toks[i + 1] == "not":
            grammar.add(i)
    content, scope, letters, names = set(), set(), set(), set()
    values: dict[str, set[str]] = {}
    units: dict[str, str] = {}
    first_neg = negs[0] if negs else len(toks)
    for i, (t, start, end) in enumerate(spans):
        if i in negs or i in grammar:
            continue
        if t[0].isdigit():
            role, unit, unit_surface = _number_role(text, surface, spans, i)
            if role == "name":
                names.add(_number(t))
            else:
                values.setdefault(unit, set()).add(_number(t))
                units.setdefault(unit, unit_surface)
            stem = _number(t)
        elif t.isalpha():
            stem = _stem(t)
            letters.add(stem)
        else:
            letters.add(t)     # a unit symbol (%, €) is a word around a number
            continue
        if _content(t):
            content.add(stem)
            if i > first_neg:
                scope.add(stem)
    return Clause(surface, [toks[i] for i in negs], frozenset(content), frozenset(scope),
                  frozenset(letters), frozenset(names),
                  {u: frozenset(v) for u, v in values.items()}, units,
                  bare=bool(negs) and len(negs) + len(grammar) == len(toks))


_DIGIT = re.compile(r"\d")


def _plain_clause(surface: str, text: str) -> Clause | None:
    """The common case, read without walking tokens: no number and no negation word."""
    toks = set(_TOKEN.findall(text))
    if not toks.isdisjoint(NEGATIONS) or ("plus" in toks and not toks.isdisjoint(FRENCH_NE)):
        return None
    kept = [(t, _stem(t)) for t in toks if t not in FRENCH_NE]
    words = frozenset(w for _, w in kept)
    content = frozenset(w for t, w in kept if t.isalpha() and len(t) >= 3)
    return Clause(surface, [], content, frozenset(), words, frozenset(), {}, {})


def _number_role(text: str, surface: str, spans: list, i: int) -> tuple[str, str, str]:
    """("name" | "value", unit key, unit surface) of the number at token i."""
    t, start, end = spans[i]
    prev = spans[i - 1] if i else None
    nxt = spans[i + 1] if i + 1 < len(spans) else None
    if start and text[start - 1] == "#":
        return "name", "", ""
    if prev is not None and (prev[0] in NUMBERING
                             or (prev[0] in ("n", "no") and text[prev[2]:start].strip() in ("°", "."))):
        return "name", "", ""
    if ":" in t or "h" in t:
        return "value", "time", ""
    if prev is not None and prev[0].isalpha() and prev[2] == start:       # v3, t14
        return "value", "^" + prev[0], prev[0]
    if nxt is not None and not nxt[0][0].isdigit() and not text[end:nxt[1]].strip():
        return "value", _stem(nxt[0]), _surface(surface, text, nxt)       # 8 Go, 3 avril, 90 %
    at_end = nxt is None or text[end:nxt[1]].strip() not in ("", "%", "€", "$", "£", "°")
    if prev is not None and prev[0].isalpha() and at_end:                 # at the end
        if prev[0] in MONTHS or prev[0] in VERSION:
            return "value", prev[0], prev[0]
        return "name", "", ""                                             # disque 1
    return "value", "", ""


def _surface(surface: str, folded: str, span: tuple) -> str:
    # NFKD + casefold may change lengths; the folded token is the unit's name when it does.
    return surface[span[1]:span[2]] if len(surface) == len(folded) else span[0]


# --------------------------------------------------------------------------- notes

@dataclass
class Side:
    """A note as the conflict rules read it."""

    id: int
    content: str
    label: frozenset[str]          # the label's content stems
    label_all: frozenset[str]      # every word stem and number of the label
    label_names: frozenset[str]    # the label's numbers: they name which thing (`disque 1 :`)
    clauses: list[Clause]
    words: frozenset[str] = frozenset()   # every word of the note (candidate checks)


def read_side(entry: Any) -> Side | None:
    note = parse_note(entry)
    if note is None:
        return None
    label = read_clause(note.label.rstrip().rstrip(":")) if note.label else None
    names = (label.names | frozenset().union(*label.values.values())) if label else frozenset()
    clauses = [read_clause(d) for d in note.details]
    label_all = (label.letters | names) if label else frozenset()
    words = frozenset(label_all.union(*(c.letters | c.content for c in clauses)))
    return Side(entry.id, entry.content, label.content if label else frozenset(), label_all,
                names, clauses, words)


@dataclass
class Conflict:
    ids: list[int]              # older first
    reason: str                 # "negation: never" | "number: 8 / 64 Go"
    words: list[str]            # the words that differ
    details: list[str]          # the two details, in the order of ids
    contents: list[str] = field(default_factory=list)
    kind: str | None = None
    project: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"ids": self.ids, "reason": self.reason, "words": self.words,
                "details": self.details, "contents": self.contents, "kind": self.kind,
                "project": self.project}


def conflict(a: Side, b: Side) -> Conflict | None:
    """The first conflict between two notes (of one kind and project), or None; the older
    note first, in its ids, details and reason."""
    if a.id > b.id:
        a, b = b, a
    for neg, pos in ((a, b), (b, a)):
        found = _negation(neg, pos)
        if found:
            return _ordered(neg, pos, *found)
    for ca in a.clauses:
        for cb in b.clauses:
            found = _numbers(a, ca, b, cb)
            if found:
                return _ordered(a, b, *found)
    return None


def _ordered(x: Side, y: Side, reason: str, words: list[str], dx: str, dy: str) -> Conflict:
    if x.id > y.id:
        x, y, dx, dy = y, x, dy, dx
    return Conflict([x.id, y.id], reason, words, [dx, dy], [x.content, y.content])


# A positive detail may say this many words more than the negated one (`I drink coffee every
# morning` / `I no longer drink coffee`), when the negated one holds two content words or
# more; a one-word negation (`sans sucre`, `John: No way`) must meet the same single word.
MAX_EXTRA_WORDS = 2


def _negation(neg: Side, pos: Side) -> tuple[str, list[str], str, str] | None:
    for c in neg.clauses:
        found = _negated_clause(c, neg, pos)
        if found:
            return found
    return None


def _negated_clause(c: Clause, neg: Side, pos: Side) -> tuple[str, list[str], str, str] | None:
    """Does the negated detail `c` of `neg` deny a positive detail of `pos`? The detail's words
    (with its note's label) are all stated by one positive detail of `pos` (with its label),
    which says at most MAX_EXTRA_WORDS more."""
    if not c.negated:
        return None
    reason = f"negation: {c.negations[0]}"
    if c.bare:
        # `Allergies : aucune`: the negation bears on the label itself (not `John: No`).
        if neg.label and neg.label == pos.label and set(c.negations) <= LABEL_NEGATIONS:
            for p in pos.clauses:
                if not p.negated:
                    return reason, list(c.negations), c.surface, p.surface
        return None
    if not c.scope:
        return None
    needed = c.content | neg.label
    # The allowance counts the details' own words: a label (`John:`) makes no detail longer.
    allowed = MAX_EXTRA_WORDS if len(c.content) >= 2 else 0
    for p in pos.clauses:
        if p.negated:
            continue
        stated = p.content | pos.label
        if needed <= stated and len(p.content - c.content) <= allowed:
            return reason, list(c.negations), c.surface, p.surface
    return None


def _names_a_thing(around: frozenset[str], c: Clause) -> bool:
    return any(len(w) >= 3 and w.isalpha() and w not in MONTHS and w not in c.values
               for w in around)


def _numbers(a: Side, ca: Clause, b: Side, cb: Clause) -> tuple[str, list[str], str, str] | None:
    if ca.negated != cb.negated or not ca.values or not cb.values:
        return None
    if ca.names | a.label_names != cb.names | b.label_names:
        return None
    around_a = ca.letters | a.label_all
    around_b = cb.letters | b.label_all
    small, large = sorted((around_a, around_b), key=len)
    if not small <= large:
        return None
    differ = [u for u in sorted(ca.values.keys() & cb.values.keys())
              if ca.values[u] != cb.values[u]]
    if not differ:
        return None
    # The thing itself must be named: a word of three letters or more that is not a unit or
    # a month; two of them for a date or a time (`Caroline on 8 May` / `Caroline on 11 May`
    # are two moments, `Dentist appointment on March 4` / `... March 14` one appointment).
    naming = {w for w in small if len(w) >= 3 and w.isalpha() and w not in MONTHS
              and w not in ca.values and w not in cb.values}
    if "" in differ and not (a.label and a.label == b.label):
        return None     # a bare number (`2022: Hey John`) is a value only under a label (`Port :`)
    when = all(u == "time" or u in MONTHS for u in differ)
    one_moment = len(differ) == 1 and around_a == around_b   # `Réunion le 3 / le 30 avril`
    if len(naming) < (MIN_NAMING_WHEN if when and not one_moment else MIN_NAMING):
        return None
    unit = differ[0]
    va, vb = ca.values[unit], cb.values[unit]
    shown = ca.units.get(unit) or ""
    glued = unit.startswith("^")
    left, right = ("/".join((shown if glued else "") + v for v in sorted(x - y) or sorted(x))
                   for x, y in ((va, vb), (vb, va)))
    reason = f"number: {left} / {right}" + (f" {shown}" if shown and not glued else "")
    return reason, sorted(va ^ vb), ca.surface, cb.surface


# --------------------------------------------------------------------------- the aggregation gate

def subject_conflict(entries: Sequence[Any]) -> Conflict | None:
    """The aggregation tier's `conflict` gate: the first conflicting pair in one subject."""
    sides = [s for s in (read_side(e) for e in entries) if s is not None]
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
    spaces: dict[tuple[str, str | None], list[tuple[Any, Side]]] = {}
    for e in entries:
        side = read_side(e)
        if side is not None:
            spaces.setdefault((e.kind, e.project), []).append((e, side))
    found: list[Conflict] = []
    for (k, p), members in spaces.items():
        for c in _space_conflicts([s for _, s in members]):
            c.kind, c.project = k, p
            found.append(c)
    found.sort(key=lambda c: c.ids)
    return ConflictReport(found, len(entries), round(time.perf_counter() - started, 4))


def _space_conflicts(sides: list[Side]) -> list[Conflict]:
    """Every conflicting pair of one kind and project. Each negated detail looks only at notes
    holding its rarest word (its partner states every word of it); each detail with a number
    at notes holding the rarest of its words around the number (one of the two contexts holds
    the other, so the pair is found from the smaller one's side)."""
    postings: dict[str, list[int]] = {}
    for i, s in enumerate(sides):
        for w in s.words:
            postings.setdefault(w, []).append(i)
    found: dict[tuple[int, int], Conflict] = {}

    def candidates(i: int, key: frozenset[str]) -> Iterable[int]:
        lists = [postings.get(w, ()) for w in key]
        if not lists or not all(lists):
            return ()
        return (j for j in min(lists, key=len) if j != i and key <= sides[j].words)

    for i, s in enumerate(sides):
        for c in s.clauses:
            if c.negated:
                for j in candidates(i, c.content | s.label):
                    pair = (min(i, j), max(i, j))
                    if pair not in found:
                        hit = _negated_clause(c, s, sides[j])
                        if hit:
                            found[pair] = _ordered(s, sides[j], *hit)
            if c.values:
                around = frozenset(w for w in c.letters | s.label_all if not w[0].isdigit())
                if not _names_a_thing(around, c):
                    continue   # nor can any partner: its words around would be a subset
                units = c.values.keys()
                for j in candidates(i, around):
                    pair = (min(i, j), max(i, j))
                    if pair in found:
                        continue
                    for d in sides[j].clauses:
                        hit = (_numbers(s, c, sides[j], d) if d.values and not
                               units.isdisjoint(d.values) else None)
                        if hit:
                            found[pair] = _ordered(s, sides[j], *hit)
                            break
    return [found[k] for k in sorted(found)]


def against(store: "Store", entry: "Entry") -> list[Conflict]:
    """The active entries `entry` may contradict (same kind and project), found through the
    word index: its REMEMBER_WORDS rarest words (by count; no admission rule, no stopword
    list) in one word query of REMEMBER_CANDIDATES rows."""
    from ..store import rag
    from ..recall import channels

    side = read_side(entry)
    if side is None:
        return []
    words = [w for w in dict.fromkeys(rag.query_words(store, entry.content))
             if (w[0].isdigit() or len(w) >= 3) and w not in NEGATIONS]
    # The rarest of them, by the store's own counts (a partner shares most of them; a word in
    # this entry only finds nothing): a short word query, whatever the store's size.
    counts = rag.word_counts(store, words)
    words = sorted((w for w in words if counts.get(w, 0) >= 2), key=lambda w: counts[w])
    hits = channels.search_lexical(store, words[:REMEMBER_WORDS], k=REMEMBER_CANDIDATES,
                              project=entry.project, kind=entry.kind)
    rows = rag.entries_by_id(store, [i for i, _ in hits if i != entry.id])
    out = []
    for other in rows.values():
        if other.superseded_by is not None or other.project != entry.project \
                or other.kind != entry.kind:
            continue
        o = read_side(other)
        found = conflict(side, o) if o is not None else None
        if found:
            found.kind, found.project = entry.kind, entry.project
            out.append(found)
    out.sort(key=lambda c: c.ids)
    return out



# --------------------------------------------------------------------------- remember (A8)

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
            out.append(f'#{other} may say otherwise: "{text}" ({c.reason}; '
                       f"forge memory supersede {other} --by {self.id} if this replaces it)")
        return out


def remember(store: "Store", kind: str | None, content: str, *, project: str | None = None,
             source: str = "remember", refs: dict | None = None,
             replaces: Sequence[int] = (), created: str | None = None) -> Noted:
    """`rag.remember` (with `replaces`: insert and link in one transaction; `created`: when
    it happened), then the active entries the new one may contradict. The entry is written
    either way."""
    from ..store import rag

    result = rag.remember(store, kind, content, project=project, source=source, refs=refs,
                          replaces=replaces, created=created)
    return _noted(store, result)


def remember_many(store: "Store", items: list[Any], **kwargs: Any) -> list[Noted]:
    """`rag.remember_many`, then each new entry's conflicts (the batch's own entries included:
    they are written first)."""
    from ..store import rag

    return [_noted(store, r) for r in rag.remember_many(store, items, **kwargs)]


def _noted(store: "Store", result: Any) -> Noted:
    from ..store import rag

    found: list[Conflict] = []
    if result.created:
        found = against(store, rag.get_entry(store, result.id))
    return Noted(result.id, result.created, list(result.replaced), found,
                 dict(result.secrets_redacted))
