"""What printing a table costs a fresh process: tabulate's import, as a ratio to `import click`.

    python bench/table_import.py [--runs 21] [--write-docs]

Each figure is the median of `--runs` fresh processes, interleaved. tabulate 0.10 reads its own
version through `importlib.metadata` at import; the third row times that import alone, beside
click (docs/tables-and-dotenv.md).
"""
from __future__ import annotations

import argparse
import statistics
import sys

import harness
import docs_figures

COMMANDS = {
    'python -c "import click"': "import click",
    'python -c "import click, tabulate"': "import click, tabulate",
    'python -c "import click, importlib.metadata"': "import click, importlib.metadata",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--write-docs", action="store_true", help=docs_figures.HELP)
    args = parser.parse_args()
    times = harness.interleaved({name: ([sys.executable, "-c", code], {})
                                 for name, code in COMMANDS.items()}, args.runs, warm=False)
    import tabulate

    base = statistics.median(times[harness.CLICK])
    with docs_figures.tee("table_import", args.write_docs):
        print(f"{'command':46} {'median ms':>9}  x import click")
        for name, values in times.items():
            median = statistics.median(values)
            print(f"{name:46} {median:9.1f}  {median / base:13.2f}")
        print(f"\n{args.runs} runs each, interleaved; tabulate {tabulate.__version__}")


if __name__ == "__main__":
    main()
