"""A fake llama-server on a loopback port, for what a real one will not do on demand.

Use the real server (`llama_chat_server` / `llama_embedding_server` in tests/servers.py) for wire
formats; use this one for failures and for scripted model decisions. Its default answers copy the
shapes measured on llama-server 11434.0.0 (tests/test_wire_llama.py pins those):

- `GET /health` -> `{"status": "ok"}`; `GET /props` -> `model_path`, `total_slots`, `n_ctx`...
- `POST /v1/chat/completions` -> the next scripted reply (default `"ok"`), non-stream or SSE stream
  (chunked, `data: {...}` lines, a chunk with `finish_reason` and `timings`, or with
  `stream_options.include_usage` a chunk with `finish_reason` then one with `usage` and `timings`
  and empty `choices`, then `data: [DONE]`), with `model`, `usage`, `timings`
  (`prompt_n`, `prompt_ms`, `cache_n`, `predicted_n`, `predicted_ms`, ...).
- `POST /embedding` -> `[{"index": i, "embedding": [[...]]}]` (a list inside a list), one item
  per input; `POST /v1/embeddings` -> `{"model", "object", "usage", "data": [{"index",
  "object", "embedding": [...]}]}`. Vectors are deterministic per text and L2-normalised.
- `POST /tokenize` -> `{"tokens": [...]}`: one token per word or punctuation mark.

Scripting (each scripted behaviour answers the next request on its path, `times=None` keeps it
for every request until `reset()`):

    def test_timeout(fake_server):                      # the fixture from tests/servers.py
        fake_server.delay("/v1/chat/completions", 5)   # answers after 5 s
        fake_server.status("/embedding", 500, {"error": {"code": 500, "message": "boom"}})
        fake_server.body("/embedding", b"<html>not json</html>")
        fake_server.body("/embedding", {"data": "wrong shape"})     # 200, JSON, wrong shape
        fake_server.stream_dies(after=2)               # SSE: 2 content chunks, then the socket dies
        fake_server.chat_reply('{"tool": "memory", "action": "recall", "query": "x"}')
        fake_server.chat_reply("hello", prompt_n=40, cache_n=32)  # queue: one per request
        fake_server.embedding_vectors([[1.0, 0.0], [0.0, 1.0]])  # next /embedding answer
        url = fake_server.url                          # http://127.0.0.1:PORT
        ...
        assert fake_server.requests[-1].json["messages"][0]["role"] == "system"
        assert fake_server.paths() == ["/v1/chat/completions"]

    closed_url()       # a loopback URL where nothing listens: connection refused
    fake_server.refuse()  # stop listening; fake_server.url now refuses connections
"""
from __future__ import annotations

import hashlib
import json
import math
import re
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterable

MODEL_PATH = "/models/fake-model.gguf"
WORD = re.compile(r"\w+|[^\w\s]", re.UNICODE)

__all__ = ["FakeServer", "RecordedRequest", "closed_url", "fake_vector", "fake_tokens", "shape"]


