"""Every recall variant measured on every set at once: the personal set, the French set, LoCoMo.

    python bench/recall_sets.py --keep DIR [--locomo DIR] [--only a,b] [--write-docs]

- personal: tests/fixtures/personal_facts.json (45 entries, 30 questions with an answer):
  top-1, any@5, any@10 through `forge recall --limit 10`'s code (many.search_many);
- french: tests/fixtures/french_personal.json (25 entries, 17 questions, French: a look-alike
  of a held-out set outside the repository, built from its two failure shapes): top-1 as a
  count, any@5;
- no-word: tests/fixtures/french_no_word.json (56 entries in French and English, 32 French
  questions none of whose words the word channel admits: only the vector and latent-term
  channels answer): top-1 as a count, any@5; a question that admits a word is reported;
- held-out: tests/fixtures/no_word_heldout.json (58 entries of another store, French and
  English, 55 questions in both languages admitting no word), written before any change to the
  latent channel was measured, so a change chosen on no-word is checked on a set it was not
  chosen on: top-1 as a count, any@5;
- LoCoMo: the stores `bench/locomo.py --keep DIR` built (give that DIR as --locomo), every
  category 1-4 question, any@5 / any@10 per conversation and over all of them (as locomo.py).
  Its questions were written when the conversation ended, so they are read at that moment
  (FORGE_NOW = the last session's time): "last year" in one of them is the year before its
  last session, and "in June" the last June before it.

Each variant is a `query_words.Policy` (which words the word channel searches), a fusion
(rank.search's `word_weight`) and the latent-term channel (off, or on with `sparse.RULE`; the stores
are built with RECALL_SPARSE on, so they hold its index); the question vectors are embedded once per
set. The stores are built once under --keep DIR and reused. Every row reads the three channels
alone (RECALL_SENTENCE=off) unless it names the sentence model: `main + latent terms, rarity rule
(three channels)` is the shipped fusion without it, `shipped (RECALL_SENTENCE=on)` the default
(forge/recall/sentence.py), and the rows after it change how the model reads. The `shipped + …`
variants are the cures
measured for the latent channel outvoting the vector channel on a small store
(bench/latent_variants.py): each changes one thing in-process, or reads a copy of every store (the
small ones and LoCoMo's) made once under --keep DIR/<copy>/ with its vectors or its latent-term
index written another way. The `shipped + hubs: …` variants rescale one channel's scores by how
near each candidate stands to every reference (bench/hub_variants.py says how). The `shipped +
sentence model: …` variants add a second embedded model's share to the three channels, read
from every entry of the store (bench/sentence_variants.py).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
FIXTURES = ROOT / "tests" / "fixtures"
THREE = "main + latent terms, rarity rule (three channels)"
SHIPPED = "shipped (RECALL_SENTENCE=on)"


def variants() -> dict[str, dict]:
    import hub_variants
    import sentence_variants
    from forge.recall.query_words import Policy

    none = Policy(function_words="none", stems="none")
    shipped = {"policy": Policy(), "word_share": "ratio", "word_weight": "coverage", "latent": "v5"}
    return {
        "main (df only, no stems)": {"policy": none},
        "stop-words fr+en, whole lists": {"policy": Policy(keep=False, stems="none")},
        "stop-words fr+en minus KEEP": {"policy": Policy(stems="none")},
        "stopwordsiso fr+en minus KEEP": {"policy": Policy(function_words="stopwordsiso",
                                                           stems="none")},
        "stems only (store forms of the query's stems)": {"policy": Policy(function_words="none")},
        "stop-words minus KEEP + stems": {"policy": Policy()},
        "stop-words minus KEEP + raw prefixes": {"policy": Policy(stems="prefix")},
        "stopwordsiso minus KEEP + stems": {"policy": Policy(function_words="stopwordsiso")},
        "main + word share x coverage": {"policy": none, "word_weight": "coverage"},
        "words + stems, word share x coverage": {"policy": Policy(), "word_weight": "coverage"},
        "words + stems, word share = bm25 / best": {"policy": Policy(), "word_share": "ratio"},
        "words + stems, bm25 / best x coverage (main)": {"policy": Policy(), "word_share": "ratio",
                                                  "word_weight": "coverage", "latent": False},
        # the latent-term channel as a third min-max share
        THREE: {"policy": Policy(), "word_share": "ratio",
                                                       "word_weight": "coverage", "latent": "v5"},
        "main + latent terms, df <= 0.2 N (ablation's rule)": {
            "policy": Policy(), "word_share": "ratio", "word_weight": "coverage", "latent": "flat"},
        "main + latent terms, every term": {"policy": Policy(), "word_share": "ratio",
                                            "word_weight": "coverage", "latent": "all"},
        # a term's weight times its idf in the store: a feature many entries share (a kind of
        # note's phrasing, a language) counts less (measured, not shipped)
        "main + latent terms x idf": {"policy": Policy(), "word_share": "ratio",
                                      "word_weight": "coverage", "latent": "v5",
                                      "term_weight": "idf"},
        "main + latent terms x sqrt(idf)": {"policy": Policy(), "word_share": "ratio",
                                            "word_weight": "coverage", "latent": "v5",
                                            "term_weight": "sqrt-idf"},
        # the latent channel outvoting the vector channel on a small store: the cures measured
        # on every set at once (bench/latent_variants.py says what each changes)
        **{f"shipped + {name}": {**shipped, **change} for name, change in {
            "latent pass on 'query: Q'": {"patch": "query_form"},
            "latent pass on 'passage: Q'": {"patch": "passage_form"},
            "question embedded both ways": {"patch": "question_both_ways"},
            "entries embedded both ways": {"copy": "both_ways_copy"},
            "entries' 256 heaviest latent terms (not 64)": {"copy": "richer_index_copy"},
            "latent terms the question's words support": {"patch": "word_supported"},
            "latent cosine on the admitted terms": {"patch": "cosine_admitted"},
            "shares from the pool's mean": {"patch": "mean_shares"},
            "latent share on the vector's first 10": {"patch": "agreement"},
        }.items()},
        # hubs (bench/hub_variants.py): each candidate's score rescaled by how near the entry
        # stands to every reference (generic questions, or the store's other entries)
        **{f"shipped + hubs: {name}": {**shipped, "patch": change}
           for name, change in hub_variants.variants().items()},
        # the two that lift both no-word sets, together: the entries embedded both ways and the
        # vector channel's hubs rescaled
        **{f"shipped + entries both ways + hubs: {name}": {
            **shipped, "copy": "both_ways_copy", "patch": hub_variants.variants()[name]}
           for name in ("vector CSLS, questions k=5, pool of 60",
                        "vector mutual proximity, questions, pool of 60")},
        # the sentence model as shipped (RECALL_SENTENCE=on, the default: forge/recall/sentence.py),
        # and its reading measured other ways (bench/sentence_variants.py's shipped_reads)
        SHIPPED: {**shipped, "settings": {"RECALL_SENTENCE": "on"}},
        **{f"{SHIPPED}, {name}": {**shipped, "settings": {"RECALL_SENTENCE": "on"},
                                  "patch": change}
           for name, change in {
               "exchanges read by line too":
                   lambda: sentence_variants.shipped_reads(exchanges=True),
               **{f"{d} nearest notes": (lambda d=d: sentence_variants.shipped_reads(depth=d))
                  for d in (10, 15, 25, 30)},
               **{f"the first {k} notes re-read": (
                   lambda k=k: sentence_variants.shipped_reads(reads=k)) for k in (20, 40)},
               "every candidate note re-read":
                   lambda: sentence_variants.shipped_reads(every=True),
               "exchanges by line too, 30 nearest":
                   lambda: sentence_variants.shipped_reads(exchanges=True, depth=30),
           }.items()},
        # a second embedded model (bench/sentence_variants.py): its share added as a fourth
        **{f"shipped + sentence model: {name}": {**shipped, "patch": change}
           for name, change in sentence_variants.variants().items()},
    }


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
        self.vectors: dict[tuple[str, int, bool], object] = {}
        self.ms: list[float] = []

    def __call__(self, variant: dict):
        from forge.store import rag
        import latent_variants

        from forge.recall import many, rank, sparse, query_words

        def run(folder: Path, questions: list[str], now: str | None = None):
            copy = variant.get("copy")   # a copy of the store, its vectors or index rewritten
            if copy:
                folder = getattr(latent_variants, copy)(
                    folder, self.keep / copy / folder.parent.name / folder.name)
            patch = variant.get("patch")
            key = (str(folder), len(questions), patch == "question_both_ways")
            extra = {**({"FORGE_NOW": now} if now else {}), "RECALL_SENTENCE": "off",
                     **variant.get("settings", {})}
            with rag.open_store(open_settings(folder, extra)) as store, \
                    (patch() if callable(patch) else getattr(latent_variants, patch)() if patch
                     else contextlib.nullcontext()):
                if key not in self.vectors:
                    self.vectors[key] = many.embed_queries(store, questions)
                old = (query_words.POLICY, rank.WORD_WEIGHT, rank.WORD_SHARE,
                       sparse.RULE, sparse.enabled, sparse.TERM_WEIGHT)
                query_words.POLICY = variant["policy"]
                rank.WORD_WEIGHT = variant.get("word_weight", "flat")
                rank.WORD_SHARE = variant.get("word_share", "minmax")
                latent = variant.get("latent", False)   # the stores hold the index either way
                sparse.RULE = latent or "v5"
                sparse.TERM_WEIGHT = variant.get("term_weight", "flat")
                if not latent:
                    sparse.enabled = lambda _store: False
                try:
                    batch = many.search_many(store, questions, vectors=self.vectors[key],
                                             limit=10)
                finally:
                    (query_words.POLICY, rank.WORD_WEIGHT, rank.WORD_SHARE,
                     sparse.RULE, sparse.enabled, sparse.TERM_WEIGHT) = old
                self.ms.append(1000 * batch.search_seconds / max(1, len(questions)))
                return batch.answers
        return run


def main(argv: list[str] | None = None, *, names: list[str] | None = None,
         figures: str = "recall_sets") -> int:
    """`names`: exactly these variants (bench/recall_sentence.py's rows), whatever --only says;
    `figures`: the docs/bench/NAME.txt that --write-docs writes."""
    import docs_figures
    from tabulate import tabulate

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keep", type=Path, required=True, help="build the small stores under DIR")
    parser.add_argument("--locomo", type=Path, help="the --keep DIR of bench/locomo.py")
    parser.add_argument("--only", help="comma-separated variant names (prefixes)")
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
    chosen = {k: v for k, v in variants().items()
              if (k in names if names is not None else
                  not args.only or any(k.startswith(p) for p in args.only.split(",")))}
    for name, variant in chosen.items():
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
    with docs_figures.tee(figures, args.write_docs):
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
