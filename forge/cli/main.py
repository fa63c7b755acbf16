"""`forge`: the Click group. Commands load lazily, so `forge --help` stays light.

Exceptions are translated once, here: ForgeError and any other failure become one line on
stderr and exit 1 (`FORGE_DEBUG=1` re-raises with the traceback); an exception nothing planned
for says it is a bug to report with that traceback. Click's usage errors exit 2, and so does an
argument that is not valid UTF-8.
"""
from __future__ import annotations

import importlib
import os
import sys
from typing import Any

import click

# name -> "module:attribute" under forge.cli. Keep each module's imports light at top level.
COMMANDS: dict[str, str] = {
    "chat": "chat_cmds:chat",
    "remember": "memory_cmds:remember",
    "recall": "memory_cmds:recall",
    "memory": "memory_cmds:memory",
    "reindex": "memory_cmds:reindex",
    "store": "store_cmds:store",
    "calibrate": "calibrate_cmds:calibrate",
    "compact": "compact_cmds:compact",
    "aggregate": "aggregate_cmds:aggregate",
    "resplit": "aggregate_cmds:resplit",
    "context": "compact_cmds:context",
    "history": "history_cmds:history",
    "pin": "history_cmds:pin",
    "unpin": "history_cmds:unpin",
    "drawer": "history_cmds:drawer",
    "trace": "trace_cmds:trace",
    "config": "config_cmds:config",
    "doctor": "doctor_cmds:doctor",
    "serve": "serve_cmds:serve",
    "mcp": "mcp_cmds:mcp",
}


# name -> the first paragraph of its help, so `forge --help` lists the commands without
# importing their modules (~30 ms). tests/test_cli.py checks it against each command.
SUMMARIES: dict[str, str] = {
    'aggregate': 'The aggregation tier: fold overlapping deliberate notes into one line, by arithmetic.',
    'calibrate': 'Measure hit and miss questions on this store and propose RECALL_MAX_DISTANCE.',
    'chat': 'Send MESSAGE (`-` reads stdin) and print the answer; with no MESSAGE on a terminal, start a REPL (!help inside lists its commands).',
    'compact': 'Compact the history now, thresholds or not.',
    'config': 'Effective settings and their source: default, .env or environment.',
    'context': "What the next router prompt weighs in tokens, against the compaction thresholds, and the hot block a recall's synthesis prompt would carry. No embedding call.",
    'doctor': 'Check the SQLite binding, sqlite-vec, FTS5, each configured server and each store.',
    'drawer': 'The drawer: every pinned message.',
    'history': 'Show the rolling conversation history (MEMORY_FILE).',
    'mcp': 'Serve the memory to MCP clients (Claude Desktop, Claude Code, editors, agents).',
    'memory': 'List, show, edit, export and forget deliberate memories.',
    'pin': 'Pin a message: compaction and the cap leave it alone.',
    'recall': 'Search the deliberate memory: three channels fused into one ranking.',
    'reindex': 'Re-embed every entry from its text with the configured embedder.',
    'remember': 'Write one deliberate memory: KIND (decision, todo, fact, preference, correction; fact when left out) and CONTENT (`-` reads it from stdin).',
    'resplit': 'Re-slice archive entries that hold several exchanges into one entry per exchange.',
    'serve': 'Serve the HTTP API and the web page at http://HOST:PORT/.',
    'store': 'The deliberate store as a whole: copy it between SQLite and PostgreSQL.',
    'trace': 'Execution traces (TRACE_FILE): one JSON line per run.',
    'unpin': 'Unpin one message (never its pair).',
}


class Checked(click.ParamType):
    """A value checked by one of forge/core/checks.py's functions (the same check every door
    calls): its refusal is click's usage error, `Invalid value for 'OPTION': WHY`, exit 2.
    `as_typed`: the option keeps the text as typed (a cursor, a filter) rather than the
    check's result (an id's int)."""

    def __init__(self, check: str, name: str, *, as_typed: bool = False):
        self.check, self.name, self.as_typed = check, name, as_typed

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        from ..core import checks

        try:
            checked = getattr(checks, self.check)(value)
        except checks.BadValue as e:
            self.fail(e.why, param, ctx)
        return value if self.as_typed else checked


