"""What printing a table costs a fresh process: tabulate's import, as a ratio to `import click`.

    python bench/table_import.py [--runs 21] [--write-docs]

Medians of `--runs` fresh processes, interleaved; the third row times `importlib.metadata`
alone (tabulate 0.10 reads its own version through it at import).
"""
from __future__ import annotations

import argparse
import statistics
import sys

import harness
import docs_figures

IMPORTS = ("click", "click, tabulate", "click, importlib.metadata")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--write-docs", action="store_true", help=docs_figures.HELP)
    args = parser.parse_args()
    commands = {f'python -c "import {m}"': ([sys.executable, "-c", f"import {m}"], {})
                for m in IMPORTS}
    times = harness.interleaved(commands, args.runs, warm=False)
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
