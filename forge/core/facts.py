"""Two notes read as facts: what each one is about, and whether they say otherwise about the same
thing. The one reading shared by `forge memory conflicts` (forge/memory/conflicts.py: a whole
store, `forge remember`'s note, the aggregation gate) and recall's newer of two facts first
(forge/recall/timeline.py); pure functions of the notes' text, no store, no embedding.

A note is read as the aggregation tier reads it (an optional label, comma-separated
details; the first detail is its *head*, which says what the note is about). Two notes of one
kind and project *conflict* when they are about the same thing and

- **negation**: a detail of one is negated and every content word of it (its label's and its
  head's words included) is stated, without a negation, by the other note (its label, its head
  and a positive detail), which says at most two content words more than the negating note
  states (none more when the negated detail holds one word): `never 16 GB RAM` / `16 GB RAM`;
  `Le NiPoGi n'a pas 32 Go` / `Le NiPoGi a 32 Go`; `Allergies : pas d'arachides` / `Allergies :
  arachides`; `Coffee, black, no sugar` / `Coffee with sugar`. When both notes
  name the thing (below), the detail's own words suffice (`Home server: Proxmox, never GPU
  passthrough` / `Home server: Proxmox, GPU passthrough`). A negated detail with no word of its
  own (`Allergies : aucune`) conflicts with any positive detail under the same label; a
  one-word negation of nothing named (`No way` / `Way to go`) with none. A detail that brings
  its own negation as something new (`Thé vert` / `Thé vert, sans sucre`: `sucre` is stated
  nowhere else) is an addition, not a conflict. What follows `mais`/`but` is stated, not denied.
- **number**: two details of the same polarity give different values for *the same thing*:
  the same unit (the word right after the number: `Go`, `avril`, `Go` and `GB` being one; the
  letters glued before it: `v3`; a month before a day at the end: `April 3`; a time: `03:00`),
  the same numbers that name which thing (see below), the same words measured (the detail's
  own words, without what either note says it of, its label, head and names: `RAM : 8 Go`
  measures nothing the label does not say, `SSD 512 Go` the SSD), and either the same context (the words around the number, label and head
  included, one detail's set inside the other's, their subjects sharing a word that names the
  thing: three letters or more, not a unit, not a month; two of them when the values are dates
  or times) or the same named thing. `8 Go de RAM` / `64 Go de RAM`, `Forge v3` / `Forge v4`,
  `Réunion de chantier le 3 avril` / `... le 30 avril`, `Laptop: ThinkPad T14, 16 GB RAM` /
  `ThinkPad T14: 32 GB RAM after the upgrade`; not `Caroline on 8 May` / `Caroline on 11 May`,
  nor `at 7:55 pm on 9 June` / `at 4:33 pm on 12 July` (two moments: a date or a time compares
  details that give values of the same units). A number that names which thing is not a value:
  after `numéro`, `number`, `no`, `n°`, `#`, or alone at the end of a detail after a word
  (`disque 1` / `disque 2`, `serveur numéro 3`; not a number with a decimal point or dots,
  `192.168.1.10`, `8.2`): those must be equal, never compared. A number spelled out in
  English or French before a word (`quatre disques`, `six ans`, `two kids`; from two to
  twenty, and the tens to sixty; not `one`/`un`, `neuf`, `seize`) is that number.

The same thing, by name: a note's *names* are the words that name a thing in its label, its
head and the detail at hand: a word written with a capital inside the notes compared (`Raspberry
Pi`, `Synology`, `NiPoGi`; the note's first word only when the notes compared write it so
further inside a note), letters followed by digits (`T14`, `DS920+`) or digits followed by one
capital (`5500U`); not a word in capitals only (`NAS`, `RAM`), a unit, a month, a day, a version
(`v3`), nor a word the notes compared also write in lowercase. Two notes that each name a thing
the other does not are two things (`Desktop: Ryzen tower` / `Desktop: Mac mini M2`, `ThinkPad
T14` / `ThinkPad X13`); two notes that share a name, and where one says what it is about inside
the other's words (`Ryzen tower:` / `Desktop: Ryzen 7 7700 tower,`; not `Desktop: Ryzen tower`
/ `Matériel : Ryzen 5500U`), are one named thing.

Negations (closed lists, English and French, independent of any stopword list: core/words.py):
not, no, never, without, none, nor, n't, no longer, pas, jamais, sans, aucun, aucune, ni, non,
and `plus` only after `ne`/`n'` in the same detail. Content words: letter runs of three or more
and numbers, case and accents folded, a final plural `s` dropped; the negations, `ne`/`n'`,
`longer` after `no` and `do/does/did` before `not` are grammar, not content, and so are the
closed list GRAMMAR (articles, `with`/`avec`, `has`/`is`/`est`, `s'appelle`/`called`);
`has/have/had`, `is/are/was/were` are one word each. The same thing in two languages: the
closed list SAME_THING reads the French words notes use for things (`serveur`, `maison`,
`disque`, `mémoire`, `onduleur`, `anniversaire`, the months...) as the English ones, so
`Serveur maison : Proxmox` and `Home server: Proxmox` share their words; names are not
translated.

What a note is about, said first (`said_first`: its label's first word, or its head's, that
is not an article, a possessive, grammar or a word saying how often; a common noun, written in
lowercase somewhere in the notes compared, never a name) gives two more readings: one value of
one unit for the thing both notes say first (`Loyer : 850 €` / `Le loyer de 980 € est prélevé
le 3 du mois`; an hour only undated: `Backup at 04:30 every night` / `Backups, restic, 03:00`),
and a kind denied against a note about one of its members (KINDS: `Animaux : aucun` / `Le chat
s'appelle Pixel`, `We don't have a dog` / `Chien : Rex`).

`read_side` reads a note, `evidence` how the notes compared write their words, `conflict`
the first conflict between two notes.
"""
from __future__ import annotations

