#!/usr/bin/env python3
"""A recall's walk through the code: which modules (rooms) its store visits, in order.

    python tools/recall_walk.py --data-dir DIR [--now WHEN] [--calls] QUESTION

Runs `rank.recall(store, QUESTION, limit=10)` (what `forge recall QUESTION` runs) on the store
under DIR with a profiler on every thread, and follows the store: each call of a function under
forge/ that is handed the store or its backend is a step in that function's module. Consecutive
steps in one module are one *stay*; a stay in a module the walk had already left is a *return*.
A recall that reads as a pipeline stays in few rooms and returns to few of them: each step is
called in order from one place, and the store below answers primitives.

Prints the stays in order (`--calls`: with the functions of each) and one line
`stays S, rooms R, returns T`. `walk()` is what tests/test_recall_walk.py holds to a bound.
"""
from __future__ import annotations

import argparse
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
FORGE = str(ROOT / "forge")


@dataclass
class Walk:
    stays: list[tuple[str, list[str]]] = field(default_factory=list)   # (module, functions)

    @property
    def rooms(self) -> int:
        return len({room for room, _ in self.stays})

    @property
    def returns(self) -> int:
        return len(self.stays) - self.rooms

    @property
    def store_entered_from(self) -> dict[str, int]:
        """room -> how many times the walk went down into the store from it."""
        out: dict[str, int] = {}
        for (before, _), (room, _) in zip(self.stays, self.stays[1:]):
            if room == "store":
                out[before] = out.get(before, 0) + 1
        return out

    def summary(self) -> str:
        entered = self.store_entered_from
        return (f"stays {len(self.stays)}, rooms {self.rooms}, returns {self.returns}; "
                f"the store entered {sum(entered.values())} times from {len(entered)} rooms ("
                + ", ".join(f"{room} {n}" for room, n in sorted(entered.items())) + ")")


def _module(filename: str) -> str | None:
    """forge/recall/rank.py -> recall.rank; every module of forge/store/ is one room, "store"
    (the store below answers primitives: rag and the backend it calls are one room); None
    outside the package."""
    path = Path(filename)
    try:
        parts = path.resolve().relative_to(Path(FORGE).resolve()).with_suffix("").parts
    except ValueError:
        return None
    if parts[:1] == ("store",):
        return "store"
    return ".".join(p for p in parts if p != "__init__") or "forge"


def follow(store: Any, run: Callable[[], Any]) -> tuple[Any, Walk]:
    """`run()`'s result and the walk of `store` through it (every thread)."""
    walk = Walk()
    lock = threading.Lock()
    followed = {id(store), id(store.backend)}
    modules: dict[str, str | None] = {}

    def profile(frame, event, _arg):
        if event != "call":
            return
        code = frame.f_code
        name = code.co_filename
        if name not in modules:
            modules[name] = _module(name)
        room = modules[name]
        if room is None:
            return
        local = frame.f_locals
        handed = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
        if not any(id(local.get(arg)) in followed for arg in handed):
            return
        with lock:
            if walk.stays and walk.stays[-1][0] == room:
                walk.stays[-1][1].append(code.co_name)
            else:
                walk.stays.append((room, [code.co_name]))

    threading.setprofile(profile)
    sys.setprofile(profile)
    try:
        result = run()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    return result, walk


def walk(store: Any, question: str, **recall: Any) -> tuple[Any, Walk]:
    """`rank.recall(store, question, limit=10, **recall)` followed: (its result, its walk)."""
    from forge.recall import rank

    recall.setdefault("limit", 10)
    return follow(store, lambda: rank.recall(store, question, **recall))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("question")
    parser.add_argument("--data-dir", type=Path, required=True, help="the store's FORGE_DATA_DIR")
    parser.add_argument("--now", help="FORGE_NOW (a question's time is read at it)")
    parser.add_argument("--calls", action="store_true", help="each stay's functions too")
    args = parser.parse_args(argv)
    from forge.core.settings import load_settings
    from forge.store import rag

    settings = load_settings({"FORGE_DATA_DIR": str(args.data_dir),
                              **({"FORGE_NOW": args.now} if args.now else {})}, cwd=args.data_dir)
    with rag.open_store(settings, mode="read") as store:
        rank_recall = walk(store, args.question)   # a first recall loads the models
        _, found = walk(store, args.question)
    del rank_recall
    for room, calls in found.stays:
        print(f"{room}: {', '.join(calls)}" if args.calls else room)
    print(found.summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
