#!/usr/bin/env python3
"""Print the settings table from forge/core/settings.py, the one source of truth.

    python tools/settings_table.py                  # the Markdown table
    python tools/settings_table.py --check FILE     # exit 1 when FILE's copy between the
                                                    # settings-table markers is stale

The documentation site renders this table on its settings page at every build (the
`{forge-settings}` directive of docs/_ext/forge_docs.py calls `table()`), so it cannot drift;
tests/test_docs.py checks every setting is in it.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from forge.core.settings import SPECS  # noqa: E402

START, END = "<!-- settings-table -->", "<!-- /settings-table -->"


def table() -> str:
    lines = ["| setting | default | what it does |", "|---|---|---|"]
    for spec in SPECS:
        default = "unset" if spec.default is None else f"`{spec.default}`" if spec.default else "empty"
        if spec.name in ("MEMORY_FILE", "RAG_DB_FILE", "TRACE_FILE"):
            default = {"MEMORY_FILE": "`memory.json`", "RAG_DB_FILE": "`forge_rag.db`",
                       "TRACE_FILE": "`traces.jsonl`"}[spec.name] + " in the data dir"
        lines.append(f"| `{spec.name}` | {default} | {spec.help} |")
    return "\n".join(lines)


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        text = Path(sys.argv[2]).read_text(encoding="utf-8")
        current = text.split(START, 1)[1].split(END, 1)[0].strip() if START in text else ""
        if current != table():
            print(f"{sys.argv[2]}: the settings table is stale; run tools/settings_table.py", file=sys.stderr)
            return 1
        return 0
    print(table())
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # `tools/settings_table.py | head`
        sys.exit(0)