import functools
import re
import unicodedata
from typing import Any, Iterable

from .notes import parse_note
from .words import MARKS, NEGATIONS

LABEL_NEGATIONS = frozenset({"aucun", "aucune", "none", "never", "jamais"})
FRENCH_NE = frozenset({"ne", "n"})            # `plus` negates only after one of these
EN_DO = frozenset({"do", "does", "did"})      # grammar when right before `not`
TURNS = frozenset({"mais", "but"})            # after a negation: what follows is stated
SAME_WORD = {"has": "have", "had": "have", "is": "be", "are": "be", "was": "be", "were": "be"}
NUMBERING = frozenset({"numero", "number", "num", "nr"})
# One unit, two spellings: the French byte units are the English ones (`16 Go` = `16 GB`).
SAME_UNIT = {"ko": "kb", "mo": "mb", "go": "gb", "to": "tb"}
VERSION = frozenset({"version", "v", "release", "build"})
MONTHS = frozenset({
    "january", "february", "march", "april", "may", "june", "july", "august", "september",
    "october", "november", "december", "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep",
    "sept", "oct", "nov", "dec", "janvier", "fevrier", "mars", "avril", "mai", "juin", "juillet",
    "aout", "septembre", "octobre", "novembre", "decembre"})
# The words around a number name the thing when at least this many of them are words of three
# letters or more that are neither a unit nor a month (a date or a time needs two).
MIN_NAMING, MIN_NAMING_WHEN = 1, 2
# The words notes use for things, read as one word in English and French (a closed list: its
# French words, folded and without a plural `s`, read as the English ones; `memory` and
# `mémoire` as `ram`, what they mean beside a size): two notes about one thing in two languages
# share its words (`Home server: Proxmox` / `Serveur maison : Proxmox`). Words that are also
# another English word (`chat`, `café`, `pain`, `vin`, `mère`, `cave`; `thé` folded to `the`,
# `mois` cut to `moi`) are not in it: an English note would read as another.
SAME_THING = {
    # machines and the home network
    "serveur": "server", "maison": "home", "disque": "disk", "memoire": "ram", "memory": "ram",
    "onduleur": "ups", "sauvegarde": "backup", "ordinateur": "computer", "telephone": "phone",
    "imprimante": "printer", "routeur": "router", "ecran": "screen", "clavier": "keyboard",
    "reseau": "network", "fibre": "fiber", "stockage": "storage", "processeur": "processor",
    "batterie": "battery", "carte": "card", "logiciel": "software", "cle": "key",
    "jour": "day",
    # home, family, health, money
    "voiture": "car", "velo": "bike", "jardin": "garden", "toit": "roof",
    "porte": "door", "fenetre": "window", "chaudiere": "boiler", "loyer": "rent",
    "facture": "bill", "assurance": "insurance", "banque": "bank", "compte": "account",
    "medecin": "doctor", "docteur": "doctor", "dentiste": "dentist", "vaccin": "vaccine",
    "allergie": "allergy", "allergique": "allergy", "allergic": "allergy", "animaux": "animal", "chien": "dog", "enfant": "child",
    "frere": "brother", "soeur": "sister", "pere": "father", "mari": "husband",
    "ecole": "school", "travail": "work", "reunion": "meeting", "anniversaire": "birthday",
    "voyage": "trip", "vacance": "holiday", "billet": "ticket", "avion": "plane",
    "prix": "price", "semaine": "week", "annee": "year", "ans": "year", "heure": "hour",
    "matin": "morning", "soir": "evening", "nuit": "night", "chaque": "every",
    # what people eat and drink
    "sucre": "sugar", "lait": "milk", "arachide": "peanut", "viande": "meat",
    "poisson": "fish", "oeuf": "egg", "fromage": "cheese", "biere": "beer",
    # months and days
    "janvier": "january", "fevrier": "february", "mar": "march", "avril": "april",
    "mai": "may", "juin": "june", "juillet": "july", "aout": "august", "septembre": "september",
    "octobre": "october", "novembre": "november", "decembre": "december", "lundi": "monday",
    "mardi": "tuesday", "mercredi": "wednesday", "jeudi": "thursday", "vendredi": "friday",
    "samedi": "saturday", "dimanche": "sunday"}
# Numbers spelled out, English and French, read as digits when a word follows them (`quatre
# disques` = `4 disques`, `six ans`): not `one`/`un`/`une` (articles), `neuf` (new), `seize`.
SPELLED = {w: str(n) for n, words in enumerate((
    (), (), ("two", "deux"), ("three", "trois"), ("four", "quatre"), ("five", "cinq"),
    ("six",), ("seven", "sept"), ("eight", "huit"), ("nine",), ("ten", "dix"),
    ("eleven", "onze"), ("twelve", "douze"), ("thirteen", "treize"),
    ("fourteen", "quatorze"), ("fifteen", "quinze"), ("sixteen",), ("seventeen",),
    ("eighteen",), ("nineteen",), ("twenty", "vingt"))) for w in words}
SPELLED.update({"thirty": "30", "trente": "30", "forty": "40", "quarante": "40",
                "fifty": "50", "cinquante": "50", "sixty": "60", "soixante": "60"})
