#!/usr/bin/env python3
"""How long the aggregation pass takes on a big store (it can run after a chat turn's compaction,
so it must stay under a second at 10,000 entries).

Builds stores of N entries in a temporary folder: rows are inserted with SQL (the pass reads rows
and words, never vectors, so none are embedded), from templates in French and English: notes
with a label and details, some groups of overlapping notes (subjects), and archive exchanges.
Times `forge.memory.aggregate.run` as the dry run (the plan) and then with --apply (which embeds each
written aggregate with the configured embedder, the embedded model by default).

    python bench/aggregate_pass.py                       # 10,000 entries, 20% deliberate
    python bench/aggregate_pass.py --entries 10000 --deliberate 1.0
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
import docs_figures  # noqa: E402

DEVICES = ["NiPoGi AM06PRO", "ThinkPad X1 Carbon", "Raspberry Pi 4", "Synology DS920", "Steam Deck",
           "Mac mini M2", "Turris Omnia", "Dell XPS 13", "Pixel 7", "Framework 13"]
DETAILS = ["Arch", "Fedora", "Debian 12", "Ansible", "services Podman", "SSD 512 Go", "32 Go de RAM",
           "16 GB RAM", "WiFi 6", "RAID 5", "Btrfs", "restic", "Caddy", "Home Assistant",
           "processeur Ryzen 5500U", "GrapheneOS", "OpenWrt", "Jellyfin", "Zigbee", "Tailscale"]
EXCHANGES = [
    "user: Tu peux me rappeler comment redémarrer le service {n} ?\nassistant: Avec systemctl --user restart, ce n'est pas plus compliqué que ça.",
    "user: Est-ce que la sauvegarde {n} est finie ?\nassistant: Oui, elle s'est terminée sans erreur à {h}:12.",
    "user: How do I list the timers on host {n}?\nassistant: systemctl list-timers shows them, with the next run of each.",
    "user: Why is disk {n} full?\nassistant: The snapshots are not pruned; restic forget --prune will free the space.",
]


def rows(total: int, deliberate: float, seed: int = 7) -> list[tuple[str, str | None, str]]:
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


def build(path: Path, data: list[tuple[str, str | None, str]]) -> None:
    from forge.store import db, rag
    from forge.store.history import utc_now
    from forge.core.settings import load_settings

    settings = load_settings({"FORGE_DATA_DIR": str(path.parent)}, cwd=path.parent)
    with rag.open_store(settings, path=path, check_identity=False) as store:
        now = utc_now()
        with db.transaction(store.conn) as conn:
            conn.executemany(
                "insert into memory_entries(kind, project, content, source, refs, created, updated) "
                "values (?, ?, ?, ?, '{}', ?, ?)",
                [(k, p, c, "import" if k == "archive" else "remember", now, now) for k, p, c in data])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--deliberate", type=float, default=0.2,
                        help="share of deliberate notes (the rest are archive exchanges)")
    parser.add_argument("--no-apply", action="store_true", help="time the dry run only")
    parser.add_argument("--write-docs", action="store_true", help=docs_figures.HELP)
    args = parser.parse_args()
    with docs_figures.tee("aggregate_pass", args.write_docs):
        return run(args)


def run(args: argparse.Namespace) -> int:
    from forge.memory import aggregate
    from forge.store import rag
    from forge.core.settings import load_settings

    folder = Path(tempfile.mkdtemp(prefix="forge-aggregate-pass-"))
    path = folder / "forge_rag.db"
    build(path, rows(args.entries, args.deliberate))
    settings = load_settings({"FORGE_DATA_DIR": str(folder)}, cwd=folder)
    with rag.open_store(settings, path=path) as store:
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
        print(f"dry run (the pass): best {min(times) * 1000:.0f} ms, worst {max(times) * 1000:.0f} ms "
              f"of {len(times)} (CPU time: best {min(cpu) * 1000:.0f} ms)")
        if not args.no_apply:
            started = time.perf_counter()
            applied = aggregate.run(store, apply=True)
            total = time.perf_counter() - started
            print(f"--apply: {total:.2f} s, of which embedding {applied.counts()['written']} "
                  f"aggregate lines is the rest over the pass")
    print(f"load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
