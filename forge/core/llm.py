"""The one chat-server client: OpenAI-compatible `/v1/chat/completions`, plus llama.cpp's extras.

llama-server gets `cache_prompt` (reuse the KV cache of the longest common prefix), `id_slot`
(from `LLAMA_CPP_ID_SLOT`, so a prompt lands on the slot that holds its prefix) and answers with
a `timings` block (prompt_n, prompt_ms, predicted_n, predicted_ms, cache_n) that the trace keeps.
Other OpenAI-compatible servers (Ollama, vLLM, LM Studio) work unchanged: when a server rejects
the extras with a 400/422, the request is sent again without them and the client remembers it;
usage numbers then come from the standard `usage` block.

Every failure is a `ServerError` naming the URL: an unreachable server says how to start one,
an HTTP error gives the server's own message whole, a request too large for the server's
context says how many tokens were sent against its context and what to do. httpx is imported
inside the functions so `forge --help` stays light.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from .errors import ServerError
from .settings import server_root

START_HINT = "start one with `tools/llama-server chat` or point LLAMA_CPP_URL at a running server"

# Fields only llama.cpp understands; dropped for servers that reject unknown fields.
_EXTRAS = ("cache_prompt", "id_slot", "stream_options")

# End-of-turn markers of the common chat templates. A server whose template does not match the
# model (a GGUF without one falls back to ChatML) lets the model write them as text and run on
# into a turn of its own until max_tokens; stopping there costs nothing when the template is
# right (they are special tokens then). OpenAI's API accepts at most four.
STOP = ["<|im_end|>", "<end_of_turn>", "<|eot_id|>", "<|im_start|>"]

# Base URLs whose server rejected the extras once, for the life of the process.
_NO_EXTRAS: set[str] = set()
# Base URL -> the model name a server insists on (Ollama), taken from its own /v1/models.
_MODEL_FOR: dict[str, str] = {}


@dataclass
class Completion:
    content: str
    model: str | None
    prompt_n: int
    predicted_n: int
    prompt_ms: float
    predicted_ms: float
    cache_n: int
    raw_timings: dict | None
    finish_reason: str | None = None


class ChatClient:
    """A client for one chat server. Reuses one HTTP connection; `close()` or `with` ends it."""

    def __init__(self, settings: Any, *, options: dict[str, Any] | None = None):
        self.url = server_root(settings.llama_cpp_url)
        self.id_slot: int | None = settings.llama_cpp_id_slot
        self.timeout: float = settings.llama_cpp_timeout
        # Sampling options the user gave (`forge chat -o temperature 0.7`): sent with every
        # request, over Forge's own temperature / max_tokens.
        self.options: dict[str, Any] = dict(options or {})
        self._client: Any = None

    # -- plumbing ---------------------------------------------------------------------------
    @property
    def chat_url(self) -> str:
        return f"{self.url}/v1/chat/completions"

    def _http(self) -> Any:
        if self._client is None:
            import httpx

            self._client = httpx.Client(timeout=httpx.Timeout(self.timeout), trust_env=False)
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def __enter__(self) -> "ChatClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _error(self, problem: str, url: str | None = None) -> ServerError:
        return ServerError(url or self.chat_url, problem, START_HINT)

    def _translate(self, exc: Exception, url: str) -> ServerError:
        """One line for each way httpx can fail."""
        import httpx

        if isinstance(exc, httpx.TimeoutException):
            return self._error(f"chat server did not answer within {self.timeout:g}s "
                               "(LLAMA_CPP_TIMEOUT)", url)
        if isinstance(exc, httpx.ConnectError):
            return self._error("cannot reach the chat server", url)
        if isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError)):
            return self._error("the chat server closed the connection mid-answer", url)
        return self._error(f"chat request failed: {type(exc).__name__}: {exc}", url)

    # -- the request body -------------------------------------------------------------------
    def _body(self, messages: list[dict], *, max_tokens: int | None, temperature: float,
              stream: bool, extras: bool) -> dict[str, Any]:
        body: dict[str, Any] = {"messages": messages, "temperature": temperature, "stream": stream,
                                "stop": STOP}
        if self.url in _MODEL_FOR:
            body["model"] = _MODEL_FOR[self.url]
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        if extras:
            body["cache_prompt"] = True
            if self.id_slot is not None:
                body["id_slot"] = self.id_slot
            if stream:
                body["stream_options"] = {"include_usage": True}
        body.update(self.options)
        return body

    # -- the public calls -------------------------------------------------------------------
    def complete(self, messages: list[dict], *, max_tokens: int | None = None,
                 temperature: float = 0.2, stream: bool = False,
                 on_token: Callable[[str], None] | None = None) -> Completion:
        """One chat completion. With `stream`, `on_token` gets each piece of text as it comes;
        an exception raised by `on_token` (KeyboardInterrupt included) aborts the request."""
        for _ in range(2):
            try:
                return self._complete(messages, max_tokens=max_tokens, temperature=temperature,
                                      stream=stream, on_token=on_token,
                                      extras=self.url not in _NO_EXTRAS)
            except _ExtrasRejected:
                _NO_EXTRAS.add(self.url)
            except _ModelRequired:
                _MODEL_FOR[self.url] = self._listed_model()
        return self._complete(messages, max_tokens=max_tokens, temperature=temperature,
                              stream=stream, on_token=on_token, extras=self.url not in _NO_EXTRAS)

    def _listed_model(self) -> str:
        """The first model the server lists at /v1/models (what a bare request would get)."""
        import httpx

        url = f"{self.url}/v1/models"
        try:
            return str(self._http().get(url).json()["data"][0]["id"])
        except httpx.HTTPError as e:
            raise self._translate(e, url) from None
        except (ValueError, KeyError, IndexError, TypeError):
            raise self._error("the chat server wants a model name and /v1/models lists none",
                              url) from None

    def _complete(self, messages: list[dict], *, max_tokens: int | None, temperature: float,
                  stream: bool, on_token: Callable[[str], None] | None,
                  extras: bool) -> Completion:
        import httpx

        body = self._body(messages, max_tokens=max_tokens, temperature=temperature,
                          stream=stream, extras=extras)
        started = time.monotonic()
        try:
            if not stream:
                response = self._http().post(self.chat_url, json=body)
                self._check_status(response, extras)
                return self._parse_full(response, started)
            with self._http().stream("POST", self.chat_url, json=body) as response:
                if response.status_code >= 400:
                    response.read()
                self._check_status(response, extras)
                return self._parse_stream(response.iter_lines(), on_token, started)
        except httpx.HTTPError as e:
            raise self._translate(e, self.chat_url) from None

    def _check_status(self, response: Any, extras: bool) -> None:
        if response.status_code < 400:
            return
        if response.status_code in (400, 404, 422) and self.url not in _MODEL_FOR \
                and "model" in response.text.lower() and "required" in response.text.lower():
            raise _ModelRequired()
        if extras and response.status_code in (400, 422) and _mentions_extras(response.text):
            raise _ExtrasRejected()
        raise http_error(self.chat_url, response)

    def _parse_full(self, response: Any, started: float) -> Completion:
        try:
            data = response.json()
            choice = data["choices"][0]
            content = choice["message"].get("content") or ""
        except (ValueError, KeyError, IndexError, TypeError, AttributeError):
            raise self._error("chat server answered something that is not a chat completion: "
                              + snippet(response.text)) from None
        return _completion(content, data, choice.get("finish_reason"), started)

    def _parse_stream(self, lines: Iterator[str], on_token: Callable[[str], None] | None,
                      started: float) -> Completion:
        pieces: list[str] = []
        last: dict[str, Any] = {}
        timings: dict[str, Any] | None = None
        usage: dict[str, Any] | None = None
        finish: str | None = None
        done = False
        for line in lines:
            line = line.strip()
            if not line or line.startswith(":") or not line.startswith("data:"):
                continue
            payload = line[len("data:"):].strip()
            if payload == "[DONE]":
                done = True
                break
            try:
                chunk = json.loads(payload)
            except ValueError:
                raise self._error("chat server streamed a line that is not JSON: "
                                  + snippet(payload)) from None
            if not isinstance(chunk, dict):
                raise self._error("chat server streamed something that is not a chat chunk")
            if "error" in chunk:
                raise self._error(f"chat server reported an error mid-answer: {chunk['error']}")
            last = chunk
            timings = chunk.get("timings") or timings
            usage = chunk.get("usage") or usage
            for choice in chunk.get("choices") or []:
                delta = (choice.get("delta") or {}).get("content")
                if delta:
                    pieces.append(delta)
                    if on_token is not None:
                        on_token(delta)
                finish = choice.get("finish_reason") or finish
        if not done and finish is None:
            raise self._error("the chat server's stream ended before the answer did")
        data = dict(last)
        if timings is not None:
            data["timings"] = timings
        if usage is not None:
            data["usage"] = usage
        return _completion("".join(pieces), data, finish, started)

    def tokenize(self, text: str) -> list[int]:
        """llama-server's `/tokenize`: the model's own token ids for `text`."""
        import httpx

        url = f"{self.url}/tokenize"
        try:
            response = self._http().post(url, json={"content": text})
        except httpx.HTTPError as e:
            raise self._translate(e, url) from None
        if response.status_code >= 400:
            raise self._error(f"/tokenize answered HTTP {response.status_code} "
                              "(not a llama.cpp server?)", url)
        try:
            tokens = response.json()["tokens"]
            return [t if isinstance(t, int) else int(t["id"]) for t in tokens]
        except (ValueError, KeyError, TypeError):
            raise self._error("/tokenize answered something without a token list", url) from None

    def health(self) -> bool:
        """True when the server answers `/health` (llama.cpp) or `/v1/models` (others)."""
        import httpx

        for path in ("/health", "/v1/models"):
            try:
                if self._http().get(self.url + path).status_code == 200:
                    return True
            except httpx.HTTPError:
                return False
        return False


CONTEXT_HINT = ("shorten the message, run `forge compact` to shrink the history, or restart the "
                "server with a larger context (`-c`; `tools/llama-server chat --ctx 8192`)")


def snippet(text: str, limit: int = 200) -> str:
    """A body on one line, whole when short; else cut at a word with what was left out said,
    never in the middle of a quoted string a reader would take for the whole of it."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    cut = flat.rfind(" ", 0, limit)
    cut = cut if cut > limit // 2 else limit
    return f"{flat[:cut]}… ({len(flat) - cut} more characters)"


