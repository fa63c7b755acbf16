"""A personal-facts store through `forge recall`: top-1, any@5, calibrate, the refusal rules.

    python bench/personal_facts.py [--keep DIR] [--json] [--no-sparse] [--write-docs]

tests/fixtures/personal_facts.json (45 entries in French and English, 30 questions naming the
entry that answers, 15 that nothing answers) remembered into a store (`--keep DIR` reuses it);
every question through `forge recall --limit 10`'s code, `forge calibrate`'s on the same cases,
RECALL_MAX_DISTANCE swept over every hit's distance, and RECALL_MIN_COVERAGE at what `forge
calibrate --coverage` proposes (`--no-sparse` skips it). docs/benchmarks.md has the protocol.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import docs_figures
import recall_sets

FIXTURE = recall_sets.FIXTURES / "personal_facts.json"


def kept_and_refused(settings, fingerprint: str, questions: list[str], vectors,
                     expected: list[int], cutoff: float) -> tuple[float, float]:
    """`forge recall --limit 10` with RECALL_MAX_DISTANCE=cutoff@fingerprint: the share of hits
    whose entry is still a row, of misses left with no row (which the recall graph refuses)."""
    from dataclasses import replace

    from forge.store import rag
    from forge.recall import many
    from forge.core.settings import Cutoff

    cut = replace(settings, recall_max_distance=Cutoff(cutoff, fingerprint))
    with rag.open_store(cut) as store:
        rows = [a.result.rows for a in many.search_many(store, questions, vectors=vectors,
                                                        limit=10).answers]
    kept = sum(e in {r.entry.id for r in r_} for r_, e in zip(rows, expected))
    refused = sum(not r_ for r_ in rows[len(expected):])
    return kept / len(expected), refused / (len(rows) - len(expected))


def rule(settings, questions: list[str], vectors, expected: list[int], threshold: float) -> dict:
    """RECALL_MIN_COVERAGE=threshold through `forge recall --limit 10`'s code: hits kept, misses
    refused, its ms per recall uncached (one process; the first loads the head) and cached (a
    chat session), beside the recall without it and the question's dense embedding."""
    import statistics
    import time
    from dataclasses import replace

    from forge.store import rag
    from forge.recall import channels
    from forge.recall import rank, refusal

    on = replace(settings, recall_min_coverage=threshold)
    rows, cold_ms, warm_ms, base_ms, read_ms, dense_ms = [], [], [], [], [], []
    with rag.open_store(on) as store:
        for question, vec in zip(questions, vectors):
            refusal._cache.clear()
            result = rank.search(store, question, limit=10, query_vector=vec)
            rows.append({r.entry.id for r in result.rows})
            cold_ms.append(result.coverage["seconds"] * 1000)
            started = time.perf_counter()
            rag.entries_by_id(store, result.coverage["nearest"])
            read_ms.append((time.perf_counter() - started) * 1000)
        for question, vec in zip(questions, vectors):
            nearest = [i for i, _ in channels.search_vector(store, vec, k=refusal.POOL)]
            refusal.latent_terms(store, [e.content
                                         for e in rag.entries_by_id(store, nearest).values()])
            warm_ms.append(rank.search(store, question, limit=10, query_vector=vec)
                           .coverage["seconds"] * 1000)
    with rag.open_store(settings) as store:
        for question, vec in zip(questions, vectors):
            started = time.perf_counter()
            rank.search(store, question, limit=10, query_vector=vec)
            base_ms.append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            store.embedder.embed_query(question)
            dense_ms.append((time.perf_counter() - started) * 1000)
    n = len(expected)
    return {"threshold": threshold,
            "hits_kept": round(sum(e in r for r, e in zip(rows, expected)) / n, 3),
            "misses_refused": round(sum(not r for r in rows[n:]) / (len(rows) - n), 3),
            "first_ms": round(cold_ms[0], 1),
            "cold_ms_median": round(statistics.median(cold_ms[1:]), 1),
            "warm_ms_median": round(statistics.median(warm_ms), 1),
            "read_ms_median": round(statistics.median(read_ms), 3),
            "recall_ms_median_without": round(statistics.median(base_ms), 2),
            "dense_query_ms_median": round(statistics.median(dense_ms), 1)}


