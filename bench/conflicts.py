#!/usr/bin/env python3
"""Are the conflicts right? Precision and recall of `forge memory conflicts` (and of `forge
remember`'s note) on labelled pairs and on whole stores.

    python bench/conflicts.py [--keep DIR] [--locomo 300] [--write-docs]

Sets: bench/conflicts_cases.json (each pair in its own project, then every case in one store and
a mixed store of several subjects) and the held-out bench/conflicts_heldout.json; each whole
store also scores recall's newer-first mark, and the pairs `forge remember`'s note. Targets:
pairs recall >= 0.9, precision >= 0.95; whole stores >= 0.9 both. The protocol:
docs/benchmarks/conflicts.md.
"""
from __future__ import annotations

import argparse
import json
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
    pairs: list[frozenset] = field(default_factory=list)   # the labelled pairs, in order

    def add(self, case: str, kind: str, project: str | None, content: str) -> tuple:
        self.items.append((case, kind, project, content))
        return (kind, project, content)


def pairs_store(cases: dict, name: str, own_projects: bool) -> WholeStore:
    """Every labelled pair: `own_projects`, each in a project of its own (a pair can only be
    listed with its partner); else all in one project (a pair about projects keeps its second
    entry in another), with the machines' notes."""
    whole = WholeStore(name)
    for i, p in enumerate(cases["pairs"]):
        if own_projects:
            project_a = f"p{i}"
            project_b = f"{p['project_b']}-{i}" if p.get("project_b") else project_a
        else:
            project_a, project_b = None, "another project" if p.get("project_b") else None
        a = whole.add(f"pair {i}", p.get("kind_a", "fact"), project_a, p["a"])
        b = whole.add(f"pair {i}", p.get("kind_b", "fact"), project_b, p["b"])
        whole.pairs.append(frozenset((a, b)))
        if p["expect"]:
            whole.expected[frozenset((a, b))] = p["cat"]
    if own_projects:
        return whole
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
    whole = pairs_store(cases, f"mixed: labelled + aggregation + personal sets + {locomo} LoCoMo",
                        own_projects=False)
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
    """One person's store, written and labelled before the rules it scores were changed: every
    pair a careful reader calls a conflict, with its kind (`words`: a value said in words
    replaced by another, which no rule reads as a conflict)."""
    data = json.loads(HELDOUT.read_text(encoding="utf-8"))
    whole = WholeStore("held-out: one person's store")
    keys = {n["key"]: whole.add("held-out", "fact", None, n["content"]) for n in data["notes"]}
    for a, b, kind, why in data["conflicts"]:
        pair = frozenset((keys[a], keys[b]))
        whole.expected[pair] = f"held-out: {why}"
        whole.kinds[pair] = kind
    return whole


def score_store(folder: Path, whole: WholeStore, *, remember: bool = False) -> dict:
    """Write the store (once under --keep DIR: the embedding is the slow part), list its
    conflicts (conflicts.find), score every pair listed and recall's newer-first mark;
    `remember`: the labelled conflicts `forge remember`'s note names, one write at a time."""
    from forge.memory import conflicts
    from forge.store import rag

    started = time.perf_counter()
    with rag.open_store(harness.data_settings(folder / "find")) as store:
        written = rag.remember_many(store, [rag.NewEntry(k, c, p) for _, k, p, c in whole.items])
        report = conflicts.find(store)
        entries = list(rag.hot_entries(store))
    built = time.perf_counter() - started
    key_of = {r.id: (k, p, c) for r, (_, k, p, c) in zip(written, whole.items)}
    cases_of: dict[int, set[str]] = {}
    for r, (case, *_rest) in zip(written, whole.items):
        cases_of.setdefault(r.id, set()).add(case)
    found = {frozenset((key_of[c.ids[0]], key_of[c.ids[1]])): c for c in report.conflicts}
    first = set(whole.expected) - whole.second
    started = time.process_time()
    marked = {frozenset((key_of[a], key_of[b])) for a, b in newer_pairs(entries)}
    wrong_marks = marked - set(whole.expected)
    out = {"store": whole.name, "entries": len({r.id for r in written}), "built": built,
           "active": report.entries_scanned, "listed": len(found), "found": found,
           "right": sum(k in whole.expected for k in found), "expected": len(whole.expected),
           "wrong": [(found[k], not (cases_of[found[k].ids[0]] & cases_of[found[k].ids[1]]))
                     for k in found if k not in whole.expected],
           "missed": [k for k in whole.expected if k not in found],
           "seconds": report.seconds, "first": len(first), "kinds": whole.kinds,
           "first_right": len(first & set(found)), "second": len(whole.second),
           "by_kind": {kind: (sum(1 for k, v in whole.kinds.items() if v == kind and k in found),
                              sum(1 for v in whole.kinds.values() if v == kind))
                       for kind in sorted(set(whole.kinds.values()))},
           "newer": {"seconds": time.process_time() - started, "marked": len(marked),
                     "right": len(marked & set(whole.expected)),
                     "wrong": sorted(sorted(k[2] for k in p) for p in wrong_marks)}}
    if remember:
        named: set[frozenset] = set()
        with tempfile.TemporaryDirectory(prefix="forge-conflicts-remember-") as fresh:
            with rag.open_store(harness.data_settings(fresh)) as store:
                keys: dict[int, tuple] = {}
                for _, kind, project, content in whole.items:
                    noted = conflicts.remember(store, kind, content, project=project)
                    keys[noted.id] = (kind, project, content)
                    named.update(frozenset((keys[noted.id], keys[o])) for o in noted.conflict_ids)
        out["remember"] = len(named & set(whole.expected))
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


