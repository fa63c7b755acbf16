#!/usr/bin/env python3
"""Secrets never enter the memory: the scanner as Forge configures it on labelled sets, what it
redacts in texts that hold no secret, and what it costs.

    python bench/secret_redaction.py [--rounds 3] [--write-docs]

Sets: bench/secrets_set.json and the held-out bench/secrets_prose_heldout.json (targets: every
secret caught, every look-alike kept, nothing found again in the redacted set); LoCoMo's and the
personal sets' texts (target: none redacted). Costs: the scanner's load, the scan per message,
and `history import --compact` of LoCoMo's first conversation with and without the scan,
`--rounds` interleaved (0: left out).
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time

import harness
import docs_figures
import locomo

ROOT = harness.ROOT
SET = ROOT / "bench" / "secrets_set.json"
HELDOUT = ROOT / "bench" / "secrets_prose_heldout.json"


def report(title: str, data: dict) -> None:
    """The secrets caught, the look-alikes kept, by type and language; each miss and false alarm."""
    from forge.core.secret_scan import redact

    caught, kept, by, wrong = 0, 0, {}, []
    for item in data["secrets"]:
        ok = all(s not in redact(item["text"])[0] for s in item["secret"])
        caught += ok
        for key in (item["type"], f"({item['lang']})"):
            by.setdefault(key, [0, 0])
            by[key][0] += ok
            by[key][1] += 1
        if not ok:
            wrong.append(f"{item['type']}: {item['text'][:60]!r}")
    for item in data["lookalikes"]:
        found = redact(item["text"])[1]
        kept += not found
        if found:
            wrong.append(f"{item['kind']}: {item['text'][:60]!r} -> {found}")
    n, m = len(data["secrets"]), len(data["lookalikes"])
    types = len({s["type"] for s in data["secrets"]})
    print(f"{title}: {n} secrets of {types} types, {m} look-alikes")
    print(f"  caught {caught}/{n} = {caught / n:.2f}   look-alikes kept {kept}/{m} = "
          f"{kept / m:.2f}")
    print("  " + ", ".join(f"{k} {v[0]}/{v[1]}"
                           for k, v in sorted(by.items(), key=lambda kv: kv[0].lower())))
    for line in wrong:
        print(f"  {line}")


def locomo_texts() -> tuple[list[str], list[dict]]:
    """Every text of the LoCoMo subset, and the first conversation's messages in order."""
    texts, first = [], []
    for n, sample in enumerate(json.loads(locomo.DEFAULT_DATA.read_text(encoding="utf-8"))):
        speaker = sample["conversation"].get("speaker_a")
        for _, turn in locomo.turns(sample):
            texts.append(turn.get("text", ""))
            if turn.get("blip_caption"):
                texts.append(turn["blip_caption"])
            if n == 0:
                first.append({"role": "user" if turn.get("speaker") == speaker else "assistant",
                              "content": turn.get("text", "")})
        for qa in sample.get("qa", []):
            texts += [str(qa.get("question", "")), str(qa.get("answer", ""))]
    return texts, first


def personal_texts() -> list[str]:
    out = []
    for name in ("personal_facts.json", "french_personal.json"):
        data = json.loads((ROOT / "tests" / "fixtures" / name).read_text(encoding="utf-8"))
        out += [e["content"] for e in data["entries"]]
        out += [h["question"] for h in data.get("hits", [])]
        out += [m["question"] if isinstance(m, dict) else str(m) for m in data.get("misses", [])]
    return out


def load_ms() -> float:
    """A fresh process: import detect-secrets and configure it as Forge does (the median of 3)."""
    code = ("import time; t = time.perf_counter(); from forge.core import secret_scan; "
            "secret_scan._engine(); print((time.perf_counter() - t) * 1000)")
    runs = [float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                 check=True, cwd=ROOT).stdout) for _ in range(3)]
    return statistics.median(runs)


def import_seconds(messages: list[dict], keep: bool) -> float:
    """`history import --compact` of `messages` into a fresh store (LoCoMo holds no secret)."""
    from forge.memory.history_import import import_history

    with tempfile.TemporaryDirectory() as tmp:
        settings = harness.data_settings(tmp, LLAMA_CPP_URL="http://127.0.0.1:9",
                                         FORGE_KEEP_SECRETS="1" if keep else "0")
        text = "\n".join(json.dumps(m, ensure_ascii=False) for m in messages)
        started = time.perf_counter()
        report = import_history(settings, text, compact=True)
        assert not report.secrets_redacted, report.secrets_redacted
        return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--write-docs", action="store_true", help=docs_figures.HELP)
    args = parser.parse_args()
    from forge.core import secret_scan

    data = json.loads(SET.read_text(encoding="utf-8"))
    with docs_figures.tee("secret_redaction", args.write_docs):
        loaded = load_ms()
        report("labelled set", data)
        report("held-out prose set", json.loads(HELDOUT.read_text(encoding="utf-8")))
        # a marker must never be taken for a secret: a find that overlaps one is dropped
        again = sum(len(secret_scan.redact(secret_scan.redact(item["text"])[0])[1])
                    for item in data["secrets"])
        print(f"\nsecrets found again when the redacted labelled set is scanned again: {again}")
        texts, messages = locomo_texts()
        for name, pool in (("LoCoMo texts", texts), ("personal sets", personal_texts())):
            redacted = [t for t in pool if secret_scan.redact(t)[1]]
            passing = sum(secret_scan.could_hold(t) for t in pool)
            print(f"\n{name}: {len(pool)} texts, {len(redacted)} redacted, {passing} pass the "
                  "pre-filter")
            for t in redacted[:5]:
                print(f"  {t[:80]!r} -> {secret_scan.redact(t)[1]}")
        started = time.perf_counter()
        for t in texts:
            secret_scan.redact(t)
        per = (time.perf_counter() - started) / len(texts)
        print(f"\nscanner load (fresh process, import + configure): {loaded:.0f} ms")
        print(f"scan per LoCoMo text (pre-filter included): {per * 1e6:.0f} µs")
        if args.rounds < 1:
            return
        timings: dict[bool, list[float]] = {True: [], False: []}
        for _ in range(args.rounds):
            for keep in (True, False):
                timings[keep].append(import_seconds(messages, keep))
        off, on = statistics.median(timings[True]), statistics.median(timings[False])
        print(f"import of LoCoMo conversation 1 ({len(messages)} messages, --compact, embedded "
              f"model), median of {args.rounds}:")
        print(f"  without the scan (FORGE_KEEP_SECRETS=1) {off:.2f} s, with it {on:.2f} s: "
              f"x{on / off:.3f}, {(on - off) / len(messages) * 1000:+.2f} ms a message")


if __name__ == "__main__":
    main()
