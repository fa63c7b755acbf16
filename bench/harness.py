"""What the bench scripts share: the checkout on sys.path, scratch settings, fresh processes
timed against an in-run baseline, the small chat server, and a harness on the user's store: the
snapshot it opens instead of the store (`--db PATH`, default RAG_DB_FILE), its table or JSON.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator, Sequence

import docs_figures
import store_snapshot  # noqa: F401  (puts the checkout on sys.path)

ROOT = store_snapshot.ROOT
if str(ROOT / "tests") not in sys.path:
    sys.path.append(str(ROOT / "tests"))   # tests/fixtures, the scripted chat server
CLICK = 'python -c "import click"'   # the in-run baseline of every fresh-process figure


def data_settings(folder: Path | str, **env: str) -> Any:
    """The settings of a scratch data folder (FORGE_DATA_DIR=folder), `env` on top."""
    from forge.core.settings import load_settings

    return load_settings({"FORGE_DATA_DIR": str(folder), **env}, cwd=Path(folder))


def interleaved(commands: dict[str, tuple[list[str], dict]], runs: int, *,
                cwd: Path | str | None = None, warm: bool = True,
                env: dict | None = None) -> dict[str, list[float]]:
    """Each command (argv, variables added to `env`, default os.environ) in a fresh process
    `runs` times, one of each per round so a busy machine weighs on all alike: {name: [ms, ...]}.
    `warm`: one untimed run of each first (the OS file cache)."""
    def one(argv: list[str], extra: dict) -> float:
        started = time.perf_counter()
        done = subprocess.run(argv, env={**(os.environ if env is None else env), **extra},
                              cwd=cwd, capture_output=True)
        if done.returncode:
            raise SystemExit(f"{' '.join(argv)}: {done.stderr.decode()[-500:]}")
        return (time.perf_counter() - started) * 1000

    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(runs + int(warm)):
        for name, (argv, extra) in commands.items():
            times[name].append(one(argv, extra))
    return {name: found[int(warm):] for name, found in times.items()}


@contextlib.contextmanager
def chat_server(url: str | None) -> Iterator[str]:
    """`url`, or the small chat model started through tools/llama_server.py (one slot) for
    the block and stopped after it."""
    if url:
        yield url
        return
    sys.path.insert(0, str(ROOT / "tools"))
    import llama_server as ls

    server = ls.start("chat", threads=1)
    try:
        yield server.url
    finally:
        ls.stop(server)


def snapshot_store(args: argparse.Namespace, *, readonly: bool = True) -> Any:
    """A Store on a fresh snapshot of `--db` (default: the configured store)."""
    from forge.core.settings import load_settings

    return store_snapshot.open_snapshot(args.db, load_settings(), readonly=readonly)


def output(args: argparse.Namespace, document: dict, rows: Sequence[dict], columns: Sequence[str],
           lines: Sequence[str] = ()) -> None:
    """Print the table (or the JSON document); with `--write-docs`, also into
    docs/bench/SCRIPT.txt, headed by the command line."""
    from tabulate import tabulate

    def cell(v: Any) -> Any:
        if v is None:
            return ""
        if isinstance(v, float):
            return f"{v:.4f}"
        if isinstance(v, (list, tuple)):
            return ",".join(map(str, v))
        return v

    with docs_figures.tee(Path(sys.argv[0]).stem, getattr(args, "write_docs", False)):
        if args.json:
            print(json.dumps(document, ensure_ascii=False, indent=2, default=str))
            return
        print(tabulate([[cell(r.get(c)) for c in columns] for r in rows], headers=list(columns),
                       tablefmt="simple", disable_numparse=True, maxcolwidths=[60] * len(columns)))
        for line in lines:
            print(line)


def fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 1


def run(main: Any) -> None:
    """Call `main()`; a Forge error or a refused live store is one line and exit 1."""
    from forge.core.errors import ForgeError

    try:
        sys.exit(main())
    except (ForgeError, store_snapshot.LiveStoreRefused, FileNotFoundError) as e:
        sys.exit(fail(str(e)))
