"""web_fetch against a real HTTP server on loopback (started here, stdlib http.server).

Loopback is a private address: the tests that fetch allow it explicitly
(WEB_FETCH_ALLOW_PRIVATE=true); the default refuses it before any request reaches the server.
"""
from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator

import pytest

from chat_helpers import envelope, history_messages, last_trace, load
from forge.memory import non_answer
from forge.chat.tools import ToolContext, dispatch

PAGE = b"""<!doctype html><html><head><title>NAS notes</title>
<style>body { color: red }</style><script>var secret = "script text";</script></head>
<body><nav>Home</nav><h1>The NAS</h1><p>The NAS runs <b>Debian 12</b> on a
<a href="/hw">Celeron</a>.</p><ul><li>4 disks</li><li>RAID 5</li></ul></body></html>"""


class Handler(BaseHTTPRequestHandler):
    routes: dict[str, tuple[int, dict[str, str], bytes]] = {}
    seen: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.seen.append(self.path)
        if self.path == "/drip":     # 20 bytes, one every 0.15 s: each read is quick
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", "20")
            self.end_headers()
            for _ in range(20):
                self.wfile.write(b"x")
                self.wfile.flush()
                time.sleep(0.15)
            return
        status, headers, body = self.routes.get(self.path, (404, {"Content-Type": "text/plain"},
                                                            b"not here"))
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def site() -> Iterator[tuple[str, type[Handler]]]:
    """A real HTTP server on 127.0.0.1; yields (base URL, handler class with routes and seen)."""
    class H(Handler):
        routes = {
            "/nas": (200, {"Content-Type": "text/html; charset=utf-8"}, PAGE),
            "/plain": (200, {"Content-Type": "text/plain"}, b"line one\nline two\n"),
            "/image": (200, {"Content-Type": "image/png"}, b"\x89PNG...."),
            "/big": (200, {"Content-Type": "text/plain"}, b"word " * 20000),
            "/empty": (200, {"Content-Type": "text/html"}, b"<html><script>x=1</script></html>"),
            "/to-nas": (302, {"Location": "/nas"}, b""),
            "/to-invented": (302, {"Location": "http://invented.example.internal/"}, b""),
            "/loop": (302, {"Location": "/loop"}, b""),
            "/latin": (200, {"Content-Type": "text/plain; charset=x-unknown-9"}, "caf\u00e9".encode()),
            "/iso": (200, {"Content-Type": "text/html; charset=iso-8859-1"},
                     "<p>Le NAS est \u00e0 l'\u00e9tage</p>".encode("latin-1")),
        }
        seen: list[str] = []

    server = ThreadingHTTPServer(("127.0.0.1", 0), H)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", H
    finally:
        server.shutdown()
        server.server_close()


def fetch(url: str, turn: str | None = None, **env: str):
    env = {"ENABLED_TOOLS": "web_fetch", "WEB_FETCH_ALLOW_PRIVATE": "true", **env}
    ctx = ToolContext(settings=load(**env), turn_text=turn if turn is not None else f"read {url}")
    return dispatch("web_fetch", {"url": url}, ctx)


def test_an_html_page_comes_back_as_its_text(site):
    base, h = site
    result = fetch(f"{base}/nas")
    assert result.not_answered is None
    assert "The NAS runs Debian 12 on a Celeron." in result.text
    assert "4 disks\nRAID 5" in result.text
    assert "script text" not in result.text and "color: red" not in result.text
    assert result.trace == {"host": "127.0.0.1"}


def test_the_charset_is_honoured_and_an_unknown_one_is_not_a_crash(site):
    base, h = site
    assert "Le NAS est à l'étage" in fetch(f"{base}/iso").text
    assert "café" in fetch(f"{base}/latin").text


def test_plain_text_and_a_redirect_on_a_named_host(site):
    base, h = site
    assert "line one\nline two" in fetch(f"{base}/plain").text
    assert "Debian 12" in fetch(f"{base}/to-nas").text
    assert h.seen[-2:] == ["/to-nas", "/nas"]


