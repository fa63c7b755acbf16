"""Time as people type it: WHEN (an ISO date or datetime, or a natural expression in English
or French) read as a window [since, until) of the stored UTC times, and a question's time
expression found, read and taken out of the question.

Calendar meaning, in the local time zone (the system's, `TZ` honoured, or `tz` where a caller
gives one), each window half-open: `yesterday`/`hier` is that day; `last week`/`la semaine
dernière` the previous Monday-to-Sunday week; `last month`/`le mois dernier` the previous
calendar month; `last year`/`l'année dernière` the previous calendar year; `two years
ago`/`il y a deux ans` that whole calendar year; `3 days ago` that day; `in March 2024`/`en
mars 2024` that month; `2024` that year; `since June`/`depuis juin` from June 1st (of this year,
or of last year while June is still ahead) on; `between March and May 2024`/`entre mars et mai
2024`, `from 2023 to 2024` from the start of the first to the end of the second.

What is whose: the grammar below finds an expression and its shape (point, since, range...);
dateparser (a kept library) reads each date in it as a moment and its granularity (day,
week, month, year); this module turns that into the calendar period. dateparser costs ~60 ms
of CPU to import and 40-90 ms for its first reading (its language data, and its time-zone
patterns compiled on first use), so it is imported only when the grammar found an expression:
`forge --help` and a question naming no time never load it, and an ISO date is read by the
standard library alone.

Stored times are UTC, `%Y-%m-%dT%H:%M:%S.%fZ` (core/timestamps.py): a window's bounds are
written the same way, so a store compares them as text.
"""
from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone, tzinfo
from typing import Any

from .errors import ForgeError

STAMP = "%Y-%m-%dT%H:%M:%S.%fZ"


class Window:
    """[since, until) in stored UTC times (None: open on that side) and the words it was read
    from (`from_query`: the question's own words; None for options). `unknown_time`: whether an
    entry whose time is unknown is searched (bounded by `until` only: a question's period, the
    store at --as-of) or left out (False: --since/--until filter known times). A plain class:
    importing this module is on every recall's path (a NamedTuple costs ~0.15 ms to create)."""

    __slots__ = ("since", "until", "from_query", "unknown_time")

    def __init__(self, since: str | None, until: str | None, from_query: str | None = None,
                 unknown_time: bool = False):
        self.since, self.until, self.from_query = since, until, from_query
        self.unknown_time = unknown_time

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Window) and \
            (self.since, self.until, self.from_query, self.unknown_time) == \
            (other.since, other.until, other.from_query, other.unknown_time)

    def __repr__(self) -> str:
        return f"Window({self.since!r}, {self.until!r}, {self.from_query!r})"

    def to_dict(self) -> dict[str, Any]:
        return {"since": self.since, "until": self.until, "from_query": self.from_query}

    def bounds(self) -> dict[str, str | None]:
        """The backend's filter arguments (`since`, `until`)."""
        return {"since": self.since, "until": self.until}

    def holds(self, created: str) -> bool:
        return (self.since is None or created >= self.since) and \
            (self.until is None or created < self.until)

    def admits(self, created: str, known: bool = True) -> bool:
        """What the channels' window clause keeps: a known time in [since, until); an unknown
        one when `unknown_time`, before `until`."""
        if known:
            return self.holds(created)
        return self.unknown_time and (self.until is None or created < self.until)


class Found:
    """A time expression in a question: its window, its words as typed, and the question
    without them (what the word channel searches)."""

    __slots__ = ("window", "text", "rest")

    def __init__(self, window: Window, text: str, rest: str):
        self.window, self.text, self.rest = window, text, rest

    def __repr__(self) -> str:
        return f"Found({self.window!r}, {self.text!r}, {self.rest!r})"


# --------------------------------------------------------------------------- stored times

def stamp(moment: datetime) -> str:
    """An aware datetime as a stored time (UTC, microseconds, `Z`)."""
    return moment.astimezone(timezone.utc).strftime(STAMP)


def _aware(naive: datetime, tz: tzinfo | None) -> datetime:
    """A local wall-clock time made aware: in `tz`, or the system's zone (TZ honoured, its
    offset on that date, daylight saving time included)."""
    return naive.replace(tzinfo=tz) if tz is not None else naive.astimezone()


