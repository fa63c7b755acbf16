#!/usr/bin/env python3
"""Peak memory of `forge history import` on files built to hurt it, each under 1 MB.

Each case is a file a careless or hostile source could hand over (an object or an array nested
100,000 or 40,000 levels deep in a ChatGPT node's metadata or a Claude attachment, a huge title
over many messages, one huge message, 300,000 tiny values, 100,000 keys, thousands of tiny
conversations, a Forge transcript nested 100,000 deep), imported by a real `forge history import
FILE` process in a fresh data folder. The figure is that process's peak RSS (ru_maxrss from
os.wait4), with the exit status, the size memory.json reached and the first line the import
said. The in-run baseline is a plain ChatGPT export of the same size (bench/export_import.py's
generator) imported the same way: an adversarial file must cost about what a real one does.

The bound: no export file under 1 MB makes an import use more than 500 MB.

    python bench/import_adversarial.py [--compact] [--write-docs]

--compact adds a second table: the same files imported with compaction as it goes (the embedded
model loads and embeds: slower, and its weight counts in every row).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import docs_figures  # noqa: E402
from export_import import conversation  # noqa: E402

FORGE = str(Path(sys.executable).parent / "forge")
LIMIT_BYTES = 2 ** 20          # every file stays under 1 MB
BOUND_MB = 500


def chatgpt(n: int, metadata: str = "{}", title: str | None = None) -> str:
    """`n` small ChatGPT conversations (two exchanges each); the first message of the first
    one carries `metadata` (raw JSON text) and, when given, every conversation the title."""
    rng = random.Random(7)
    convs = []
    for c in range(n):
        conv, _ = conversation(c, 2, rng)
        if title is not None:
            conv["title"] = title
        convs.append(conv)
    text = json.dumps(convs, ensure_ascii=False)
    return text.replace('"metadata": {}', '"metadata": ' + metadata, 1)


def plain() -> str:
    """The baseline: real-shaped conversations up to just under 1 MB."""
    n = 1
    while len(chatgpt(n * 2).encode()) < LIMIT_BYTES * 0.95:
        n *= 2
    lo, hi = n, n * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if len(chatgpt(mid).encode()) < LIMIT_BYTES * 0.95 else (lo, mid)
    return chatgpt(lo)


def deep_object(levels: int) -> str:
    return '{"a":' * levels + "1" + "}" * levels


def deep_array(levels: int) -> str:
    return "[" * levels + "]" * levels


def claude_deep(levels: int) -> str:
    conv = {"uuid": "c-1", "name": "deep", "chat_messages": [
        {"uuid": "m-1", "sender": "human", "text": "hello", "created_at": "2024-11-02T09:15:01Z",
         "attachments": "ATTACH"},
        {"uuid": "m-2", "sender": "assistant", "text": "hi", "created_at": "2024-11-02T09:15:05Z"}]}
    return json.dumps([conv]).replace('"ATTACH"', deep_object(levels))


def huge_title() -> str:
    """One title of ~0.45 MB over a conversation of 100 messages."""
    rng = random.Random(3)
    conv, _ = conversation(0, 50, rng)
    conv["title"] = "T" * 450_000
    return json.dumps([conv])


def huge_message() -> str:
    rng = random.Random(3)
    conv, _ = conversation(0, 1, rng)
    conv["mapping"]["c0-u0"]["message"]["content"]["parts"] = ["x" * 950_000]
    return json.dumps([conv])


def tiny_conversations() -> str:
    """As many one-exchange conversations as fit in 1 MB, their ids and titles minimal."""
    convs = []
    for c in range(2400):
        mapping = {"u": {"id": "u", "parent": None, "children": ["a"], "message": {
            "id": f"u{c}", "author": {"role": "user"}, "content": {
                "content_type": "text", "parts": ["q"]}}},
                   "a": {"id": "a", "parent": "u", "children": [], "message": {
                       "id": f"a{c}", "author": {"role": "assistant"}, "content": {
                           "content_type": "text", "parts": ["r"]}}}}
        convs.append({"id": f"c{c}", "title": "t", "current_node": "a", "mapping": mapping})
    return json.dumps(convs, separators=(",", ":"))


def transcript_deep() -> str:
    """A Forge transcript (JSON array) whose one record is nested 100,000 deep."""
    return '[{"role": "user", "content": "a", "ref": ' + deep_array(100_000) + "}]"


CASES: list[tuple[str, Callable[[], str]]] = [
    ("plain ChatGPT export (baseline)", plain),
    ("object nested 100,000 deep", lambda: chatgpt(1, deep_object(100_000))),
    ("object nested 40,000 deep", lambda: chatgpt(1, deep_object(40_000))),
    ("array nested 100,000 deep", lambda: chatgpt(1, deep_array(100_000))),
    ("Claude attachment 100,000 deep", lambda: claude_deep(100_000)),
    ("0.45 MB title, 100 messages", huge_title),
    ("one 0.95 MB message", huge_message),
    ("300,000 empty objects", lambda: chatgpt(1, "[" + ",".join(["{}"] * 300_000) + "]")),
    ("80,000 keys in one object", lambda: chatgpt(1, "{" + ",".join(
        f'"k{i}":0' for i in range(80_000)) + "}")),
    ("2,400 tiny conversations", tiny_conversations),
    ("Forge transcript 100,000 deep", transcript_deep),
]


def run_import(path: Path, data: Path, compact: bool) -> tuple[int, float, str]:
    """(exit status, peak RSS MB, first line said) of `forge history import PATH`."""
    env = {**os.environ, "FORGE_DATA_DIR": str(data), "LLAMA_CPP_URL": "http://127.0.0.1:9",
           "MEMORY_MAX_HISTORY": "100000"}   # without --compact the whole file goes in
    args = [FORGE, "history", "import", str(path)] + (["--compact"] if compact else [])
    proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.stdout.read(), proc.stderr.read()   # type: ignore[union-attr]
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    said = (err or out).decode("utf-8", "replace").strip().splitlines() or [""]
    return proc.returncode, usage.ru_maxrss / 1024, said[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compact", action="store_true",
                        help="also import each file with --compact (the embedded model loads "
                             "and embeds)")
    parser.add_argument("--write-docs", action="store_true", help=docs_figures.HELP)
    args = parser.parse_args()
    with docs_figures.tee("import_adversarial", args.write_docs), \
            tempfile.TemporaryDirectory() as tmp:
        files = []
        for number, (label, make) in enumerate(CASES):
            path = Path(tmp) / f"case{number}.json"
            path.write_text(make(), encoding="utf-8")
            assert path.stat().st_size < LIMIT_BYTES, (label, path.stat().st_size)
            files.append((label, path))
        for compact in (False, True) if args.compact else (False,):
            table(files, Path(tmp) / ("compact" if compact else "plain"), compact)


def table(files: list[tuple[str, Path]], folder: Path, compact: bool) -> None:
    print(f"forge history import FILE{' --compact' if compact else ''}, each in a fresh folder:")
    print(f"{'case':<34} {'file':>8} {'exit':>4} {'peak RSS':>9} {'memory.json':>11}  said")
    peaks = []
    for number, (label, path) in enumerate(files):
        data = folder / f"data{number}"
        code, peak, said = run_import(path, data, compact)
        memory = data / "memory.json"
        stored = memory.stat().st_size / 1024 if memory.exists() else 0.0
        said = said.replace(str(path), "FILE")
        print(f"{label:<34} {path.stat().st_size / 1024:>5.0f} KB {code:>4} {peak:>6.0f} MB "
              f"{stored:>8.0f} KB  {said[:110]}")
        peaks.append((peak, label))
    top, worst = max(peaks)
    print(f"largest peak: {top:.0f} MB ({worst}); bound: {BOUND_MB} MB for any file under 1 MB: "
          f"{'met' if top <= BOUND_MB else 'NOT met'}\n")


if __name__ == "__main__":
    main()
