"""`forge serve`: each route answers what its CLI twin answers on the same store; the token,
the rate limit, the body cap and bad JSON; the failure contract (502 on an outage, nothing
written; a refusal is 200 with answered false); a cron compaction racing the server's writes."""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from starlette.routing import Mount, Route
from starlette.testclient import TestClient

from chat_helpers import envelope
from conftest import invoke
from fakeserver import closed_url
from forge.store import history, rag, traces
from forge.memory import non_answer
from forge.serve import guard
from forge.serve.app import create_app
from forge.core.settings import load_settings

TOKEN = "s3cret-token"


def client_for(**env: str) -> TestClient:
    # the Host a browser or curl sends to the default bind (the guard refuses "testserver")
    return TestClient(create_app(load_settings({**os.environ, **env})),
                      base_url="http://127.0.0.1:8765")


AGGREGATED = [
    ("Possède un Steam Deck", None),
    ("Possède un Steam Deck sous SteamOS, fait tourner des conteneurs Podman dessus", None),
    ("Matériel : NiPoGi AM06PRO, processeur Ryzen 5500U, 32 Go de RAM, SSD 256 Go", "homelab"),
    ("NiPoGi AM06PRO, Arch, 5500U, 32Go RAM, SSD 256Go, Ansible, services Podman", "homelab"),
    ("Le NiPoGi a 32 Go de RAM", "homelab"),
]


def seed(data: Path) -> None:
    """A store with entries in two kinds and a project, a history with a pin, two traces."""
    settings = load_settings({**os.environ, "FORGE_DATA_DIR": str(data)})
    with rag.open_store(settings) as store:
        rag.remember(store, "decision", "Use SQLite-vec instead of an external vector DB", project="forge")
        rag.remember(store, "fact", "The NAS runs Debian 12")
        rag.remember(store, "todo", "Back up the NAS every Sunday")
        # #4-#5: a pair the aggregation tier absorbs; #6-#8: a trio it folds into one line (#9)
        for content, project in AGGREGATED:
            rag.remember(store, "fact", content, project=project)
    history.append(settings.memory_file, [
        history.NewMessage(role=r, content=c) for r, c in [
            ("user", "Which OS does the NAS run?"), ("assistant", "Debian 12."),
            ("user", "And the backups?"), ("assistant", "Every Sunday."),
            ("user", "Thanks"), ("assistant", "You're welcome.")]], max_history=200)
    history.set_pinned(settings.memory_file, 1, True)
    for n, (ok, reason) in enumerate([(True, None), (True, "recall_nothing_found")]):
        traces.append(settings.trace_file, traces.make_record(
            run_id=f"run{n}", user_input=f"question {n}", steps=[], started=time.monotonic(),
            ok=ok, not_answered=reason, error=None, llm=None))


VOLATILE = {"created", "updated", "ts", "at", "timestamp", "run_id", "source", "total_ms",
            "seconds", "embed_seconds", "db_seconds", "db"}


def normal(value):
    """Times and run ids differ between two runs; everything else must not."""
    if isinstance(value, dict):
        return {k: "*" if k in VOLATILE else normal(v) for k, v in value.items()}
    if isinstance(value, list):
        return [normal(v) for v in value]
    return value