def to_stored(text: str, *, tz: tzinfo | None = None, what: str = "time") -> str:
    """An ISO 8601 date or datetime as a stored time. A datetime without an offset is local
    time; a date alone is noon of that day, local time (it stays that day in every zone
    within 11 hours of this one). ForgeError (one line, naming `what`) otherwise."""
    raw = str(text).strip()
    try:
        if re.fullmatch(_DATE_ONLY, raw):
            return stamp(_aware(datetime.fromisoformat(raw).replace(hour=12), tz))
        moment = datetime.fromisoformat(raw)
    except ValueError:
        raise ForgeError(f"{what} {raw[:40]!r} is not an ISO 8601 date or datetime "
                         "(2024-03-05, 2024-03-05T14:30, 2024-03-05T13:30:00Z)") from None
    return stamp(moment if moment.tzinfo is not None else _aware(moment, tz))


def shown_date(created: str, known: bool = True, tz: tzinfo | None = None) -> str:
    """The date column of every table (recall, `memory ls`): local_date, with `?` after it when
    the time is unknown (`2026-12-02?`: the day an import without times stored it, not when it
    was said)."""
    return local_date(created, tz) + ("" if known else "?")


def local_date(created: str, tz: tzinfo | None = None) -> str:
    """A stored time's date (YYYY-MM-DD) in the local time zone: what tables, the hot block
    and the chat's lines show. An unreadable value is shown as its first ten characters."""
    try:
        moment = datetime.fromisoformat(created)
    except (TypeError, ValueError):
        return str(created)[:10]
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(tz).strftime("%Y-%m-%d")


def today(now: datetime | str | None = None, tz: tzinfo | None = None) -> str:
    """Today's local date, YYYY-MM-DD (the chat tells the model)."""
    return local_now(now, tz).strftime("%Y-%m-%d")


def local_now(now: datetime | str | None = None, tz: tzinfo | None = None) -> datetime:
    """The naive local wall-clock time expressions are read against: `now` when given (an
    aware or naive datetime, or an ISO text: FORGE_NOW), else the clock."""
    if now is None:
        moment = datetime.now(timezone.utc)
    elif isinstance(now, str):
        raw = now.strip()
        moment = datetime.fromisoformat(raw)
        if re.fullmatch(_DATE_ONLY, raw):
            moment = moment.replace(hour=12)
        if moment.tzinfo is None:
            return moment
    else:
        moment = now
        if moment.tzinfo is None:
            return moment
    return moment.astimezone(tz).replace(tzinfo=None)


# --------------------------------------------------------------------------- the grammar

_DATE_ONLY = r"\d{4}-\d\d-\d\d"
_ISO = (r"(?P<y>\d{4})(?:-(?P<m>\d\d)(?:-(?P<d>\d\d)(?P<t>[T ]\d\d:\d\d(?::\d\d(?:\.\d+)?)?"
        r"(?:Z|[+-]\d\d:?\d\d)?)?)?)?")

_EN_MONTHS = ("january|february|march|april|may|june|july|august|september|october|november|"
              "december")
_FR_MONTHS = ("janvier|f[ée]vrier|mars|avril|mai|juin|juillet|ao[uû]t|septembre|octobre|"
              "novembre|d[ée]cembre")
_YEAR = r"(?:19[7-9]\d|20\d\d)"
_DAY = r"(?:3[01]|[12]\d|0?[1-9])"
_AP = "['’]"
_EN_NUM = r"(?:\d{1,3}|an?|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)"
_FR_NUM = r"(?:\d{1,3}|une?|deux|trois|quatre|cinq|six|sept|huit|neuf|dix|onze|douze)"
_ISO_TEXT = r"\d{4}-\d\d-\d\d(?:[T ]\d\d:\d\d(?::\d\d(?:\.\d+)?)?(?:Z|[+-]\d\d:?\d\d)?)?"

