"""An entry whose time is unknown is not placed in time: an import whose records carry no time
dates every entry at the import; such entries are marked (`created_known: false`), shown so,
never "said in" a question's period, never newer or older than another note, and left out by
--since/--until (which say how many)."""
from __future__ import annotations

import json
from datetime import datetime

import pytest

from conftest import invoke

BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture
def on_backend(request, monkeypatch):
    if request.param == "postgres":
        monkeypatch.setenv("FORGE_DATABASE_URL", request.getfixturevalue("postgres_url"))
    return request.param



def _json(runner, *args: str, input: str | None = None) -> dict:
    result = invoke(runner, *args, "--json", input=input)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


NAS = "I bought a NAS Synology DS224+ today, for the photos"


def _import_without_times(runner, tmp_path) -> None:
    """An exported chat log with no `ts`: one exchange about a NAS, then enough small talk for
    --compact to archive it."""
    records = [{"role": "user", "content": NAS},
               {"role": "assistant", "content": "Noted: a DS224+ for the photos."}]
    records += [{"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i}"}
                for i in range(44)]
    path = tmp_path / "h.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in records), encoding="utf-8")
    done = invoke(runner, "history", "import", str(path), "--compact")
    assert done.exit_code == 0, done.stderr


def test_an_import_without_times_marks_its_entries_unknown_and_shows_so(
        runner, tmp_path, forge_env, tz_paris):
    from forge.chat.graphs.recall import retrieved_line
    from forge.core.settings import load_settings
    from forge.recall import rank
    from forge.store import history, rag

    _import_without_times(runner, tmp_path)
    settings = load_settings()
    kept = history.read(settings.memory_file).messages
    assert kept and all(not m.ts_known for m in kept if m.content.startswith("message"))
    raw = json.loads(settings.memory_file.read_text())["messages"]
    assert all(m["ts_known"] is False for m in raw if m["content"].startswith("message"))
    shown = invoke(runner, "history").stdout   # its ts column says the time is the import's
    assert all("Z? " in line for line in shown.splitlines() if "message 4" in line), shown
    assert "ts_known" in invoke(runner, "history", "--csv").stdout
    entries = _json(runner, "memory", "ls")["entries"]
    nas = next(e for e in entries if "DS224" in e["content"])
    assert nas["kind"] == "archive" and nas["created_known"] is False
    assert all(e["created_known"] is False for e in entries)
    # a note written now is written then: its time is known
    note = _json(runner, "remember", "fact", "The NAS sits in the garage")["id"]
    assert _json(runner, "memory", "show", str(note))["created_known"] is True
    at = _json(runner, "remember", "fact", "Old router kept", "--at", "2024-03-05")["id"]
    assert _json(runner, "memory", "show", str(at))["created_known"] is True
    # shown: the date column says `?`, show says why, the chat's line does not date it
    day = datetime.now().astimezone().strftime("%Y-%m-%d")
    table = invoke(runner, "recall", "NAS Synology photos").stdout
    line = next(x for x in table.splitlines() if x.startswith(f"{nas['id']} "))
    assert f"{day}?" in line, table
    assert f"{day} " in next(x for x in table.splitlines() if x.startswith(f"{note} "))
    listed = invoke(runner, "memory", "ls").stdout
    assert "Z? " in next(x for x in listed.splitlines() if x.startswith(f"#{nas['id']} "))
    shown = invoke(runner, "memory", "show", str(nas["id"])).stdout
    assert "(time unknown: when an import without times stored it)" in shown
    row = next(r for r in _json(runner, "recall", "NAS Synology photos")["rows"]
               if r["id"] == nas["id"])
    assert row["created_known"] is False
    with rag.open_store(load_settings(), mode="read") as store:
        found = rank.recall(store, "NAS Synology photos", limit=5)
    chat = retrieved_line(next(r for r in found.rows if r.entry.id == nas["id"]))
    assert chat.startswith("- [archive, date unknown] user: I bought a NAS"), chat


