"""`forge trace tail`: the last run records, read from the end of the file."""
from __future__ import annotations

from typing import Any

import click

from ..core.checks import MAX_COUNT
from .main import Number, get_settings
from .output import delimited, dumps, emit, output_options

COLUMNS = ("state", "run_id", "timestamp", "total_ms", "steps", "not_answered", "error", "input")


def _row(record: dict[str, Any]) -> dict[str, Any]:
    from ..store.trace_read import state

    steps = record.get("steps") or []
    return {
        "state": state(record),
        "run_id": record.get("run_id"),
        "timestamp": record.get("timestamp"),
        # Whole milliseconds: the renderer's four decimals are for distances.
        "total_ms": None if record.get("total_ms") is None else round(record["total_ms"]),
        "steps": ",".join(str(s.get("tool")) for s in steps if isinstance(s, dict)),
        "not_answered": record.get("not_answered"),
        "error": record.get("error"),
        "input": record.get("user_input_preview"),
    }


@click.group()
def trace() -> None:
    """Execution traces (TRACE_FILE): one JSON line per run."""


@trace.command()
@click.option("-n", "count", default=10, show_default=True, type=Number(1, MAX_COUNT),
              help="How many records.")
@click.option("-f", "--follow", is_flag=True, help="Keep printing records as runs append them.")
@output_options
def tail(count: int, follow: bool, fmt: str) -> None:
    """The last N run records: ✓ answered, ∅ ran and answered nothing, ✗ failed.

    Reads only the end of the file; a torn last line is skipped with a warning.
    """
    from ..store import trace_read as traces  # the reader alone: not the record dataclasses

    path = get_settings().trace_file
    start = traces.end_offset(path)  # tail stops and follow starts here: no run lost or shown twice
    records = [traces.shown(r) for r in traces.tail(path, count, end=start)]
    if fmt == "table":
        emit([_row(r) for r in records], fmt, columns=COLUMNS, wide=("input", "error"),
             empty=None if follow else "no traces yet")
    else:
        emit(records, fmt, columns=COLUMNS)
    if not follow:
        return
    try:
        for record in map(traces.shown, traces.follow(path, start=start)):
            if fmt == "table":
                r = _row(record)
                click.echo("  ".join(str(r[c]) if r[c] is not None else "" for c in COLUMNS))
            elif fmt in ("csv", "tsv"):  # no header: the columns of a later record may differ
                click.echo(delimited([record], fmt, headers=False), nl=False)
            else:
                click.echo(dumps(record))
    except KeyboardInterrupt:  # Ctrl-C is how a follow ends, like `tail -f`: not an error
        return
