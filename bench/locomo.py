"""LoCoMo through Forge's own pipeline: import as history, compact, ask through batch recall.

    python bench/locomo.py [--data FILE] [--conversations N] [--sessions N] [--questions N]
                           [--keep DIR] [--json] [--write-docs]

Each conversation (LoCoMo, Maharana et al. 2024, CC BY-NC 4.0: bench/LOCOMO_LICENSE.md) is
imported into a fresh data folder with `forge history import --compact`'s code (each turn's
`dia_id` kept as its ref), then every question of categories 1-4 goes through `forge recall
--queries`'s code at 5 and 10 rows: any@k overall, per category and per channel; beside it the
session-level R@k (category 5 included). `--keep DIR` builds the stores once and reuses them.
The protocol in full: docs/benchmarks.md, "LoCoMo".
"""
from __future__ import annotations

import argparse
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
# LoCoMo's category numbers (its paper's Table: multi-hop 282, temporal 321, open-domain 96,
# single-hop 841, adversarial 446 over the full set); 5, adversarial, has no answer to find.
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
BUDGETS = (5, 10)
# The session-level protocol: every category, 5 (adversarial) included.
SESSION_CATEGORIES = {**CATEGORIES, 5: "adversarial"}


def rows_budget(budget: int) -> dict:
    """The recall arguments of a rows budget: `forge recall --limit N`'s fused ranking."""
    return {"limit": budget}


def session_date(raw: str | None) -> tuple[str, str | None]:
    """("8 May 2023, 1:56 pm", "2023-05-08T13:56:00Z") from LoCoMo's "1:56 pm on 8 May, 2023"."""
    if not raw:
        return "", None
    try:
        when = datetime.strptime(raw.strip(), "%I:%M %p on %d %B, %Y")
    except ValueError:
        return raw.strip(), None
    return raw.strip(), when.strftime("%Y-%m-%dT%H:%M:00Z")


def records(conversation: dict, sessions: int | None = None) -> list[dict]:
    """History import records for one LoCoMo conversation."""
    conv = conversation["conversation"]
    user = conv["speaker_a"]
    numbers = sorted(int(m.group(1)) for k in conv if (m := re.fullmatch(r"session_(\d+)", k)))
    out = []
    for number in numbers[:sessions] if sessions else numbers:
        date_text, ts = session_date(conv.get(f"session_{number}_date_time"))
        for turn in conv[f"session_{number}"]:
            text = turn["text"]
            if turn.get("blip_caption"):
                text += f" [shares a photo: {turn['blip_caption']}]"
            record = {"role": "user" if turn["speaker"] == user else "assistant",
                      "content": f"({date_text}) {turn['speaker']}: {text}", "ref": turn["dia_id"]}
            if ts:
                record["ts"] = ts
            out.append(record)
    return out


def evidence(question: dict) -> list[str]:
    return [e for item in question.get("evidence", []) for e in re.split(r"[;,\s]+", item) if e]


def session_of(ref: str) -> str:
    """The session of a LoCoMo dia_id: `D12:5` -> `D12`."""
    return ref.split(":", 1)[0]


def first_sessions(rows: list, k: int) -> list[str]:
    """The first k distinct sessions of `rows`, in rank order (a row's: its dia_ids')."""
    out: list[str] = []
    for row in rows:
        for ref in (row.entry.refs or {}).get("external") or []:
            session = session_of(ref)
            if session not in out:
                out.append(session)
    return out[:k]


def questions(conversation: dict, known_refs: set[str], limit: int | None,
              categories: dict = CATEGORIES) -> list[dict]:
    """Questions of `categories` (1-4 by default) whose evidence is in the imported turns."""
    out = []
    for q in conversation["qa"]:
        if q.get("category") not in categories:
            continue
        refs = evidence(q)
        if not refs or not set(refs) <= known_refs:
            continue
        out.append({"q": q["question"], "category": q["category"], "evidence": refs})
    return out[:limit] if limit else out


