"""The chat REPL: chat turns, and `!` commands that are the CLI's own commands.

Each `!` command is translated into the argument list of its CLI twin (`!recall x` is
`forge recall x`, `!clear` is `forge history clear`) and run by the caller's `run_command`, so
the REPL and the shell share one implementation and one rendering. Input and output go through
the callables the caller passes (the CLI passes the terminal), so this module prints nothing.
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any, Callable

from ..core.errors import ForgeError
from ..core.secret_scan import describe

PROMPT = "Forge > "

HELP = """\
Type a message to chat. Commands (each is the same code as its `forge` twin):
  !remember KIND CONTENT [--project P]   forge remember KIND CONTENT
  !recall QUERY                          forge recall QUERY (the raw rows)
  !memory [KIND]                         forge memory ls [KIND]
  !forget ID...                          forge memory forget ID...
  !compact                               forge compact
  !trace [N]                             forge trace tail -n N
  !clear [--all] [--yes]                 forge history clear (discards, never archives)
  !pin ID [--only]                       forge pin ID
  !help                                  this list
  !quit                                  leave (Ctrl-D too)
Ctrl-C during an answer stops it; nothing of it is kept."""


class ReplUsage(ValueError):
    """A `!` command the REPL cannot translate."""


def _remember(args: list[str]) -> list[str]:
    options: list[str] = []
    words: list[str] = []
    i = 0
    while i < len(args):
        if args[i] in ("--project", "-p") and i + 1 < len(args):
            options += ["--project", args[i + 1]]
            i += 2
            continue
        words.append(args[i])
        i += 1
    if len(words) < 2:
        raise ReplUsage("usage: !remember KIND CONTENT [--project P]")
    return ["remember", *options, words[0], " ".join(words[1:])]


def translate(line: str) -> list[str] | None:
    """The CLI arguments of a `!` command; None for !help. Raises ReplUsage."""
    try:
        parts = shlex.split(line[1:])
    except ValueError as e:
        raise ReplUsage(f"cannot read the command: {e}") from None
    if not parts:
        raise ReplUsage("an empty command; !help lists them")
    name, args = parts[0].lower(), parts[1:]
    if name == "help":
        return None
    if name == "remember":
        return _remember(args)
    if name == "recall":
        if not args:
            raise ReplUsage("usage: !recall QUERY")
        return ["recall", " ".join(args)]
    if name == "memory":
        return ["memory", "ls", *args]
    if name == "forget":
        return ["memory", "forget", *args]
    if name == "compact":
        return ["compact", *args]
    if name == "trace":
        return ["trace", "tail", "-n", args[0], *args[1:]] if args and args[0].isdigit() \
            else ["trace", "tail", *args]
    if name == "clear":
        return ["history", "clear", *args]
    if name == "pin":
        return ["pin", *args]
    raise ReplUsage(f"unknown command !{name}; !help lists them")


@dataclass
class Io:
    read_line: Callable[[str], str]           # raises EOFError at the end of input
    write: Callable[[str], None]              # the reply (stdout)
    note: Callable[[str], None]               # notices and errors (stderr)
    confirm: Callable[[str], bool]            # y/N for the shell tool


def repl(settings: Any, *, io: Io, run_command: Callable[[list[str]], None],
         run_turn: Callable[..., Any] | None = None, stream: bool = True,
         interactive: bool = True) -> int:
    """Read lines until EOF or !quit. Returns the number of chat turns run.

    `interactive`: a human answers (a terminal); False for lines from a pipe, where the shell
    tool cannot ask and so runs nothing."""
    if run_turn is None:
        from .run import run_turn
    turns = 0
    while True:
        try:
            line = io.read_line(PROMPT)
        except EOFError:
            return turns
        except KeyboardInterrupt:
            io.note("")
            continue
        line = line.strip()
        if not line:
            continue
        if line in ("!quit", "!exit", "!q"):
            return turns
        if line.startswith("!"):
            _command(line, io, run_command)
            continue
        turns += 1
        _turn(settings, line, io, run_turn, stream, interactive)


def _command(line: str, io: Io, run_command: Callable[[list[str]], None]) -> None:
    try:
        args = translate(line)
    except ReplUsage as e:
        io.note(f"error: {e}")
        return
    if args is None:
        io.write(HELP + "\n")
        return
    run_command(args)


def _turn(settings: Any, line: str, io: Io, run_turn: Callable[..., Any], stream: bool,
          interactive: bool = True) -> None:
    open_line = False  # streamed text not ended by a newline: an error must not glue onto it

    def write(text: str) -> None:
        nonlocal open_line
        io.write(text)
        if text:
            open_line = not text.endswith("\n")

    try:
        result = run_turn(settings, line, on_token=write if stream else None,
                          interactive=interactive, confirm=io.confirm)
    except KeyboardInterrupt:
        io.note("\n(interrupted: nothing of this answer was kept)")
        return
    except ForgeError as e:
        io.note(("\n" if open_line else "") + f"error: {e}")
        return
    rest = result.reply[len(result.shown):] if result.reply.startswith(result.shown) else ""
    if not result.shown and result.reply:
        rest = result.reply
    if rest or result.shown:
        io.write(rest + "\n")
    redacted = describe(result.secrets_redacted)
    if redacted:
        io.note(f"note: {redacted}")
    if result.notice:
        io.note(f"({result.notice})")
