"""What is true now comes first, measured: a question about a fact that changed gets the newer
note first, a question about the past the older one, two notes that both stay true both; a
question that names a time gets what was said then.

    python bench/true_now.py [--set true-now|true-now-2|dated|dev] [--keep DIR] [--write-docs]
    python bench/true_now.py --set time [--keep DIR] [--locomo DIR] [--write-docs]
    python bench/true_now.py --all [--keep DIR] [--locomo DIR] [--write-docs]

Each dated set (SETS) read as `forge recall --limit 10` reads it at the set's "now",
RECALL_SENTENCE on and off; the time set beside rank.search (no time read), and LoCoMo with and
without its time. `--all`: the held-out sets beside every other set, then each in detail. The
sets: docs/benchmarks/true-now.md, docs/benchmarks/time.md.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import recall_sets

ROOT = recall_sets.ROOT
SETS = {"true-now": ROOT / "bench" / "true_now_heldout.json",
        "true-now-2": ROOT / "bench" / "true_now_heldout2.json",
        "dated": ROOT / "bench" / "dated_heldout.json",
        "dev": recall_sets.FIXTURES / "true_now_dev.json",
        "time": ROOT / "bench" / "time_set.json"}
HELD_OUT = ["true-now", "true-now-2", "dated"]
SENTENCE = recall_sets.VARIANTS
# --set time: rank.search (no time read, no newer fact first: the in-run baseline), forge recall
READINGS = {"--no-time": "search", "forge recall": "on"}
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
# --set time: by the time named, by the question's language ("en", "fr")
TIME_GROUPS = [("time in the question", "absolute|relative|range"), ("  absolute", "absolute"),
               ("  relative", "relative"), ("  range", "range"),
               ("the newer of two facts", "newer"), ("English", "en"), ("French", "fr")]


def read(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def expected(q: dict) -> list[str]:
    return [q["expect"]] if isinstance(q["expect"], str) else list(q["expect"])


def recall_rows(folder: Path, data: dict, reading: str) -> list[list[int]]:
    """Every question's rows at the set's "now", as `forge recall --limit 10` gives them with
    RECALL_SENTENCE `reading` ("on", "off"), or rank.search's ("search")."""
    questions = [q["q"] for q in data["questions"]]
    if reading == "search":
        from forge.recall import many, rank
        from forge.store import rag

        with rag.open_store(recall_sets.settings(folder, FORGE_NOW=data["now"])) as store:
            return [[r.entry.id for r in rank.search(store, q, limit=10, query_vector=v).rows]
                    for q, v in zip(questions, many.embed_queries(store, questions))]
    answers = recall_sets.answers(folder, questions, reading, data["now"], {})
    return [[r.entry.id for r in a.result.rows] for a in answers]


def of_kind(q: dict, kinds: str) -> bool:
    """Whether a question is of the types "A|B" ("": every question) or the language "en"/"fr"
    (French: it holds a French question word)."""
    if kinds in ("en", "fr"):
        french = any(w in q["q"].lower() for w in ("qu'", "quel", "où", "combien", "pourquoi",
                                                    "à ", "chez", "qui "))
        return french == (kinds == "fr")
    return not kinds or q["type"] in kinds.split("|")


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
    """conflicts.find on the store against the set's labels: precision and recall of the pairs
    listed under the reason "changed" and of the pairs listed under any reason; the pairs."""
    from forge.memory import conflicts
    from forge.store import rag

    key_of = {v: k for k, v in ids.items()}
    changed = {frozenset((ids[a], ids[b])) for a, b in data["changed"]}
    with rag.open_store(recall_sets.dated_settings(folder, data), mode="read") as store:
        listed = {frozenset(c.ids): c.reason for c in conflicts.find(store).conflicts}
    out = {"wrong": sorted((sorted(key_of[i] for i in p), why) for p, why in listed.items()
                           if p not in changed),
           "found": sorted(sorted(key_of[i] for i in p) for p in listed if p in changed)}
    for key, pairs in (("changed", {p for p, why in listed.items()
                                    if why.split(":")[0].strip() == "changed"}),
                       ("any", set(listed))):
        right = len(pairs & changed)
        precision = f"{right / len(pairs):.2f}" if pairs else "-"
        out[key] = (f"P {precision} ({right}/{len(pairs)}), "
                    f"R {right / len(changed):.2f} ({right}/{len(changed)})")
    return out


