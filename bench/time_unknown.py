"""Entries of unknown time, measured: on stores where every time is known, forge recall's rows
are the same with the unknown-time rule as without it, and what it costs.

    python bench/time_unknown.py [--keep DIR]

The rule (docs/time.md, "An entry whose time is unknown") adds a clause to every channel's
window (`created_known`), keeps a row of unknown time out of a period's first rows and out of
the newer-fact pairs. On a store whose every entry's time is known nothing may move. Each set
is recalled twice in one process, in alternation: "shipped", and "without the rule" (the
window clause as it was before: common.entry_filters with `unknown_time=None`, every row read
as known), and "shipped again" (the same code as "shipped": the in-run baseline of the noise).
Printed: how many questions answer the same rows in the same order, and the median recall time
of each (noisy on a shared machine).

Sets: bench/time_set.json (44 questions, 33 naming a time; its store as
bench/time_questions.py builds it) and the four small recall sets of bench/recall_sets.py
(personal, french, no-word, held-out), every question, `forge recall --limit 10`'s code.
"""
from __future__ import annotations

import argparse
import contextlib
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
FIXTURES = ROOT / "tests" / "fixtures"
SMALL = {"personal": "personal_facts.json", "french": "french_personal.json",
         "no-word": "french_no_word.json", "held-out": "no_word_heldout.json"}


@contextlib.contextmanager
def without_rule():
    """The code before the rule: the window clause knows no `created_known`, every row is
    known."""
    from forge.recall import channels, timeline

    saved = channels.span, timeline.known
    channels.span = lambda window: {} if window is None else {**window.bounds(),
                                                               "unknown_time": None}
    timeline.known = lambda entry: True
    try:
        yield
    finally:
        channels.span, timeline.known = saved


def recall_all(settings, questions: list[str], rounds: int) -> tuple[dict, dict]:
    """question -> row ids, and -> recall seconds (the median of `rounds`), for each way."""
    from forge.recall import rank
    from forge.store import rag

    ways = ("shipped", "shipped again", "without the rule")
    rows: dict[str, dict[str, list[int]]] = {w: {} for w in ways}
    times: dict[str, list[float]] = {w: [] for w in ways}
    with rag.open_store(settings, mode="read") as store:
        vectors = {q: store.checked_embedder().embed_query(q) for q in questions}
        for n in range(rounds):
            order = ways[n % 3:] + ways[:n % 3]   # which runs first rotates (caches warm up)
            for q in questions:
                for way in order:
                    ctx = without_rule() if way == "without the rule" else contextlib.nullcontext()
                    with ctx:
                        started = time.perf_counter()
                        result = rank.recall(store, q, limit=10, query_vector=vectors[q])
                        times[way].append(time.perf_counter() - started)
                    rows[way][q] = [r.entry.id for r in result.rows]
    return rows, {w: statistics.median(t) for w, t in times.items()}


def main(argv: list[str] | None = None) -> int:
    from tabulate import tabulate

    import recall_sets
    import time_questions

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keep", type=Path, help="build the stores under DIR and reuse them")
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args(argv)
    folder = args.keep or Path(tempfile.mkdtemp(prefix="forge-time-unknown-"))
    table = []

    data = json.loads(time_questions.SET.read_text(encoding="utf-8"))
    os.environ["TZ"] = data["tz"]
    time.tzset()
    time_questions.build(folder / "time" / "store", data)
    settings = time_questions.settings_for(folder / "time" / "store", data)
    questions = [q["q"] for q in data["questions"]]
    table.append(["time set", *_row(settings, questions, args.rounds)])

    os.environ.pop("TZ", None)
    time.tzset()
    for name, fixture in SMALL.items():
        got, _ = recall_sets.personal_store(folder / name, FIXTURES / fixture)
        settings = recall_sets.open_settings(folder / name)
        questions = [h["question"] for h in got["hits"]] + [m["question"] if isinstance(m, dict)
                                                              else m for m in got["misses"]]
        table.append([name, *_row(settings, questions, args.rounds)])
    print("every entry's time known; forge recall --limit 10 in-process, each question "
          f"{args.rounds} times each way, which runs first rotating (\"shipped again\": the "
          "in-run baseline of the noise between two identical runs); recall times noisy "
          "(a shared machine)")
    print(tabulate(table, headers=["set", "questions", "same rows, same order",
                                   "shipped ms (median)", "shipped again ms",
                                   "without the rule ms"],
                   tablefmt="github"))
    return 0


def _row(settings, questions: list[str], rounds: int) -> list:
    rows, times = recall_all(settings, questions, rounds)
    same = sum(rows["shipped"][q] == rows["without the rule"][q] for q in questions)
    return [len(questions), f"{same}/{len(questions)}", f"{times['shipped'] * 1000:.1f}",
            f"{times['shipped again'] * 1000:.1f}", f"{times['without the rule'] * 1000:.1f}"]


if __name__ == "__main__":
    raise SystemExit(main())
