"""The latent-term channel on a large store (issue 22's latency rows): document frequencies kept
by triggers, and the postings budget (store.common.posting_cap).

Real parts: SQLite with its triggers, the embedded embedder's sparse head for the entries.
"""
from __future__ import annotations

import sqlite3

import pytest

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


def test_posting_cap_reads_whole_terms_under_the_budget_and_the_heaviest_over_it():
    from forge.store.common import posting_cap

    assert posting_cap([10, 20, 30], budget=60) is None
    for dfs, budget in (([10, 20, 300, 4000], 1000), ([5000] * 8, 4000), ([1, 1, 9999], 50)):
        cap = posting_cap(dfs, budget)
        assert sum(min(d, cap) for d in dfs) <= budget            # within the budget
        assert sum(min(d, cap + 1) for d in dfs) > budget         # and the largest such cap
    assert posting_cap([10_000] * 300, budget=100) == 1           # never less than one


def test_the_frequency_table_follows_every_write_and_a_plain_delete(settings, runner):
    from conftest import invoke
    from forge import rag

    ids = fill(settings)
    kept, real = counted(settings.rag_db_file)
    assert kept == real and real
    with rag.open_store(settings) as store:
        rag.edit(store, ids[0], content="La facture de gaz arrive le 12 du mois")
        rag.forget(store, ids[2])
    assert counted(settings.rag_db_file)[0] == counted(settings.rag_db_file)[1]
    from forge import db

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
    from forge import rag

    from forge import db

    fill(settings)
    conn = db.connect(settings.rag_db_file)
    with conn:
        conn.execute("drop trigger memory_sparse_ai")
        conn.execute("drop trigger memory_sparse_ad")
        conn.execute("drop index memory_sparse_impact")
        conn.execute("drop table memory_sparse_df")
        conn.execute("pragma user_version = 3")
        conn.execute("update meta set value = '3' where key = 'schema_version'")
    conn.close()
    with rag.open_store(settings) as store:
        rag.remember(store, "fact", "Le chauffe-eau a été détartré en mars")
    kept, real = counted(settings.rag_db_file)
    assert kept == real and len(real) > 64


def _truncated_top(path, terms, cap, k, project=None):
    """The dot products over each term's `cap` heaviest postings, computed here from the table."""
    conn = sqlite3.connect(path)
    try:
        score: dict[int, float] = {}
        for term, w in terms:
            rows = conn.execute("select p.entry_id, p.weight from memory_sparse p join "
                                "memory_entries e on e.id = p.entry_id where p.term = ? and "
                                "(? is null or e.project = ?) order by p.weight desc, p.entry_id",
                                (term, project, project)).fetchall()
            for entry_id, weight in rows[:cap]:
                score[entry_id] = score.get(entry_id, 0.0) + weight * w
        return sorted(score.items(), key=lambda x: (-x[1], x[0]))[:k]
    finally:
        conn.close()


def same(found, expected):
    assert [i for i, _ in found] == [i for i, _ in expected]
    assert [s for _, s in found] == pytest.approx([s for _, s in expected])


@pytest.mark.parametrize("project", [None, "maison"])
def test_over_the_budget_the_search_reads_each_terms_heaviest_postings(settings, monkeypatch,
                                                                        project):
    from forge import rag
    from forge.store import common

    texts = [f"{fact} ({n})" for n in range(4) for fact in FACTS]
    with rag.open_store(settings) as store:
        rag.remember_many(store, [rag.NewEntry("fact", t, "maison" if i % 2 else None)
                                  for i, t in enumerate(texts)])
        terms = store.embedder.sparse_query("la facture d'électricité du garage")[:40]
        df = store.backend.sparse_frequency([t for t, _ in terms])
        terms = [(t, w) for t, w in terms if t in df]
        exact = store.backend.search_sparse(terms, k=10, project=project)
        same(exact, _truncated_top(settings.rag_db_file, terms, 10**9, 10, project))
        monkeypatch.setattr(common, "SPARSE_POSTINGS_BUDGET", 60)
        cap = common.posting_cap([df[t] for t, _ in terms])
        assert cap is not None and cap < max(df.values())      # the budget bites
        cut = store.backend.search_sparse(terms, k=10, project=project)
        same(cut, _truncated_top(settings.rag_db_file, terms, cap, 10, project))
        assert cut != exact
