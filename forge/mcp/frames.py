"""The frames an MCP client sends, screened before the SDK reads them: a frame the SDK would drop
unanswered, take in damaged, or answer with pydantic's multi-line text gets one JSON-RPC error.

The SDK's stdio reader (`mcp` 2.3) decodes stdin with `errors="replace"` (invalid UTF-8 became
U+FFFD in a stored memory) and drops, with a debug log, each line its message model refuses: a
lone surrogate escape, a number of 5,001 digits, deep nesting, invalid JSON, a batch array,
`"jsonrpc": "1.0"`; an object, a boolean or a fractional number as id even passes as a
notification. The client waiting on that id waits forever. Over streamable HTTP every POST is
answered, but such an id is taken for a notification (202, no answer) and `"jsonrpc": "1.0"` or
a batch get pydantic's validation text. No hook of the SDK sees those frames, and no newer
release answers them (docs/mcp.md has the upstream report). So:

- `screen(frame)` passes a frame on only when it is what the SDK accepts: UTF-8, JSON, no lone
  surrogate, no integer over MAX_INT_DIGITS digits, one object, `"jsonrpc": "2.0"`, an id that
  is a string or an integer, and the SDK's own message model (`jsonrpc_message_adapter`, the same
  call its reader makes). Any other frame gets -32700 (parse error) or -32600 (invalid request),
  with the frame's id when one can be read, else null (JSON-RPC 2.0, section 5).
- Over stdio Forge hands the SDK its own standard streams (`screened_stdio`: `sys.stdin` and
  `sys.stdout`, which the SDK serves in place when they are not descriptors 0 and 1). stdin
  reads one frame (a line) at a time from the real stdin and screens it; a frame over
  MAX_FRAME_BYTES is read past unkept and refused. stdout writes whole lines to the real stdout
  under one lock, the SDK's answers and the screen's errors alike, so no frame is cut by
  another; only the SDK holds its buffer, and text written to `sys.stdout` (a stray print) goes
  to stderr. Descriptors 0 and 1 point at the null device and at stderr while serving (a child
  process reads EOF and its output misses the protocol), as the SDK arranges when it owns them.
- Over HTTP `screened_http(app)` screens each POST body and answers a refused one with 400 and
  the error frame.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import threading
from typing import Any, Iterator

from ..core import checks

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
MAX_FRAME_BYTES = 2 ** 20     # a tool call of Forge's is a few KB (remember: 8,000 characters)
MAX_INT_DIGITS = 100          # an id or a limit has at most 19


def error_frame(code: int, message: str, request_id: Any = None) -> bytes:
    return (json.dumps({"jsonrpc": "2.0", "id": request_id,
                        "error": {"code": code, "message": message}},
                       separators=(",", ":")) + "\n").encode()


def _request_id(obj: Any) -> Any:
    """The frame's id when it is one JSON-RPC allows (a string or an integer), else None."""
    if not isinstance(obj, dict):
        return None
    rid = obj.get("id")
    return rid if isinstance(rid, str) or isinstance(rid, int) and not isinstance(rid, bool) \
        else None


def _integer(digits: str) -> int:
    """A JSON integer, refused past MAX_INT_DIGITS (Python's own refusal, past 4,300 digits,
    names its interpreter setting)."""
    if len(digits.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"a number of {len(digits.lstrip('-'))} digits (at most "
                         f"{MAX_INT_DIGITS})")
    return int(digits)


def screen(frame: bytes) -> tuple[bytes | None, bytes | None]:
    """(the frame to hand the SDK, or None; the error frame to answer, or None)."""
    frame = frame.rstrip(b"\r\n")
    if not frame.strip():
        return None, None
    try:
        text = frame.decode("utf-8")
    except UnicodeDecodeError as e:
        try:   # the id, read past the bad bytes, so the client knows which request failed
            rid = _request_id(json.loads(frame.decode("utf-8", "replace")))
        except (ValueError, RecursionError):
            rid = None
        return None, error_frame(PARSE_ERROR, f"Parse error: the frame is not UTF-8 (byte "
                                              f"0x{frame[e.start]:02x} at offset {e.start}); "
                                              "nothing was done", rid)
    try:
        obj = json.loads(text, parse_int=_integer)
    except RecursionError:
        return None, error_frame(PARSE_ERROR, "Parse error: the frame is nested too deeply")
    except ValueError as e:
        why = str(e).splitlines()[0][:120]
        return None, error_frame(PARSE_ERROR, f"Parse error: {why}")
    rid = _request_id(obj)
    try:
        checks.json_text(obj, "frame")
    except checks.BadValue as e:
        return None, error_frame(PARSE_ERROR, f"Parse error: {e.why}; nothing was done", rid)
    if isinstance(obj, list):
        return None, error_frame(INVALID_REQUEST, "Invalid Request: a batch (an array of "
                                                  "messages) is not supported; send one message "
                                                  "at a time")
    if not isinstance(obj, dict):
        return None, error_frame(INVALID_REQUEST, "Invalid Request: a message is a JSON object")
    if obj.get("jsonrpc") != "2.0":
        return None, error_frame(INVALID_REQUEST, 'Invalid Request: "jsonrpc" must be "2.0"', rid)
    if "id" in obj and rid is None:
        return None, error_frame(INVALID_REQUEST, "Invalid Request: an id is a string or an "
                                                  "integer")
    import mcp_types

    try:
        mcp_types.jsonrpc_message_adapter.validate_json(text, by_name=False)
    except ValueError:   # pydantic's ValidationError: not a request, notification or response
        return None, error_frame(INVALID_REQUEST, "Invalid Request: not a JSON-RPC request, "
                                                  "notification or response MCP reads", rid)
    return frame + b"\n", None


