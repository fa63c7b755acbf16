"""What rag's writes, searches and reindex return (Remembered, Edited, SearchRow, SearchResult,
FoldResult, ReindexResult) and the aggregation tier's write (Fold). Out of common.py so that a
listing, which builds none of them, does not pay for creating seven dataclasses at start
(~2 ms of a ~45 ms process): rag imports this module where it needs them, and `rag.SearchRow`
and the others still name them (rag's module __getattr__)."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from .common import Entry, NewEntry


@dataclass
class Remembered:
    id: int
    created: bool   # False: an exact duplicate, `id` is the existing entry (V11)
    replaced: list[int] = field(default_factory=list)   # `remember --replaces` (A9)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class SearchRow:
    entry: Entry
    channel: str            # "vector" | "lexical" | "both" | "latent" | "neighbour" (recall_rank)
    distance: float | None  # L2 between unit vectors; None for word-only rows
    bm25: float | None
    fused: float | None = None  # recall_rank's fused score; None from search_hybrid
    neighbour_of: int | None = None   # channel "neighbour": the strong hit it sits beside
    sparse: float | None = None  # the latent-term channel's dot product, when it found the row


    def to_dict(self) -> dict[str, Any]:
        out = self.entry.to_dict()
        out.update(channel=self.channel, distance=self.distance, bm25=self.bm25)
        if self.fused is not None:
            out["fused"] = self.fused
        if self.neighbour_of is not None:
            out["neighbour_of"] = self.neighbour_of
        if self.sparse is not None:
            out["sparse"] = self.sparse
        return out


@dataclass
class SearchResult:
    rows: list[SearchRow]
    dropped_by_cutoff: int
    nearest_dropped: float | None
    cutoff: float | None   # the cutoff actually applied (None = off)
    fingerprint: str
    admitted_words: list[str] = field(default_factory=list)
    coverage: dict[str, Any] | None = None   # RECALL_MIN_COVERAGE's verdict (forge/recall/refusal.py)

    def to_dict(self) -> dict[str, Any]:
        return {"rows": [r.to_dict() for r in self.rows], "dropped_by_cutoff": self.dropped_by_cutoff,
                "nearest_dropped": self.nearest_dropped, "cutoff": self.cutoff,
                "fingerprint": self.fingerprint, "admitted_words": self.admitted_words,
                "coverage": self.coverage}


@dataclass
class Edited:
    entry: Entry              # as stored after the edit
    changed: list[str]        # "content" and/or "kind"; empty when it already said that

    def to_dict(self) -> dict[str, Any]:
        return {**self.entry.to_dict(), "changed": self.changed}


@dataclass
class Fold:
    """One subject of the aggregation tier, to write: `sources` get `superseded_by` the new
    `aggregate` (with its `vector`), or the existing entry `into` (absorption)."""

    sources: list[int]
    expected: dict[int, str]          # each source's content as the pass read it
    into: int | None = None
    aggregate: NewEntry | None = None
    vector: Any = None

    def conflict(self, found: dict[int, Entry]) -> str | None:
        """Why this fold can no longer be written, given the entries it names as they stand
        now (`found`: id -> entry, missing ids forgotten); None when it can."""
        ids = list(self.sources) + ([self.into] if self.into is not None else [])
        for i in ids:
            entry = found.get(i)
            if entry is None:
                return f"#{i} was forgotten meanwhile"
            if entry.superseded_by is not None:
                return f"#{i} was folded into #{entry.superseded_by} meanwhile"
            if i in self.expected and entry.content != self.expected[i]:
                return f"#{i} was edited meanwhile"
        return None


@dataclass
class FoldResult:
    id: int | None                    # the entry that now speaks for the sources; None = skipped
    why: str | None = None


@dataclass
class ReindexResult:
    entries: int
    identity: dict[str, Any]
    resumed_from: int

    def to_dict(self) -> dict[str, Any]:
        return {"entries": self.entries, "resumed_from": self.resumed_from,
                "identity": {k: v for k, v in self.identity.items() if k != "probe"}}
