"""Whole-process time of the commands a shell loop runs, as ratios to `python -c "import click"`.

    python bench/process_latency.py STORE_DIR [--runs 15] [--trace-mb 200] [--compare DIR]
                                    [--write-docs]
    python bench/process_latency.py --imports [--runs 15] [--write-docs]

STORE_DIR holds a real store (`bench/locomo_store.py DIR`), copied first so `remember` never
changes it. Each figure is the median of `--runs` fresh processes through the `forge` script pip
wrote, interleaved with the baseline (one of each per round). Targets: `--help` <= 1.2x;
`recall` <= 300 ms or 3.5x; `remember` <= 250 ms; `memory ls`, `trace tail` and `config`
<= 1.5x. Run it with the Python of a NON-editable install: an editable install's finder charges
~15-20 ms of imports to `import click` too and flatters every ratio (the script warns).
`--imports`: what printing a table costs, tabulate's import, and `importlib.metadata` alone
(tabulate 0.10 reads its own version through it at import), each beside `import click`.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import docs_figures
import harness

QUERY = "When did Caroline go to the LGBTQ support group?"
# The same question with a time expression (its window holds every entry of a store built this
# year: the channels' filter runs over the whole store, and dateparser is imported and read).
QUERY_TIMED = "What did Caroline say this year about the LGBTQ support group?"


def _trace_file(path: Path, megabytes: int) -> None:
    line = json.dumps({"run_id": "0" * 12, "timestamp": "2026-11-30T00:00:00.000Z",
                       "user_input_preview": "x" * 200,
                       "steps": [{"tool": "chat", "duration_ms": 1.0}], "total_ms": 1.0,
                       "ok": True, "not_answered": None, "error": None}) + "\n"
    block = line * ((1 << 20) // len(line) + 1)
    with open(path, "w") as fh:
        for _ in range(megabytes):
            fh.write(block)


# What each migration the old package may lack added, newest first: (a name its code holds,
# the schema version it made, what undoes it). Undoing them gives exactly what a package of
# fewer migrations wrote; without it that package refuses the store ("newer than this forge").
DOWNGRADES = (
    ("created_known", 7, ("drop index if exists memory_entries_unknown",
                          "alter table memory_entries drop column created_known")),
    ("memory_sentence", 6, ("drop trigger if exists memory_entries_ad_sentence",
                            "drop table if exists memory_sentence",
                            "delete from meta where key = 'sentence'")),
    ("memory_entries_created", 5, ("drop index if exists memory_entries_created",)),
)


def _as_old_package_wrote(path: Path, old: Path) -> None:
    """The old package's copy of the store, each migration its code does not know undone (the
    store's other rows untouched)."""
    import sqlite3

    code = [p.read_text(encoding="utf-8") for p in (old / "forge").rglob("*.py")]
    conn = sqlite3.connect(path)
    try:
        for marker, version, statements in DOWNGRADES:
            if any(marker in text for text in code):
                break
            if conn.execute("pragma user_version").fetchone()[0] == version:
                for statement in statements:
                    conn.execute(statement)
                conn.execute("update meta set value = ? where key = 'schema_version'",
                             (str(version - 1),))
                conn.execute(f"pragma user_version = {version - 1}")
                conn.commit()
    finally:
        conn.close()


def _editable_finders() -> list[str]:
    """The `__editable__*.pth` files of this interpreter's site-packages."""
    import site

    return sorted(p.name for d in site.getsitepackages() for p in Path(d).glob("__editable__*.pth"))


