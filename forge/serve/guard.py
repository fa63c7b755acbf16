"""The security layers of `forge serve`, as plain ASGI middleware (outermost first):

headers (CSP and friends on every response) → rate limit (per client, tighter on the routes
that call a model; 429 with Retry-After) → body cap (413) → bearer token (401, constant-time
compare, every route but `/health` and the static page shell).
"""
from __future__ import annotations

import hmac
import ipaddress
import json
import math
import threading
import time
from collections import deque
from typing import Any, Awaitable, Callable

from ..errors import ForgeError

Scope = dict[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[dict]], Callable[[dict], Awaitable[None]]],
                   Awaitable[None]]

# The page shell and its assets hold no data; /health says only that the server is up.
PUBLIC_PATHS = frozenset({"/", "/health"})
PUBLIC_PREFIXES = ("/static/",)
# Routes that call a model (chat or embedding): their own, tighter budget. The aggregation
# pass embeds the lines it writes and calibration embeds every question; a dry run of
# /aggregate is counted too (the budget is per path, not per body).
MODEL_ROUTES = frozenset({"/chat", "/remember", "/search", "/compact", "/history/import",
                          "/aggregate", "/calibrate"})
# Methods that call a model on a path with an id: an edit embeds the new text.
MODEL_METHODS = {"PATCH": "/memory/"}

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
       "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
SECURITY_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
]


def is_public(path: str) -> bool:
    return path in PUBLIC_PATHS or path.startswith(PUBLIC_PREFIXES)


def calls_a_model(method: str, path: str) -> bool:
    prefix = MODEL_METHODS.get(method.upper())
    return path in MODEL_ROUTES or (prefix is not None and path.startswith(prefix))


def is_loopback(host: str) -> bool:
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def check_bind(host: str, api_token: str | None) -> None:
    """Refuse to listen beyond loopback without a token: anyone who reaches the port could read
    and change the memory."""
    if not api_token and not is_loopback(host):
        raise ForgeError(f"refusing to listen on {host} without API_TOKEN: anyone who can reach "
                         "it could read and change the memory; set API_TOKEN (environment or "
                         ".env) or bind 127.0.0.1")


async def send_json(send: Callable[[dict], Awaitable[None]], status: int, body: dict[str, Any],
                    headers: list[tuple[bytes, bytes]] | None = None) -> None:
    data = json.dumps(body, ensure_ascii=False).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(data)).encode()), *(headers or [])]})
    await send({"type": "http.response.body", "body": data})


class SecurityHeaders:
    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def with_headers(message: dict) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *SECURITY_HEADERS]}
            await send(message)

        await self.app(scope, receive, with_headers)


class RateLimiter:
    """A sliding window of one minute per client address and budget."""

    def __init__(self, per_minute: int, model_per_minute: int, clock: Callable[[], float] = time.monotonic):
        self.limits = {"all": per_minute, "model": model_per_minute}
        self.clock = clock
        self.hits: dict[tuple[str, str], deque[float]] = {}
        self.lock = threading.Lock()
        self.calls = 0

    def retry_after(self, client: str, path: str, method: str = "GET") -> int | None:
        """Record a request; None when allowed, else the seconds until one would be."""
        budgets = ["all"] + (["model"] if calls_a_model(method, path) else [])
        now = self.clock()
        with self.lock:
            self.calls += 1
            if self.calls % 1000 == 0:  # forget clients idle for a minute: memory stays bounded
                self.hits = {k: w for k, w in self.hits.items() if w and w[-1] > now - 60}
            waits = []
            for budget in budgets:
                limit = self.limits[budget]
                if limit <= 0:
                    continue
                window = self.hits.setdefault((client, budget), deque())
                while window and window[0] <= now - 60:
                    window.popleft()
                if len(window) >= limit:
                    waits.append(max(1, math.ceil(window[0] + 60 - now)))
            if waits:
                return max(waits)
            for budget in budgets:
                if self.limits[budget] > 0:
                    self.hits[(client, budget)].append(now)
            return None


class RateLimit:
    def __init__(self, app: ASGIApp, limiter: RateLimiter):
        self.app = app
        self.limiter = limiter

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        client = (scope.get("client") or ("unknown", 0))[0]
        method = scope.get("method", "GET")
        wait = self.limiter.retry_after(client, scope["path"], method)
        if wait is not None:
            budget = "model routes" if calls_a_model(method, scope["path"]) else "every route"
            return await send_json(send, 429, {"error": f"rate limit reached ({budget}); retry in "
                                                        f"{wait} s"},
                                   [(b"retry-after", str(wait).encode())])
        await self.app(scope, receive, send)


class _TooLarge(Exception):
    pass


class BodyCap:
    def __init__(self, app: ASGIApp, max_bytes: int):
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        reason = f"the request body is larger than SERVE_MAX_BODY={self.max_bytes} bytes"
        for name, value in scope.get("headers", []):
            if name == b"content-length" and value.isdigit() and int(value) > self.max_bytes:
                return await send_json(send, 413, {"error": reason})
        seen = 0
        started = False

        async def counted() -> dict:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise _TooLarge()
            return message

        async def watch(message: dict) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counted, watch)
        except _TooLarge:
            if not started:
                await send_json(send, 413, {"error": reason})


class BearerAuth:
    def __init__(self, app: ASGIApp, token: str | None):
        self.app = app
        self.token = token.encode() if token else None

    def allowed(self, scope: Scope) -> bool:
        if self.token is None or is_public(scope["path"]):
            return True
        for name, value in scope.get("headers", []):
            if name == b"authorization":
                scheme, _, given = value.partition(b" ")
                return scheme.lower() == b"bearer" and hmac.compare_digest(given.strip(), self.token)
        return False

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and not self.allowed(scope):
            return await send_json(send, 401, {"error": "missing or wrong bearer token "
                                                        "(Authorization: Bearer $API_TOKEN)"},
                                   [(b"www-authenticate", b"Bearer")])
        await self.app(scope, receive, send)
