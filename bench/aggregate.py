#!/usr/bin/env python3
"""The aggregation tier: right on a labelled set, fast on a big store (it can run after a chat
turn's compaction: under a second at 10,000 entries), and what it does to your store.

    python bench/aggregate.py precision [--write-docs]
    python bench/aggregate.py pass [--entries 10000] [--write-docs]
    python bench/aggregate.py snapshot [--db PATH] [--project P] [--apply] [--json]

precision: the dry run on tests/fixtures/aggregate_cases.json's store (target: fold precision
1.00, a wrong fold rewrites what a user said), fold recall, the hot block's tokens; pass: the
dry run and --apply timed on N entries inserted from templates; snapshot: `forge aggregate`'s
pass on a fresh copy of your store (never opened itself); --apply writes the folds into the
copy and asks for every folded source by its own text (both channels must return it).
"""
from __future__ import annotations

import argparse
import os
import random
import tempfile
import time
from pathlib import Path

import harness
import docs_figures

DEVICES = ["NiPoGi AM06PRO", "ThinkPad X1 Carbon", "Raspberry Pi 4", "Synology DS920", "Steam Deck",
           "Mac mini M2", "Turris Omnia", "Dell XPS 13", "Pixel 7", "Framework 13"]
DETAILS = ["Arch", "Fedora", "Debian 12", "Ansible", "services Podman", "SSD 512 Go",
           "32 Go de RAM", "16 GB RAM", "WiFi 6", "RAID 5", "Btrfs", "restic", "Caddy",
           "Home Assistant", "processeur Ryzen 5500U", "GrapheneOS", "OpenWrt", "Jellyfin",
           "Zigbee", "Tailscale"]
EXCHANGES = [
    "user: Tu peux me rappeler comment redémarrer le service {n} ?\n"
    "assistant: Avec systemctl --user restart, ce n'est pas plus compliqué que ça.",
    "user: Est-ce que la sauvegarde {n} est finie ?\n"
    "assistant: Oui, elle s'est terminée sans erreur à {h}:12.",
    "user: How do I list the timers on host {n}?\n"
    "assistant: systemctl list-timers shows them, with the next run of each.",
    "user: Why is disk {n} full?\n"
    "assistant: The snapshots are not pruned; restic forget --prune will free the space.",
]


def precision(args: argparse.Namespace) -> int:
    from fixtures.aggregate_cases import CASES, build_store, score

    from forge.memory import aggregate
    from forge.store import rag
    from forge.recall.hot_memory import render_hot_block

    folder = Path(tempfile.mkdtemp(prefix="forge-aggregate-"))
    started = time.perf_counter()
    _, cases = build_store(folder)
    built = time.perf_counter() - started
    with rag.open_store(harness.data_settings(folder)) as store:
        report = aggregate.run(store)
        before = rag.hot_entries(store)
    after = aggregate._after(before, report.subjects)
    tokens_before = render_hot_block(before, max_tokens=10**9).tokens
    tokens_after = render_hot_block(after, max_tokens=10**9).tokens
    s = score(report.subjects, cases)
    owner = {i: name for name, ids in cases.items() for i in ids}
    print(f"store: {sum(len(c['entries']) for c in CASES)} labelled entries in {len(CASES)} cases "
          f"(+ context), built in {built:.1f} s; pass {report.seconds * 1000:.0f} ms")
    print(f"{'case':24} {'expect':7} outcome")
    for subject in report.subjects:
        name = owner.get(subject.members[0], "context")
        expect = next((c["expect"] for c in CASES if c["name"] == name), "-")
        what = subject.outcome + (f" ({subject.gate})" if subject.gate else "")
        print(f"{name:24} {expect:7} {what}")
    print()
    print(f"fold precision  {s.precision:.2f}  ({s.right} right / {s.made} made)")
    print(f"fold recall     {s.recall:.2f}  ({s.folded} folded / {s.expected} that should)")
    saving = 1 - tokens_after / tokens_before if tokens_before else 0.0
    print(f"hot block       {len(before)} entries / {tokens_before} tokens -> {len(after)} / "
          f"{tokens_after} ({saving:.1%} fewer tokens)")
    for line in s.wrong:
        print(f"WRONG: {line}")
    for name in s.missed:
        print(f"missed: {name}")
    return 0 if s.precision == 1.0 else 1


def rows(total: int, deliberate: float = 0.2, seed: int = 7) -> list[tuple]:
    """(kind, project, content): notes (three per machine name, a label and details), the
    `deliberate` share, then archive exchanges."""
    rnd = random.Random(seed)
    out: list[tuple[str, str | None, str]] = []
    notes = int(total * deliberate)
    for i in range(notes):
        device = f"{rnd.choice(DEVICES)} n{i // 3}"   # three notes per machine name
        picks = rnd.sample(DETAILS, rnd.randint(1, 4))
        if i % 3 == 0:
            content = f"Matériel : {device}, " + ", ".join(picks)
        elif i % 3 == 1:
            content = f"{device}, " + ", ".join(picks)
        else:
            content = f"Le {device} a {rnd.choice(['32 Go de RAM', 'un SSD', 'Arch'])}"
        out.append(("fact", rnd.choice(["homelab", "perso", None]), content))
    for i in range(total - notes):
        text = rnd.choice(EXCHANGES).format(n=i, h=rnd.randint(0, 23))
        out.append(("archive", None, text))
    return out


