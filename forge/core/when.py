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

Stored times are UTC, `YYYY-MM-DDTHH:MM:SS.ffffffZ` with a four-digit year (core/timestamps.py):
a window's bounds are written the same way, so a store compares them as text. Every time value
a user gives, at every door, is read here: the years 0001 to 9999, ASCII digits, ISO 8601 with
dashes (docs/time.md, "One rule at every door").
"""
from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone, tzinfo
from typing import Any

from .errors import ForgeError
from .timestamps import FIRST, LAST, utc_text

STAMP = "%Y-%m-%dT%H:%M:%S.%fZ"   # to read a stored time (strptime); written by utc_text


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

# The range: the years 0001 to 9999, written with four digits (Python's calendar). A stored
# time lies between FIRST and LAST (UTC); a window's bound beyond them is open, or empty.
RANGE = "years 0001 to 9999"
_BEFORE, _AFTER = "before", "after"    # a moment outside [FIRST, LAST], on that side
_ONE = timedelta(microseconds=1)


def stamp(moment: datetime) -> str:
    """An aware datetime as a stored time (UTC, microseconds, `Z`, a four-digit year)."""
    return utc_text(moment.astimezone(timezone.utc))


def _utc(moment: datetime) -> datetime | str:
    """An aware datetime in UTC, or _BEFORE/_AFTER when UTC has no such day (0001-01-01T00:00
    at +14:00 is the year 0)."""
    try:
        return moment.astimezone(timezone.utc)
    except (OverflowError, ValueError):
        return _BEFORE if moment.year < 5000 else _AFTER


def _aware(naive: datetime, tz: tzinfo | None) -> datetime:
    """A local wall-clock time made aware: in `tz`, or the system's zone (TZ honoured, its
    offset on that date, daylight saving time included). On the calendar's first and last days
    the system cannot say it (its probe steps out of the years 1 to 9999): the offset of two
    days further in is taken."""
    if tz is not None:
        return naive.replace(tzinfo=tz)
    try:
        return naive.astimezone()
    except (OverflowError, ValueError):
        inward = naive + timedelta(days=2) if naive.year < 5000 else naive - timedelta(days=2)
        offset = inward.astimezone().utcoffset()
        return naive.replace(tzinfo=timezone(offset or timedelta(0)))


def _naive(moment: datetime, tz: tzinfo | None) -> datetime:
    """A moment as the local wall-clock time (naive) it compares with; the calendar's first or
    last moment when that is outside it."""
    if moment.tzinfo is None:
        return moment
    try:
        return moment.astimezone(tz).replace(tzinfo=None)
    except (OverflowError, ValueError):
        return datetime.min if moment.year < 5000 else datetime.max


def _iso(raw: str) -> tuple[str, datetime] | None:
    """The one reading of an ISO 8601 text at every door (--at, --since, --until, --as-of,
    HTTP, MCP, a batch line's "created"): its granularity (year, month, day or time) and its
    first moment (naive: local time; aware when it has an offset or `Z`). None when `raw` has
    not that shape; ValueError when it has it but names no real day or time (2024-02-30,
    0000-01-01, 25:00)."""
    m = re.fullmatch(_ISO, raw)
    if m is None:
        return None
    if m["t"]:
        return "time", datetime.fromisoformat(raw)
    if m["d"]:
        return "day", datetime(int(m["y"]), int(m["m"]), int(m["d"]))
    if m["m"]:
        return "month", datetime(int(m["y"]), int(m["m"]), 1)
    return "year", datetime(int(m["y"]), 1, 1)


def _why(raw: str) -> str:
    """What is wrong with a value that is not a date, when its shape says it ('' otherwise)."""
    if any(c.isdecimal() and not c.isascii() for c in raw):
        return ": write its digits 0-9"
    if re.fullmatch(r"[+-][0-9]+(?:-.*)?|[0-9]{5,}-.*|[0-9]{5,7}|[0-9]{9,}", raw):
        return f": a year has four digits ({RANGE})"
    if re.fullmatch(r"[0-9]{1,3}(?:-[0-9]{1,2}){0,2}(?:[T ].*)?", raw):
        return f": a year has four digits: 0999, not 999 ({RANGE})"
    if re.fullmatch(r"[0-9]{8}(?:T.*)?", raw):
        return ": write the date with dashes (2024-03-05)"
    return ""


_AT_FORMS = "(2024-03-05, 2024-03-05T14:30, 2024-03-05T13:30:00Z)"


def read_moment(text: str, *, what: str = "time") -> datetime:
    """An ISO 8601 date (its noon) or datetime as typed: naive (local time) or aware (an offset
    or `Z`). What `--at` and FORGE_NOW take; ForgeError (one line naming `what`) for anything
    else: a month or a year, no dashes (20240305), digits other than 0-9, a year not of four
    digits, a day or a time that does not exist."""
    raw = str(text).strip()
    lead = f"{what} {raw[:40]!r} is not an ISO 8601 date or datetime"
    try:
        read = _iso(raw)
    except ValueError as e:
        raise ForgeError(f"{lead}: {e}") from None
    if read is None:
        raise ForgeError(f"{lead}{_why(raw) or ' ' + _AT_FORMS}")
    grain, typed = read
    if grain in ("year", "month"):
        raise ForgeError(f"{what} {raw!r} names a {grain}, not a day: give a date or a "
                         f"datetime {_AT_FORMS}")
    return typed.replace(hour=12) if grain == "day" else typed


def to_stored(text: str, *, tz: tzinfo | None = None, what: str = "time",
              now: datetime | str | None = None) -> str:
    """An ISO 8601 date or datetime (when something happened: `remember --at`, POST /remember's
    and the MCP tool's `at`, a batch line's "created", a history message's `ts`) as a stored
    time. A datetime without an offset is local time; a date alone is noon of that day, local
    time (it stays that day in every zone within 11 hours of this one). Refused (ForgeError,
    one line naming `what`): what `read_moment` refuses, a moment before FIRST, and one after today
    (local; `now`, else the clock): a stored time says when something happened or was said."""
    raw = str(text).strip()
    typed = read_moment(raw, what=what)
    utc = _utc(typed if typed.tzinfo is not None else _aware(typed, tz))
    if utc == _BEFORE:
        raise ForgeError(f"{what} {raw[:40]!r} is before {FIRST}, the first time Forge stores "
                         f"({RANGE})")
    if now is None and isinstance(utc, datetime) and utc <= datetime.now(timezone.utc):
        return utc_text(utc)   # the past: no need to find where today ends (~25 µs)
    tomorrow = _tomorrow(now, tz)
    if not isinstance(utc, datetime) or (tomorrow is not None and utc >= tomorrow):
        raise ForgeError(f"{what} {raw[:40]!r} is after today: it says when something happened "
                         "or was said (a plan's date goes in its text)")
    return utc_text(utc)


def _tomorrow(now: datetime | str | None, tz: tzinfo | None) -> datetime | None:
    """The start of tomorrow, local time, in UTC (None past the calendar's end)."""
    day = local_now(now, tz).date()
    try:
        start = datetime.combine(day + timedelta(days=1), datetime.min.time())
    except OverflowError:
        return None
    utc = _utc(_aware(start, tz))
    return utc if isinstance(utc, datetime) else None


def shown_date(created: str, known: bool = True, tz: tzinfo | None = None) -> str:
    """The date column of every table (recall, `memory ls`): local_date, with `?` after it when
    the time is unknown (`2026-12-02?`: the day an import without times stored it, not when it
    was said)."""
    return local_date(created, tz) + ("" if known else "?")


def local_date(created: str, tz: tzinfo | None = None) -> str:
    """A stored time's date (YYYY-MM-DD) in the local time zone: what tables, the hot block
    and the chat's lines show. An unreadable value is shown as its first ten characters; one
    whose local day is outside the calendar (0001-01-01T00:00Z west of Greenwich), as its UTC
    date."""
    try:
        moment = datetime.fromisoformat(created)
    except (TypeError, ValueError):
        return str(created)[:10]
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    try:
        moment = moment.astimezone(tz)
    except (OverflowError, ValueError):
        pass
    return _day(moment)


def _day(moment: datetime) -> str:
    return f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d}"


def today(now: datetime | str | None = None, tz: tzinfo | None = None) -> str:
    """Today's local date, YYYY-MM-DD (the chat tells the model)."""
    return _day(local_now(now, tz))


def local_now(now: datetime | str | None = None, tz: tzinfo | None = None) -> datetime:
    """The naive local wall-clock time expressions are read against: `now` when given (an
    aware or naive datetime, or an ISO text: FORGE_NOW; a date alone is its noon), else the
    clock."""
    if now is None:
        moment_ = datetime.now(timezone.utc)
    elif isinstance(now, str):
        moment_ = read_moment(now, what="FORGE_NOW")
    else:
        moment_ = now
    return _naive(moment_, tz)


# --------------------------------------------------------------------------- the grammar

# ISO 8601 as Forge reads it, ASCII digits only: a year (four digits), a month, a day, a
# time of day (minutes, seconds, a fraction; an offset or `Z`), the extended format (dashes).
_ISO = (r"(?P<y>[0-9]{4})(?:-(?P<m>[0-9]{2})(?:-(?P<d>[0-9]{2})(?P<t>[T ][0-9]{2}:[0-9]{2}"
        r"(?::[0-9]{2}(?:\.[0-9]+)?)?(?:Z|[+-][0-9]{2}:?[0-9]{2})?)?)?)?")

_EN_MONTHS = ("january|february|march|april|may|june|july|august|september|october|november|"
              "december")
_FR_MONTHS = ("janvier|f[ée]vrier|mars|avril|mai|juin|juillet|ao[uû]t|septembre|octobre|"
              "novembre|d[ée]cembre")
_YEAR = r"(?:19[7-9][0-9]|20[0-9][0-9])"
_DAY = r"(?:3[01]|[12][0-9]|0?[1-9])"
_AP = "['’]"
_EN_NUM = r"(?:[0-9]{1,3}|an?|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)"
_FR_NUM = r"(?:[0-9]{1,3}|une?|deux|trois|quatre|cinq|six|sept|huit|neuf|dix|onze|douze)"
_ISO_TEXT = (r"[0-9]{4}-[0-9]{2}-[0-9]{2}(?:[T ][0-9]{2}:[0-9]{2}(?::[0-9]{2}(?:\.[0-9]+)?)?"
             r"(?:Z|[+-][0-9]{2}:?[0-9]{2})?)?")

# A date that stands on its own, in each language (no preposition needed).
_EN_POINT = (
    rf"{_ISO_TEXT}"
    rf"|(?:the\s+)?day\s+before\s+yesterday|yesterday|today"
    rf"|(?:last|this|previous)\s+(?:week|month|year)"
    rf"|{_EN_NUM}\s+(?:days?|weeks?|months?|years?)\s+ago"
    rf"|(?:the\s+)?{_DAY}(?:st|nd|rd|th)?\s+(?:of\s+)?(?:{_EN_MONTHS})(?:,?\s+{_YEAR})?"
    rf"|(?:{_EN_MONTHS})\s+{_DAY}(?:st|nd|rd|th)?(?:,?\s+{_YEAR})?(?![0-9])"
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
    if any(len(w) == 4 and w.isascii() and w.isdigit() and 1970 <= int(w) <= 2099 for w in words):
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
    """[start, end): local wall-clock times (naive), or a moment typed with its offset
    (aware); `end` is _BEYOND when it is after the calendar's last day."""
    __slots__ = ("start", "end")

    def __init__(self, start: datetime, end: datetime):
        self.start, self.end = start, end


# The end of a period that ends with the calendar (9999, December 9999, 9999-12-31): after the
# last local moment. Told apart by identity, never compared as a time.
_BEYOND = datetime.max.replace(tzinfo=timezone.utc)
_LAST_UTC = datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=timezone.utc)


def _next(start: datetime, **step: int) -> datetime:
    try:
        if "years" in step:
            return start.replace(year=start.year + step["years"])
        if "months" in step:
            return start.replace(year=start.year + (start.month == 12),
                                 month=start.month % 12 + 1)
        return start + timedelta(**step)
    except (OverflowError, ValueError):
        return _BEYOND


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
        return _Period(start, _next(start, years=1))
    if granularity == "month":
        start = datetime(moment.year, moment.month, 1)
        return _Period(start, _next(start, months=1))
    if granularity == "week":
        monday = datetime.combine(moment.date() - timedelta(days=moment.weekday()), datetime.min.time())
        return _Period(monday, _next(monday, days=7))
    if granularity == "day":
        start = datetime.combine(moment.date(), datetime.min.time())
        return _Period(start, _next(start, days=1))
    return _Period(moment, moment)    # a time of day: a moment (its offset kept)


def _iso_period(text: str) -> _Period | None:
    """An ISO date (that day), year-month (that month), year (that year) or datetime (that
    moment, local when it has no offset); None when `text` is not one."""
    try:
        read = _iso(text.strip())
    except ValueError:
        return None
    return None if read is None else _period(read[1], read[0])


def _read(text: str, lang: str, base: datetime) -> _Period | None:
    """One date of an expression as its calendar period, read against `base`."""
    iso = _iso_period(text)
    if iso is not None:
        return iso
    data = _dateparser(lang, base).get_date_data(" ".join(text.split()))
    if data is None or data.date_obj is None:
        return None
    moment = data.date_obj
    if moment.tzinfo is not None:
        moment = moment.replace(tzinfo=None)
    return _period(moment, data.period or "day")


def _local(moment: datetime, tz: tzinfo | None) -> datetime:
    """A period's bound as the naive local time it compares with (_BEYOND: the last one)."""
    return datetime.max if moment is _BEYOND else _naive(moment, tz)


def _read_match(name: str, lang: str, m: re.Match[str], now: datetime, tz: tzinfo | None
                ) -> tuple[datetime | None, datetime | None] | None:
    """The local [start, end) an expression names; None when a date in it cannot be read."""
    if name == "range":
        b = _read(m["b"], lang, now)
        if b is None:
            return None
        a_text = m["a"].strip()
        if re.fullmatch(rf"1er|{_DAY}", a_text, re.IGNORECASE):   # "du 3 au 5 mars": b's month
            day = int(re.sub(r"[^0-9]", "", a_text))
            try:
                a = _period(_local(b.start, tz).replace(day=day), "day")
            except ValueError:
                return None
        else:
            # "between March and May 2024": March is read before May 2024
            a = _read(a_text, lang, _local(b.end, tz) - _ONE
                      if not re.search(_YEAR, a_text) else now)
        if a is None:
            return None
        if _local(a.start, tz) > _local(b.start, tz):
            return None
        return a.start, b.end
    a = _read(m["a"], lang, now)
    if a is None:
        return None
    if name == "since":
        return a.start, None
    if name == "before":
        return None, a.start
    if name == "after":
        return a.end, None
    return a.start, a.end


def _bound(moment: datetime | None, tz: tzinfo | None, side: str) -> str | None:
    """A period's bound as a stored time, for `side` (since, until or as_of). Beyond the range
    a store holds: a since before FIRST is open (None), after LAST it is LAST (nothing is
    after); an until before FIRST is FIRST (nothing is before), after LAST it is open (an
    as_of, LAST)."""
    if moment is None:
        return None
    if moment is _BEYOND:
        last = _utc(_aware(datetime.max, tz))
        utc = last + _ONE if isinstance(last, datetime) and last < _LAST_UTC else _AFTER
    else:
        utc = _utc(moment if moment.tzinfo is not None else _aware(moment, tz))
    if utc == _BEFORE:
        return None if side == "since" else FIRST
    if not isinstance(utc, datetime):
        return None if side == "until" else LAST
    return utc_text(utc)


def _window(bounds: tuple[datetime | None, datetime | None], tz: tzinfo | None,
            text: str | None) -> Window:
    start, end = bounds
    return Window(_bound(start, tz, "since"), _bound(end, tz, "until"), text)


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
    if bounds[0] is not None and _local(bounds[0], tz) > moment:
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


def _bounds(text: str, now: datetime | str | None, tz: tzinfo | None, what: str
            ) -> tuple[datetime | None, datetime | None]:
    """The local [start, end) of the whole period `text` names; ForgeError (one line naming
    `what`) when it names none."""
    raw = " ".join(str(text).split())
    if not raw:
        raise ForgeError(f"{what} is empty; give a date (2024-03-05) or an expression "
                         "(last week, en mars 2024)")
    try:
        read = _iso(raw)
    except ValueError as e:
        raise ForgeError(f"{what} {raw[:60]!r} is not a date: {e}") from None
    if read is not None:
        iso = _period(read[1], read[0])
        return iso.start, iso.end
    found = _match(raw, whole=True) if may_hold_time(raw) else None
    if found is None:
        # a month or a year alone is a date here: nothing else stands around it
        bare = re.fullmatch(rf"(?:{_EN_BARE})|(?:{_FR_BARE})", raw, re.IGNORECASE)
        if bare is None:
            raise ForgeError(f"{what} {raw[:60]!r} is not a date or a time expression "
                             f"Forge reads{_why(raw) or ' ' + _EXAMPLES}")
        lang = "fr" if re.fullmatch(_FR_BARE, raw, re.IGNORECASE) and not \
            re.fullmatch(_EN_BARE, raw, re.IGNORECASE) else "en"
        found = ("point", lang, re.fullmatch(rf"(?P<a>{re.escape(raw)})", raw))  # type: ignore[assignment]
    name, lang, m = found  # type: ignore[misc]
    bounds = _read_match(name, lang, m, local_now(now, tz), tz)
    if bounds is None:
        raise ForgeError(f"{what} {raw[:60]!r} is not a date Forge can read {_EXAMPLES}")
    return bounds


def period(text: str, *, now: datetime | str | None = None, tz: tzinfo | None = None,
           what: str = "WHEN") -> Window:
    """The whole period `text` names (an ISO date, month, year or datetime, or one natural
    expression, in English or French), as a window; ForgeError (one line naming `what`) when
    it is not one. The one reading of --since, --until and --as-of at every door (the CLI,
    GET /search and /memory, the MCP tools): years 0001 to 9999, four ASCII digits; a bound
    beyond the times a store holds is open on that side, or leaves the window empty."""
    return _window(_bounds(text, now, tz, what), tz, None)


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
    before it); LAST when that is after the last time a store holds."""
    end = _bounds(text, now, tz, name)[1]
    if end is None:
        raise ForgeError(f"{name} {text!r} names no end (give a date or a period)")
    return _bound(end, tz, "as_of")  # type: ignore[return-value]
