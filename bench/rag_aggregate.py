"""The aggregation pass (`forge aggregate`'s code) on a fresh snapshot of the store.

    python bench/rag_aggregate.py [--db PATH] [--project P] [--apply] [--json]

Without `--apply`, the dry run: each subject, its gate and the line it would fold into. With it,
the folds are written to the copy, then read back: the hot block before and after, and whether
both channels still find every folded source. The store itself is never opened.
"""
from __future__ import annotations

import harness


def channels_keep_sources(store, report) -> dict:
    """Every folded source, asked for by its own text: does recall still return it?"""
    from forge.memory import aggregate
    from forge.store import rag
    from forge.recall import channels

    sources = [i for s in report.subjects if s.outcome in (aggregate.WRITTEN, aggregate.ABSORBED)
               for i in s.sources]
    found = 0
    for entry_id in sources:
        entry = rag.get_entry(store, entry_id)
        result = channels.search_hybrid(store, entry.content, vector_k=10, lexical_k=10,
                                   project=entry.project)
        found += any(row.entry.id == entry_id for row in result.rows)
    return {"folded_sources": len(sources), "still_recalled": found}


def main() -> int:
    p = harness.parser(__doc__.split("\n")[0], cases=False)
    p.add_argument("--apply", action="store_true", help="write the folds into the snapshot")
    args = p.parse_args()
    from forge.memory import aggregate

    with harness.snapshot_store(args, readonly=False) as store:
        report = aggregate.run(store, project=args.project, apply=args.apply)
        document = report.to_dict()
        if args.apply:
            document["recall"] = channels_keep_sources(store, report)
    rows = [{"subject": s.name, "kind": s.kind, "project": s.project or "",
             "members": s.members, "outcome": s.outcome, "gate": s.gate or "",
             "line": s.line or (f"#{s.into}" if s.into else "")} for s in report.subjects]
    before, after = report.block_before, report.block_after
    lines = [f"{len(report.subjects)} subjects over {report.entries_scanned} active entries "
             f"in {report.seconds:.3f} s: " + ", ".join(f"{k} {v}" for k, v in report.counts().items()),
             f"hot block: {before.entries} entries / {before.tokens} tokens before, "
             f"{after.entries} / {after.tokens} after"]
    if args.apply:
        kept = document["recall"]
        lines.append(f"recall still returns {kept['still_recalled']} of {kept['folded_sources']} "
                     "folded sources (asked by their own text)")
    lines.append("ran on a snapshot; the store itself was not opened" if not args.apply
                 else "written to a snapshot; the store itself was not opened")
    harness.output(args, document, rows,
                   ["subject", "kind", "project", "members", "outcome", "gate", "line"], lines)
    return 0


if __name__ == "__main__":
    harness.run(main)
