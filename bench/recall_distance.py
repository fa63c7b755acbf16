"""Where good hits sit on this store, with this embedder (on a fresh snapshot).

    python bench/recall_distance.py [--db PATH] [--sample 50] [--hit Q --expect ID ...] [--json]

With cases: each question's distance and rank as `forge calibrate` measures them. Without: a
sample of entries asked by their first 12 words (an easy hit: a floor for real hits), the
distance to the entry itself and to the nearest other entry, as percentiles.
"""
from __future__ import annotations

import harness


def percentiles(values: list[float]) -> dict[str, float | None]:
    import numpy as np

    if not values:
        return {"p10": None, "p50": None, "p90": None}
    return {f"p{p}": round(float(np.percentile(values, p)), 4) for p in (10, 50, 90)}


def self_sample(store, sample: int, project: str | None) -> dict:
    import numpy as np

    from forge.recall import calibrate, many
    from forge.store import rag
    from forge.recall import channels

    entries = [e for e in rag.list_entries(store, project=project) if e.content.strip()]
    step = max(1, len(entries) // max(1, sample))
    chosen = entries[::step][:sample]
    questions = [" ".join(e.content.split()[:12]) for e in chosen]
    vectors = many.embed_queries(store, questions)
    own, other, ranks = [], [], []
    for entry, vector in zip(chosen, vectors):
        near = channels.search_vector(store, vector, k=2, project=project)
        stored = calibrate.entry_vectors(store, [entry.id]).get(entry.id)
        if stored is None:
            continue
        d_own = float(np.linalg.norm(vector - stored))
        own.append(d_own)
        others = [d for i, d in near if i != entry.id]
        if others:
            other.append(float(others[0]))
        ranks.append(1 if near and near[0][0] == entry.id else 2)
    return {"sampled": len(own), "own": percentiles(own), "nearest_other": percentiles(other),
            "own_is_nearest": sum(r == 1 for r in ranks)}


def main() -> int:
    p = harness.parser(__doc__.split("\n")[0])
    p.add_argument("--sample", type=int, default=50, help="entries asked about themselves")
    args = p.parse_args()
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


if __name__ == "__main__":
    harness.run(main)