# Grammar, not content, though three letters long: articles, `with`/`avec`, the verbs that
# only join a thing to what is said of it (`has`, `is`, `est`) or to its name (`s'appelle`).
# A word saying a thing is switched on says no more than having it (`n'a pas d'IPv6 activé` /
# `IPv6`): grammar too.
GRAMMAR = frozenset({"the", "les", "des", "une", "aux", "with", "avec", "have", "be", "est",
                     "sont", "ont", "appelle", "called", "named", "nomme",
                     "enabled", "activated", "active", "activee"})

# What a note is about, said first: its label's first word, or its head's, that is not an
# article, a possessive or a word saying how often (`Our dog Biscuit` -> dog, `Nightly backup
# at 03:00` -> backup, `Le loyer de 980 €` -> loyer); none when a number comes first.
DETERMINERS = frozenset({"the", "our", "your", "his", "her", "their", "its", "this", "that",
                         "these", "those", "les", "une", "des", "mon", "mes", "ton", "tes",
                         "son", "ses", "notre", "nos", "votre", "vos", "leur", "leurs", "cet",
                         "cette", "ces"})
RECURRING = frozenset({"every", "each", "nightly", "daily", "weekly", "monthly", "yearly",
                       "chaque", "tous", "toutes", "quotidien", "quotidienne", "hebdomadaire",
                       "mensuel", "mensuelle"})
# A kind and its members, as the notes say them (stems: plural `s` dropped, the French words of
# SAME_THING read as the English ones): a note denying the kind (`Animaux : aucun`, `We don't
# have a dog`) says otherwise than a note about one of them, said first (`Le chat s'appelle
# Pixel`, `Our dog Biscuit...`). Every word is also a kind of itself (`Allergies: none` /
# `I'm allergic to penicillin`).
_PETS = frozenset({"dog", "cat", "chat", "chatte", "chaton", "kitten", "chiot", "puppy",
                   "lapin", "rabbit", "hamster", "cheval", "horse", "perroquet", "parrot",
                   "tortue", "turtle", "furet", "ferret"})
KINDS = {"animal": _PETS, "pet": _PETS, "dog": frozenset({"chiot", "puppy"}),
         "cat": frozenset({"chat", "chatte", "chaton", "kitten"})}

_NT = re.compile(r"(?<=[a-z])n['\u2019]t\b")
_TOKEN = re.compile(r"\d+(?:[.,:h]\d+)*|[^\W\d_]+|[%€$£°]", re.UNICODE)


def _fold(text: str) -> str:
    text = text.casefold()
    if not text.isascii():   # most notes are: no accents to strip
        text = MARKS.sub("", unicodedata.normalize("NFKD", text))
    return _NT.sub(" not", text.replace("cannot", "can not"))


@functools.lru_cache(maxsize=65536)
def _stem(word: str) -> str:
    word = SAME_WORD.get(word, word)
    if len(word) > 3 and word.endswith("s"):
        word = word[:-1]
    return SAME_THING.get(word, word)


def _content(word: str) -> bool:
    return word[0].isdigit() or len(word) >= 3


def _number(raw: str) -> str:
    return raw.replace(",", ".")


# Plain classes, not dataclasses: recall imports this module on its no-time path, where five
# dataclasses cost about 7 ms to define.
class Clause:
    """One detail, read for conflicts."""

    __slots__ = ("surface", "negations", "content", "scope", "letters", "names", "values",
                 "units", "bare", "before")

    def __init__(self, surface: str, negations: list[str], content: frozenset[str],
                 scope: frozenset[str], letters: frozenset[str], names: frozenset[str],
                 values: dict[str, frozenset[str]], units: dict[str, str] | None = None,
                 bare: bool = False, before: frozenset[str] = frozenset()):
        self.surface = surface
        self.negations = negations      # the negation words, as folded
        self.content = content          # content stems (negations and grammar out)
        self.scope = scope              # content stems after the first negation
        self.letters = letters          # every letter word's stem (the words around)
        self.names = names              # numbers that name which thing
        self.values = values            # unit -> the values given for it
        self.units = units or {}        # unit -> its surface
        self.bare = bare                # nothing but negation words (`aucune`, `none`)
        self.before = before            # the words before its first value, and its unit

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
    for i, (t, start, end) in enumerate(spans[:-1]):
        nxt = spans[i + 1]
        if t in SPELLED and nxt[0][0].isalpha() and not text[end:nxt[1]].strip():
            spans[i] = (SPELLED[t], start, end)     # `quatre disques` is `4 disques`
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
    before: frozenset[str] | None = None
    first_neg = negs[0] if negs else len(toks)
    # `n'a pas 8 To utiles mais 12 To`: what follows `mais`/`but` is said, not denied
    turn = next((i for i in range(first_neg, len(toks)) if toks[i] in TURNS), len(toks))
    for i, (t, start, end) in enumerate(spans):
        if i in negs or i in grammar:
            continue
        if i >= turn:
            if t.isalpha():
                letters.add(_stem(t))
            continue
        if t[0].isdigit():
            role, unit, unit_surface = _number_role(text, surface, spans, i)
            if role == "name":
                names.add(_number(t))
            else:
                values.setdefault(unit, set()).add(_number(t))
                units.setdefault(unit, unit_surface)
                if before is None and unit:   # the words before it, and its unit: a
                    before = frozenset(letters | {unit})   # `Ryzen 7 7700 tower` is a tower
            stem = _number(t)
        elif t.isalpha():
            stem = _stem(t)
            letters.add(stem)
        else:
            letters.add(t)     # a unit symbol (%, €) is a word around a number
            continue
        if _content(t) and stem not in GRAMMAR:
            content.add(stem)
            if i > first_neg:
                scope.add(stem)
    return Clause(surface, [toks[i] for i in negs], frozenset(content), frozenset(scope),
                  frozenset(letters), frozenset(names),
                  {u: frozenset(v) for u, v in values.items()}, units,
                  bare=bool(negs) and len(negs) + len(grammar) == len(toks),
                  before=frozenset(letters) if before is None else before)