def run(folder: Path, with_sparse: bool = True) -> dict:
    from forge.recall import calibrate, many
    from forge.store import rag

    data = json.loads(FIXTURE.read_text(encoding="utf-8"))
    ids = recall_sets.build_notes(folder, data)
    settings = recall_sets.settings(folder)
    hits = data["hits"]
    expected = [ids[h["expect"]] for h in hits]
    questions = [h["question"] for h in hits] + data["misses"]
    with rag.open_store(settings) as store:
        vectors = many.embed_queries(store, questions)
        batch = many.search_many(store, questions, vectors=vectors, limit=10)
        cases = calibrate.Cases([calibrate.HitCase(h["question"], e)
                                 for h, e in zip(hits, expected)], list(data["misses"]))
        cal = calibrate.calibrate(store, cases, coverage=with_sparse)
        hot = {e.id for e in rag.hot_entries(store)}
        total = rag.count_entries(store)
    shipped_rule = None
    if cal.coverage and cal.coverage["proposed"] is not None:
        shipped_rule = rule(settings, questions, vectors, expected, cal.coverage["proposed"])
        shipped_rule["calibrate"] = cal.coverage["message"]
    rows = [a.result.rows for a in batch.answers]
    hit_rows, miss_rows = rows[:len(hits)], rows[len(hits):]
    ranks = [next((n for n, x in enumerate(r) if x.entry.id == e), None)
             for r, e in zip(hit_rows, expected)]
    share = {k: sum(r is not None and r < k for r in ranks) / len(hits) for k in (1, 5, 10)}
    misses_with_words = sum(any(x.channel != "vector" for x in r) for r in miss_rows)
    hits_with_words = sum(any(x.entry.id == e and x.channel != "vector" for x in r)
                          for r, e in zip(hit_rows, expected))
    hit_d = sorted(m.distance for m in cal.hits)
    sweep = []
    for d in sorted({0.0, *hit_d}):
        kept, refused = kept_and_refused(settings, cal.fingerprint, questions, vectors, expected,
                                         d)
        sweep.append({"cutoff": round(d, 6), "hits_kept": round(kept, 3),
                      "misses_refused": round(refused, 3)})
    return {
        "entries": total, "hits": len(hits), "misses": len(data["misses"]),
        "top1": round(share[1], 3), "any@5": round(share[5], 3), "any@10": round(share[10], 3),
        "hits_word_channel": hits_with_words, "misses_with_word_rows": misses_with_words,
        "hot_block_entries": len(hot),
        "calibrate": {"worst_hit": cal.worst_hit, "best_miss": cal.best_miss, "gap": cal.gap,
                      "proposed": cal.proposed, "message": cal.message},
        "hit_distances": {"min": round(hit_d[0], 4), "median": round(hit_d[len(hit_d) // 2], 4),
                          "max": round(hit_d[-1], 4)},
        "miss_nearest": sorted(round(m.distance, 4) for m in cal.misses),
        "rule": shipped_rule,
        "sweep": sweep,
        "misses_detail": [{"q": q, "word_rows": [x.entry.content[:50] for x in r
                                                 if x.channel != "vector"][:3],
                           "nearest": round(r[0].distance, 4) if r and r[0].distance else None}
                          for q, r in zip(data["misses"], miss_rows)],
        "hits_missed": [{"q": h["question"], "expect": h["expect"],
                         "rank": None if r is None else r + 1}
                        for h, r in zip(hits, ranks) if r != 0],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keep", type=Path, help="build the store under DIR and reuse it")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--no-sparse", action="store_true",
                        help="skip the coverage rule (the sparse head's pass over the entries)")
    parser.add_argument("--write-docs", action="store_true", help=docs_figures.HELP)
    args = parser.parse_args(argv)
    folder = args.keep or Path(tempfile.mkdtemp(prefix="forge-personal-"))
    out = run(folder, with_sparse=not args.no_sparse)
    with docs_figures.tee("personal_facts", args.write_docs):
        report(out, args)
    return 0


def report(out: dict, args: argparse.Namespace) -> None:
    if args.json:
        print(json.dumps(out, ensure_ascii=False, indent=2))
        return
    from tabulate import tabulate

    print(f"{out['entries']} entries, {out['hits']} hit questions, {out['misses']} misses "
          f"(forge recall --limit 10, fused)")
    print(f"top-1 {out['top1']:.3f}  any@5 {out['any@5']:.3f}  any@10 {out['any@10']:.3f}; "
          f"word channel reaches {out['hits_word_channel']}/{out['hits']} hit entries and gives "
          f"rows to {out['misses_with_word_rows']}/{out['misses']} misses; hot block holds "
          f"{out['hot_block_entries']} entries")
    print(f"calibrate: {out['calibrate']['message']}")
    print(f"hit distances {out['hit_distances']}, miss nearest {out['miss_nearest']}")
    print("RECALL_MAX_DISTANCE at 0 and at every hit's distance (a miss is refused when no row "
          "is left)")
    print(tabulate(out["sweep"], headers="keys", tablefmt="simple"))
    if out["rule"]:
        r = out["rule"]
        print(f"RECALL_MIN_COVERAGE={r['threshold']:g} through forge recall --limit 10: "
              f"{r['hits_kept']:.3f} of the hits kept, {r['misses_refused']:.3f} of the misses "
              f"refused. The rule's ms per recall, median: {r['cold_ms_median']} entries' latent "
              f"terms not cached (the first recall, loading the head: {r['first_ms']}), "
              f"{r['warm_ms_median']} cached; its read of the 5 nearest entries "
              f"{r['read_ms_median']} ms. Without it: the recall "
              f"{r['recall_ms_median_without']} ms (database side), the question's dense "
              f"embedding {r['dense_query_ms_median']} ms")
        print(f"calibrate --coverage: {r['calibrate']}")
    for m in out["misses_detail"]:
        print(f"  miss {m['q']!r}: nearest {m['nearest']}, word rows {m['word_rows']}")
    for h in out["hits_missed"]:
        print(f"  hit not first: {h['q']!r} -> {h['expect']} at rank {h['rank']}")


if __name__ == "__main__":
    sys.exit(main())
