"""The shell tool: one command in the workspace, off unless `shell` is in ENABLED_TOOLS.

In the REPL it asks y/N first. In a pipeline nobody can answer, so it refuses unless
FORGE_SHELL_AUTO=1. It is time-limited and its output is returned whole.
"""
from __future__ import annotations

import os
import signal
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
    # Its own process group, so a timeout stops everything the command started, not only the
    # shell (a pipeline's members and subshells would otherwise run on).
    with subprocess.Popen(command, shell=True, cwd=Path(ctx.settings.workspace),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          stdin=subprocess.DEVNULL, start_new_session=True) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return failure(f"shell: `{command}` did not finish within {TIMEOUT_S}s and was stopped")
        except BaseException:   # Ctrl-C: the group no longer gets the terminal's SIGINT itself
            os.killpg(proc.pid, signal.SIGKILL)
            raise
    out = (stdout + stderr).decode("utf-8", errors="replace").rstrip()
    return ToolResult(f"$ {command}\n{out}\n(exit {proc.returncode})" if out
                      else f"$ {command}\n(exit {proc.returncode})")