def shape(value: Any) -> Any:
    """The skeleton of a JSON document: keys and value types, no values. The wire tests compare
    the real server's answers with this fake's through it, so the two cannot drift apart."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [shape(value[0])] if value else []
    if value is None:
        return "null"
    return type(value).__name__


def closed_url() -> str:
    """A loopback URL with nothing listening on it (bind port 0, then release it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def fake_tokens(text: str) -> list[int]:
    """Deterministic token ids: one per word or punctuation mark."""
    return [int.from_bytes(hashlib.sha256(w.encode()).digest()[:2], "big") for w in WORD.findall(text)]


def fake_vector(text: str, dim: int) -> list[float]:
    """A deterministic unit vector for a text (same text, same vector; no meaning in it)."""
    seed = hashlib.sha256(text.encode("utf-8")).digest()
    raw = [(seed[i % 32] - 127.5) + (i % 7) for i in range(dim)]
    norm = math.sqrt(sum(x * x for x in raw)) or 1.0
    return [x / norm for x in raw]


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    json: Any  # parsed body, or None when it was empty or not JSON


@dataclass
class _Behaviour:
    kind: str  # delay | status | body | stream_dies | chat | embedding
    args: dict[str, Any]
    times: int | None  # None: every request until reset()


@dataclass
class _Script:
    queue: deque = field(default_factory=deque)

    def next(self, *, skip_delays: bool = False) -> _Behaviour | None:
        """The first behaviour in line (after a delay, the first that is not a delay), used up."""
        for item in self.queue:
            if skip_delays and item.kind == "delay":
                continue
            if item.times is not None:
                item.times -= 1
                if item.times <= 0:
                    self.queue.remove(item)
            return item
        return None


class FakeServer:
    """A threaded HTTP server on 127.0.0.1 that answers like llama-server, or fails on cue."""

    def __init__(self, *, embedding_dim: int = 16, n_ctx: int = 4096, model: str = MODEL_PATH):
        self.embedding_dim = embedding_dim
        self.n_ctx = n_ctx
        self.model = model
        self.default_chat = "ok"
        self.requests: list[RecordedRequest] = []
        self._scripts: dict[str, _Script] = {}
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        # A short poll interval: shutdown() waits for it, once per test.
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.02,),
                                        daemon=True, name=f"fakeserver:{self.port}")
        self._thread.start()

    # -- lifecycle
    def __enter__(self) -> "FakeServer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Stop listening and release the port; delayed answers are abandoned."""
        if self._closing.is_set():
            return
        self._closing.set()
        self._httpd.shutdown()
        self._httpd.server_close()

    def refuse(self) -> str:
        """From now on `self.url` refuses connections (the port is closed). Returns the URL."""
        self.close()
        return self.url

    # -- scripting
    def _add(self, path: str, kind: str, times: int | None, **args: Any) -> "FakeServer":
        if times is not None and times < 1:
            raise ValueError("times must be >= 1, or None for every request")
        with self._lock:
            self._scripts.setdefault(path, _Script()).queue.append(_Behaviour(kind, args, times))
        return self

    def delay(self, path: str, seconds: float, *, times: int | None = 1) -> "FakeServer":
        """Wait `seconds` before answering (then the next behaviour or the default answer)."""
        return self._add(path, "delay", times, seconds=seconds)

    def status(self, path: str, code: int, body: Any = b"", *, times: int | None = 1) -> "FakeServer":
        """Answer HTTP `code` with `body` (bytes or str as is; anything else as JSON)."""
        return self._add(path, "status", times, code=code, body=body)

    def body(self, path: str, raw: Any, *, status: int = 200,
             content_type: str = "application/json", times: int | None = 1) -> "FakeServer":
        """Answer `raw` (bytes/str as is, e.g. non-JSON; a dict/list as JSON of the wrong shape)."""
        return self._add(path, "body", times, code=status, body=raw, content_type=content_type)

    def stream_dies(self, path: str = "/v1/chat/completions", *, after: int = 2,
                    times: int | None = 1) -> "FakeServer":
        """Start an SSE chat stream, send `after` content chunks, then drop the connection
        without the terminating chunk (a transport error for the client, not a clean end)."""
        return self._add(path, "stream_dies", times, after=after)

    def chat_reply(self, content: str, *, times: int | None = 1, **overrides: Any) -> "FakeServer":
        """Queue one `/v1/chat/completions` answer. `overrides`: model, prompt_n, cache_n,
        predicted_n, prompt_ms, predicted_ms, finish_reason, timings (None: no timings block)."""
        return self._add("/v1/chat/completions", "chat", times, content=content, **overrides)

    def chat_replies(self, contents: Iterable[str]) -> "FakeServer":
        for content in contents:
            self.chat_reply(content)
        return self

    def embedding_vectors(self, vectors: list[list[float]], *, path: str = "/embedding",
                          times: int | None = 1) -> "FakeServer":
        """Answer the next embedding request with these vectors (in the endpoint's own shape)."""
        return self._add(path, "embedding", times, vectors=vectors)

    def reset(self, path: str | None = None) -> None:
        """Forget scripted behaviours (for one path, or all) and recorded requests (all only)."""
        with self._lock:
            if path is None:
                self._scripts.clear()
                self.requests.clear()
            else:
                self._scripts.pop(path, None)

    # -- inspection
    def paths(self) -> list[str]:
        return [r.path for r in self.requests]

    def requests_to(self, path: str) -> list[RecordedRequest]:
        return [r for r in self.requests if r.path == path]

    def _next(self, path: str, *, skip_delays: bool = False) -> _Behaviour | None:
        with self._lock:
            script = self._scripts.get(path)
            return script.next(skip_delays=skip_delays) if script else None

    # -- default answers (shapes of the real server)
    def chat_completion(self, request: Any, content: str, **o: Any) -> dict:
        prompt_n = o.get("prompt_n", _prompt_tokens(request))
        cache_n = o.get("cache_n", 0)
        predicted_n = o.get("predicted_n", max(1, len(fake_tokens(content))))
        model = o.get("model", self.model)
        doc = {
            "choices": [{"finish_reason": o.get("finish_reason", "stop"), "index": 0,
                         "message": {"role": "assistant", "content": content}}],
            "created": int(time.time()), "model": model, "system_fingerprint": "b0-fake",
            "object": "chat.completion",
            "usage": _usage(prompt_n, cache_n, predicted_n),
            "id": f"chatcmpl-fake{len(self.requests)}",
        }
        timings = _timings(prompt_n, cache_n, predicted_n, o)
        if timings is not None:
            doc["timings"] = timings
        return doc

    def chat_chunks(self, request: Any, content: str, **o: Any) -> list[dict]:
        """The SSE events of a streamed answer, before `[DONE]`."""
        full = self.chat_completion(request, content, **o)
        base = {"created": full["created"], "id": full["id"], "model": full["model"],
                "system_fingerprint": full["system_fingerprint"], "object": "chat.completion.chunk"}
        events = [{"choices": [{"finish_reason": None, "index": 0,
                                "delta": {"role": "assistant", "content": None}}], **base}]
        for piece in re.findall(r"\s*\S+|\s+$", content) or [content]:
            events.append({"choices": [{"finish_reason": None, "index": 0,
                                        "delta": {"content": piece}}], **base})
        last = {"choices": [{"finish_reason": full["choices"][0]["finish_reason"], "index": 0,
                             "delta": {}}], **base}
        events.append(last)
        # Like llama-server: `timings` ride on the finish chunk, or, when usage is asked for,
        # only on the usage chunk that follows it (choices empty).
        if (request or {}).get("stream_options", {}).get("include_usage"):
            last = {"choices": [], **base, "usage": full["usage"]}
            events.append(last)
        if "timings" in full:
            last["timings"] = full["timings"]
        return events

    def embedding_answer(self, path: str, request: Any, vectors: list[list[float]] | None) -> Any:
        request = request if isinstance(request, dict) else {}
        texts = request.get("content", request.get("input", ""))
        texts = [texts] if isinstance(texts, str) else list(texts or [])
        if vectors is None:
            vectors = [fake_vector(str(t), self.embedding_dim) for t in texts]
        if path == "/v1/embeddings":
            n = sum(len(fake_tokens(str(t))) + 1 for t in texts)
            return {"model": self.model, "object": "list",
                    "usage": {"prompt_tokens": n, "total_tokens": n},
                    "data": [{"embedding": v, "index": i, "object": "embedding"}
                             for i, v in enumerate(vectors)]}
        return [{"index": i, "embedding": [v]} for i, v in enumerate(vectors)]

    def props(self) -> dict:
        return {"default_generation_settings": {"n_ctx": self.n_ctx, "params": {}},
                "total_slots": 1, "model_alias": self.model, "model_path": self.model,
                "build_info": "b0-fake", "is_sleeping": False}