def _error_fields(response: Any) -> dict[str, Any]:
    """The error object of an OpenAI-style body ({"error": {...}} or {"error": "..."}), of
    FastAPI's {"detail": ...} (vLLM), or {} when the body is not JSON."""
    try:
        data = response.json()
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    error = data.get("error", data.get("detail", data))
    if isinstance(error, str):
        return {"message": error}
    return error if isinstance(error, dict) else {"message": json.dumps(error)}


def http_error(url: str, response: Any) -> ServerError:
    """Three messages, not one: a request too large for the server's context (the tokens sent
    against the context, and what to do), any other HTTP error (the server's own message whole;
    not "start a server": one answered), and, elsewhere, an unreachable server."""
    fields = _error_fields(response)
    message = str(fields.get("message") or "")
    code = response.status_code
    if fields.get("type") == "exceed_context_size_error" or "context size" in message \
            or "context length" in message or "input is too large" in message:
        sent, n_ctx = _int(fields.get("n_prompt_tokens")), _int(fields.get("n_ctx"))
        problem = ("the request is " + (f"{sent} tokens" if sent else "too large") + ", more than "
                   + (f"the server's context of {n_ctx} tokens" if n_ctx else "the server's context"))
        return ServerError(url, problem, CONTEXT_HINT)
    shown = " ".join(message.split()) if message else snippet(response.text)
    problem = f"chat server answered HTTP {code}" + (f": {shown}" if shown else "")
    if code == 404:
        hint = ("check LLAMA_CPP_URL: it should be the chat server's address (http://host:port "
                "or .../v1)")
    elif code in (401, 403):
        hint = "the server wants credentials Forge does not send; check its configuration"
    else:
        hint = "see the server's log"
    return ServerError(url, problem, hint)


