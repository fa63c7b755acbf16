"""Crash- and concurrency-safe file primitives shared by the JSON and JSONL stores.

- `locked(path)`: an exclusive advisory lock on `path + ".lock"` that another forge process
  waits on. It is a separate file so the data file itself can be replaced by rename. Whoever
  takes it removes the temporary files of a writer that died mid-rewrite (kill -9): every
  rewrite of `path` happens under the lock, so while we hold it no live writer owns one.
- `atomic_write(path, data)`: temporary file in the same folder, fsync, rename, fsync the folder.
- `append_line(path, line)`: one `write()` of the whole line on an O_APPEND descriptor, so two
  processes never interleave (Python's buffered writer may split a long line in several writes).
  A file whose last line is torn (a crash mid-append, a full disk) gets a newline first, so the
  new record never glues onto the broken one.
- `rewrite_log(path, change)`: such a log rewritten whole (`forge memory scan --redact`), under
  the lock its appenders take, without losing an append that waited for it.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import time
from pathlib import Path
from typing import Callable, Iterator

from .errors import LockTimeout

DEFAULT_LOCK_TIMEOUT = 60.0


def folder_error(path: Path, error: OSError) -> Exception:
    """A write that failed on the folder itself, said in one line: read-only, or a file."""
    from .errors import ForgeError

    folder = Path(path).parent
    if folder.exists() and not folder.is_dir():
        return ForgeError(f"{folder} is a file, not a folder: FORGE_DATA_DIR must name a folder")
    if isinstance(error, PermissionError) or error.errno == 30:  # EROFS: a read-only mount
        return ForgeError(f"the data folder {folder} is read-only: cannot write {Path(path).name} "
                          "(make it writable or point FORGE_DATA_DIR elsewhere)")
    return error


@contextlib.contextmanager
def locked(path: Path, *, timeout: float = DEFAULT_LOCK_TIMEOUT) -> Iterator[None]:
    lock_path = Path(str(path) + ".lock")
    try:
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise folder_error(path, e) from None
    try:
        deadline = time.monotonic() + timeout
        delay = 0.001
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise LockTimeout(
                        f"{path} is locked by another forge process for more than {timeout:.0f}s"
                    ) from None
                time.sleep(delay)
                delay = min(delay * 2, 0.05)
        _remove_dead_temporaries(path)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _temporary_prefix(path: Path) -> str:
    return f".{path.name}."


def _remove_dead_temporaries(path: Path) -> None:
    """Called with the lock held: a temporary file of `path` now belongs to a dead writer."""
    for leftover in path.parent.glob(f"{glob_escape(_temporary_prefix(path))}*.tmp"):
        with contextlib.suppress(OSError):
            leftover.unlink()


def glob_escape(text: str) -> str:
    return "".join(f"[{c}]" if c in "*?[" else c for c in text)


def atomic_write(path: Path, data: bytes, *, mode: int | None = None) -> None:
    """Replace `path` with `data` whole or not at all; `mode`: the new file's permissions
    (mkstemp's 0600 otherwise)."""
    import tempfile  # here: its import (random, shutil) is ~3 ms of a listing that writes nothing

    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=_temporary_prefix(path), suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def append_line(path: Path, line: bytes) -> None:
    if not line.endswith(b"\n"):
        line += b"\n"
    while True:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as e:
            raise folder_error(path, e) from None
        # A short write to a regular file is near impossible, but if it ever happens the rest
        # must follow before anyone else appends: the flock makes the loop one unit.
        fcntl.flock(fd, fcntl.LOCK_EX)
        if os.fstat(fd).st_nlink:
            break
        os.close(fd)   # `rewrite_log` replaced the file while we waited: append to the new one
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            line = b"\n" + line
        view = memoryview(line)
        while view:
            written = os.write(fd, view)
            view = view[written:]
    finally:
        os.close(fd)


def rewrite_log(path: Path, change: Callable[[bytes], bytes]) -> bool:
    """Replace an append-only log (`append_line`'s file) by `change(its bytes)`, atomically,
    holding the lock its appenders take: an append waiting meanwhile goes to the new file
    (`append_line` reopens a file that was replaced). False when there is no file or nothing
    changed."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with os.fdopen(os.dup(fd), "rb") as fh:
            data = fh.read()
        new = change(data)
        if new == data:
            return False
        atomic_write(path, new, mode=0o644)
        return True
    finally:
        os.close(fd)