# A number between a name and one of these words names which thing (a model), it measures
# nothing: `Le Raspberry Pi 4 a 4 Go`, `The Dell XPS 13 has 32 GB`, `Pi 3 du salon`.
JOINING = frozenset({"a", "has", "have", "is", "est", "du", "in", "of", "at", "with", "avec",
                     "dans", "en"})
_DIGIT = re.compile(r"\d")
_DOTTED = re.compile(r"\d[.,]\d")   # `192.168.1.10`, `8.2`: a value, never which thing


def _plain_clause(surface: str, text: str) -> Clause | None:
    """The common case, read without walking tokens: no number and no negation word."""
    toks = set(_TOKEN.findall(text))
    if not toks.isdisjoint(NEGATIONS) or ("plus" in toks and not toks.isdisjoint(FRENCH_NE)) \
            or not toks.isdisjoint(SPELLED):
        return None
    kept = [(t, _stem(t)) for t in toks if t not in FRENCH_NE]
    words = frozenset(w for _, w in kept)
    content = frozenset(w for t, w in kept if t.isalpha() and len(t) >= 3 and w not in GRAMMAR)
    return Clause(surface, [], content, frozenset(), words, frozenset(), {}, {}, before=words)


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
    if prev is not None and prev[2] < start and nxt is not None and nxt[0] in JOINING \
            and len(surface) == len(text) and surface[prev[1]].isupper() \
            and not surface[prev[1]:prev[2]].isupper():
        return "name", "", ""               # `Raspberry Pi 4 a 4 Go`, `Dell XPS 13 has 32 GB`
    if nxt is not None and not nxt[0][0].isdigit() and not text[end:nxt[1]].strip():
        unit = _stem(nxt[0])                                              # 8 Go, 3 avril, 90 %
        return "value", SAME_UNIT.get(unit, unit), _surface(surface, text, nxt)
    at_end = nxt is None or text[end:nxt[1]].strip() not in ("", "%", "€", "$", "£", "°")
    if prev is not None and prev[0].isalpha() and at_end:                 # at the end
        if prev[0] in MONTHS or prev[0] in VERSION:
            return "value", _stem(prev[0]), prev[0]
        if not _DOTTED.search(t):
            return "name", "", ""                                         # disque 1
    return "value", "", ""


def _surface(surface: str, folded: str, span: tuple) -> str:
    # NFKD + casefold may change lengths; the folded token is the unit's name when it does.
    return surface[span[1]:span[2]] if len(surface) == len(folded) else span[0]


# --------------------------------------------------------------------------- subjects

# What names a thing in a note (a model, a host, a person, a product): a word written with a
# capital inside the note (`Raspberry Pi`, `Synology`, `NiPoGi`), letters followed by digits
# (`T14`, `M2`, `DS920+`, `CX22`) or digits followed by one capital (`5500U`). Not a name: a
# word in capitals only (`NAS`, `RAM`, `HP`: mostly kinds of things and units), a unit after a
# number (`8 Go`), a month or a day, a version (`v3`), a word the notes compared also write in
# lowercase (`Desktop:` / `the desktop`), and the note's first word unless the notes compared
# write it with a capital further inside a note (`Ryzen tower: ...` / `Desktop: Ryzen tower,
# ...`): a first word is capitalised anyway.
WEEKDAYS = frozenset({"monday", "tuesday", "wednesday", "thursday", "friday", "saturday",
                      "sunday", "lundi", "mardi", "mercredi", "jeudi", "vendredi", "samedi",
                      "dimanche"})
WEEKDAY_STEMS = frozenset(SAME_THING.get(d, d) for d in WEEKDAYS)
_SURFACE = re.compile(r"[^\W_]+", re.UNICODE)
_MODEL = re.compile(r"[^\W\d_]\d|^\d+[A-Z]$")


class Evidence:
    """How the notes compared write their words: which ones appear in lowercase, which ones
    with a capital after a note's first word (what tells a name from a capitalised first word)."""

    __slots__ = ("lower", "inner", "_lower_stems")

    def __init__(self, lower: frozenset[str] = frozenset(), inner: frozenset[str] = frozenset()):
        self.lower = lower
        self.inner = inner
        self._lower_stems: frozenset[str] | None = None

    def common(self, stem: str) -> bool:
        """The notes compared write this word (as compared: `_stem`) in lowercase somewhere:
        a common noun, not a person (`Caroline: ...`)."""
        if self._lower_stems is None:
            self._lower_stems = frozenset(map(_stem, self.lower))
        return stem in self._lower_stems


def evidence(contents: Iterable[str]) -> Evidence:
    lower: set[str] = set()
    inner: set[str] = set()
    for content in contents:
        toks = _SURFACE.findall(content)
        lower.update(t for t in toks if t.islower())
        inner.update(t for t in toks[1:] if t[0].isupper() and not t.isupper())
    return Evidence(frozenset(map(_fold_word, lower)), frozenset(map(_fold_word, inner)))


@functools.lru_cache(maxsize=65536)
def _fold_word(word: str) -> str:
    word = word.casefold()
    return word if word.isascii() else MARKS.sub("", unicodedata.normalize("NFKD", word))


