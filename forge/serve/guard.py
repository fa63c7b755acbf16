"""The security layers of `forge serve`, as plain ASGI middleware (outermost first):

headers (CSP and friends on every response, 500s included) → proxies (X-Forwarded-For/-Proto/
-Host believed only from SERVE_TRUSTED_PROXIES) → Host (421 unless loopback, the bind address or
SERVE_ALLOWED_HOSTS: DNS rebinding) → origin (403 for a browser context from another origin
unless listed in SERVE_CORS_ORIGINS) → rate limit (per client, tighter on the routes that call a
model; 429 with Retry-After) → body cap (413) → JSON bodies only (415) → bearer token (401,
constant-time compare, every route but `/health` and the static page shell).

`protect(app, settings, bind_host)` puts the whole stack around a Starlette app, outside its own
error middleware, so a 500 carries the headers too. Any other HTTP surface of Forge (the MCP
server's HTTP transport) goes behind the same call.
"""
from __future__ import annotations

import hmac
import ipaddress
import json
import math
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from ..core.errors import ForgeError

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


WILDCARD_BINDS = frozenset({"", "0.0.0.0", "::", "[::]"})
LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})


def check_bind(host: str, api_token: str | None, allowed_hosts: tuple[str, ...] = ()) -> None:
    """Refuse to listen beyond loopback without a token (anyone who reaches the port could read
    and change the memory), and on every address without the names it will be reached by (the
    Host check has nothing else to accept)."""
    if not api_token and not is_loopback(host):
        raise ForgeError(f"refusing to listen on {host} without API_TOKEN: anyone who can reach "
                         "it could read and change the memory; set API_TOKEN (environment or "
                         ".env) or bind 127.0.0.1")
    if host.strip() in WILDCARD_BINDS and not allowed_hosts:
        raise ForgeError(f"refusing to listen on {host or 'every address'} without "
                         "SERVE_ALLOWED_HOSTS: name the host names or addresses clients will use "
                         "(the LAN name, the proxy's public name), or bind one address")


