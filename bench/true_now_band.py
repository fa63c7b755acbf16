"""Newest wins within a relevance band, measured: with no time asked, the newest of the rows
whose score is within DELTA of the first row's takes the first place (a question about the past:
the oldest), notes a day apart or more. No sameness read: the policy alone.

    python bench/true_now_band.py [--keep DIR]

Each held-out set and the development set, `forge recall --limit 10`'s rows at the set's "now",
RECALL_SENTENCE on; the band by the fused score or by the sentence model's cosine; then where
the newer note of each changed fact stands among a question's first 30 rows.
"""
from __future__ import annotations

import argparse
import tempfile
from datetime import datetime
from pathlib import Path

import recall_sets
import true_now

BANDS = [("fused", d) for d in (0.1, 0.2, 0.3)] + [("sentence", d) for d in (0.05, 0.1, 0.15)]


def rows_of(name: str, keep: Path) -> tuple[dict, dict, list]:
    from forge.recall import rank
    from forge.store import rag

    data = true_now.read(true_now.SETS[name])
    recall_sets.zone(data["tz"])
    ids = recall_sets.build_dated(keep / name, data)
    out = []
    settings = recall_sets.settings(keep / name, FORGE_NOW=data["now"], RECALL_SENTENCE="on")
    with rag.open_store(settings) as store:
        for q in data["questions"]:
            question = rank.read(store, q["q"])
            out.append((q, question.past, question.asked is not None,
                        {limit: rank.recall(store, q["q"], limit=limit).rows
                         for limit in (10, 30)}))
    return data, ids, out


def seconds(row) -> float:
    return datetime.fromisoformat(row.entry.created.replace("Z", "+00:00")).timestamp()


def banded(rows: list, past: bool, asked: bool, key: str, delta: float) -> list:
    top = getattr(rows[0], key) if rows else None
    if asked or top is None:
        return rows
    band = [r for r in rows if getattr(r, key) is not None and getattr(r, key) >= top - delta
            and r.entry.created_known]
    pick = (min if past else max)(band, key=seconds)
    if abs(seconds(pick) - seconds(rows[0])) < 86_400:
        return rows
    return [pick] + [r for r in rows if r is not pick]


def score(ids: dict, asked: list, rule) -> dict[str, str]:
    got: dict[str, list[int]] = {}
    for q, past, timed, rows in asked:
        want = [ids[k] for k in true_now.expected(q)]
        first = [r.entry.id for r in rule(rows[10], past, timed)]
        ok = all(w in first[:3] for w in want) if len(want) > 1 else first[:1] == want[:1]
        got.setdefault(q["type"], [0, 0])
        got[q["type"]][0] += ok
        got[q["type"]][1] += 1
    return {kind: f"{n}/{of}" for kind, (n, of) in got.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keep", type=Path)
    args = parser.parse_args()
    keep = args.keep or Path(tempfile.mkdtemp(prefix="forge-band-"))
    for name in ("dev", "true-now", "true-now-2", "dated"):
        data, ids, asked = rows_of(name, keep)
        print(f"## {name}\nshipped: {score(ids, asked, lambda rows, past, timed: rows)}")
        for key, delta in BANDS:
            rule = (lambda k, d: lambda rows, past, timed: banded(rows, past, timed, k, d))(
                key, delta)
            print(f"{key} within {delta}: {score(ids, asked, rule)}")
        where = []
        for q, _, _, rows in asked:
            if q["type"] == "current":
                ranked = [r.entry.id for r in rows[30]]
                new = ids[true_now.expected(q)[0]]
                where.append(ranked.index(new) + 1 if new in ranked else None)
        print("the newer note's place among 30 rows (a current-value question): "
              + ", ".join(f"{p}: {where.count(p)}" for p in (1, 2, 3, 4, 5))
              + f", 6-30: {sum(1 for w in where if w and w > 5)}, none: {where.count(None)}")


if __name__ == "__main__":
    main()
