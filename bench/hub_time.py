"""bench/time_questions.py's set under one hub variant of bench/hub_variants.py.

    python bench/hub_time.py --variant NAME [bench/time_questions.py's options]

NAME as `hub_variants.variants()` lists it (the `shipped + hubs: NAME` rows of
bench/recall_sets.py), e.g. "vector CSLS, questions k=5, pool of 60".
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def main(argv: list[str] | None = None) -> int:
    import hub_variants
    import time_questions

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--variant", required=True, choices=sorted(hub_variants.variants()))
    args, rest = parser.parse_known_args(argv)
    with hub_variants.variants()[args.variant]():
        return time_questions.main(rest)


if __name__ == "__main__":
    sys.exit(main())
