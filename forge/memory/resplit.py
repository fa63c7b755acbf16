"""Resplit: re-slice archive entries that hold more than one exchange into one entry
per exchange, with the same `transcript.split` / non-answer test that live compaction uses.

Input: archive entries in Forge's transcript rendering holding several exchanges (stores
written before per-exchange intake, or imported blocks). Each piece is identified by
(block id, piece index) — its dedup key is `r:BLOCK:PIECE` — not by the block's message ids,
which every piece shares with the block until the block is deleted. So:

- the dry run (the default) lists every block, its pieces, every unit it would leave out as a
  non-answer (text test only: old blocks carry no `answered` flag), and the ids of entries that
  are a refusal and nothing else (reported, never deleted: `forge memory forget` is the
  deliberate step);
- `--apply` needs `--backup PATH` (a consistent snapshot by SQLite's backup API, never
  overwriting a file), then per block inserts every piece (one transaction) BEFORE deleting the
  block: killed in between, the store holds a visible duplicate, never a loss, and a re-run
  skips the pieces already written and deletes the block. Run twice, the second changes nothing.
"""
from __future__ import annotations

import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from . import transcript
from ..core.errors import ForgeError

if TYPE_CHECKING:
    from ..store.rag import Entry, Store

# Test hook (documented in the README): with FORGE_TEST_PAUSE_AT=resplit_insert the process
# says so on stderr and sleeps after a block's pieces are in and before the block is deleted,
# so a test can kill -9 it there.
PAUSE_ENV = "FORGE_TEST_PAUSE_AT"


@dataclass
class LeftOut:
    block: int
    piece: int
    reason: str
    preview: str


@dataclass
class BlockPlan:
    id: int
    project: str | None
    exchanges: int
    pieces: list[int]                 # indices of the units that become entries
    left_out: list[LeftOut] = field(default_factory=list)
    written: list[int] = field(default_factory=list)      # entry ids of the pieces (apply)
    already: int = 0                  # pieces found from an earlier, interrupted run
    deleted: bool = False


@dataclass
class ResplitReport:
    applied: bool
    backup: str | None
    blocks: list[BlockPlan] = field(default_factory=list)
    refusals: list[int] = field(default_factory=list)   # entries that are a refusal and nothing else

    @property
    def pieces(self) -> int:
        return sum(len(b.pieces) for b in self.blocks)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["pieces"] = self.pieces
        d["left_out"] = [asdict(u) for b in self.blocks for u in b.left_out]
        return d


def _preview(unit: transcript.Unit) -> str:
    text = " ".join((unit.question or unit.reply).split())
    return text if len(text) <= 70 else text[:69] + "…"


def plan(store: "Store") -> ResplitReport:
    """What a resplit would do. Reads only."""
    from ..store import rag

    report = ResplitReport(applied=False, backup=None)
    for entry in rag.list_entries(store, kind=rag.ARCHIVE_KIND):
        units = transcript.split(entry.content)
        keep_idx = [i for i, u in enumerate(units)
                    if transcript.left_out_reason(u, text_only=True) is None]
        if not keep_idx:
            report.refusals.append(entry.id)
            continue
        if len(units) <= 1:
            continue
        block = BlockPlan(entry.id, entry.project, len(units), keep_idx)
        block.left_out = [LeftOut(entry.id, i, transcript.left_out_reason(u, text_only=True) or "",
                                  _preview(u))
                          for i, u in enumerate(units) if i not in keep_idx]
        report.blocks.append(block)
    return report


def pieces(entry: "Entry", block: BlockPlan) -> list[Any]:
    """The new archive entries of one block, carrying its project, source, refs and date
    (`created`: when the exchanges happened)."""
    from ..store import rag

    units = transcript.split(entry.content)
    parts = sum(len(u.parts) for u in units)
    refs = entry.refs or {}
    messages = list(refs.get("messages") or [])
    external = list(refs.get("external") or [])
    # Refs one per message line up with the parts; otherwise every piece carries them all.
    per_part = {"messages": len(messages) == parts, "external": len(external) == parts}
    out, offset = [], 0
    offsets = []
    for u in units:
        offsets.append(offset)
        offset += len(u.parts)
    source = entry.source if entry.source in rag.ARCHIVE_SOURCES else "import"
    for index in block.pieces:
        unit = units[index]
        span = slice(offsets[index], offsets[index] + len(unit.parts))
        piece_refs: dict[str, Any] = {
            "messages": messages[span] if per_part["messages"] else [],
            "external": external[span] if per_part["external"] else external,
            "resplit": {"block": entry.id, "piece": index},
        }
        if refs.get("history"):  # whose message ids these are (a shared store)
            piece_refs["history"] = refs["history"]
        out.append(rag.NewEntry(kind=rag.ARCHIVE_KIND, content=unit.text(), project=entry.project,
                                source=source, refs=piece_refs, created=entry.created,
                                created_known=entry.created_known))
    return out


def resplit(store: "Store", *, apply: bool = False, backup: Path | str | None = None,
            on_progress: Callable[[int], None] | None = None,
            planned: ResplitReport | None = None) -> ResplitReport:
    """Dry run by default; `apply` writes, and needs `backup` (the pieces are inserted before
    the block is deleted). `planned`: this store's `plan`, when the caller already made it (to
    size a progress bar)."""
    from ..store import rag, transfer

    report = planned if planned is not None else plan(store)
    if not apply:
        return report
    if backup is None:
        raise ForgeError("--apply rewrites archive entries and has no undo: give --backup PATH")
    backup = Path(backup)
    if backup.exists():
        raise ForgeError(f"--backup {backup} exists; choose a new path (a backup is never overwritten)")
    transfer.snapshot(store.settings, store.backend, backup)
    report.applied, report.backup = True, str(backup)
    for block in report.blocks:
        entry = rag.get_entry(store, block.id)
        results = rag.remember_many(store, pieces(entry, block))
        block.written = [r.id for r in results]
        block.already = sum(not r.created for r in results)
        _pause("resplit_insert")
        # its pieces hold the same text: nothing to erase, and no file rewrite per block;
        # unless the block holds a secret the pieces were written without (a block written
        # while secrets were kept, or by an older Forge): then no byte of it may stay
        from ..core.secret_scan import Redactions

        held = Redactions.for_settings(store.settings)
        held.text(entry.content)
        rag.forget(store, block.id, erase=bool(held.counts))
        block.deleted = True
        if on_progress:
            on_progress(1)
    return report


def _pause(point: str) -> None:
    if os.environ.get(PAUSE_ENV) == point:
        sys.stderr.write(f"paused at {point}\n")
        sys.stderr.flush()
        time.sleep(600)
