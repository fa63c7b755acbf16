#!/usr/bin/env python3
"""One-shot migration: re-slice archive entries written before per-exchange intake.

A thin wrapper over `forge resplit` (the same code, forge/memory/resplit.py):

    python deploy/rag_resplit.py                                   # dry run, the default
    python deploy/rag_resplit.py --apply --backup /tmp/forge_rag.db.bak

It rewrites rows and has no undo: --apply refuses to run without --backup, a consistent
snapshot taken first. Pieces are inserted before their block is deleted, so an interrupted run
leaves a visible duplicate, never a loss; run it again to finish.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from forge.cli.main import cli  # noqa: E402

if __name__ == "__main__":
    cli(["resplit", *sys.argv[1:]], prog_name="rag_resplit.py")
