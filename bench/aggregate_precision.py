#!/usr/bin/env python3
"""Is the aggregation tier right? Fold precision and recall on the labelled set, and the token
saving of the hot block.

Builds a store from tests/fixtures/aggregate_cases.json (79 labelled entries in 37 cases, French
and English, plus archive exchanges and unrelated notes as context; embedded with the embedded
model, nothing else needed), runs the real pass (`forge.memory.aggregate.run`, dry run: the plan is
what --apply would write), and prints:

- precision = folds that were right / folds made (must be 1.00: a wrong fold rewrites what a
  user said),
- recall = cases folded / cases that should fold (fold or absorb),
- the hot block before and after, in entries and estimated tokens (no budget cut).

    python bench/aggregate_precision.py            # a temporary store
    python bench/aggregate_precision.py --keep DIR # keep the store in DIR (re-used if there)

The set holds negations inside longer lines (the `negation-long-*` cases: never folded, the
`conflict` gate refuses them) and own negations that must still be absorbed (`own-negation-*`).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, help="build (or re-use) the store in this folder")
    sys.path.insert(0, str(ROOT / "bench"))
    import docs_figures

    parser.add_argument("--write-docs", action="store_true", help=docs_figures.HELP)
    args = parser.parse_args()
    with docs_figures.tee("aggregate_precision", args.write_docs):
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    from fixtures.aggregate_cases import CASES, build_store, score

    from forge.memory import aggregate
    from forge.store import rag
    from forge.recall.hot_memory import render_hot_block
    from forge.core.settings import load_settings

    folder = args.keep or Path(tempfile.mkdtemp(prefix="forge-aggregate-"))
    folder.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    if (folder / "forge_rag.db").exists():
        (folder / "forge_rag.db").unlink()
    _, cases = build_store(folder)
    built = time.perf_counter() - started
    settings = load_settings({"FORGE_DATA_DIR": str(folder)}, cwd=folder)
    with rag.open_store(settings) as store:
        report = aggregate.run(store)
        before = rag.hot_entries(store)
    after = aggregate._after(before, report.subjects)
    tokens_before = render_hot_block(before, max_tokens=10**9).tokens
    tokens_after = render_hot_block(after, max_tokens=10**9).tokens
    s = score(report.subjects, cases)
    owner = {i: name for name, ids in cases.items() for i in ids}
    print(f"store: {sum(len(c['entries']) for c in CASES)} labelled entries in {len(CASES)} cases "
          f"(+ context), built in {built:.1f} s; pass {report.seconds * 1000:.0f} ms")
    print(f"{'case':24} {'expect':7} outcome")
    for subject in report.subjects:
        name = owner.get(subject.members[0], "context")
        expect = next((c["expect"] for c in CASES if c["name"] == name), "-")
        what = subject.outcome + (f" ({subject.gate})" if subject.gate else "")
        print(f"{name:24} {expect:7} {what}")
    print()
    print(f"fold precision  {s.precision:.2f}  ({s.right} right / {s.made} made)")
    print(f"fold recall     {s.recall:.2f}  ({s.folded} folded / {s.expected} that should)")
    saving = 1 - tokens_after / tokens_before if tokens_before else 0.0
    print(f"hot block       {len(before)} entries / {tokens_before} tokens -> {len(after)} / "
          f"{tokens_after} ({saving:.1%} fewer tokens)")
    for line in s.wrong:
        print(f"WRONG: {line}")
    for name in s.missed:
        print(f"missed: {name}")
    return 0 if s.precision == 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
