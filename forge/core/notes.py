"""What a deliberate note is, read the same way by the aggregation tier and the conflict
check: an optional label (a few words before a colon) and comma-separated details, cut into words
by the tier's one tokenizer (core/words.py: case and accents folded, digit runs split from letter
runs)."""
from __future__ import annotations

import re
from typing import Any

from ..core.words import word_set, words

__all__ = ["Note", "parse_note", "word_set", "words"]

# A label is a few words before a colon: `Matériel : …`, `Hardware: …`.
LABEL_MAX_WORDS = 3
_LABEL = re.compile(r"^\s*([^:,\n]{1,40}?)\s*:\s+(?=\S)")
_DETAIL_SPLIT = re.compile(r"(?<!\d),|,(?!\d)")


class Note:
    """A note's parts. A plain class (not a dataclass): recall's newer-first reads notes on its
    no-time path, where defining a dataclass costs about 1 ms."""

    __slots__ = ("entry", "label", "label_words", "details", "detail_words")

    def __init__(self, entry: Any, label: str | None, label_words: frozenset[str],
                 details: list[str], detail_words: list[frozenset[str]]):
        self.entry = entry                 # rag.Entry (or a planned aggregate in the preview)
        self.label = label                 # the label's surface with its colon: "Matériel : "
        self.label_words = label_words
        self.details = details
        self.detail_words = detail_words

    @property
    def head(self) -> frozenset[str]:
        return self.detail_words[0]

    @property
    def all_words(self) -> frozenset[str]:
        return self.label_words.union(*self.detail_words)


def parse_note(entry: Any) -> Note | None:
    """A note: optional label, then comma-separated details. None for text that is not a note
    (several lines, or nothing but punctuation)."""
    text = str(entry.content).strip()
    if not text or "\n" in text:
        return None
    label = None
    m = _LABEL.match(text)
    if m and len(words(m.group(1))) <= LABEL_MAX_WORDS and words(m.group(1)):
        label = text[:m.end()]
        text = text[m.end():]
    details, dwords = [], []
    for raw in _DETAIL_SPLIT.split(text):
        detail = raw.strip()
        ws = word_set(detail)
        if ws:
            details.append(detail)
            dwords.append(ws)
    if not details:
        return None
    return Note(entry, label, word_set(label) if label else frozenset(), details, dwords)
