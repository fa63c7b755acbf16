"""What is true now comes first, measured on the development set
(tests/fixtures/true_now_dev.json): facts changed in other words, questions for the current
and the former value, pairs that both stay true, unrelated notes.

    python bench/true_now_dev.py [--keep DIR] [--misses] [--diagnose]

Each figure (forge recall --limit 10, read at the set's "now"):
- current first: the newer note of a changed fact is the first row of its question;
- former first: the older note is the first row of a question about the past;
- both in 3: both notes of a pair that stays true are in the first 3 rows;
- changed precision / recall: the "changed" pairs `forge memory conflicts` lists, against the
  set's changed facts (any other pair it lists with reason "changed" is a false one).

--diagnose first prints, for each changed fact, where its newer note stands among the
question's candidates (the fused order recall walks, before the budget of 10) and what ties it
to the older note: each embedded model's cosine between the two notes' stored rows (e5's
vector, the sentence model's `memory_sentence` row), the newer's rank among the older's nearest
notes in the whole store by each model and the reverse, the same readings for the pairs that
stay true, and how the cosines of every other pair of notes spread.
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


def build(folder: Path, data: dict) -> dict[str, int]:
    """The store (built once under `folder`): key -> id."""
    from forge.memory import conflicts
    from forge.store import rag

    index = folder / "true-now-built.json"
    if index.exists():
        return json.loads(index.read_text())
    folder.mkdir(parents=True, exist_ok=True)
    items = notes(data)
    random.Random(SEED).shuffle(items)
    ids: dict[str, int] = {}
    with rag.open_store(settings_for(folder, data)) as store:
        for key, at, text in items:
            ids[key] = conflicts.remember(store, "fact", text, created=at).id
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


def ranking(store, q: str, limit: int = 10) -> list[int]:
    """Every candidate of the question, in the fused order recall walks (before the budget)."""
    from forge.recall import rank

    question = rank.read(store, q)
    depth = rank.pool(limit)
    heard = rank.listen(store, question, None, latent=True, sentence=True)
    found = rank.find(store, question, heard, project=None, kind=None, covered=True,
                      vector_k=depth, lexical_k=depth, latent_k=depth)
    ranked = rank.fuse(store, question, heard, found, limit=limit, fusion="normalised",
                       rrf_k=rank.RRF_K, lexical_weight=1.0, covered=True)
    return [c.entry_id for c, _ in ranked]


def diagnose(folder: Path, data: dict, ids: dict[str, int]) -> None:
    """Where the newer note of each changed fact stands among its question's candidates, and
    what ties it to the older one: each model's cosine between the two notes' stored rows, the
    newer's rank among the older's nearest notes by each model (and the reverse), and how the
    same readings spread over the pairs that stay true and over unrelated notes."""
    import numpy as np

    from forge.store import rag

    names = {v: k for k, v in ids.items()}
    with rag.open_store(settings_for(folder, data), mode="read") as store:
        every = sorted(ids.values())
        e5 = store.backend.vectors_of(every)
        use = {i: np.frombuffer(b, dtype=np.float32) for i, b in rag.sentence_rows(store, every).items()}
        order = sorted(ids.values())
        E = np.stack([e5[i] / np.linalg.norm(e5[i]) for i in order])
        U = np.stack([use[i] / np.linalg.norm(use[i]) for i in order])
        at = {i: n for n, i in enumerate(order)}
        se, su = E @ E.T, U @ U.T
        np.fill_diagonal(se, -2)
        np.fill_diagonal(su, -2)

        def nrank(sims, a, b):   # b's rank among a's nearest (1 = nearest)
            return int((sims[at[a]] > sims[at[a], at[b]]).sum()) + 1

        print("changed facts: newer's place in the question's candidates (old's), cosines e5/use, "
              "new among old's nearest e5/use, old among new's nearest e5/use, top row")
        stats = {"in10": 0, "in30": 0, "any": 0, "top_old": 0, "near10": 0}
        for c in data["changed"]:
            old, new = ids[f"{c['key']}.old"], ids[f"{c['key']}.new"]
            got = ranking(store, c["q"])
            pn = got.index(new) + 1 if new in got else None
            po = got.index(old) + 1 if old in got else None
            stats["in10"] += bool(pn and pn <= 10)
            stats["in30"] += bool(pn and pn <= 30)
            stats["any"] += bool(pn)
            if got[0] == old:   # would the first row's 10 nearest by e5 bring the newer in?
                stats["top_old"] += 1
                stats["near10"] += nrank(se, old, new) <= 10
            print(f"  {c['key']:12} new@{pn} old@{po} cos {se[at[old], at[new]]:.2f}/{su[at[old], at[new]]:.2f} "
                  f"n|o {nrank(se, old, new)}/{nrank(su, old, new)} o|n {nrank(se, new, old)}/{nrank(su, new, old)} "
                  f"top {names[got[0]]} (n|top {nrank(se, got[0], new) if got[0] != new else 0}/"
                  f"{nrank(su, got[0], new) if got[0] != new else 0})")
        n = len(data["changed"])
        print(f"  newer in the first 10: {stats['in10']}/{n}, in 30: {stats['in30']}/{n}, "
              f"anywhere: {stats['any']}/{n}")
        print(f"  older note first: {stats['top_old']}/{n}; of these, the newer among its 10 "
              f"nearest notes by e5 (whole store): {stats['near10']}/{stats['top_old']}")
        print("both-true pairs: cosines e5/use, b among a's nearest, a among b's nearest")
        for c in data["both"]:
            a, b = ids[f"{c['key']}.a"], ids[f"{c['key']}.b"]
            print(f"  {c['key']:12} cos {se[at[a], at[b]]:.2f}/{su[at[a], at[b]]:.2f} "
                  f"b|a {nrank(se, a, b)}/{nrank(su, a, b)} a|b {nrank(se, b, a)}/{nrank(su, b, a)}")
        pairs = {tuple(sorted((ids[f"{c['key']}.old"], ids[f"{c['key']}.new"]))) for c in data["changed"]}
        pairs |= {tuple(sorted((ids[f"{c['key']}.a"], ids[f"{c['key']}.b"]))) for c in data["both"]}
        other_e, other_u = [], []
        for x in order:
            for y in order:
                if x < y and (x, y) not in pairs:
                    other_e.append(se[at[x], at[y]])
                    other_u.append(su[at[x], at[y]])
        for name, vals in (("e5", other_e), ("use", other_u)):
            q = np.percentile(vals, [50, 90, 99, 100])
            print(f"  other pairs {name}: median {q[0]:.2f} p90 {q[1]:.2f} p99 {q[2]:.2f} max {q[3]:.2f}")
        ch_e = [se[at[ids[f"{c['key']}.old"]], at[ids[f"{c['key']}.new"]]] for c in data["changed"]]
        ch_u = [su[at[ids[f"{c['key']}.old"]], at[ids[f"{c['key']}.new"]]] for c in data["changed"]]
        for name, vals in (("e5", ch_e), ("use", ch_u)):
            q = np.percentile(vals, [10, 50, 90])
            print(f"  changed pairs {name}: p10 {q[0]:.2f} median {q[1]:.2f} p90 {q[2]:.2f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keep", type=Path, help="build the store under DIR and reuse it")
    parser.add_argument("--misses", action="store_true")
    parser.add_argument("--diagnose", action="store_true",
                        help="where each newer note stands and what ties it to the older one")
    args = parser.parse_args(argv)
    data = json.loads(SET.read_text(encoding="utf-8"))
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or Path(tmp) / "store"
        ids = build(folder, data)
        if args.diagnose:
            diagnose(folder, data, ids)
        got = score(folder, data, ids, args.misses)
    ch = got["changed"]
    print(f"development set ({SET.name}): {len(data['changed'])} changed facts, "
          f"{len(data['both'])} pairs that both stay true, {len(data['unrelated'])} unrelated")
    for name in ("current", "past", "both"):
        n, d = got[name]
        print(f"  {name + ' first' if name != 'both' else 'both in first 3':18} {n}/{d} = {n / d:.2f}")
    p = ch["right"] / ch["listed"] if ch["listed"] else 1.0
    print(f"  changed pairs      precision {ch['right']}/{ch['listed']} = {p:.2f}, "
          f"recall {ch['right']}/{ch['truth']} = {ch['right'] / ch['truth']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
