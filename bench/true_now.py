"""What is true now comes first, measured: a question about a fact that changed gets the newer
note first, a question about the past the older one, two notes that both stay true both.

    python bench/true_now.py [--set true-now|true-now-2|dated|dev] [--keep DIR] [--write-docs]
    python bench/true_now.py --all [--keep DIR] [--locomo DIR] [--write-docs]

The held-out sets true-now and true-now-2 (facts changed in other words; the pairs `forge
memory conflicts` is scored against) and dated; dev, the development set a rule is designed on
(tests/fixtures/true_now_dev.json). Each store written by recall_sets.build_dated, read as
`forge recall --limit 10` reads it at the set's "now", RECALL_SENTENCE on and off. `--all`:
the held-out sets beside recall_sets.py's, LoCoMo's (`--locomo DIR`) and time_questions.py's,
then each in detail. The sets: docs/benchmarks/true-now.md.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import recall_sets

ROOT = recall_sets.ROOT
SETS = {"true-now": ROOT / "bench" / "true_now_heldout.json",
        "true-now-2": ROOT / "bench" / "true_now_heldout2.json",
        "dated": ROOT / "bench" / "dated_heldout.json",
        "dev": recall_sets.FIXTURES / "true_now_dev.json",
        "time": ROOT / "bench" / "time_set.json"}
HELD_OUT = ["true-now", "true-now-2", "dated"]
SENTENCE = {"RECALL_SENTENCE=on": "on", "RECALL_SENTENCE=off": "off"}
# the questions of these types ("A|B"), scored on the first row (every expected note in the
# first 3 when two are), or "@10" on the expected note anywhere in the rows
GROUPS = {
    "true-now": [("current value first (top-1)", "current"),
                 ("  the current value in the 10 rows", "current@10"),
                 ("former value first, a question about the past (top-1)", "former"),
                 ("  the former value in the 10 rows", "former@10"),
                 ("both stay true, both in the first 3", "both")],
    "dated": [("a month named (top-1)", "month"),
              ("a current state, no time named (top-1)", "current"),
              ("every question (top-1)", None)],
    "time": [("time in the question (top-1)", "absolute|relative|range"),
             ("the newer of two facts (top-1)", "newer")],
}
GROUPS["true-now-2"] = GROUPS["dev"] = GROUPS["true-now"]


def read(path: Path) -> dict:
    """A set in the held-out sets' form (the development set's compact form adapted)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    return data if "entries" in data else from_dev(data)


def from_dev(dev: dict) -> dict:
    """The development set's notes as entries `KEY.old`/`KEY.new` (a changed fact), `KEY.a`/
    `KEY.b` (a pair), `u0`... (unrelated), written in its own shuffled order (seed 11), read in
    UTC; a changed fact's `q` a `current` question, its `past` a `former` one, a pair's `q` a
    `both` one."""
    entries, questions = [], []
    for group, sides in (("changed", ("old", "new")), ("both", ("a", "b"))):
        for c in dev[group]:
            entries += [{"key": f"{c['key']}.{side}", "kind": "fact", "at": c[side][0],
                         "content": c[side][1]} for side in sides]
    entries += [{"key": f"u{i}", "kind": "fact", "at": at, "content": text}
                for i, (at, text) in enumerate(dev["unrelated"])]
    for c in dev["changed"]:
        questions.append({"id": f"current-{c['key']}", "q": c["q"], "type": "current",
                          "expect": [f"{c['key']}.new"]})
        if "past" in c:
            questions.append({"id": f"former-{c['key']}", "q": c["past"], "type": "former",
                              "expect": [f"{c['key']}.old"]})
    questions += [{"id": f"both-{c['key']}", "q": c["q"], "type": "both",
                   "expect": [f"{c['key']}.a", f"{c['key']}.b"]} for c in dev["both"]]
    return {"now": dev["now"], "tz": "UTC", "seed": 11, "entries": entries, "history": [],
            "questions": questions,
            "changed": [[f"{c['key']}.old", f"{c['key']}.new"] for c in dev["changed"]],
            "stay_true": [[f"{c['key']}.a", f"{c['key']}.b"] for c in dev["both"]]}


