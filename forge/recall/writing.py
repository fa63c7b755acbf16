"""What a write of the deliberate store asks of recall's models: each note's sentence-model row
stored with it (RECALL_SENTENCE), so a recall embeds only its question.

The store ring cannot import the model (it sits in this ring, above it): a door that writes
notes hands its store the model's writer through `rows_written`, and rag writes the rows in the
note's own transaction. With RECALL_SENTENCE off nothing of the model is imported.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..store.rag import Store


def rows_written(store: "Store") -> "Store":
    """`store`, its notes' sentence rows written with them from now on (RECALL_SENTENCE on;
    the model loads only when a note is written). Returns the store."""
    if store.settings.recall_sentence and store.sentence is None:
        from . import sentence

        store.sentence = sentence.Writer()
    return store
