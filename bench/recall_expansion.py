"""What asking again in other words rescues, and what it lets in (on a fresh snapshot).

    python bench/recall_expansion.py --cases FILE [--llm 3] [--db PATH] [--json]

The cases file is `forge calibrate`'s, with optional `rephrasings:` per question:

    hits:
      - question: Tu peux me lister mon matériel ?
        expect: 1
        rephrasings:
          - Quel matériel est-ce que j'ai ?
          - Quelles machines ai-je ?
    misses:
      - question: Comment s'appelle mon chat ?
        rephrasings:
          - Quel est le nom de mon chat ?

`--llm N` also asks the chat model (LLAMA_CPP_URL) for N rephrasings of each question; the
rephrasings it wrote are in the --json output. Expansion is the union of the searches: a hit
counts as reached when any phrasing's vector budget reaches its entry, and its distance is the
best phrasing's; a miss's nearest entry is the nearest over all its phrasings. The table shows,
per question, the original against the expanded figures; below it, what the expansion rescued
(hits the original question did not reach) and what it let in (misses that come nearer than the
cutoff the original questions would have proposed).
"""
from __future__ import annotations

import harness


def rephrasings_from_file(path) -> dict[str, list[str]]:
    import yaml

    if path is None:
        return {}
    doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    out: dict[str, list[str]] = {}
    for item in (doc.get("hits") or []) + (doc.get("misses") or []):
        if isinstance(item, dict) and isinstance(item.get("question"), str):
            out[item["question"].strip()] = [str(r).strip() for r in item.get("rephrasings") or []]
    return out


def rephrasings_from_llm(settings, questions: list[str], n: int) -> dict[str, list[str]]:
    from forge.core.llm import ChatClient

    out: dict[str, list[str]] = {}
    with ChatClient(settings) as client:
        for question in questions:
            reply = client.complete([{"role": "user", "content": (
                f"Rephrase this question {n} different ways, in the same language, one per line, "
                f"without numbering or comments:\n{question}")}], max_tokens=200, temperature=0.7)
            lines = [line.strip(" -*\t0123456789.)") for line in reply.content.splitlines()]
            out[question] = [line for line in lines if line and line != question][:n]
    return out


def main() -> int:
    p = harness.parser(__doc__.split("\n")[0])
    p.add_argument("--llm", type=int, default=0, metavar="N",
                   help="ask the chat model for N rephrasings of each question")
    args = p.parse_args()
    from forge.recall import calibrate

    cases = harness.cases(args)
    settings = harness.settings()
    given = rephrasings_from_file(args.cases)
    questions = [h.question for h in cases.hits] + list(cases.misses)
    asked = rephrasings_from_llm(settings, questions, args.llm) if args.llm else {}
    variants = {q: [q] + given.get(q, []) + [r for r in asked.get(q, []) if r not in given.get(q, [])]
                for q in questions}
    flat = calibrate.Cases(
        [calibrate.HitCase(v, h.expect) for h in cases.hits for v in variants[h.question]],
        [v for m in cases.misses for v in variants[m]])
    with harness.snapshot_store(args, settings) as store:
        result = calibrate.calibrate(store, flat, vector_k=args.vector_k,
                                     lexical_k=args.lexical_k, project=args.project)
    hits, misses = iter(result.hits), iter(result.misses)
    rows = []
    for kind, group in [("hit", [h.question for h in cases.hits]), ("miss", list(cases.misses))]:
        for question in group:
            measured = [next(hits if kind == "hit" else misses) for _ in variants[question]]
            original, best = measured[0], min(measured, key=lambda m: m.distance or 9.0)
            rows.append({"case": kind, "question": question, "phrasings": len(measured),
                         "entry": original.entry_id, "original": original.distance,
                         "expanded": best.distance, "by": best.question if best is not original else "",
                         "reached": original.in_top_k, "reached_expanded": any(m.in_top_k for m in measured)})
    hit_rows = [r for r in rows if r["case"] == "hit"]
    miss_rows = [r for r in rows if r["case"] == "miss"]
    before = calibrate.propose(max(r["original"] for r in hit_rows), min(r["original"] for r in miss_rows))
    worst = {k: max(r[k] for r in hit_rows) for k in ("original", "expanded")}
    nearest = {k: min(r[k] for r in miss_rows) for k in ("original", "expanded")}
    rescued = [r["question"] for r in hit_rows if r["reached_expanded"] and not r["reached"]]
    let_in = [r["question"] for r in miss_rows if before is not None and r["expanded"] <= before < r["original"]]
    document = {"questions": rows, "worst_hit": worst, "best_miss": nearest,
                "gap": {k: round(nearest[k] - worst[k], 4) for k in worst},
                "cutoff_before": before, "rescued": rescued, "let_in": let_in,
                "rephrasings": {q: v[1:] for q, v in variants.items()},
                "fingerprint": result.fingerprint}
    lines = ["", f"gap original {document['gap']['original']:+.4f}, expanded "
                 f"{document['gap']['expanded']:+.4f} (worst hit {worst['original']:.4f} -> "
                 f"{worst['expanded']:.4f}, best miss {nearest['original']:.4f} -> {nearest['expanded']:.4f})",
             f"rescued (the original question's budget missed the entry): {len(rescued)} "
             f"{rescued or ''}".rstrip(),
             f"let in (nearer than the original proposal {before}): {len(let_in)} {let_in or ''}".rstrip()]
    harness.output(args, document, rows, ["case", "question", "phrasings", "entry", "original",
                                          "expanded", "reached", "reached_expanded"], lines)
    return 0


if __name__ == "__main__":
    harness.run(main)