def test_loopback_is_refused_by_default_before_any_request(site):
    base, h = site
    result = fetch(f"{base}/nas", WEB_FETCH_ALLOW_PRIVATE="false")
    assert result.text.startswith(non_answer.ERROR)
    assert "loopback" in result.text and "WEB_FETCH_ALLOW_PRIVATE" in result.text
    assert result.not_answered == "tool_refused"
    assert h.seen == []


def test_a_host_the_user_did_not_name_is_refused_before_any_lookup(site):
    base, h = site
    result = fetch(f"{base}/nas", turn="what does my NAS run?")
    assert result.text.startswith(non_answer.ERROR) and "does not appear in your message" in result.text
    assert h.seen == []
    # An invented hostname is refused without even a DNS lookup (it would fail to resolve).
    result = fetch("http://nas-docs.invented.example/", turn="what does my NAS run?")
    assert "does not appear in your message" in result.text and "resolve" not in result.text


def test_the_allowlist_lets_a_host_through(site):
    base, h = site
    result = fetch(f"{base}/nas", turn="what does my NAS run?", WEB_FETCH_ALLOW_HOSTS="127.0.0.1")
    assert "Debian 12" in result.text


def test_both_rules_are_checked_again_on_a_redirect(site):
    base, h = site
    result = fetch(f"{base}/to-invented")
    assert result.text.startswith(non_answer.ERROR)
    assert "'invented.example.internal' does not appear in your message" in result.text
    assert h.seen == ["/to-invented"]
    assert "more than 5 redirects" in fetch(f"{base}/loop").text


def test_a_redirect_to_a_private_address_is_refused_by_default(site, monkeypatch):
    """No public server is reachable here, so 127.0.0.1 stands in for one (the classifier is
    told it is public) and redirects to a second real server on 127.0.0.2, which is loopback:
    the redirect hop is refused and that server never sees a request."""
    from forge.chat.tools import web_fetch

    class Inner(Handler):
        routes = {"/secret": (200, {"Content-Type": "text/plain"}, b"internal")}
        seen: list[str] = []

    inner = ThreadingHTTPServer(("127.0.0.2", 0), Inner)
    threading.Thread(target=inner.serve_forever, args=(0.05,), daemon=True).start()
    try:
        base, h = site
        inner_url = f"http://127.0.0.2:{inner.server_address[1]}/secret"
        h.routes = {**h.routes, "/out": (302, {"Location": inner_url}, b"")}
        real = web_fetch.address_refusal
        monkeypatch.setattr(web_fetch, "address_refusal",
                            lambda a: None if a == "127.0.0.1" else real(a))
        result = fetch(f"{base}/out", turn=f"read {base}/out and maybe {inner_url}",
                       WEB_FETCH_ALLOW_PRIVATE="false")
        assert result.text.startswith(non_answer.ERROR)
        assert "127.0.0.2 resolves to 127.0.0.2, a loopback address" in result.text
        assert h.seen == ["/out"] and Inner.seen == []
    finally:
        inner.shutdown()
        inner.server_close()


def test_failures_are_marked_non_answers(site):
    base, h = site
    for path, words in (("/image", "image/png, not text"), ("/missing", "HTTP 404"),
                        ("/empty", "no readable text")):
        result = fetch(f"{base}{path}")
        assert non_answer.is_non_answer(result.text), result.text
        assert words in result.text
        assert result.not_answered is not None


def test_the_text_is_cut_to_the_token_budget_with_a_note(site):
    base, h = site
    result = fetch(f"{base}/big", WEB_FETCH_MAX_TOKENS="100")
    assert "[text cut to about 100 of its" in result.text
    assert result.text.count("word") <= 100
    capped = fetch(f"{base}/big", WEB_FETCH_MAX_BYTES="2048", WEB_FETCH_MAX_TOKENS="5000")
    assert "only the first 2048 bytes" in capped.text


def test_a_timeout_is_a_marked_failure(fake_server):
    fake_server.delay("/slow", 3)
    result = fetch(f"{fake_server.url}/slow", WEB_FETCH_TIMEOUT="0.5")
    assert result.text.startswith(non_answer.ERROR) and "within 0.5s" in result.text


def test_a_page_that_drips_past_the_timeout_is_a_failure(site):
    base, h = site
    started = time.monotonic()
    result = fetch(f"{base}/drip", WEB_FETCH_TIMEOUT="0.6")
    assert result.text.startswith(non_answer.ERROR) and "within 0.6s" in result.text
    assert time.monotonic() - started < 2


