"""LoCoMo through Forge's own pipeline: import as history, compact, ask through batch recall.

    python bench/locomo.py [--data FILE] [--conversations N] [--sessions N] [--questions N]
                           [--keep DIR] [--json] [--write-docs]

Measures any@5 / any@10 (an evidence turn among `forge recall --limit k`'s rows) per category
and channel, and the session-level R@k. `--keep DIR` builds the stores once. Data: FORGE_LOCOMO
(CC BY-NC 4.0: bench/LOCOMO_LICENSE.md). The protocol: docs/benchmarks.md, "LoCoMo".
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DEFAULT_DATA = Path(os.environ.get("FORGE_LOCOMO")
                    or ROOT.parent / "shared" / "data" / "locomo" / "locomo-dev.json")
# LoCoMo's category numbers; 5, adversarial, has no answer to find (session level only).
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
SESSION_CATEGORIES = {**CATEGORIES, 5: "adversarial"}
BUDGETS = (5, 10)


def turns(conversation: dict, sessions: int | None = None):
    """(the session's raw date, the turn) of each turn, session by session in order."""
    conv = conversation["conversation"]
    numbers = sorted(int(m.group(1)) for k in conv if (m := re.fullmatch(r"session_(\d+)", k)))
    for number in numbers[:sessions] if sessions else numbers:
        for turn in conv[f"session_{number}"]:
            yield conv.get(f"session_{number}_date_time"), turn


def records(conversation: dict, sessions: int | None = None) -> list[dict]:
    """History import records for one LoCoMo conversation, each turn's date ("1:56 pm on 8 May,
    2023") at the head of its text and as its ts."""
    user = conversation["conversation"]["speaker_a"]
    out = []
    for raw, turn in turns(conversation, sessions):
        date_text, ts = (raw or "").strip(), None
        with contextlib.suppress(ValueError):
            ts = datetime.strptime(date_text, "%I:%M %p on %d %B, %Y").strftime(
                "%Y-%m-%dT%H:%M:00Z")
        photo = f" [shares a photo: {turn['blip_caption']}]" if turn.get("blip_caption") else ""
        out.append({"role": "user" if turn["speaker"] == user else "assistant",
                    "content": f"({date_text}) {turn['speaker']}: {turn['text']}{photo}",
                    "ref": turn["dia_id"], **({"ts": ts} if ts else {})})
    return out


def questions(conversation: dict, known_refs: set[str], limit: int | None,
              categories: dict = CATEGORIES) -> list[dict]:
    """Questions of `categories` (1-4 by default) whose evidence is in the imported turns."""
    out = []
    for q in conversation["qa"]:
        refs = [e for item in q.get("evidence", []) for e in re.split(r"[;,\s]+", item) if e]
        if q.get("category") in categories and refs and set(refs) <= known_refs:
            out.append({"q": q["question"], "category": q["category"], "evidence": refs})
    return out[:limit] if limit else out


def row_refs(row) -> list[str]:
    return (row.entry.refs or {}).get("external") or []


def first_sessions(rows: list, k: int) -> list[str]:
    """The first k distinct sessions of `rows` in rank order (`D12:5` is in session `D12`)."""
    return list(dict.fromkeys(ref.split(":", 1)[0] for row in rows for ref in row_refs(row)))[:k]


def build(recs: list[dict], folder: Path, settings, sessions: int | None) -> dict:
    """Import and compact into `folder`, or read what an earlier run built there (--keep)."""
    from forge.memory import compaction, history_import

    built = folder / "locomo-built.json"
    if built.exists():
        return json.loads(built.read_text())
    started = time.perf_counter()
    done = history_import.import_history(settings, "\n".join(json.dumps(r) for r in recs),
                                         source="locomo", compact=True, strategy="rag_pointer")
    compaction.compact(settings, strategy="rag_pointer")   # what the import left
    report = {"compactions": done.compactions + 1, "sessions": sessions, "turns": len(recs),
              "import_seconds": round(time.perf_counter() - started, 2)}
    built.write_text(json.dumps(report))
    return report


def run_conversation(conversation: dict, folder: Path, *, sessions: int | None,
                     limit: int | None) -> dict:
    from forge.core.settings import load_settings
    from forge.recall import many
    from forge.store import rag

    recs = records(conversation, sessions)
    settings = load_settings({
        "FORGE_DATA_DIR": str(folder), "COMPACTION_KEEP_RECENT": "0",
        "COMPACTION_THRESHOLD": "40", "MEMORY_MAX_HISTORY": "200",
        "LLAMA_CPP_URL": "http://127.0.0.1:9",   # no chat server: the token estimate
        # its questions were written when the conversation ended: read at its last session
        "FORGE_NOW": max((r["ts"] for r in recs if r.get("ts")), default="")}, cwd=folder)
    report = build(recs, folder, settings, sessions)
    known = {r["ref"] for r in recs}
    asked = questions(conversation, known, limit)
    every = asked + questions(conversation, known, limit, {5: SESSION_CATEGORIES[5]})
    out = {"sample_id": conversation.get("sample_id"), "turns": len(recs),
           "compactions": report["compactions"], "import_seconds": report["import_seconds"],
           "questions": [], "sessions": [], "recall_seconds": 0.0}
    with rag.open_store(settings) as store:
        out["entries"] = rag.count_entries(store)
        t0 = time.perf_counter()
        vectors = many.embed_queries(store, [q["q"] for q in every])
        out["embed_seconds"] = time.perf_counter() - t0
        rows = {}
        for budget in sorted(set(BUDGETS) | {2 * k for k in BUDGETS}):
            batch = many.search_many(store, [q["q"] for q in every], vectors=vectors,
                                     limit=budget)
            out["recall_seconds"] += batch.search_seconds
            rows[budget] = [a.result.rows for a in batch.answers]
    for index, q in enumerate(every):   # the session level: the first k sessions of 2k rows
        wanted = {ref.split(":", 1)[0] for ref in q["evidence"]}
        out["sessions"].append({"category": q["category"], **{
            f"session@{k}": bool(wanted & set(first_sessions(rows[2 * k][index], k)))
            for k in BUDGETS}})
    for index, q in enumerate(asked):   # `asked` leads `every`: the same index
        scored = dict(q)
        for budget in BUDGETS:
            hits = [r for r in rows[budget][index] if set(q["evidence"]) & set(row_refs(r))]
            vector = any(r.channel in ("vector", "both") for r in hits)
            lexical = any(r.channel in ("lexical", "both") for r in hits)
            neighbour = any(r.channel == "neighbour" for r in hits)
            scored.update({f"any@{budget}": vector or lexical or neighbour,
                           f"vector@{budget}": vector, f"lexical@{budget}": lexical,
                           f"rows@{budget}": len(rows[budget][index])})
        out["questions"].append(scored)
    return out


def share(items: list[dict], key: str) -> float | None:
    return round(sum(q[key] for q in items) / len(items), 4) if items else None


def table(items: list[dict], categories: dict, keys: list[str]) -> list[dict]:
    """One row for every item, then one per category: n and the share of each key."""
    groups = [("all", items)] + [(f"{n} {name}", [q for q in items if q["category"] == n])
                                 for n, name in categories.items()]
    return [{"questions": label, "n": len(group), **{k: share(group, k) for k in keys}}
            for label, group in groups]


def summarise(conversations: list[dict]) -> dict:
    asked = [q for c in conversations for q in c["questions"]]
    keys = [f"{m}@{b}" for b in BUDGETS for m in ("any", "vector", "lexical")]
    total = {k: round(sum(c[k] for c in conversations), digits)
             for k, digits in (("import_seconds", 2), ("embed_seconds", 2), ("recall_seconds", 3))}
    return {
        "table": table(asked, CATEGORIES, keys),
        "session_table": table([q for c in conversations for q in c["sessions"]],
                               SESSION_CATEGORIES, [f"session@{k}" for k in BUDGETS]),
        "conversations": [{**{k: v for k, v in c.items() if k not in ("questions", "sessions")},
                           **{f"any@{b}": share(c["questions"], f"any@{b}") for b in BUDGETS}}
                          for c in conversations],
        "turns": sum(c["turns"] for c in conversations),
        "entries": sum(c["entries"] for c in conversations),
        "questions": len(asked), **total,
        "protocol": {"budgets": {b: {"limit": b} for b in BUDGETS}, "strategy": "rag_pointer",
                     "sessions": {"rows": {k: {"limit": 2 * k} for k in BUDGETS}}},
        "per_question": asked,
    }


def print_table(summary: dict) -> None:
    from tabulate import tabulate

    def show(rows: list[dict], headers: list[str]) -> None:
        print(tabulate([["" if v is None else v for v in r.values()] for r in rows],
                       headers=headers, tablefmt="simple", floatfmt=".3f"))

    show(summary["table"], list(summary["table"][0]))
    print(f"{summary['questions']} questions, {len(summary['conversations'])} conversations, "
          f"{summary['turns']} turns -> {summary['entries']} archive entries; "
          f"import+compaction {summary['import_seconds']:.1f} s, question embedding "
          f"{summary['embed_seconds']:.1f} s, recall {summary['recall_seconds']:.2f} s "
          f"(every budget)")
    print("\nsession level (every question with evidence, category 5 included; the first k "
          "distinct sessions of 2k rows):")
    show(summary["session_table"], ["questions", "n"] + [f"R@{k}" for k in BUDGETS])
    if len(summary["conversations"]) > 1:   # the spread a conversation not measured may fall in
        print("per conversation (" + " / ".join(f"any@{b}" for b in BUDGETS) + "): " + ", ".join(
            f"{c['sample_id']} " + " / ".join(f"{c[f'any@{b}']:.3f}" for b in BUDGETS)
            for c in summary["conversations"] if c.get(f"any@{BUDGETS[0]}") is not None))


def main(argv: list[str] | None = None) -> int:
    import docs_figures

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA,
                        help=f"the LoCoMo JSON file (default: FORGE_LOCOMO, or {DEFAULT_DATA})")
    parser.add_argument("--conversations", type=int, help="only the first N conversations")
    parser.add_argument("--sessions", type=int, help="only the first N sessions of each")
    parser.add_argument("--questions", type=int, help="at most N questions per conversation")
    parser.add_argument("--keep", type=Path, help="build the stores under DIR and keep them")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    parser.add_argument("--write-docs", action="store_true", help=docs_figures.HELP)
    args = parser.parse_args(argv)
    if not args.data.exists():
        sys.exit(f"error: no LoCoMo data at {args.data} (--data FILE or FORGE_LOCOMO)")
    data = json.loads(args.data.read_text(encoding="utf-8"))[:args.conversations]
    done = []
    with tempfile.TemporaryDirectory(prefix="forge-locomo-") as scratch:
        for number, conversation in enumerate(data, 1):
            only = f"-sessions-{args.sessions}" if args.sessions else ""   # another store
            folder = (args.keep or Path(scratch)) / f"conversation-{number}{only}"
            folder.mkdir(parents=True, exist_ok=True)
            print(f"conversation {number}/{len(data)} ({conversation.get('sample_id')}) ...",
                  file=sys.stderr, flush=True)
            done.append(run_conversation(conversation, folder, sessions=args.sessions,
                                         limit=args.questions))
    summary = {**summarise(done), "data": str(args.data)}
    with docs_figures.tee("locomo", args.write_docs):
        if args.json:
            print(json.dumps(summary, ensure_ascii=False, indent=2))
        else:
            print_table(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