def _names(surface: str, first: bool, seen: Evidence) -> frozenset[str]:
    """The words of `surface` (a label or a detail) that name a thing; `first`: it starts the
    note, so its first word is a name only on the evidence of the notes compared."""
    out: set[str] = set()
    prev_end, prev_digit = -1, False
    for n, m in enumerate(_SURFACE.finditer(surface)):
        tok = m.group()
        after_number = prev_digit and not surface[prev_end:m.start()].strip()
        prev_end, prev_digit = m.end(), tok[-1].isdigit()
        folded = _fold_word(tok)
        if len(tok) < 2 or after_number or folded in MONTHS or folded in WEEKDAYS:
            continue
        if _MODEL.search(tok):
            if tok.rstrip("0123456789").lower() not in VERSION:
                out.add(folded)
        elif tok[0].isupper() and not tok.isupper() and folded not in seen.lower:
            if not (first and n == 0) or folded in seen.inner or \
                    any(c.isupper() for c in tok[1:]):
                out.add(folded)
    return frozenset(out)


def _different(a: frozenset[str], b: frozenset[str]) -> bool:
    """Two things by name: each note names one the other does not (`Ryzen tower` / `Mac mini
    M2`, `ThinkPad T14` / `ThinkPad X13`); a note that names nothing contradicts nothing."""
    return bool(a - b) and bool(b - a)


def _named_alike(a: "Side", i: int, b: "Side", j: int) -> bool:
    """Details i of `a` and j of `b` are about one named thing: a name both notes give, and
    where each says what it is about (label, head, the words before the value) one holds the
    other's words (`Ryzen tower:` / `Desktop: Ryzen tower,` one thing; `Desktop: Ryzen tower`
    / `Matériel : Ryzen 5500U` two)."""
    if not a.names[i] & b.names[j]:
        return False
    sa, sb = (frozenset(w for w in side.subject(n) if len(w) >= 3 and w.isalpha()
                        and w not in MONTHS and w not in side.clauses[n].values
                        and not any(w in name for name in side.names[n]))
              for side, n in ((a, i), (b, j)))
    return sa <= sb or sb <= sa


# --------------------------------------------------------------------------- notes

class Side:
    """A note as the conflict rules read it. Its head (the first detail, which names what
    the note is about) is part of every other detail's context: `Desktop: Ryzen tower, 64 GB
    RAM` says 64 GB of the Ryzen tower's RAM."""

    __slots__ = ("id", "content", "label", "label_all", "label_names", "clauses", "words",
                 "names", "thing", "common", "_attributes")

    def __init__(self, id: int, content: str, label: frozenset[str], label_all: frozenset[str],
                 label_names: frozenset[str], clauses: list[Clause],
                 words: frozenset[str] = frozenset(), names: list[frozenset[str]] | None = None,
                 thing: str | None = None, common: bool = False):
        self.id = id
        self.content = content
        self.label = label                # the label's content stems
        self.label_all = label_all        # every word stem and number of the label
        self.label_names = label_names    # the label's numbers: they name which thing (`disque 1 :`)
        self.clauses = clauses
        self.words = words                # every word of the note (candidate checks)
        self.names = names or []          # per detail: label, head, its own
        self.thing = thing                # what it is about, said first (`said_first`)
        self.common = common              # ... a word the notes compared write in lowercase
        self._attributes: dict[int, frozenset[str]] = {}

    def around(self, i: int) -> frozenset[str]:
        """Detail i's context: its words, the label's, and the head's when it is not the head."""
        c = self.clauses[i]
        return c.letters | self.label_all | (self.clauses[0].letters if i else frozenset())

    def subject(self, i: int) -> frozenset[str]:
        """Where detail i says what it is about: the label, the head (its words before its
        first value), its own words before its first value."""
        return self.clauses[i].before | self.label_all | (self.clauses[0].before if i else
                                                          frozenset())

    def said_of(self, i: int) -> frozenset[str]:
        """What detail i is said of: the label's words, the names, the head's words."""
        return self.label_all | self.names[i] | (self.clauses[0].letters if i else frozenset())

    def attribute(self, i: int) -> frozenset[str]:
        """What detail i measures, without what it is said of: its words of three letters or
        more that are not grammar, a unit, a month, a name or a word of the label or the head
        (`32 GB RAM since the DIMM died` -> ram, since, dimm, died). Kept once read."""
        known = self._attributes.get(i)
        if known is None:
            c = self.clauses[i]
            subject = self.said_of(i)
            known = self._attributes[i] = frozenset(
                w for w in c.letters if len(w) >= 3 and w.isalpha() and w not in MONTHS
                and w not in c.values and w not in subject and w not in GRAMMAR)
        return known

    def stated(self, i: int) -> frozenset[str]:
        """The content words detail i states, with the label's and the head's."""
        return self.clauses[i].content | self.label | (self.clauses[0].content if i else
                                                       frozenset())


def read_side(entry: Any, seen: Evidence | None = None) -> Side | None:
    """`entry` read for conflicts; `seen`: how the notes compared write their words (the
    entry's own when not given)."""
    note = parse_note(entry)
    if note is None:
        return None
    seen = seen or evidence([entry.content])
    label = read_clause(note.label.rstrip().rstrip(":")) if note.label else None
    # a label's numbers name which thing (`disque 1 :`); one glued to letters is part of a
    # name the names rule reads (`ThinkPad T14:`)
    names = (label.names | frozenset().union(*(v for u, v in label.values.items()
                                               if not u.startswith("^"))))\
        if label else frozenset()
    clauses = [read_clause(d) for d in note.details]
    label_all = (label.letters | names) if label else frozenset()
    own = [_names(d, i == 0 and label is None, seen) for i, d in enumerate(note.details)]
    common = (_names(note.label, True, seen) if label else frozenset()) | own[0]
    words = frozenset(label_all.union(*(c.letters | c.content for c in clauses), common, *own))
    thing = said_first(note.label or note.details[0])
    if thing is not None and thing[1] in common:
        thing = None      # a name (`Caroline: ...`): a person's values are moments
    return Side(entry.id, entry.content, label.content if label else frozenset(), label_all,
                names, clauses, words, [common | n for n in own], thing and thing[0],
                bool(thing) and seen.common(thing[0]))