class Number(click.IntRange):
    """click.IntRange (its help shows the range) read by checks.whole_number: ASCII digits
    only, within the range before anything uses the number."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        from ..core.checks import BadValue, whole_number

        try:
            return whole_number(value, "", minimum=self.min, maximum=self.max)
        except BadValue as e:
            self.fail(e.why, param, ctx)


# An id as the stores keep it: a whole number from 1 to 2^63-1 in ASCII digits (a larger one is
# a typo SQLite would refuse, "١" is not 1); a listing's cursor and its filter, kept as typed.
ENTRY_ID = Checked("entry_id", "integer")
CURSOR = Checked("cursor", "cursor", as_typed=True)
FILTER = Checked("filter_text", "text", as_typed=True)


def debug_enabled() -> bool:
    return os.environ.get("FORGE_DEBUG", "").strip() not in ("", "0", "false")


def terminal_columns(fallback: int = 80) -> int:
    """`shutil.get_terminal_size((fallback, 24)).columns` by its rules (COLUMNS, then the
    terminal of stdout, then `fallback`), without importing shutil: with bz2 and lzma it is
    ~2 ms of `forge --help` or of a `forge recall` table."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            stdout = sys.__stdout__
            columns = os.get_terminal_size(stdout.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or fallback


class _HelpFormatter(click.HelpFormatter):
    """Click's help formatter, its width found by `terminal_columns`."""

    def __init__(self, indent_increment: int = 2, width: int | None = None,
                 max_width: int | None = None) -> None:
        if width is None and click.formatting.FORCED_WIDTH is None:
            width = max(min(terminal_columns(), max_width or 80) - 2, 50)
        super().__init__(indent_increment, width, max_width)


def write_short_dl(formatter: click.HelpFormatter, rows: list[tuple[str, str]]) -> None:
    """`formatter.write_dl(rows)` for the command list, the same bytes: a row whose summary is
    one line that fits (what make_default_short_help gives) is written as is, where write_dl
    would run a TextWrapper per row (~1 ms of `forge --help` for 19 rows); any other row, or
    a name too wide for the first column, goes through write_dl itself."""
    first_col = min(max((len(name) for name, _ in rows), default=0), 30) + 2
    text_width = max(formatter.width - first_col - 2, 10)
    simple = all(len(name) <= first_col - 2 and name.isprintable() and summary.isprintable()
                 and len(summary) <= text_width and summary == " ".join(summary.split())
                 for name, summary in rows)
    if not simple:
        formatter.write_dl(rows)
        return
    indent = " " * formatter.current_indent
    for name, summary in rows:
        formatter.write(f"{indent}{name}{' ' * (first_col - len(name))}{summary}\n" if summary
                        else f"{indent}{name}\n")


class _Context(click.Context):
    formatter_class = _HelpFormatter


class ForgeGroup(click.Group):
    context_class = _Context

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        names = self.list_commands(ctx)
        if not names:
            return
        from click.utils import make_default_short_help

        limit = formatter.width - 6 - max(len(name) for name in names)
        rows = [(name, make_default_short_help(SUMMARIES.get(name, ""), limit)) for name in names]
        with formatter.section("Commands"):
            write_short_dl(formatter, rows)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        target = COMMANDS.get(name)
        if target is None:
            return None
        module, attr = target.split(":")
        return getattr(importlib.import_module(f"forge.cli.{module}"), attr)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        # Bytes that are not UTF-8 reach Python as lone surrogates: refuse them here, once for
        # every command, before one of them reaches SQLite, a file or a server.
        for arg in args:
            try:
                arg.encode("utf-8")
            except UnicodeEncodeError:
                shown = arg.encode("utf-8", "surrogateescape").decode("ascii", "backslashreplace")
                raise click.UsageError(f"the argument `{shown[:60]}` is not UTF-8 text; "
                                       "convert it first, e.g. `iconv -f latin1 -t utf-8`",
                                       ctx) from None
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except BrokenPipeError:
            # `forge history --nl | head`: the reader left; that is not an error.
            sys.stderr.close()
            raise click.exceptions.Exit(0)
        except KeyboardInterrupt:
            if debug_enabled():
                raise
            raise click.ClickException("interrupted") from None
        except Exception as e:
            if debug_enabled():
                raise
            from ..core.errors import ForgeError

            if isinstance(e, ForgeError):
                message = str(e)
            elif isinstance(e, OSError) and e.filename and e.strerror:
                # A path that is a folder, unreadable, on a full disk: the user's to fix.
                message = f"{e.filename}: {e.strerror}"
            else:
                # Nothing planned for it: a bug, and the traceback is what a report needs.
                message = (f"{type(e).__name__}: {e} -- this is a bug in Forge; please report it "
                           "with the traceback that `FORGE_DEBUG=1` prints when you run the same "
                           "command again")
            from ..core.settings import scrub  # a database URL's password never reaches the screen

            raise click.ClickException(scrub(message.splitlines()[0]) if message
                                       else type(e).__name__) from None


class _StderrFormatter:
    """`warning: …` / `info: …` / `error: …`, scrubbed of database passwords. A plain class
    (logging's handlers only call `format`), so defining it imports no `logging`."""

    def format(self, record: Any) -> str:
        level = "warning" if record.levelno >= 30 else "info"   # logging.WARNING
        if record.levelno >= 40:                                  # logging.ERROR
            level = "error"
        from ..core.settings import scrub

        return f"{level}: {scrub(record.getMessage())}"


def _attach_stderr_handler(logger: Any, verbose: bool) -> None:
    import logging

    for handler in list(logger.handlers):
        if getattr(handler, "_forge", False):
            logger.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_StderrFormatter())  # type: ignore[arg-type]
    handler._forge = True  # type: ignore[attr-defined]
    logger.addHandler(handler)
    logger.setLevel(logging.INFO if verbose else logging.WARNING)
    logger.propagate = True