def run_conversation(conversation: dict, folder: Path, *, sessions: int | None,
                     limit: int | None) -> dict:
    from forge.memory import compaction, history_import
    from forge.store import rag
    from forge.recall import many
    from forge.core.settings import load_settings

    recs = records(conversation, sessions)
    env = {"FORGE_DATA_DIR": str(folder), "COMPACTION_KEEP_RECENT": "0",
           "COMPACTION_THRESHOLD": "40", "MEMORY_MAX_HISTORY": "200",
           "LLAMA_CPP_URL": "http://127.0.0.1:9",   # no chat server: the token estimate
           # its questions were written when the conversation ended: read at its last session
           "FORGE_NOW": max((r["ts"] for r in recs if r.get("ts")), default="")}
    settings = load_settings(env, cwd=folder)
    started = time.perf_counter()
    built = folder / "locomo-built.json"
    if built.exists():   # --keep DIR: the store of an earlier run, same data and sessions
        report = json.loads(built.read_text())
        if report.get("sessions") != sessions:
            raise SystemExit(f"error: {folder} was built with --sessions {report.get('sessions')}; "
                             "use another --keep DIR")
    else:
        done = history_import.import_history(settings, "\n".join(json.dumps(r) for r in recs),
                                             source="locomo", compact=True,
                                             strategy="rag_pointer")
        compaction.compact(settings, strategy="rag_pointer")   # what the import left
        report = {"compactions": done.compactions + 1,
                  "import_seconds": round(time.perf_counter() - started, 2),
                  "sessions": sessions, "turns": len(recs)}
        built.write_text(json.dumps(report))
    known = {r["ref"] for r in recs}
    asked = questions(conversation, known, limit)
    # the session protocol's questions: these and the adversarial ones
    every = asked + questions(conversation, known, limit, {5: SESSION_CATEGORIES[5]})
    out = {"sample_id": conversation.get("sample_id"), "turns": len(recs),
           "compactions": report["compactions"], "questions": [], "sessions": [],
           "import_seconds": 0.0, "embed_seconds": 0.0, "recall_seconds": 0.0}
    with rag.open_store(settings) as store:
        out["entries"] = rag.count_entries(store)
        t0 = time.perf_counter()
        vectors = many.embed_queries(store, [q["q"] for q in every])
        out["embed_seconds"] = time.perf_counter() - t0
        answers = {}
        for budget in sorted(set(BUDGETS) | {2 * k for k in BUDGETS}):
            batch = many.search_many(store, [q["q"] for q in every], vectors=vectors,
                                     **rows_budget(budget))
            out["recall_seconds"] += batch.search_seconds
            answers[budget] = batch.answers
        results = {b: [a for q, a in zip(every, answers[b]) if q["category"] in CATEGORIES]
                   for b in BUDGETS}
        for index, q in enumerate(every):
            wanted = {session_of(ref) for ref in q["evidence"]}
            out["sessions"].append({"category": q["category"], **{
                f"session@{k}": bool(wanted & set(first_sessions(
                    answers[2 * k][index].result.rows, k))) for k in BUDGETS}})
    out["import_seconds"] = report["import_seconds"]
    for index, q in enumerate(asked):
        wanted = set(q["evidence"])
        scored = dict(q)
        for budget in BUDGETS:
            rows = results[budget][index].result.rows
            via = {"vector": False, "lexical": False, "neighbour": False}
            for row in rows:
                if wanted & set((row.entry.refs or {}).get("external") or []):
                    via["vector"] |= row.channel in ("vector", "both")
                    via["lexical"] |= row.channel in ("lexical", "both")
                    via["neighbour"] |= row.channel == "neighbour"
            scored[f"any@{budget}"] = any(via.values())
            scored[f"vector@{budget}"] = via["vector"]
            scored[f"lexical@{budget}"] = via["lexical"]
            scored[f"rows@{budget}"] = len(rows)
        out["questions"].append(scored)
    return out


