"""Shared fixtures. Every test gets its own data folder and a clean Forge environment."""
from __future__ import annotations

import contextlib
import os
import signal
import sys
from pathlib import Path

import pytest

# A test suite started with Ctrl-C ignored (`nohup tools/test &`, a cron line) would hand that to
# every child: a `forge` that ignores SIGINT never stops, and the tests that press Ctrl-C on one
# wait for nothing. A handler, unlike SIG_IGN, is not inherited across exec.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

pytest_plugins = [
    "servers",       # real llama-server fixtures and the fake server
    "postgres_server",  # a real PostgreSQL with pgvector: postgres_server, postgres_url
    "chat_helpers",  # chat_fake: a fake chat server wired into LLAMA_CPP_URL
]

FORGE_VARS = (
    "FORGE_DATA_DIR", "MEMORY_FILE", "RAG_DB_FILE", "FORGE_DATABASE_URL", "TRACE_FILE", "MEMORY_MAX_HISTORY",
    "COMPACTION_THRESHOLD", "COMPACTION_KEEP_RECENT", "COMPACTION_TOKEN_THRESHOLD",
    "COMPACTION_TOKEN_TARGET", "COMPACTION_STRATEGY", "COMPACTION_AGGREGATE",
    "COMPACTION_AGGREGATE_MIN_SOURCES", "EMBEDDING_URL", "EMBEDDING_DIM",
    "EMBEDDING_QUERY_INSTRUCT", "RECALL_MAX_DISTANCE", "RECALL_LEXICAL_MAX_DF", "RECALL_SPARSE", "RECALL_SENTENCE",
    "RECALL_HOT_MAX_TOKENS", "RECALL_SCAN_MIN_ENTRIES", "LLAMA_CPP_URL", "LLAMA_CPP_ID_SLOT", "ENABLED_TOOLS", "MAX_STEPS",
    "API_TOKEN", "FORGE_WORKSPACE", "FORGE_SHELL_AUTO", "FORGE_DEBUG", "LLAMA_CPP_TIMEOUT",
    "EMBEDDING_TIMEOUT", "WEB_FETCH_ALLOW_HOSTS", "WEB_FETCH_ALLOW_PRIVATE", "WEB_FETCH_TIMEOUT",
    "WEB_FETCH_MAX_BYTES", "WEB_FETCH_MAX_TOKENS", "SYSADMIN_INVENTORY", "SYSADMIN_TIMEOUT",
    "SYSADMIN_MAX_BYTES", "DELEGATE_URL",
    "EMBEDDING_TIMEOUT", "SERVE_RATE_LIMIT", "SERVE_MODEL_RATE_LIMIT", "SERVE_MAX_BODY",
    "SERVE_CORS_ORIGINS", "SERVE_ALLOWED_HOSTS", "SERVE_TRUSTED_PROXIES",
    "FORGE_SECRET_FILES", "FORGE_READ_SECRETS", "FORGE_NOW", "FORGE_KEEP_SECRETS",
    "EMBEDDING_TIMEOUT",
)


@pytest.fixture(autouse=True)
def forge_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run every test in an empty working directory with its own data folder.

    No chat server is configured by default: LLAMA_CPP_URL points at a closed loopback port so
    a test that forgets to start one fails fast instead of reaching a developer's own server.
    """
    for name in FORGE_VARS:
        monkeypatch.delenv(name, raising=False)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("FORGE_DATA_DIR", str(work / "data"))
    monkeypatch.setenv("LLAMA_CPP_URL", "http://127.0.0.1:9")
    # The real `forge` script of this interpreter's environment, even when the venv is not
    # activated (`.venv/bin/pytest`): pytest-console-scripts looks it up on PATH.
    monkeypatch.setenv("PATH", os.pathsep.join([str(Path(sys.executable).parent),
                                                os.environ.get("PATH", "")]))
    return work / "data"


@pytest.fixture(scope="session")
def built_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The 52-entry store of fixtures/memory_entries.json, embedded once per session; tests
    take a private copy (`fixtures.memory_entries.copy_store`)."""
    from fixtures.memory_entries import build_store

    return build_store(tmp_path_factory.mktemp("built-store"))


def opened_copy(built_store: Path, settings):
    """An open store holding a private copy of `built_store` (a fixture's body)."""
    from fixtures.memory_entries import copy_store
    from forge.store import rag

    copy_store(built_store, settings.rag_db_file)
    with rag.open_store(settings) as s:
        yield s


@pytest.fixture
def store(built_store: Path, settings):
    """An open store holding a private copy of `built_store`."""
    yield from opened_copy(built_store, settings)


@contextlib.contextmanager
def local_zone(name: str):
    """The process's local zone (TZ, as a user's shell sets it)."""
    import time

    old = os.environ.get("TZ")
    os.environ["TZ"] = name
    time.tzset()
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = old
        time.tzset()


@pytest.fixture
def settings(forge_env: Path):
    from forge.core.settings import load_settings

    return load_settings()


BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture(params=BACKENDS)
def backend(request, monkeypatch) -> str:
    """A test that asks for it runs on each backend: "sqlite", then "postgres" (the `postgres`
    marker; FORGE_DATABASE_URL set to the session's server). A module may define its own."""
    if request.param == "postgres":
        monkeypatch.setenv("FORGE_DATABASE_URL", request.getfixturevalue("postgres_url"))
    return request.param


def kill_when_paused(proc, point: str) -> None:
    """A real process started with FORGE_TEST_PAUSE_AT=`point`: wait until it says it paused
    there (inside its transaction), then kill -9 it; it must die of that signal."""
    import signal

    try:
        line = proc.stderr.readline()
        assert line.strip() == f"paused at {point}", line
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL


@pytest.fixture
def runner():
    from click.testing import CliRunner

    return CliRunner()


def command_paths() -> list[list[str]]:
    """Every command as typed: `forge NAME`, and `forge GROUP SUB` for each group's commands."""
    import click

    from forge.cli.main import cli

    paths = []
    ctx = click.Context(cli)
    for name in cli.list_commands(ctx):
        cmd = cli.get_command(ctx, name)
        paths.append([name])
        if isinstance(cmd, click.Group):
            paths += [[name, sub] for sub in cmd.list_commands(ctx)]
    return paths


def invoke(runner, *args: str, input: str | None = None, env: dict | None = None):
    """Invoke the real CLI in-process; stdout and stderr kept apart."""
    from forge.cli.main import cli

    return runner.invoke(cli, list(args), input=input, env=env, catch_exceptions=False)


@pytest.fixture
def tz_paris(monkeypatch):
    """The process's local zone is Europe/Paris (TZ honoured, as for a user's shell)."""
    import time

    monkeypatch.setenv("TZ", "Europe/Paris")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()
