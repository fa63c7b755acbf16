"""Time in recall, measured: questions that name a time, and questions whose answer is the newer
of two facts, on a store dated the way people fill one.

    python bench/time_questions.py [--keep DIR] [--locomo DIR] [--misses] [--write-docs]

bench/time_set.json's entries (dated by `forge remember --at`'s code) and conversations
(imported with their timestamps), written in a shuffled order; its questions read at the set's
fixed "now" (FORGE_NOW, TZ). Top-1 with rank.search (--no-time) and rank.recall; `--locomo DIR`:
LoCoMo's questions with and without reading time. The set: docs/benchmarks/time.md.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
SET = ROOT / "bench" / "time_set.json"
SEED = 7


def settings_for(folder: Path, data: dict):
    from forge.core.settings import load_settings

    return load_settings({"FORGE_DATA_DIR": str(folder), "LLAMA_CPP_URL": "http://127.0.0.1:9",
                          "FORGE_NOW": data["now"], "COMPACTION_KEEP_RECENT": "0"}, cwd=folder)


def build(folder: Path, data: dict) -> dict[str, int]:
    """The store under `folder` (built once; a second run reuses it): key -> entry id."""
    from forge.memory import compaction, history_import
    from forge.store import rag

    index = folder / "time-built.json"
    if index.exists():
        return json.loads(index.read_text())
    folder.mkdir(parents=True, exist_ok=True)
    settings = settings_for(folder, data)
    items = [("entry", e) for e in data["entries"]] + [("history", h) for h in data["history"]]
    random.Random(SEED).shuffle(items)
    ids: dict[str, int] = {}
    with rag.open_store(settings) as store:
        for what, item in items:
            if what == "entry":   # forge remember KIND TEXT [-p P] --at WHEN
                ids[item["key"]] = rag.remember(store, item["kind"], item["content"],
                                                project=item.get("project"),
                                                created=item["at"]).id
                continue
            records = [{"role": role, "content": text, "ts": item["ts"]}
                       for role, text in item["messages"]]
            history_import.import_history(settings, "\n".join(json.dumps(r) for r in records),
                                          source=item["key"], compact=True)
            compaction.compact(settings, strategy="rag_pointer", store=store)
            archived = [e for e in rag.list_entries(store, kind=rag.ARCHIVE_KIND)
                        if e.id not in ids.values()]
            ids[item["key"]] = archived[-1].id
    index.write_text(json.dumps(ids))
    return ids


READINGS = {"--no-time": "search", "forge recall": "recall"}


def score(folder: Path, data: dict, ids: dict[str, int], column: str) -> list[dict]:
    from forge.store import rag
    from forge.recall import rank

    out = []
    read = getattr(rank, READINGS[column])
    with rag.open_store(settings_for(folder, data), mode="read") as store:
        for q in data["questions"]:
            result = read(store, q["q"], limit=10)
            rows = [r.entry.id for r in result.rows]
            want = ids[q["expect"]]
            out.append({**q, "top1": bool(rows) and rows[0] == want,
                        "rank": rows.index(want) + 1 if want in rows else None,
                        "window": result.time})
    return out


def locomo(base: Path) -> None:
    """LoCoMo with and without reading time in its questions (see the module docstring)."""
    import recall_sets
    from forge.store import rag
    from forge.recall import many

    total = {label: [0, 0] for label in READINGS}
    changed, timed, n = [], 0, 0
    main, shipped = list(READINGS)
    for folder, asked, ended in recall_sets.locomo_sets(base):
        questions = [q["q"] for q in asked]
        answers = {}
        with rag.open_store(recall_sets.open_settings(folder, {"FORGE_NOW": ended})) as store:
            vectors = many.embed_queries(store, questions)
            for label in READINGS:
                answers[label] = many.search_many(store, questions, vectors=vectors, limit=10,
                                                  read_time=label != main).answers
        for i, q in enumerate(asked):
            wanted = set(q["evidence"])
            got = {}
            for label in READINGS:
                rows = answers[label][i].result.rows
                found = [bool(wanted & set((r.entry.refs or {}).get("external") or []))
                         for r in rows]
                got[label] = (any(found[:5]), any(found[:10]))
                total[label][0] += got[label][0]
                total[label][1] += got[label][1]
            time = answers[shipped][i].result.time
            timed += time is not None
            if got[main] != got[shipped]:
                changed.append((q["q"], time and time["from_query"], got[main][1],
                                got[shipped][1]))
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
    parser.add_argument("--misses", action="store_true", help="print the questions missed at top-1")
    parser.add_argument("--write-docs", action="store_true", help=docs_figures.HELP)
    args = parser.parse_args(argv)
    data = json.loads(SET.read_text(encoding="utf-8"))
    os.environ["TZ"] = data["tz"]
    time.tzset()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="forge-time-"))
    ids = build(folder / "store", data)
    runs = {name: score(folder / "store", data, ids, name) for name in READINGS}
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
            chosen = [s for s in scored if keep(s)]
            row.append(f"{sum(s['top1'] for s in chosen) / len(chosen):.3f}" if chosen else "-")
        table.append(row)
    with docs_figures.tee("time_questions", args.write_docs):
        print(f"{len(data['entries'])} deliberate entries (remember --at) and "
              f"{len(data['history'])} imported conversations (history import --compact), "
              f"written in a shuffled order; {len(data['questions'])} questions read at "
              f"{data['now']} {data['tz']}; top-1 of forge recall --limit 10")
        print(tabulate(table, headers=["questions", "n", *runs], tablefmt="github"))
        if args.misses:
            for name, scored in runs.items():
                missed = [(s["q"], s["rank"]) for s in scored if not s["top1"]]
                print(f"\n{name}: {len(missed)} missed at top-1")
                for q, rank in missed:
                    print(f"  rank {rank}: {q}")
        if args.locomo:
            locomo(args.locomo)
    return 0


def _english(text: str) -> bool:
    return not any(w in text.lower() for w in ("qu'", "quel", "où", "combien", "pourquoi",
                                               "à ", "chez", "qui "))


if __name__ == "__main__":
    sys.exit(main())
