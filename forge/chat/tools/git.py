"""The git tool, read-only: status, log, diff, show in the workspace.

Only a known set of flags is accepted, because some flags of these read commands write or run
things (`--output=FILE`, external diff and textconv drivers); config that could run a program
(fsmonitor, pager) is switched off on the command line.

Confined to the workspace even when it is a folder of a larger repository (the default
workspace, the working directory, usually is): every command gets the pathspec `.` (or the
paths given, each checked to stay inside), a `REV:PATH` is read relative to the workspace
(`REV:./PATH`) and refused when PATH leaves it, and pathspec magic (`:/`, `:(top)`) is refused.
Secret files (`forge.chat.tools.secrets`) are excluded by pathspec and refused in `REV:PATH`.
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

from . import ToolContext, ToolResult, failure
from .secrets import git_excludes, refusal, secret_pattern

OPS = ("status", "log", "diff", "show")
TIMEOUT_S = 20
_SAFE_FLAGS = re.compile(
    r"^(-\d+|-n|-p|-s|-b|--oneline|--stat|--shortstat|--name-only|--name-status|--cached|"
    r"--staged|--short|--porcelain|--graph|--all|--decorate|--no-color|--patch|--summary|"
    r"--max-count=\d+|--since=[^\s]+|--until=[^\s]+|--author=[^\s]+|--grep=[^\s]+|"
    r"--format=[^\s]*|--pretty=[^\s]*|--reverse|--branch|--word-diff)$"
)
_BASE = ["git", "--no-pager", "-c", "core.fsmonitor=false", "-c", "core.pager=cat",
         "-c", "diff.external=", "-c", "color.ui=false"]


def run(ctx: ToolContext, payload: dict[str, Any]) -> ToolResult:
    op = str(payload.get("op") or "status").strip()
    if op not in OPS:
        return failure(f"git: {op!r} is not allowed; read-only ops: {', '.join(OPS)}")
    raw = payload.get("args") or []
    try:
        args = shlex.split(raw) if isinstance(raw, str) else [str(a) for a in raw]
    except ValueError as e:
        return failure(f"git: cannot read the arguments: {e}")
    for i, arg in enumerate(args):
        if arg == "--":
            break  # paths from here on
        if arg.startswith("-") and not _SAFE_FLAGS.match(arg):
            if not (i > 0 and args[i - 1] == "-n" and arg.isdigit()):
                return failure(f"git: flag {arg!r} is not allowed (read-only tool)")
    extra = ["--no-ext-diff", "--no-textconv"] if op in ("diff", "show", "log") else []
    root = Path(ctx.settings.workspace)
    confined = confine(root, args, ctx.settings)
    if isinstance(confined, ToolResult):
        return confined
    try:
        done = subprocess.run([*_BASE, "-C", str(root), op, *extra, *confined], capture_output=True,
                              timeout=TIMEOUT_S, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        return failure("git: the git program is not installed")
    except subprocess.TimeoutExpired:
        return failure(f"git {op}: no result within {TIMEOUT_S}s")
    out = done.stdout.decode("utf-8", errors="replace")
    if done.returncode != 0:
        err = done.stderr.decode("utf-8", errors="replace").strip().splitlines()
        return failure(f"git {op} failed: {err[0] if err else f'exit {done.returncode}'}")
    return ToolResult(out if out.strip() else f"(git {op}: no output)")


def _inside(root: Path, relative: str) -> bool:
    base = os.path.realpath(root)
    target = os.path.realpath(os.path.join(base, relative))
    return target == base or target.startswith(base + os.sep)


def _leaves(arg: str, root: Path) -> ToolResult:
    return failure(f"git: {arg!r} leaves the workspace ({root}); paths and REV:PATH are read "
                   "relative to it")


def confine(root: Path, args: list[str], settings: Any) -> list[str] | ToolResult:
    """The arguments with every path kept inside the workspace and the pathspec that confines
    the command to it; a ToolResult (refusal) when an argument leaves it."""
    before: list[str] = []
    paths: list[str] = []
    after_separator = False
    value_of_n = False
    for arg in args:
        if value_of_n:
            before.append(arg)
            value_of_n = False
            continue
        if arg == "--" and not after_separator:
            after_separator = True
            continue
        if not after_separator and arg.startswith("-"):
            before.append(arg)
            value_of_n = arg == "-n"
            continue
        if arg.startswith(":"):
            return _leaves(arg, root)  # :/ (top), :(magic), :path (the index, from the top)
        if not after_separator and ":" in arg:
            rev, path = arg.split(":", 1)
            norm = os.path.normpath(path) if path else "."
            if os.path.isabs(norm) or not _inside(root, norm):
                return _leaves(arg, root)
            pattern = secret_pattern(norm, settings)
            if pattern:
                return failure(refusal("git", arg, pattern))
            before.append(f"{rev}:./" + ("" if norm == "." else norm))
            continue
        if not _inside(root, arg):
            return _leaves(arg, root)
        if after_separator or os.path.lexists(os.path.join(root, arg)):
            pattern = secret_pattern(os.path.normpath(arg), settings)
            if pattern:
                return failure(refusal("git", arg, pattern))
            paths.append(arg)
        else:
            before.append(arg)  # a revision
    if any(":" in a and not a.startswith("-") for a in before):
        return before  # a blob or tree (REV:PATH) takes no pathspec
    return [*before, "--", *(paths or ["."]), *git_excludes(settings)]
