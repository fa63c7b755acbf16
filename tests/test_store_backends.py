"""The Backend contract (forge/store/backend.py) on BOTH backends, from one parametrised suite:
SQLite (sqlite-vec + FTS5) and a real PostgreSQL with pgvector (tests/postgres_server.py).

Vectors here are seeded random unit vectors (the contract is about storing and finding them);
the rag-level behaviour with the real embedder is in tests/test_store_shared.py.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from forge.core.errors import StoreError
from forge.store.common import NewEntry

BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
FIXTURE = Path(__file__).parent / "fixtures" / "memory_entries.json"
DIM = 8


def unit(seed: int, dim: int = DIM):
    import numpy as np

    v = np.random.default_rng(seed).normal(size=dim).astype(np.float32)
    return v / np.linalg.norm(v)


def open_backend(name: str, settings, mode: str = "write", url: str | None = None):
    if name == "postgres":
        from forge.store import postgres

        return postgres.open_backend(settings, mode=mode, url=url)
    from forge.store import sqlite

    return sqlite.open_backend(settings, mode=mode)


@pytest.fixture(params=BACKENDS)
def backend_name(request, monkeypatch) -> str:
    if request.param == "postgres":
        url = request.getfixturevalue("postgres_url")
        monkeypatch.setenv("FORGE_DATABASE_URL", url)
    return request.param


@pytest.fixture
def opener(backend_name, settings, monkeypatch):
    import os

    url = os.environ.get("FORGE_DATABASE_URL") if backend_name == "postgres" else None
    opened = []

    def open_(mode: str = "write"):
        b = open_backend(backend_name, settings, mode, url)
        opened.append(b)
        return b

    yield open_
    for b in opened:
        b.close()


def insert(b, content: str, *, kind: str = "fact", project: str | None = None, key: str | None = None,
           seed: int = 0, refs: dict | None = None, vector=None) -> int:
    with b.transaction():
        b.ensure_vectors(DIM if vector is None else len(vector))
        return b.insert_entry(NewEntry(kind, content, project, "remember", refs),
                              key, unit(seed) if vector is None else vector, "2026-12-01T00:00:00Z")


# ------------------------------------------------------------------ schema, meta, entries

def test_a_fresh_store_is_migrated_to_the_current_version_and_reopens_unchanged(opener):
    b = opener()
    assert b.schema_version() == b.SCHEMA_VERSION >= 1
    assert b.count_entries() == 0 and b.list_entries() == [] and not b.has_vectors()
    b.close()
    again = opener()
    assert again.schema_version() == again.SCHEMA_VERSION
    assert again.read_meta("identity") is None


def test_meta_values_round_trip_as_json(opener):
    b = opener()
    with b.transaction():
        b.write_meta("identity", {"backend": "embedded", "dim": 384, "probe": "AAAA"})
    assert b.read_meta("identity") == {"backend": "embedded", "dim": 384, "probe": "AAAA"}
    assert b.try_write_meta("identity_check", {"answer": {"a": 1}, "at": 1.5})
    assert b.read_meta("identity_check") == {"answer": {"a": 1}, "at": 1.5}
    with b.transaction():
        b.delete_meta("identity_check")
    assert b.read_meta("identity_check") is None


def test_entries_keep_every_field_and_the_listings_filter(opener):
    b = opener()
    a = insert(b, "Possède un Steam Deck", project="jeux", seed=1, key="c:1",
               refs={"note": "é"})
    c = insert(b, "Use SQLite-vec", kind="decision", project="forge", seed=2, key="c:2")
    d = insert(b, "user: salut\nassistant: bonjour", kind="archive", seed=3,
               refs={"messages": [1, 2], "history": "h-a"})
    assert a < c < d
    e = b.entries_by_id([a, 999])[a]
    assert (e.kind, e.project, e.content, e.refs, e.superseded_by) == \
        ("fact", "jeux", "Possède un Steam Deck", {"note": "é"}, None)
    assert [x.id for x in b.list_entries(kind="decision")] == [c]
    assert [x.id for x in b.list_entries(project="jeux")] == [a]
    assert [x.id for x in b.hot_entries()] == [a, c]          # archive is not hot
    assert b.projects() == ["forge", "jeux"]
    assert b.counts_by_kind() == {"archive": 1, "decision": 1, "fact": 1}
    assert b.id_for_dedup_key("c:2") == c and b.id_for_dedup_key("c:9") is None
    assert b.archive_for_messages([1, 2, 3]) == {1: d, 2: d}
    assert sorted(i for i, _ in b.iter_texts()) == [a, c, d]


def test_a_listing_comes_in_pages_after_an_id_with_a_text_filter_and_its_total(opener):
    b = opener()
    ids = [insert(b, f"Fact number {n} about the {'NAS' if n % 3 == 0 else 'laptop'}", seed=n,
                  kind="todo" if n == 9 else "fact") for n in range(10)]
    insert(b, "100% sure: a_b is literal", seed=20)
    first, total = b.list_page(limit=4)
    assert [e.id for e in first] == ids[:4] and total == 11
    rest, _ = b.list_page(after_id=first[-1].id, limit=100)
    assert [e.id for e in rest][:6] == ids[4:]
    nas, total = b.list_page(contains="nas", limit=2)          # case-insensitive substring
    assert [e.id for e in nas] == [ids[0], ids[3]] and total == 4
    nas_todo, total = b.list_page(contains="NAS", kind="todo", limit=10)
    assert [e.id for e in nas_todo] == [ids[9]] and total == 1
    # % and _ are the text they are, not patterns
    assert [e.content for e in b.list_page(contains="100%", limit=10)[0]] == ["100% sure: a_b is literal"]
    assert b.list_page(contains="a%b", limit=10) == ([], 0)
    assert b.list_page(contains="r_n", limit=10)[1] == 0


def test_the_dedup_key_is_unique_in_the_store_and_a_second_insert_writes_nothing(opener):
    b = opener()
    insert(b, "Possède un Steam Deck", key="c:same", seed=1)
    with pytest.raises(Exception):
        insert(b, "Possède un Steam Deck", key="c:same", seed=1)
    assert b.count_entries() == 1 and b.count_vectors() == 1


def test_supersede_sources_and_events(opener):
    b = opener()
    s1 = insert(b, "one", seed=1)
    s2 = insert(b, "two", seed=2)
    agg = insert(b, "one and two", seed=3)
    with b.transaction():
        b.set_superseded(s1, agg, "2026-12-01T01:00:00Z")
        b.set_superseded(s2, agg, "2026-12-01T01:00:00Z")
        b.log_event("supersede", s1, "fact", link=agg)
        b.log_event("fold", agg, "fact", info={"mode": "written", "sources": [s1, s2]})
    assert b.sources_of(agg) == [s1, s2] and b.count_superseded() == 2
    assert [x.id for x in b.hot_entries()] == [agg]
    events = b.events_for(agg)
    assert [(e["event"], e["entry_id"], e["link"]) for e in events] == \
        [("supersede", s1, agg), ("fold", agg, None)]
    assert events[1]["info"] == {"mode": "written", "sources": [s1, s2]}


def test_a_failed_transaction_writes_nothing(opener):
    b = opener()
    with pytest.raises(RuntimeError):
        with b.transaction():
            b.ensure_vectors(DIM)
            b.insert_entry(NewEntry("fact", "half", None, "remember", None), "c:h", unit(1), "now")
            raise RuntimeError("boom")
    assert b.count_entries() == 0 and b.id_for_dedup_key("c:h") is None


# ------------------------------------------------------------------ vectors

def test_the_project_filter_runs_inside_the_knn_and_fills_the_budget(opener):
    """200 entries near the query outside the project, 12 far from it inside: k=10 of the
    project come back, not the global top 10 filtered down to nothing."""
    import numpy as np

    b = opener()
    q = unit(0)
    with b.transaction():
        b.ensure_vectors(DIM)
        for i in range(200):
            near = q + 0.05 * unit(1000 + i)
            b.insert_entry(NewEntry("fact", f"near {i}", "other", "remember", None), None,
                           (near / np.linalg.norm(near)).astype(np.float32), "now")
        inside = [b.insert_entry(NewEntry("fact", f"far {i}", "p", "remember", None), None,
                                 (-q + 0.3 * unit(5000 + i)) / np.linalg.norm(-q + 0.3 * unit(5000 + i)),
                                 "now") for i in range(12)]
    rows = b.search_vector(q, k=10, project="p")
    assert len(rows) == 10 and {i for i, _ in rows} <= set(inside)
    assert [d for _, d in rows] == sorted(d for _, d in rows)
    assert b.search_vector(q, k=5, project="p", kind="fact")[0][0] == rows[0][0]
    assert len(b.search_vector(q, k=50, project="p")) == 12
    assert all(i not in inside for i, _ in b.search_vector(q, k=10))
    assert b.vector_dim() == DIM and b.count_vectors() == 212


@pytest.mark.postgres
def test_with_an_hnsw_index_the_project_filter_still_fills_the_budget(postgres_url, settings):
    """pgvector's HNSW returns ef_search candidates then filters: iterative scan (strict order,
    pgvector >= 0.8, set on every connection) keeps scanning until k rows pass the filter."""
    import numpy as np

    b = open_backend("postgres", settings, url=postgres_url)
    q = unit(0)
    with b.transaction():
        b.ensure_vectors(DIM)
        for i in range(600):
            near = q + 0.05 * unit(1000 + i)
            b.insert_entry(NewEntry("fact", f"near {i}", "other", "remember", None), None,
                           (near / np.linalg.norm(near)).astype(np.float32), "now")
        for i in range(60):
            far = -q + 0.3 * unit(5000 + i)
            b.insert_entry(NewEntry("fact", f"far {i}", "p", "remember", None), None,
                           (far / np.linalg.norm(far)).astype(np.float32), "now")
    exact = b.search_vector(q, k=50, project="p")
    b.conn.execute("create index on memory_vectors using hnsw (embedding vector_l2_ops)")
    # the planner would rather use the project index for so selective a project (exact, and
    # right): take that way away so the HNSW path itself is what is tested
    b.conn.execute("drop index memory_vectors_project")
    b.conn.execute("analyze memory_vectors")
    b.conn.execute("set enable_seqscan = off")
    b.conn.execute("set hnsw.ef_search = 10")
    plan = "\n".join(r[0] for r in b.conn.execute(
        "explain select id from memory_vectors where project = 'p' "
        "order by embedding <-> %s::vector limit 50", ("[" + ",".join(map(str, q)) + "]",)))
    assert "hnsw" in plan.lower() or "memory_vectors_embedding_idx" in plan
    indexed = b.search_vector(q, k=50, project="p")
    assert len(indexed) == 50
    assert len({i for i, _ in indexed} & {i for i, _ in exact}) >= 45
    b.close()


def test_vectors_read_back_and_stream(opener):
    import numpy as np

    b = opener()
    ids = [insert(b, f"e{i}", project="p" if i % 2 else None, seed=i) for i in range(5)]
    got = b.vectors_of(ids[:2])
    assert np.allclose(got[ids[0]], unit(0), atol=1e-6)
    chunks = list(b.iter_vectors(chunk=2))
    assert [len(c[0]) for c in chunks] == [2, 2, 1]
    assert list(np.concatenate([c[0] for c in chunks])) == ids
    only = list(b.iter_vectors(project="p"))
    assert list(only[0][0]) == [ids[1], ids[3]]


# ------------------------------------------------------------------ words

def test_words_are_folded_alike_and_counted_by_document(opener):
    b = opener()
    a = insert(b, "L'élan du NiPoGi : 32 Go de RAM", seed=1)
    c = insert(b, "Éric a un NIPOGI et un élan", seed=2)
    assert b.query_words("ÉLAN nipogi, Élan?") == ["elan", "nipogi"]
    assert b.document_frequency(["elan", "nipogi", "ram", "absent"]) == {"elan": 2, "nipogi": 2, "ram": 1}
    rows = b.search_words(["ram", "eric"], k=5)
    assert {i for i, _ in rows} == {a, c}
    assert all(score < 0 for _, score in rows)  # lower is better, as bm25()


# ------------------------------------------------------------------ forget

def test_delete_entry_is_a_real_forget(opener):
    b = opener()
    keep = insert(b, "Possède un Steam Deck", seed=1)
    gone = insert(b, "user: le mot zyzzyva\nassistant: noté", kind="archive", seed=2,
                  refs={"messages": [7, 8]})
    with b.transaction(erase=True):
        b.delete_entry(gone)
    assert b.entries_by_id([gone]) == {}
    assert b.count_vectors() == 1 and set(b.vectors_of([keep, gone])) == {keep}
    assert b.document_frequency(["zyzzyva"]) == {}
    assert b.search_words(["zyzzyva"], k=5) == []
    assert b.archive_for_messages([7, 8]) == {}
    assert [i for i, _ in b.search_vector(unit(2), k=5)] == [keep]


def test_update_entry_moves_the_words(opener):
    b = opener()
    e = insert(b, "le mot ancien", seed=1)
    with b.transaction():
        b.update_entry(e, kind="decision", content="le mot nouveau", dedup_key="c:n",
                       updated="2026-12-01T02:00:00Z")
        b.replace_vector(e, unit(9), None)
    assert b.document_frequency(["ancien", "nouveau"]) == {"nouveau": 1}
    entry = b.entries_by_id([e])[e]
    assert (entry.kind, entry.content, entry.updated) == ("decision", "le mot nouveau",
                                                          "2026-12-01T02:00:00Z")
    assert b.search_vector(unit(9), k=1)[0][0] == e and b.id_for_dedup_key("c:n") == e


# ------------------------------------------------------------------ reindex staging

def test_reindex_staging_swaps_in_a_new_dimension(opener):
    b = opener()
    ids = [insert(b, f"entry {i}", seed=i) for i in range(3)]
    b = opener()   # `forge reindex` is a fresh process: no vector sent on this connection yet
    assert b.staged_count() is None
    with b.transaction():
        b.reset_staging()
    assert b.staged_count() == 0 and [i for i, _ in b.unstaged(10)] == ids
    with b.transaction():
        b.stage_vectors([(ids[0], unit(0, 4)), (ids[1], unit(1, 4))])
    assert [i for i, _ in b.unstaged(10)] == [ids[2]]
    with b.transaction():
        b.stage_vectors([(ids[2], unit(2, 4))])
        assert b.swap_in_staged(4) == 3
    assert b.vector_dim() == 4 and b.staged_count() is None
    assert b.search_vector(unit(1, 4), k=1)[0][0] == ids[1]


# ------------------------------------------------------------------ both backends at once

@pytest.mark.postgres
def test_both_backends_admit_the_same_words_for_the_same_question(postgres_url, settings):
    """Word rarity on both: the 52-entry FR/EN fixture in each store; for every question, the
    same folded words with the same document frequencies, so `is_informative` admits the same
    words, and the word channel ranks the same entries first (BM25 with FTS5's constants)."""
    from forge.store import rag
    from forge.store import postgres, sqlite

    entries = json.loads(FIXTURE.read_text(encoding="utf-8"))
    stores = [sqlite.open_backend(settings, mode="write"),
              postgres.open_backend(settings, mode="write", url=postgres_url)]
    for b in stores:
        with b.transaction():
            b.ensure_vectors(DIM)
            for i, e in enumerate(entries):
                b.insert_entry(NewEntry(e["kind"], e["content"], e["project"]), f"c:{i}", unit(i),
                               "2026-12-01T00:00:00Z")
    questions = ["Quelle RAM a mon NiPoGi ?", "Est-ce que je possède un Steam Deck ?",
                 "ÉLÈVE élève eleve, Ærø ŒUVRE naïve façade", "What do I use for the vector DB?",
                 "le la les de des un une et est", "conteneurs Podman sur SteamOS", "32 Go"]
    total = len(entries)
    for q in questions:
        words = [b.query_words(q) for b in stores]
        assert words[0] == words[1], q
        dfs = [b.document_frequency(words[0]) for b in stores]
        assert dfs[0] == dfs[1], q
        admitted = [w for w in words[0] if rag.is_informative(dfs[0].get(w, 0), total, 0.2)]
        ranked = [[i for i, _ in b.search_words(admitted, k=5)] for b in stores]
        assert ranked[0] == ranked[1], q
        scores = [[s for _, s in b.search_words(admitted, k=5)] for b in stores]
        assert scores[0] == pytest.approx(scores[1], rel=1e-4), q
    for b in stores:
        b.close()


# ------------------------------------------------------------------ Postgres specifics

@pytest.mark.postgres
def test_a_wrong_password_is_one_line_naming_the_url_without_it(postgres_url, settings):
    from forge.store import postgres

    bad = postgres_url.replace("postgres:", "postgres:not-the-password-", 1)
    assert "not-the-password" in bad
    with pytest.raises(StoreError) as e:
        postgres.open_backend(settings, mode="write", url=bad)
    message = str(e.value)
    assert "\n" not in message and "not-the-password" not in message
    assert "postgres:***@127.0.0.1" in message and "password" in message.lower()


@pytest.mark.postgres
def test_a_database_without_a_schema_reads_as_empty_and_is_not_created(postgres_url, settings):
    from forge.store import postgres

    b = postgres.open_backend(settings, mode="rows", url=postgres_url)
    assert b.missing and b.list_entries() == [] and b.count_entries() == 0
    b.close()
    look = postgres.open_backend(settings, mode="inspect", url=postgres_url)
    assert look.schema_version() == 0
    look.close()


@pytest.mark.postgres
def test_reindex_keeps_an_hnsw_index_a_user_added(postgres_url, settings):
    b = open_backend("postgres", settings, url=postgres_url)
    ids = [insert(b, f"entry {i}", seed=i) for i in range(3)]
    b.conn.execute("create index my_hnsw on memory_vectors using hnsw (embedding vector_l2_ops)")
    with b.transaction():
        b.reset_staging()
        b.stage_vectors([(i, unit(i + 10)) for i in ids])
        assert b.swap_in_staged(DIM) == 3
    names = [r[0] for r in b.conn.execute(
        "select indexname from pg_indexes where tablename = 'memory_vectors' order by indexname")]
    assert "my_hnsw" in names
    b.close()


@pytest.mark.postgres
def test_a_second_reindex_of_a_shared_store_stops_at_once_with_one_line(postgres_url, settings):
    from forge.store import postgres

    first = open_backend("postgres", settings, url=postgres_url)
    second = open_backend("postgres", settings, url=postgres_url)
    with first.reindex_lock():
        with pytest.raises(StoreError, match="another `forge reindex` is running") as e:
            with second.reindex_lock():
                pass
        assert "\n" not in str(e.value) and "***" in str(e.value)
    with second.reindex_lock():   # free again once the first is done
        pass
    assert postgres.REINDEX_LOCK != postgres.WRITE_LOCK
    first.close()
    second.close()


def _recount(b, words):
    """Document frequencies counted the slow way, on the entries themselves."""
    from forge.store.postgres import _lexeme

    out = {}
    for w in words:
        (n,) = b.conn.execute("select count(*) from memory_entries where words @@ %s::tsquery",
                              (_lexeme(w),)).fetchone()
        if n:
            out[w] = n
    return out


@pytest.mark.postgres
def test_word_counts_follow_every_change_even_a_delete_typed_in_psql(postgres_url, settings):
    b = open_backend("postgres", settings, url=postgres_url)
    a = insert(b, "le NiPoGi a 32 Go de RAM", seed=1)
    c = insert(b, "le Steam Deck a 16 Go", seed=2)
    d = insert(b, "le mot zyzzyva", seed=3)
    words = ["le", "go", "nipogi", "steam", "zyzzyva", "a"]
    assert b.document_frequency(words) == _recount(b, words) == \
        {"le": 3, "go": 2, "nipogi": 1, "steam": 1, "zyzzyva": 1, "a": 2}
    with b.transaction():
        b.update_entry(c, kind="fact", content="le Steam Deck OLED", dedup_key=None, updated="now")
    b.conn.execute("delete from memory_entries where id = %s", (d,))    # a human in psql
    assert b.document_frequency(words) == _recount(b, words) == \
        {"le": 2, "go": 1, "nipogi": 1, "steam": 1, "a": 1}
    # a forgotten word leaves no row behind
    assert b.conn.execute("select count(*) from memory_words where word = 'zyzzyva'").fetchone() == (0,)
    assert b.conn.execute("select entries, words from memory_word_totals").fetchone() == (2, 7 + 4)
    assert a
    b.close()


@pytest.mark.postgres
def test_migrations_are_ordered_and_an_older_store_is_brought_up_to_date(postgres_url, settings):
    """A store written at schema 1 (before the word counts) opens at the current schema with its
    word counts back-filled; each migration ran once, in order, in its own transaction."""
    import psycopg

    from forge.store import postgres

    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("create extension if not exists vector")
        conn.execute("create table forge_meta (key text primary key, value text not null)")
        with conn.cursor() as cur:
            postgres.MIGRATIONS[0](cur)
        conn.execute("insert into forge_meta values ('schema_version', '1')")
    old = postgres.PostgresBackend(psycopg.connect(postgres_url, autocommit=True), postgres_url)
    assert old.schema_version() == 1
    insert(old, "le NiPoGi a 32 Go de RAM", seed=1)
    insert(old, "le Steam Deck a 16 Go", seed=2)
    old.close()
    b = open_backend("postgres", settings, url=postgres_url)
    assert b.schema_version() == postgres.SCHEMA_VERSION == len(postgres.MIGRATIONS) >= 2
    words = ["le", "go", "nipogi", "ram"]
    assert b.document_frequency(words) == _recount(b, words) == {"le": 2, "go": 2, "nipogi": 1, "ram": 1}
    assert [r.id for r in b.list_entries()] == [1, 2]
    assert b.search_words(["nipogi"], k=5)[0][0] == 1
    b.close()


@pytest.mark.postgres
def test_the_postgres_backend_keeps_the_whole_protocol(postgres_url, settings):
    """As tests/test_architecture.py holds the SQLite backend: every method of the Backend
    protocol, with the same parameters, and every attribute set by an open."""
    import inspect

    from forge.store import backend, postgres

    methods = {n: m for n, m in vars(backend.Backend).items()
               if callable(m) and not n.startswith("_")}
    for name, declared in methods.items():
        impl = getattr(postgres.PostgresBackend, name, None)
        assert impl is not None, name
        assert list(inspect.signature(impl).parameters) == \
            list(inspect.signature(declared).parameters), name
    opened = postgres.open_backend(settings, mode="inspect", url=postgres_url)
    try:
        for name in backend.Backend.__annotations__:
            assert hasattr(opened, name), name
    finally:
        opened.close()


@pytest.mark.postgres
def test_the_last_migrations_run_again_on_a_store_whose_recorded_version_is_behind(
        postgres_url, settings):
    """A store whose recorded schema version is older than its tables (a copy downgraded by a
    bench, a version written back by hand) opens: the notes' sentence rows and `created_known`
    are made only where they are missing, and the rows stay."""
    import psycopg

    from forge.store import postgres

    b = open_backend("postgres", settings, url=postgres_url)
    insert(b, "le NiPoGi a 32 Go de RAM", seed=1)
    b.close()
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("update forge_meta set value = '5' where key = 'schema_version'")
    again = open_backend("postgres", settings, url=postgres_url)
    assert again.schema_version() == postgres.SCHEMA_VERSION
    assert [r.content for r in again.list_entries()] == ["le NiPoGi a 32 Go de RAM"]
    again.close()