def run_set(name: str, keep: Path, columns: dict = SENTENCE,
            groups: list | None = None) -> dict:
    """One set: its store, its questions judged in each of `columns`, its labelled conflicts."""
    data = read(SETS[name])
    os.environ["TZ"] = data["tz"]   # the questions read in the set's time zone
    time.tzset()
    folder = keep / name
    ids = recall_sets.build_dated(folder, data)
    judged = {col: judge(data, ids, recall_rows(folder, data, value))
              for col, value in columns.items()}
    out = {"name": name, "data": data, "judged": judged, "rows": []}
    for label, kind in groups or GROUPS[name]:
        kinds, _, anywhere = (kind or "").partition("@")
        row = [label, sum(of_kind(q, kinds) for q in data["questions"])]
        for scored in judged.values():
            chosen = [s for s in scored if of_kind(s, kinds)]
            hit = ((lambda s: None not in s["ranks"]) if anywhere else (lambda s: s["ok"]))
            row.append(recall_sets.fraction(sum(hit(s) for s in chosen), len(chosen)))
        out["rows"].append(row)
    if "changed" in data:
        c = out["conflicts"] = conflict_scores(folder, data, ids)
        for label, key in (('memory conflicts, reason "changed"', "changed"),
                           ("memory conflicts, any reason (baseline)", "any")):
            # no recall in it: the same in either column
            out["rows"].append([label, len(data["changed"]), c[key], c[key]])
    return out


# --linked: the sets whose changed facts are labelled, read as they are, then linked as a
# reader would link them (`forge memory supersede OLD --by NEW`): one who recognises the older
# note among those the MCP `remember` names (`may_replace`: conflicts.may_replace), and one
# who links every change.
LINKED_SETS = ["dev", "true-now", "true-now-2"]


def linked(name: str, keep: Path) -> list[list]:
    """--linked: each question type's score on the store as written and linked two ways."""
    import shutil

    from forge.memory import conflicts
    from forge.store import rag

    data = read(SETS[name])
    os.environ["TZ"] = data["tz"]
    time.tzset()
    ids = recall_sets.build_dated(keep / name, data)
    columns = {"as written": (keep / name, [])}
    for label in ("linked from may_replace", "every change linked"):
        folder = keep / f"{name}-{label.split()[0]}"
        shutil.rmtree(folder, ignore_errors=True)
        shutil.copytree(keep / name, folder)
        columns[label] = (folder, [])
        with rag.open_store(recall_sets.dated_settings(folder, data)) as store:
            for old, new in data["changed"]:
                named = [n["id"] for n in conflicts.may_replace(store, ids[new])]
                if label.startswith("every") or ids[old] in named:
                    rag.replace(store, [ids[old]], ids[new])
                    columns[label][1].append(old)
    out = [[name, "changes linked", len(data["changed"]),
            *(len(done) if done else "-" for _, done in columns.values())]]
    judged = [judge(data, ids, recall_rows(folder, data, "on")) for folder, _ in columns.values()]
    for label, kind in (("current value first (top-1)", "current"),
                        ("former value first (top-1)", "former"),
                        ("both stay true, both in the first 3", "both")):
        chosen = [[s for s in scored if of_kind(s, kind)] for scored in judged]
        out.append([name, label, len(chosen[0]),
                    *(recall_sets.fraction(sum(s["ok"] for s in c), len(c)) for c in chosen)])
    return out


def print_set(result: dict) -> None:
    from tabulate import tabulate

    data = result["data"]
    print(f"\n## {result['name']}: {SETS[result['name']].relative_to(ROOT)}")
    print(f"{len(data['entries'])} entries (remember --at) and {len(data['history'])} imported "
          f"conversations, written in a shuffled order; {len(data['questions'])} questions read "
          f"at {data['now']} {data['tz']}; forge recall --limit 10")
    print(tabulate(result["rows"], headers=["", "n", *result["judged"]], tablefmt="github"))
    for col, scored in result["judged"].items():
        failed = [s for s in scored if not s["ok"]]
        print(f"\nfailing with {col}: {len(failed)} of {len(scored)}")
        for s in failed:
            ranks = "/".join("-" if r is None else str(r) for r in s["ranks"])
            print(f"  {s.get('id', s['type']):11} rank {ranks:5} first: {s['first']:18} {s['q']}")
    if "conflicts" in result:
        c = result["conflicts"]
        print(f"\nmemory conflicts: {len(c['found'])} changed pairs listed, "
              f"{len(c['wrong'])} other pairs listed")
        for pair in c["found"]:
            print(f"  listed, a changed fact: {pair[0]} / {pair[1]}")
        for pair, why in c["wrong"]:
            print(f"  listed, not a changed fact: {pair[0]} / {pair[1]} ({why})")


