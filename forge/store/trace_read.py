"""Reading `traces.jsonl`: the last records from the end of the file, never the whole of
it, and `tail -f`. A line that is not JSON is skipped with a warning (a torn last line is named
so). Its own module so that `forge trace tail` loads none of the record dataclasses that
forge/store/traces.py writes with; `traces.tail` and the others still name these functions."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Iterator

from ..core.log import log

_BLOCK = 64 * 1024


def state(record: dict[str, Any]) -> str:
    """✓ answered, ∅ ran and answered nothing, ✗ failed."""
    if not record.get("ok"):
        return "✗"
    if record.get("not_answered"):
        return "∅"
    return "✓"


def _parse_lines(lines: list[bytes], path: Path, torn_ok_index: int | None) -> list[dict[str, Any]]:
    records = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except (json.JSONDecodeError, UnicodeDecodeError):
            where = "a torn last line" if i == torn_ok_index else "a line that is not JSON"
            log.warning("%s: skipped %s", path, where)
    return records


def shown(record: Any) -> Any:
    """A record as a command shows it: every database URL's password `***` (settings.scrub), as
    everywhere Forge shows a URL; a line written before traces were scrubbed may hold one. Only
    for display: `memory scan` reads the line as it is, and rewrites it."""
    from ..core.settings import scrub

    if isinstance(record, str):
        return scrub(record)
    if isinstance(record, dict):
        return {k: shown(v) for k, v in record.items()}
    if isinstance(record, list):
        return [shown(v) for v in record]
    return record


def end_offset(path: Path) -> int:
    """Where the file ends now (0 when it does not exist): hand it to `tail(end=)` and
    `follow(start=)` so that a record appended in between is shown exactly once."""
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def tail(path: Path, n: int = 10, *, end: int | None = None) -> list[dict[str, Any]]:
    """The last `n` records before byte `end` (default: the end of the file), reading
    backwards, never the whole file."""
    if n <= 0:
        return []
    try:
        fh = open(path, "rb")
    except FileNotFoundError:
        return []
    with fh:
        fh.seek(0, os.SEEK_END)
        end = fh.tell() if end is None else min(end, fh.tell())
        pos = end
        buf = b""
        # A record that ends without "\n" is a torn last line; we need n complete lines plus it.
        while pos > 0 and buf.count(b"\n") <= n + 1:
            step = min(_BLOCK, pos)
            pos -= step
            fh.seek(pos)
            buf = fh.read(step) + buf
    lines = buf.split(b"\n")
    if pos > 0:
        lines = lines[1:]  # the first piece may be the middle of a line
    torn_index = None
    if lines and lines[-1] == b"":
        lines.pop()
    elif lines:
        torn_index = len(lines) - 1  # the file does not end with a newline
    records = _parse_lines(lines, path, torn_index)
    return records[-n:]


def follow(path: Path, *, start: int | None = None, poll: float = 0.5,
           stop_after: float | None = None) -> Iterator[dict[str, Any]]:
    """Yield records appended after byte `start` (default: now), like `tail -f`. Partial
    lines wait for their end."""
    # The starting point is taken now, not at the first next(): a generator body would only
    # run then, and records appended in between would be lost.
    return _follow(path, end_offset(path) if start is None else start, poll, stop_after)


def _follow(path: Path, pos: int, poll: float, stop_after: float | None) -> Iterator[dict[str, Any]]:
    started = time.monotonic()
    pending = b""
    while stop_after is None or time.monotonic() - started < stop_after:
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            size = 0
        if size < pos:  # truncated or replaced
            pos, pending = 0, b""
        if size > pos:
            with open(path, "rb") as fh:
                fh.seek(pos)
                chunk = fh.read(size - pos)
            pos = size
            pending += chunk
            *complete, pending = pending.split(b"\n")
            yield from _parse_lines(complete, path, None)
        else:
            time.sleep(poll)
