#!/usr/bin/env python3
"""The command examples of README.md and the docs, from real runs of `forge`, so they cannot drift.

    python tools/readme_examples.py --write README.md docs   # run every example, rewrite its output
    python tools/readme_examples.py --check README.md docs   # exit 1 when an example's output drifted

Each PATH is a Markdown file or a folder (its `*.md` files, `_build` left out). An example is a
console block between `<!-- example: SESSION/NAME -->` and `<!-- /example -->`.
Its `$ ` lines (a trailing `\\` continues one) are the commands; what follows each is its output
(stdout and stderr together, as a terminal shows them). The commands run with bash in a fresh
folder per file and SESSION, in the file's order, so later blocks of a session see what earlier
ones of the same file wrote:
`FORGE_DATA_DIR=data`, the chat server at a closed port, COLUMNS=100, the embedded model.
`SETUP` below creates the files a block reads and runs commands it needs first (not shown).

`--check` compares after normalising what changes from run to run: timestamps and dates (an
entry's date is the day it was written unless `--at` says otherwise), run ids, decimals
(durations, distances), every number on a line that holds a timestamp, and runs of spaces
(column widths follow the values). tests/test_docs.py runs it.
"""
from __future__ import annotations

import difflib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

START = re.compile(r"^<!-- example: (?P<name>[\w.-]+/[\w.-]+) -->$")
END = "<!-- /example -->"
FORGE_ENV_PREFIXES = ("FORGE_", "MEMORY_", "RAG_", "TRACE_", "COMPACTION_", "EMBEDDING_",
                      "RECALL_", "LLAMA_CPP_", "ENABLED_TOOLS", "MAX_STEPS", "API_TOKEN")

NOTES = (
    '{"kind": "fact", "content": "Steam Deck, SteamOS, conteneurs Podman"}\n'
    '{"kind": "todo", "content": "Renouveler le certificat TLS du reverse proxy Caddy", '
    '"project": "homelab"}\n'
    '{"content": "Le NiPoGi a 32 Go de RAM", "project": "homelab"}\n'
)

# block name -> files to create and commands to run first (their output is not shown)
SETUP: dict[str, dict] = {
    "memory/batch": {"files": {"notes.jsonl": NOTES}},
    "history/context": {"commands": ["forge history import $SAMPLE >/dev/null 2>&1"]},
    "traces/tail": {"commands": ["forge chat 'Bonjour' >/dev/null 2>&1 || true",
                                 "forge chat 'Quel est mon NAS ?' >/dev/null 2>&1 || true"]},
}


@dataclass
class Block:
    name: str
    file: str
    start: int          # index of the marker line
    end: int            # index of the END line
    commands: list[str] = field(default_factory=list)     # as shown (continuations joined by \n)
    outputs: list[str] = field(default_factory=list)

    @property
    def session(self) -> tuple[str, str]:
        return self.file, self.name.split("/", 1)[0]


def parse(lines: list[str], file: str = "README.md") -> list[Block]:
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = START.match(lines[i])
        if not m:
            i += 1
            continue
        end = lines.index(END, i)
        body = lines[i + 1:end]
        if not body or not body[0].startswith("```") or body[-1] != "```":
            raise SystemExit(f"{file} line {i + 1}: an example block must be one fenced block")
        block = Block(m["name"], file, i, end)
        current: list[str] | None = None
        output: list[str] = []
        continuing = False
        for line in body[1:-1]:
            if continuing:
                current.append(line)  # type: ignore[union-attr]
                continuing = line.endswith("\\")
                continue
            if line.startswith("$ "):
                if current is not None:
                    block.commands.append("\n".join(current))
                    block.outputs.append("\n".join(output))
                current, output = [line[2:]], []
                continuing = line.endswith("\\")
            elif current is None:
                raise SystemExit(f"{file} line {i + 1}: example {block.name} starts with output")
            else:
                output.append(line)
        if current is not None:
            block.commands.append("\n".join(current))
            block.outputs.append("\n".join(output))
        blocks.append(block)
        i = end + 1
    return blocks


def environment(folder: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(FORGE_ENV_PREFIXES)}
    bin_dir = str(Path(sys.executable).parent)
    env.update(PATH=os.pathsep.join([bin_dir, env.get("PATH", "")]), FORGE_DATA_DIR="data",
               LLAMA_CPP_URL="http://127.0.0.1:9", COLUMNS="100", LC_ALL="C.UTF-8",
               SAMPLE=str(Path(__file__).resolve().parent.parent / "forge" / "samples"
                          / "transcript.jsonl"))
    env.pop("NO_COLOR", None)
    return env