def _write_all(fd: int, data: bytes | bytearray) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class Wire(io.RawIOBase):
    """The real stdout: whole lines only, one writer at a time."""

    def __init__(self, fd: int):
        self.fd = fd
        self.lock = threading.Lock()
        self.pending = bytearray()

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        with self.lock:
            self.pending += data
            end = self.pending.rfind(b"\n") + 1
            if end:
                _write_all(self.fd, self.pending[:end])
                del self.pending[:end]
        return len(data)

    def frame(self, line: bytes) -> None:
        with self.lock:
            _write_all(self.fd, line)

    def fileno(self) -> int:
        raise io.UnsupportedOperation("the wire is served in place")


class Screened(io.RawIOBase):
    """The real stdin, screened frame by frame (see `screen`)."""

    def __init__(self, fd: int, wire: Wire):
        self.source = io.BufferedReader(io.FileIO(fd, "rb", closefd=False))
        self.wire = wire
        self.ready = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self.ready:
            line = self.source.readline(MAX_FRAME_BYTES + 1)
            if not line:
                return 0
            if len(line) > MAX_FRAME_BYTES and not line.endswith(b"\n"):
                while line and not line.endswith(b"\n"):   # read past it, keeping nothing
                    line = self.source.readline(65536)
                self.wire.frame(error_frame(INVALID_REQUEST, f"Invalid Request: the frame is "
                                                             f"over {MAX_FRAME_BYTES} bytes"))
                continue
            passed, answer = screen(line)
            if answer:
                self.wire.frame(answer)
            self.ready = passed or b""
        n = min(len(buffer), len(self.ready))
        buffer[:n] = self.ready[:n]
        self.ready = self.ready[n:]
        return n

    def fileno(self) -> int:
        raise io.UnsupportedOperation("stdin is served in place")


class _Stdout(io.TextIOWrapper):
    """sys.stdout while serving: its buffer is the wire (the SDK takes it); text written to it
    goes to stderr."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


class _Stdin(io.TextIOWrapper):
    """sys.stdin while serving: its buffer is the screened stdin (the SDK takes it); text read
    from it is at its end, as the null device is."""

    def read(self, size: int | None = -1) -> str:
        return ""

    def readline(self, size: int | None = -1) -> str:
        return ""


@contextlib.contextmanager
def screened_stdio() -> Iterator[None]:
    """While it lasts, sys.stdin and sys.stdout are the screened stdin and the wire (for the
    SDK's `stdio_server`), and descriptors 0 and 1 the null device and stderr."""
    sys.stdout.flush()
    wire_in, wire_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    saved = sys.stdin, sys.stdout
    try:
        os.dup2(null, 0)
        os.dup2(2, 1)
        wire = Wire(wire_out)
        sys.stdout = _Stdout(wire, encoding="utf-8")   # type: ignore[arg-type]
        sys.stdin = _Stdin(io.BufferedReader(Screened(wire_in, wire)), encoding="utf-8")
        yield
    finally:
        sys.stdin, sys.stdout = saved
        os.dup2(wire_in, 0)
        os.dup2(wire_out, 1)
        for fd in (null, wire_in, wire_out):
            os.close(fd)


class screened_http:
    """The streamable HTTP app, each POST body screened first (400 and the error frame when
    refused); inside forge serve's guard, so the body is already capped."""

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            return await self.app(scope, receive, send)
        chunks, more = [], True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return await self.app(scope, _replay([message]), send)
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        passed, answer = screen(body) if body.strip() else (body, None)
        if answer is not None:
            await send({"type": "http.response.start", "status": 400,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"content-length", str(len(answer)).encode())]})
            await send({"type": "http.response.body", "body": answer})
            return
        await self.app(scope, _replay([{"type": "http.request", "body": body,
                                        "more_body": False}], receive), send)


def _replay(messages: list[dict[str, Any]], then: Any = None) -> Any:
    """A `receive` that gives `messages`, then hands over to `then` (a disconnect, later)."""
    queue = list(messages)

    async def receive() -> dict[str, Any]:
        if queue:
            return queue.pop(0)
        if then is None:
            return {"type": "http.disconnect"}
        return await then()
    return receive