# A date that stands on its own, in each language (no preposition needed).
_EN_POINT = (
    rf"{_ISO_TEXT}"
    rf"|(?:the\s+)?day\s+before\s+yesterday|yesterday|today"
    rf"|(?:last|this|previous)\s+(?:week|month|year)"
    rf"|{_EN_NUM}\s+(?:days?|weeks?|months?|years?)\s+ago"
    rf"|(?:the\s+)?{_DAY}(?:st|nd|rd|th)?\s+(?:of\s+)?(?:{_EN_MONTHS})(?:,?\s+{_YEAR})?"
    rf"|(?:{_EN_MONTHS})\s+{_DAY}(?:st|nd|rd|th)?(?:,?\s+{_YEAR})?(?!\d)"
    rf"|(?:{_EN_MONTHS})(?:\s+of)?\s+{_YEAR}"
)
_FR_POINT = (
    rf"{_ISO_TEXT}"
    rf"|avant[- ]hier|hier|aujourd{_AP}hui"
    rf"|(?:la\s+semaine|le\s+mois|l{_AP}ann[ée]e|l{_AP}an)\s+(?:derni[èe]re?|pass[ée]e?)"
    rf"|cette\s+semaine|ce\s+mois(?:-ci)?|cette\s+ann[ée]e"
    rf"|il\s+y\s+a\s+{_FR_NUM}\s+(?:jours?|semaines?|mois|ans|an|ann[ée]es?)"
    rf"|(?:le\s+)?(?:1er|{_DAY})\s+(?:{_FR_MONTHS})(?:\s+{_YEAR})?"
    rf"|(?:{_FR_MONTHS})\s+{_YEAR}"
)
# A month or a year alone is a date only after a preposition ("in May", "en 2024"): alone,
# `may`, `mars` or `2000` are too often something else.
_EN_BARE = rf"(?:{_EN_MONTHS})|{_YEAR}"
_FR_BARE = rf"(?:{_FR_MONTHS})|{_YEAR}"
_EN_ANY = rf"(?:{_EN_POINT}|{_EN_BARE})"
_FR_ANY = rf"(?:{_FR_POINT}|{_FR_BARE})"
_EN_IN = r"(?:in|during|in\s+the\s+(?:month|year)\s+of)\s+"   # not `on`, `for`: "for May"
_FR_IN = (rf"(?:en|pendant|durant|au\s+cours\s+de|au\s+mois\s+d{_AP}|au\s+mois\s+de|dans|pour"
          rf"|l{_AP}ann[ée]e|en\s+l{_AP}an|le)\s+")

_SHAPES = (
    # (name, language, the words one of which it needs, pattern): groups a (and b: ranges)
    ("range", "en", {"between"}, rf"between\s+(?P<a>{_EN_ANY}|{_DAY})\s+and\s+(?P<b>{_EN_ANY})"),
    ("range", "en", {"from"},
     rf"from\s+(?P<a>{_EN_ANY}|{_DAY})\s+(?:to|until|till|through|-)\s+(?P<b>{_EN_ANY})"),
    ("range", "fr", {"entre"},
     rf"entre\s+(?:le\s+)?(?P<a>{_FR_ANY}|1er|{_DAY})\s+et\s+(?:le\s+)?(?P<b>{_FR_ANY})"),
    ("range", "fr", {"de", "du", "depuis"},
     rf"(?:de|du|depuis)\s+(?:le\s+)?(?P<a>{_FR_ANY}|1er|{_DAY})\s+(?:[àa]|au|jusqu{_AP}(?:[àa]|au|en))"
     rf"\s+(?:le\s+)?(?P<b>{_FR_ANY})"),
    ("since", "en", {"since"}, rf"since\s+(?P<a>{_EN_ANY})"),
    ("since", "fr", {"depuis"}, rf"depuis\s+(?:le\s+|la\s+|l{_AP})?(?P<a>{_FR_ANY})"),
    ("before", "en", {"before"}, rf"before\s+(?P<a>{_EN_ANY})"),
    ("before", "fr", {"avant"}, rf"avant\s+(?:le\s+)?(?P<a>{_FR_ANY})"),
    ("after", "en", {"after"}, rf"after\s+(?P<a>{_EN_ANY})"),
    ("after", "fr", {"après", "apres"}, rf"apr[èe]s\s+(?:le\s+)?(?P<a>{_FR_ANY})"),
    ("point", "en", None, rf"{_EN_IN}(?P<a>{_EN_ANY})"),
    ("point", "fr", None, rf"{_FR_IN}(?P<a>{_FR_ANY})"),
    ("point", "en", None, rf"(?P<a>{_EN_POINT})"),
    ("point", "fr", None, rf"(?P<a>{_FR_POINT})"),
)