def test_a_question_naming_the_import_s_month_does_not_put_its_entries_first(
        runner, tmp_path, forge_env, tz_paris):
    """The import dated the NAS exchange today; asked about this month, the note said this
    month comes first, and the imported exchange is still searched (not cut out)."""
    _import_without_times(runner, tmp_path)
    said = _json(runner, "remember", "fact", "The NAS sits in the garage")["id"]
    month = datetime.now().astimezone().strftime("%B %Y")
    question = f"which NAS did I buy for the photos in {month}?"
    doc = _json(runner, "recall", question)
    assert doc["time"]["from_query"] == f"in {month}"
    ids = [r["id"] for r in doc["rows"]]
    nas = next(r["id"] for r in doc["rows"] if "DS224" in r["content"])
    assert ids[0] == said and nas in ids, doc["rows"]
    # ... while a note said long before the period is cut out, as before
    old = _json(runner, "remember", "fact", "I bought a NAS Synology DS220 for the photos",
                "--at", "2024-05-02")["id"]
    ids = [r["id"] for r in _json(runner, "recall", question)["rows"]]
    assert ids[0] == said and nas in ids and old not in ids
    # an explicit window filters known times: the imported entries are left out, and counted
    strict = _json(runner, "recall", "NAS photos", "--since", "this month")
    assert [r["id"] for r in strict["rows"]] == [said]
    unknown = sum(not e["created_known"] for e in _json(runner, "memory", "ls")["entries"])
    assert strict["time"]["unknown_time_excluded"] == unknown > 0
    told = invoke(runner, "recall", "NAS photos", "--since", "this month")
    assert f"{unknown} entries whose time is unknown (imported without one) left out" in told.stderr
    # the store as it stood: an imported entry counts from its import
    before = _json(runner, "recall", "NAS photos", "--as-of", "2025")
    assert [r["id"] for r in before["rows"]] == [old]


def test_a_note_of_unknown_time_is_neither_newer_nor_older(runner, tmp_path, forge_env,
                                                           monkeypatch):
    """An exported note whose time was unknown comes back unknown through `remember --batch`,
    and is in no "newer" pair: its date is only when it was imported."""
    dated = _json(runner, "remember", "fact", "Le serveur a 8 Go de RAM", "--at",
                  "2026-11-01")["id"]
    batch = ('{"content": "Le serveur a maintenant 24 Go de RAM", "created": "2026-12-03", '
             '"created_known": false}\n{"content": "Le NAS a 2 disques"}\n')
    assert invoke(runner, "remember", "--batch", "-", input=batch).exit_code == 0
    rows = _json(runner, "recall", "combien de RAM a le serveur ?")["rows"]
    assert dated in [r["id"] for r in rows]
    assert all("newer" not in r for r in rows), rows
    assert "(older:" not in invoke(runner, "recall", "combien de RAM a le serveur ?").stdout
    hot = invoke(runner, "memory", "hot").stdout   # the model never reads the import's date
    assert "- [fact, date unknown] Le serveur a maintenant 24 Go de RAM" in hot, hot
    assert "- [fact, 2026-11-01] Le serveur a 8 Go de RAM" in hot
    exported = invoke(runner, "memory", "export").stdout.splitlines()
    assert ['"created_known": false' in line for line in exported] == [False, True, False]
    monkeypatch.setenv("FORGE_DATA_DIR", str(tmp_path / "other"))
    path = tmp_path / "m.jsonl"
    path.write_text("\n".join(exported) + "\n", encoding="utf-8")
    assert invoke(runner, "remember", "--batch", str(path)).exit_code == 0
    copied = _json(runner, "memory", "ls")["entries"]
    assert [e["created_known"] for e in copied] == [True, False, True]
    bad = invoke(runner, "remember", "--batch", "-",
                 input='{"content": "x", "created_known": false}\n')
    assert bad.exit_code == 1 and '--batch line 1: "created_known": false needs' in bad.stderr
    bad = invoke(runner, "remember", "--batch", "-",
                 input='{"content": "x", "created": "2026-01-01", "created_known": "no"}\n')
    assert bad.exit_code == 1 and '"created_known" must be true or false' in bad.stderr


@pytest.mark.parametrize("on_backend", BACKENDS, indirect=True)
def test_a_store_written_before_keeps_its_rows_all_known(on_backend, runner, settings):
    """A store of the schema before (no `created_known`) opens, migrates in place, keeps every
    row, and reads every time as known: a past import without times cannot be told apart."""
    from forge.core.settings import load_settings
    from forge.store import rag

    settings = load_settings()
    with rag.open_store(settings) as store:
        ids = [r.id for r in rag.remember_many(store, [
            rag.NewEntry("fact", "Le serveur a 8 Go de RAM", created="2024-05-02"),
            rag.NewEntry("decision", "Garder le vieux routeur")])]
        version = store.backend.SCHEMA_VERSION
    before = _json(runner, "memory", "ls")["entries"]
    _downgrade(settings, version - 1)
    after = _json(runner, "memory", "ls")["entries"]
    assert [e["id"] for e in after] == ids
    assert [{k: v for k, v in e.items() if k != "created_known"} for e in after] == \
        [{k: v for k, v in e.items() if k != "created_known"} for e in before]
    assert all(e["created_known"] is True for e in after)