def said_first(surface: str) -> tuple[str, str] | None:
    """What a label or a head is about, said first: (its stem, the word as folded), or None
    when a number comes before it (`La 308 a 131 000 km`)."""
    for t in _TOKEN.findall(_fold(surface)):
        if t[0].isdigit():
            return None
        if len(t) >= 3 and t.isalpha() and t not in DETERMINERS and t not in RECURRING \
                and t not in NEGATIONS and _stem(t) not in GRAMMAR:
            return _stem(t), t
    return None


class Conflict:
    """Two notes that say otherwise: `ids` older first, `reason` ("negation: never" |
    "number: 8 / 64 Go"), the words that differ, the two details and contents in the order of
    ids; `kind` and `project` set by the store's scan, which also puts the pair in the order
    of the notes' times and names in `time_unknown` a note whose time is unknown
    (memory/conflicts.in_time)."""

    __slots__ = ("ids", "reason", "words", "details", "contents", "kind", "project",
                 "time_unknown")

    def __init__(self, ids: list[int], reason: str, words: list[str], details: list[str],
                 contents: list[str] | None = None, kind: str | None = None,
                 project: str | None = None):
        self.ids = ids
        self.reason = reason
        self.words = words
        self.details = details
        self.contents = contents or []
        self.kind = kind
        self.project = project
        self.time_unknown: list[int] = []

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Conflict) and self.to_dict() == other.to_dict()

    def __repr__(self) -> str:
        return f"Conflict({self.to_dict()!r})"

    def to_dict(self) -> dict[str, Any]:
        out = {"ids": self.ids, "reason": self.reason, "words": self.words,
               "details": self.details, "contents": self.contents, "kind": self.kind,
               "project": self.project}
        if self.time_unknown:
            out["time_unknown"] = self.time_unknown
        return out


def conflict(a: Side, b: Side) -> Conflict | None:
    """The first conflict between two notes (of one kind and project), or None; the older
    note first, in its ids, details and reason."""
    if a.id > b.id:
        a, b = b, a
    for neg, pos in ((a, b), (b, a)):
        found = _negation(neg, pos)
        if found:
            return ordered(neg, pos, *found)
    for i in range(len(a.clauses)):
        for j in range(len(b.clauses)):
            found = numbers(a, i, b, j)
            if found:
                return ordered(a, b, *found)
    return None


def ordered(x: Side, y: Side, reason: str, words: list[str], dx: str, dy: str) -> Conflict:
    if x.id > y.id:
        x, y, dx, dy = y, x, dy, dx
    return Conflict([x.id, y.id], reason, words, [dx, dy], [x.content, y.content])


# A positive detail may say this many words more than the negated one (`I drink coffee every
# morning` / `I no longer drink coffee`), when the negated one holds two content words or
# more; a one-word negation (`sans sucre`, `John: No way`) must meet the same single word.
MAX_EXTRA_WORDS = 2


def _negation(neg: Side, pos: Side) -> tuple[str, list[str], str, str] | None:
    for i in range(len(neg.clauses)):
        found = negated_clause(neg, i, pos)
        if found:
            return found
    return None


def negated_clause(neg: Side, i: int, pos: Side) -> tuple[str, list[str], str, str] | None:
    """Does the negated detail i of `neg` deny a positive detail of `pos`? The detail's words
    (with its note's label and head) are all stated by one positive detail of `pos` (with its
    label and head), which says at most MAX_EXTRA_WORDS more, and the two notes do not name
    two different things."""
    c = neg.clauses[i]
    if not c.negated:
        return None
    reason = f"negation: {c.negations[0]}"
    if c.bare:
        # `Allergies : aucune`: the negation bears on the label itself (not `John: No`).
        if neg.label and neg.label == pos.label and set(c.negations) <= LABEL_NEGATIONS:
            for j, p in enumerate(pos.clauses):
                if not p.negated and not _different(neg.names[i], pos.names[j]):
                    return reason, list(c.negations), c.surface, p.surface
        if set(c.negations) <= LABEL_NEGATIONS and len(neg.label) == 1:
            return _member(neg, i, next(iter(neg.label)), pos)   # `Animaux : aucun`
        return None
    if not c.scope:
        return None
    if len(c.content) == 1 and not neg.label_all and c.content <= KINDS.keys():
        found = _member(neg, i, next(iter(c.content)), pos)      # `We don't have a dog`
        if found:
            return found
    # The allowance counts the details' own words: a label (`John:`) makes no detail longer.
    allowed = MAX_EXTRA_WORDS if len(c.content) >= 2 else 0
    for j, p in enumerate(pos.clauses):
        if p.negated or _different(neg.names[i], pos.names[j]):
            continue
        # the thing is the same when both notes name it (`Home server: Proxmox, never GPU
        # passthrough` / `Serveur maison : Proxmox, passthrough GPU`), else by its words
        if _named_alike(neg, i, pos, j):
            needed = c.content
        else:
            needed = neg.stated(i)
            if not allowed and needed == c.content:
                continue   # one word denied, of nothing named (`No way` / `Way to go`)
        if needed <= pos.stated(j) and len(p.content - neg.stated(i)) <= allowed:
            return reason, list(c.negations), c.surface, p.surface
    return None


