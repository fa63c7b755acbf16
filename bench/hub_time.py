"""bench/time_questions.py's set under one variant of bench/hub_variants.py or
bench/sentence_variants.py.

    python bench/hub_time.py --variant NAME [bench/time_questions.py's options]

NAME as `hub_variants.variants()` lists it (the `shipped + hubs: NAME` rows of
bench/recall_sets.py), e.g. "vector CSLS, questions k=5, pool of 60", or "sentence model: "
and a name `sentence_variants.variants()` lists (the `shipped + sentence model: NAME` rows),
e.g. "sentence model: an exchange by its nearest line", each added to the three channels alone
(RECALL_SENTENCE=off, as they were measured), or "RECALL_SENTENCE=off" (the three channels
alone: bench/time_questions.py itself runs the shipped ranking, the sentence model on).
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def variants() -> dict:
    import hub_variants
    import sentence_variants

    changes = {**hub_variants.variants(),
               **{f"sentence model: {name}": patch
                  for name, patch in sentence_variants.variants().items()}}
    return {**{name: (lambda patch=patch: three_channels(patch))
               for name, patch in changes.items()},
            "RECALL_SENTENCE=off": three_channels}


@contextlib.contextmanager
def three_channels(patch=None):
    """time_questions' store opened with RECALL_SENTENCE=off, under `patch()` when given."""
    import time_questions

    shipped = time_questions.settings_for
    time_questions.settings_for = lambda folder, data: dataclasses.replace(
        shipped(folder, data), recall_sentence=False)
    try:
        with (patch() if patch else contextlib.nullcontext()):
            yield
    finally:
        time_questions.settings_for = shipped


def main(argv: list[str] | None = None) -> int:
    import time_questions

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--variant", required=True, choices=sorted(variants()))
    args, rest = parser.parse_known_args(argv)
    with variants()[args.variant]():
        return time_questions.main(rest)


if __name__ == "__main__":
    sys.exit(main())
