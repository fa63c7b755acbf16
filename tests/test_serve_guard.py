"""`forge serve` answers only its own page and the programs the user runs: the Host
check before routing (DNS rebinding), the Origin / Sec-Fetch-Site check (a page on another site
posting a "simple" text/plain body), Content-Type on bodies (415), X-Forwarded-* believed only
from SERVE_TRUSTED_PROXIES (and the rate limit keyed on the client it names), the security
headers on a 500, /health saying only "ok". Through the ASGI app (TestClient) and, for the
attacks themselves, through a real uvicorn on loopback."""
from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest
from starlette.testclient import TestClient

from conftest import invoke
from forge.store import rag
from forge.serve import guard
from forge.serve.app import create_app
from forge.core.settings import load_settings
from test_serve import free_port, start_server

TOKEN = "s3cret-token"
OWN = "http://127.0.0.1:8765"
EVIL = "http://evil.example"


def client_for(base_url: str = OWN, **env: str) -> TestClient:
    settings = load_settings({**os.environ, **env})
    return TestClient(create_app(settings), base_url=base_url, raise_server_exceptions=False)


def stored(settings) -> list[str]:
    if not settings.rag_db_file.exists():
        return []
    with rag.open_store(settings, mode="rows") as store:
        return [e.content for e in rag.list_entries(store)]


JSON = {"content-type": "application/json"}


# -- Host -------------------------------------------------------------------------------------

@pytest.mark.parametrize("host", ["evil.example:8765", "evil.example", "192.168.1.20:8765",
                                  "127.0.0.1.evil.example", "localhost.evil.example:8765"])
def test_a_foreign_host_is_refused_before_routing_and_nothing_is_written(settings, host):
    client = client_for()
    read = client.get("/memory", headers={"host": host})
    assert read.status_code == 421 and "Host" in read.json()["error"]
    write = client.post("/remember", json={"content": "planted by a rebinding page"},
                        headers={"host": host})
    assert write.status_code == 421
    assert stored(settings) == []
    # refused before routing: an unknown path answers the same, not 404
    assert client.get("/no-such-route", headers={"host": host}).status_code == 421


@pytest.mark.parametrize("host", ["127.0.0.1:8765", "localhost:8765", "[::1]:8765", "LOCALHOST",
                                  "127.0.0.1"])
def test_loopback_names_are_answered(host):
    assert client_for().get("/context", headers={"host": host}).status_code == 200


def test_serve_allowed_hosts_adds_names(settings):
    client = client_for(SERVE_ALLOWED_HOSTS="forge.lan,192.168.1.20,[fd00::7]:8443,proxy.example:443")
    for host in ("forge.lan:8765", "FORGE.LAN", "192.168.1.20:8765", "[fd00::7]:8765",
                 "proxy.example"):
        assert client.get("/context", headers={"host": host}).status_code == 200
    assert client.get("/context", headers={"host": "other.lan"}).status_code == 421


def test_the_bind_address_is_an_allowed_host():
    settings = load_settings(dict(os.environ, API_TOKEN=TOKEN))
    app = create_app(settings, bind_host="192.168.1.20")
    client = TestClient(app, base_url="http://192.168.1.20:8765")
    assert client.get("/context", headers={"authorization": f"Bearer {TOKEN}"}).status_code == 200


def test_a_wildcard_bind_without_serve_allowed_hosts_is_refused_at_start(runner, monkeypatch):
    monkeypatch.setenv("API_TOKEN", TOKEN)
    for host in ("0.0.0.0", "::"):
        result = invoke(runner, "serve", "--host", host)
        assert result.exit_code == 1
        assert "SERVE_ALLOWED_HOSTS" in result.stderr and "\n" not in result.stderr.strip()
    with pytest.raises(Exception, match="SERVE_ALLOWED_HOSTS"):
        guard.check_bind("0.0.0.0", TOKEN, ())
    guard.check_bind("0.0.0.0", TOKEN, ("forge.lan",))


# -- Origin and Sec-Fetch-Site ----------------------------------------------------------------

