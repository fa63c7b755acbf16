"""One output decorator and one renderer for every command that prints rows.

Table (tabulate) by default; `--json` prints one JSON document; `--nl` one JSON object per line.
Data goes to stdout; everything else goes to stderr through `note()` or logging.
"""
from __future__ import annotations

import functools
import json
import shutil
from typing import Any, Callable, Iterable, Sequence

import click

FORMATS = ("table", "json", "nl")


def output_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Add `--json` / `--nl` and pass `fmt` ("table", "json" or "nl") to the command."""

    @click.option("--nl", "as_nl", is_flag=True, help="One JSON object per line.")
    @click.option("--json", "as_json", is_flag=True, help="One JSON document.")
    @functools.wraps(fn)
    def wrapper(*args: Any, as_json: bool, as_nl: bool, **kwargs: Any) -> Any:
        if as_json and as_nl:
            raise click.UsageError("--json and --nl are exclusive")
        fmt = "json" if as_json else "nl" if as_nl else "table"
        return fn(*args, fmt=fmt, **kwargs)

    return wrapper


def _default(value: Any) -> Any:
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if hasattr(value, "__fspath__"):
        return str(value)
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)


def dumps(value: Any, *, indent: int | None = None) -> str:
    return json.dumps(value, ensure_ascii=False, indent=indent, default=_default)


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4f}"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    if isinstance(value, dict):
        return dumps(value)
    return value


def table(rows: Sequence[dict[str, Any]], columns: Sequence[str], *,
          wide: Sequence[str] = ("content",)) -> str:
    """A human table. Columns in `wide` wrap to the terminal width; nothing is cut."""
    from tabulate import tabulate

    if not rows:
        return ""
    width = shutil.get_terminal_size((120, 24)).columns
    narrow_width = sum(
        max(len(str(c)), *(len(str(_cell(r.get(c)))) for r in rows)) + 2
        for c in columns if c not in wide
    )
    room = max(30, width - narrow_width - 2)
    maxcol = [room if c in wide else None for c in columns]
    body = [[_cell(r.get(c)) for c in columns] for r in rows]
    return tabulate(body, headers=list(columns), tablefmt="simple", maxcolwidths=maxcol,
                    disable_numparse=True)


def emit(rows: Iterable[dict[str, Any]], fmt: str, *, columns: Sequence[str],
         document: Any = None, wide: Sequence[str] = ("content",),
         empty: str | None = None) -> None:
    """Render rows. `document` replaces the row list as the `--json` document when given."""
    rows = list(rows)
    if fmt == "json":
        click.echo(dumps(rows if document is None else document, indent=2))
    elif fmt == "nl":
        for row in rows:
            click.echo(dumps(row))
    else:
        if rows:
            click.echo(table(rows, columns, wide=wide))
        elif empty:
            note(empty)


def emit_one(value: dict[str, Any], fmt: str, *, text: str) -> None:
    """A single result: its human `text`, or the value as JSON for `--json`/`--nl`."""
    if fmt == "json":
        click.echo(dumps(value, indent=2))
    elif fmt == "nl":
        click.echo(dumps(value))
    else:
        click.echo(text)


def note(message: str) -> None:
    """Progress and information for a human: stderr, never mixed with data."""
    click.echo(message, err=True)


def progress(iterable: Iterable[Any], *, length: int | None = None, label: str = "") -> Any:
    """A progress bar on a terminal, nothing in a pipeline (it draws on stderr)."""
    import sys

    if sys.stderr.isatty():
        return click.progressbar(iterable, length=length, label=label, file=sys.stderr)
    return _Quiet(iterable)


class _Quiet:
    def __init__(self, iterable: Iterable[Any]):
        self.iterable = iterable

    def __enter__(self) -> Iterable[Any]:
        return self.iterable

    def __exit__(self, *exc: Any) -> None:
        return None