def expected(q: dict) -> list[str]:
    return [q["expect"]] if isinstance(q["expect"], str) else list(q["expect"])


def recall_rows(folder: Path, data: dict, sentence: str) -> list[list[int]]:
    """Every question's rows, as `forge recall --limit 10` gives them at the set's "now"."""
    answers = recall_sets.answers(folder, [q["q"] for q in data["questions"]], sentence,
                                  data["now"], {})
    return [[r.entry.id for r in a.result.rows] for a in answers]


def judge(data: dict, ids: dict[str, int], rows: list[list[int]]) -> list[dict]:
    """Each question scored: its first row is the expected note or a note it names `also` (one
    expected), or every expected note is in the first 3 rows (two expected)."""
    key_of = {v: k for k, v in ids.items()}
    out = []
    for q, got in zip(data["questions"], rows):
        want = [ids[k] for k in expected(q)]
        ok = (all(w in got[:3] for w in want) if len(want) > 1
              else bool(got) and got[0] in [want[0], *(ids[k] for k in q.get("also", []))])
        out.append({**q, "ok": ok, "ranks": [got.index(w) + 1 if w in got else None for w in want],
                    "first": key_of.get(got[0], f"#{got[0]}") if got else None})
    return out


def conflict_scores(folder: Path, data: dict, ids: dict[str, int]) -> dict:
    """conflicts.find on the store against the set's labels: the pairs listed under the reason
    "changed", and the pairs listed under any reason."""
    from forge.memory import conflicts
    from forge.store import rag

    key_of = {v: k for k, v in ids.items()}
    changed = {frozenset((ids[a], ids[b])) for a, b in data["changed"]}
    with rag.open_store(recall_sets.dated_settings(folder, data), mode="read") as store:
        report = conflicts.find(store)
    listed = {frozenset(c.ids): c.reason for c in report.conflicts}

    def scored(pairs: set) -> dict:
        right = pairs & changed
        return {"listed": len(pairs), "right": len(right), "expected": len(changed)}

    return {"changed": scored({p for p, why in listed.items()
                               if why.split(":")[0].strip() == "changed"}),
            "any": scored(set(listed)),
            "wrong": sorted((sorted(key_of[i] for i in p), why) for p, why in listed.items()
                            if p not in changed),
            "found": sorted(sorted(key_of[i] for i in p) for p in listed if p in changed)}


def fraction(n: int, of: int) -> str:
    return f"{n}/{of} ({n / of:.3f})" if of else "-"


def precision_recall(s: dict) -> str:
    p = f"{s['right'] / s['listed']:.2f}" if s["listed"] else "-"
    return (f"P {p} ({s['right']}/{s['listed']}), "
            f"R {s['right'] / s['expected']:.2f} ({s['right']}/{s['expected']})")


def run_set(name: str, keep: Path) -> dict:
    """One set: its store, its questions judged with the sentence model on and off, its
    conflicts when it labels them."""
    data = read(SETS[name])
    recall_sets.zone(data["tz"])
    folder = keep / name
    ids = recall_sets.build_dated(folder, data)
    judged = {col: judge(data, ids, recall_rows(folder, data, value))
              for col, value in SENTENCE.items()}
    out = {"name": name, "data": data, "judged": judged, "rows": []}
    for label, kind in GROUPS[name]:
        kinds, _, anywhere = (kind or "").partition("@")

        def chosen(questions: list[dict]) -> list[dict]:
            return [q for q in questions if not kinds or q["type"] in kinds.split("|")]

        row = [label, len(chosen(data["questions"]))]
        for scored in judged.values():
            hit = ((lambda s: None not in s["ranks"]) if anywhere else (lambda s: s["ok"]))
            row.append(fraction(sum(hit(s) for s in chosen(scored)), len(chosen(scored))))
        out["rows"].append(row)
    if "changed" in data:
        c = out["conflicts"] = conflict_scores(folder, data, ids)
        for label, key in (('memory conflicts, reason "changed"', "changed"),
                           ("memory conflicts, any reason (baseline)", "any")):
            figure = precision_recall(c[key])   # no recall in it: the same in either column
            out["rows"].append([label, c[key]["expected"], figure, figure])
    return out


