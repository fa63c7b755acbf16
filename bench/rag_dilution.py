"""What burying a sentence in a multi-exchange block costs, against per-exchange units.

    python bench/rag_dilution.py [--transcript FILE] [--block 12] [--json]

It builds two throwaway stores in a temporary folder (it never opens RAG_DB_FILE) from one
transcript (default forge/samples/transcript.jsonl; any `forge history import` JSONL works),
cut into exchanges by `transcript.units`, the code compaction uses:

- per exchange: one entry per exchange (what rag_pointer writes since per-exchange intake);
- blocks: `--block` consecutive exchanges joined into one entry (what it wrote before: one
  vector for a dozen exchanges, close to no question in particular).

Each exchange's own user turn is then asked again, and scored on the entry that holds that
exchange in each store: its distance and its rank. The question is inside its entry in both
stores, so this measures what the company of other exchanges costs, nothing else. With the
embedded model a block longer than its 512 tokens is embedded from its first part only (the
warning says so): the exchanges past it are in the text and absent from the vector, which is
part of what a block costs. With few blocks `top_5` says little (4 blocks: always top 5).
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from types import SimpleNamespace

import harness
import store_snapshot

SAMPLE = store_snapshot.ROOT / "forge" / "samples" / "transcript.jsonl"


def exchanges(path: Path) -> list:
    from forge.memory import history_import, transcript

    messages, bad = history_import.parse_records(path.read_text(encoding="utf-8"))
    if bad:
        raise SystemExit(f"error: {path}: {bad[0]}")
    shaped = [SimpleNamespace(id=n, role=m.role, content=m.content, ref=m.ref,
                              answered=m.answered, meta={}) for n, m in enumerate(messages, 1)]
    return [u for u in transcript.units(shaped) if u.parts[0].role == "user"]


def measure(folder: Path, name: str, texts: list[str], owner: list[int], questions: list[str],
            settings, vectors=None):
    """Distances and ranks of each question to the entry `owner[i]` (index into texts)."""
    import numpy as np

    from forge.recall import calibrate, many
    from forge.store import rag
    from forge.recall import channels

    path = folder / f"{name}.db"
    with rag.open_store(settings, path=path) as store:
        ids = [r.id for r in rag.remember_many(store, [rag.NewEntry("archive", t, source="import",
                                                                    refs={"external": [f"{name}-{i}"]})
                                                       for i, t in enumerate(texts)])]
        if vectors is None:
            vectors = many.embed_queries(store, questions)
        stored = calibrate.entry_vectors(store, ids)
        out = []
        for vector, index in zip(vectors, owner):
            target = ids[index]
            distance = float(np.linalg.norm(vector - stored[target]))
            near = channels.search_vector(store, vector, k=len(ids))
            rank = next(n for n, (i, _) in enumerate(near, 1) if i == target)
            out.append((distance, rank))
    return out, vectors


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--transcript", type=Path, default=SAMPLE)
    p.add_argument("--block", type=int, default=12, help="exchanges per block")
    p.add_argument("--json", action="store_true")
    p.add_argument("--write-docs", action="store_true", help=harness.WRITE_DOCS_HELP)
    args = p.parse_args()
    import numpy as np

    from forge.memory import transcript

    units = exchanges(args.transcript)
    if not units:
        return harness.fail(f"{args.transcript}: no exchange starting with a user turn")
    questions = [u.parts[0].content for u in units]
    singles = [transcript.render(u.parts) for u in units]
    blocks = [transcript.render([p for u in units[i:i + args.block] for p in u.parts])
              for i in range(0, len(units), args.block)]
    settings = harness.settings(recall_max_distance=None)
    folder = Path(tempfile.mkdtemp(prefix="forge-dilution-"))
    per_exchange, vectors = measure(folder, "exchange", singles, list(range(len(units))),
                                    questions, settings)
    per_block, _ = measure(folder, "block", blocks, [i // args.block for i in range(len(units))],
                           questions, settings, vectors)

    def stats(pairs):
        d = [x for x, _ in pairs]
        return {"median_distance": round(float(np.median(d)), 4),
                "p90_distance": round(float(np.percentile(d, 90)), 4),
                "rank_1": sum(r == 1 for _, r in pairs), "top_5": sum(r <= 5 for _, r in pairs)}

    rows = [{"store": f"per exchange ({len(singles)} entries)", **stats(per_exchange)},
            {"store": f"blocks of {args.block} ({len(blocks)} entries)", **stats(per_block)}]
    moved = [b[0] - a[0] for a, b in zip(per_exchange, per_block)]
    document = {"transcript": str(args.transcript), "exchanges": len(units), "block": args.block,
                "stores": rows, "distance_added_median": round(float(np.median(moved)), 4),
                "questions": [{"question": q, "exchange": a[0], "exchange_rank": a[1],
                               "block": b[0], "block_rank": b[1]}
                              for q, a, b in zip(questions, per_exchange, per_block)]}
    harness.output(args, document, rows, ["store", "median_distance", "p90_distance", "rank_1", "top_5"],
                   ["", f"{len(units)} questions (each exchange's own user turn); burying it in a "
                        f"block of {args.block} adds {document['distance_added_median']:+.4f} to "
                        "the median distance; rank_1/top_5 count questions whose entry came first / "
                        "in the first five"])
    return 0


if __name__ == "__main__":
    harness.run(main)