def host_name(value: str) -> str | None:
    """The name of a Host header value without its port, lower case; None when malformed."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        if end < 0 or (value[end + 1:] and not value[end + 1:].startswith(":")):
            return None
        return value[1:end]
    name, _, port = value.partition(":")
    if port and not port.isdigit():
        return None
    return name.rstrip(".") or None


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key == name:
            return value.decode("latin-1")
    return None


class Proxies:
    """SERVE_TRUSTED_PROXIES: the peers whose X-Forwarded-* headers name the real client, scheme
    and host. From any other peer the headers are ignored (anyone can send them)."""

    def __init__(self, networks: tuple[str, ...]):
        self.networks = tuple(ipaddress.ip_network(n, strict=False) for n in networks)

    def trusts(self, address: str) -> bool:
        try:
            ip = ipaddress.ip_address(address.strip().strip("[]"))
        except ValueError:
            return False
        return any(ip in net for net in self.networks)

    def resolve(self, scope: Scope) -> Scope:
        peer = (scope.get("client") or ("", 0))[0]
        if not self.networks or not self.trusts(peer):
            return scope
        scope = dict(scope)
        chain = [a.strip() for a in (_header(scope, b"x-forwarded-for") or "").split(",") if a.strip()]
        # the rightmost address our own proxies did not add: what is left of it, anyone wrote
        for address in reversed(chain):
            if not self.trusts(address):
                scope["client"] = (address, 0)
                break
        proto = (_header(scope, b"x-forwarded-proto") or "").split(",")[0].strip().lower()
        if proto in ("http", "https"):
            scope["scheme"] = proto
        host = (_header(scope, b"x-forwarded-host") or "").split(",")[0].strip()
        if host:
            scope["headers"] = [(k, v) for k, v in scope.get("headers", []) if k != b"host"]
            scope["headers"].append((b"host", host.encode("latin-1")))
        return scope


@dataclass(frozen=True)
class Policy:
    """Who `forge serve` answers: the Host names, the foreign origins allowed, the proxies."""
    allowed_hosts: frozenset[str]
    cors_origins: frozenset[str]
    proxies: Proxies

    @classmethod
    def from_settings(cls, settings: Any, bind_host: str | None = None) -> "Policy":
        # a name may be written with a port or brackets; the check compares names only
        hosts = set(LOOPBACK_NAMES) | {host_name(h) or h for h in settings.serve_allowed_hosts}
        if bind_host and bind_host.strip() not in WILDCARD_BINDS:
            hosts.add(bind_host.strip().strip("[]").lower())
        origins = {o.lower() for o in (settings.serve_cors_origins or ())}
        return cls(frozenset(hosts), frozenset(origins), Proxies(settings.serve_trusted_proxies))


DEFAULT_PORTS = {"http": "80", "https": "443"}


def _origin_key(scheme: str, host: str) -> str:
    name, port = host.lower(), ""
    if not name.endswith("]") and name.count(":") == 1 or "]:" in name:
        name, port = name.rsplit(":", 1)
    if port == DEFAULT_PORTS.get(scheme):
        port = ""
    return f"{scheme}://{name}" + (f":{port}" if port else "")


def own_origin(scope: Scope) -> str | None:
    host = _header(scope, b"host")
    return _origin_key(scope.get("scheme", "http"), host) if host else None


def same_origin(origin: str, scope: Scope) -> bool:
    scheme, sep, rest = origin.strip().lower().partition("://")
    return bool(sep) and _origin_key(scheme, rest.rstrip("/")) == own_origin(scope)


class HostOrigin:
    """Before routing: the proxies' headers resolved, then the Host check (DNS rebinding) and the
    origin check (a page on another site, whatever its request looks like)."""

    def __init__(self, app: ASGIApp, policy: Policy):
        self.app = app
        self.policy = policy

    def refusal(self, scope: Scope) -> tuple[int, str] | None:
        host = _header(scope, b"host")
        name = host_name(host) if host else None
        if name is None or name not in self.policy.allowed_hosts:
            return 421, (f"this server does not answer to the Host {host!r}; add the name to "
                         "SERVE_ALLOWED_HOSTS if it is yours" if host else "no Host header")
        origin = _header(scope, b"origin")
        site = (_header(scope, b"sec-fetch-site") or "").strip().lower()
        if origin is not None:
            if same_origin(origin, scope) or origin.strip().lower() in self.policy.cors_origins:
                return None
            return 403, (f"requests from the origin {origin!r} are refused; list it in "
                         "SERVE_CORS_ORIGINS if it is yours")
        if site in ("cross-site", "same-site"):
            navigation = (_header(scope, b"sec-fetch-mode") or "") == "navigate"
            if navigation and scope.get("method") == "GET" and scope["path"] == "/":
                return None  # a link to the page shell, which holds no data
            return 403, f"a {site} request from a browser with no origin is refused"
        return None

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        scope = self.policy.proxies.resolve(scope)
        refused = self.refusal(scope)
        if refused is not None:
            return await send_json(send, refused[0], {"error": refused[1]})
        await self.app(scope, receive, send)


class JsonBodies:
    """A request with a body must say it is JSON: a browser sends text/plain, forms and
    multipart across sites without asking first (a "simple" request); never JSON."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and self.has_body(scope):
            media = (_header(scope, b"content-type") or "").split(";")[0].strip().lower()
            if media != "application/json":
                return await send_json(send, 415, {
                    "error": "a request body needs the header Content-Type: application/json"
                             + (f" (got {media!r})" if media else " (none sent)")})
        await self.app(scope, receive, send)

    @staticmethod
    def has_body(scope: Scope) -> bool:
        length = _header(scope, b"content-length")
        if length is not None:
            return length.strip() not in ("", "0")
        return _header(scope, b"transfer-encoding") is not None


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


def inner(app: ASGIApp, settings: Any) -> ASGIApp:
    """The layers that read the body or the token: inside the app's error middleware, which
    must not turn the body cap's exception into a 500."""
    return BodyCap(JsonBodies(BearerAuth(app, token=settings.api_token)),
                   max_bytes=settings.serve_max_body)


def outer(app: ASGIApp, settings: Any, bind_host: str | None = None) -> ASGIApp:
    """The layers that answer before anything else runs, outside the error middleware."""
    limiter = RateLimiter(settings.serve_rate_limit, settings.serve_model_rate_limit)
    checked = HostOrigin(RateLimit(app, limiter=limiter), Policy.from_settings(settings, bind_host))
    return SecurityHeaders(checked)


def stack(app: ASGIApp, settings: Any, bind_host: str | None = None) -> ASGIApp:
    """The whole guard around a plain ASGI app (see the module's docstring for the order)."""
    return outer(inner(app, settings), settings, bind_host)


def protect(app: Any, settings: Any, bind_host: str | None = None) -> Any:
    """Put the guard around a Starlette app: the checks and the headers outside its error
    middleware (so a 500 carries the headers), the body and token layers inside it (after its
    own middleware, e.g. CORS); the app stays a Starlette app (routes, state, TestClient).
    Call it once the app's own middleware is set."""
    from starlette.middleware import Middleware

    app.user_middleware.append(Middleware(_Inner, settings=settings))
    build = app.build_middleware_stack
    app.build_middleware_stack = lambda: outer(build(), settings, bind_host)
    app.middleware_stack = None
    return app


class _Inner:
    def __init__(self, app: ASGIApp, settings: Any):
        self.app = inner(app, settings)

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)
