"""Which channel reaches which entry, and what the words drag in (on a fresh snapshot).

    python bench/rag_hybrid.py --hit Q --expect ID ... --miss Q ... [--db PATH] [--json]

Each question through `channels.search_hybrid` (`forge recall`'s code, the cutoff off): for a
hit, which channel returned its entry and at which rank; for every question, the words admitted
and the word rows that are not the answer ("dragged in").
"""
from __future__ import annotations

import harness


def main() -> int:
    args = harness.parser(__doc__.split("\n")[0]).parse_args()
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


if __name__ == "__main__":
    harness.run(main)
