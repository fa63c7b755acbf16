"""Put benchmark output into the README's performance section, verbatim.

    python bench/process_latency.py /tmp/s10k > /tmp/process.txt
    python tools/readme_perf.py --write README.md process_latency=/tmp/process.txt ...

The README holds one block per benchmark between `<!-- bench: NAME -->` and `<!-- /bench -->`;
each NAME=FILE replaces its block's body with a console block of FILE's text (the command line
that produced it first). Blocks not named are left as they are, so one benchmark can be re-run
alone. `--check` exits 1 when a named block differs from its file.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

COMMANDS = {
    "process_latency": "python bench/process_latency.py /tmp/s10k --runs 9",
    "recall_latency": "OPENBLAS_NUM_THREADS=1 python bench/recall_latency.py --sizes 10000,100000 "
                      "--keep /tmp/ws/keep100k --reuse",
    "recall_latency_1m": "OPENBLAS_NUM_THREADS=1 python bench/recall_latency.py --sizes 1000000 "
                         "--keep /tmp/ws/keep1m --reuse",
    "recall_latency_small": "OPENBLAS_NUM_THREADS=1 python bench/recall_latency.py --sizes 2000,10000 "
                            "--scan-min 1",
    "knn_options": "OPENBLAS_NUM_THREADS=1 python bench/knn_options.py --size 100000 --real 600",
    "locomo_store": "python bench/locomo_store.py /tmp/s300 --count 300 --share",
    "startup": "python bench/startup.py",
}


def render(name: str, text: str) -> str:
    command = COMMANDS.get(name, f"python bench/{name}.py")
    return f"```console\n$ {command}\n{text.rstrip()}\n```"


def replace_block(readme: str, name: str, body: str) -> str:
    # The body never holds another block's opening tag, so an empty block cannot swallow the
    # next one.
    pattern = re.compile(rf"(<!-- bench: {re.escape(name)} -->\n)(?:(?!<!-- bench:).)*?"
                         r"(<!-- /bench -->)", re.S)
    if not pattern.search(readme):
        raise SystemExit(f"README has no <!-- bench: {name} --> block")
    return pattern.sub(lambda m: m.group(1) + body + "\n" + m.group(2), readme, count=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", type=Path, required=True, help="the README to update")
    parser.add_argument("--check", action="store_true")
    parser.add_argument("outputs", nargs="+", metavar="NAME=FILE")
    args = parser.parse_args()
    readme = args.write.read_text(encoding="utf-8")
    updated = readme
    for item in args.outputs:
        name, _, file = item.partition("=")
        updated = replace_block(updated, name, render(name, Path(file).read_text(encoding="utf-8")))
    if args.check:
        sys.exit(0 if updated == readme else 1)
    args.write.write_text(updated, encoding="utf-8")


if __name__ == "__main__":
    main()
