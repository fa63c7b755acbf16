"""pytest plugin: a real PostgreSQL with pgvector for the tests, and a `postgres` test summary.

`postgres_server` (session) starts one real server through `tools/postgres_server.py` (the same
code as `tools/postgres`) in a temporary folder, listening on 127.0.0.1 at a free port with a
password, and stops it by its pid at the end even when tests fail (fixture finalizer, plus an
atexit stop for an interrupted run). `postgres_url` gives each test a fresh, empty database on it
(dropped afterwards) as `postgresql://postgres:PASSWORD@127.0.0.1:PORT/forge_test_N`: nothing is
created in it, not even the `vector` extension (the backend must do that, as on a user's server).

Where PostgreSQL or the driver (psycopg) cannot be had, the tests that use these fixtures are
skipped with a reason saying how to get them; with `FORGE_REQUIRE_POSTGRES=1` (set by `.ci/run`)
that is a failure. Every test that uses them is marked `postgres` (`-m postgres` selects them).
"""
from __future__ import annotations

import importlib.util
import itertools
import os
import sys
from pathlib import Path
from typing import Iterator

import pytest

from marker_tally import MarkerTally

TOOLS = Path(__file__).resolve().parent.parent / "tools"
FIXTURES = ("postgres_server", "postgres_url")


def postgres_server_module():
    """tools/postgres_server.py, imported by path (tools/ is not a package)."""
    name = "postgres_server_tool"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, TOOLS / "postgres_server.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # before exec: dataclasses look their module up
        spec.loader.exec_module(module)
    return sys.modules[name]


def postgres_required() -> bool:
    return os.environ.get("FORGE_REQUIRE_POSTGRES", "").strip() in ("1", "true", "yes")


def _unavailable(reason: str):
    if postgres_required():
        pytest.fail(f"FORGE_REQUIRE_POSTGRES=1 but {reason}", pytrace=False)
    pytest.skip(reason)


def connect(url: str):
    """A psycopg connection in autocommit mode (the fixtures' own admin work)."""
    import psycopg

    return psycopg.connect(url, autocommit=True, connect_timeout=10)


_STARTED: list = []  # servers started this session, for the summary


@pytest.fixture(scope="session")
def postgres_server() -> Iterator:
    """A real PostgreSQL 18 with pgvector: `.url` (its `postgres` database), `.database_url(name)`,
    `.password`, `.port`, `.pid`, `.dir`, `.log_path`. Shared by the session: tests that write
    should use `postgres_url` (their own database) instead."""
    if importlib.util.find_spec("psycopg") is None:
        _unavailable("the PostgreSQL driver is not installed (pip install -e '.[test]' or '.[postgres]')")
    ps = postgres_server_module()
    try:
        bin_dir = ps.require()
        server = ps.start(bin_dir=bin_dir, fsync=False)
    except ps.PostgresError as exc:
        _unavailable(f"PostgreSQL did not start: {exc}")
    _STARTED.append(server)
    try:
        yield server
    finally:
        ps.stop(server)
        ps.remove(server.dir)


_NAMES = itertools.count(1)


@pytest.fixture
def postgres_url(postgres_server) -> Iterator[str]:
    """A fresh, empty database on the session's server, for this test only (dropped after it)."""
    name = f"forge_test_{os.getpid()}_{next(_NAMES)}"
    with connect(postgres_server.url) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield postgres_server.database_url(name)
    finally:
        with connect(postgres_server.url) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# -- how many `postgres` tests ran: printed at the end of every session that selected some

_TALLY = MarkerTally("postgres")


def pytest_configure(config) -> None:
    config.addinivalue_line(
        "markers", "postgres: needs a real PostgreSQL (started by the session fixture; skipped "
        "with a reason when none can be had, a failure under FORGE_REQUIRE_POSTGRES=1)")


def pytest_collection_modifyitems(config, items) -> None:
    for item in items:
        if any(name in getattr(item, "fixturenames", ()) for name in FIXTURES):
            item.add_marker(pytest.mark.postgres)


def pytest_collection_finish(session) -> None:
    _TALLY.collected(session)


def pytest_runtest_logreport(report) -> None:
    _TALLY.report(report)


def pytest_terminal_summary(terminalreporter) -> None:
    line = _TALLY.summary("postgres")
    if line is None or terminalreporter.config.option.collectonly:
        return
    terminalreporter.write_line(line)
    for server in _STARTED:
        terminalreporter.write_line(
            f"  PostgreSQL on 127.0.0.1:{server.port} (pid {server.pid}) started in "
            f"{server.start_seconds:.1f} s")
