"""What rag's writes and reindex return (Remembered, Edited, Forgotten, FoldResult,
ReindexResult) and the aggregation tier's write (Fold); a search's rows are in search_results.py. Out of common.py so
that a listing, which builds none of them, does not pay for creating their dataclasses at start
(~0.9 ms each in a fresh process, measured with -X importtime), and apart from the search's so
that `forge recall` creates only its own two: rag imports these modules where it needs them,
and `rag.Remembered`, `rag.SearchRow` and the others still name them (rag's __getattr__)."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from .common import Entry, NewEntry


@dataclass
class Remembered:
    id: int
    created: bool   # False: an exact duplicate, `id` is the existing entry
    replaced: list[int] = field(default_factory=list)   # `remember --replaces`
    # the secrets replaced by a marker before the write, by type (forge/core/secret_scan.py)
    secrets_redacted: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Edited:
    entry: Entry              # as stored after the edit
    changed: list[str]        # "content" and/or "kind"; empty when it already said that
    secrets_redacted: dict[str, int] = field(default_factory=dict)   # by type

    def to_dict(self) -> dict[str, Any]:
        return {**self.entry.to_dict(), "changed": self.changed,
                "secrets_redacted": self.secrets_redacted}


@dataclass
class Forgotten:
    """One forgotten entry and the entries this forget released (active again): only those,
    never what an earlier undo released."""

    entry: Entry              # as it stood before the forget
    released: list[int] = field(default_factory=list)

    @property
    def id(self) -> int:
        return self.entry.id

    @property
    def kind(self) -> str:
        return self.entry.kind

    def to_dict(self) -> dict[str, Any]:
        """`forge memory forget ID --json`: {"id", "kind", "released"}."""
        return {"id": self.entry.id, "kind": self.entry.kind, "released": self.released}


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