# What must be among a text's words for the grammar to have a chance, in each language (a
# year, or an ISO date's, counts for both). A question holding none is answered without
# compiling the grammar (~1 ms a shape) and without dateparser: a set lookup per word.
_EN_WORDS = frozenset(_EN_MONTHS.split("|")) | {"yesterday", "today", "ago", "week", "month",
                                                "year"}
_FR_WORDS = frozenset({
    "janvier", "février", "fevrier", "mars", "avril", "mai", "juin", "juillet", "août", "aout",
    "septembre", "octobre", "novembre", "décembre", "decembre", "hier", "aujourd", "semaine",
    "semaines", "mois", "année", "annee", "années", "annees", "ans", "jours", "dernier",
    "dernière", "derniere", "passé", "passée", "passe", "passee"})

_compiled: dict[int, re.Pattern[str]] = {}


def _languages(text: str) -> tuple[set[str], set[str]]:
    """(the languages whose words `text` holds, its words), lower case."""
    words = set(re.findall(r"[^\W_]+", text.lower()))
    langs = set()
    if not words.isdisjoint(_EN_WORDS):
        langs.add("en")
    if not words.isdisjoint(_FR_WORDS):
        langs.add("fr")
    if any(len(w) == 4 and w.isdigit() and 1970 <= int(w) <= 2099 for w in words):
        langs.update(("en", "fr"))
    return langs, words


def may_hold_time(text: str) -> bool:
    """The cheap first look: False means `text` holds no expression the grammar knows."""
    return bool(_languages(text)[0])


def _match(text: str, *, whole: bool) -> tuple[str, str, re.Match[str]] | None:
    """The leftmost, then longest, expression in `text` (the whole of it when `whole`). Only
    the shapes of a language whose words `text` holds, and that need no word it lacks, are
    compiled and tried."""
    langs, words = _languages(text)
    best: tuple[str, str, re.Match[str]] | None = None
    for n, (name, lang, needs, pattern) in enumerate(_SHAPES):
        if lang not in langs or (needs is not None and words.isdisjoint(needs)):
            continue
        if n not in _compiled:
            _compiled[n] = re.compile(rf"(?<![\w'’-])(?:{pattern})(?![\w'’])", re.IGNORECASE)
        m = _compiled[n].fullmatch(text) if whole else _compiled[n].search(text)
        if m is None:
            continue
        if best is None or (m.start(), m.start() - m.end()) < \
                (best[2].start(), best[2].start() - best[2].end()):
            best = (name, lang, m)
    return best


# --------------------------------------------------------------------------- reading

class _Period:
    __slots__ = ("start", "end")     # naive local times

    def __init__(self, start: datetime, end: datetime):
        self.start, self.end = start, end


_parsers: dict[str, tuple[datetime, Any]] = {}   # language -> (its base, its parser)


def _dateparser(lang: str, base: datetime) -> Any:
    """dateparser's parser of `lang` reading against `base` (the last one of each language is
    kept: a long-running `forge serve` reads every question against a new now)."""
    kept = _parsers.get(lang)
    if kept is None or kept[0] != base:
        from dateparser.date import DateDataParser   # only for a found expression

        kept = _parsers[lang] = (base, DateDataParser(languages=[lang], settings={
            "RELATIVE_BASE": base, "PREFER_DATES_FROM": "past",
            "RETURN_TIME_AS_PERIOD": True}))
    return kept[1]


def _period(moment: datetime, granularity: str) -> _Period:
    if granularity == "year":
        start = datetime(moment.year, 1, 1)
        return _Period(start, datetime(moment.year + 1, 1, 1))
    if granularity == "month":
        start = datetime(moment.year, moment.month, 1)
        nxt = datetime(moment.year + (moment.month == 12), moment.month % 12 + 1, 1)
        return _Period(start, nxt)
    if granularity == "week":
        monday = datetime.combine(moment.date() - timedelta(days=moment.weekday()), datetime.min.time())
        return _Period(monday, monday + timedelta(days=7))
    if granularity == "day":
        start = datetime.combine(moment.date(), datetime.min.time())
        return _Period(start, start + timedelta(days=1))
    return _Period(moment, moment)    # a time of day: a moment


