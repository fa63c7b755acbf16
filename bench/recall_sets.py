"""Recall measured on every set at once: the personal, French, no-word, held-out and LoCoMo sets.

    python bench/recall_sets.py --keep DIR [--locomo DIR] [--write-docs]

The small sets of tests/fixtures, their stores built once under --keep DIR; LoCoMo's stores
built by `bench/locomo.py --keep DIR` (--locomo DIR), every category 1-4 question read at its
conversation's last session. Two columns, as `forge recall --limit 10` reads them: shipped
(RECALL_SENTENCE=on), and the three channels alone (off). The sets: docs/benchmarks/recall.md.
true_now.py and personal_facts.py build their stores here.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path
from typing import Any

import harness

ROOT = harness.ROOT
FIXTURES = ROOT / "tests" / "fixtures"
SMALL = {"personal": "personal_facts.json", "french": "french_personal.json",
         "no-word": "french_no_word.json", "held-out": "no_word_heldout.json"}
VARIANTS = {"RECALL_SENTENCE=on": "on", "RECALL_SENTENCE=off": "off"}
METRICS = {"top-1": "top1", "any@5": "any5", "any@10": "any10"}


def settings(folder: Path, **env: str):
    """A set's store: no chat server (a compacted exchange is cut, not summarised), `env`."""
    return harness.data_settings(folder, LLAMA_CPP_URL="http://127.0.0.1:9", **env)


def dated_settings(folder: Path, data: dict, **env: str):
    """A dated set's store, read at the set's fixed "now"."""
    return settings(folder, FORGE_NOW=data["now"], COMPACTION_KEEP_RECENT="0", **env)


def build_notes(folder: Path, data: dict) -> dict[str, int]:
    """Remember a small set's entries once, each note with its sentence row as `forge remember
    --batch` stores it: key -> entry id (kept beside the store, a second run reuses it)."""
    from forge.recall.writing import rows_written
    from forge.store import rag

    index = folder / "personal-facts-ids.json"
    if index.exists():
        return json.loads(index.read_text())
    folder.mkdir(parents=True, exist_ok=True)
    with rag.open_store(settings(folder)) as store:
        done = rag.remember_many(rows_written(store), [rag.NewEntry(e["kind"], e["content"])
                                                       for e in data["entries"]])
    ids = {e["key"]: r.id for e, r in zip(data["entries"], done)}
    index.write_text(json.dumps(ids))
    return ids


def build_dated(folder: Path, data: dict) -> dict[str, int]:
    """A dated set's store, written once: its entries dated by `forge remember --at`'s code, its
    conversations imported with their timestamps (`history import --compact`), all in a
    shuffled order (the set's `seed`, default 7) so ids do not follow dates: key -> entry id."""
    from forge.memory import compaction, history_import
    from forge.store import rag

    index = folder / "time-built.json"
    if index.exists():
        return json.loads(index.read_text())
    folder.mkdir(parents=True, exist_ok=True)
    dated = dated_settings(folder, data)
    items = [("entry", e) for e in data["entries"]] + [("history", h) for h in data["history"]]
    random.Random(data.get("seed", 7)).shuffle(items)
    ids: dict[str, int] = {}
    with rag.open_store(dated) as store:
        for what, item in items:
            if what == "entry":   # forge remember KIND TEXT [-p P] --at WHEN
                ids[item["key"]] = rag.remember(store, item["kind"], item["content"],
                                                project=item.get("project"),
                                                created=item["at"]).id
                continue
            records = [{"role": role, "content": text, "ts": item["ts"]}
                       for role, text in item["messages"]]
            history_import.import_history(dated, "\n".join(json.dumps(r) for r in records),
                                          source=item["key"], compact=True)
            compaction.compact(dated, strategy="rag_pointer", store=store)
            archived = [e for e in rag.list_entries(store, kind=rag.ARCHIVE_KIND)
                        if e.id not in ids.values()]
            ids[item["key"]] = archived[-1].id
    index.write_text(json.dumps(ids))
    return ids


def small_sets(keep: Path) -> dict[str, tuple[Path, dict, dict[str, int]]]:
    """Each small set: (its store under `keep`, its data, key -> entry id)."""
    out = {}
    for name, file in SMALL.items():
        data = json.loads((FIXTURES / file).read_text(encoding="utf-8"))
        out[name] = (keep / name, data, build_notes(keep / name, data))
    return out


def locomo_sets(base: Path) -> list[tuple[Path, list[dict], str | None]]:
    """(store folder, questions, the moment they are read at: the last session's time)."""
    import locomo

    if not locomo.DEFAULT_DATA.is_file():
        sys.exit(f"error: no LoCoMo data at {locomo.DEFAULT_DATA} (set FORGE_LOCOMO)")
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
    if not out:
        sys.exit(f"error: --locomo {base}: no store built there "
                 "(bench/locomo.py --keep DIR builds them)")
    return out