def run(command: str, folder: Path, env: dict[str, str]) -> str:
    done = subprocess.run(["bash", "-c", command], cwd=folder, env=env, stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
    return done.stdout.decode("utf-8", errors="replace").rstrip("\n")


def generate(blocks: list[Block]) -> dict[tuple[str, str], list[str]]:
    """Each block's new output, command by command (sessions run in fresh folders)."""
    results: dict[tuple[str, str], list[str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        sessions: dict[tuple[str, str], Path] = {}
        for block in blocks:
            folder = sessions.get(block.session)
            if folder is None:
                folder = sessions[block.session] = Path(tmp) / str(len(sessions))
                folder.mkdir()
            env = environment(folder)
            setup = SETUP.get(block.name, {})
            for name, text in setup.get("files", {}).items():
                (folder / name).write_text(text, encoding="utf-8")
            for command in setup.get("commands", []):
                run(command, folder, env)
            results[(block.file, block.name)] = [run(c, folder, env) for c in block.commands]
    return results


def render(block: Block, outputs: list[str], fence: str) -> list[str]:
    lines = [fence]
    for command, output in zip(block.commands, outputs):
        lines += ("$ " + command).split("\n")
        if output:
            lines += output.split("\n")
    return lines + ["```"]


_TS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)")
_DATE = re.compile(r"\b\d{4}-\d\d-\d\d\b")
_RUN_ID = re.compile(r"\b[0-9a-f]{12}\b")
_DECIMAL = re.compile(r"\b\d+\.\d+\b")


def normalise(text: str) -> str:
    out = []
    for line in text.split("\n"):
        stamped = bool(_TS.search(line))
        line = _TS.sub("<time>", line)
        line = _DATE.sub("<date>", line)
        line = _RUN_ID.sub("<id>", line)
        line = _DECIMAL.sub("<n>", line)
        # a duration in JSON: 130.0 prints as 130, with no decimals for the rule above
        line = re.sub(r'("\w*_ms":\s*)\d+', r"\1<n>", line)
        if stamped:
            line = re.sub(r"\b\d+\b", "<n>", line)
        line = re.sub(r"-{2,}", "--", line)
        out.append(" ".join(line.split()))
    return "\n".join(out).strip()


def markdown_files(paths: list[Path]) -> list[Path]:
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files += sorted(p for p in path.rglob("*.md") if "_build" not in p.parts)
        else:
            files.append(path)
    return files


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] not in ("--write", "--check"):
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        return 2
    mode, files = argv[0], markdown_files([Path(a) for a in argv[1:]])
    texts = {str(f): f.read_text(encoding="utf-8").split("\n") for f in files}
    blocks = [b for f, lines in texts.items() for b in parse(lines, f)]
    if any("| jq" in c for b in blocks for c in b.commands) and shutil.which("jq") is None:
        print("the examples pipe into jq, which is not installed here (apt install jq)",
              file=sys.stderr)
        return 2
    results = generate(blocks)
    if mode == "--check":
        stale = 0
        for block in blocks:
            lines = texts[block.file]
            fence = lines[block.start + 1]
            want = normalise("\n".join(render(block, results[(block.file, block.name)], fence)))
            have = normalise("\n".join(lines[block.start + 1:block.end]))
            if want != have:
                stale += 1
                print(f"{block.file}: example {block.name} drifted from a real run:", file=sys.stderr)
                sys.stderr.writelines(difflib.unified_diff(
                    have.splitlines(True), want.splitlines(True), block.file, "real run", n=1))
                print(file=sys.stderr)
        if stale:
            print(f"{stale} example(s) drifted; run `python tools/readme_examples.py --write "
                  f"{' '.join(argv[1:])}`", file=sys.stderr)
        return 1 if stale else 0
    for file, lines in texts.items():
        for block in reversed([b for b in blocks if b.file == file]):  # from the end: indexes stay valid
            fence = lines[block.start + 1]
            lines[block.start + 1:block.end] = render(block, results[(file, block.name)], fence)
        Path(file).write_text("\n".join(lines), encoding="utf-8")
    print(f"{len(blocks)} example(s) regenerated in {len(texts)} file(s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
