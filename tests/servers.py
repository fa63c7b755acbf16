"""pytest plugin: real llama-server fixtures, the fake server fixture, and a `llama` test summary.

`llama_chat_server` and `llama_embedding_server` start real servers once per session through
`tools/llama_server.py` (the same code as `tools/llama-server`), and stop them at the end even
when tests fail (fixture finalizer; `start()` also registers an atexit stop by pid for an
interrupted run). Where no llama-server can be had the tests that use them are skipped with a
reason saying how to get one; with `FORGE_REQUIRE_LLAMA=1` (set by `.ci/run`) that is a failure.
"""
from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
from pathlib import Path
from typing import Iterator

import pytest

from fakeserver import FakeServer
from marker_tally import MarkerTally

TOOLS = Path(__file__).resolve().parent.parent / "tools"
THREADS = 1  # two servers plus the embedded embedder share 2 cores in CI


def llama_server_module():
    """tools/llama_server.py, imported by path (tools/ is not a package)."""
    name = "llama_server"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, TOOLS / "llama_server.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # before exec: dataclasses look their module up
        spec.loader.exec_module(module)
    return sys.modules[name]


def _required() -> bool:
    return os.environ.get("FORGE_REQUIRE_LLAMA", "").strip() in ("1", "true", "yes")


def _unavailable(reason: str):
    if _required():
        pytest.fail(f"FORGE_REQUIRE_LLAMA=1 but {reason}", pytrace=False)
    pytest.skip(reason)


def llama_paths():
    """The installed llama-server and model, or skip (fail under FORGE_REQUIRE_LLAMA=1) saying
    how to install them."""
    ls = llama_server_module()
    try:
        return ls.require()
    except ls.LlamaServerError as exc:
        _unavailable(str(exc))


_STARTED: list = []  # servers started this session, for the summary


@contextlib.contextmanager
def running_llama_server(kind: str, log_dir: Path, **start_options) -> Iterator:
    """Start a real llama-server for the duration of a `with` block (skip/fail when impossible).

    The session fixtures use it; a test that needs other flags (e.g. a smaller batch) can too,
    with `extra_args=[...]` or `ctx=N`.
    """
    ls = llama_server_module()
    paths = llama_paths()
    options = {"threads": THREADS, **start_options}
    try:
        server = ls.start(kind, paths=paths, log_dir=log_dir, **options)
    except ls.LlamaServerError as exc:
        _unavailable(f"llama-server ({kind}) did not start: {exc}")
    _STARTED.append(server)
    try:
        yield server
    finally:
        ls.stop(server)


def _serve(kind: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    with running_llama_server(kind, tmp_path_factory.mktemp(f"llama-{kind}")) as server:
        yield server


@pytest.fixture(scope="session")
def llama_chat_server(tmp_path_factory: pytest.TempPathFactory):
    """A real llama-server chat server (one slot): `.url`, `.model_path`, `.pid`."""
    yield from _serve("chat", tmp_path_factory)


@pytest.fixture(scope="session")
def llama_embedding_server(tmp_path_factory: pytest.TempPathFactory):
    """A real llama-server embedding server (`--embeddings --pooling last --embd-normalize 2`)."""
    yield from _serve("embedding", tmp_path_factory)


@pytest.fixture
def fake_server() -> Iterator[FakeServer]:
    """A fresh scriptable fake llama-server on a loopback port (see tests/fakeserver.py)."""
    with FakeServer() as server:
        yield server


# -- how many `llama` tests ran: printed at the end of every session that selected some

_TALLY = MarkerTally("llama")


def pytest_collection_finish(session) -> None:
    _TALLY.collected(session)


def pytest_runtest_logreport(report) -> None:
    _TALLY.report(report)


def pytest_terminal_summary(terminalreporter) -> None:
    line = _TALLY.summary("llama-server")
    if line is None or terminalreporter.config.option.collectonly:
        return
    terminalreporter.write_line(line)
    for server in _STARTED:
        terminalreporter.write_line(
            f"  {server.kind} server {server.url} (pid {server.pid}) started in "
            f"{server.start_seconds:.1f} s; log {server.log_path}")
