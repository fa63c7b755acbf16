"""One check per kind of value a person or a client hands Forge: an entry id, a whole number (a
limit, a count), a listing's cursor, a listing's filter, a time. Every door calls the same check:
the CLI's option types, the HTTP routes, the MCP tools, the importers and the library functions
behind them. A bad value is refused with one line, `Invalid value for 'NAME': WHY` (the CLI's own
wording, BadValue), before it reaches SQLite, a file or a server.

- A boolean is not a number: JSON's `true` is not the id 1.
- Only the ASCII digits 0-9 are digits: "²" or "١٢" are refused, not read as 2 or 12; no sign
  but a leading "-", no spaces, no "_", no decimal point (1.0 and 1.5 are not whole numbers).
- Bounds are checked on the value as given, before SQLite (whose integers are 64-bit) sees it.
- A filter is at most MAX_FILTER_CHARS characters.
- A time is a finite number of seconds since 1970 or an ISO 8601 string, within the years 1 to
  9999.
- A JSON document a door reads (a request body, a line of a file) holds text only: JSON may spell
  a lone surrogate (`"\ud800"`), which is no character and which no store can hold.

Standard library only, and light: the CLI's option types import it on every command.
"""
from __future__ import annotations

from typing import Any

from .errors import ForgeError

ID_MAX = 2 ** 63 - 1            # SQLite's largest integer: ids are 1 to 2^63-1
MAX_COUNT = 10 ** 9             # a page or a count the CLI takes (memory ls --limit, history -n)
MAX_FILTER_CHARS = 1000         # a listing's filter (ls --filter, GET /memory q, memory_list)
SHOWN_CHARS = 40                # how much of a refused value its line repeats
_MAX_DIGITS = 30                # past this, a number is out of every range Forge has
_EPOCH_MIN = -62135596800       # 0001-01-01T00:00:00Z in seconds since 1970
_EPOCH_MAX = 253402300800       # 10000-01-01T00:00:00Z, excluded


class BadValue(ForgeError):
    """A value refused by its check: `name` (the option, argument or field) and `why` (the
    part after the colon, which a CLI option type hands to click)."""

    def __init__(self, name: str, why: str):
        self.name, self.why = name, why
        super().__init__(f"Invalid value for '{name}': {why}")


def shown(value: Any) -> str:
    """A refused value as its line repeats it: repr, cut to SHOWN_CHARS characters."""
    text = repr(value)
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS - 1] + "…"


def _integer(value: Any) -> int | None:
    """An int (never a bool), or a string of ASCII digits with an optional leading "-", as an
    int; None for anything else. A string of more than _MAX_DIGITS digits is returned as a
    number out of every range (int() of 5,000 digits is refused by Python itself)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if not isinstance(value, str):
        return None
    digits = value[1:] if value.startswith("-") else value
    if not digits or not (digits.isascii() and digits.isdigit()):
        return None
    if len(digits) > _MAX_DIGITS:
        return -(10 ** _MAX_DIGITS) if value.startswith("-") else 10 ** _MAX_DIGITS
    return int(value)


def whole_number(value: Any, name: str, *, minimum: int, maximum: int) -> int:
    """A limit, a count, a budget: a whole number from `minimum` to `maximum`."""
    number = _integer(value)
    if number is None:
        raise BadValue(name, f"{shown(value)} is not a valid integer")
    if not minimum <= number <= maximum:
        given = value if isinstance(value, int) else shown(value).strip("'")
        raise BadValue(name, f"{given} is not in the range {minimum}<=x<={maximum}")
    return number


def entry_id(value: Any, name: str = "id") -> int:
    """An id as the stores keep it (entries, history messages): a whole number from 1 to
    2^63-1 (a larger one is a typo, and SQLite would answer it with an OverflowError)."""
    number = _integer(value)
    if number is None or not 0 < number <= ID_MAX:
        raise BadValue(name, f"{shown(value)} is not an entry id (ids are whole numbers from 1 "
                             "to 2^63-1)")
    return number


def cursor(value: Any, name: str = "cursor") -> int:
    """A listing's cursor, the previous page's next_cursor (an entry id as a string): the id
    the next page starts after; 0 when none is given."""
    if value is None or value == "":
        return 0
    number = _integer(value) if isinstance(value, str) else None
    if number is None or not 0 <= number <= ID_MAX:
        raise BadValue(name, f"{shown(value)} is not a cursor a listing gave (the next_cursor of "
                             "the previous page)")
    return number


def filter_text(value: Any, name: str = "filter") -> str | None:
    """A listing's filter (entries whose text holds it): text of at most MAX_FILTER_CHARS
    characters; None when empty."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise BadValue(name, f"{shown(value)} is not text")
    if len(value) > MAX_FILTER_CHARS:
        raise BadValue(name, f"the filter is {len(value)} characters; at most {MAX_FILTER_CHARS} "
                             "(a word or a phrase of the entries' text)")
    return value


def json_text(document: Any, name: str) -> Any:
    """A parsed JSON document whose strings are all text (see the module's docstring)."""
    import json

    try:
        json.dumps(document, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise BadValue(name, "it holds a lone surrogate escape (such as \\ud800), which is no "
                             "character") from None
    return document


def epoch_time(value: Any, name: str) -> str:
    """A time given as seconds since 1970 (ChatGPT's create_time), as the stores write times:
    ISO 8601 UTC with microseconds and a `Z`."""
    from datetime import datetime, timedelta, timezone

    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadValue(name, f"{shown(value)} is not a number of seconds")
    if not _EPOCH_MIN <= value < _EPOCH_MAX:   # NaN compares false: refused too
        raise BadValue(name, f"{shown(value)} is not a time Forge can store (seconds since "
                             "1970, within the years 1 to 9999)")
    moment = datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(seconds=value)
    from .timestamps import utc_text

    return utc_text(moment)


def iso_time(value: Any, name: str) -> str:
    """A time given as an ISO 8601 string (a `Z` or an offset; none is UTC), as the stores
    write times."""
    from datetime import datetime, timezone

    if not isinstance(value, str):
        raise BadValue(name, f"{shown(value)} is not an ISO 8601 time")
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=timezone.utc)
        parsed = parsed.astimezone(timezone.utc)
    except (ValueError, OverflowError):
        raise BadValue(name, f"{shown(value)} is not an ISO 8601 time") from None
    from .timestamps import utc_text

    return utc_text(parsed)