def _downgrade(settings, version: int) -> None:
    """The store as the schema before wrote it: no `created_known` column."""
    if settings.database_url:
        import psycopg

        with psycopg.connect(settings.database_url, autocommit=True) as conn:
            conn.execute("drop index memory_entries_unknown")
            conn.execute("alter table memory_entries drop column created_known")
            conn.execute("update forge_meta set value = %s where key = 'schema_version'",
                         (str(version),))
        return
    import sqlite3

    conn = sqlite3.connect(settings.rag_db_file)
    try:
        conn.execute("drop index memory_entries_unknown")
        conn.execute("alter table memory_entries drop column created_known")
        conn.execute(f"pragma user_version = {int(version)}")
        conn.commit()
    finally:
        conn.close()


@pytest.mark.parametrize("on_backend", BACKENDS, indirect=True)
def test_every_channel_s_window_clause_on_both_backends(on_backend, settings):
    """A question's period (unknown_time=True) does not cut an entry of unknown time out, and
    bounds it by `until` only; --since/--until (False) leave it out; without a window, nothing
    changes. The vector, word and latent-term channels alike."""
    from forge.core.settings import load_settings
    from forge.store import rag

    settings = load_settings()
    with rag.open_store(settings) as store:
        ids = {r.content: r.id for r in (
            rag.get_entry(store, x.id) for x in rag.remember_many(store, [
                rag.NewEntry("fact", "router firmware in 2024", created="2024-05-02"),
                rag.NewEntry("fact", "router firmware imported", created="2026-12-01",
                             created_known=False),
                rag.NewEntry("fact", "router firmware in 2026", created="2026-11-20")]))}
        backend = store.backend
        qvec = store.checked_embedder().embed_query("router firmware")
        terms = store.embedder.sparse_query("router firmware")
        since, until = "2026-01-01T00:00:00.000000Z", "2026-12-31T00:00:00.000000Z"

        def found(**window) -> set[str]:
            by_id = {v: k for k, v in ids.items()}
            out = []
            for hits in (backend.search_vector(qvec, k=10, **window),
                         backend.search_words(["router", "firmware"], k=10, **window),
                         backend.search_sparse(terms, k=10, **window)):
                out.append({by_id[i] for i, _ in hits})
            assert out[0] == out[1] == out[2], out
            return out[0]

        assert found() == set(ids)
        assert found(since=since, until=until) == {"router firmware in 2026"}
        assert found(since=since, until=until, unknown_time=True) == {
            "router firmware in 2026", "router firmware imported"}
        assert found(since=since, until="2026-11-25T00:00:00.000000Z", unknown_time=True) == {
            "router firmware in 2026"}
        assert found(since="2024-01-01T00:00:00.000000Z", until="2024-12-31T00:00:00.000000Z",
                     unknown_time=True) == {"router firmware in 2024"}
        assert found(since="2025-01-01T00:00:00.000000Z", unknown_time=True) == {
            "router firmware in 2026", "router firmware imported"}
        assert backend.count_unknown_time() == 1
        assert backend.count_unknown_time(kind="decision") == 0


def test_an_export_message_without_a_time_is_marked_and_one_with_a_time_is_not(
        runner, tmp_path, forge_env):
    """A Claude export whose first conversation's messages lost `created_at`: those are dated
    at the import and marked; the other conversations keep their times, unmarked."""
    from pathlib import Path

    from forge.core.settings import load_settings
    from forge.store import history

    source = Path(__file__).parent / "fixtures" / "exports" / "claude_conversations.json"
    conversations = json.loads(source.read_text(encoding="utf-8"))
    for m in conversations[0]["chat_messages"]:
        m.pop("created_at", None)
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps(conversations), encoding="utf-8")
    assert invoke(runner, "history", "import", "--from", "claude", str(path)).exit_code == 0
    messages = history.read(load_settings().memory_file).messages
    first = len(conversations[0]["chat_messages"])
    assert [m.ts_known for m in messages] == [False] * first + [True] * (len(messages) - first)
    assert all(m.ts > "2026" for m in messages[:first]) and messages[first].ts < "2026"