def answers(folder: Path, questions: list[str], sentence: str, now: str | None,
            vectors: dict, **options) -> list:
    """`forge recall --limit 10`'s answers (RECALL_SENTENCE=sentence, read at `now`; `options`:
    search_many's), each store's questions embedded once (`vectors`, shared by the variants)."""
    from forge.recall import many
    from forge.store import rag

    env = {**({"FORGE_NOW": now} if now else {}), "RECALL_SENTENCE": sentence}
    with rag.open_store(settings(folder, **env)) as store:
        if folder not in vectors:
            vectors[folder] = many.embed_queries(store, questions)
        return many.search_many(store, questions, vectors=vectors[folder], limit=10,
                                **options).answers


def locomo_read(folder: Path, asked: list[dict], ended: str | None, sentence: str,
                vectors: dict, **options) -> list[tuple[bool, bool, Any]]:
    """Each question of a LoCoMo conversation: (one of its evidence turns in the first 5 rows,
    in the first 10, the answer)."""
    out = []
    for q, a in zip(asked, answers(folder, [q["q"] for q in asked], sentence, ended, vectors,
                                   **options)):
        found = [bool(set(q["evidence"]) & set((r.entry.refs or {}).get("external") or []))
                 for r in a.result.rows]
        out.append((any(found[:5]), any(found[:10]), a))
    return out


def measured(sets: dict, convs: list) -> dict[str, dict[str, dict]]:
    """{variant: {set: {"n", "top1", "any5"}}}: the small sets; each LoCoMo conversation (by its
    folder's name) and "LoCoMo", their sum: {"n", "any5", "any10"}."""
    vectors: dict = {}
    out = {}
    for variant, sentence in VARIANTS.items():
        got = out[variant] = {}
        for name, (folder, data, ids) in sets.items():
            questions = [h["question"] for h in data["hits"]]
            wanted = [ids[h["expect"]] for h in data["hits"]]
            ranks = [next((i for i, r in enumerate(a.result.rows) if r.entry.id == w), None)
                     for a, w in zip(answers(folder, questions, sentence, None, vectors), wanted)]
            got[name] = {"n": len(ranks), "top1": sum(r == 0 for r in ranks),
                         "any5": sum(r is not None and r < 5 for r in ranks)}
        for folder, asked, ended in convs:
            read = locomo_read(folder, asked, ended, sentence, vectors)
            got[folder.name] = {"n": len(read), "any5": sum(r[0] for r in read),
                                "any10": sum(r[1] for r in read)}
        if convs:
            got["LoCoMo"] = {k: sum(got[d.name][k] for d, _, _ in convs)
                             for k in ("n", "any5", "any10")}
    return out


def admitted_words(folder: Path, data: dict) -> list[str]:
    """The set's questions that admit a word in its store (none should), with those words."""
    from forge.store import rag
    from forge.recall import channels

    with rag.open_store(settings(folder)) as store:
        found = [(h["question"], channels.admitted_words(store, h["question"]))
                 for h in data["hits"]]
    return [f"{q} {words}" for q, words in found if words]


def fraction(n: int, of: int) -> str:
    return f"{n}/{of} ({n / of:.3f})" if of else "-"


def rows(got: dict) -> list[list]:
    """`measured`'s figures as rows: set, metric, n, then "k/n (fraction)" for each variant."""
    first = next(iter(got.values()))
    return [["held-out (no word)" if name == "held-out" else name, metric, first[name]["n"],
             *(fraction(g[name][key], g[name]["n"]) for g in got.values())]
            for name in [*SMALL, "LoCoMo"] if name in first
            for metric, key in METRICS.items() if key in first[name]]


def main(argv: list[str] | None = None) -> int:
    import docs_figures
    from tabulate import tabulate

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keep", type=Path, required=True, help="build the small stores under DIR")
    parser.add_argument("--locomo", type=Path, help="the --keep DIR of bench/locomo.py")
    parser.add_argument("--write-docs", action="store_true", help=docs_figures.HELP)
    args = parser.parse_args(argv)
    convs = locomo_sets(args.locomo) if args.locomo else []
    sets = small_sets(args.keep)
    admitting = [line for name in ("no-word", "held-out")
                 for line in admitted_words(*sets[name][:2])]
    got = measured(sets, convs)
    with docs_figures.tee("recall_sets", args.write_docs):
        sizes = "; ".join(f"{name}: {len(d['entries'])} entries, {len(d['hits'])} questions"
                          for name, (_, d, _) in sets.items())
        words = f": {'; '.join(admitting)}" if admitting else ""
        print(f"{sizes} ({len(admitting)} of these two sets' admitting a word{words}); "
              f"LoCoMo: {len(convs)} conversations, {sum(len(a) for _, a, _ in convs)} "
              "questions (forge recall --limit 10's code)")
        print(tabulate(rows(got), headers=["set", "", "n", *VARIANTS], tablefmt="github"))
        if convs:
            print("LoCoMo per conversation, any@5/any@10: " + "; ".join(
                f"{variant} " + " ".join(f"{s[d.name]['any5'] / s[d.name]['n']:.3f}/"
                                         f"{s[d.name]['any10'] / s[d.name]['n']:.3f}"
                                         for d, _, _ in convs) for variant, s in got.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
