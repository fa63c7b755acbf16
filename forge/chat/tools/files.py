"""The files tool: read and list under the workspace root (`FORGE_WORKSPACE`, default the working
directory). Paths are resolved with symlinks followed, and anything that lands outside the root
is refused, so neither `..` nor a symlink escapes it. The resolved path is then opened from the
root's descriptor one component at a time with `O_NOFOLLOW`: a symlink swapped in between the
check and the open is refused, never followed. Files that hold secrets (`forge.chat.tools.secrets`)
are refused unless `FORGE_READ_SECRETS` allows them."""
from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Any

from . import ToolContext, ToolResult, failure
from .secrets import refusal, secret_pattern

MAX_READ_BYTES = 1_000_000   # a read over this is refused, never cut (content is kept whole)
MAX_LIST_ENTRIES = 500


def resolve(root: Path, relative: str) -> Path | None:
    """The real path of `relative` under `root`, or None when it escapes the root."""
    base = Path(os.path.realpath(root))
    target = Path(os.path.realpath(base / relative))
    if target == base or base in target.parents:
        return target
    return None


def open_beneath(root: Path, target: Path, *, directory: bool) -> int:
    """A descriptor on `target` (a real path under `root`), opened from the root without
    following any link. Raises OSError (ELOOP, ENOTDIR) when a component became a link."""
    base = Path(os.path.realpath(root))
    parts = target.relative_to(base).parts
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
            flags |= os.O_DIRECTORY if (directory or not last) else os.O_NONBLOCK
            next_fd = os.open(part, flags, dir_fd=fd)
            os.close(fd)
            fd = next_fd
        return fd
    except BaseException:
        os.close(fd)
        raise


def run(ctx: ToolContext, payload: dict[str, Any]) -> ToolResult:
    op = str(payload.get("op") or ("read" if payload.get("path") not in (None, "", ".") else "list"))
    relative = str(payload.get("path") or ".")
    root = Path(ctx.settings.workspace)
    target = resolve(root, relative)
    if target is None:
        return failure(f"files: {relative!r} is outside the workspace ({root})")
    if op == "list":
        return _list(root, target, relative)
    if op == "read":
        base = Path(os.path.realpath(root))
        for name in (os.path.normpath(relative), str(target.relative_to(base))):
            pattern = secret_pattern(name, ctx.settings)
            if pattern:
                return failure(refusal("files", relative, pattern))
        return _read(root, target, relative)
    return failure(f"files: unknown op {op!r}; use read or list")


def _swapped(relative: str, e: OSError) -> ToolResult | None:
    if e.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
        return failure(f"files: {relative!r} changed into a link while it was being opened; "
                       "refused (links are checked, never followed blindly)")
    return None


def _list(root: Path, target: Path, relative: str) -> ToolResult:
    try:
        fd = open_beneath(root, target, directory=True)
    except OSError as e:
        return _swapped(relative, e) if e.errno == errno.ELOOP else failure(
            f"files: {relative!r} is not a directory")
    try:
        with os.scandir(fd) as entries:
            names = sorted(e.name + ("/" if e.is_dir() else "") for e in entries)
    finally:
        os.close(fd)
    if not names:
        return ToolResult(f"{relative}: empty directory")
    shown = names[:MAX_LIST_ENTRIES]
    more = f"\n({len(names) - len(shown)} more entries not shown)" if len(names) > len(shown) else ""
    return ToolResult("\n".join(shown) + more)


def _read(root: Path, target: Path, relative: str) -> ToolResult:
    try:
        fd = open_beneath(root, target, directory=False)
    except FileNotFoundError:
        return failure(f"files: no file {relative!r} in the workspace")
    except OSError as e:
        return _swapped(relative, e) or failure(f"files: cannot read {relative!r}: {e.strerror}")
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return failure(f"files: no file {relative!r} in the workspace")
        if info.st_size > MAX_READ_BYTES:
            return failure(f"files: {relative!r} is {info.st_size} bytes, over the "
                           f"{MAX_READ_BYTES}-byte read limit")
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
        data = b"".join(chunks)
    finally:
        os.close(fd)
    if b"\0" in data:
        return failure(f"files: {relative!r} is a binary file")
    if not data:
        return ToolResult(f"{relative}: empty file")
    return ToolResult(data.decode("utf-8", errors="replace"))
