"""The web_fetch tool: one http(s) page as readable text, off unless named in ENABLED_TOOLS.

    {"action": "web_fetch", "payload": {"url": "https://example.org/page"}}

Two rules a router cannot be trusted with, checked before any request and again on every
redirect:

- the host must appear literally in the user's turn (as a URL or a bare hostname) or in
  `WEB_FETCH_ALLOW_HOSTS`: a hostname the model invented is refused without a lookup;
- every address the host resolves to must be public (`ipaddress`'s is_global, after unwrapping
  the IPv4 inside an IPv4-mapped, 6to4 or NAT64 address; not multicast) unless
  `WEB_FETCH_ALLOW_PRIVATE=true`; the connection then
  goes to the address that was checked (the URL is rewritten to it, with the `Host` header and
  the TLS server name kept), so a second lookup cannot swap in another address.

The body is read up to `WEB_FETCH_MAX_BYTES`, must be text (HTML, plain text, JSON, XML), and
HTML is reduced to its text with BeautifulSoup. The text is cut to `WEB_FETCH_MAX_TOKENS` with
a note saying so. Every failure or refusal is a result starting with `[error]` (or `[no results]`
for a page with no text), so the exchange is marked not answered and compaction leaves it out.
"""
from __future__ import annotations

import ipaddress
import re
import socket
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit, urlunsplit

from ...memory import non_answer
from ...core.tokens import estimate_tokens
from . import ToolContext, ToolResult

MAX_REDIRECTS = 5
USER_AGENT = "forge-web-fetch/0.1 (a personal assistant fetching one page its user named)"
HTML_TYPES = ("text/html", "application/xhtml+xml")
TEXT_TYPES = ("text/", "application/json", "application/xml", "application/ld+json",
              "application/rss+xml", "application/atom+xml")
_BLOCK_TAGS = ("p", "div", "br", "li", "tr", "td", "th", "h1", "h2", "h3", "h4", "h5", "h6",
               "section", "article", "header", "footer", "main", "nav", "aside", "pre",
               "blockquote", "table", "ul", "ol", "dl", "dt", "dd", "title", "hr", "figcaption")


_BREAK = "\x00"  # a block boundary while the HTML is flattened


class Refused(Exception):
    """A rule refused the URL (reason `tool_refused`)."""


class Failed(Exception):
    """The fetch itself failed (reason `tool_error`)."""


def _fail(message: str, reason: str = "tool_error") -> ToolResult:
    return ToolResult(f"{non_answer.ERROR} web_fetch: {message}", not_answered=reason)


def run(ctx: ToolContext, payload: dict[str, Any]) -> ToolResult:
    url = str(payload.get("url") or payload.get("href") or "").strip()
    if not url:
        return _fail("no url in the payload")
    try:
        page = fetch(ctx.settings, url, turn=ctx.turn_text)
    except Refused as e:
        result = _fail(str(e), reason="tool_refused")
    except Failed as e:
        result = _fail(str(e))
    else:
        result = render(ctx.settings, page)
    host = (urlsplit(url).hostname or "").lower()
    result.trace = {"host": host} if host else None
    return result


# -- the two rules ------------------------------------------------------------------------------
def host_named(host: str, turn: str, allow: tuple[str, ...] = ()) -> bool:
    """True when `host` appears literally in the turn (bounded, case-insensitive) or is allowed
    (`example.org` exactly, `.example.org` that host and its subdomains)."""
    host = host.lower().rstrip(".")
    for entry in allow:
        if host == entry.lstrip(".") or (entry.startswith(".") and host.endswith(entry)):
            return True
    pattern = r"(?<![\w.-])" + re.escape(host) + r"(?![\w-]|\.[\w-])"
    return re.search(pattern, turn.lower()) is not None


NAT64 = ipaddress.ip_network("64:ff9b::/96")
SHARED = ipaddress.ip_network("100.64.0.0/10")  # carrier-grade NAT, Tailscale's 100.x
PRIVATE = tuple(ipaddress.ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16",
                                                  "fc00::/7"))