def setup_logging(verbose: bool) -> None:
    """Messages of the "forge" logger on stderr, one line each; at once when `logging` is
    loaded, else before the first message (forge/core/log.py), so a command that logs nothing
    never imports it."""
    from ..core.log import when_loaded

    when_loaded(lambda logger: _attach_stderr_handler(logger, verbose))


@click.group(cls=ForgeGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", is_flag=True, help="Also print informational messages on stderr.")
@click.version_option(package_name="forge-memory", prog_name="forge")
@click.pass_context
def cli(ctx: click.Context, verbose: bool) -> None:
    """Forge: a personal assistant with a durable, explainable memory, for llama.cpp users.

    Three plain stores: the conversation history (JSON), the deliberate memory (SQLite with
    sqlite-vec and FTS5) and the execution traces (JSONL). Settings come from the environment
    and a `.env` file in the working directory; `forge config` shows them.
    """
    setup_logging(verbose)
    ctx.ensure_object(dict)


def get_settings(ctx: click.Context | None = None) -> Any:
    """Load and validate settings once per invocation (never at import, so --help needs none)."""
    ctx = ctx or click.get_current_context()
    root = ctx.find_root()
    root.ensure_object(dict)
    if "settings" not in root.obj:
        from ..core.settings import load_settings

        root.obj["settings"] = load_settings()
    return root.obj["settings"]


def run() -> None:
    """The `forge` script and `python -m forge`: the command, then Python's ordinary exit (every
    close, `__del__` and buffered write still happens). Library callers use `cli`."""
    cli(prog_name="forge")