def _prompt_tokens(request: Any) -> int:
    if not isinstance(request, dict):
        return 1
    text = " ".join(str(m.get("content", "")) for m in request.get("messages", []) if isinstance(m, dict))
    return max(1, len(fake_tokens(text)) + 4)


def _usage(prompt_n: int, cache_n: int, predicted_n: int) -> dict:
    total_prompt = prompt_n + cache_n
    return {"completion_tokens": predicted_n, "prompt_tokens": total_prompt,
            "total_tokens": total_prompt + predicted_n,
            "prompt_tokens_details": {"cached_tokens": cache_n}}


def _timings(prompt_n: int, cache_n: int, predicted_n: int, o: dict) -> dict | None:
    if "timings" in o:
        return o["timings"]
    prompt_ms = float(o.get("prompt_ms", 2.0 * prompt_n))
    predicted_ms = float(o.get("predicted_ms", 10.0 * predicted_n))
    return {"cache_n": cache_n, "prompt_n": prompt_n, "prompt_ms": prompt_ms,
            "prompt_per_token_ms": prompt_ms / max(prompt_n, 1),
            "prompt_per_second": 1000.0 * prompt_n / prompt_ms if prompt_ms else 0.0,
            "predicted_n": predicted_n, "predicted_ms": predicted_ms,
            "predicted_per_token_ms": predicted_ms / max(predicted_n, 1),
            "predicted_per_second": 1000.0 * predicted_n / predicted_ms if predicted_ms else 0.0}