# (method, path) -> (CLI arguments, request, stdin for the CLI)
IMPORT = [{"role": "user", "content": "Imported question"}, {"role": "assistant", "content": "Imported answer"}]
TWINS = {
    ("GET", "/search"): (["recall", "NAS backup", "--json"], dict(params={"q": "NAS backup"}), None),
    ("GET", "/memory"): (["memory", "ls", "--limit", "100", "--json"], {}, None),
    ("GET", "/memory/{entry_id}"): (["memory", "show", "2", "--json"], dict(path="/memory/2"), None),
    ("DELETE", "/memory/{entry_id}"): (["memory", "forget", "1", "--json"], dict(path="/memory/1"), None),
    ("POST", "/remember"): (["remember", "todo", "Renew the domain", "--project", "forge", "--json"],
                            dict(json={"kind": "todo", "content": "Renew the domain", "project": "forge"}), None),
    ("GET", "/history"): (["history", "-n", "4", "--json"], dict(params={"n": 4}), None),
    ("POST", "/history/import"): (["history", "import", "-", "--json"], dict(json={"messages": IMPORT}),
                                  json.dumps(IMPORT)),
    ("POST", "/compact"): (["compact", "--json"], dict(json={}), None),
    ("GET", "/context"): (["context", "--json"], {}, None),
    ("GET", "/drawer"): (["drawer", "--json"], {}, None),
    ("POST", "/drawer/pin"): (["pin", "3", "--json"], dict(json={"id": 3}), None),
    ("POST", "/drawer/unpin"): (["unpin", "2", "--json"], dict(json={"id": 2}), None),
    ("GET", "/traces"): (["trace", "tail", "-n", "1", "--json"], dict(params={"n": 1}), None),
    ("POST", "/chat"): (["chat", "Say hello", "--json"], dict(json={"message": "Say hello"}), None),
    ("PATCH", "/memory/{entry_id}"): (["memory", "edit", "2", "The NAS runs Debian 13", "--json"],
                                      dict(path="/memory/2", json={"content": "The NAS runs Debian 13"}), None),
    ("GET", "/memory/export"): (["memory", "export"], {}, None),
    ("GET", "/memory/conflicts"): (["memory", "conflicts", "--json"], {}, None),
    ("POST", "/memory/supersede"): (["memory", "supersede", "2", "--by", "4", "--json"],
                                    dict(json={"ids": [2], "by": 4}), None),
    ("POST", "/aggregate"): (["aggregate", "--apply", "--json"], dict(json={"apply": True}), None),
    ("POST", "/calibrate"): (["calibrate", "--hit", "Which OS does the NAS run?", "--expect", "2",
                              "--miss", "What is my dog's name?", "--json"],
                             dict(json={"hits": [{"question": "Which OS does the NAS run?", "expect": 2}],
                                        "misses": ["What is my dog's name?"]}), None),
}
# More pairs for the options of a route: (method, path), CLI arguments, request, stdin, and a
# CLI command run on the seed first (so both copies start from it).
MORE_TWINS = [
    (("GET", "/search"), ["recall", "NAS backup", "--kind", "fact", "--limit", "1", "--json"],
     dict(params={"q": "NAS backup", "kind": "fact", "limit": 1}), None, None),
    (("GET", "/search"), ["recall", "NAS", "--project", "forge", "--vector-k", "2", "--lexical-k", "0",
                          "--kind", "decision", "--json"],
     dict(params={"q": "NAS", "project": "forge", "vector_k": 2, "lexical_k": 0, "kind": "decision"}),
     None, None),
    (("GET", "/search"), ["recall", "NAS backup", "--limit", "3", "--no-neighbours", "--json"],
     dict(params={"q": "NAS backup", "limit": 3, "neighbours": "false"}), None, None),
    (("GET", "/memory"), ["memory", "ls", "fact", "--limit", "100", "--json"], dict(params={"kind": "fact"}), None, None),
    (("GET", "/memory"), ["memory", "ls", "--limit", "2", "--cursor", "3", "--filter", "nipogi", "--json"],
     dict(params={"limit": 2, "cursor": "3", "q": "nipogi"}), None, None),
    (("GET", "/memory/export"), ["memory", "export", "--kind", "fact", "--project", "homelab"],
     dict(params={"kind": "fact", "project": "homelab"}), None, None),
    (("PATCH", "/memory/{entry_id}"), ["memory", "edit", "3", "--kind", "decision", "--json"],
     dict(path="/memory/3", json={"kind": "decision"}), None, None),
    (("POST", "/aggregate"), ["aggregate", "--json"], dict(json={}), None, None),
    (("POST", "/remember"), ["remember", "fact", "The NAS runs Debian 13", "--replaces", "2", "--json"],
     dict(json={"kind": "fact", "content": "The NAS runs Debian 13", "replaces": [2]}), None, None),
    (("POST", "/remember"), ["remember", "fact", "The NAS runs Debian 13", "--json"],
     dict(json={"kind": "fact", "content": "The NAS runs Debian 13"}), None, None),
    (("POST", "/memory/supersede"), ["memory", "supersede", "--undo", "2", "--json"],
     dict(json={"ids": [2], "undo": True}), None, ["memory", "supersede", "2", "--by", "4"]),
    (("GET", "/memory/conflicts"), ["memory", "conflicts", "--kind", "fact", "--json"],
     dict(params={"kind": "fact"}), None, None),
    (("POST", "/aggregate"), ["aggregate", "--project", "homelab", "--json"],
     dict(json={"project": "homelab"}), None, None),
    (("POST", "/aggregate"), ["aggregate", "--undo", "9", "--json"], dict(json={"undo": 9}), None,
     ["aggregate", "--apply"]),
]
CASES = [(key, args, req, stdin, None) for key, (args, req, stdin) in TWINS.items()] + MORE_TWINS
JSONL = {("GET", "/memory/export")}
NO_TWIN = {("GET", "/"), ("GET", "/health"), ("GET", "/status"), ("GET", "/openapi.json")}