@pytest.mark.parametrize("to_backend", ["sqlite", pytest.param("postgres",
                                                               marks=pytest.mark.postgres)])
def test_store_migrate_carries_the_mark_and_its_checksum_sees_it(runner, tmp_path, forge_env,
                                                                 to_backend, request):
    from forge.store import transfer

    batch = ('{"content": "Le NAS a 2 disques", "created": "2026-12-03", '
             '"created_known": false}\n{"content": "Le serveur a 8 Go de RAM"}\n')
    assert invoke(runner, "remember", "--batch", "-", input=batch).exit_code == 0
    to = (request.getfixturevalue("postgres_url") if to_backend == "postgres"
          else f"sqlite:///{tmp_path / 'copy.db'}")
    done = invoke(runner, "store", "migrate", "--to", to)
    assert done.exit_code == 0, done.stderr
    env = ({"FORGE_DATABASE_URL": to} if to_backend == "postgres"
           else {"RAG_DB_FILE": str(tmp_path / "copy.db")})
    copied = json.loads(invoke(runner, "memory", "ls", "--json", env=env).stdout)["entries"]
    assert [e["created_known"] for e in copied] == [False, True]
    entries = [{"id": 1, "kind": "fact", "project": None, "content": "x", "source": "remember",
                "refs": "{}", "created": "t", "updated": "t", "superseded_by": None,
                "dedup_key": None, "created_known": known} for known in (True, False)]
    assert transfer.checksum(entries[:1], []) != transfer.checksum(entries[1:], [])
    without = {k: v for k, v in entries[0].items() if k != "created_known"}
    assert transfer.checksum([without], []) == transfer.checksum(entries[:1], [])


def test_memory_conflicts_puts_the_older_in_time_first_not_the_first_written(runner, forge_env):
    """A note told after the fact (`--at` a date before the other's) is the older of the
    pair, though written second: `memory conflicts` shows it under "older", its JSON lists it
    first, and `remember` says which one the other may replace."""
    recent = _json(runner, "remember", "fact", "Le serveur a 8 Go de RAM")["id"]
    told = invoke(runner, "remember", "fact", "Le serveur a 32 Go de RAM", "--at", "2020-05-01")
    assert told.exit_code == 0, told.stderr
    told_id = int(told.stdout.split("#")[1])
    # the note told late is the older: the recent one may replace it, not the other way round
    assert f"forge memory supersede {told_id} --by {recent}" in told.stderr, told.stderr
    (pair,) = _json(runner, "memory", "conflicts")["conflicts"]
    assert pair["ids"] == [told_id, recent]
    assert pair["contents"] == ["Le serveur a 32 Go de RAM", "Le serveur a 8 Go de RAM"]
    assert "time_unknown" not in pair
    table = invoke(runner, "memory", "conflicts").stdout.splitlines()
    header, row = table[0], table[2]
    assert row.index("a 32 Go") < row.index("a 8 Go") and header.index("older") < header.index("newer")


def test_memory_conflicts_says_when_a_side_s_time_is_unknown(runner, forge_env):
    """An entry of unknown time is neither older nor newer: the pair stays in the order it was
    written, and both the table and the JSON say whose time is unknown."""
    dated = _json(runner, "remember", "fact", "Le serveur a 8 Go de RAM", "--at",
                  "2026-11-01")["id"]
    batch = ('{"content": "Le serveur a 24 Go de RAM", "created": "2026-12-03", '
             '"created_known": false}\n')
    assert invoke(runner, "remember", "--batch", "-", input=batch).exit_code == 0
    (pair,) = _json(runner, "memory", "conflicts")["conflicts"]
    unknown = pair["ids"][1]
    assert pair["ids"][0] == dated and pair["time_unknown"] == [unknown]
    out = invoke(runner, "memory", "conflicts").stdout
    assert "(time unknown) Le serveur a 24 Go de RAM" in out, out
    told = invoke(runner, "remember", "fact", "Le serveur a 16 Go de RAM")
    assert f"#{unknown} may say otherwise" in told.stderr
    line = next(x for x in told.stderr.splitlines() if f"#{unknown} may say otherwise" in x)
    assert "time unknown" in line and "supersede" in line, line