class _ExtrasRejected(Exception):
    """The server refused a llama.cpp-only field; retry without them."""


class _ModelRequired(Exception):
    """The server wants a `model` field (Ollama); retry with the one it lists."""


def _mentions_extras(text: str) -> bool:
    lowered = text.lower()
    return any(name in lowered for name in _EXTRAS) or "unrecognized" in lowered \
        or "extra" in lowered or "unknown" in lowered


def _int(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def _float(value: Any) -> float:
    try:
        return float(value or 0.0)
    except (TypeError, ValueError):
        return 0.0


def _completion(content: str, data: dict[str, Any], finish: str | None,
                started: float) -> Completion:
    """Usage from llama.cpp's `timings` when present, else from the standard `usage` block."""
    timings = data.get("timings") if isinstance(data.get("timings"), dict) else None
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    if timings is not None:
        prompt_n, predicted_n = _int(timings.get("prompt_n")), _int(timings.get("predicted_n"))
        prompt_ms, predicted_ms = _float(timings.get("prompt_ms")), _float(timings.get("predicted_ms"))
        cache_n = _int(timings.get("cache_n"))
    else:
        details = usage.get("prompt_tokens_details") or {}
        cache_n = _int(details.get("cached_tokens")) if isinstance(details, dict) else 0
        prompt_n = max(0, _int(usage.get("prompt_tokens")) - cache_n)
        predicted_n = _int(usage.get("completion_tokens"))
        prompt_ms = 0.0
        predicted_ms = round((time.monotonic() - started) * 1000, 1)
    model = data.get("model")
    return Completion(content=content, model=str(model) if model else None, prompt_n=prompt_n,
                      predicted_n=predicted_n, prompt_ms=prompt_ms, predicted_ms=predicted_ms,
                      cache_n=cache_n, raw_timings=timings, finish_reason=finish)