def locomo_time(convs: list) -> None:
    """LoCoMo's questions read without their time (recall --no-time) and with it (forge
    recall): any@5, any@10, and each question whose evidence moved."""
    vectors: dict = {}
    before, after, asked = [], [], []
    for folder, questions, ended in convs:
        before += recall_sets.locomo_read(folder, questions, ended, "on", vectors,
                                          read_time=False)
        after += recall_sets.locomo_read(folder, questions, ended, "on", vectors)
        asked += questions
    times = [a.result.time for *_, a in after]
    print(f"\nLoCoMo: {len(asked)} questions, {sum(t is not None for t in times)} read with a "
          "time window (each conversation's questions read at its last session)")
    for label, read_ in (("--no-time", before), ("forge recall", after)):
        print(f"  {label:30} any@5 {sum(r[0] for r in read_) / len(read_):.3f}  "
              f"any@10 {sum(r[1] for r in read_) / len(read_):.3f}")
    print("  forge recall against --no-time (- lost at 10 rows, + gained, ~ changed at 5):")
    for q, (b5, b10, _), (a5, a10, _), t in zip(asked, before, after, times):
        if (b5, b10) != (a5, a10):
            print(f"  {'+' if a10 and not b10 else '-' if b10 and not a10 else '~'} {q['q']} "
                  f"[{t and t['from_query']}]")


def main(argv: list[str] | None = None) -> int:
    import docs_figures
    from tabulate import tabulate

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--set", choices=[*HELD_OUT, "dev", "time"], default="true-now",
                        help="the set scored alone (default true-now)")
    parser.add_argument("--all", action="store_true",
                        help="the held-out sets beside every other, then each in detail")
    parser.add_argument("--keep", type=Path, help="build the stores under DIR and reuse them")
    parser.add_argument("--locomo", type=Path, metavar="DIR",
                        help="with --all or --set time: bench/locomo.py --keep DIR's stores")
    parser.add_argument("--linked", action="store_true",
                        help="the labelled sets as written, then with their changes linked")
    parser.add_argument("--write-docs", action="store_true", help=docs_figures.HELP)
    args = parser.parse_args(argv)
    if args.locomo and not (args.all or args.set == "time"):
        parser.error("--locomo goes with --all or --set time")
    convs = recall_sets.locomo_sets(args.locomo) if args.locomo else []
    keep = args.keep or Path(tempfile.mkdtemp(prefix="forge-true-now-"))
    if args.linked:
        from forge.memory import conflicts

        rows = [row for name in LINKED_SETS for row in linked(name, keep)]
        with docs_figures.tee("true_now-linked", args.write_docs):
            print("forge recall --limit 10 (RECALL_SENTENCE on) on each labelled store as "
                  "written, then with `memory supersede OLD --by NEW` on the changes a reader "
                  "finds among the notes the MCP `remember` names (may_replace, up to "
                  f"{conflicts.MAY_REPLACE_ROWS}), and on every change")
            print(tabulate(rows, headers=["set", "", "n", "as written", "linked from may_replace",
                                          "every change linked"], tablefmt="github"))
        return 0
    alone = (READINGS, TIME_GROUPS) if args.set == "time" and not args.all else ()
    results = [run_set(name, keep, *alone) for name in (HELD_OUT if args.all else [args.set])]
    with docs_figures.tee("true_now" if args.all else f"true_now-{args.set}", args.write_docs):
        if args.all:
            rows = []
            for r in results:
                rows += [[r["name"], label, n, *cols] for label, n, *cols in r["rows"]]
            rows += recall_sets.rows(recall_sets.measured(recall_sets.small_sets(keep), convs))
            rows += [["time", *row] for row in run_set("time", keep)["rows"]]
            print("every set side by side: forge recall --limit 10's code; 'k/n (fraction)'; "
                  "the conflicts rows read no recall (the same in both columns)")
            print(tabulate(rows, headers=["set", "", "n", *SENTENCE], tablefmt="github"))
        for r in results:
            print_set(r)
        if convs and not args.all:
            locomo_time(convs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