def print_pairs(r: dict, whole: WholeStore, pairs: list[dict]) -> None:
    """The labelled pairs, each in its own project: by category, then every pair listed."""
    listed = [k in r["found"] for k in whole.pairs]
    print(f"labelled set: {len(pairs)} pairs ({r['expected']} conflicts, "
          f"{len(pairs) - r['expected']} not), {len(whole.items)} entries; built and scanned in "
          f"{r['built']:.1f} s, conflicts.find {r['seconds'] * 1000:.1f} ms")
    print(f"{'category':14} {'pairs':>5} {'labelled':>8} {'listed':>6} {'right':>5}")
    for cat in dict.fromkeys(p["cat"] for p in pairs):
        ids = [i for i, p in enumerate(pairs) if p["cat"] == cat]
        lab = sum(1 for i in ids if pairs[i]["expect"])
        ok = sum(1 for i in ids if listed[i] == bool(pairs[i]["expect"]))
        print(f"{cat:14} {len(ids):5d} {lab:8d} {sum(listed[i] for i in ids):6d} {ok:5d}")
    precision = r["right"] / r["listed"] if r["listed"] else 1.0
    print(f"\nmemory conflicts: precision {precision:.2f} "
          f"({r['right']}/{r['listed']}), recall {r['right'] / r['expected']:.2f} "
          f"({r['right']}/{r['expected']})   targets: >= 0.95, >= 0.9")
    named = r["remember"]
    print(f"remember's note:  recall {named / r['expected']:.2f} ({named}/{r['expected']}) "
          "(the second entry of a conflict names the first)")
    for c, _ in r["wrong"]:
        print(f"  listed, labelled not a conflict: {c.details} ({c.reason})")
    for i in sorted(i for i, p in enumerate(pairs) if p["expect"] and not listed[i]):
        print(f"  missed: {pairs[i]['a']!r} / {pairs[i]['b']!r}")
    for i in sorted((i for i, p in enumerate(pairs) if p["expect"] and listed[i]), key=str):
        c = r["found"][whole.pairs[i]]
        print(f"  {c.reason:26} {c.details[0]!r} / {c.details[1]!r}")


def print_store(r: dict) -> None:
    precision = r["right"] / r["listed"] if r["listed"] else 1.0
    recall = r["right"] / r["expected"] if r["expected"] else 1.0
    print(f"\nwhole store, {r['store']}: {r['entries']} entries ({r['active']} active), "
          f"{r['expected']} conflicting pairs labelled; "
          f"conflicts.find {r['seconds'] * 1000:.0f} ms")
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
    for c, across in r["wrong"]:
        print(f"  listed, not a conflict{' (across cases)' if across else ''}: "
              f"{c.contents[0]!r} / {c.contents[1]!r} ({c.reason})")
    for k in r["missed"]:
        a, b = sorted(k, key=lambda key: key[2])
        kind = r["kinds"].get(k)
        print(f"  missed{f' ({kind})' if kind else ''}: {a[2]!r} / {b[2]!r}")
    new = r["newer"]
    print(f"newer-first mark (every pair, {new['seconds']:.1f} s CPU): precision "
          f"{new['right'] / max(1, new['marked']):.2f} ({new['right']}/{new['marked']}), recall "
          f"{new['right'] / r['expected']:.2f} ({new['right']}/{r['expected']}); the pairs missed "
          "are those memory conflicts misses")
    for a, b in new["wrong"]:
        print(f"  marked, not a changed fact: {a!r} / {b!r}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--locomo", type=int, default=300, metavar="N",
                        help="LoCoMo texts in the mixed store (0: none)")
    parser.add_argument("--keep", type=Path, metavar="DIR",
                        help="write the whole stores under DIR once and reuse them")
    parser.add_argument("--write-docs", action="store_true", help=docs_figures.HELP)
    args = parser.parse_args()
    with docs_figures.tee("conflicts", args.write_docs), \
            tempfile.TemporaryDirectory(prefix="forge-conflicts-set-") as scratch:
        cases = json.loads(CASES.read_text(encoding="utf-8"))
        pairs = pairs_store(cases, "labelled pairs", own_projects=True)
        print_pairs(score_store(Path(scratch) / "pairs", pairs, remember=True), pairs,
                    cases["pairs"])
        stores = (pairs_store(cases, "labelled pairs + machines", own_projects=False),
                  mixed_store(cases, args.locomo), heldout_store())
        for n, whole in enumerate(stores):
            folder = args.keep or Path(scratch)
            print_store(score_store(folder / f"whole-{n}-{len(whole.items)}", whole))
    return 0


if __name__ == "__main__":
    sys.exit(main())
