"""`forge trace tail` on a 1 GB trace file: tail reads from the end, so it should not care.

    python bench/trace_tail.py [--path /tmp/forge-bench-traces.jsonl] [--size-mb 1024]

Writes the file once (kept for the next run), then times `traces.tail(path, 10)` in-process and
the real `forge trace tail -n 10` command in a fresh process.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from forge.store import traces
import docs_figures


def build(path: Path, size: int) -> None:
    if path.exists() and path.stat().st_size >= size:
        return
    line = json.dumps({"run_id": "bench", "timestamp": "2026-11-29T00:00:00Z",
                       "user_input_preview": "x" * 120, "steps": [{"tool": "chat", "duration_ms": 1}],
                       "total_ms": 12.5, "ok": True, "not_answered": None, "error": None,
                       "llm": {"calls": 1, "prompt_n": 512, "predicted_n": 64, "prompt_ms": 80.0,
                               "predicted_ms": 400.0, "cache_n": 400, "models": ["gemma"]}})
    chunk = ((line + "\n") * 2000).encode()
    with open(path, "wb") as fh:
        written = 0
        while written < size:
            fh.write(chunk)
            written += len(chunk)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", type=Path, default=Path("/tmp/forge-bench-traces.jsonl"))
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--write-docs", action="store_true", help=docs_figures.HELP)
    args = parser.parse_args()
    with docs_figures.tee("trace_tail", args.write_docs):
        t = time.perf_counter()
        build(args.path, args.size_mb * 1024 * 1024)
        print(f"file: {args.path} {args.path.stat().st_size / 1e9:.2f} GB (ready in {time.perf_counter() - t:.1f}s)")
        inproc = []
        for _ in range(args.runs):
            t = time.perf_counter()
            assert len(traces.tail(args.path, 10)) == 10
            inproc.append((time.perf_counter() - t) * 1000)
        env = {**os.environ, "TRACE_FILE": str(args.path)}
        cmd = [sys.executable, "-m", "forge", "trace", "tail", "-n", "10", "--nl"]
        proc, base = [], []
        for _ in range(args.runs):  # interleaved with the baseline, so both see the same machine
            t = time.perf_counter()
            subprocess.run(cmd, env=env, capture_output=True, check=True)
            proc.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            subprocess.run([sys.executable, "-c", "import click"], capture_output=True, check=True)
            base.append((time.perf_counter() - t) * 1000)
        print(f"traces.tail(n=10) in-process: median {statistics.median(inproc):.2f} ms")
        print(f"forge trace tail -n 10 (fresh process): median {statistics.median(proc):.1f} ms, "
              f"{statistics.median(proc) / statistics.median(base):.2f}x python -c \"import click\" "
              f"({statistics.median(base):.1f} ms in this run; target <= 1.5x)")


if __name__ == "__main__":
    main()
