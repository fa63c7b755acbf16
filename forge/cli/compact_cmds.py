"""`forge compact`, `forge context` and `forge history import` (attached to the history group)."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from .main import get_settings
from .output import emit, emit_one, note, note_secrets, output_options

STRATEGIES = ("rag_pointer", "llm_summary")
EXCHANGE_COLUMNS = ("status", "messages", "entry", "refs", "exchange")


def _ids(ids: list[int]) -> str:
    return ",".join(f"#{i}" for i in ids)


def _refs(refs: list[str]) -> str:
    """The first external ref and how many more (--json has them all)."""
    return "" if not refs else refs[0] + (f" +{len(refs) - 1}" if len(refs) > 1 else "")


def _exchange_rows(report: Any) -> list[dict[str, Any]]:
    rows = []
    for a in report.archived:
        status = "already stored" if a.already_stored else (
            "would archive" if report.dry_run else "archived")
        rows.append({"status": status, "messages": _ids(a.message_ids),
                     "entry": f"#{a.entry_id}" if a.entry_id else "", "refs": _refs(a.external_refs),
                     "exchange": a.preview})
    for left in report.left_out:
        rows.append({"status": f"left out: {left.reason}", "messages": _ids(left.message_ids),
                     "entry": "", "refs": "", "exchange": left.preview})
    return rows


@click.command()
@click.option("--strategy", type=click.Choice(STRATEGIES),
              help="Override COMPACTION_STRATEGY for this run.")
@click.option("--if-needed", is_flag=True,
              help="Only when a trigger fires (the cron form); exit 0 otherwise.")
@click.option("--dry-run", is_flag=True, help="Say what would happen; write nothing.")
@output_options
def compact(strategy: str | None, if_needed: bool, dry_run: bool, fmt: str) -> None:
    """Compact the history now, thresholds or not.

    The oldest non-pinned messages beyond COMPACTION_KEEP_RECENT (or, when the token trigger
    fires, enough to bring the router prompt under COMPACTION_TOKEN_TARGET) leave the history,
    cut at a user turn. rag_pointer stores each exchange as an archive entry and leaves one
    pointer message; llm_summary replaces them with a summary written by the chat model.
    Exchanges that answered nothing are left out and listed. Waits for the history lock; never
    prompts.
    """
    from ..memory.compaction import compact as run

    report = run(get_settings(), strategy=strategy, if_needed=if_needed, dry_run=dry_run)
    note_secrets(report.secrets_redacted)
    if not report.did_something:
        if fmt != "table":
            emit_one(report.to_dict(), fmt, text="")
        why = "under the thresholds" if report.trigger is None else "no exchange old enough to evict"
        note(f"nothing to compact ({why})")
        return
    if fmt != "table":
        emit_one(report.to_dict(), fmt, text="")
        return
    emit(_exchange_rows(report), fmt, columns=EXCHANGE_COLUMNS, wide=("exchange",))
    verb = "would remove" if dry_run else "removed"
    click.echo("")
    click.echo(f"trigger: {report.trigger}; strategy: {report.strategy}"
               + ("; dry run, nothing written" if dry_run else ""))
    archived = (f"would archive {len(report.archived)} exchange(s)" if dry_run
                else f"{len(report.archived)} exchange(s) archived")
    click.echo(f"{archived}, {len(report.left_out)} left out; "
               f"{verb} {len(report.removed_ids)} message(s): {report.messages_before} -> "
               f"{report.messages_after} in the history")
    if report.pointer:
        where = f" (#{report.pointer_id})" if report.pointer_id else ""
        click.echo(f"pointer{where}: {report.pointer}")
    click.echo(f"router prompt: {report.tokens_before} -> {report.tokens_after} tokens "
               f"({report.token_source})")
    if report.aggregate and "error" not in report.aggregate:
        a = report.aggregate
        click.echo(f"aggregation (COMPACTION_AGGREGATE): {a['written']} written, {a['absorbed']} "
                   f"absorbed, {a['refused']} refused (`forge aggregate` shows the plan)")


@click.command()
@output_options
def context(fmt: str) -> None:
    """What the next router prompt weighs in tokens, against the compaction thresholds, and the
    hot block a recall's synthesis prompt would carry. No embedding call."""
    from ..memory.compaction import context as weigh

    c = weigh(get_settings())
    if fmt != "table":
        emit_one(c, fmt, text="")
        return
    p, t, hot = c["router_prompt"], c["thresholds"], c["hot_block"]
    rows = [
        {"part": "system and tools", "tokens": p["system_tools"], "limit": ""},
        {"part": "history", "tokens": p["history"],
         "limit": f"{c['unpinned']} non-pinned messages of {t['messages']} (keeps {t['keep_recent']})"},
        {"part": "router prompt total", "tokens": p["total"],
         "limit": f"compacts at {t['tokens']}, down to {t['target']}"},
        {"part": "hot block (recall)", "tokens": hot["tokens"],
         "limit": f"{hot['entries']} entries, budget {hot['max_tokens']}"
                  + (f", {hot['left_out']} left out" if hot["left_out"] else "")},
    ]
    emit(rows, fmt, columns=("part", "tokens", "limit"), wide=("limit",))
    note(f"tokens counted by {'the chat server /tokenize' if c['token_source'] == 'server' else 'the offline estimate'}"
         + (f"; compaction would fire now ({c['trigger']})" if c["trigger"] else ""))
    if c["compaction_pending"]:
        note("warning: a compaction failed earlier; the cap holds until `forge compact` succeeds")