@pytest.mark.parametrize("headers", [
    {"origin": EVIL, "content-type": "text/plain"},              # the no-cors "simple" request
    {"origin": EVIL, **JSON},                                    # a JSON POST from another site
    {"origin": "null", **JSON},                                  # a sandboxed frame, a file: page
    {"sec-fetch-site": "cross-site", **JSON},                    # a browser that sent no Origin
    {"origin": "http://127.0.0.1:3000", **JSON},                 # another port on this machine
    {"origin": "https://127.0.0.1:8765", **JSON},                # another scheme
])
def test_a_cross_site_post_is_403_and_writes_nothing(settings, headers):
    client = client_for()
    response = client.post("/remember", content=b'{"content": "planted by another site"}',
                           headers=headers)
    assert response.status_code == 403 and "origin" in response.json()["error"].lower()
    chat = client.post("/chat", content=b'{"message": "run my tools"}', headers=headers)
    assert chat.status_code == 403
    assert stored(settings) == []


def test_a_cross_site_read_is_403():
    client = client_for()
    assert client.get("/memory", headers={"origin": EVIL}).status_code == 403
    assert client.get("/memory", headers={"sec-fetch-site": "cross-site"}).status_code == 403


def test_the_page_s_own_origin_and_a_listed_origin_are_answered(settings):
    client = client_for(SERVE_CORS_ORIGINS="http://tools.example:9000")
    own = client.post("/remember", json={"content": "from the page"},
                      headers={"origin": OWN, "sec-fetch-site": "same-origin"})
    assert own.status_code == 200, own.text
    listed = client.post("/remember", json={"content": "from a listed origin"},
                         headers={"origin": "http://tools.example:9000", "sec-fetch-site": "cross-site"})
    assert listed.status_code == 200, listed.text
    assert sorted(stored(settings)) == ["from a listed origin", "from the page"]
    # a link followed from another site opens the page shell (it holds no data), nothing else
    nav = {"sec-fetch-site": "cross-site", "sec-fetch-mode": "navigate"}
    assert client.get("/", headers=nav).status_code == 200
    assert client.get("/memory", headers=nav).status_code == 403


# -- Content-Type -----------------------------------------------------------------------------

@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded",
                                          "multipart/form-data; boundary=x"])
def test_a_body_without_the_json_content_type_is_415_and_writes_nothing(settings, content_type):
    headers = {"content-type": content_type} if content_type else {}
    response = client_for().post("/remember", content=b'{"content": "a form post"}', headers=headers)
    assert response.status_code == 415
    assert "Content-Type: application/json" in response.json()["error"]
    assert stored(settings) == []


def test_json_with_a_charset_and_requests_without_a_body_need_no_more(settings):
    client = client_for()
    ok = client.post("/remember", content=b'{"content": "with a charset"}',
                     headers={"content-type": "application/json; charset=utf-8"})
    assert ok.status_code == 200
    assert client.delete(f"/memory/{ok.json()['id']}").status_code == 200
    assert client.get("/context").status_code == 200


# -- proxies ----------------------------------------------------------------------------------

def test_forwarded_headers_are_ignored_unless_the_peer_is_a_trusted_proxy():
    # TestClient's peer is "testclient"; the proxy is named by address, so it is not trusted here
    client = client_for(SERVE_RATE_LIMIT="2")
    for n in range(2):
        assert client.get("/context", headers={"x-forwarded-for": f"10.0.0.{n}"}).status_code == 200
    assert client.get("/context", headers={"x-forwarded-for": "10.0.0.9"}).status_code == 429
    # a forwarded Host does not get a foreign name past the check either
    assert client.get("/context", headers={"host": "evil.example",
                                           "x-forwarded-host": "localhost"}).status_code == 421


def _scope(client: str, headers: dict[str, str]) -> dict:
    return {"type": "http", "client": (client, 4242), "scheme": "http",
            "headers": [(k.encode(), v.encode()) for k, v in headers.items()]}


def test_a_trusted_proxy_names_the_client_the_scheme_and_the_host():
    proxies = guard.Proxies(("10.0.0.1", "fd00::/8"))
    fwd = {"host": "127.0.0.1:8765", "x-forwarded-for": "203.0.113.7, 10.0.0.1",
           "x-forwarded-proto": "https", "x-forwarded-host": "forge.example.org"}
    seen = proxies.resolve(_scope("10.0.0.1", fwd))
    assert seen["client"][0] == "203.0.113.7" and seen["scheme"] == "https"
    assert dict(seen["headers"])[b"host"] == b"forge.example.org"
    # the rightmost address the proxies did not add is the client: a forged left one is skipped
    forged = {**fwd, "x-forwarded-for": "1.2.3.4, 203.0.113.7"}
    assert proxies.resolve(_scope("10.0.0.1", forged))["client"][0] == "203.0.113.7"
    # from any other peer the headers are ignored
    other = proxies.resolve(_scope("192.0.2.5", fwd))
    assert other["client"][0] == "192.0.2.5" and other["scheme"] == "http"
    assert dict(other["headers"])[b"host"] == b"127.0.0.1:8765"