def _error(code: int, message: str, kind: str) -> dict:
    return {"error": {"code": code, "message": message, "type": kind}}


def _handler_for(server: FakeServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # like llama-server: keep-alive, chunked streams

        def log_message(self, *args: Any) -> None:  # keep test output clean
            pass

        def do_GET(self) -> None:
            self._serve()

        def do_POST(self) -> None:
            self._serve()

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                parsed = json.loads(raw) if raw else None
            except ValueError:
                parsed = None
            path = self.path.split("?", 1)[0]
            with server._lock:
                server.requests.append(RecordedRequest(self.command, path, dict(self.headers),
                                                       raw, parsed))
            try:
                self._answer(path, parsed)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a timeout test): nothing to answer

        def _answer(self, path: str, request: Any) -> None:
            behaviour = server._next(path)
            if behaviour is not None and behaviour.kind == "delay":
                if server._closing.wait(behaviour.args["seconds"]):
                    self.close_connection = True
                    return
                behaviour = server._next(path, skip_delays=True)
            kind = behaviour.kind if behaviour else None
            args = behaviour.args if behaviour else {}
            if kind in ("status", "body"):
                self._send(args["code"], args["body"], args.get("content_type", "application/json"))
            elif kind == "stream_dies":
                self._stream(server.chat_chunks(request, "this answer never ends well")[: 1 + args["after"]],
                             die=True)
            elif kind == "chat" or (kind is None and path in ("/v1/chat/completions", "/chat/completions")):
                content = args.get("content", server.default_chat)
                overrides = {k: v for k, v in args.items() if k != "content"}
                if isinstance(request, dict) and request.get("stream"):
                    self._stream(server.chat_chunks(request, content, **overrides))
                else:
                    self._send(200, server.chat_completion(request, content, **overrides))
            elif kind == "embedding" or path in ("/embedding", "/embeddings", "/v1/embeddings"):
                self._send(200, server.embedding_answer(path, request, args.get("vectors")))
            elif path == "/health":
                self._send(200, {"status": "ok"})
            elif path == "/props":
                self._send(200, server.props())
            elif path == "/tokenize":
                text = request.get("content", "") if isinstance(request, dict) else ""
                self._send(200, {"tokens": fake_tokens(str(text))})
            elif path in ("/v1/models", "/models"):
                self._send(200, {"object": "list", "data": [{"id": server.model, "object": "model",
                                                              "owned_by": "llamacpp"}]})
            else:
                self._send(404, _error(404, "File Not Found", "not_found_error"))

        def _send(self, code: int, body: Any, content_type: str = "application/json") -> None:
            if isinstance(body, str):
                data = body.encode("utf-8")
            elif isinstance(body, (bytes, bytearray)):
                data = bytes(body)
            else:
                data = json.dumps(body).encode("utf-8")
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _stream(self, events: list[dict], *, die: bool = False) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for event in events:
                self._chunk(f"data: {json.dumps(event)}\n\n".encode("utf-8"))
            if die:
                # Close the socket without the zero-length chunk: the body is cut mid-stream.
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_RDWR)
                self.close_connection = True
                return
            self._chunk(b"data: [DONE]\n\n")
            self.wfile.write(b"0\r\n\r\n")

        def _chunk(self, data: bytes) -> None:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

    return Handler
