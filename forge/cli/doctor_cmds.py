"""`forge doctor`: can it load sqlite-vec, reach each server, read each store. Never writes."""
from __future__ import annotations

import click

from .main import get_settings
from .output import emit, output_options


@click.command()
@output_options
def doctor(fmt: str) -> None:
    """Check the SQLite binding, sqlite-vec, FTS5, each configured server and each store.

    Read-only: it creates no file and opens the database read-only. Exits 1 when a check fails.
    """
    from ..memory.doctor import run

    rows = run(get_settings())
    emit(rows, fmt, columns=("check", "status", "detail"), wide=("detail",))
    failed = [r["check"] for r in rows if r["status"] == "fail"]
    if failed:
        raise click.ClickException(f"{len(failed)} check(s) failed: {', '.join(failed)}")
