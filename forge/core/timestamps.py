"""The one timestamp every store writes (history, deliberate store, traces): UTC, ISO 8601 with
microseconds and a `Z`. Its own module, so a listing of the deliberate store does not load the
history's."""
from __future__ import annotations

from datetime import datetime, timezone


def utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
