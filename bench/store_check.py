"""What your store does, measured on a fresh snapshot of it (the store itself is never opened).

    python bench/store_check.py distance [--sample 50] [--hit Q --expect ID ... --miss Q ...]
    python bench/store_check.py channels --hit Q --expect ID ... --miss Q ...
    python bench/store_check.py aggregate [--project P] [--apply]
    (each: [--db PATH] [--json]; cases as `forge calibrate` takes them, or --cases FILE)

- distance: with cases, each question's distance and rank as `forge calibrate` measures them;
  without, a sample of entries asked by their first 12 words (an easy hit: a floor for real
  hits), the distance to the entry itself and to the nearest other entry, as percentiles.
- channels: each question through `channels.search_hybrid` (`forge recall`'s code, the cutoff
  off): which channel returned a hit's entry and at which rank, the words admitted and the word
  rows that are not the answer ("dragged in").
- aggregate: `forge aggregate`'s pass as a dry run (each subject, its gate, the line it would
  fold into); `--apply` writes the folds into the copy and asks for every folded source by its
  own text: both channels must still return it.
"""
from __future__ import annotations

import harness


def percentiles(values: list[float]) -> dict[str, float | None]:
    import numpy as np

    if not values:
        return {"p10": None, "p50": None, "p90": None}
    return {f"p{p}": round(float(np.percentile(values, p)), 4) for p in (10, 50, 90)}


def self_sample(store, sample: int, project: str | None) -> dict:
    """A sample of entries, each asked by its first 12 words: the distance to itself and to the
    nearest other entry."""
    import numpy as np

    from forge.recall import calibrate, channels, many
    from forge.store import rag

    entries = [e for e in rag.list_entries(store, project=project) if e.content.strip()]
    chosen = entries[::max(1, len(entries) // max(1, sample))][:sample]
    vectors = many.embed_queries(store, [" ".join(e.content.split()[:12]) for e in chosen])
    own, other, first = [], [], 0
    for entry, vector in zip(chosen, vectors):
        near = channels.search_vector(store, vector, k=2, project=project)
        stored = calibrate.entry_vectors(store, [entry.id]).get(entry.id)
        if stored is None:
            continue
        own.append(float(np.linalg.norm(vector - stored)))
        other += [float(d) for i, d in near if i != entry.id][:1]
        first += bool(near and near[0][0] == entry.id)
    return {"sampled": len(own), "own": percentiles(own), "nearest_other": percentiles(other),
            "own_is_nearest": first}


def distance(args) -> int:
    """Where good hits sit: the cases' distances and ranks, or the store asked about itself."""
    from forge.recall import calibrate

    cases = harness.cases(args)
    with harness.snapshot_store(args) as store:
        if cases.hits or cases.misses:
            result = calibrate.calibrate(store, cases, vector_k=args.vector_k,
                                         lexical_k=args.lexical_k, project=args.project)
            rows = ([{"case": "hit", **h.to_dict()} for h in result.hits]
                    + [{"case": "miss", **m.to_dict()} for m in result.misses])
            harness.output(args, result.to_dict(), rows,
                           ["case", "question", "entry_id", "distance", "rank"],
                           [f"worst hit {result.worst_hit}, best miss {result.best_miss}, "
                            f"gap {result.gap}, fingerprint {result.fingerprint}"])
            return 0
        found = self_sample(store, args.sample, args.project)
        from forge.store import rag

        found["fingerprint"] = rag.query_fingerprint(store.settings, store.identity)
    rows = [{"distance to": "the entry itself (first 12 words asked)", **found["own"]},
            {"distance to": "the nearest other entry", **found["nearest_other"]}]
    harness.output(args, found, rows, ["distance to", "p10", "p50", "p90"],
                   [f"{found['sampled']} entries sampled; the entry itself came first for "
                    f"{found['own_is_nearest']}; fingerprint {found['fingerprint']}"])
    return 0


def channels(args) -> int:
    """Which channel reaches which entry, and what the words drag in."""
    from forge.recall import many

    cases = harness.cases(args)
    questions = [(h.question, h.expect) for h in cases.hits] + [(m, None) for m in cases.misses]
    if not questions:
        return harness.fail("give --hit/--expect, --miss or --cases FILE")
    with harness.snapshot_store(args) as store:
        batch = many.search_many(store, [q for q, _ in questions], project=args.project,
                                 vector_k=args.vector_k, lexical_k=args.lexical_k)
    rows = []
    for (question, expect), answer in zip(questions, batch.answers):
        result = answer.result
        vector = [r for r in result.rows if r.channel in ("vector", "both")]
        lexical = [r for r in result.rows if r.channel in ("lexical", "both")]
        lexical.sort(key=lambda r: r.bm25)
        v_rank = next((n for n, r in enumerate(vector, 1) if r.entry.id == expect), None)
        w_rank = next((n for n, r in enumerate(lexical, 1) if r.entry.id == expect), None)
        via = ("both" if v_rank and w_rank else "vector" if v_rank else "lexical" if w_rank
               else "none") if expect is not None else ""
        rows.append({"case": "hit" if expect is not None else "miss", "question": question,
                     "entry": expect, "via": via, "vector_rank": v_rank, "word_rank": w_rank,
                     "words": result.admitted_words,
                     "dragged_in": sum(r.entry.id != expect for r in lexical
                                       if r.channel == "lexical"),
                     "rows": len(result.rows)})
    hits = [r for r in rows if r["case"] == "hit"]
    counts = {k: sum(r["via"] == k for r in hits) for k in ("vector", "lexical", "both", "none")}
    document = {"questions": rows, "hits_by_channel": counts,
                "vector_k": args.vector_k, "lexical_k": args.lexical_k}
    lines = ["", "hits reached: " + ", ".join(f"{k} {n}" for k, n in counts.items())
             + f" (of {len(hits)}); word rows dragged in: "
             + f"{sum(r['dragged_in'] for r in rows)} over {len(rows)} questions"]
    harness.output(args, document, rows, ["case", "question", "entry", "via", "vector_rank",
                                          "word_rank", "words", "dragged_in"], lines)
    return 0


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


def aggregate(args) -> int:
    """The aggregation pass on the snapshot: what it would fold, and (--apply) what it did."""
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
    counts = ", ".join(f"{k} {v}" for k, v in report.counts().items())
    lines = [f"{len(report.subjects)} subjects over {report.entries_scanned} active entries "
             f"in {report.seconds:.3f} s: {counts}",
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


def main() -> int:
    p = harness.parser(__doc__.split("\n")[0])
    p.add_argument("what", choices=["distance", "channels", "aggregate"])
    p.add_argument("--sample", type=int, default=50,
                   help="distance: entries asked about themselves")
    p.add_argument("--apply", action="store_true",
                   help="aggregate: write the folds into the snapshot")
    args = p.parse_args()
    return {"distance": distance, "channels": channels, "aggregate": aggregate}[args.what](args)


if __name__ == "__main__":
    harness.run(main)
