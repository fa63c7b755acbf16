"""The sentence model (RECALL_SENTENCE, forge/recall/sentence.py) on every set at once:
bench/recall_sets.py's rows for it, beside the shipped ranking and the variants of
bench/sentence_variants.py.

    python bench/recall_sentence.py --keep DIR [--locomo DIR] [--misses] [--write-docs]

The options are bench/recall_sets.py's (the same stores under --keep DIR); the rows are the
three channels alone (RECALL_SENTENCE=off), the shipped ranking (the sentence model reading the
20 candidate notes nearest the question), the shipped model read other ways (exchanges too,
other depths), and every `shipped + sentence model: …` variant (a share read from every entry of
the store, added to the three channels).
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def main(argv: list[str] | None = None) -> int:
    import recall_sets

    names = [name for name in recall_sets.variants()
             if name == recall_sets.THREE
             or name.startswith((recall_sets.SHIPPED, "shipped + sentence model: "))]
    return recall_sets.main(argv, names=names, figures="recall_sentence")


if __name__ == "__main__":
    sys.exit(main())