def _member(neg: Side, i: int, kind: str, pos: Side) -> tuple[str, list[str], str, str] | None:
    """Detail i of `neg` denies a kind (`Animaux : aucun`, `We don't have a dog`); `pos` is
    about one of its members, said first and not denied (`Le chat s'appelle Pixel`), and the
    two name no two different things."""
    c, head = neg.clauses[i], pos.clauses[0]
    if pos.thing is None or (pos.thing != kind and pos.thing not in KINDS.get(kind, ())):
        return None
    if pos.thing in head.scope or (pos.label and head.negated) \
            or _different(neg.names[i], pos.names[0]):
        return None
    return f"negation: {c.negations[0]}", list(c.negations), c.surface, head.surface


def names_a_thing(around: frozenset[str], c: Clause) -> bool:
    return any(len(w) >= 3 and w.isalpha() and w not in MONTHS and w not in c.values
               for w in around)


def _naming(words: frozenset[str], ca: Clause, cb: Clause) -> set[str]:
    """The words that name the thing: three letters or more, not a unit, not a month."""
    return {w for w in words if len(w) >= 3 and w.isalpha() and w not in MONTHS
            and w not in ca.values and w not in cb.values}


def numbers(a: Side, i: int, b: Side, j: int) -> tuple[str, list[str], str, str] | None:
    """Two values for the same thing: in the same context or of one named thing
    (`_in_context`), or of the thing both notes are about, said first (`_said_first`)."""
    return _in_context(a, i, b, j) or _said_first(a, i, b, j)


def _said_first(a: Side, i: int, b: Side, j: int) -> tuple[str, list[str], str, str] | None:
    """Two values of one unit for the thing both notes are about, said first and not a name
    (`Loyer : 850 €` / `Le loyer de 980 € est prélevé le 3 du mois`; `Backup at 04:30 every
    night` / `Backups, restic, 03:00`): one value of that unit in each note, the same numbers
    naming which thing, the same names, and where each says what it is about (label, head, the
    words before the value) one inside the other; what follows the value (when it is debited,
    since when) is said of it. Not a date (two moments), not an hour when either note gives a
    date or both give different weekdays (`Yoga le mardi à 18:30` / `Yoga le jeudi à 19:00`)."""
    ca, cb = a.clauses[i], b.clauses[j]
    if not (a.common and b.common) or a.thing != b.thing or ca.negated != cb.negated \
            or ca.names | a.label_names != cb.names | b.label_names or a.names[i] != b.names[j]:
        return None
    differ = [u for u in ca.values.keys() & cb.values.keys() if ca.values[u] != cb.values[u]]
    if len(differ) != 1 or not differ[0] or differ[0] in MONTHS:
        return None
    unit = differ[0]
    if any(len(c.values.get(unit, ())) > (c is side.clauses[n])
           for side, n in ((a, i), (b, j)) for c in side.clauses):
        return None   # several values of the unit: which one is the thing's?
    if unit == "time":
        if any(u in MONTHS for side in (a, b) for c in side.clauses for u in c.values):
            return None
        days_a, days_b = (side.words & WEEKDAY_STEMS for side in (a, b))
        if days_a and days_b and days_a != days_b:
            return None
    sa, sb = (frozenset(w for w in side.subject(n) if len(w) >= 3 and w.isalpha()
                        and w != unit and w not in MONTHS and w not in GRAMMAR
                        and w not in RECURRING)
              for side, n in ((a, i), (b, j)))
    if not (sa <= sb or sb <= sa) or (a.label and not a.label <= sb) \
            or (b.label and not b.label <= sa):
        return None   # a label says which thing: `Loyer du garage :` is not `Le loyer`
    return _number_reason(ca, cb, unit)


def _in_context(a: Side, i: int, b: Side, j: int) -> tuple[str, list[str], str, str] | None:
    """Two values for the same thing. The same thing: two notes that name no two different
    things, the same unit, the same numbers naming which thing, and either the same context
    (one detail's words with its label and head inside the other's, their subjects sharing a
    word that names the thing) or the same named thing (a name both notes give, the same
    words measured)."""
    ca, cb = a.clauses[i], b.clauses[j]
    if ca.negated != cb.negated or not ca.values or not cb.values:
        return None
    differ = [u for u in sorted(ca.values.keys() & cb.values.keys())
              if ca.values[u] != cb.values[u]]
    if not differ or ca.names | a.label_names != cb.names | b.label_names:
        return None
    when = all(u == "time" or u in MONTHS for u in differ)
    if when and ca.values.keys() != cb.values.keys():
        return None   # `at 7:55 pm on 9 June` / `at 4:33 pm on 12 July`: two moments
    if _different(a.names[i], b.names[j]):
        return None
    # What is measured: the same words, or one detail's inside the other's when it has some
    # (`RAM : 8 Go` measures nothing the label does not say; `SSD 512 Go` measures the SSD).
    attr_a, attr_b = a.attribute(i) - b.said_of(j), b.attribute(j) - a.said_of(i)
    if not (attr_a == attr_b or (attr_a and attr_b and (attr_a <= attr_b or attr_b <= attr_a))):
        return None
    around_a, around_b = a.around(i), b.around(j)
    small, large = sorted((around_a, around_b), key=len)
    if small <= large:
        # The thing itself must be named, where each note says what it is about: a word of
        # three letters or more that is not a unit or a month; two of them for a date or a
        # time (`Caroline on 8 May` / `Caroline on 11 May` are two moments, `Dentist
        # appointment on March 4` / `... March 14` one appointment).
        naming = _naming(a.subject(i) & b.subject(j), ca, cb)
        if "" in differ and not (a.label and a.label == b.label):
            return None     # a bare number (`2022: Hey John`) is a value only under a label (`Port :`)
        one_moment = len(differ) == 1 and around_a == around_b   # `Réunion le 3 / le 30 avril`
        if len(naming) < (MIN_NAMING_WHEN if when and not one_moment else MIN_NAMING):
            return None
    else:
        if "" in differ or not _named_alike(a, i, b, j):
            return None
        if when and not (attr_a and attr_a == attr_b):
            return None   # two moments of one named thing, unless the same event is dated
    return _number_reason(ca, cb, differ[0])


