"""The sentence model reads a question without its time expression, as the word channels do:
the period is the time window's to judge. Reading "en octobre 2023" too, its share lifted notes
of the period that are about something else above the one the question asks for (the time
set's two misses: the Lisbon trip, the backup that failed in January)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from conftest import local_zone

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))


@pytest.fixture(scope="module")
def time_store(tmp_path_factory):
    """bench/time_set.json's store, written and read in its zone (as the bench does)."""
    import recall_sets
    import true_now

    data = json.loads(true_now.SETS["time"].read_text(encoding="utf-8"))
    with local_zone(data["tz"]):
        folder = tmp_path_factory.mktemp("time-set")
        yield folder, data, recall_sets.build_dated(folder, data)


@pytest.mark.parametrize("question, expected", [
    ("Où suis-je allé en octobre 2023 ?", "trip_lisbon"),
    ("Pourquoi la sauvegarde a-t-elle échoué en janvier 2025 ?", "h_backup_key"),
])
def test_a_time_named_in_the_question_is_not_read_by_the_sentence_model(
        time_store, question, expected):
    import recall_sets

    from forge.recall import rank
    from forge.store import rag

    folder, data, ids = time_store
    settings = recall_sets.dated_settings(folder, data)
    assert settings.recall_sentence   # the default
    with rag.open_store(settings, mode="read") as store:
        result = rank.recall(store, question, limit=10)
    assert result.time["from_query"]   # the question's period was read
    assert [r.entry.id for r in result.rows][:1] == [ids[expected]], question
