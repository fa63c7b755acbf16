"""The word channel's admission rule (its rarity rule) on small and large stores, on LoCoMo.

    python bench/lexical_df.py [--sizes 5,10,20,50,100,200,419,all] [--data ../shared/data/locomo/locomo-dev.json]

Stores are the first N dialogue turns of LoCoMo's conversations (the text of each turn, one
entry each); the questions are LoCoMo's own, kept when every evidence turn is in the store.
For each admission rule it prints, per store size:

- `adm/q`: words admitted per question;
- `common`: the share of admitted words that are common words of the language, i.e. that
  appear in at least 5% of all the turns of every conversation (the yardstick, not the rule:
  the rules see only the store);
- `scale`: the share of admitted words the flat rule (`seed`: df <= max(1, 0.2 x entries), no
  ramp below 50 entries) refuses on the whole corpus (1,451 turns): words a small store calls
  rare only because it is small;
- `rows/q`: rows the word channel returns (budget 5), `prec`: the share of them that are an
  evidence turn, `hit`: questions with an evidence turn among them.

Vectors are not measured (a constant vector; the word channel never reads them), so the run
needs no model and takes seconds.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import docs_figures  # noqa: E402

DIM = 8
COMMON_SHARE = 0.05


class Constant:
    """One unit vector for every text: the word channel does not read vectors."""

    backend = "bench"
    url = None

    def identity(self):
        return {"backend": "bench", "model": "constant", "dim": DIM, "document_prefix": ""}

    def embed_documents(self, texts):
        import numpy as np

        v = np.zeros((len(texts), DIM), dtype=np.float32)
        v[:, 0] = 1.0
        return v

    def embed_query(self, text):
        return self.embed_documents([text])[0]

    def close(self):
        pass


def seed_rule(df: int, entries: int, max_df: float) -> bool:
    """The flat rule: df <= max(1, max_df x entries), with no ramp on small stores."""
    return 1 <= df <= max(1.0, max_df * entries)


def forge_rule(df: int, entries: int, max_df: float) -> bool:
    from forge.store.rag import is_informative

    return is_informative(df, entries, max_df)


def min_size_rule(n_min: int):
    """Below n_min entries a word must appear in at most one entry; the flat rule above."""
    def rule(df: int, entries: int, max_df: float) -> bool:
        return 1 <= df <= (1 if entries < n_min else max(1.0, max_df * entries))
    return rule


def ramp_rule(n_min: int):
    """The flat bound scaled by entries/n_min below n_min entries (continuous at n_min)."""
    def rule(df: int, entries: int, max_df: float) -> bool:
        return 1 <= df <= max(1.0, max_df * entries * min(1.0, entries / n_min))
    return rule


RULES = {"seed": seed_rule, "forge": forge_rule, "min50": min_size_rule(50),
         "min100": min_size_rule(100), "ramp50": ramp_rule(50), "ramp100": ramp_rule(100)}


def load(path: Path) -> tuple[list[list[tuple[str, str]]], list[list[dict]]]:
    data = json.loads(path.read_text(encoding="utf-8"))
    conversations, questions = [], []
    for sample in data:
        conv = sample["conversation"]
        turns = []
        for n in range(1, 100):
            for turn in conv.get(f"session_{n}", []) or []:
                turns.append((turn["dia_id"], turn["text"]))
        conversations.append(turns)
        questions.append([q for q in sample["qa"] if q.get("evidence") and q.get("question")])
    return conversations, questions


def build(settings, folder: Path, turns: list[tuple[str, str]]):
    from forge.store import rag

    store = rag.open_store(settings, embedder=Constant(), path=folder / f"s{len(turns)}.db")
    items = [rag.NewEntry("fact", text, None, "import", {"dia_id": dia}) for dia, text in turns]
    results = rag.remember_many(store, items, batch_size=500)
    by_entry = {r.id: dia for r, (dia, _) in zip(results, turns)}
    return store, by_entry


def measure(store, by_entry, questions, rule, common: set[str], rare_at_scale: set[str],
            max_df: float, acc: dict) -> None:
    from forge.store import rag
    from forge.recall import channels

    entries = rag.count_entries(store)
    for q in questions:
        words = []
        for word in rag.query_words(store, q["question"]):
            row = store.conn.execute("select doc from memory_fts_vocab where term = ?",
                                     (word,)).fetchone()
            if row and rule(row[0], entries, max_df):
                words.append(word)
        acc["questions"] += 1
        acc["admitted"] += len(words)
        acc["common"] += sum(w in common for w in words)
        acc["refused_at_scale"] += sum(w not in rare_at_scale for w in words)
        rows = channels.search_lexical(store, words, k=5)
        acc["rows"] += len(rows)
        evidence = set(q["evidence"])
        good = sum(by_entry.get(entry_id) in evidence for entry_id, _ in rows)
        acc["good"] += good
        acc["hits"] += good > 0


def report(acc: dict) -> dict:
    n, a, r = max(1, acc["questions"]), acc["admitted"], acc["rows"]
    return {"adm/q": a / n, "common": acc["common"] / a if a else 0.0,
            "scale": acc["refused_at_scale"] / a if a else 0.0, "rows/q": r / n,
            "prec": acc["good"] / r if r else 0.0, "hit": acc["hits"] / n}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="5,10,20,50,100,200,419,all")
    parser.add_argument("--data", default=str(Path(__file__).resolve().parent.parent.parent
                                              / "shared" / "data" / "locomo" / "locomo-dev.json"))
    parser.add_argument("--max-df", type=float, default=0.2)
    parser.add_argument("--rules", default="seed,forge",
                        help=f"among {', '.join(RULES)}")
    parser.add_argument("--write-docs", action="store_true", help=docs_figures.HELP)
    args = parser.parse_args()
    with docs_figures.tee("lexical_df", args.write_docs):
        return run(args)


def run(args: argparse.Namespace) -> int:
    from forge.store import rag
    from forge.core.settings import load_settings

    conversations, questions = load(Path(args.data))
    everything = [t for conv in conversations for t in conv]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        settings = replace(load_settings(cwd=folder), rag_db_file=folder / "x.db")
        full, _ = build(settings, folder, everything)
        total = rag.count_entries(full)
        vocab = dict(full.conn.execute("select term, doc from memory_fts_vocab").fetchall())
        full.close()
        common = {t for t, doc in vocab.items() if doc >= COMMON_SHARE * total}
        rare_at_scale = {t for t, doc in vocab.items() if seed_rule(doc, total, args.max_df)}
        print(f"LoCoMo: {len(conversations)} conversations, {total} turns; common words: in >= "
              f"{COMMON_SHARE:.0%} of all turns ({len(common)}); RECALL_LEXICAL_MAX_DF={args.max_df}")
        print("stores of N consecutive turns (every window of each conversation), questions whose "
              "evidence is all in the window")
        print(f"{'entries':>7} {'stores':>6} {'quest.':>6}  {'rule':<8} {'adm/q':>6} {'common':>7} "
              f"{'scale':>6} {'rows/q':>6} {'prec':>6} {'hit':>6}")
        for size in args.sizes.split(","):
            windows = []
            if size == "all":
                windows.append((everything, [q for group in questions for q in group]))
            else:
                n = int(size)
                for conv, qs in zip(conversations, questions):
                    for start in range(0, len(conv) - n + 1, n):
                        windows.append((conv[start:start + n], qs))
            accs = {name: dict.fromkeys(("questions", "admitted", "common", "refused_at_scale",
                                         "rows", "good", "hits"), 0) for name in args.rules.split(",")}
            for turns, qs in windows:
                ids = {dia for dia, _ in turns}
                qs = [q for q in qs if set(q["evidence"]) <= ids]
                if not qs:
                    continue
                store, by_entry = build(settings, folder, turns)
                try:
                    for name in accs:
                        measure(store, by_entry, qs, RULES[name], common, rare_at_scale,
                                args.max_df, accs[name])
                finally:
                    store.close()
                    Path(store.path).unlink()
            for name, acc in accs.items():
                m = report(acc)
                print(f"{len(windows[0][0]) if windows else 0:>7} {len(windows):>6} "
                      f"{acc['questions']:>6}  {name:<8} {m['adm/q']:>6.2f} {m['common']:>7.0%} "
                      f"{m['scale']:>6.0%} {m['rows/q']:>6.2f} {m['prec']:>6.0%} {m['hit']:>6.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