def imports(runs: int, write_docs: bool) -> None:
    modules = ("click", "click, tabulate", "click, importlib.metadata")
    commands = {f'python -c "import {m}"': ([sys.executable, "-c", f"import {m}"], {})
                for m in modules}
    times = harness.interleaved(commands, runs, warm=False)
    import tabulate

    base = statistics.median(times[harness.CLICK])
    with docs_figures.tee("process_latency-imports", write_docs):
        print(f"{'command':46} {'median ms':>9}  x import click")
        for name, values in times.items():
            median = statistics.median(values)
            print(f"{name:46} {median:9.1f}  {median / base:13.2f}")
        print(f"\n{runs} runs each, interleaved; tabulate {tabulate.__version__}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store", type=Path, nargs="?", help="STORE_DIR (all but --imports)")
    parser.add_argument("--imports", action="store_true", help="tabulate's import instead")
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--trace-mb", type=int, default=200)
    parser.add_argument("--compare", type=Path, metavar="DIR",
                        help="also run each forge command with another copy of the `forge` "
                        "package (DIR/forge, e.g. `git archive OLD forge | tar -x -C DIR`), "
                        "interleaved, and print new / old")
    parser.add_argument("--write-docs", action="store_true", help=docs_figures.HELP)
    args = parser.parse_args()
    if args.imports:
        return imports(args.runs, args.write_docs)
    if args.store is None:
        parser.error("STORE_DIR is required (a real store: bench/locomo_store.py DIR)")
    from forge.store import db

    work = Path(tempfile.mkdtemp(prefix="forge-bench-"))
    try:
        db.snapshot(args.store / "forge_rag.db", work / "forge_rag.db")
        _trace_file(work / "traces.jsonl", args.trace_mb)
        os.sync()   # the copy and the trace file written back now, not during the timed runs
        # The children run in `work`: `python -m` puts its working directory first on sys.path,
        # so from the repo root every run (--compare's old ones too) imported the repo's forge.
        repo = str(harness.ROOT)
        env = {**os.environ, "FORGE_DATA_DIR": str(work), "PYTHONPATH": repo}
        env.pop("EMBEDDING_URL", None)
        # An installed package runs from bytecode (pip compiles it); a shell that sets
        # PYTHONDONTWRITEBYTECODE would otherwise time the compiler on every run (~30 ms).
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        import compileall

        compileall.compile_dir(str(harness.ROOT / "forge"), quiet=1)
        script = Path(sys.executable).with_name("forge")
        forge = [str(script)] if script.is_file() else [sys.executable, "-m", "forge"]
        # the notes' sentence rows, as `forge remember` stores them: a store built before they
        # were stored (or with RECALL_SENTENCE=off) gets them in the copy, once, before timing
        subprocess.run(forge + ["reindex", "--sentence"], env=env, check=True,
                       stdout=subprocess.DEVNULL)
        counter = iter(range(10**9))
        commands: dict[str, tuple[list[str] | None, float | None]] = {
            'python -c "import click"': ([sys.executable, "-c", "import click"], None),
            "forge --help": (forge + ["--help"], 1.2),
            "forge recall Q": (forge + ["recall", QUERY], None),
            "forge recall Q (RECALL_SENTENCE=off)": (forge + ["recall", QUERY], None),
            "forge recall Q (time in it)": (forge + ["recall", QUERY_TIMED], None),
            "forge remember fact NEW": (None, None),
            "forge memory ls todo --nl": (forge + ["memory", "ls", "todo", "--nl"], 1.5),
            "forge memory ls --nl (10k rows)": (forge + ["memory", "ls", "--nl"], None),
            f"forge trace tail --nl ({args.trace_mb} MB)": (forge + ["trace", "tail", "--nl"], 1.5),
            "forge config --json": (forge + ["config", "--json"], 1.5),
        }
        # the three channels alone: the sentence model's load and passes left out
        settings = {"forge recall Q (RECALL_SENTENCE=off)": {"RECALL_SENTENCE": "off"}}
        envs = {name: {**env, **settings.get(name, {})} for name in commands}
        if args.compare:
            # the old package gets a copy of its own: this one's migrations (a newer schema)
            # would make it refuse the store
            old_work = work / "old"
            old_work.mkdir()
            db.snapshot(args.store / "forge_rag.db", old_work / "forge_rag.db")
            _as_old_package_wrote(old_work / "forge_rag.db", args.compare)
            shutil.copy(work / "traces.jsonl", old_work / "traces.jsonl")
            old_env = {**env, "PYTHONPATH": str(args.compare), "FORGE_DATA_DIR": str(old_work)}
            # its notes' sentence rows too, or its recall embeds every candidate note at each
            # run (a copy of this very package read 0.58x): a package too old to store them
            # says so and is timed without
            if subprocess.run(forge + ["reindex", "--sentence"], env=old_env, cwd=work,
                              capture_output=True).returncode:
                print(f"note: {args.compare}'s forge stores no sentence rows (reindex "
                      "--sentence failed): its recall embeds the notes it reads", file=sys.stderr)
            for name, (cmd, target) in list(commands.items()):
                if name.startswith("forge"):
                    commands[f"{name} [old]"] = (cmd, target)
                    envs[f"{name} [old]"] = {**old_env, **settings.get(name, {})}
        times: dict[str, list[float]] = {name: [] for name in commands}
        for name, (cmd, _) in commands.items():  # warm the page cache once
            subprocess.run(cmd or forge + ["remember", "fact", f"warm-up {name}"], env=envs[name],
                           cwd=work, capture_output=True, check=True)
        for _ in range(args.runs):
            for name, (cmd, _) in commands.items():
                cmd = cmd or forge + ["remember", "fact", f"new fact number {next(counter)}"]
                t = time.perf_counter()
                subprocess.run(cmd, env=envs[name], cwd=work, capture_output=True, check=True)
                times[name].append((time.perf_counter() - t) * 1000)
        with docs_figures.tee("process_latency", args.write_docs):
            report(args, commands, times)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def report(args: argparse.Namespace, commands: dict, times: dict[str, list[float]]) -> None:
    base = statistics.median(times['python -c "import click"'])
    load = os.getloadavg()
    print(f"{'command':40} {'median ms':>10} {'min ms':>8} {'x import click':>15}")
    for name, (_, target) in commands.items():
        if name.endswith(" [old]"):
            continue
        med = statistics.median(times[name])
        goal = (f"<= {target}x" if target else "<= 300 ms or 3.5x" if "recall" in name
                else "<= 250 ms" if "remember" in name else "")
        print(f"{name:40} {med:10.1f} {min(times[name]):8.1f} {med / base:15.2f}  {goal}")
    if args.compare:
        print(f"\nagainst the forge package in {args.compare}, same run, interleaved:")
        for name in commands:
            if name.endswith(" [old]"):
                new_ms = statistics.median(times[name[:-6]])
                old_ms = statistics.median(times[name])
                print(f"  {name[:-6]:40} {old_ms:8.1f} -> {new_ms:8.1f} ms  "
                      f"(new / old {new_ms / old_ms:.2f})")
    print(f"\n{args.runs} runs each, interleaved; store {args.store} copied; "
          f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} on {os.cpu_count()} CPUs")
    editable = _editable_finders()
    if editable:
        print("warning: this interpreter's site-packages hold an editable install "
              f"({', '.join(editable)}): its finder's imports are charged to "
              "`import click` too and flatter every ratio; run from a non-editable install")


if __name__ == "__main__":
    main()