def summarise(conversations: list[dict]) -> dict:
    asked = [q for c in conversations for q in c["questions"]]

    def share(items: list[dict], key: str) -> float | None:
        return round(sum(q[key] for q in items) / len(items), 4) if items else None

    table = []
    groups = [("all", asked)] + [(f"{n} {name}", [q for q in asked if q["category"] == n])
                                 for n, name in CATEGORIES.items()]
    for label, items in groups:
        row = {"questions": label, "n": len(items)}
        for budget in BUDGETS:
            row[f"any@{budget}"] = share(items, f"any@{budget}")
            row[f"vector@{budget}"] = share(items, f"vector@{budget}")
            row[f"lexical@{budget}"] = share(items, f"lexical@{budget}")
        table.append(row)
    sessions = [q for c in conversations for q in c.get("sessions", [])]
    session_table = []
    for label, items in [("all", sessions)] + [
            (f"{n} {name}", [q for q in sessions if q["category"] == n])
            for n, name in SESSION_CATEGORIES.items()]:
        session_table.append({"questions": label, "n": len(items),
                              **{f"session@{k}": share(items, f"session@{k}") for k in BUDGETS}})
    return {
        "table": table,
        "session_table": session_table,
        "conversations": [{**{k: v for k, v in c.items() if k not in ("questions", "sessions")},
                           **{f"any@{b}": share(c["questions"], f"any@{b}") for b in BUDGETS}}
                          for c in conversations],
        "turns": sum(c["turns"] for c in conversations),
        "entries": sum(c["entries"] for c in conversations),
        "questions": len(asked),
        "import_seconds": round(sum(c["import_seconds"] for c in conversations), 2),
        "embed_seconds": round(sum(c["embed_seconds"] for c in conversations), 2),
        "recall_seconds": round(sum(c["recall_seconds"] for c in conversations), 3),
        "protocol": {"budgets": {b: rows_budget(b) for b in BUDGETS},
                     "categories": CATEGORIES, "cutoff": None, "strategy": "rag_pointer",
                     "sessions": {"categories": SESSION_CATEGORIES,
                                  "rows": {k: rows_budget(2 * k) for k in BUDGETS},
                                  "hit": "an evidence session among the first k distinct "
                                         "sessions of the rows"}},
        "per_question": asked,
    }


def print_table(summary: dict) -> None:
    from tabulate import tabulate

    columns = ["questions", "n"] + [f"{m}@{b}" for b in BUDGETS for m in ("any", "vector", "lexical")]
    print(tabulate([[r[c] if r[c] is not None else "" for c in columns] for r in summary["table"]],
                   headers=columns, tablefmt="simple", floatfmt=".3f"))
    print(f"{summary['questions']} questions, {len(summary['conversations'])} conversations, "
          f"{summary['turns']} turns -> {summary['entries']} archive entries; "
          f"import+compaction {summary['import_seconds']:.1f} s, question embedding "
          f"{summary['embed_seconds']:.1f} s, recall {summary['recall_seconds']:.2f} s "
          f"(every budget)")
    if summary.get("session_table"):
        ks = [f"session@{k}" for k in BUDGETS]
        print("\nsession level (every question with evidence, category 5 included; the first k "
              "distinct sessions of 2k rows):")
        print(tabulate([[r["questions"], r["n"]] + [r[c] if r[c] is not None else "" for c in ks]
                        for r in summary["session_table"]],
                       headers=["questions", "n"] + [f"R@{k}" for k in BUDGETS],
                       tablefmt="simple", floatfmt=".3f"))
    if len(summary["conversations"]) > 1:   # the spread a conversation not measured may fall in
        print("per conversation (" + " / ".join(f"any@{b}" for b in BUDGETS) + "): " + ", ".join(
            f"{c['sample_id']} " + " / ".join(f"{c[f'any@{b}']:.3f}" for b in BUDGETS)
            for c in summary["conversations"] if c.get(f"any@{BUDGETS[0]}") is not None))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=Path(os.environ.get("FORGE_LOCOMO", DEFAULT_DATA)),
                        help="the LoCoMo JSON file (default ../shared/data/locomo/locomo-dev.json)")
    parser.add_argument("--conversations", type=int, help="only the first N conversations")
    parser.add_argument("--sessions", type=int, help="only the first N sessions of each")
    parser.add_argument("--questions", type=int, help="at most N questions per conversation")
    parser.add_argument("--keep", type=Path, help="build the stores under DIR and keep them")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    import docs_figures

    parser.add_argument("--write-docs", action="store_true", help=docs_figures.HELP)
    args = parser.parse_args(argv)
    if not args.data.exists():
        print(f"error: no LoCoMo data at {args.data} (--data FILE or FORGE_LOCOMO)", file=sys.stderr)
        return 1
    data = json.loads(args.data.read_text(encoding="utf-8"))[:args.conversations]
    base = args.keep or Path(tempfile.mkdtemp(prefix="forge-locomo-"))
    done = []
    for number, conversation in enumerate(data, 1):
        folder = base / f"conversation-{number}"
        folder.mkdir(parents=True, exist_ok=True)
        print(f"conversation {number}/{len(data)} ({conversation.get('sample_id')}) ...",
              file=sys.stderr, flush=True)
        done.append(run_conversation(conversation, folder, sessions=args.sessions,
                                     limit=args.questions))
    summary = summarise(done)
    summary["data"] = str(args.data)
    with docs_figures.tee("locomo", args.write_docs):
        if args.json:
            print(json.dumps(summary, ensure_ascii=False, indent=2))
        else:
            print_table(summary)
    if not args.keep:
        import shutil

        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