def _iso_period(text: str, tz: tzinfo | None) -> _Period | None:
    """An ISO date (that day), year-month (that month), year (that year) or datetime (that
    moment, local when it has no offset); None when `text` is not one."""
    m = re.fullmatch(_ISO, text.strip())
    if m is None:
        return None
    try:
        if m["t"]:
            moment = datetime.fromisoformat(text.strip())
            if moment.tzinfo is not None:   # the local wall-clock time of that moment
                moment = moment.astimezone(tz).replace(tzinfo=None)
            return _Period(moment, moment)
        if m["d"]:
            return _period(datetime(int(m["y"]), int(m["m"]), int(m["d"])), "day")
        if m["m"]:
            return _period(datetime(int(m["y"]), int(m["m"]), 1), "month")
        return _period(datetime(int(m["y"]), 1, 1), "year")
    except ValueError:
        return None


def _read(text: str, lang: str, base: datetime, tz: tzinfo | None) -> _Period | None:
    """One date of an expression as its calendar period, read against `base`."""
    iso = _iso_period(text, tz)
    if iso is not None:
        return iso
    data = _dateparser(lang, base).get_date_data(" ".join(text.split()))
    if data is None or data.date_obj is None:
        return None
    moment = data.date_obj
    if moment.tzinfo is not None:
        moment = moment.replace(tzinfo=None)
    return _period(moment, data.period or "day")


def _read_match(name: str, lang: str, m: re.Match[str], now: datetime, tz: tzinfo | None
                ) -> tuple[datetime | None, datetime | None] | None:
    """The local [start, end) an expression names; None when a date in it cannot be read."""
    if name == "range":
        b = _read(m["b"], lang, now, tz)
        if b is None:
            return None
        a_text = m["a"].strip()
        if re.fullmatch(rf"1er|{_DAY}", a_text, re.IGNORECASE):   # "du 3 au 5 mars": b's month
            day = int(re.sub(r"\D", "", a_text))
            try:
                a = _period(b.start.replace(day=day), "day")
            except ValueError:
                return None
        else:
            # "between March and May 2024": March is read before May 2024
            a = _read(a_text, lang, b.end - timedelta(microseconds=1)
                      if not re.search(_YEAR, a_text) else now, tz)
        if a is None:
            return None
        if a.start > b.start:
            return None
        return a.start, b.end
    a = _read(m["a"], lang, now, tz)
    if a is None:
        return None
    if name == "since":
        return a.start, None
    if name == "before":
        return None, a.start
    if name == "after":
        return a.end, None
    return a.start, a.end


def _window(bounds: tuple[datetime | None, datetime | None], tz: tzinfo | None,
            text: str | None) -> Window:
    start, end = bounds
    return Window(None if start is None else stamp(_aware(start, tz)),
                  None if end is None else stamp(_aware(end, tz)), text)


def find(question: str, *, now: datetime | str | None = None,
         tz: tzinfo | None = None) -> Found | None:
    """The first time expression in `question`, read; None when it holds none, none that can
    be read, or one whose period starts after now (nothing was written then: the question is
    about a plan, and its words stay words). A question that fails `may_hold_time` costs a
    set lookup per word."""
    if not may_hold_time(question):
        return None
    found = _match(question, whole=False)
    if found is None:
        return None
    name, lang, m = found
    moment = local_now(now, tz)
    bounds = _read_match(name, lang, m, moment, tz)
    if bounds is None:
        return None
    if bounds[0] is not None and bounds[0] > moment:
        # a period that has not begun holds nothing written yet: the question is about what
        # is planned for it ("what is planned for December 2027?"), its words stay words
        return None
    rest = " ".join((question[:m.start()] + " " + question[m.end():]).split())
    return Found(_window(bounds, tz, m.group(0)), m.group(0), rest)


_EXAMPLES = ("(2024-03-05, 2024, March 2024, last week, il y a deux ans, depuis juin: "
             "docs/time.md lists them)")

