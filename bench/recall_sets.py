"""Recall measured on every set at once: the personal, French, no-word, held-out and LoCoMo sets.

    python bench/recall_sets.py --keep DIR [--locomo DIR] [--misses] [--write-docs]

The small sets of tests/fixtures (personal_facts, french_personal, french_no_word,
no_word_heldout), their stores built once under --keep DIR; LoCoMo's stores built by
`bench/locomo.py --keep DIR` (--locomo DIR), every category 1-4 question read at its
conversation's last session. Two rows, as `forge recall --limit 10` reads them: shipped, and the
three channels alone (RECALL_SENTENCE=off). The sets: docs/benchmarks/recall.md.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
FIXTURES = ROOT / "tests" / "fixtures"
THREE = "three channels alone (RECALL_SENTENCE=off)"
SHIPPED = "shipped (RECALL_SENTENCE=on)"


def variants() -> dict[str, dict]:
    """Each row's settings: the default, and the sentence model off."""
    return {SHIPPED: {"settings": {"RECALL_SENTENCE": "on"}},
            THREE: {"settings": {"RECALL_SENTENCE": "off"}}}


def personal_store(folder: Path, fixture: Path) -> tuple[dict, dict[str, int]]:
    from personal_facts import build

    data = json.loads(fixture.read_text(encoding="utf-8"))
    folder.mkdir(parents=True, exist_ok=True)
    return data, build(folder, data)


def open_settings(folder: Path, extra: dict | None = None):
    from forge.core.settings import load_settings

    return load_settings({"FORGE_DATA_DIR": str(folder), "LLAMA_CPP_URL": "http://127.0.0.1:9",
                          **(extra or {})}, cwd=folder)


def score_personal(folder: Path, data: dict, ids: dict[str, int], run) -> dict:
    questions = [h["question"] for h in data["hits"]]
    wanted = [ids[h["expect"]] for h in data["hits"]]
    answers = run(folder, questions)
    ranks = [next((i for i, r in enumerate(a.result.rows) if r.entry.id == w), None)
             for a, w in zip(answers, wanted)]
    n = len(ranks)
    return {"n": n, "top1": sum(r == 0 for r in ranks), "any5": sum(r is not None and r < 5 for r in ranks),
            "any10": sum(r is not None for r in ranks),
            "misses": [q for q, r in zip(questions, ranks) if r != 0]}


def admitted_words(folder: Path, data: dict) -> list[str]:
    """The set's questions that admit a word in its store (none should), with those words."""
    from forge.store import rag
    from forge.recall import channels

    with rag.open_store(open_settings(folder)) as store:
        found = [(h["question"], channels.admitted_words(store, h["question"]))
                 for h in data["hits"]]
    return [f"{q} {words}" for q, words in found if words]


def locomo_sets(base: Path) -> list[tuple[Path, list[dict], str | None]]:
    """(store folder, questions, the moment they are read at: the last session's time)."""
    import locomo

    data = json.loads(locomo.DEFAULT_DATA.read_text(encoding="utf-8"))
    out = []
    for number, conversation in enumerate(data, 1):
        folder = base / f"conversation-{number}"
        if not (folder / "locomo-built.json").exists():
            continue
        records = locomo.records(conversation)
        refs = {r["ref"] for r in records}
        ended = max((r["ts"] for r in records if r.get("ts")), default=None)
        out.append((folder, locomo.questions(conversation, refs, None), ended))
    return out


def score_locomo(folder: Path, asked: list[dict], run, now: str | None = None) -> dict:
    answers = run(folder, [q["q"] for q in asked], now)
    hit5 = hit10 = 0
    for q, a in zip(asked, answers):
        wanted = set(q["evidence"])
        found = [bool(wanted & set((r.entry.refs or {}).get("external") or [])) for r in a.result.rows]
        hit5 += any(found[:5])
        hit10 += any(found[:10])
    return {"n": len(asked), "any5": hit5, "any10": hit10}


