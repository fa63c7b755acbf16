"""`forge chat [MESSAGE]`: one turn, or a REPL on a terminal."""
from __future__ import annotations

import sys

import click

from .main import get_settings
from .output import emit_one, note, output_options


def _run_cli_command(args: list[str]) -> None:
    """Run a `forge` subcommand in-process for the REPL: its errors are one line, not an exit."""
    from .main import cli

    try:
        cli.main(args=args, prog_name="forge", standalone_mode=False)
    except click.ClickException as e:
        note(f"error: {e.format_message()}")
    except click.exceptions.Exit:
        pass
    except click.Abort:
        note("aborted")


def _repl(settings) -> None:
    from ..repl import Io, repl

    def read_line(prompt: str) -> str:
        return input(prompt)

    def write(text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

    io = Io(read_line=read_line, write=write, note=note,
            confirm=lambda q: click.confirm(q, default=False, err=True))
    note("Forge chat. !help lists the commands; Ctrl-D leaves.")
    repl(settings, io=io, run_command=_run_cli_command)


@click.command()
@click.argument("message", required=False)
@output_options
def chat(message: str | None, fmt: str) -> None:
    """Send MESSAGE (`-` reads stdin) and print the answer; with no MESSAGE on a terminal,
    start a REPL (!help inside lists its commands).

    \b
    --json prints {"reply", "run_id", "answered", ...}. A reply that is a placeholder (empty,
    garbled, a loop, echoed instructions) is not kept and a notice says why on stderr.
    """
    settings = get_settings()
    # A scheduler may start us with no stdin at all (fd 0 closed: sys.stdin is None).
    stdin_tty = sys.stdin is not None and sys.stdin.isatty()
    if message is None and stdin_tty:
        _repl(settings)
        return
    from_stdin = message is None or message == "-"
    if from_stdin:
        message = sys.stdin.read() if sys.stdin is not None else ""
    if not message.strip():
        raise click.UsageError("the message is empty" + (
            " (no MESSAGE given and nothing on stdin)" if from_stdin else ""))
    try:
        message.encode("utf-8")
    except UnicodeEncodeError:  # undecodable bytes reach us as surrogates
        raise click.UsageError(f"the message{' on stdin' if from_stdin else ''} is not UTF-8 text; "
                               "convert it first, e.g. `iconv -f latin1 -t utf-8`") from None
    from ..chat import run_turn

    stream = fmt == "table" and sys.stdout.isatty()

    streamed = {"open_line": False}

    def write(text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()
        if text:
            streamed["open_line"] = not text.endswith("\n")

    # A human at a terminal can answer the shell tool's y/N; a pipeline cannot.
    interactive = not from_stdin and stdin_tty
    try:
        result = run_turn(settings, message, on_token=write if stream else None,
                          interactive=interactive,
                          confirm=lambda q: click.confirm(q, default=False, err=True))
    except BaseException:
        if streamed["open_line"]:  # the error must not glue onto half an answer
            write("\n")
        raise
    if fmt == "table":
        if result.shown:
            rest = result.reply[len(result.shown):] if result.reply.startswith(result.shown) else ""
            click.echo(rest)
        elif result.reply:
            click.echo(result.reply)
    else:
        emit_one(result.to_dict(), fmt, text=result.reply)
    if result.notice:
        note(f"({result.notice})")