def print_set(result: dict) -> None:
    from tabulate import tabulate

    data = result["data"]
    print(f"\n## {result['name']}: {SETS[result['name']].relative_to(ROOT)}")
    print(f"{len(data['entries'])} entries (remember --at) and {len(data['history'])} imported "
          f"conversations, written in a shuffled order; {len(data['questions'])} questions read "
          f"at {data['now']} {data['tz']}; forge recall --limit 10")
    print(tabulate(result["rows"], headers=["", "n", *SENTENCE], tablefmt="github"))
    for col, scored in result["judged"].items():
        failed = [s for s in scored if not s["ok"]]
        print(f"\nfailing with {col}: {len(failed)} of {len(scored)}")
        for s in failed:
            ranks = "/".join("-" if r is None else str(r) for r in s["ranks"])
            print(f"  {s['id']:11} rank {ranks:5} first: {s['first']:18} {s['q']}")
    if "conflicts" in result:
        c = result["conflicts"]
        print(f"\nmemory conflicts: {len(c['found'])} changed pairs listed, "
              f"{len(c['wrong'])} other pairs listed")
        for pair in c["found"]:
            print(f"  listed, a changed fact: {pair[0]} / {pair[1]}")
        for pair, why in c["wrong"]:
            print(f"  listed, not a changed fact: {pair[0]} / {pair[1]} ({why})")


def recall_sets_rows(keep: Path, convs: list) -> list[list]:
    """bench/recall_sets.py's figures (the sentence model on; the three channels alone) on its
    sets and LoCoMo's conversations (recall_sets.locomo_sets)."""
    sets = recall_sets.small_sets(keep)
    got = list(recall_sets.measured(sets, convs).values())
    labels = {**{name: name for name in sets}, "held-out": "held-out (no word)"}
    rows = [[labels[name], metric, got[0][name]["n"],
             *(fraction(g[name][key], g[name]["n"]) for g in got)]
            for name in sets for metric, key in (("top-1", "top1"), ("any@5", "any5"))]
    if convs:
        rows += [["LoCoMo", metric, got[0]["LoCoMo"]["n"],
                  *(fraction(g["LoCoMo"][key], g["LoCoMo"]["n"]) for g in got)]
                 for metric, key in (("any@5", "any5"), ("any@10", "any10"))]
    return rows


def main(argv: list[str] | None = None) -> int:
    import docs_figures
    from tabulate import tabulate

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--set", choices=[*HELD_OUT, "dev"], default="true-now",
                        help="the set scored alone (default true-now)")
    parser.add_argument("--all", action="store_true",
                        help="the held-out sets beside every other, then each in detail")
    parser.add_argument("--keep", type=Path, help="build the stores under DIR and reuse them")
    parser.add_argument("--locomo", type=Path, metavar="DIR",
                        help="with --all: LoCoMo's stores (bench/locomo.py --keep DIR)")
    parser.add_argument("--write-docs", action="store_true", help=docs_figures.HELP)
    args = parser.parse_args(argv)
    if args.locomo and not args.all:
        parser.error("--locomo goes with --all")
    convs = recall_sets.locomo_sets(args.locomo) if args.locomo else []
    keep = args.keep or Path(tempfile.mkdtemp(prefix="forge-true-now-"))
    results = [run_set(name, keep) for name in (HELD_OUT if args.all else [args.set])]
    with docs_figures.tee("true_now" if args.all else f"true_now-{args.set}", args.write_docs):
        if args.all:
            rows = []
            for r in results:
                rows += [[r["name"], label, n, *cols] for label, n, *cols in r["rows"]]
            rows += recall_sets_rows(keep, convs)
            rows += [["time", *row] for row in run_set("time", keep)["rows"]]
            print("every set side by side: forge recall --limit 10's code; 'k/n (fraction)'; "
                  "the conflicts rows read no recall (the same in both columns)")
            print(tabulate(rows, headers=["set", "", "n", *SENTENCE], tablefmt="github"))
        for r in results:
            print_set(r)
    return 0


if __name__ == "__main__":
    sys.exit(main())
