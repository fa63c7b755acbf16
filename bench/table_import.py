"""What printing a table costs a fresh process: tabulate's import, as a ratio to `import click`.

    python bench/table_import.py [--runs 21]

Each figure is the median of `--runs` fresh processes, interleaved (one of each per round), with
its ratio to `python -c "import click"` measured in the same run. tabulate 0.10 reads its own
version through `importlib.metadata` at import (which imports `email`, `zipfile`, `csv`... and
scans the installed distributions); the third row times that import alone, beside click, so the
figure says what a table costs with tabulate 0.10 on this machine (docs/tables-and-dotenv.md).
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

COMMANDS = {
    'python -c "import click"': "import click",
    'python -c "import click, tabulate"': "import click, tabulate",
    'python -c "import click, importlib.metadata"': "import click, importlib.metadata",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import docs_figures

    parser.add_argument("--write-docs", action="store_true", help=docs_figures.HELP)
    args = parser.parse_args()
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for _ in range(args.runs):
        for name, code in COMMANDS.items():
            start = time.perf_counter()
            subprocess.run([sys.executable, "-c", code], check=True)
            times[name].append((time.perf_counter() - start) * 1000)
    import tabulate

    base = statistics.median(times['python -c "import click"'])
    with docs_figures.tee("table_import", args.write_docs):
        print(f"{'command':46} {'median ms':>9}  x import click")
        for name, values in times.items():
            median = statistics.median(values)
            print(f"{name:46} {median:9.1f}  {median / base:13.2f}")
        print(f"\n{args.runs} runs each, interleaved; tabulate {tabulate.__version__}")


if __name__ == "__main__":
    main()
