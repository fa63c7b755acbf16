"""Time in recall, measured: questions that name a time, and questions whose answer is the newer
of two facts, on a store dated the way people fill one.

    python bench/time_questions.py [--keep DIR] [--locomo DIR] [--write-docs]

bench/time_set.json's entries (dated by `forge remember --at`'s code) and conversations
(imported with their timestamps), written in a shuffled order; its questions read at the set's
fixed "now" (FORGE_NOW, TZ). Top-1 with rank.search (--no-time) and rank.recall; `--locomo DIR`:
LoCoMo's questions with and without reading time. The set: docs/benchmarks/time.md.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import recall_sets

ROOT = recall_sets.ROOT
SET = ROOT / "bench" / "time_set.json"
READINGS = {"--no-time": "search", "forge recall": "recall"}


def top1(folder: Path, data: dict, ids: dict[str, int], column: str) -> list[bool]:
    """Each question: is the entry it expects the first row, read by rank.search (--no-time) or
    rank.recall (forge recall)?"""
    from forge.store import rag
    from forge.recall import rank

    read = getattr(rank, READINGS[column])
    with rag.open_store(recall_sets.dated_settings(folder, data), mode="read") as store:
        rows = [read(store, q["q"], limit=10).rows for q in data["questions"]]
    return [bool(r) and r[0].entry.id == ids[q["expect"]] for q, r in zip(data["questions"], rows)]


def locomo(base: Path) -> None:
    """LoCoMo with and without reading time in its questions (see the module docstring)."""
    total = {label: [0, 0] for label in READINGS}
    changed, timed, n = [], 0, 0
    main, shipped = list(READINGS)
    vectors: dict = {}
    for folder, asked, ended in recall_sets.locomo_sets(base):
        read = {label: recall_sets.locomo_read(folder, asked, ended, "on", vectors,
                                               read_time=label != main) for label in READINGS}
        for i, q in enumerate(asked):
            for label in READINGS:
                total[label][0] += read[label][i][0]
                total[label][1] += read[label][i][1]
            time = read[shipped][i][2].result.time
            timed += time is not None
            if read[main][i][:2] != read[shipped][i][:2]:
                changed.append((q["q"], time and time["from_query"], read[main][i][1],
                                read[shipped][i][1]))
        n += len(asked)
    print(f"\nLoCoMo: {n} questions, {timed} read with a time window (each conversation's "
          "questions read at its last session)")
    for label in READINGS:
        print(f"  {label:30} any@5 {total[label][0] / n:.3f}  any@10 {total[label][1] / n:.3f}")
    print("  forge recall against --no-time (- lost at 10 rows, + gained, ~ changed at 5):")
    for q, said, before, after in changed:
        print(f"  {'+' if after and not before else '-' if before and not after else '~'} "
              f"{q} [{said}]")


def main(argv: list[str] | None = None) -> int:
    import docs_figures
    from tabulate import tabulate

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keep", type=Path, help="build the store under DIR and reuse it")
    parser.add_argument("--locomo", type=Path, metavar="DIR",
                        help="also LoCoMo's stores (bench/locomo.py --keep DIR) with and "
                             "without reading time")
    parser.add_argument("--write-docs", action="store_true", help=docs_figures.HELP)
    args = parser.parse_args(argv)
    data = json.loads(SET.read_text(encoding="utf-8"))
    recall_sets.zone(data["tz"])
    folder = args.keep or Path(tempfile.mkdtemp(prefix="forge-time-"))
    ids = recall_sets.build_dated(folder / "store", data)
    runs = {name: top1(folder / "store", data, ids, name) for name in READINGS}
    groups = {"time in the question": lambda q: q["type"] != "newer",
              "  absolute": lambda q: q["type"] == "absolute",
              "  relative": lambda q: q["type"] == "relative",
              "  range": lambda q: q["type"] == "range",
              "the newer of two facts": lambda q: q["type"] == "newer",
              "English": lambda q: _english(q["q"]), "French": lambda q: not _english(q["q"])}
    table = []
    for label, keep in groups.items():
        row = [label, sum(1 for q in data["questions"] if keep(q))]
        for scored in runs.values():
            chosen = [ok for q, ok in zip(data["questions"], scored) if keep(q)]
            row.append(f"{sum(chosen) / len(chosen):.3f}" if chosen else "-")
        table.append(row)
    with docs_figures.tee("time_questions", args.write_docs):
        print(f"{len(data['entries'])} deliberate entries (remember --at) and "
              f"{len(data['history'])} imported conversations (history import --compact), "
              f"written in a shuffled order; {len(data['questions'])} questions read at "
              f"{data['now']} {data['tz']}; top-1 of forge recall --limit 10")
        print(tabulate(table, headers=["questions", "n", *runs], tablefmt="github"))
        if args.locomo:
            locomo(args.locomo)
    return 0


def _english(text: str) -> bool:
    return not any(w in text.lower() for w in ("qu'", "quel", "où", "combien", "pourquoi",
                                               "à ", "chez", "qui "))


if __name__ == "__main__":
    sys.exit(main())
