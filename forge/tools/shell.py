"""The shell tool: one command in the workspace, off unless `shell` is in ENABLED_TOOLS.

In the REPL it asks y/N first. In a pipeline nobody can answer, so it refuses unless
FORGE_SHELL_AUTO=1. It is time-limited and its output is returned whole.
"""
from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from . import ToolContext, ToolResult, failure

TIMEOUT_S = 30


def run(ctx: ToolContext, payload: dict[str, Any]) -> ToolResult:
    command = str(payload.get("command") or payload.get("cmd") or "").strip()
    if not command:
        return failure("shell: no command in the payload")
    if ctx.interactive and ctx.confirm is not None and not ctx.settings.shell_auto:
        if not ctx.confirm(f"run `{command}` in {ctx.settings.workspace}?"):
            return failure(f"shell: the user declined to run `{command}`", reason="tool_refused")
    elif not ctx.settings.shell_auto:
        return failure(f"shell: refused to run `{command}` without a human to confirm; "
                       "set FORGE_SHELL_AUTO=1 to allow it in pipelines", reason="tool_refused")
    try:
        done = subprocess.run(command, shell=True, cwd=Path(ctx.settings.workspace),
                              capture_output=True, timeout=TIMEOUT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return failure(f"shell: `{command}` did not finish within {TIMEOUT_S}s and was stopped")
    out = (done.stdout + done.stderr).decode("utf-8", errors="replace").rstrip()
    return ToolResult(f"$ {command}\n{out}\n(exit {done.returncode})" if out
                      else f"$ {command}\n(exit {done.returncode})")
