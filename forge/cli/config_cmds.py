"""`forge config`: every setting, its effective value and where it came from."""
from __future__ import annotations

import click

from .main import get_settings
from .output import emit, output_options


@click.command()
@output_options
def config(fmt: str) -> None:
    """Effective settings and their source: default, .env or environment.

    Validation runs first: a bad value or an inconsistent set is a one-line error naming the
    variable. No store is opened and no server is called.
    """
    rows = get_settings().rows()
    if fmt == "json":
        emit(rows, fmt, columns=(), document={r["setting"]: {"value": r["value"], "source": r["source"]}
                                              for r in rows})
    else:  # a float as typed (0.2, 120), not with a distance's four decimals
        shown = [{**r, "value": f"{r['value']:g}" if isinstance(r["value"], float) else r["value"]}
                 for r in rows]
        emit(shown, fmt, columns=("setting", "value", "source"), wide=("value",))