def timed_pass(args: argparse.Namespace) -> int:
    from forge.memory import aggregate
    from forge.store import db, rag
    from forge.store.history import utc_now

    folder = Path(tempfile.mkdtemp(prefix="forge-aggregate-pass-"))
    path = folder / "forge_rag.db"
    with rag.open_store(harness.data_settings(folder), path=path, check_identity=False) as store:
        now = utc_now()
        with db.transaction(store.conn) as conn:
            conn.executemany(
                "insert into memory_entries(kind, project, content, source, refs, created, "
                "updated) values (?, ?, ?, ?, '{}', ?, ?)",
                [(k, p, c, "import" if k == "archive" else "remember", now, now)
                 for k, p, c in rows(args.entries)])
    with rag.open_store(harness.data_settings(folder), path=path) as store:
        times, cpu = [], []
        for _ in range(3):
            started, started_cpu = time.perf_counter(), time.process_time()
            report = aggregate.run(store)
            times.append(time.perf_counter() - started)
            cpu.append(time.process_time() - started_cpu)
        c = report.counts()
        print(f"{args.entries} entries ({report.entries_scanned} active deliberate): "
              f"{len(report.subjects)} subjects, {c['written']} would be written, "
              f"{c['absorbed']} absorbed, {c['refused']} refused")
        print(f"dry run (the pass): best {min(times) * 1000:.0f} ms, worst "
              f"{max(times) * 1000:.0f} ms of {len(times)} "
              f"(CPU time: best {min(cpu) * 1000:.0f} ms)")
        started = time.perf_counter()
        applied = aggregate.run(store, apply=True)
        print(f"--apply: {time.perf_counter() - started:.2f} s, of which embedding "
              f"{applied.counts()['written']} aggregate lines is the rest over the pass")
    print(f"load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    return 0


def snapshot(args: argparse.Namespace) -> int:
    """The pass on a snapshot: what it would fold, and (--apply) what it did."""
    from forge.memory import aggregate
    from forge.recall import channels
    from forge.store import rag

    with harness.snapshot_store(args, readonly=False) as store:
        report = aggregate.run(store, project=args.project, apply=args.apply)
        document = report.to_dict()
        if args.apply:   # every folded source, asked for by its own text
            folded = [rag.get_entry(store, i) for s in report.subjects
                      if s.outcome in (aggregate.WRITTEN, aggregate.ABSORBED) for i in s.sources]
            found = [channels.search_hybrid(store, e.content, vector_k=10, lexical_k=10,
                                            project=e.project) for e in folded]
            document["recall"] = {"folded_sources": len(folded), "still_recalled": sum(
                any(r.entry.id == e.id for r in f.rows) for e, f in zip(folded, found))}
    rows = [{"subject": s.name, "kind": s.kind, "project": s.project or "",
             "members": s.members, "outcome": s.outcome, "gate": s.gate or "",
             "line": s.line or (f"#{s.into}" if s.into else "")} for s in report.subjects]
    before, after = report.block_before, report.block_after
    counts = ", ".join(f"{k} {v}" for k, v in report.counts().items())
    lines = [f"{len(report.subjects)} subjects over {report.entries_scanned} active entries "
             f"in {report.seconds:.3f} s: {counts}",
             f"hot block: {before.entries} entries / {before.tokens} tokens before, "
             f"{after.entries} / {after.tokens} after"]
    if args.apply:
        kept = document["recall"]
        lines.append(f"recall still returns {kept['still_recalled']} of {kept['folded_sources']} "
                     "folded sources (asked by their own text)")
    lines.append(f"{'written to' if args.apply else 'ran on'} a snapshot; the store itself was "
                 "not opened")
    harness.output(args, document, rows,
                   ["subject", "kind", "project", "members", "outcome", "gate", "line"], lines)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["precision", "pass", "snapshot"])
    parser.add_argument("--entries", type=int, default=10_000, help="pass: the store's size")
    parser.add_argument("--db", type=Path, help="snapshot: the store to copy (RAG_DB_FILE)")
    parser.add_argument("--project", help="snapshot: this project's subjects only")
    parser.add_argument("--apply", action="store_true", help="snapshot: write the folds")
    parser.add_argument("--json", action="store_true", help="snapshot: one JSON document")
    parser.add_argument("--write-docs", action="store_true", help=docs_figures.HELP)
    args = parser.parse_args()
    if args.what == "snapshot":
        return snapshot(args)
    with docs_figures.tee(f"aggregate-{args.what}", args.write_docs):
        return (precision if args.what == "precision" else timed_pass)(args)


if __name__ == "__main__":
    harness.run(main)