class Runner:
    """Runs one variant's recalls, with each set's question vectors embedded once."""

    def __init__(self, keep: Path) -> None:
        self.keep = keep
        self.vectors: dict[tuple[str, int], object] = {}
        self.ms: list[float] = []

    def __call__(self, variant: dict):
        from forge.recall import many
        from forge.store import rag

        def run(folder: Path, questions: list[str], now: str | None = None):
            key = (str(folder), len(questions))
            extra = {**({"FORGE_NOW": now} if now else {}), **variant.get("settings", {})}
            with rag.open_store(open_settings(folder, extra)) as store:
                if key not in self.vectors:
                    self.vectors[key] = many.embed_queries(store, questions)
                batch = many.search_many(store, questions, vectors=self.vectors[key], limit=10)
                self.ms.append(1000 * batch.search_seconds / max(1, len(questions)))
                return batch.answers
        return run


def main(argv: list[str] | None = None) -> int:
    import docs_figures
    from tabulate import tabulate

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keep", type=Path, required=True, help="build the small stores under DIR")
    parser.add_argument("--locomo", type=Path, help="the --keep DIR of bench/locomo.py")
    parser.add_argument("--misses", action="store_true", help="print the questions missed at top-1")
    parser.add_argument("--write-docs", action="store_true", help=docs_figures.HELP)
    args = parser.parse_args(argv)
    personal, personal_ids = personal_store(args.keep / "personal", FIXTURES / "personal_facts.json")
    french, french_ids = personal_store(args.keep / "french", FIXTURES / "french_personal.json")
    no_word, no_word_ids = personal_store(args.keep / "no-word", FIXTURES / "french_no_word.json")
    held, held_ids = personal_store(args.keep / "held-out", FIXTURES / "no_word_heldout.json")
    admitting = (admitted_words(args.keep / "no-word", no_word)
                 + admitted_words(args.keep / "held-out", held))
    convs = locomo_sets(args.locomo) if args.locomo else []
    runner = Runner(args.keep)
    table, notes = [], []
    for name, variant in variants().items():
        started = time.perf_counter()
        run = runner(variant)
        p = score_personal(args.keep / "personal", personal, personal_ids, run)
        f = score_personal(args.keep / "french", french, french_ids, run)
        nw = score_personal(args.keep / "no-word", no_word, no_word_ids, run)
        ho = score_personal(args.keep / "held-out", held, held_ids, run)
        row = [name, f"{p['top1'] / p['n']:.3f}", f"{p['any5'] / p['n']:.3f}",
               f"{f['top1']}/{f['n']}", f"{f['any5']}/{f['n']}",
               f"{nw['top1']}/{nw['n']} ({nw['top1'] / nw['n']:.3f})", f"{nw['any5']}/{nw['n']}",
               f"{ho['top1']}/{ho['n']} ({ho['top1'] / ho['n']:.3f})", f"{ho['any5']}/{ho['n']}"]
        total = {"n": 0, "any5": 0, "any10": 0}
        per = []
        for folder, asked, ended in convs:
            c = score_locomo(folder, asked, run, ended)
            per.append(f"{c['any5'] / c['n']:.3f}/{c['any10'] / c['n']:.3f}")
            for k in total:
                total[k] += c[k]
        if convs:
            row += [f"{total['any5'] / total['n']:.3f}", f"{total['any10'] / total['n']:.3f}", " ".join(per)]
        table.append(row)
        notes.append((name, p["misses"], f["misses"] + nw["misses"] + ho["misses"],
                      time.perf_counter() - started))
    headers = ["variant", "personal top-1", "any@5", "french top-1", "any@5", "no-word top-1",
               "any@5", "held-out top-1", "any@5"]
    if convs:
        headers += ["LoCoMo any@5", "any@10", "per conversation any@5/any@10"]
    with docs_figures.tee("recall_sets", args.write_docs):
        print(f"personal: {len(personal['entries'])} entries, {len(personal['hits'])} questions; "
              f"french: {len(french['entries'])} entries, {len(french['hits'])} questions; "
              f"no-word: {len(no_word['entries'])} entries, {len(no_word['hits'])} questions; "
              f"held-out: {len(held['entries'])} entries, {len(held['hits'])} questions "
              f"({len(admitting)} of these two sets' admitting a word{': ' if admitting else ''}"
              f"{'; '.join(admitting)}); "
              f"LoCoMo: {len(convs)} conversations, {sum(len(a) for _, a, _ in convs)} questions "
              "(forge recall --limit 10's code)")
        print(tabulate(table, headers=headers, tablefmt="github"))
        if args.misses:
            for name, pm, fm, _ in notes:
                print(f"\n{name}: personal top-1 misses: {pm}\n  french, no-word and held-out "
                      f"top-1 misses: {fm}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