def test_web_fetch_is_off_unless_named(site):
    base, h = site
    ctx = ToolContext(settings=load(WEB_FETCH_ALLOW_PRIVATE="true"), turn_text=f"read {base}/nas")
    result = dispatch("web_fetch", {"url": f"{base}/nas"}, ctx)
    assert "no tool named 'web_fetch' is enabled" in result.text and h.seen == []


def test_a_refused_fetch_in_a_chat_turn_is_not_answered(site, chat_fake):
    """The seed's record: the router invented a host, web_fetch failed, and the run was drawn
    with a green tick. Now the exchange is answered: false, the trace shows ∅, and compaction
    would leave it out."""
    from forge.store import traces
    from forge.chat.run import run_turn

    chat_fake.chat_reply(envelope("web_fetch", payload={"url": "http://nas.invented.lan/status"}))
    settings = load(ENABLED_TOOLS="web_fetch")
    result = run_turn(settings, "is my NAS up?")
    assert result.ok and result.not_answered == "tool_refused"
    record = last_trace(settings)
    assert traces.state(record) == "∅"
    assert record["steps"][1] == {"tool": "web_fetch", "duration_ms": record["steps"][1]["duration_ms"],
                                  "detail": {"host": "nas.invented.lan"}}
    assert [m.answered for m in history_messages(settings)] == [False, False]


def test_https_connects_to_the_checked_address_and_verifies_the_named_host(tmp_path, monkeypatch):
    """A real TLS server on loopback with a certificate for `localhost`: the connection goes to
    the address that was checked, and the certificate is still verified against the host the
    user named (SNI). The test trusts its own certificate by handing httpx its CA file; nothing
    else is replaced."""
    import shutil
    import ssl
    import subprocess

    import httpx

    if shutil.which("openssl") is None:
        pytest.skip("no openssl command to make a test certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
                    "-out", str(cert), "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost"], check=True, capture_output=True)

    class H(Handler):
        routes = {"/x": (200, {"Content-Type": "text/plain"}, b"over tls")}
        seen: list[str] = []

    server = ThreadingHTTPServer(("127.0.0.1", 0), H)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(cert), str(key))
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    real_client = httpx.Client
    monkeypatch.setattr(httpx, "Client", lambda *a, **k: real_client(
        *a, **{**k, "verify": ssl.create_default_context(cafile=str(cert))}))
    try:
        port = server.server_address[1]
        ok = fetch(f"https://localhost:{port}/x")
        assert ok.not_answered is None and "over tls" in ok.text
        mismatch = fetch(f"https://127.0.0.1:{port}/x")     # the certificate names localhost only
        assert mismatch.text.startswith(non_answer.ERROR) and "CERTIFICATE_VERIFY_FAILED" in mismatch.text
    finally:
        server.shutdown()
        server.server_close()


# -- public addresses only: every range that is not global, however it is written --------------

NOT_PUBLIC = [
    ("127.0.0.1", "loopback"), ("127.8.9.10", "loopback"), ("::1", "loopback"),
    ("10.1.2.3", "private"), ("172.16.5.4", "private"), ("192.168.1.20", "private"),
    ("169.254.169.254", "link-local"), ("fe80::1", "link-local"),
    ("100.64.0.1", "carrier-grade NAT"), ("100.100.100.100", "carrier-grade NAT"),  # Tailscale
    ("0.0.0.0", "unspecified"), ("::", "unspecified"),
    ("224.0.0.1", "multicast"), ("ff02::1", "multicast"),
    ("240.0.0.1", "reserved"), ("255.255.255.255", "reserved"),
    ("192.0.2.1", "not public"), ("198.51.100.7", "not public"), ("203.0.113.9", "not public"),
    ("198.18.0.1", "not public"), ("192.0.0.1", "not public"), ("2001:db8::1", "not public"),
    ("fc00::1", "private"), ("fd12:3456::1", "private"),
    ("::ffff:127.0.0.1", "loopback"), ("::ffff:10.0.0.1", "private"),    # IPv4-mapped
    ("::ffff:100.64.0.1", "carrier-grade NAT"),
    ("2002:7f00:1::", "loopback"), ("2002:a00:1::1", "private"),         # 6to4 of an IPv4
    ("2002:a9fe:a9fe::", "link-local"),
    ("64:ff9b::7f00:1", "loopback"), ("64:ff9b::a00:1", "private"),      # NAT64 of an IPv4
    ("64:ff9b::6440:1", "carrier-grade NAT"),
    ("::7f00:1", "reserved"),                                            # IPv4-compatible (obsolete)
]
PUBLIC = ["1.1.1.1", "93.184.215.14", "2606:4700::1111", "::ffff:1.1.1.1", "2002:101:101::",
          "64:ff9b::101:101"]