# The expressions docs/time.md shows with their windows (its table is generated from `period`
# over these at DOCS_NOW in DOCS_ZONE: docs/_ext/forge_docs.py), English then French.
DOCS_NOW, DOCS_ZONE = "2026-03-18T15:00", "Europe/Paris"
DOCS_EXAMPLES = (
    ("yesterday", "hier"), ("today", "aujourd'hui"), ("3 days ago", "il y a 3 jours"),
    ("this week", "cette semaine"), ("last week", "la semaine dernière"),
    ("2 weeks ago", "il y a deux semaines"), ("this month", "ce mois-ci"),
    ("last month", "le mois dernier"), ("last year", "l'année dernière"),
    ("two years ago", "il y a deux ans"), ("in March 2024", "en mars 2024"),
    ("March 5, 2024", "le 5 mars 2024"), ("in June", "en juin"), ("2024", "en 2024"),
    ("since June", "depuis juin"), ("before 2024", "avant 2024"),
    ("after March 2024", "après mars 2024"),
    ("between March and May 2024", "entre mars et mai 2024"),
    ("from 2023 to 2024", "de 2023 à 2024"), ("from 3 to 5 March 2024", "du 3 au 5 mars 2024"),
    ("2024-03-05", None), ("2024-03", None), ("2024-03-05T14:30", None),
)   # None: ISO 8601, the same in every language


def period(text: str, *, now: datetime | str | None = None, tz: tzinfo | None = None,
           what: str = "WHEN") -> Window:
    """The whole period `text` names (an ISO date, month, year or datetime, or one natural
    expression, in English or French), as a window; ForgeError (one line naming `what`) when
    it is not one."""
    raw = " ".join(str(text).split())
    if not raw:
        raise ForgeError(f"{what} is empty; give a date (2024-03-05) or an expression "
                         "(last week, en mars 2024)")
    iso = _iso_period(raw, tz)
    if iso is not None:
        return _window((iso.start, iso.end), tz, None)
    found = _match(raw, whole=True) if may_hold_time(raw) else None
    if found is None:
        # a month or a year alone is a date here: nothing else stands around it
        bare = re.fullmatch(rf"(?:{_EN_BARE})|(?:{_FR_BARE})", raw, re.IGNORECASE)
        if bare is None:
            raise ForgeError(f"{what} {raw[:60]!r} is not a date or a time expression "
                             f"Forge reads {_EXAMPLES}")
        lang = "fr" if re.fullmatch(_FR_BARE, raw, re.IGNORECASE) and not \
            re.fullmatch(_EN_BARE, raw, re.IGNORECASE) else "en"
        found = ("point", lang, re.fullmatch(rf"(?P<a>{re.escape(raw)})", raw))  # type: ignore[assignment]
    name, lang, m = found  # type: ignore[misc]
    bounds = _read_match(name, lang, m, local_now(now, tz), tz)
    if bounds is None:
        raise ForgeError(f"{what} {raw[:60]!r} is not a date Forge can read {_EXAMPLES}")
    return _window(bounds, tz, None)


def options(since: str | None = None, until: str | None = None, *,
            now: datetime | str | None = None, tz: tzinfo | None = None,
            names: tuple[str, str] = ("--since", "--until")) -> Window | None:
    """`--since WHEN --until WHEN` (either may be None) as one window: from the start of
    since's period to the end of until's; None when neither is given. ForgeError (one line)
    for a WHEN that cannot be read or a window that ends before it starts."""
    if since is None and until is None:
        return None
    start = period(since, now=now, tz=tz, what=names[0]).since if since is not None else None
    end = period(until, now=now, tz=tz, what=names[1]).until if until is not None else None
    if start is not None and end is not None and end <= start:
        raise ForgeError(f"{names[1]} {until!r} ends before {names[0]} {since!r} starts: the "
                         "window is empty")
    return Window(start, end, None)


def as_of(text: str, *, now: datetime | str | None = None, tz: tzinfo | None = None,
          name: str = "--as-of") -> str:
    """`--as-of WHEN`: the end of WHEN's period (as the store stood then: entries created
    before it)."""
    window = period(text, now=now, tz=tz, what=name)
    if window.until is None:
        raise ForgeError(f"{name} {text!r} names no end (give a date or a period)")
    return window.until


