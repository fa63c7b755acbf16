"""`forge store migrate --to URL`: a whole store copied between backends, ids, links, refs,
events, identity and vectors, verified by counts and a content checksum; SQLite -> PostgreSQL ->
SQLite comes back equal."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import invoke
from forge.store import rag
from forge.recall import channels
from forge.core.settings import load_settings
from forge.store import transfer


@pytest.fixture
def source(built_store: Path, settings) -> Path:
    """The 52-entry store with what a lived-in store holds: an archive with message refs, an
    aggregate superseding two entries, two forgotten entries (a gap in the ids, the highest id among
    them, and their forget events)."""
    from fixtures.memory_entries import copy_store

    copy_store(built_store, settings.rag_db_file)
    with rag.open_store(settings) as store:
        archive = rag.remember(store, "archive", "user: bonjour\nassistant: salut", source="compaction",
                               refs={"messages": [3, 4], "history": "h-laptop"})
        agg = rag.remember(store, "fact", "Le NiPoGi a 32 Go de RAM et un Ryzen", source="aggregate")
        rag.supersede(store, [2, 3], agg.id)
        rag.forget(store, 5)
        rag.forget(store, rag.remember(store, "fact", "Une note vite oubliée").id)  # 55: the highest
        assert archive.created
    return Path(settings.rag_db_file)


def summary(settings, target: str):
    side = transfer.open_side(settings, transfer.parse_target(target), create=False)
    try:
        return transfer.store_summary(side), side.entries(), side.events(), side.meta()
    finally:
        side.close()


def test_sqlite_to_sqlite_keeps_ids_links_refs_events_identity_and_vectors(runner, source, settings,
                                                                           tmp_path):
    dest = tmp_path / "copy.db"
    result = invoke(runner, "store", "migrate", "--to", f"sqlite:///{dest}", "--json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["entries"] == 53 and doc["vectors"] == 53 and doc["message_refs"] == 2
    assert "verified: counts and checksum equal" in result.stderr

    (counts, check, vectors, latent), entries, events, meta = summary(settings, f"sqlite:///{source}")
    (counts2, check2, vectors2, latent2), entries2, events2, meta2 = summary(settings, f"sqlite:///{dest}")
    assert (counts, check, vectors, latent) == (counts2, check2, vectors2, latent2)
    assert doc["checksum"] == check and doc["latent_digest"] == latent
    assert doc["latent_terms"] == counts["latent_terms"] > 0   # the latent-term index came along
    assert entries == entries2 and events == events2
    assert meta2["identity"] == meta["identity"] and "identity_check" in meta2
    assert [e["id"] for e in entries2 if e["superseded_by"]] == [2, 3]
    assert 5 not in {e["id"] for e in entries2}

    # the copy is a working store: the same recall, and a new entry takes an id never used
    copy_settings = replace(settings, rag_db_file=dest)
    question = "Combien de RAM a le NiPoGi ?"
    with rag.open_store(settings, mode="read") as a, rag.open_store(copy_settings, mode="read") as b:
        rows_a = [(r.entry.id, r.channel) for r in channels.search_hybrid(a, question).rows]
        rows_b = [(r.entry.id, r.channel) for r in channels.search_hybrid(b, question).rows]
    assert rows_a == rows_b and rows_a
    with rag.open_store(copy_settings) as b:
        assert rag.find_by_message_ids(b, [3, 4], history="h-laptop") == {3: 53, 4: 53}
        new = rag.remember(b, "fact", "Une entrée écrite après la copie")
    assert new.id == 56  # 55 was forgotten at the source: an id is never given twice


def test_a_non_empty_target_the_source_itself_or_a_missing_source_is_refused(runner, source,
                                                                             settings, tmp_path):
    dest = tmp_path / "copy.db"
    assert invoke(runner, "store", "migrate", "--to", f"sqlite:///{dest}").exit_code == 0
    before = dest.read_bytes()
    again = invoke(runner, "store", "migrate", "--to", f"sqlite:///{dest}")
    assert again.exit_code == 1
    assert again.stderr.strip() == f"Error: sqlite:///{dest} is not empty (53 entries); migrate into a new, empty store"
    assert dest.read_bytes() == before

    itself = invoke(runner, "store", "migrate", "--to", f"sqlite:///{source}")
    assert itself.exit_code == 1 and "is the configured store itself" in itself.stderr

    empty = invoke(runner, "store", "migrate", "--to", f"sqlite:///{tmp_path / 'x.db'}",
                   env={"RAG_DB_FILE": str(tmp_path / "none.db")})
    assert empty.exit_code == 1 and "no store there yet" in empty.stderr
    assert not (tmp_path / "x.db").exists()


@pytest.mark.parametrize("to", ["mysql://forge:Hunter2-secret@db/forge", "sqlite:///",
                                "/tmp/plain/path.db", "sqlite://relative.db"])
def test_a_target_that_is_not_a_store_url_is_a_usage_error_without_the_password(runner, source, to):
    result = invoke(runner, "store", "migrate", "--to", to)
    assert result.exit_code == 2
    assert "--to" in result.stderr and "Hunter2-secret" not in result.stderr


def test_the_checksum_sees_every_field_it_covers():
    entry = {"id": 1, "kind": "fact", "project": None, "content": "x", "source": "remember",
             "refs": "{}", "created": "t", "updated": "t", "superseded_by": None, "dedup_key": "c:1"}
    event = {"at": "t", "event": "remember", "entry_id": 1, "kind": "fact", "link": None,
             "info": '{"source": "remember"}'}
    base = transfer.checksum([entry], [event], {"model": "m"})
    # JSON compared as values: the text a backend kept does not matter
    assert transfer.checksum([{**entry, "refs": {}}], [{**event, "info": {"source": "remember"}}],
                             {"model": "m"}) == base
    for field, value in [("id", 2), ("kind", "todo"), ("project", "p"), ("content", "y"),
                         ("source", "compaction"), ("refs", '{"messages": [1]}'),
                         ("superseded_by", 3), ("dedup_key", "c:2"), ("updated", "u")]:
        assert transfer.checksum([{**entry, field: value}], [event], {"model": "m"}) != base, field
    for field, value in [("event", "forget"), ("link", 2), ("info", None), ("at", "u")]:
        assert transfer.checksum([entry], [{**event, field: value}], {"model": "m"}) != base, field
    assert transfer.checksum([entry], [], {"model": "m"}) != base
    assert transfer.checksum([entry], [event], {"model": "n"}) != base


# ---------------------------------------------------------------------------- PostgreSQL

def test_sqlite_to_postgres_to_sqlite_comes_back_equal_by_checksum(runner, source, settings,
                                                                    tmp_path, monkeypatch,
                                                                    postgres_server, postgres_url):
    there = invoke(runner, "store", "migrate", "--to", postgres_url, "--json")
    assert there.exit_code == 0, there.stderr
    assert postgres_server.password not in there.stdout + there.stderr
    doc = json.loads(there.stdout)
    assert doc["target"] == postgres_url.replace(postgres_server.password, "***")

    monkeypatch.setenv("FORGE_DATABASE_URL", postgres_url)  # now the configured store
    on_postgres = load_settings()
    question = "Combien de RAM a le NiPoGi ?"
    with rag.open_store(settings, mode="read") as a:
        rows_sqlite = [(r.entry.id, r.channel) for r in channels.search_hybrid(a, question).rows]
    with rag.open_store(on_postgres, mode="read") as b:
        assert b.backend.name == "postgres"
        rows_postgres = [(r.entry.id, r.channel) for r in channels.search_hybrid(b, question).rows]
        assert rag.find_by_message_ids(b, [3, 4], history="h-laptop") == {3: 53, 4: 53}
    assert rows_postgres == rows_sqlite and rows_sqlite  # the copy answers as its source
    back = tmp_path / "back.db"
    result = invoke(runner, "store", "migrate", "--to", f"sqlite:///{back}", "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["checksum"] == doc["checksum"]
    (s1, _, _, _), (s2, _, _, _) = summary(settings, f"sqlite:///{source}"), summary(settings, f"sqlite:///{back}")
    assert s1 == s2  # counts, checksum and the vectors bit for bit


    # the target is refused once it holds something; the next id on PostgreSQL follows the
    # source's highest ever given (55, forgotten at the source)
    monkeypatch.delenv("FORGE_DATABASE_URL")
    again = invoke(runner, "store", "migrate", "--to", postgres_url)
    assert again.exit_code == 1 and "is not empty (53 entries)" in again.stderr
    assert postgres_server.password not in again.stderr
    from forge.store.history import utc_now
    from forge.store import postgres
    from forge.store.common import NewEntry

    backend = postgres.open_backend(settings, mode="write", url=postgres_url)
    try:
        with backend.transaction():
            vec = backend.vectors_of([1])[1]
            assert backend.insert_entry(NewEntry("fact", "après la copie"), None, vec, utc_now()) == 56
    finally:
        backend.close()


def test_a_postgres_target_that_is_down_is_one_line_without_its_password(runner, source, tmp_path):
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"postgresql://forge:Hunter2-secret@127.0.0.1:{port}/forge"
    before = source.read_bytes()
    result = invoke(runner, "store", "migrate", "--to", url)
    assert result.exit_code == 1 and result.stderr.count("\n") == 1
    assert f"postgresql://forge:***@127.0.0.1:{port}/forge" in result.stderr
    assert "Hunter2-secret" not in result.stderr
    assert source.read_bytes() == before


def test_a_store_of_schema_1_gets_the_reason_column_and_its_links_say_fold(settings):
    """The migration: a SQLite store of schema 1 (no reason on a link) opens, its fold links
    read `fold`, and a replacement can be written."""
    from forge.store import db
    from forge.store import sqlite as sqlite_backend

    path = Path(settings.rag_db_file)
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = db.connect(path, vec=False)
    db.migrate(conn, sqlite_backend.MIGRATIONS[:1])
    for i, by in ((1, 2), (2, None)):
        conn.execute("insert into memory_entries(kind, content, created, updated, superseded_by) "
                     "values ('fact', ?, 't', 't', ?)", (f"note {i}", by))
    conn.commit()
    conn.close()
    with rag.open_store(settings, mode="rows") as store:
        assert store.backend.schema_version() == len(sqlite_backend.MIGRATIONS)
        one, two = rag.list_entries(store)
        assert (one.superseded_by, one.superseded_reason) == (2, "fold")
        assert two.superseded_reason is None


@pytest.mark.postgres
def test_the_reason_of_a_link_survives_sqlite_to_postgres_and_back(runner, source, settings,
                                                                  postgres_url, tmp_path):
    with rag.open_store(settings) as store:
        old = rag.remember(store, "fact", "Le serveur a 8 Go de RAM")
        new = rag.remember(store, "fact", "Le serveur a 64 Go de RAM", replaces=[old.id])
    assert invoke(runner, "store", "migrate", "--to", postgres_url).exit_code == 0
    back = tmp_path / "back.db"
    pg_settings = replace(settings, database_url=postgres_url)
    with rag.open_store(pg_settings, mode="rows") as pg:
        got = rag.get_entry(pg, old.id)
        assert (got.superseded_by, got.superseded_reason) == (new.id, "replace")
        assert rag.get_entry(pg, 2).superseded_reason == "fold"
    result = invoke(runner, "store", "migrate", "--to", f"sqlite:///{back}", env={
        "FORGE_DATABASE_URL": postgres_url})
    assert result.exit_code == 0, result.stderr
    with rag.open_store(replace(settings, rag_db_file=back), mode="rows") as copy:
        assert rag.get_entry(copy, old.id).superseded_reason == "replace"
        assert rag.get_entry(copy, 2).superseded_reason == "fold"
