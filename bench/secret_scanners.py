"""The secret scanners Forge could use, on the labelled set: what each catches, what it leaves
alone, what it costs to import and per message. Each candidate lives in a virtualenv of its own
(detect-secrets and bc-detect-secrets install the same `detect_secrets` package); one run drives
them all and prints one table:

    python -m venv /tmp/v-ds && /tmp/v-ds/bin/pip install detect-secrets==1.5.0
    python -m venv /tmp/v-bcds && /tmp/v-bcds/bin/pip install bc-detect-secrets==1.5.52
    python -m venv /tmp/v-th3 && /tmp/v-th3/bin/pip install trufflehog3==3.0.10
    python -m venv /tmp/v-wh && /tmp/v-wh/bin/pip install whispers==2.4.0
    python bench/secret_scanners.py --python detect-secrets=/tmp/v-ds/bin/python \
        --python bc-detect-secrets=/tmp/v-bcds/bin/python \
        --python trufflehog3=/tmp/v-th3/bin/python --python whispers=/tmp/v-wh/bin/python \
        [--write-docs]

"caught" counts the set's secrets whose every secret string is gone once the scanner's finds
are cut out of the message; "kept" counts the look-alikes it finds nothing in. Import is the
first import of the scanner with its rules loaded (its configuration included); the cost is per
message, over the whole set. detect-secrets and its fork run twice: every plugin they have
through their ad-hoc `scan_line`, and Forge's configuration (forge/core/secret_scan.py; the
plugins a fork lacks left out). trufflehog3 runs its default rules in memory, whispers its
default rules on one file per message (it reads files only). None of them reaches the network:
verification is off (detect-secrets, trufflehog3) or absent (whispers). Forge runs no other
scanner; this compares them once, for docs/secrets.md.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import docs_figures  # noqa: E402

SET = ROOT / "bench" / "secrets_set.json"
Finder = Callable[[str], list[str]]
_HELD: list = []


def detect_secrets_defaults() -> Finder:
    """Every plugin the installed detect-secrets has, its default filters, `scan_line`."""
    from detect_secrets.core.scan import scan_line
    from detect_secrets.settings import default_settings

    _HELD.append(default_settings())   # held open: leaving it restores the settings
    _HELD[-1].__enter__()
    return lambda text: [s.secret_value for line in text.splitlines() for s in scan_line(line)
                         if s.secret_value]


def forge_configured() -> Finder:
    """Forge's configuration (forge/core/secret_scan.py) over the installed detect-secrets;
    the plugins a fork lacks are left out and named."""
    sys.path.insert(0, str(ROOT))
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class

    from forge.core import secret_scan

    have = {cls.__name__ for cls in get_mapping_from_secret_type_to_class().values()}
    missing = [name for name in secret_scan.PLUGINS if name not in have]
    if missing:
        print(f"  (this detect-secrets lacks {', '.join(missing)}: left out)")
        for name in missing:
            del secret_scan.PLUGINS[name]
    secret_scan._engine()
    return lambda text: [text[f.start:f.end] for f in secret_scan.find(text)]


def trufflehog3() -> Finder:
    from trufflehog3.core import DEFAULT_RULES_FILE, load_rules
    from trufflehog3.models import File
    from trufflehog3.search import search

    rules = load_rules(DEFAULT_RULES_FILE)
    return lambda text: [i.secret for i in search(File(path="message.txt", content=text), rules)]


def whispers() -> Finder:
    from argparse import Namespace

    from whispers.core.config import load_config
    from whispers.core.pairs import make_pairs
    from whispers.core.rules import load_rules
    from whispers.core.secrets import detect_secrets

    folder = Path(tempfile.mkdtemp())
    from whispers.core.args import parse_args

    args = parse_args([str(folder)])

    def find(text: str) -> list[str]:
        path = folder / "message.txt"
        path.write_text(text, encoding="utf-8")
        config = load_config(args)
        rules = load_rules(args, config)
        return [p.value for p in detect_secrets(rules, make_pairs(config, path)) if p.value]

    return find


def measure(name: str, make: Callable[[], Finder], data: dict) -> None:
    started = time.perf_counter()
    find = make()
    imported = (time.perf_counter() - started) * 1000
    caught = kept = 0
    started = time.perf_counter()
    for item in data["secrets"]:
        text = item["text"]
        for value in sorted(set(find(text)), key=len, reverse=True):
            text = text.replace(value, "[secret]")
        caught += all(s not in text for s in item["secret"])
    for item in data["lookalikes"]:
        kept += not find(item["text"])
    per = (time.perf_counter() - started) / (len(data["secrets"]) + len(data["lookalikes"]))
    print(f"{name:<44} caught {caught:>2}/{len(data['secrets'])}  kept {kept:>2}/"
          f"{len(data['lookalikes'])}  import {imported:5.0f} ms  {per * 1e6:6.0f} µs/message")


SCANNERS = ("detect-secrets", "bc-detect-secrets", "trufflehog3", "whispers")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", action="append", default=[], metavar="SCANNER=PYTHON",
                        help="the interpreter of a virtualenv that holds SCANNER (repeatable)")
    parser.add_argument("--write-docs", action="store_true", help=docs_figures.HELP)
    parser.add_argument("--scanner", choices=SCANNERS, help=argparse.SUPPRESS)  # one child run
    parser.add_argument("--forge", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.scanner is None:
        import subprocess

        pairs = [p.split("=", 1) for p in args.python]
        if not pairs or any(len(p) != 2 or p[0] not in SCANNERS for p in pairs):
            parser.error(f"give --python SCANNER=PYTHON for some of {', '.join(SCANNERS)}")
        with docs_figures.tee("secret_scanners", args.write_docs):
            data = json.loads(SET.read_text(encoding="utf-8"))
            print(f"labelled set: {len(data['secrets'])} secrets, {len(data['lookalikes'])} "
                  "look-alikes")
            for name, python in pairs:
                done = subprocess.run([python, __file__, "--scanner", name], text=True,
                                      capture_output=True, check=True)
                print(done.stdout, end="", flush=True)
        return
    data = json.loads(SET.read_text(encoding="utf-8"))
    if args.scanner in ("detect-secrets", "bc-detect-secrets"):
        from importlib.metadata import version

        label = f"{args.scanner} {version(args.scanner)}"
        # one process per configuration: detect-secrets' settings are process-wide
        if args.forge:
            measure(f"{label}, Forge's configuration", forge_configured, data)
            return
        measure(f"{label}, every plugin (scan_line)", detect_secrets_defaults, data)
        import subprocess

        sys.stdout.flush()
        subprocess.run([sys.executable, __file__, "--scanner", args.scanner, "--forge"],
                       check=True)
    elif args.scanner == "trufflehog3":
        measure("trufflehog3, default rules", trufflehog3, data)
    else:
        measure("whispers, default rules", whispers, data)


if __name__ == "__main__":
    main()
