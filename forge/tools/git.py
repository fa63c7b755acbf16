"""The git tool, read-only: status, log, diff, show in the workspace.

Only a known set of flags is accepted, because some flags of these read commands write or run
things (`--output=FILE`, external diff and textconv drivers); config that could run a program
(fsmonitor, pager) is switched off on the command line.
"""
from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

from . import ToolContext, ToolResult, failure

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
        if arg.startswith("-") and not _SAFE_FLAGS.match(arg):
            if not (i > 0 and args[i - 1] == "-n" and arg.isdigit()):
                return failure(f"git: flag {arg!r} is not allowed (read-only tool)")
    extra = ["--no-ext-diff", "--no-textconv"] if op in ("diff", "show", "log") else []
    root = Path(ctx.settings.workspace)
    try:
        done = subprocess.run([*_BASE, "-C", str(root), op, *extra, *args], capture_output=True,
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
