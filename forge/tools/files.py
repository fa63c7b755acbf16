"""The files tool: read and list under the workspace root (`FORGE_WORKSPACE`, default the working
directory). Paths are resolved with symlinks followed, and anything that lands outside the root
is refused, so neither `..` nor a symlink escapes it."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from . import ToolContext, ToolResult, failure

MAX_READ_BYTES = 1_000_000   # a read over this is refused, never cut (content is kept whole)
MAX_LIST_ENTRIES = 500


def resolve(root: Path, relative: str) -> Path | None:
    """The real path of `relative` under `root`, or None when it escapes the root."""
    base = Path(os.path.realpath(root))
    target = Path(os.path.realpath(base / relative))
    if target == base or base in target.parents:
        return target
    return None


def run(ctx: ToolContext, payload: dict[str, Any]) -> ToolResult:
    op = str(payload.get("op") or ("read" if payload.get("path") not in (None, "", ".") else "list"))
    relative = str(payload.get("path") or ".")
    root = Path(ctx.settings.workspace)
    target = resolve(root, relative)
    if target is None:
        return failure(f"files: {relative!r} is outside the workspace ({root})")
    if op == "list":
        return _list(target, relative)
    if op == "read":
        return _read(target, relative)
    return failure(f"files: unknown op {op!r}; use read or list")


def _list(target: Path, relative: str) -> ToolResult:
    if not target.is_dir():
        return failure(f"files: {relative!r} is not a directory")
    names = sorted(p.name + ("/" if p.is_dir() else "") for p in target.iterdir())
    if not names:
        return ToolResult(f"{relative}: empty directory")
    shown = names[:MAX_LIST_ENTRIES]
    more = f"\n({len(names) - len(shown)} more entries not shown)" if len(names) > len(shown) else ""
    return ToolResult("\n".join(shown) + more)


def _read(target: Path, relative: str) -> ToolResult:
    if not target.is_file():
        return failure(f"files: no file {relative!r} in the workspace")
    size = target.stat().st_size
    if size > MAX_READ_BYTES:
        return failure(f"files: {relative!r} is {size} bytes, over the {MAX_READ_BYTES}-byte read limit")
    data = target.read_bytes()
    if b"\0" in data:
        return failure(f"files: {relative!r} is a binary file")
    if not data:
        return ToolResult(f"{relative}: empty file")
    return ToolResult(data.decode("utf-8", errors="replace"))