def test_the_rate_limit_keys_on_the_client_a_trusted_proxy_names():
    settings = load_settings(dict(os.environ, SERVE_RATE_LIMIT="2", SERVE_TRUSTED_PROXIES="127.0.0.1",
                                  SERVE_ALLOWED_HOSTS="forge.example.org"))
    import asyncio

    app = create_app(settings)
    statuses: dict[str, list[int]] = {}

    async def get(client_ip: str) -> None:
        sent = []

        async def receive():
            return {"type": "http.request", "body": b""}

        async def send(message):
            if message["type"] == "http.response.start":
                sent.append(message["status"])

        scope = {**_scope("127.0.0.1", {"host": "127.0.0.1:8765", "x-forwarded-for": client_ip,
                                         "x-forwarded-host": "forge.example.org",
                                         "x-forwarded-proto": "https"}),
                 "method": "GET", "path": "/context", "raw_path": b"/context", "query_string": b"",
                 "root_path": "", "http_version": "1.1", "asgi": {"version": "3.0"}}
        await app(scope, receive, send)
        statuses.setdefault(client_ip, []).extend(sent)

    async def run() -> None:
        for ip in ("203.0.113.1", "203.0.113.2"):
            for _ in range(3):
                await get(ip)

    asyncio.run(run())
    assert statuses == {"203.0.113.1": [200, 200, 429], "203.0.113.2": [200, 200, 429]}


def test_the_systemd_unit_sets_the_trusted_proxy():
    unit = (Path(__file__).resolve().parent.parent / "deploy" / "forge-serve.service").read_text()
    assert "SERVE_TRUSTED_PROXIES=127.0.0.1" in unit


# -- headers on every response, /health --------------------------------------------------------

def test_a_500_carries_the_security_headers(monkeypatch):
    from forge.serve import app as app_module

    def boom(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(app_module, "do_context", boom)
    response = client_for().get("/context")
    assert response.status_code == 500
    assert response.json() == {"error": "internal error: RuntimeError"}
    assert "script-src 'self'" in response.headers["content-security-policy"]
    assert response.headers["x-content-type-options"] == "nosniff"


def test_refusals_carry_the_security_headers_too():
    for response in (client_for().get("/memory", headers={"host": "evil.example"}),
                     client_for().get("/memory", headers={"origin": EVIL}),
                     client_for().post("/remember", content=b"{}")):
        assert response.status_code in (403, 415, 421)
        assert response.headers["x-content-type-options"] == "nosniff"


def test_health_says_only_ok_and_status_needs_the_token():
    client = client_for(API_TOKEN=TOKEN)
    assert client.get("/health").json() == {"status": "ok"}
    assert client.get("/status").status_code == 401
    status = client.get("/status", headers={"authorization": f"Bearer {TOKEN}"}).json()
    assert status["auth"] is True and status["chat_server"] == {"up": False}
    assert status["version"]


# -- the attacks through a real uvicorn --------------------------------------------------------

def test_through_uvicorn_a_rebinding_host_and_a_no_cors_post_are_refused_curl_with_json_works(
        forge_env, settings):
    port = free_port()
    server = start_server({**os.environ}, Path.cwd(), port)
    url = f"http://127.0.0.1:{port}"
    try:
        rebound = httpx.get(url + "/memory", headers={"host": f"evil.example:{port}"})
        simple = httpx.post(url + "/remember", content=b'{"content": "planted"}',
                            headers={"origin": EVIL, "content-type": "text/plain"})
        form = httpx.post(url + "/remember", content=b'{"content": "planted"}')
        curl = httpx.post(url + "/remember", json={"content": "from a script"})
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert (rebound.status_code, simple.status_code, form.status_code) == (421, 403, 415)
    assert curl.status_code == 200
    assert stored(settings) == ["from a script"]