def app_routes(app) -> set[tuple[str, str]]:
    out = set()
    for route in app.routes:
        if isinstance(route, Route):
            out |= {(m, route.path) for m in route.methods if m != "HEAD"}
    return out


def test_every_route_has_a_cli_twin_or_is_named_as_having_none(settings):
    assert app_routes(create_app(settings)) == set(TWINS) | NO_TWIN


def parse(text: str, jsonl: bool):
    return [json.loads(line) for line in text.splitlines() if line.strip()] if jsonl else json.loads(text)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0][0]} {c[0][1]} {' '.join(c[1])}")
def test_each_route_answers_what_its_cli_twin_prints_on_the_same_store(
        case, tmp_path, runner, monkeypatch, chat_fake):
    key, args, req, stdin, before = case
    seed(tmp_path / "seed")
    # COMPACTION_KEEP_RECENT=2 so `compact` archives something on the seeded history
    env = {"COMPACTION_KEEP_RECENT": "2", "COMPACTION_THRESHOLD": "4"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    if before:
        monkeypatch.setenv("FORGE_DATA_DIR", str(tmp_path / "seed"))
        assert invoke(runner, *before).exit_code == 0
    cli_data, api_data = tmp_path / "cli", tmp_path / "api"
    shutil.copytree(tmp_path / "seed", cli_data)
    shutil.copytree(tmp_path / "seed", api_data)
    chat_fake.chat_reply("Hello there.", times=2)
    monkeypatch.setenv("FORGE_DATA_DIR", str(cli_data))
    result = invoke(runner, *args, input=stdin)
    assert result.exit_code == 0, result.stderr
    from_cli = parse(result.stdout, key in JSONL)
    client = client_for(FORGE_DATA_DIR=str(api_data), **env)
    response = client.request(key[0], req.get("path", key[1]), params=req.get("params"),
                              json=req.get("json"))
    assert response.status_code == 200, response.text
    assert normal(parse(response.text, key in JSONL)) == normal(from_cli)
    assert from_cli not in ({}, [])  # the seed gives every pair something to compare


def test_the_aggregate_twin_folds_and_a_calibration_over_http_writes_no_env_file(tmp_path):
    """The pairs above compare; this says what they compare is the real thing."""
    seed(tmp_path)
    client = client_for(FORGE_DATA_DIR=str(tmp_path))
    dry = client.post("/aggregate", json={}).json()
    assert dry["applied"] is False and dry["counts"]["written"] == 1 and dry["counts"]["absorbed"] == 1
    assert client.get("/memory/9").status_code == 404       # a dry run writes nothing
    applied = client.post("/aggregate", json={"apply": True}).json()
    assert [s["into"] for s in applied["subjects"] if s["outcome"] == "written"] == [9]
    assert client.get("/memory/6").json()["superseded_by"] == 9
    undone = client.post("/aggregate", json={"undo": 9}).json()
    assert undone == {"id": 9, "kind": "fact", "released": [6, 7, 8], "forgot": True}
    cases = {"hits": [{"question": "Which OS does the NAS run?", "expect": 2}],
             "misses": [{"question": "What is my dog's name?"}]}
    measured = client.post("/calibrate", json=cases).json()
    assert measured["hits"][0]["entry_id"] == 2 and measured["misses"][0]["question"].startswith("What")
    assert "written" not in measured
    refused = client.post("/calibrate", json={**cases, "write": True})
    assert refused.status_code == 400 and "forge calibrate --write" in refused.json()["error"]
    assert not (Path.cwd() / ".env").exists()


@pytest.mark.parametrize("method,url,body,status,reason", [
    ("GET", "/search?q=NAS&kind=bogus", None, 400, "unknown kind 'bogus'"),
    ("GET", "/search?q=NAS&limit=0", None, 400, "Invalid value for 'limit': 0 is not in the range 1<=x<=1000"),
    ("GET", "/search?q=NAS&limit=3&vector_k=2", None, 400, "not both"),
    ("GET", "/memory/export?kind=archive", None, 400, "unknown kind 'archive'"),
    ("PATCH", "/memory/2", {}, 400, 'give the new "content", or "kind", or both'),
    ("PATCH", "/memory/99", {"content": "x"}, 404, "no memory entry #99"),
    ("POST", "/aggregate", {"undo": 9, "apply": True}, 400, '"undo" takes no "apply" or "project"'),
    ("POST", "/aggregate", {"undo": "nine"}, 400, "Invalid value for 'undo': 'nine' is not an entry id"),
    ("POST", "/calibrate", {"hits": [], "misses": ["x"]}, 400, "calibrate needs at least one hit"),
    ("POST", "/calibrate", {"hits": [{"question": "x"}], "misses": ["y"]}, 400, "hit 1 needs"),
    ("POST", "/calibrate", {"hits": "x"}, 400, '"hits" must be a list'),
])
def test_the_new_routes_refuse_bad_input_with_one_line(tmp_path, method, url, body, status, reason):
    seed(tmp_path)
    response = client_for(FORGE_DATA_DIR=str(tmp_path)).request(method, url, json=body)
    assert response.status_code == status, response.text
    assert reason in response.json()["error"] and "\n" not in response.json()["error"]


# Routes that call a model (the chat server or the embedder) share the tighter budget. A route
# added later must be placed here or outside on purpose: the test compares the app's table.
MODEL_ROUTES = {("POST", "/chat"), ("POST", "/remember"), ("GET", "/search"), ("POST", "/compact"),
                ("POST", "/history/import"), ("POST", "/aggregate"), ("POST", "/calibrate"),
                ("PATCH", "/memory/{entry_id}")}


def test_the_routes_that_call_a_model_are_the_ones_with_the_tighter_budget(settings):
    routes = app_routes(create_app(settings))
    assert MODEL_ROUTES <= routes
    assert {(m, p) for m, p in routes if guard.calls_a_model(m, _concrete(p))} == MODEL_ROUTES


def test_openapi_document_lists_every_route_with_its_methods_and_the_bearer_scheme(settings):
    app = create_app(settings)
    doc = TestClient(app, base_url="http://127.0.0.1:8765").get("/openapi.json").json()
    assert doc["openapi"].startswith("3.")
    listed = {(m.upper(), p) for p, ops in doc["paths"].items() for m in ops}
    assert listed == app_routes(app) - {("GET", "/")}
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            assert op.get("summary") and op.get("responses"), f"{method} {path} undocumented"
    assert doc["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    assert doc["paths"]["/health"]["get"]["security"] == []
    search = {p["name"] for p in doc["paths"]["/search"]["get"]["parameters"]}
    assert search == {"q", "project", "vector_k", "lexical_k", "kind", "limit", "neighbours",
                      "since", "until", "time", "as_of"}
    assert "never written to .env" in doc["paths"]["/calibrate"]["post"]["description"]


# -- the token -------------------------------------------------------------------------------

def _concrete(path: str) -> str:
    return path.replace("{entry_id}", "1")


def test_with_api_token_every_route_but_health_and_the_page_shell_refuses_a_missing_or_wrong_token():
    # no rate limit here: three requests on each of the model routes exceed its default budget
    client = client_for(API_TOKEN=TOKEN, SERVE_RATE_LIMIT="0", SERVE_MODEL_RATE_LIMIT="0")
    public = set()
    for method, path in sorted(app_routes(client.app)):
        url = _concrete(path)
        missing = client.request(method, url)
        wrong = client.request(method, url, headers={"Authorization": "Bearer not-" + TOKEN})
        right = client.request(method, url, headers={"Authorization": f"Bearer {TOKEN}"})
        if missing.status_code != 401:
            public.add(path)
            continue
        assert wrong.status_code == 401 and missing.headers["www-authenticate"] == "Bearer"
        assert right.status_code != 401, (method, path, right.text)
    assert public == {"/", "/health"}
    # the static page assets hold no data and need no token; the shell holds no data either
    assert client.get("/static/app.js").status_code == 200
    assert "Forge" in client.get("/").text and "NAS" not in client.get("/").text


def test_without_a_token_loopback_is_open_and_other_binds_refuse(runner):
    assert client_for().get("/context").status_code == 200
    result = invoke(runner, "serve", "--host", "0.0.0.0")
    assert result.exit_code == 1
    assert "refusing to listen on 0.0.0.0 without API_TOKEN" in result.stderr
    guard.check_bind("0.0.0.0", TOKEN, ("forge.lan",))   # a token (and the names) allow it
    for host in ("127.0.0.1", "::1", "localhost"):
        guard.check_bind(host, None)


# -- rate limit, body cap, bad JSON, CORS, headers -------------------------------------------

def test_rate_limit_answers_429_with_retry_after_and_is_tighter_on_model_routes():
    client = client_for(SERVE_RATE_LIMIT="4", SERVE_MODEL_RATE_LIMIT="1")
    assert client.get("/search", params={"q": "x"}).status_code == 200
    limited = client.get("/search", params={"q": "x"})
    assert limited.status_code == 429 and 1 <= int(limited.headers["retry-after"]) <= 60
    assert "rate limit" in limited.json()["error"]
    for _ in range(3):   # other routes keep their budget (a refused request is not counted)
        assert client.get("/context").status_code == 200
    last = client.get("/context")
    assert last.status_code == 429 and last.headers["retry-after"]


def test_rate_limit_window_slides():
    now = [1000.0]
    limiter = guard.RateLimiter(2, 1, clock=lambda: now[0])
    assert limiter.retry_after("a", "/context") is None
    assert limiter.retry_after("a", "/context") is None
    assert limiter.retry_after("a", "/context") == 60
    assert limiter.retry_after("b", "/context") is None     # per client
    now[0] += 61
    assert limiter.retry_after("a", "/context") is None
    for n in range(1000):   # idle clients are forgotten, so the table stays bounded
        limiter.retry_after(f"client{n}", "/context")
    now[0] += 61
    for n in range(1000):
        limiter.retry_after("a", "/health")
    assert len(limiter.hits) < 10


def test_a_body_over_the_cap_is_413_and_writes_nothing(settings):
    client = client_for(SERVE_MAX_BODY="1024")
    big = {"kind": "fact", "content": "x" * 2000}
    response = client.post("/remember", json=big)
    assert response.status_code == 413 and "SERVE_MAX_BODY=1024" in response.json()["error"]
    # a chunked body with no Content-Length is counted as it arrives
    chunks = (json.dumps(big).encode()[i:i + 500] for i in range(0, 2100, 500))
    assert client.post("/remember", content=chunks,
                       headers={"content-type": "application/json"}).status_code == 413
    assert not settings.rag_db_file.exists() or client.get("/memory").json()["entries"] == []


@pytest.mark.parametrize("body,reason", [
    (b"{not json", "the request body is not JSON: "),
    (b"[1, 2]", "the request body must be a JSON object"),
    (b'{"kind": "fact"}', '"content" must be a non-empty string'),
    (b"\xff\xfe", "the request body is not UTF-8"),
])
def test_bad_json_is_a_400_with_one_line(body, reason):
    response = client_for().post("/remember", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error.startswith(reason) and "\n" not in error


def test_memory_comes_in_pages_with_a_total_a_cursor_and_a_filter(settings):
    with rag.open_store(settings) as store:
        rag.remember_many(store, [rag.NewEntry("fact", f"Paged fact {n:04d}" + (" about the NAS" if n % 10 == 0 else ""), None, "remember", None)
                                  for n in range(250)])
    client = client_for()
    first = client.get("/memory").json()
    assert set(first) == {"entries", "total", "next_cursor", "by_kind"}
    assert len(first["entries"]) == 100 and first["total"] == 250 and first["by_kind"] == {"fact": 250}
    seen, cursor = [e["id"] for e in first["entries"]], first["next_cursor"]
    while cursor:
        page = client.get("/memory", params={"cursor": cursor, "limit": 100}).json()
        seen += [e["id"] for e in page["entries"]]
        cursor = page["next_cursor"]
    assert len(seen) == len(set(seen)) == 250 and seen == sorted(seen)
    nas = client.get("/memory", params={"q": "the nas", "limit": 10}).json()
    assert nas["total"] == 25 and len(nas["entries"]) == 10 and nas["next_cursor"]
    assert all("NAS" in e["content"] for e in nas["entries"])
    assert len(client.get("/memory", params={"limit": 1000}).json()["entries"]) == 250
    for params, reason in [({"limit": 0}, "0 is not in the range 1<=x<=1000"),
                           ({"limit": 1001}, "1001 is not in the range 1<=x<=1000"),
                           ({"cursor": "abc"}, "cursor")]:
        r = client.get("/memory", params=params)
        assert r.status_code == 400 and reason in r.json()["error"], r.text
    # the export stays the whole store
    assert len(client.get("/memory/export").text.splitlines()) == 250


def test_unknown_id_is_404_and_bad_params_are_400():
    client = client_for()
    assert client.get("/memory/99").status_code == 404
    assert client.post("/drawer/pin", json={"id": 99}).status_code == 404
    assert client.get("/traces", params={"n": "many"}).status_code == 400
    assert client.get("/search").json()["error"] == "q is empty"


def test_cors_is_off_unless_configured():
    preflight = {"Origin": "http://elsewhere.example", "Access-Control-Request-Method": "GET"}
    off = client_for().options("/context", headers=preflight)
    assert "access-control-allow-origin" not in off.headers
    on = client_for(SERVE_CORS_ORIGINS="http://elsewhere.example").options("/context", headers=preflight)
    assert on.headers["access-control-allow-origin"] == "http://elsewhere.example"


def test_every_response_carries_the_content_security_policy():
    client = client_for()
    for url in ("/", "/context", "/static/app.js"):
        assert "script-src 'self'" in client.get(url).headers["content-security-policy"]


# -- the failure contract --------------------------------------------------------------------

def test_embedding_outage_is_502_naming_the_server_and_writes_nothing(settings):
    root = closed_url()
    client = client_for(EMBEDDING_URL=root + "/embedding")
    response = client.post("/remember", json={"content": "The NAS runs Debian"})
    assert response.status_code == 502 and response.json()["server"].startswith(root)
    assert root in response.json()["error"]
    assert client.get("/memory").json()["entries"] == []
    # A search on a store that has vectors needs the server: 502, and the store is unchanged.
    assert client_for().post("/remember", json={"content": "The NAS runs Debian"}).status_code == 200
    before = Path(settings.rag_db_file).read_bytes()
    search = client.get("/search", params={"q": "NAS"})
    assert search.status_code == 502 and root in search.json()["error"]
    assert [e["content"] for e in client.get("/memory").json()["entries"]] == ["The NAS runs Debian"]
    assert Path(settings.rag_db_file).read_bytes() == before


def test_chat_outage_is_502_and_the_turn_is_not_persisted(settings):
    client = client_for()
    response = client.post("/chat", json={"message": "Hello?"})
    assert response.status_code == 502 and "chat server" in response.json()["error"]
    streamed = client.post("/chat", json={"message": "Hello?", "stream": True})
    assert streamed.status_code == 502      # nothing was streamed yet: a plain status
    assert history.read(settings.memory_file).messages == []


def test_a_refusal_is_200_with_answered_false(chat_fake):
    chat_fake.chat_reply(envelope("memory", payload={"op": "recall", "query": "Quel matériel ai-je ?"}))
    response = client_for().post("/chat", json={"message": "Quel matériel ai-je ?"})
    assert response.status_code == 200
    body = response.json()
    assert body["answered"] is False and body["not_answered"] == "recall_nothing_found"
    assert body["reply"] == non_answer.NOTHING_FOUND


def test_nothing_found_by_search_is_200_with_no_rows():
    response = client_for().get("/search", params={"q": "anything at all"})
    assert response.status_code == 200 and response.json()["rows"] == []


def test_chat_streams_server_sent_events_then_done(chat_fake, settings):
    chat_fake.chat_reply("Hello from the model, streamed in pieces.")
    with client_for().stream("POST", "/chat", json={"message": "Say hello", "stream": True}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        text = "".join(r.iter_text())
    events = [block.split("\n") for block in text.strip().split("\n\n")]
    names = [lines[0].removeprefix("event: ") for lines in events]
    assert names[-1] == "done" and names.count("token") >= 2
    tokens = "".join(json.loads(lines[1][6:])["text"] for lines in events if lines[0] == "event: token")
    done = json.loads(events[-1][1][6:])
    assert tokens == done["reply"] == "Hello from the model, streamed in pieces."
    assert done["answered"] is True and len(history.read(settings.memory_file).messages) == 2


# -- the stores are shared with the CLI through the same locks -------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


FORGE = str(Path(sys.executable).parent / "forge")  # this interpreter's own script


def start_server(env: dict[str, str], cwd: Path, port: int) -> subprocess.Popen:
    proc = subprocess.Popen([FORGE, "serve", "--port", str(port)],
                            env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"forge serve exited: {proc.stdout.read().decode()}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise AssertionError("forge serve did not answer /health within 30 s")


def test_cron_compaction_racing_the_server_loses_nothing(forge_env, tmp_path):
    env = {**os.environ, "COMPACTION_THRESHOLD": "4", "COMPACTION_KEEP_RECENT": "2",
           "MEMORY_MAX_HISTORY": "1000", "SERVE_RATE_LIMIT": "0", "SERVE_MODEL_RATE_LIMIT": "0"}
    port = free_port()
    server = start_server(env, Path.cwd(), port)
    sent: list[str] = []
    errors: list[str] = []

    def write_through_the_server() -> None:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as http:
            for n in range(40):
                pair = [{"role": "user", "content": f"question number {n}"},
                        {"role": "assistant", "content": f"answer number {n}"}]
                r = http.post("/history/import", json={"messages": pair})
                if r.status_code != 200:
                    errors.append(r.text)
                else:
                    sent.extend(m["content"] for m in pair)

    try:
        writer = threading.Thread(target=write_through_the_server)
        writer.start()
        compactions = 0
        while writer.is_alive():
            cron = subprocess.run([FORGE, "compact", "--json"], env=env,
                                  capture_output=True, text=True, timeout=120)
            assert cron.returncode == 0, cron.stderr
            compactions += bool(json.loads(cron.stdout)["removed_ids"]) if cron.stdout.strip() else 0
        writer.join()
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert not errors and len(sent) == 80
    settings = load_settings(env)
    kept = " ".join(m.content for m in history.read(settings.memory_file).messages)
    with rag.open_store(settings) as store:
        archived = " ".join(e.content for e in rag.list_entries(store, kind="archive"))
    lost = [text for text in sent if text not in kept and text not in archived]
    assert compactions >= 1 and not lost


def test_the_systemd_unit_serves_on_loopback_with_the_token_from_an_environment_file(runner):
    unit = (Path(__file__).resolve().parent.parent / "deploy" / "forge-serve.service").read_text()
    lines = dict(line.split("=", 1) for line in unit.splitlines() if "=" in line and not line.startswith("#"))
    assert lines["EnvironmentFile"].startswith("/")
    command = lines["ExecStart"].split()
    assert command[1:3] == ["serve", "--host"] and guard.is_loopback(command[3])
    # the options it uses are the command's own
    assert invoke(runner, *command[1:], "--help").exit_code == 0


def test_a_chat_stream_that_dies_midway_ends_with_an_error_event_and_persists_nothing(chat_fake, settings):
    chat_fake.stream_dies(after=2)
    with client_for().stream("POST", "/chat", json={"message": "Tell me a story", "stream": True}) as r:
        assert r.status_code == 200     # tokens were sent: the failure comes as the last event
        text = "".join(r.iter_text())
    last = text.strip().split("\n\n")[-1].split("\n")
    assert last[0] == "event: error"
    error = json.loads(last[1][6:])
    assert error["status"] == 502 and error["server"].startswith(chat_fake.url)
    assert history.read(settings.memory_file).messages == []
    assert traces.tail(settings.trace_file, 1)[-1]["ok"] is False


def test_concurrent_writes_through_the_server_all_land(forge_env):
    env = {**os.environ, "SERVE_RATE_LIMIT": "0", "SERVE_MODEL_RATE_LIMIT": "0"}
    port = free_port()
    server = start_server(env, Path.cwd(), port)
    results: list[int] = []

    def remember(n: int) -> None:
        r = httpx.post(f"http://127.0.0.1:{port}/remember", timeout=120,
                       json={"kind": "fact", "content": f"concurrent fact number {n}"})
        results.append(r.status_code)

    try:
        workers = [threading.Thread(target=remember, args=(n,)) for n in range(8)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert results == [200] * 8
    with rag.open_store(load_settings(env)) as store:
        assert sorted(e.content for e in rag.list_entries(store)) == sorted(
            f"concurrent fact number {n}" for n in range(8))