def _number_reason(ca: Clause, cb: Clause, unit: str) -> tuple[str, list[str], str, str]:
    va, vb = ca.values[unit], cb.values[unit]
    shown = ca.units.get(unit) or ""
    glued = unit.startswith("^")
    left, right = ("/".join((shown if glued else "") + v for v in sorted(x - y) or sorted(x))
                   for x, y in ((va, vb), (vb, va)))
    reason = f"number: {left} / {right}" + (f" {shown}" if shown and not glued else "")
    return reason, sorted(va ^ vb), ca.surface, cb.surface




# --------------------------------------------------------------------------- a value changed

# Words that say a value changed (`mon forfait est maintenant chez Sosh`); not words of the note.
CHANGE_WORDS = frozenset({"now", "currently", "nowadays", "today", "maintenant", "desormais",
                          "actuellement", "dorenavant", "aujourd", "hui"})
# The value a note gives: at most this many words each (`Renault Clio 4` / `Peugeot 208`).
MAX_VALUE_WORDS = 3
_VALUE_TOKEN = re.compile(r"\d+(?:[.,:h]\d+)*|[^\W_]+|[%€$£°]", re.UNICODE)


def _value_words(surface: str) -> tuple[list[str], bool]:
    """A detail's words in order (case and accents folded, a name glued to its digits kept
    whole: `B2`, `T14`), the change words out; and whether it said one."""
    toks = _VALUE_TOKEN.findall(_fold(surface))
    kept = [t for t in toks if t not in CHANGE_WORDS]
    return kept, len(kept) != len(toks)


def changed_value(a: Side, b: Side) -> tuple[str, str] | None:
    """The value one note gives changed in the other, which says so: the same label and details
    but one, whose words differ in one place only, by at most MAX_VALUE_WORDS words each (names
    included: `mon forfait mobile est chez Bouygues` / `mon forfait mobile est maintenant chez
    Sosh`), one of the two saying the change (CHANGE_WORDS, which are not compared). The same
    thing: what comes before the value names it (a word of three letters or more that is not
    grammar, or the label, or the head); a head that differs while other details follow is
    another thing (the head is their context); a number that names which thing (`Camera #2`,
    `serveur numéro 3`) is no value. None, or the two values as written."""
    if a.label_all != b.label_all or len(a.clauses) != len(b.clauses):
        return None
    read = [(_value_words(x.surface), _value_words(y.surface))
            for x, y in zip(a.clauses, b.clauses)]
    if not any(said for pair in read for _, said in pair):
        return None
    differ = [i for i, ((x, _), (y, _)) in enumerate(read) if x != y]
    if len(differ) != 1 or (differ[0] == 0 and len(read) > 1):
        return None
    i = differ[0]
    (x, _), (y, _) = read[i]
    start = 0
    while start < min(len(x), len(y)) and x[start] == y[start]:
        start += 1
    end = 0
    while end < min(len(x), len(y)) - start and x[-1 - end] == y[-1 - end]:
        end += 1
    old, new = x[start:len(x) - end], y[start:len(y) - end]
    if not old or not new or max(len(old), len(new)) > MAX_VALUE_WORDS \
            or not NEGATIONS.isdisjoint(old + new):
        return None
    named = any(len(w) >= 3 and w.isalpha() and _stem(w) not in GRAMMAR and w not in MONTHS
                for w in x[:start])
    if not (named or a.label or i):
        return None   # `The NAS is in the garage` / `The car is now in the garage`
    numbering = a.clauses[i].names | b.clauses[i].names
    if {_number(w) for w in old + new} <= numbering:
        return None   # `Camera #2` / `Camera #3`: two cameras
    return " ".join(old), " ".join(new)


class Held:
    """What a note holds that a changed fact needs, read cheaply before the note itself."""

    __slots__ = ("words", "negation", "number", "change")

    def __init__(self, words: frozenset[str], negation: bool, number: bool, change: bool):
        self.words = words          # its words of two letters or more, as compared (`_stem`)
        self.negation = negation
        self.number = number
        self.change = change

    def may_change(self, other: "Held") -> bool:
        """Two notes state no changed fact (`changed_fact`) unless they share a word, and one
        holds a negation or a change word, or both a number."""
        return (self.negation or other.negation or self.change or other.change
                or (self.number and other.number)) and not self.words.isdisjoint(other.words)


def held(text: str) -> Held:
    toks = set(_VALUE_TOKEN.findall(_fold(text)))
    return Held(frozenset(_stem(t) for t in toks if len(t) >= 2 and t not in CHANGE_WORDS)
                - GRAMMAR,
                not toks.isdisjoint(NEGATIONS) or ("plus" in toks
                                                   and not toks.isdisjoint(FRENCH_NE)),
                bool(_DIGIT.search(text)) or not toks.isdisjoint(SPELLED),
                not toks.isdisjoint(CHANGE_WORDS))


def changed_fact(a: Side, b: Side) -> bool:
    """`a` and `b` (two notes of one kind and project) state a changed fact about the same
    thing: they conflict (`conflict`: a negation, two values for the same thing), or the value
    one gives changed in the other, which says so (`changed_value`). Recall's newer of two facts
    first reads this; `forge memory conflicts` lists conflicts only."""
    return changed_value(a, b) is not None or conflict(a, b) is not None
