"""`forge chat [MESSAGE]`: one turn, or a REPL on a terminal."""
from __future__ import annotations

import sys

import click

from .main import get_settings
from .output import emit_one, note, note_secrets, output_options


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


def _read_piped_line(prompt: str) -> str:
    """A line of a piped REPL: no prompt written (stdout holds only replies)."""
    line = sys.stdin.readline() if sys.stdin is not None else ""
    if not line:
        raise EOFError
    return line.rstrip("\n")


def _repl(settings, *, terminal: bool, stream: bool, turn_options: dict) -> None:
    import functools

    from ..chat.run import run_turn
    from ..chat.repl import Io, repl

    def write(text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

    io = Io(read_line=input if terminal else _read_piped_line, write=write, note=note,
            confirm=lambda q: click.confirm(q, default=False, err=True))
    if terminal:
        note("Forge chat. !help lists the commands; Ctrl-D leaves.")
    repl(settings, io=io, run_command=_run_cli_command,
         run_turn=functools.partial(run_turn, **turn_options), stream=stream,
         interactive=terminal)


# Request fields Forge itself sets from the conversation; `-o` cannot replace them.
RESERVED_OPTIONS = ("messages", "stream", "stream_options", "model", "cache_prompt", "id_slot")


def _options(pairs: tuple[tuple[str, str], ...]) -> dict:
    """`-o KEY VALUE` pairs as request fields: a number or true/false/null when it reads as
    one (JSON), else the text."""
    import json

    out = {}
    for key, value in pairs:
        if key in RESERVED_OPTIONS:
            raise click.BadParameter(f"{key!r} is set by Forge itself; options are sampling "
                                     "fields such as temperature, top_p, seed", param_hint="-o")
        try:
            out[key] = json.loads(value)
        except (ValueError, RecursionError):
            out[key] = value
    return out


@click.command()
@click.argument("message", required=False)
@click.option("-s", "--system", metavar="TEXT",
              help="Your instructions, after the router's system prompt (not stored).")
@click.option("-o", "--option", "option_pairs", type=(str, str), multiple=True,
              metavar="KEY VALUE", help="A request field for the server: -o temperature 0.7.")
@click.option("--no-stream", is_flag=True, help="Print the answer when it is complete.")
@click.option("--repl", "force_repl", is_flag=True,
              help="The REPL even when stdin is not a terminal: one line, one turn or !command.")
@output_options
def chat(message: str | None, system: str | None, option_pairs: tuple, no_stream: bool,
         force_repl: bool, fmt: str) -> None:
    """Send MESSAGE (`-` reads stdin) and print the answer; with no MESSAGE on a terminal,
    start a REPL (!help inside lists its commands).

    \b
    --json prints {"reply", "run_id", "answered", ...}. A reply that is
    a placeholder (empty, garbled, a loop, echoed instructions) is not
    kept and a notice says why on stderr.
    """
    settings = get_settings()
    turn_options = {"system": system, "options": _options(option_pairs)}
    # A scheduler may start us with no stdin at all (fd 0 closed: sys.stdin is None).
    stdin_tty = sys.stdin is not None and sys.stdin.isatty()
    if force_repl or (message is None and stdin_tty):
        if message is not None:
            raise click.UsageError("--repl reads its lines from stdin; give no MESSAGE")
        if fmt != "table":
            raise click.UsageError(f"--{fmt} goes with one MESSAGE, not the REPL")
        _repl(settings, terminal=stdin_tty, turn_options=turn_options,
              stream=not no_stream and sys.stdout.isatty())
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
    from ..chat.run import run_turn

    stream = fmt == "table" and sys.stdout.isatty() and not no_stream

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
                          confirm=lambda q: click.confirm(q, default=False, err=True),
                          **turn_options)
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
    note_secrets(result.secrets_redacted)
    if result.notice:
        note(f"({result.notice})")
