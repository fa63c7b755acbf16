"""`forge history`, `forge history clear`, `forge pin`, `forge unpin`, `forge drawer`."""
from __future__ import annotations

from typing import Any

import click

from ..core.checks import MAX_COUNT
from .main import ENTRY_ID, Number, get_settings
from .output import confirm_destructive, emit, note, output_options

COLUMNS = ("id", "role", "pin", "answered", "ts", "content")


def _rows(messages: list[Any]) -> list[dict[str, Any]]:
    rows = []
    for m in messages:
        row = m.to_dict()
        row["pin"] = "pinned" if m.pinned else ""
        if not m.ts_known:   # the table's ts: the import's time, not when it was said
            row["shown_ts"] = f"{m.ts}?"
        rows.append(row)
    return rows


def _table(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**r, "ts": r.get("shown_ts", r["ts"])} for r in rows]


def _strip_display(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k not in ("pin", "shown_ts")} for r in rows]


def _show(messages: list[Any], fmt: str, empty: str) -> None:
    rows = _rows(messages)
    emit(_table(rows), fmt, columns=COLUMNS, empty=empty, data=_strip_display(rows))


@click.group(invoke_without_command=True)
@click.option("-n", "--last", "last", type=Number(1, MAX_COUNT), help="Only the last N messages.")
@click.option("--grep", "-g", "pattern", metavar="TEXT",
              help="Only messages whose content holds TEXT (any case).")
@output_options
@click.pass_context
def history(ctx: click.Context, last: int | None, pattern: str | None, fmt: str) -> None:
    """Show the rolling conversation history (MEMORY_FILE).

    Every message has a stable id, its full content, whether it is pinned and whether it was
    a genuine answer. Subcommands change it. With --grep and -n, the last N matches.
    """
    if ctx.invoked_subcommand is not None:
        return
    from ..store import history as store

    messages = store.read(get_settings().memory_file).messages
    if pattern is not None:
        messages = store.grep(messages, pattern)
    if last:
        messages = messages[-last:]
    _show(messages, fmt, "the history is empty" if pattern is None
          else f"no message holds {pattern!r}")


@history.command()
@click.option("--all", "everything", is_flag=True, help="Also discard pinned messages.")
@click.option("--dry-run", is_flag=True, help="List what would be discarded; change nothing.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask (needed when stdin is not a terminal).")
@output_options
def clear(everything: bool, dry_run: bool, yes: bool, fmt: str) -> None:
    """Discard the history without archiving it; pinned messages stay unless --all.

    Use it to throw away trial exchanges before compaction would archive them. Asks first on
    a terminal; needs --yes when stdin is not one.
    """
    from ..store import history as store

    path = get_settings().memory_file
    doomed = store.clear_plan(store.read(path), everything=everything)
    kept = "" if everything else "; pinned messages kept"
    if dry_run:
        emit(_table(_rows(doomed)), fmt, columns=COLUMNS, data=_strip_display(_rows(doomed)),
             empty="nothing to discard")
        if doomed:
            note(f"would discard {len(doomed)} message(s){kept}; dry run, nothing changed")
        return
    if doomed:
        confirm_destructive(f"discard {len(doomed)} message(s) without archiving them", yes)
    removed = store.clear(path, everything=everything)
    if fmt != "table":
        emit([{"id": m.id, "role": m.role} for m in removed], fmt, columns=("id", "role"))
    note(f"discarded {len(removed)} message(s){kept}")


def _pin(message_id: int, pinned: bool, only: bool, fmt: str) -> None:
    from ..store import history as store

    changed = store.set_pinned(get_settings().memory_file, message_id, pinned, only=only)
    verb = "pinned" if pinned else "unpinned"
    if fmt == "table":
        note(f"{verb} {', '.join(f'#{i}' for i in changed)}" if changed
             else f"#{message_id} was already {verb}")
    else:
        emit([{"id": i, "pinned": pinned} for i in changed], fmt, columns=("id", "pinned"))


@click.command()
@click.argument("message_id", type=ENTRY_ID)
@click.option("--only", is_flag=True, help="Pin this message alone, not its whole exchange.")
@output_options
def pin(message_id: int, only: bool, fmt: str) -> None:
    """Pin a message: compaction and the cap leave it alone.

    Pinning a question pins every message that answered it (up to the next user turn), and
    pinning an answer pins its question, unless --only.
    """
    _pin(message_id, True, only, fmt)


@click.command()
@click.argument("message_id", type=ENTRY_ID)
@output_options
def unpin(message_id: int, fmt: str) -> None:
    """Unpin one message (never its pair)."""
    _pin(message_id, False, True, fmt)


@click.command()
@output_options
def drawer(fmt: str) -> None:
    """The drawer: every pinned message."""
    from ..store import history as store

    _show(store.drawer(get_settings().memory_file), fmt, "the drawer is empty")


def _attach_import() -> None:
    """`forge history import` lives with compaction (it can compact as it goes)."""
    import importlib.util

    if importlib.util.find_spec("forge.cli.compact_cmds") is None:
        return
    from .compact_cmds import history_import  # light: compact_cmds imports heavy parts lazily

    history.add_command(history_import, name="import")


_attach_import()
