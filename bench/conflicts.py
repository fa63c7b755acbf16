#!/usr/bin/env python3
"""Are the conflicts right? Precision and recall of `forge memory conflicts` on a labelled set and
on whole stores, and its time on a 10,000-entry store.

    python bench/conflicts.py [--keep DIR] [--locomo 300] [--remember] [--write-docs]
    python bench/conflicts.py --store DIR [--runs 9]   # also: time it on a real store

- pairs: bench/conflicts_cases.json, each pair in its own project: `conflicts.find` (`forge
  memory conflicts`) and `conflicts.remember` (`forge remember`'s note). Targets: recall >= 0.9,
  precision >= 0.95.
- whole stores: every case in one store, a mixed store (plus the aggregation cases, the personal
  sets and `--locomo N` LoCoMo texts) and the held-out bench/conflicts_heldout.json (never tuned
  on); every pair listed is scored, and recall's newer-first mark on the same labels.
- `--store DIR`: `forge memory conflicts --json` as a whole process, interleaved with `python -c
  "import click"` and `forge memory ls --nl`.
The protocol in full: docs/benchmarks/conflicts.md.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import harness
import docs_figures

ROOT = harness.ROOT
CASES = ROOT / "bench" / "conflicts_cases.json"
HELDOUT = ROOT / "bench" / "conflicts_heldout.json"


def _items(pairs: list[dict]) -> list[tuple[int, str, str, str]]:
    """(pair index, kind, project, content) of every entry, in writing order."""
    out = []
    for i, p in enumerate(pairs):
        out.append((i, p.get("kind_a", "fact"), f"p{i}", p["a"]))
        project_b = f"{p['project_b']}-{i}" if p.get("project_b") else f"p{i}"
        out.append((i, p.get("kind_b", "fact"), project_b, p["b"]))
    return out


def labelled(folder: Path) -> None:
    from forge.memory import conflicts
    from forge.store import rag
    from forge.core.settings import load_settings

    pairs = json.loads(CASES.read_text(encoding="utf-8"))["pairs"]
    items = _items(pairs)
    settings = load_settings({"FORGE_DATA_DIR": str(folder / "find")}, cwd=folder)
    started = time.perf_counter()
    with rag.open_store(settings) as store:
        written = rag.remember_many(store, [rag.NewEntry(k, c, p) for _, k, p, c in items])
        owner = {r.id: items[n][0] for n, r in enumerate(written)}
        report = conflicts.find(store)
    built = time.perf_counter() - started
    found = {}
    for c in report.conflicts:
        a, b = owner[c.ids[0]], owner[c.ids[1]]
        found[(a if a == b else (a, b))] = c
    expected = {i for i, p in enumerate(pairs) if p["expect"]}
    right = [k for k in found if k in expected]
    wrong = [k for k in found if k not in expected]
    missed = sorted(expected - set(found))

    # forge remember's path: write each pair's second entry after its first, one at a time.
    settings2 = load_settings({"FORGE_DATA_DIR": str(folder / "remember")}, cwd=folder)
    named = 0
    with rag.open_store(settings2) as store:
        first: dict[int, int] = {}
        for i, kind, project, content in items:
            noted = conflicts.remember(store, kind, content, project=project)
            if i in first and i in expected and first[i] in noted.conflict_ids:
                named += 1
            first.setdefault(i, noted.id)

    cats: dict[str, list[int]] = {}
    for i, p in enumerate(pairs):
        cats.setdefault(p["cat"], []).append(i)
    print(f"labelled set: {len(pairs)} pairs ({len(expected)} conflicts, "
          f"{len(pairs) - len(expected)} not), {len(items)} entries; built and scanned in "
          f"{built:.1f} s, conflicts.find {report.seconds * 1000:.1f} ms")
    print(f"{'category':14} {'pairs':>5} {'labelled':>8} {'listed':>6} {'right':>5}")
    for cat, ids in cats.items():
        lab = sum(1 for i in ids if pairs[i]["expect"])
        listed = sum(1 for i in ids if i in found)
        ok = sum(1 for i in ids if (i in found) == bool(pairs[i]["expect"]))
        print(f"{cat:14} {len(ids):5d} {lab:8d} {listed:6d} {ok:5d}")
    precision = len(right) / len(found) if found else 1.0
    recall = len(right) / len(expected) if expected else 1.0
    print(f"\nmemory conflicts: precision {precision:.2f} ({len(right)}/{len(found)}), "
          f"recall {recall:.2f} ({len(right)}/{len(expected)})   targets: >= 0.95, >= 0.9")
    print(f"remember's note:  recall {named / len(expected):.2f} ({named}/{len(expected)}) "
          "(the second entry of a conflict names the first)")
    for k in wrong:
        c = found[k]
        print(f"  listed, labelled not a conflict: {c.details} ({c.reason})")
    for i in missed:
        print(f"  missed: {pairs[i]['a']!r} / {pairs[i]['b']!r}")
    for k, c in sorted(found.items(), key=lambda kv: str(kv[0])):
        if k in expected:
            print(f"  {c.reason:26} {c.details[0]!r} / {c.details[1]!r}")


def timed(store_dir: Path, runs: int) -> None:
    from forge.store import db

    work = Path(tempfile.mkdtemp(prefix="forge-conflicts-"))
    try:
        db.snapshot(store_dir / "forge_rag.db", work / "forge_rag.db")
        env = {**os.environ, "FORGE_DATA_DIR": str(work), "PYTHONPATH": str(ROOT)}
        env.pop("EMBEDDING_URL", None)
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        forge = [sys.executable, "-m", "forge"]
        commands = {   # the warm-up run migrates the copy once
            harness.CLICK: ([sys.executable, "-c", "import click"], {}),
            "forge memory ls --nl": (forge + ["memory", "ls", "--nl"], {}),
            "forge memory conflicts --json": (forge + ["memory", "conflicts", "--json"], {}),
        }
        times = harness.interleaved(commands, runs, cwd=work, env=env)
        base = statistics.median(times[harness.CLICK])
        ls = statistics.median(times["forge memory ls --nl"])
        from forge.memory import conflicts
        from forge.store import rag

        with rag.open_store(harness.data_settings(work), mode="rows") as store:
            report = conflicts.find(store)   # what `memory conflicts --json` lists
        print(f"\nstore {store_dir} (copied): {report.entries_scanned} active entries, "
              f"{len(report.conflicts)} conflicting pairs listed")
        print(f"{'command':32} {'median ms':>10} {'x import click':>14} {'x memory ls':>12}")
        for name in commands:
            med = statistics.median(times[name])
            print(f"{name:32} {med:10.1f} {med / base:14.2f} {med / ls:12.2f}")
        print(f"conflicts.find in-process: {report.seconds * 1000:.0f} ms; {runs} runs each, "
              f"interleaved; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    finally:
        shutil.rmtree(work, ignore_errors=True)


# --------------------------------------------------------------------------- whole stores

AGGREGATE_CASES = ROOT / "tests" / "fixtures" / "aggregate_cases.json"
PERSONAL_SETS = ("personal_facts.json", "french_personal.json", "french_no_word.json")
# The aggregation cases whose point is their project: the only ones that keep it in a whole store.
OWN_PROJECT = ("two-projects", "two-projects-absorb")


@dataclass
class WholeStore:
    """Entries in writing order, each (case, kind, project, content), and the pairs (by
    (kind, project, content) keys) that conflict; every other pair is not a conflict."""

    name: str
    items: list[tuple[str, str, str | None, str]] = field(default_factory=list)
    expected: dict[frozenset, str] = field(default_factory=dict)
    second: set[frozenset] = field(default_factory=set)   # labelled by the second reading
    kinds: dict[frozenset, str] = field(default_factory=dict)   # negation | number | words

    def add(self, case: str, kind: str, project: str | None, content: str) -> tuple:
        self.items.append((case, kind, project, content))
        return (kind, project, content)


def labelled_store(cases: dict, name: str = "labelled pairs + machines") -> WholeStore:
    """Every labelled pair and the machines' notes in ONE store, one project (a pair about
    projects keeps its second entry in another): pairs across cases can now be listed."""
    whole = WholeStore(name)
    for i, p in enumerate(cases["pairs"]):
        a = whole.add(f"pair {i}", p.get("kind_a", "fact"), None, p["a"])
        b = whole.add(f"pair {i}", p.get("kind_b", "fact"), "another project" if
                      p.get("project_b") else None, p["b"])
        if p["expect"]:
            whole.expected[frozenset((a, b))] = p["cat"]
    keys = {n["key"]: whole.add("machines", "fact", None, n["content"])
            for n in cases["store"]["notes"]}
    for a, b, why in cases["store"]["conflicts"]:
        whole.expected[frozenset((keys[a], keys[b]))] = f"machines: {why}"
    return with_cross(whole, cases)


def with_cross(whole: WholeStore, cases: dict) -> WholeStore:
    """The pairs across cases a reader of the one store calls conflicts (`cross`: the same
    named thing, the NiPoGi said to have and not to have 32 Go), when both are in it."""
    present = {(k, p, c) for _, k, p, c in whole.items}
    for pair in cases["cross"]:
        a, b = (("fact", None, pair["a"]), ("fact", None, pair["b"]))
        if a in present and b in present:
            whole.expected[frozenset((a, b))] = f"across cases: {pair['why']}"
            if pair.get("reading") == 2:
                whole.second.add(frozenset((a, b)))
    return whole


def mixed_store(cases: dict, locomo: int) -> WholeStore:
    """The labelled store, plus the aggregation cases and their context (one project, but for
    the cases about projects), the personal sets of tests/fixtures and `locomo` LoCoMo texts
    (a spread of bench/locomo_store.py's shapes): a lived-in store of several subjects."""
    whole = labelled_store(cases, f"mixed: labelled + aggregation + personal sets + {locomo} LoCoMo")
    agg = json.loads(AGGREGATE_CASES.read_text(encoding="utf-8"))
    for note in agg["context"]["notes"]:
        whole.add("aggregation context", note["kind"], None, note["content"])
    conflicting = set(cases["aggregate_conflicts"])
    for case in agg["cases"]:
        keys = [whole.add(f"aggregation {case['name']}", e["kind"],
                          e["project"] if case["name"] in OWN_PROJECT else None, e["content"])
                for e in case["entries"]]
        if case["name"] in conflicting:
            whole.expected[frozenset(keys)] = f"aggregation: {case['name']}"
    for fixture in PERSONAL_SETS:
        data = json.loads((ROOT / "tests" / "fixtures" / fixture).read_text(encoding="utf-8"))
        for e in data["entries"]:
            whole.add(fixture, e["kind"], None, e["content"])
    if locomo:
        from locomo_store import texts

        from locomo import DEFAULT_DATA   # FORGE_LOCOMO, or the data beside the checkout

        every = texts(DEFAULT_DATA, 10_000)
        for n, text in enumerate(every[:: max(1, len(every) // locomo)][:locomo]):
            whole.add(f"locomo {n}", "fact", None, text)
    return with_cross(whole, cases)


def heldout_store() -> WholeStore:
    """One person's store, written and labelled before the rules it scores were changed
    (bench/conflicts_heldout.json): every pair a careful reader calls a conflict, with its kind
    (`words`: a value said in words replaced by another, which no rule reads as a conflict)."""
    data = json.loads(HELDOUT.read_text(encoding="utf-8"))
    whole = WholeStore("held-out: one person's store")
    keys = {n["key"]: whole.add("held-out", "fact", None, n["content"]) for n in data["notes"]}
    for a, b, kind, why in data["conflicts"]:
        pair = frozenset((keys[a], keys[b]))
        whole.expected[pair] = f"held-out: {why}"
        whole.kinds[pair] = kind
    return whole


def score_store(folder: Path, whole: WholeStore, *, remember_path: bool = False) -> dict:
    """Write the store, list its conflicts (conflicts.find) and score every pair listed."""
    from forge.memory import conflicts
    from forge.store import rag
    from forge.core.settings import load_settings

    settings = load_settings({"FORGE_DATA_DIR": str(folder / "find")}, cwd=folder)
    with rag.open_store(settings) as store:
        # written once under --keep DIR (the embedding is the slow part), read again after
        written = rag.remember_many(store, [rag.NewEntry(k, c, p) for _, k, p, c in whole.items])
        report = conflicts.find(store)
    key_of = {r.id: (k, p, c) for r, (_, k, p, c) in zip(written, whole.items)}
    cases_of: dict[int, set[str]] = {}
    for r, (case, *_rest) in zip(written, whole.items):
        cases_of.setdefault(r.id, set()).add(case)
    found = {frozenset((key_of[c.ids[0]], key_of[c.ids[1]])): c for c in report.conflicts}
    right = [k for k in found if k in whole.expected]
    wrong = [(found[k], not (cases_of[found[k].ids[0]] & cases_of[found[k].ids[1]]))
             for k in found if k not in whole.expected]
    missed = [k for k in whole.expected if k not in found]
    first = set(whole.expected) - whole.second
    out = {"store": whole.name, "entries": len({r.id for r in written}),
           "active": report.entries_scanned, "listed": len(found), "right": len(right),
           "expected": len(whole.expected), "wrong": wrong, "missed": missed,
           "seconds": report.seconds, "first": len(first), "kinds": whole.kinds,
           "first_right": len(first & set(found)), "second": len(whole.second),
           "by_kind": {kind: (sum(1 for k, v in whole.kinds.items() if v == kind and k in found),
                              sum(1 for v in whole.kinds.values() if v == kind))
                       for kind in sorted(set(whole.kinds.values()))}}
    if remember_path:
        # forge remember's note, one write at a time: every pair it names is scored alike
        fresh = Path(tempfile.mkdtemp(prefix="forge-conflicts-remember-"))
        settings2 = load_settings({"FORGE_DATA_DIR": str(fresh)}, cwd=fresh)
        named: set[frozenset] = set()
        with rag.open_store(settings2) as store:
            keys: dict[int, tuple] = {}
            for _, kind, project, content in whole.items:
                noted = conflicts.remember(store, kind, content, project=project)
                keys[noted.id] = (kind, project, content)
                named.update(frozenset((keys[noted.id], keys[o])) for o in noted.conflict_ids)
        shutil.rmtree(fresh, ignore_errors=True)
        out["remember"] = {"named": len(named), "right": len(named & set(whole.expected))}
    return out


def newer_pairs(entries: list) -> set[tuple[int, int]]:
    """The pairs recall's newer-first marks (core/facts.changed_fact, as timeline.newer_first
    reads two rows: the names judged on the notes compared, here the two), among every pair of
    active deliberate entries of one kind and project."""
    from forge.core import facts

    held = {e.id: facts.held(e.content) for e in entries}
    out = set()
    for i, a in enumerate(entries):
        for b in entries[i + 1:]:
            if a.kind != b.kind or a.project != b.project or not held[a.id].may_change(held[b.id]):
                continue
            seen = facts.evidence([a.content, b.content])
            sa, sb = facts.read_side(a, seen), facts.read_side(b, seen)
            if sa is not None and sb is not None and facts.changed_fact(sa, sb):
                out.add((a.id, b.id))
    return out


def score_newer(folder: Path, whole: WholeStore) -> dict:
    """Recall's newer-first mark on every pair of the store: precision and recall against the
    same labels (a conflict is a changed fact; no pair of these stores gives a value said to
    have changed, the shape newer-first adds: bench/time_questions.py's set holds those)."""
    from forge.core.settings import load_settings
    from forge.store import rag

    settings = load_settings({"FORGE_DATA_DIR": str(folder / "find")}, cwd=folder)
    with rag.open_store(settings) as store:
        written = rag.remember_many(store, [rag.NewEntry(k, c, p) for _, k, p, c in whole.items])
        entries = [e for e in rag.hot_entries(store)]
    key_of = {r.id: (k, p, c) for r, (_, k, p, c) in zip(written, whole.items)}
    started = time.process_time()
    marked = {frozenset((key_of[a], key_of[b])) for a, b in newer_pairs(entries)}
    seconds = time.process_time() - started
    right = marked & set(whole.expected)
    return {"store": whole.name, "marked": len(marked), "right": len(right),
            "expected": len(whole.expected), "seconds": seconds,
            "wrong": sorted(sorted(k[2] for k in p) for p in marked - right),
            "missed": len(set(whole.expected) - marked)}


def print_newer(r: dict) -> None:
    print(f"newer-first mark (every pair, {r['seconds']:.1f} s CPU): precision "
          f"{r['right'] / max(1, r['marked']):.2f} ({r['right']}/{r['marked']}), recall "
          f"{r['right'] / r['expected']:.2f} ({r['right']}/{r['expected']}); the pairs missed "
          "are those memory conflicts misses")
    for a, b in r["wrong"]:
        print(f"  marked, not a changed fact: {a!r} / {b!r}")


def print_store(r: dict) -> None:
    precision = r["right"] / r["listed"] if r["listed"] else 1.0
    recall = r["right"] / r["expected"] if r["expected"] else 1.0
    print(f"\nwhole store, {r['store']}: {r['entries']} entries ({r['active']} active), "
          f"{r['expected']} conflicting pairs labelled; conflicts.find {r['seconds'] * 1000:.0f} ms")
    print(f"memory conflicts: precision {precision:.2f} ({r['right']}/{r['listed']}), "
          f"recall {recall:.2f} ({r['right']}/{r['expected']})   targets: >= 0.9, >= 0.9")
    if r["second"]:
        print(f"  recall on the {r['first']} pairs labelled before the second reading of `cross` "
              f"added {r['second']}: {r['first_right'] / r['first']:.2f} "
              f"({r['first_right']}/{r['first']})")
    if r["by_kind"]:
        print("  recall by kind: " + ", ".join(f"{kind} {n}/{of}"
                                               for kind, (n, of) in r["by_kind"].items()))
        ruled = [v for kind, v in r["by_kind"].items() if kind != "words"]
        n, of = sum(v[0] for v in ruled), sum(v[1] for v in ruled)
        print(f"  recall on the {of} pairs said otherwise by a negation or a number: "
              f"{n / of:.2f} ({n}/{of})")
    if "remember" in r:
        rem = r["remember"]
        print(f"remember's note:  precision {rem['right'] / max(1, rem['named']):.2f} "
              f"({rem['right']}/{rem['named']}), recall {rem['right'] / r['expected']:.2f} "
              f"({rem['right']}/{r['expected']})")
    for c, across in r["wrong"]:
        print(f"  listed, not a conflict{' (across cases)' if across else ''}: "
              f"{c.contents[0]!r} / {c.contents[1]!r} ({c.reason})")
    for k in r["missed"]:
        a, b = sorted(k, key=lambda key: key[2])
        kind = r["kinds"].get(k)
        print(f"  missed{f' ({kind})' if kind else ''}: {a[2]!r} / {b[2]!r}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, help="also time memory conflicts on this store")
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--locomo", type=int, default=300, metavar="N",
                        help="LoCoMo texts in the mixed store (0: none)")
    parser.add_argument("--keep", type=Path, metavar="DIR",
                        help="write the whole stores under DIR once and reuse them")
    parser.add_argument("--skip-pairs", action="store_true",
                        help="only the whole stores (not the pair-level set)")
    parser.add_argument("--remember", action="store_true",
                        help="also score forge remember's note on the whole stores (one write each)")
    parser.add_argument("--write-docs", action="store_true", help=docs_figures.HELP)
    args = parser.parse_args()
    with docs_figures.tee("conflicts", args.write_docs):
        folder = Path(tempfile.mkdtemp(prefix="forge-conflicts-set-"))
        try:
            if not args.skip_pairs:
                labelled(folder)
            cases = json.loads(CASES.read_text(encoding="utf-8"))
            base = args.keep or folder
            stores = (labelled_store(cases), mixed_store(cases, args.locomo), heldout_store())
            for n, whole in enumerate(stores):
                store_dir = base / f"whole-{n}-{len(whole.items)}"
                print_store(score_store(store_dir, whole, remember_path=args.remember))
                print_newer(score_newer(store_dir, whole))
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        if args.store:
            timed(args.store, args.runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