def unwrap(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> Any:
    """The IPv4 address an IPv6 form carries (IPv4-mapped, 6to4 2002::/16, NAT64 64:ff9b::/96),
    which is where the packets end up; any other address as it is."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped:
            return ip.ipv4_mapped
        if ip.sixtofour:
            return ip.sixtofour
        if ip in NAT64:
            return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return ip


def address_refusal(address: str) -> str | None:
    """Why an address may not be reached without WEB_FETCH_ALLOW_PRIVATE, or None: every
    address that is not global (ipaddress's is_global, after unwrapping), multicast too."""
    ip = unwrap(ipaddress.ip_address(address))
    for attr, label in (("is_loopback", "loopback"), ("is_link_local", "link-local"),
                        ("is_unspecified", "unspecified"), ("is_multicast", "multicast"),
                        ("is_reserved", "reserved")):
        if getattr(ip, attr):
            return label
    if isinstance(ip, ipaddress.IPv4Address) and ip in SHARED:
        return "carrier-grade NAT (shared)"
    if any(ip in net for net in PRIVATE if net.version == ip.version):
        return "private"
    if not ip.is_global:
        return "not public"
    return None


def resolve_checked(host: str, port: int, allow_private: bool) -> list[str]:
    """Resolve `host` and check every address it has; return them, to connect to in order."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as e:
        raise Failed(f"could not resolve host {host!r} ({e})") from None
    addresses = list(dict.fromkeys(info[4][0] for info in infos))
    if not addresses:
        raise Failed(f"could not resolve host {host!r}")
    if not allow_private:
        for address in addresses:
            why = address_refusal(address)
            if why:
                raise Refused(f"{host} resolves to {address}, a {why} address; set "
                              "WEB_FETCH_ALLOW_PRIVATE=true to allow it")
    return addresses


def check_url(settings: Any, url: str, turn: str) -> tuple[Any, list[str]]:
    """Both rules on one URL: (its parts, the checked addresses to connect to)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise Refused(f"only http and https URLs are fetched, not {url!r}")
    host = (parts.hostname or "").lower().rstrip(".")
    if not host:
        raise Refused(f"no host in {url!r}")
    if not host_named(host, turn, settings.web_fetch_allow_hosts):
        raise Refused(f"the host {host!r} does not appear in your message nor in "
                      "WEB_FETCH_ALLOW_HOSTS; name it to fetch it")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise Refused(f"bad port in {url!r}") from None
    return parts, resolve_checked(host, port, settings.web_fetch_allow_private)


# -- the fetch ----------------------------------------------------------------------------------
@dataclass
class Page:
    url: str
    content_type: str
    body: bytes
    cut: bool                  # the body was longer than WEB_FETCH_MAX_BYTES
    encoding: str | None


def _pinned(parts: Any, address: str) -> tuple[str, dict[str, str], dict[str, Any]]:
    """The URL rewritten to the checked address, the Host header, the TLS server name."""
    host_port = f"[{address}]" if ":" in address else address
    if parts.port:
        host_port += f":{parts.port}"
    netloc_host = parts.netloc.rsplit("@", 1)[-1]
    url = urlunsplit((parts.scheme, host_port, parts.path or "/", parts.query, ""))
    extensions = {"sni_hostname": parts.hostname} if parts.scheme == "https" else {}
    return url, {"Host": netloc_host, "User-Agent": USER_AGENT,
                 "Accept": "text/html,text/plain;q=0.9,*/*;q=0.1"}, extensions


def _get(client: Any, parts: Any, address: str, url: str, cap: int,
         deadline: float) -> Page | str:
    """One GET to one checked address: the page, or the Location of a redirect. A body still
    arriving at `deadline` (a server dripping bytes under the per-read timeout) is a failure."""
    target, headers, extensions = _pinned(parts, address)
    with client.stream("GET", target, headers=headers, extensions=extensions) as r:
        if r.is_redirect:
            location = r.headers.get("location")
            if not location:
                raise Failed(f"HTTP {r.status_code} from {url} with no Location")
            return location
        if r.status_code >= 400:
            raise Failed(f"HTTP {r.status_code} from {url}")
        ctype = r.headers.get("content-type", "").split(";")[0].strip().lower()
        if not ctype.startswith(TEXT_TYPES) and ctype not in HTML_TYPES:
            raise Failed(f"{url} is {ctype or 'of no stated type'}, not text")
        body, cut = bytearray(), False
        for chunk in r.iter_bytes():
            if time.monotonic() > deadline:
                raise TimeoutError
            body += chunk
            if len(body) > cap:
                del body[cap:]
                cut = True
                break
        return Page(url, ctype, bytes(body), cut, r.charset_encoding)


def fetch(settings: Any, url: str, *, turn: str) -> Page:
    """GET `url` under both rules, following at most MAX_REDIRECTS redirects, each re-checked."""
    import httpx

    timeout = settings.web_fetch_timeout
    cap = settings.web_fetch_max_bytes
    deadline = time.monotonic() + timeout     # for the whole fetch, redirects included
    with httpx.Client(timeout=httpx.Timeout(timeout), follow_redirects=False,
                      trust_env=False) as client:
        for _ in range(MAX_REDIRECTS + 1):
            parts, addresses = check_url(settings, url, turn)
            answer = None
            for i, address in enumerate(addresses):
                try:
                    answer = _get(client, parts, address, url, cap, deadline)
                    break
                except httpx.ConnectError as e:     # refused, unreachable, or a TLS failure
                    if i == len(addresses) - 1:
                        raise Failed(f"cannot connect to {parts.hostname} "
                                     f"({', '.join(addresses)}): {e}") from None
                except (httpx.TimeoutException, TimeoutError):
                    raise Failed(f"no answer from {parts.hostname} within {timeout:g}s "
                                 "(WEB_FETCH_TIMEOUT)") from None
                except httpx.HTTPError as e:
                    raise Failed(f"could not fetch {url}: {type(e).__name__}: {e}") from None
            if isinstance(answer, Page):
                return answer
            url = urljoin(url, answer)      # a redirect: both rules again on the new URL
    raise Failed(f"more than {MAX_REDIRECTS} redirects from {url}")


# -- the text -----------------------------------------------------------------------------------
def html_text(body: bytes, encoding: str | None = None) -> str:
    """The readable text of an HTML page: scripts, styles and forms dropped, one line per block."""
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(body, "html.parser", from_encoding=encoding)
    for tag in soup(["script", "style", "noscript", "template", "svg", "iframe", "form",
                     "button", "select"]):
        tag.decompose()
    for tag in soup.find_all(_BLOCK_TAGS):
        tag.insert_before(_BREAK)
        tag.insert_after(_BREAK)
    # Whitespace inside a block (the source's own line breaks) is one space; blocks are lines.
    blocks = (" ".join(part.split()) for part in soup.get_text().split(_BREAK))
    return "\n".join(b for b in blocks if b)


def _tidy(text: str) -> str:
    lines = [" ".join(line.split()) for line in text.splitlines()]
    out: list[str] = []
    for line in lines:
        if line or (out and out[-1]):
            out.append(line)
    return "\n".join(out).strip()


def cut_to_tokens(text: str, budget: int) -> tuple[str, int]:
    """The longest prefix of `text` (at a line or word boundary) within `budget` estimated
    tokens, and the whole text's estimate."""
    total = estimate_tokens(text)
    if total <= budget:
        return text, total
    lo, hi = 0, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if estimate_tokens(text[:mid]) <= budget:
            lo = mid
        else:
            hi = mid - 1
    head = text[:lo]
    boundary = max(head.rfind("\n"), head.rfind(" "))
    if boundary > lo // 2:
        head = head[:boundary]
    return head.rstrip(), total


def render(settings: Any, page: Page) -> ToolResult:
    if page.content_type in HTML_TYPES:
        text = html_text(page.body, page.encoding)
    else:
        try:
            text = _tidy(page.body.decode(page.encoding or "utf-8", errors="replace"))
        except LookupError:     # a charset Python does not know
            text = _tidy(page.body.decode("utf-8", errors="replace"))
    if not text:
        return ToolResult(f"{non_answer.NO_RESULTS} web_fetch: {page.url} has no readable text",
                          not_answered="non_answer_reply")
    budget = settings.web_fetch_max_tokens
    shown, total = cut_to_tokens(text, budget)
    notes = []
    if page.cut:
        notes.append(f"[only the first {settings.web_fetch_max_bytes} bytes of the page were read "
                     "(WEB_FETCH_MAX_BYTES)]")
    if shown != text:
        notes.append(f"[text cut to about {budget} of its ~{total} tokens (WEB_FETCH_MAX_TOKENS)]")
    tail = ("\n\n" + "\n".join(notes)) if notes else ""
    return ToolResult(f"From {page.url}:\n\n{shown}{tail}")
