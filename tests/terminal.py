"""Run the real `forge` with one of its output streams on a pseudo-terminal (what a user at a
terminal sees: progress bars, streamed answers), the other in a pipe."""
from __future__ import annotations

import os
import pty
import select
import subprocess
import sys


def run_with_a_terminal(args: list[str], *, on: str = "stdout") -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `forge ARGS` with `on` ("stdout" or "stderr") on a
    pseudo-terminal; stdin is empty."""
    primary, secondary = pty.openpty()
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, on: secondary}
    try:
        proc = subprocess.Popen([sys.executable, "-m", "forge", *args], stdin=subprocess.DEVNULL,
                                **pipes)
        os.close(secondary)
        seen = b""
        while True:
            ready, _, _ = select.select([primary], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(primary, 4096)
                except OSError:  # the child closed the terminal
                    break
                if not chunk:
                    break
                seen += chunk
            elif proc.poll() is not None:
                break
        other = (proc.stderr if on == "stdout" else proc.stdout).read()
        code = proc.wait(timeout=60)
    finally:
        os.close(primary)
    terminal = seen.decode(errors="replace")
    piped = other.decode(errors="replace")
    return (code, terminal, piped) if on == "stdout" else (code, piped, terminal)
