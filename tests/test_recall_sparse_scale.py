"""The latent-term channel on a large store, what keeps its queries fast there: document
frequencies kept by triggers, and the postings budget (store.common.posting_cap).

Real parts: SQLite with its triggers, the embedded embedder's sparse head for the entries.
"""
from __future__ import annotations

import sqlite3

from test_recall_sparse import FACTS, fill


def counted(path) -> tuple[dict[int, int], dict[int, int]]:
    """(the df table, a count over the postings), read with a plain sqlite3 connection."""
    conn = sqlite3.connect(path)
    try:
        kept = dict(conn.execute("select term, df from memory_sparse_df where df > 0"))
        real = dict(conn.execute("select term, count(*) from memory_sparse group by term"))
        return kept, real
    finally:
        conn.close()


def test_within_budget_keeps_every_term_under_it_and_the_heaviest_by_weight_over_sqrt_df():
    from forge.recall.sparse import within_budget

    terms = [(1, 0.9), (2, 0.5), (3, 0.4), (4, 0.1)]
    df = {1: 400, 2: 25, 3: 100, 4: 1}
    assert within_budget(terms, df, budget=526) == terms
    # weight / sqrt(df): 2 (0.100), 4 (0.100), 1 (0.045), 3 (0.040); 1 does not fit after 2
    # and 4 (26 + 400 > 300), 3 still does: the query's order is kept
    assert within_budget(terms, df, budget=300) == [(2, 0.5), (3, 0.4), (4, 0.1)]
    assert within_budget(terms, df, budget=0) == []


def test_the_frequency_table_follows_every_write_and_a_plain_delete(settings, runner):
    from conftest import invoke
    from forge.store import rag

    ids = fill(settings)
    kept, real = counted(settings.rag_db_file)
    assert kept == real and real
    with rag.open_store(settings) as store:
        rag.edit(store, ids[0], content="La facture de gaz arrive le 12 du mois")
        rag.forget(store, ids[2])
    assert counted(settings.rag_db_file)[0] == counted(settings.rag_db_file)[1]
    from forge.store import db

    conn = db.connect(settings.rag_db_file)   # a shell's DELETE (sqlean): the triggers keep it
    with conn:
        conn.execute("delete from memory_entries where id = ?", (ids[3],))
    conn.close()
    kept, real = counted(settings.rag_db_file)
    assert kept == real
    assert invoke(runner, "reindex").exit_code == 0
    assert counted(settings.rag_db_file)[0] == counted(settings.rag_db_file)[1]


def test_an_older_store_gets_its_frequencies_counted_by_the_migration(settings):
    """A store at schema 3 (the index without the df table): opening it migrates, and the
    table holds every term's count."""
    from forge.store import rag

    from forge.store import db

    fill(settings)
    conn = db.connect(settings.rag_db_file)
    with conn:
        conn.execute("drop trigger memory_sparse_ai")
        conn.execute("drop trigger memory_sparse_ad")
        conn.execute("drop table memory_sparse_df")
        conn.execute("pragma user_version = 3")
        conn.execute("update meta set value = '3' where key = 'schema_version'")
    conn.close()
    with rag.open_store(settings) as store:
        rag.remember(store, "fact", "Le chauffe-eau a été détartré en mars")
    kept, real = counted(settings.rag_db_file)
    assert kept == real and len(real) > 64


def test_a_query_over_the_budget_searches_the_terms_that_fit(settings, monkeypatch):
    """A real store and query: under the budget every admitted term is searched (the dot
    product is exact); over it, exactly the terms within_budget keeps, whose postings fit."""
    from forge.store import rag
    from forge.recall import sparse

    texts = [f"{fact} ({n})" for n in range(4) for fact in FACTS]
    with rag.open_store(settings) as store:
        rag.remember_many(store, [rag.NewEntry("fact", t) for t in texts])
        query = store.embedder.sparse_query("la facture d'électricité du garage")
        whole = sparse.admitted(store, query)
        df = store.backend.sparse_frequency([t for t, _ in whole])
        assert len(whole) > 10
        searched = []
        real = store.backend.search_sparse
        monkeypatch.setattr(store.backend, "search_sparse",
                            lambda terms, **kw: searched.append(list(terms)) or real(terms, **kw))
        sparse.search(store, "la facture d'électricité du garage", k=10)
        assert searched == [whole]
        budget = sum(df.values()) // 3
        monkeypatch.setattr(sparse, "POSTINGS_BUDGET", budget)
        sparse.search(store, "la facture d'électricité du garage", k=10)
        kept = searched[-1]
        assert kept == sparse.within_budget(whole, df, budget)
        assert 0 < len(kept) < len(whole) and sum(df[t] for t, _ in kept) <= budget
