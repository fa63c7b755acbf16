"""What is true now comes first, measured: a question about a fact that changed gets the newer
note first, a question about the past the older one, two notes that both stay true both.

    python bench/true_now.py [--set true-now|true-now-2|dated] [--keep DIR] [--write-docs]
    python bench/true_now.py --all [--keep DIR] [--locomo DIR] [--write-docs]

The held-out sets (each written before any rule that reads them): true-now
(bench/true_now_heldout.json) and true-now-2 (bench/true_now_heldout2.json), facts changed in
other words, with `current`, `former` and `both` questions and labels `forge memory conflicts`
is scored against; dated (bench/dated_heldout.json), `month` and `current` questions. Each store
is written as time_questions.py writes its own and read as `forge recall --limit 10` reads it at
the set's fixed "now", with RECALL_SENTENCE on and off. `--all`: every set side by side
(these, recall_sets.py's, LoCoMo's with `--locomo DIR`, time_questions.py's), then these three
in detail. The sets in full: docs/benchmarks/true-now.md.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
SETS = {"true-now": ROOT / "bench" / "true_now_heldout.json",
        "true-now-2": ROOT / "bench" / "true_now_heldout2.json",
        "dated": ROOT / "bench" / "dated_heldout.json"}
TIME_SET = ROOT / "bench" / "time_set.json"
SENTENCE = {"RECALL_SENTENCE=on": "on", "RECALL_SENTENCE=off": "off"}
# a question's type -> what it is scored on: the first row, or every expected note in the first 3
GROUPS = {
    "true-now": [("current value first (top-1)", "current"),
                 ("  the current value in the 10 rows", "current@10"),
                 ("former value first, a question about the past (top-1)", "former"),
                 ("  the former value in the 10 rows", "former@10"),
                 ("both stay true, both in the first 3", "both")],
    "dated": [("a month named (top-1)", "month"),
              ("a current state, no time named (top-1)", "current"),
              ("every question (top-1)", None)],
}
GROUPS["true-now-2"] = GROUPS["true-now"]


def load(path: Path) -> dict:
    data = json.loads(path.read_text(encoding="utf-8"))
    os.environ["TZ"] = data["tz"]   # the questions are read in the set's time zone
    time.tzset()
    return data


def build(folder: Path, data: dict) -> dict[str, int]:
    """The store under `folder`, written once (bench/time_questions.py's way): key -> id."""
    import time_questions

    return time_questions.build(folder, data)


def expected(q: dict) -> list[str]:
    return [q["expect"]] if isinstance(q["expect"], str) else list(q["expect"])


def recall_rows(folder: Path, data: dict, sentence: str) -> list[list[int]]:
    """Every question's rows, as `forge recall --limit 10` gives them at the set's "now"."""
    import recall_sets
    from forge.recall import many
    from forge.store import rag

    settings = recall_sets.open_settings(folder, {"FORGE_NOW": data["now"],
                                                  "COMPACTION_KEEP_RECENT": "0",
                                                  "RECALL_SENTENCE": sentence})
    with rag.open_store(settings, mode="read") as store:
        batch = many.search_many(store, [q["q"] for q in data["questions"]], limit=10)
    return [[r.entry.id for r in a.result.rows] for a in batch.answers]


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
    import recall_sets
    from forge.memory import conflicts
    from forge.store import rag

    key_of = {v: k for k, v in ids.items()}
    changed = {frozenset((ids[a], ids[b])) for a, b in data["changed"]}
    with rag.open_store(recall_sets.open_settings(folder, {"FORGE_NOW": data["now"]}),
                        mode="read") as store:
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
    data = load(SETS[name])
    folder = keep / name
    ids = build(folder, data)
    judged = {col: judge(data, ids, recall_rows(folder, data, value))
              for col, value in SENTENCE.items()}
    out = {"name": name, "data": data, "judged": judged, "rows": []}
    for label, kind in GROUPS[name]:
        # "TYPE@10": the expected note anywhere in the rows (what an ordering can bring first)
        kind, _, anywhere = (kind or "").partition("@")
        row = [label, sum(1 for q in data["questions"] if kind in ("", q["type"]))]
        for scored in judged.values():
            chosen = [s for s in scored if kind in ("", s["type"])]
            hit = ((lambda s: None not in s["ranks"]) if anywhere else (lambda s: s["ok"]))
            row.append(fraction(sum(hit(s) for s in chosen), len(chosen)))
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


def recall_sets_rows(keep: Path, locomo_dir: Path | None) -> list[list]:
    """bench/recall_sets.py's shipped rows (the sentence model on; the three channels alone)
    on its sets and LoCoMo's, through its own functions."""
    import recall_sets

    fixtures = recall_sets.FIXTURES
    stores = {label: (keep / folder, *recall_sets.personal_store(keep / folder, fixtures / file))
              for label, folder, file in (
                  ("personal", "personal", "personal_facts.json"),
                  ("french", "french", "french_personal.json"),
                  ("no-word", "no-word", "french_no_word.json"),
                  ("held-out (no word)", "held-out", "no_word_heldout.json"))}
    convs = recall_sets.locomo_sets(locomo_dir) if locomo_dir else []
    every = recall_sets.variants()
    runner = recall_sets.Runner(keep)
    figures: dict[str, dict[str, str]] = {}
    for col, variant in ((list(SENTENCE)[0], every[recall_sets.SHIPPED]),
                         (list(SENTENCE)[1], every[recall_sets.THREE])):
        run = runner(variant)
        for label, (folder, data, ids) in stores.items():
            s = recall_sets.score_personal(folder, data, ids, run)
            figures.setdefault(f"{label}|top-1", {})[col] = fraction(s["top1"], s["n"])
            figures.setdefault(f"{label}|any@5", {})[col] = fraction(s["any5"], s["n"])
        if convs:
            total = {"n": 0, "any5": 0, "any10": 0}
            for folder, asked, ended in convs:
                c = recall_sets.score_locomo(folder, asked, run, ended)
                for k in total:
                    total[k] += c[k]
            figures.setdefault("LoCoMo|any@5", {})[col] = fraction(total["any5"], total["n"])
            figures.setdefault("LoCoMo|any@10", {})[col] = fraction(total["any10"], total["n"])
    rows = []
    for key, cols in figures.items():
        label, metric = key.split("|")
        n = cols[list(SENTENCE)[0]].split("/")[1].split(" ")[0]
        rows.append([label, metric, n, *(cols[c] for c in SENTENCE)])
    return rows


def time_rows(keep: Path) -> list[list]:
    """bench/time_questions.py's set, its store and its questions, read as forge recall reads
    them (its "after (forge recall)" column), with the sentence model on and off."""
    data = load(TIME_SET)
    folder = keep / "time" / "store"   # where bench/time_questions.py --keep DIR builds it
    ids = build(folder, data)
    judged = {col: judge(data, ids, recall_rows(folder, data, value))
              for col, value in SENTENCE.items()}
    rows = []
    for metric, keep_q in (("time in the question (top-1)", lambda q: q["type"] != "newer"),
                           ("the newer of two facts (top-1)", lambda q: q["type"] == "newer")):
        cols = []
        for scored in judged.values():
            chosen = [s for s in scored if keep_q(s)]
            cols.append(fraction(sum(s["ok"] for s in chosen), len(chosen)))
        rows.append(["time", metric, sum(1 for q in data["questions"] if keep_q(q)), *cols])
    return rows


def main(argv: list[str] | None = None) -> int:
    import docs_figures
    from tabulate import tabulate

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--set", choices=list(SETS), default="true-now",
                        help="the set scored alone (default true-now)")
    parser.add_argument("--all", action="store_true",
                        help="every set side by side in one table, then these three in detail")
    parser.add_argument("--keep", type=Path, help="build the stores under DIR and reuse them")
    parser.add_argument("--locomo", type=Path, metavar="DIR",
                        help="with --all: LoCoMo's stores (bench/locomo.py --keep DIR)")
    parser.add_argument("--write-docs", action="store_true", help=docs_figures.HELP)
    args = parser.parse_args(argv)
    if args.locomo and not args.all:
        parser.error("--locomo goes with --all")
    if args.locomo:
        import locomo   # recall_sets reads LoCoMo's questions from locomo.DEFAULT_DATA

        if os.environ.get("FORGE_LOCOMO"):
            locomo.DEFAULT_DATA = Path(os.environ["FORGE_LOCOMO"])
        if not locomo.DEFAULT_DATA.is_file():
            parser.error(f"no LoCoMo data at {locomo.DEFAULT_DATA} (set FORGE_LOCOMO)")
        if not list(args.locomo.glob("conversation-*/locomo-built.json")):
            parser.error(f"--locomo {args.locomo}: no store built there "
                         "(bench/locomo.py --keep DIR builds them)")
    keep = args.keep or Path(tempfile.mkdtemp(prefix="forge-true-now-"))
    names = list(SETS) if args.all else [args.set]
    results = [run_set(name, keep) for name in names]
    with docs_figures.tee("true_now", args.write_docs):
        if args.all:
            rows = []
            for r in results:
                rows += [[r["name"], label, n, *cols] for label, n, *cols in r["rows"]]
            rows += recall_sets_rows(keep, args.locomo)
            rows += time_rows(keep)
            print("every set side by side: forge recall --limit 10's code; 'k/n (fraction)'; "
                  "the conflicts rows read no recall (the same in both columns)")
            print(tabulate(rows, headers=["set", "", "n", *SENTENCE], tablefmt="github"))
        for r in results:
            print_set(r)
    return 0


if __name__ == "__main__":
    sys.exit(main())
