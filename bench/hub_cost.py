"""What a hub treatment would add to one recall, in-process, against the shipped recall in the
same run.

    python bench/hub_cost.py --store DIR [--queries 30] [--rounds 3]

DIR is a store folder (FORGE_DATA_DIR: e.g. one `bench/recall_latency.py --keep` built at 10k
entries, or a LoCoMo conversation's). The questions are LoCoMo's, embedded once before any
timing. Interleaved question by question, `rounds` times:

- shipped: `rank.search(limit=10)` as `forge recall` runs it (the query vector given);
- hubs: the same under bench/hub_variants.py's `vector(k=5, deeper=True)`: the vector channel
  fetches 60 candidates instead of 30, reads their vectors (`Backend.vectors_of`), takes each
  one's cosine to the 120 reference questions (embedded once before timing, as package data
  would be), and rescores the pool by CSLS.

Printed: the median ms of each, their ratio, and the parts of the difference (the KNN at 60
against 30, the 60 vectors read, the reference product) measured alone. CPU times on a loaded
machine move with the load; the ratio in one run is the figure to read.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def timings(store, questions: list[str], vectors, rounds: int) -> dict[str, list[float]]:
    """Seconds of each timed part, question by question, `rounds` times (after one warm-up)."""
    import numpy as np

    import hub_variants
    from forge.recall import channels, rank

    refs = hub_variants.reference_vectors()
    out: dict[str, list[float]] = {k: [] for k in ("shipped", "hubs", "knn30", "knn60", "read60",
                                                   "product")}

    def timed(name: str, fn):
        started = time.perf_counter()
        value = fn()
        out[name].append(time.perf_counter() - started)
        return value

    for q, v in zip(questions, vectors):   # warm both paths once
        rank.search(store, q, limit=10, query_vector=v)
        with hub_variants.vector(k=5, deeper=True):
            rank.search(store, q, limit=10, query_vector=v)
    for key in out:
        out[key].clear()
    for _ in range(rounds):
        for q, v in zip(questions, vectors):
            timed("shipped", lambda: rank.search(store, q, limit=10, query_vector=v))
            with hub_variants.vector(k=5, deeper=True):
                timed("hubs", lambda: rank.search(store, q, limit=10, query_vector=v))
            timed("knn30", lambda: channels.search_vector(store, v, k=30))
            hits = timed("knn60", lambda: channels.search_vector(store, v, k=60))
            found = timed("read60", lambda: store.backend.vectors_of([i for i, _ in hits]))
            timed("product", lambda: (-np.sort(-(np.vstack(list(found.values())) @ refs.T),
                                               axis=1)[:, :5]).mean(axis=1))
    return out


def main(argv: list[str] | None = None) -> int:
    import numpy as np

    import hub_variants
    import locomo
    from forge.core.settings import load_settings
    from forge.embedders.embedded import EmbeddedEmbedder
    from forge.recall import many
    from forge.store import rag

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--store", type=Path, help="a store folder (FORGE_DATA_DIR)")
    where.add_argument("--latency-store", type=Path, metavar="DB",
                       help="a recall_10000.db that bench/recall_latency.py --keep built: its "
                            "precomputed query vectors and latent terms")
    parser.add_argument("--queries", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    refs = hub_variants.reference_vectors(EmbeddedEmbedder())   # once, before timing
    if args.store:
        data = json.loads(locomo.DEFAULT_DATA.read_text(encoding="utf-8"))
        questions = [q["question"] for c in data for q in c["qa"]
                     if q.get("category") in (1, 2, 3, 4)][:args.queries]
        settings = load_settings({"FORGE_DATA_DIR": str(args.store),
                                  "LLAMA_CPP_URL": "http://127.0.0.1:9"}, cwd=args.store)
        with rag.open_store(settings) as store:
            vectors = many.embed_queries(store, questions)
            parts = timings(store, questions, vectors, args.rounds)
            entries = rag.count_entries(store)
    else:
        import recall_latency as rl

        path = args.latency_store
        settings = load_settings({"FORGE_DATA_DIR": str(path.parent), "RAG_DB_FILE": str(path),
                                  "LLAMA_CPP_URL": "http://127.0.0.1:9"}, cwd=path.parent)
        vectors = np.load(str(path) + ".q.npy")[:args.queries]
        questions = rl.sentences(len(np.load(str(path) + ".q.npy")),
                                 np.random.default_rng(8))[:args.queries]
        saved = np.load(str(path) + ".q.npy.terms.npz")
        query_terms = dict(zip(questions, rl.unpadded(saved["qt"], saved["qw"])))
        with rag.open_store(settings, embedder=rl.Precomputed(vectors, query_terms=query_terms)
                            ) as store:
            parts = timings(store, questions, vectors, args.rounds)
            entries = rag.count_entries(store)

    def ms(name: str) -> float:
        return 1000 * statistics.median(parts[name])

    print(f"{entries} entries, {len(questions)} questions x {args.rounds} rounds, in-process, "
          "interleaved (median ms)")
    print(f"shipped recall {ms('shipped'):.2f}  with the hub rescoring {ms('hubs'):.2f}  "
          f"ratio {ms('hubs') / ms('shipped'):.3f}")
    print(f"parts: KNN 30 {ms('knn30'):.2f}, KNN 60 {ms('knn60'):.2f}, 60 vectors read "
          f"{ms('read60'):.2f}, cosine to {len(refs)} references and "
          f"top-5 mean {ms('product'):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
