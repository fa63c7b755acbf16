#!/usr/bin/env python3
"""Memory of reading a ChatGPT export as a stream: the peak of Python allocations (tracemalloc)
during `forge history import`'s validation pass over generated exports of growing size, zipped
as the service ships them. Nothing is embedded or written: this is the reading alone.

The in-run baseline is `json.load` of the same conversations.json (what a reader that is not a
stream needs): a streamed read must stay flat as the file grows, the whole-file read must grow
with it.

    python bench/export_stream.py [--sizes 200,1000,4000] [--write-docs]
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import docs_figures  # noqa: E402
from export_import import build  # noqa: E402


def peak(fn) -> tuple[float, float]:
    """(peak MB of Python allocations, seconds) of fn()."""
    tracemalloc.start()
    started = time.perf_counter()
    fn()
    seconds = time.perf_counter() - started
    top = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return top, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="200,1000,4000",
                        help="conversations per export (10 kept exchanges each)")
    parser.add_argument("--write-docs", action="store_true", help=docs_figures.HELP)
    args = parser.parse_args()
    from forge.memory.export_import import ExportReport, _validate

    with docs_figures.tee("export_stream", args.write_docs):
        print("conversations  messages  conversations.json  streamed peak  json.load peak  "
              "streamed s")
        for n in (int(x) for x in args.sizes.split(",")):
            with tempfile.TemporaryDirectory() as tmp:
                export, _, size = build(Path(tmp), n, 10, 0)
                report = ExportReport("bench", "chatgpt")
                streamed, seconds = peak(lambda: _validate(export, "chatgpt", set(), report, False))
                raw = Path(tmp) / "conversations.json"
                import zipfile

                with zipfile.ZipFile(export) as z:
                    raw.write_bytes(z.read("conversations.json"))
                whole, _ = peak(lambda: json.loads(raw.read_bytes()))
                print(f"{n:>13}  {report.messages:>8}  {size / 2**20:>15.1f} MB  "
                      f"{streamed:>10.1f} MB  {whole:>11.1f} MB  {seconds:>10.1f}")


if __name__ == "__main__":
    main()
