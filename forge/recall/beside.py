"""The sentence model in a process beside a fresh `forge recall`, on Linux.

A fresh recall loads the model while its channels run. In a second thread that load (numpy's
import, most of it) holds the interpreter's lock: on two cores it slowed the channels almost as
much as it overlapped them (docs/recall.md measures it). A child forked before the store opens
loads the model under a lock of its own, on the other core: it embeds the question as soon as it
has the model, then answers the recall's one request, the notes' cosines, computed by the same
functions a server runs in-process (`sentence.scored`, given to `Beside.start`), on one BLAS
thread as there, so the rows are the same. The recall sends it the notes and their stored rows
and receives (entry id, cosine) pairs: this process never imports numpy.

Only where it is cheap and safe: Linux (fork without exec is not safe where system libraries
forbid it, macOS), a process with one thread and without numpy (a server, the chat, a process
that has numpy already load in-process). The child reads nothing but its pipe and writes
nothing but its answers: its standard streams are /dev/null and every other descriptor it
inherited is closed, so a shell pipe or a socket is never held open by it. The recall ends it
once it has its rows, asked or not (`close`: one never asked would otherwise finish loading a
model nobody reads). Any failure of the child (the model missing, another model's rows, a crash,
no answer within ANSWER_WITHIN, written or read) makes the recall load the model itself, which
raises what it raises in-process.
"""
from __future__ import annotations

import os
import pickle
import select
import signal
import struct
import sys
import threading
import time
from typing import Any, Callable

_HEADER = struct.Struct("<I")
# How long a recall waits for the child, to take a request or to answer it, before it loads the
# model itself: a load takes ~0.1 s on a quiet machine, seconds on a loaded one; a child that
# hangs costs this, not forever.
ANSWER_WITHIN = 60.0
_ended: list[int] = []   # children ended but not yet reaped (reaped without waiting, later)


class Beside:
    """A forked child holding the sentence model (`start`), asked through two pipes."""

    def __init__(self, pid: int, to_child: int, from_child: int):
        self.pid, self._to, self._from = pid, to_child, from_child

    @classmethod
    def start(cls, load: Callable[[], Any], embed: Callable[[Any, str], Any],
              score: Callable[..., Any]) -> "Beside | None":
        """The child, forked now, which calls `load()` for the model, then `embed(model,
        question)` and `score(model, *request)` as it is asked; None where this process should
        load the model itself."""
        _reap()
        if (not sys.platform.startswith("linux") or "numpy" in sys.modules
                or threading.active_count() > 1):
            return None
        asks, asked = os.pipe()
        answered, answers = os.pipe()
        try:
            pid = os.fork()
        except OSError:
            for fd in (asks, asked, answered, answers):
                os.close(fd)
            return None
        if pid == 0:   # the child: it never returns into the command
            try:
                _serve(asks, answers, load, embed, score)
            finally:
                os._exit(0)
        os.close(asks)
        os.close(answers)
        os.set_blocking(asked, False)   # a child that stopped reading never blocks the recall
        return cls(pid, asked, answered)

    def embed(self, question: str) -> None:
        """Have the child embed `question` as soon as it has the model."""
        try:
            _write(self._to, ("question", question), time.monotonic() + ANSWER_WITHIN)
        except (OSError, TimeoutError):   # `nearest` finds it closed: this process loads it
            self.close(kill=True)

    def nearest(self, question: str, entries: list[Any], stored: dict[int, bytes],
                recorded: dict[str, Any] | None) -> list[tuple[int, float]] | None:
        """`score(model, question, entries, stored, recorded)` computed by the child; None when
        it could not (then this process computes it: the same result, or the error it raises)."""
        if not self.open:
            return None
        deadline = time.monotonic() + ANSWER_WITHIN
        try:
            _write(self._to, ("nearest", question, entries, stored, recorded), deadline)
            _wait(self._from, select.POLLIN, deadline)
            answer = _read(self._from)
        except (OSError, EOFError, TimeoutError, pickle.PickleError, struct.error):
            self.close(kill=True)
            return None
        if answer[0] != "ok":
            self.close()
            return None
        return answer[1]

    def close(self, *, kill: bool = False) -> None:
        """End the child: its pipes closed and a SIGTERM, which it leaves on (cleaning what it
        was writing), or, `kill`, a SIGKILL (one that did not answer). Reaped without waiting,
        now or at the next `start`. Once closed, a call does nothing (the pid, once reaped,
        may be another process's)."""
        if not self.open:
            return
        for fd in (self._to, self._from):
            try:
                os.close(fd)
            except OSError:
                pass
        self._to = self._from = -1
        try:
            os.kill(self.pid, signal.SIGKILL if kill else signal.SIGTERM)
        except OSError:
            pass
        _ended.append(self.pid)
        _reap()

    @property
    def open(self) -> bool:
        return self._to >= 0



def _wait(fd: int, event: int, deadline: float) -> None:
    """Until `fd` is ready for `event` (or closed at the other end), at the latest `deadline`."""
    poll = select.poll()
    poll.register(fd, event)
    left = deadline - time.monotonic()
    if left <= 0 or not poll.poll(left * 1000):
        raise TimeoutError(f"the process beside gave no sign in {ANSWER_WITHIN} s")


def _reap() -> None:
    for pid in list(_ended):
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done = pid
        if done:
            _ended.remove(pid)


def _write(fd: int, message: Any, deadline: float) -> None:
    """`message` whole to `fd`; on a non-blocking `fd` (the recall's), waiting for room until
    `deadline`."""
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(_HEADER.pack(len(data)) + data)
    while view:
        try:
            view = view[os.write(fd, view):]
        except BlockingIOError:
            _wait(fd, select.POLLOUT, deadline)


def _read(fd: int) -> Any:
    (size,) = _HEADER.unpack(_exactly(fd, _HEADER.size))
    return pickle.loads(_exactly(fd, size))


def _exactly(fd: int, size: int) -> bytes:
    parts, left = [], size
    while left:
        part = os.read(fd, left)
        if not part:
            raise EOFError("the other end closed the pipe")
        parts.append(part)
        left -= len(part)
    return b"".join(parts)


def _leave(*_: Any) -> None:
    raise SystemExit(0)


def _serve(asks: int, answers: int, load: Callable[[], Any], embed: Callable[[Any, str], Any],
           score: Callable[..., Any]) -> None:
    """The child's life: its descriptors its own, the model loaded, then its answers until the
    pipe ends or the recall ends it (SIGTERM: SystemExit, so a cache being written is cleaned)."""
    signal.signal(signal.SIGTERM, _leave)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    for fd in map(int, os.listdir("/proc/self/fd")):
        if fd > 2 and fd not in (asks, answers):
            try:
                os.close(fd)
            except OSError:
                pass   # the listing's own descriptor, already closed
    try:
        encoder = load()
    except Exception:
        encoder = None
    while True:
        try:
            message = _read(asks)
        except (OSError, EOFError):
            return
        if message[0] == "question":
            if encoder is not None:
                embed(encoder, message[1])
            continue
        try:
            if encoder is None:
                raise RuntimeError("no model")
            answer: tuple[Any, ...] = ("ok", score(encoder, *message[1:]))
        except Exception:
            answer = ("failed",)
        try:
            _write(answers, answer, time.monotonic() + ANSWER_WITHIN)
        except OSError:
            return
