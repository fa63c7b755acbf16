"""Calibration at scale: 500 questions against a 10,000-entry store, database time only.

    python bench/calibration_scale.py [--entries 10000] [--questions 500] [--write-docs]

recall_latency.py's store (random unit vectors, Zipf-distributed text). Half the questions are
hits (an entry's first eight words, its vector plus noise: some rank far outside the top 5), half
misses; the embedder hands out precomputed vectors, so the figures are the database side of
`forge calibrate` and of `forge recall --queries` on the same questions.
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import harness
import docs_figures
import recall_latency
from recall_latency import DIM, Precomputed, build, unit_vectors


class QueryVectors(Precomputed):
    """Every question's vector, handed out in one call."""

    def embed_queries(self, texts):
        assert len(texts) == len(self.vectors), "one call for every question"
        return self.vectors


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--entries", type=int, default=10000)
    p.add_argument("--questions", type=int, default=500)
    p.add_argument("--write-docs", action="store_true", help=docs_figures.HELP)
    args = p.parse_args()
    import numpy as np

    from forge.recall import calibrate, many
    from forge.store import rag

    with docs_figures.tee("calibration_scale", args.write_docs):
        folder = Path(tempfile.mkdtemp(prefix="forge-calscale-"))
        path = folder / "store.db"
        t = time.perf_counter()
        build(path, args.entries, seed=args.entries)
        built = time.perf_counter() - t
        settings = harness.data_settings(folder, RAG_DB_FILE=str(path))
        rng = np.random.default_rng(3)
        n_hits = args.questions // 2
        with rag.open_store(settings, embedder=Precomputed(unit_vectors(1, rng))) as store:
            ids = [int(i) for i in rng.choice(rag.count_entries(store), n_hits, replace=False) + 1]
            entries = {e.id: e for e in rag.list_entries(store) if e.id in set(ids)}
            stored = calibrate.entry_vectors(store, ids)
        # From near-copies to questions the 5-row budget misses: noise of norm ~0.4 to ~6.
        scale = rng.uniform(0.02, 0.3, size=(n_hits, 1)).astype(np.float32)
        noise = rng.standard_normal((n_hits, DIM)).astype(np.float32) * scale
        hit_vecs = np.stack([stored[i] for i in ids]) + noise
        vectors = np.vstack([hit_vecs, unit_vectors(args.questions - n_hits, rng)])
        vectors = vectors.astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        cases = calibrate.Cases(
            [calibrate.HitCase(" ".join(entries[i].content.split()[:8]), i) for i in ids],
            recall_latency.sentences(args.questions - n_hits, rng))
        with calibrate.open_readonly(settings, path=path, embedder=QueryVectors(vectors)) as store:
            t, cpu = time.perf_counter(), time.process_time()
            result = calibrate.calibrate(store, cases)
            total, total_cpu = time.perf_counter() - t, time.process_time() - cpu
        with rag.open_store(settings, embedder=QueryVectors(vectors)) as store:
            cpu = time.process_time()
            batch = many.search_many(store, [h.question for h in cases.hits] + cases.misses)
            batch_cpu = time.process_time() - cpu
        outside = sum(not h.in_top_k for h in result.hits)
        n = args.questions
        print(f"{args.entries} entries (built in {built:.1f} s), {n} questions "
              f"({n_hits} hits, {outside} of them outside the top 5)")
        print(f"forge calibrate:        {total:.2f} s wall, {total_cpu:.2f} s CPU; database "
              f"{result.db_seconds:.2f} s wall ({result.db_seconds / n * 1000:.1f} ms per "
              f"question), embedding call {result.embed_seconds:.3f} s (precomputed)")
        print(f"forge recall --queries: search {batch.search_seconds:.2f} s wall, "
              f"{batch_cpu:.2f} s CPU ({batch.search_seconds / n * 1000:.1f} ms per query)")
        load = " ".join(f"{x:.1f}" for x in os.getloadavg())
        print(f"load average {load} on {os.cpu_count()} CPUs (wall time includes waiting)")
        print(f"worst hit {result.worst_hit}, best miss {result.best_miss}, gap {result.gap}, "
              f"proposed {result.proposed}")
        for suffix in ("", "-wal", "-shm"):
            Path(str(path) + suffix).unlink(missing_ok=True)


if __name__ == "__main__":
    main()
