"""What tools/llama_server.py and tools/postgres_server.py share: the cache folder, a free
loopback port, a port check, a log's tail, and stopping a server by its process id without
signalling a reused pid.

Standard library only (the tools run before Forge is installed). tools/ is not a package: each
tool puts this folder at the END of sys.path and imports this module by name.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Callable


def forge_cache() -> Path:
    """Where the tools keep what they install: FORGE_CACHE_DIR, else $XDG_CACHE_HOME/forge,
    else ~/.cache/forge."""
    base = os.environ.get("FORGE_CACHE_DIR")
    if not base:
        xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        base = str(Path(xdg) / "forge")
    return Path(base).expanduser()


def free_port() -> int:
    """A loopback port nobody listens on right now (bind to 0, read it, release it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def listening(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def log_tail(path: Path, lines: int = 20) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.strip().splitlines()[-lines:])


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def runs_program(pid: int, is_name: Callable[[bytes], bool]) -> bool:
    """Is this pid running a program whose file name passes `is_name`? Guards `stop PID`
    against a reused pid."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return False
    except OSError:
        return alive(pid)  # no /proc (not Linux): trust the caller
    argv0 = cmdline.split(b"\0", 1)[0]
    return is_name(os.path.basename(argv0))


def stop_process(proc: subprocess.Popen | None, pid: int, *, ours: Callable[[int], bool],
                 sig: signal.Signals, timeout: float) -> bool:
    """Send `sig` to `pid` (our own `proc`, or a pid `ours` recognises), SIGKILL after
    `timeout`. False when there was nothing to stop. Only the one process id is signalled."""
    if proc is not None:
        if proc.poll() is not None:
            return False
    elif not ours(pid):
        return False
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    if proc is not None:
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        return True
    deadline = time.monotonic() + timeout
    while alive(pid) and ours(pid):
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            break
        time.sleep(0.05)
    return True