@click.command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, allow_dash=True))
@click.option("--from", "source_kind", type=click.Choice(("chatgpt", "claude")),
              help="FILE is a ChatGPT or Claude data export (conversations.json or the .zip); "
                   "found from the file's shape when left out.")
@click.option("--skip-bad", is_flag=True,
              help="Import the good records (or conversations) of a file with bad ones.")
@click.option("--compact", "compact_", is_flag=True,
              help="Compact as it imports, so the cap never drops an imported message.")
@output_options
def history_import(file: str, source_kind: str | None, skip_bad: bool, compact_: bool,
                   fmt: str) -> None:
    """Append a transcript to the history: FILE (or - for stdin) holds a JSON array or JSON
    Lines of {"role", "content", "ts"?, "ref"?, "answered"?}, or is a ChatGPT or Claude data
    export (its conversations.json or the .zip). Each message gets a new id and keeps its ref.
    A file with bad records imports nothing unless --skip-bad. An export is imported once: run
    again, it adds only what it has not imported before (and resumes an interrupted import)."""
    if file == "-" and source_kind:
        raise click.UsageError("--from reads a file (it is read twice), not stdin")
    if file != "-" and (source_kind or _is_export(Path(file))):
        _import_export(Path(file), source_kind, skip_bad, compact_, fmt)
        return
    from ..memory.history_import import BadRecordsError, decode, import_history

    name = "stdin" if file == "-" else file
    if file == "-":
        # No stdin at all (fd 0 closed, as some schedulers start jobs) reads as empty.
        data = sys.stdin.buffer.read() if sys.stdin is not None else b""
    else:
        data = Path(file).read_bytes()
    from .output import progress

    done = [0]
    try:
        with progress(range(0), length=1, label="importing") as bar:
            def advance(imported: int, total: int) -> None:
                bar.length = total
                bar.update(imported - done[0])
                done[0] = imported

            report = import_history(get_settings(), decode(data, name), source=name,
                                    skip_bad=skip_bad, compact=compact_, on_progress=advance)
    except BadRecordsError as e:
        for bad in e.bad:
            note(f"{name}: {bad}")
        raise
    for bad in report.skipped:
        note(f"{name}: skipped {bad}")
    span = f" (#{report.first_id}–#{report.last_id})" if report.first_id else ""
    text = f"imported {report.imported} message(s){span} from {name}"
    if report.compactions:
        text += (f"; {report.compactions} compaction(s) archived {report.archived} exchange(s), "
                 f"left out {report.left_out}")
    text += f"; the history holds {report.messages_after} message(s)"
    emit_one(report.to_dict(), fmt, text=text)
    note_secrets(report.secrets_redacted)


def _is_export(path: Path) -> bool:
    from ..memory.exports import sniff

    return path.suffix.lower() == ".zip" or sniff(path) is not None


def _import_export(path: Path, kind: str | None, skip_bad: bool, compact_: bool, fmt: str) -> None:
    from ..memory.export_import import import_export
    from .output import progress

    done = [0]
    with progress(range(0), length=1, label="importing conversations") as bar:
        def advance(conversations: int, total: int) -> None:
            bar.length = total
            bar.update(conversations - done[0])
            done[0] = conversations

        report = import_export(get_settings(), path, kind=kind, skip_bad=skip_bad,
                               compact=compact_, on_progress=advance)
    for bad in report.skipped:
        note(f"{path}: skipped {bad}")
    span = f" (#{report.first_id}–#{report.last_id})" if report.first_id else ""
    text = (f"imported {report.imported} message(s){span} of {report.conversations} "
            f"{report.kind} conversation(s) from {path}")
    extras = [f"{report.already} imported before" if report.already else "",
              f"{report.empty} empty" if report.empty else "",
              f"{len(report.skipped)} bad skipped" if report.skipped else ""]
    if any(extras):
        text += " (" + ", ".join(e for e in extras if e) + ")"
    if report.compactions:
        text += (f"; {report.compactions} compaction(s) archived {report.archived} exchange(s), "
                 f"left out {report.left_out}")
    text += f"; the history holds {report.messages_after} message(s)"
    emit_one(report.to_dict(), fmt, text=text)
    note_secrets(report.secrets_redacted)