@pytest.mark.parametrize("address,label", NOT_PUBLIC)
def test_every_address_that_is_not_global_is_refused(address, label):
    from forge.chat.tools import web_fetch

    assert label in (web_fetch.address_refusal(address) or "public")


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_and_their_wrapped_forms_pass(address):
    from forge.chat.tools import web_fetch

    assert web_fetch.address_refusal(address) is None


@pytest.mark.parametrize("address", ["100.100.100.100", "2002:7f00:1::", "64:ff9b::7f00:1"])
def test_a_host_resolving_to_a_wrapped_or_shared_address_is_refused_before_any_connection(
        address, monkeypatch):
    """The lookup answers the address; nothing is connected to (a connection would fail the
    test: the socket module's connect is replaced by one that records and raises)."""
    import socket

    from forge.chat.tools import web_fetch

    connected = []
    monkeypatch.setattr(socket, "getaddrinfo", lambda host, port, *a, **k: [
        (socket.AF_INET6 if ":" in address else socket.AF_INET, socket.SOCK_STREAM, 6, "",
         (address, port))])
    monkeypatch.setattr(socket, "create_connection", lambda *a, **k: connected.append(a) or 1 / 0)
    result = fetch("http://tailnet-box.example/", WEB_FETCH_ALLOW_PRIVATE="false")
    assert result.not_answered == "tool_refused" and address in result.text
    assert "WEB_FETCH_ALLOW_PRIVATE" in result.text and connected == []
    assert web_fetch.address_refusal(address)
    allowed = fetch("http://tailnet-box.example/", WEB_FETCH_ALLOW_PRIVATE="true")
    assert allowed.not_answered == "tool_error"     # the setting lets it through to connect
    assert connected


def test_the_pinned_connection_never_reaches_loopback_when_the_second_lookup_says_127_0_0_1(
        monkeypatch):
    """DNS rebinding: a resolver answers a public address on the first lookup (the check) and
    127.0.0.1 on the next (the connection). Two real servers on one port: 127.0.0.2 stands for the
    public address (the classifier is told it is public), 127.0.0.1 holds a secret. The fetch
    must land on the checked address; the secret server must see no request."""
    import socket

    from forge.chat.tools import web_fetch

    class Secret(Handler):
        routes = {"/page": (200, {"Content-Type": "text/plain"}, b"the secret on loopback")}
        seen: list[str] = []

    class Public(Handler):
        routes = {"/page": (200, {"Content-Type": "text/plain"}, b"the public page")}
        seen: list[str] = []

    secret = ThreadingHTTPServer(("127.0.0.1", 0), Secret)
    port = secret.server_address[1]
    public = ThreadingHTTPServer(("127.0.0.2", port), Public)
    for server in (secret, public):
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    real_lookup = socket.getaddrinfo
    lookups = []

    def rebinding(host, port, *args, **kwargs):
        if host != "rebind.example":
            return real_lookup(host, port, *args, **kwargs)
        lookups.append(host)
        address = "127.0.0.2" if len(lookups) == 1 else "127.0.0.1"
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))]

    real_refusal = web_fetch.address_refusal
    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    monkeypatch.setattr(web_fetch, "address_refusal",
                        lambda a: None if a == "127.0.0.2" else real_refusal(a))
    try:
        result = fetch(f"http://rebind.example:{port}/page", WEB_FETCH_ALLOW_PRIVATE="false")
    finally:
        for server in (secret, public):
            server.shutdown()
            server.server_close()
    assert Secret.seen == [] and "the secret" not in result.text
    assert "the public page" in result.text and Public.seen == ["/page"]
