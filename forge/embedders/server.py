"""What both embedding-server clients share: one httpx client, batching, error mapping, and
cutting an input the server refuses as too long (the stored text stays whole)."""
from __future__ import annotations

import json
import re
from typing import Any

from ..core.errors import ServerError
from ..core.log import log
from ..core.settings import server_root
from . import HINT, Embedder, normalize

BATCH = 32  # texts per request
# llama-server: HTTP 500 "input is too large to process. increase the physical batch size"
# (older builds) or HTTP 400 "request (N tokens) exceeds the available context size (M tokens)".
_TOO_LONG = re.compile(r"too (large|long)|exceed\w*\b.*\b(context|batch|maximum|limit)|context length",
                       re.IGNORECASE)
_MAX_CUTS = 12


class TooLong(Exception):
    """The server refused an input for its length; carries its message for the sizing hint."""


class ServerEmbedder(Embedder):
    document_prefix = ""

    def __init__(self, url: str, query_wrapper: str, *, timeout: float = 30.0):
        self.url = url
        self._wrapper = query_wrapper
        self.timeout = timeout
        self._client: Any = None
        self._identity: dict[str, Any] | None = None
        self._model: str | None = None

    # -- the wire, per server kind ------------------------------------------------------
    def _payload(self, texts: list[str]) -> dict[str, Any]:
        raise NotImplementedError

    def _parse(self, body: Any, n: int) -> list[list[float]]:
        raise NotImplementedError

    # -- shared ---------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        return server_root(self.url)

    def query_wrapper(self) -> str:
        return self._wrapper

    def client(self) -> Any:
        if self._client is None:
            import httpx

            self._client = httpx.Client(timeout=self.timeout)
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def _embed(self, texts: list[str], is_query: bool) -> Any:
        if is_query:
            texts = [self._wrapper.replace("{text}", t) for t in texts]
        rows: list[list[float]] = []
        for start in range(0, len(texts), BATCH):
            chunk = texts[start:start + BATCH]
            try:
                rows.extend(self._post(chunk))
            except TooLong as e:
                # Which input is too long is not said: embed them one by one, cutting as needed.
                for text in chunk:
                    rows.extend(self._post_cut(text, str(e), is_query))
        return rows

    def _post_cut(self, text: str, message: str, is_query: bool = False) -> list[list[float]]:
        original = len(text)
        for _ in range(_MAX_CUTS):
            try:
                rows = self._post([text])
            except TooLong as e:
                text = text[:_cut_length(len(text), str(e))]
                message = str(e)
                continue
            if len(text) < original and is_query:  # the search is cut, not a memory
                log.warning("the embedding server at %s refused a query of %d characters as too "
                            "long; searched with its first %d characters",
                            self.url, original, len(text))
            elif len(text) < original:
                log.warning("the embedding server at %s refused an input of %d characters as too "
                            "long; embedded its first %d characters (the stored text is whole)",
                            self.url, original, len(text))
            return rows
        raise ServerError(self.url, f"the embedding server refuses even a short input as too long "
                          f"({message[:120]})", HINT)

    def _send(self, method: str, url: str, **kwargs: Any) -> Any:
        """One request; transport failures become a ServerError naming the configured URL."""
        import httpx

        try:
            return self.client().request(method, url, **kwargs)
        except httpx.TimeoutException:
            raise ServerError(self.url, f"the embedding server did not answer within "
                              f"{self.timeout:g}s (EMBEDDING_TIMEOUT)", HINT) from None
        except httpx.HTTPError as e:
            raise ServerError(self.url, f"cannot reach the embedding server: "
                              f"{type(e).__name__}", HINT) from None

    def _post(self, texts: list[str]) -> list[list[float]]:
        response = self._send("POST", self.url, json=self._payload(texts))
        if response.status_code >= 400:
            detail = _error_text(response)
            if response.status_code in (400, 413, 500) and _TOO_LONG.search(detail):
                raise TooLong(detail)
            from ..core.llm import snippet

            # It answered: "start a server" would be the wrong advice.
            raise ServerError(self.url, f"the embedding server answered HTTP "
                              f"{response.status_code}: {snippet(detail)}",
                              "check EMBEDDING_URL and the server's log")
        try:
            body = response.json()
        except ValueError:
            raise ServerError(self.url, "the embedding server answered something that is not "
                              f"JSON: {response.text[:80]!r}", HINT) from None
        try:
            rows = self._parse(body, len(texts))
        except (KeyError, IndexError, TypeError, ValueError) as e:
            raise ServerError(self.url, f"the embedding server's answer has no usable embeddings "
                              f"({type(e).__name__}: {str(e)[:200]})", HINT) from None
        if len(rows) != len(texts):
            raise ServerError(self.url, f"the embedding server returned {len(rows)} embeddings "
                              f"for {len(texts)} inputs", HINT)
        return rows

    def model_name(self) -> str:
        """The model the server reports at /v1/models (llama-server, vLLM, Ollama, LM Studio)."""
        response = self._send("GET", self.base_url + "/v1/models")
        try:
            data = response.json()["data"]
            # llama-server reports the model file's path: its name is the model, not where it sits
            ids = sorted(str(m["id"]).replace("\\", "/").rsplit("/", 1)[-1] for m in data)
            self._model = ids[0] if len(ids) == 1 else ",".join(ids)
        except Exception:  # no /v1/models here: the probe vector still tells models apart
            self._model = "unknown"
        return self._model

    def identity_answer(self, *, full: bool = False) -> dict[str, Any] | None:
        """A digest of the server's answer to /props (llama-server: the model file, its
        settings, and a marker drawn at each start, so a restart or a swap changes it), else to
        /v1/models (vLLM, Ollama), with the `created` times left out (llama-server stamps the
        time of the request). None when neither answers (the probe then runs every time)."""
        import hashlib

        for path in ("/props", "/v1/models"):
            try:
                response = self._send("GET", self.base_url + path)
            except ServerError:
                return None
            if response.status_code == 200:
                try:
                    body = json.dumps(_without_times(response.json()), sort_keys=True)
                except ValueError:
                    continue
                return {"backend": self.backend, "url": self.base_url, "endpoint": path,
                        "answer_sha256": hashlib.sha256(body.encode()).hexdigest()}
        return None

    def identity(self) -> dict[str, Any]:
        if self._identity is None:
            model = self.model_name()
            dim = int(normalize(self._post(["dimension probe"]), self.url).shape[1])
            self._identity = {"backend": self.backend, "model": model, "dim": dim,
                              "document_prefix": self.document_prefix,
                              "query_wrapper": self._wrapper}
        return self._identity


def _without_times(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_times(v) for k, v in value.items() if k != "created"}
    if isinstance(value, list):
        return [_without_times(v) for v in value]
    return value


def _error_text(response: Any) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text.strip().replace("\n", " ")
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict):
            return str(err.get("message") or json.dumps(err))
        return str(err)
    return json.dumps(body)


def _cut_length(length: int, message: str) -> int:
    """Scale the text by the server's own numbers when it gives them (llama-server says
    "input (N tokens) is too large ... (current batch size: M)"), else halve it."""
    numbers = [int(n) for n in re.findall(r"\d+", message)]
    if len(numbers) >= 2 and numbers[0] > numbers[-1] > 0:
        return max(1, int(length * numbers[-1] / numbers[0] * 0.9))
    return max(1, length // 2)
