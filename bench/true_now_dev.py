"""What is true now comes first, measured on the development set
(tests/fixtures/true_now_dev.json): facts changed in other words, questions for the current
and the former value, pairs that both stay true, unrelated notes.

    python bench/true_now_dev.py [--keep DIR] [--misses]

Each figure (forge recall --limit 10, read at the set's "now"):
- current first: the newer note of a changed fact is the first row of its question;
- former first: the older note is the first row of a question about the past;
- both in 3: both notes of a pair that stays true are in the first 3 rows;
- changed precision / recall: the "changed" pairs `forge memory conflicts` lists, against the
  set's changed facts (any other pair it lists with reason "changed" is a false one);
- may replace: `forge remember` of each newer note names its older one (and names nothing
  wrong for the both-true and unrelated notes).
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
SET = ROOT / "tests" / "fixtures" / "true_now_dev.json"
SEED = 11


def settings_for(folder: Path, data: dict):
    from forge.core.settings import load_settings

    return load_settings({"FORGE_DATA_DIR": str(folder), "LLAMA_CPP_URL": "http://127.0.0.1:9",
                          "FORGE_NOW": data["now"]}, cwd=folder)


def notes(data: dict) -> list[tuple[str, str, str]]:
    """(key, date, content) of every note: changed facts' `KEY.old`/`KEY.new`, both-true
    pairs' `KEY.a`/`KEY.b`, unrelated `u0`..."""
    out = []
    for c in data["changed"]:
        out += [(f"{c['key']}.old", *c["old"]), (f"{c['key']}.new", *c["new"])]
    for c in data["both"]:
        out += [(f"{c['key']}.a", *c["a"]), (f"{c['key']}.b", *c["b"])]
    out += [(f"u{i}", at, text) for i, (at, text) in enumerate(data["unrelated"])]
    return out


def build(folder: Path, data: dict, *, remember_notes: list | None = None) -> dict[str, int]:
    """The store (built once under `folder`): key -> id. `remember_notes`: when a list, each
    write's conflicts.remember result is appended to it as (key, Noted)."""
    from forge.memory import conflicts
    from forge.store import rag

    index = folder / "true-now-built.json"
    if index.exists() and remember_notes is None:
        return json.loads(index.read_text())
    folder.mkdir(parents=True, exist_ok=True)
    items = notes(data)
    random.Random(SEED).shuffle(items)
    ids: dict[str, int] = {}
    with rag.open_store(settings_for(folder, data)) as store:
        for key, at, text in items:
            noted = conflicts.remember(store, "fact", text, created=at)
            ids[key] = noted.id
            if remember_notes is not None:
                remember_notes.append((key, noted))
    index.write_text(json.dumps(ids))
    return ids


def score(folder: Path, data: dict, ids: dict[str, int], misses: bool = False) -> dict:
    from forge.memory import conflicts
    from forge.recall import rank
    from forge.store import rag

    out: dict = {"current": [0, 0], "past": [0, 0], "both": [0, 0]}
    with rag.open_store(settings_for(folder, data), mode="read") as store:
        def rows(q: str) -> list[int]:
            return [r.entry.id for r in rank.recall(store, q, limit=10).rows]

        for c in data["changed"]:
            got = rows(c["q"])
            hit = bool(got) and got[0] == ids[f"{c['key']}.new"]
            out["current"][0] += hit
            out["current"][1] += 1
            if misses and not hit:
                print(f"  current miss: {c['q']} -> {[k for g in got[:3] for k, v in ids.items() if v == g]}")
            if "past" in c:
                got = rows(c["past"])
                hit = bool(got) and got[0] == ids[f"{c['key']}.old"]
                out["past"][0] += hit
                out["past"][1] += 1
                if misses and not hit:
                    print(f"  past miss: {c['past']} -> {[k for g in got[:3] for k, v in ids.items() if v == g]}")
        for c in data["both"]:
            got = rows(c["q"])[:3]
            hit = ids[f"{c['key']}.a"] in got and ids[f"{c['key']}.b"] in got
            out["both"][0] += hit
            out["both"][1] += 1
            if misses and not hit:
                print(f"  both miss: {c['q']} -> {[k for g in got for k, v in ids.items() if v == g]}")
        truth = {tuple(sorted((ids[f"{c['key']}.old"], ids[f"{c['key']}.new"])))
                 for c in data["changed"]}
        found = {tuple(sorted(c.ids)) for c in conflicts.find(store).conflicts
                 if c.reason.startswith("changed")}
        out["changed"] = {"listed": len(found), "right": len(found & truth), "truth": len(truth)}
        if misses:
            names = {v: k for k, v in ids.items()}
            for pair in sorted(found - truth):
                print(f"  changed, wrong: {[names[i] for i in pair]}")
    return out


def may_replace(folder: Path, data: dict) -> dict:
    """Each note written in turn (a fresh store): the newer note of a changed fact names its
    older one when that one is already written; any other note named is wrong (a changed
    fact's older note written after the newer one names nothing: it is not newer)."""
    written: list = []
    ids = build(folder, data, remember_notes=written)
    # the newer note names the older one when it is written after it (the order is shuffled)
    truth = {ids[f"{c['key']}.new"]: ids[f"{c['key']}.old"] for c in data["changed"]}
    right = named = expected = 0
    for key, noted in written:
        partner = truth.get(noted.id)
        if partner is not None and partner < noted.id:
            expected += 1
        got = {m["id"] for m in noted.may_replace}
        named += len(got)
        right += partner in got
    return {"named": named, "right": right, "expected": expected}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keep", type=Path, help="build the store under DIR and reuse it")
    parser.add_argument("--misses", action="store_true")
    args = parser.parse_args(argv)
    data = json.loads(SET.read_text(encoding="utf-8"))
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or Path(tmp) / "store"
        ids = build(folder, data)
        got = score(folder, data, ids, args.misses)
        mr = may_replace(Path(tmp) / "writes", data)
    ch = got["changed"]
    print(f"development set ({SET.name}): {len(data['changed'])} changed facts, "
          f"{len(data['both'])} pairs that both stay true, {len(data['unrelated'])} unrelated")
    for name in ("current", "past", "both"):
        n, d = got[name]
        print(f"  {name + ' first' if name != 'both' else 'both in first 3':18} {n}/{d} = {n / d:.2f}")
    p = ch["right"] / ch["listed"] if ch["listed"] else 1.0
    print(f"  changed pairs      precision {ch['right']}/{ch['listed']} = {p:.2f}, "
          f"recall {ch['right']}/{ch['truth']} = {ch['right'] / ch['truth']:.2f}")
    p = mr["right"] / mr["named"] if mr["named"] else 1.0
    print(f"  may replace        precision {mr['right']}/{mr['named']} = {p:.2f}, "
          f"recall {mr['right']}/{mr['expected']} = {mr['right'] / max(1, mr['expected']):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
