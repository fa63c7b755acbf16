"""One output decorator and one renderer for every command that prints rows.

A table by default (tabulate, imported only when a table is printed); `--json` prints one JSON
document; `--nl` one JSON object per line; `--csv` / `--tsv` the same rows as `--nl`, one per
line under a header (`--no-headers` drops it, and the table's too). Data goes to stdout;
everything else goes to stderr through `note()` or logging.
"""
from __future__ import annotations

import functools
import json
import re
from typing import Any, Callable, Iterable, Sequence

import click

FORMATS = ("table", "json", "nl", "csv", "tsv")
_NO_HEADERS = "forge_no_headers"   # click context meta: set by --no-headers, read by emit


def output_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Add `--json` / `--nl` / `--csv` / `--tsv` / `--no-headers` and pass `fmt` (one of
    FORMATS) to the command."""

    @click.option("--json", "as_json", is_flag=True, help="One JSON document.")
    @click.option("--nl", "as_nl", is_flag=True, help="One JSON object per line.")
    @click.option("--csv", "as_csv", is_flag=True, help="Comma-separated values, the --nl rows.")
    @click.option("--tsv", "as_tsv", is_flag=True, help="Tab-separated values, the --nl rows.")
    @click.option("--no-headers", "no_headers", is_flag=True,
                  help="Omit the header line of the table, --csv or --tsv.")
    @functools.wraps(fn)
    def wrapper(*args: Any, as_json: bool, as_nl: bool, as_csv: bool, as_tsv: bool,
                no_headers: bool, **kwargs: Any) -> Any:
        chosen = [name for name, on in (("json", as_json), ("nl", as_nl), ("csv", as_csv),
                                        ("tsv", as_tsv)) if on]
        if len(chosen) > 1:
            raise click.UsageError(" and ".join(f"--{c}" for c in chosen) + " are exclusive")
        fmt = chosen[0] if chosen else "table"
        if no_headers and fmt in ("json", "nl"):
            raise click.UsageError(f"--no-headers goes with the table, --csv or --tsv, not --{fmt}")
        click.get_current_context().meta[_NO_HEADERS] = no_headers
        return fn(*args, fmt=fmt, **kwargs)

    return wrapper


def _no_headers() -> bool:
    ctx = click.get_current_context(silent=True)
    return bool(ctx and ctx.meta.get(_NO_HEADERS))


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


def _flat(value: Any) -> Any:
    """A CSV / TSV cell: the value as --nl has it, nested values as JSON text."""
    if value is None:
        return ""
    if isinstance(value, (list, tuple, dict)):
        return dumps(value)
    return value


def delimited(rows: Sequence[dict[str, Any]], fmt: str, *, headers: bool = True) -> str:
    """`rows` as CSV or TSV: every key of every row, in order of first appearance."""
    import csv
    import io

    keys: dict[str, None] = {}
    for row in rows:
        keys.update(dict.fromkeys(row))
    out = io.StringIO()
    writer = csv.writer(out, delimiter="," if fmt == "csv" else "\t", lineterminator="\n")
    if headers and keys:
        writer.writerow(list(keys))
    for row in rows:
        writer.writerow([_flat(row.get(k)) for k in keys])
    return out.getvalue()


def table(rows: Sequence[dict[str, Any]], columns: Sequence[str], *,
          wide: Sequence[str] = ("content",), headers: bool = True) -> str:
    """A human table (tabulate's "simple" layout, "plain" without headers). Columns in `wide`
    wrap to the terminal width; nothing is cut."""
    from tabulate import tabulate

    from .main import terminal_columns

    if not rows:
        return ""
    width = terminal_columns(120)
    narrow_width = sum(
        max(len(str(c)), *(len(str(_cell(r.get(c)))) for r in rows)) + 2
        for c in columns if c not in wide
    )
    room = max(30, width - narrow_width - 2)
    body = [[_table_cell(_cell(r.get(c)), room if c in wide else None) for c in columns]
            for r in rows]
    # the cells are wrapped here, not by tabulate's maxcolwidths: tabulate 0.10 types a wrapped
    # cell again there (disable_numparse lands in the wrong parameter), so "False" printed
    # True and "1,000" raised ValueError
    if headers:
        return tabulate(body, headers=list(columns), tablefmt="simple", disable_numparse=True)
    return tabulate(body, tablefmt="plain", disable_numparse=True)


# C0 controls but tab, newline and ESC (a cell's colours are kept): a table shows them as `\x07`
# rather than send them to the terminal; "\x01" as a first or second cell is also tabulate's
# separating-line marker, which tabulate 0.9 tests by equality after padding
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1a\x1c-\x1f\x7f]")


class _Text(str):
    """A cell's text as tabulate must print it: tabulate takes a row whose first or second cell
    is exactly the str "\\x01" for its separating-line marker, and checks `type(v) is str`."""


def _table_cell(value: Any, width: int | None) -> Any:
    """The cell as text, wrapped to `width` with tabulate's own wrapper (escape sequences take
    no width; a colour is closed at each line's end and reopened on the next)."""
    if width is None and not isinstance(value, str):
        return value
    text = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", str(value))
    if width is not None:
        from tabulate import _CustomTextWrap

        wrapper = _CustomTextWrap(width=width)
        text = "\n".join("\n".join(wrapper.wrap(line)) for line in text.splitlines()
                         if line.strip() != "")
    return _Text(text)


def renderer(fmt: str) -> None:
    """Import now what `emit` will print `fmt` with (tabulate for a table): a command that
    forks a process beside itself (a fresh recall) shares the import with it, rather than each
    paying it (tabulate imports importlib.metadata, which the sentence model's package imports
    too: ~15 ms the child no longer spends before its answer)."""
    if fmt not in ("json", "nl", "csv", "tsv"):
        import tabulate  # noqa: F401


def emit(rows: Iterable[dict[str, Any]], fmt: str, *, columns: Sequence[str],
         document: Any = None, wide: Sequence[str] = ("content",),
         empty: str | None = None, data: Iterable[dict[str, Any]] | None = None) -> None:
    """Render rows. `document` replaces the row list as the `--json` document when given;
    `data` replaces the rows for --nl, --csv and --tsv when the table's rows carry display
    columns (a label, a pin mark) that are not data."""
    rows = list(rows)
    records = rows if data is None else list(data)
    if fmt == "json":
        click.echo(dumps(records if document is None else document, indent=2))
    elif fmt == "nl":
        for row in records:
            click.echo(dumps(row))
    elif fmt in ("csv", "tsv"):
        if records:
            click.echo(delimited(records, fmt, headers=not _no_headers()), nl=False)
        elif empty:
            note(empty)
    else:
        if rows:
            click.echo(table(rows, columns, wide=wide, headers=not _no_headers()))
        elif empty:
            note(empty)


def emit_one(value: dict[str, Any], fmt: str, *, text: str) -> None:
    """A single result: its human `text`, or the value as JSON for `--json`/`--nl`, one row
    for `--csv`/`--tsv`."""
    if fmt == "json":
        click.echo(dumps(value, indent=2))
    elif fmt == "nl":
        click.echo(dumps(value))
    elif fmt in ("csv", "tsv"):
        click.echo(delimited([value], fmt, headers=not _no_headers()), nl=False)
    else:
        click.echo(text)


def confirm_destructive(what: str, yes: bool,
                        preview: str = "--dry-run shows what it would do") -> None:
    """A destructive command asks on a terminal (the question on stderr); when stdin is not
    one it needs --yes. `what` is the question without its mark: "discard 3 message(s)";
    `preview`: how to see what it would do without doing it."""
    import sys

    if yes:
        return
    if sys.stdin is None or not sys.stdin.isatty():
        raise click.UsageError(f"{what}: stdin is not a terminal, so add --yes to confirm "
                               f"({preview})")
    if not click.confirm(f"{what}?", default=False, err=True):
        raise click.ClickException("nothing was changed")


def note(message: str) -> None:
    """Progress and information for a human: stderr, never mixed with data."""
    click.echo(message, err=True)


def note_secrets(counts: dict[str, int] | None) -> None:
    """`note: 1 secret redacted (AWS access key)` on stderr when a write replaced any."""
    from ..core.secret_scan import describe

    line = describe(counts or {})
    if line:
        note(f"note: {line}")


def progress(iterable: Iterable[Any], *, length: int | None = None, label: str = "") -> Any:
    """A progress bar on a terminal, nothing in a pipeline (it draws on stderr)."""
    import sys

    if sys.stderr.isatty():
        return click.progressbar(iterable, length=length, label=label, file=sys.stderr)
    return _Quiet(iterable, length)


class _Quiet:
    """click.progressbar's interface, drawing nothing: callers iterate it or `update` it alike."""

    def __init__(self, iterable: Iterable[Any], length: int | None = None):
        self.iterable = iterable
        self.length = length

    def __enter__(self) -> "_Quiet":
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def __iter__(self) -> Any:
        return iter(self.iterable)

    def update(self, n_steps: int) -> None:
        return None
