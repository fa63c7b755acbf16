"""The one timestamp every store writes (history, deliberate store, traces): UTC, ISO 8601 with
microseconds and a `Z`, the year always four digits (0001 to 9999), so stored times compare as
text in time order. Its own module, so a listing of the deliberate store does not load the
history's."""
from __future__ import annotations

from datetime import datetime, timezone

# The first and last times a store can hold (Python's datetime range, in UTC).
FIRST = "0001-01-01T00:00:00.000000Z"
LAST = "9999-12-31T23:59:59.999999Z"


def utc_text(moment: datetime) -> str:
    """A UTC datetime (aware or naive) as a stored time. The year is zero-padded by hand:
    strftime('%Y') writes year 999 as `999` on glibc (and `0999` elsewhere), which sorts after
    `2019` as text."""
    return (f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d}T{moment.hour:02d}:"
            f"{moment.minute:02d}:{moment.second:02d}.{moment.microsecond:06d}Z")


def utc_now() -> str:
    return utc_text(datetime.now(timezone.utc))
