"""`forge compact`: what it prints, the cron form, llm_summary against a scripted server."""
from __future__ import annotations

import json

from conftest import invoke

from forge.store import history
from forge.store.history import NewMessage
from forge.core.settings import load_settings


def fill(monkeypatch, n: int = 4, **env) -> object:
    for name, value in {"COMPACTION_THRESHOLD": 6, "COMPACTION_KEEP_RECENT": 2, **env}.items():
        monkeypatch.setenv(name, str(value))
    s = load_settings()
    messages = []
    for i in range(n):
        messages += [NewMessage("user", f"Le serveur {i} a combien de RAM ?", ref=f"chat/{2 * i}"),
                     NewMessage("assistant", f"Le serveur {i} a {8 * (i + 1)} Go.", ref=f"chat/{2 * i + 1}")]
    messages[3] = NewMessage("assistant", "[no results]")
    history.append(s.memory_file, messages, max_history=s.max_history)
    return s


def test_if_needed_under_the_thresholds_exits_0_and_says_so(settings, runner):
    history.append(settings.memory_file, [NewMessage("user", "hi")], max_history=200)
    before = settings.memory_file.read_bytes()
    result = invoke(runner, "compact", "--if-needed")
    assert result.exit_code == 0
    assert result.stdout == "" and "nothing to compact" in result.stderr
    assert settings.memory_file.read_bytes() == before


def test_compact_prints_what_it_did(monkeypatch, runner):
    s = fill(monkeypatch, 4, COMPACTION_THRESHOLD=40)     # under the threshold: forced
    result = invoke(runner, "compact")
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert "archived" in out and "chat/0 +1" in out
    assert "left out: reply starts with [no results]" in out
    assert "trigger: forced; strategy: rag_pointer" in out
    assert "2 exchange(s) archived, 1 left out; removed 6 message(s): 8 -> 3" in out
    assert "pointer (#9): [archived] 2 earlier exchanges" in out
    assert "router prompt:" in out and "tokens (estimate)" in out
    assert [m.id for m in history.read(s.memory_file).messages] == [9, 7, 8]


def test_dry_run_json_writes_nothing(monkeypatch, runner):
    s = fill(monkeypatch, 4)
    before = s.memory_file.read_bytes()
    result = invoke(runner, "compact", "--dry-run", "--json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["dry_run"] and doc["trigger"] == "count" and doc["removed_ids"] == [1, 2, 3, 4, 5, 6]
    assert [a["message_ids"] for a in doc["archived"]] == [[1, 2], [5, 6]]
    assert doc["left_out"] == [{"message_ids": [3, 4], "reason": "reply starts with [no results]",
                                "preview": "Le serveur 1 a combien de RAM ?"}]
    assert s.memory_file.read_bytes() == before and not s.rag_db_file.exists()


def test_embedding_down_is_one_line_naming_the_url(monkeypatch, runner):
    s = fill(monkeypatch, 4, EMBEDDING_URL="http://127.0.0.1:9/embedding")
    result = invoke(runner, "compact")
    assert result.exit_code == 1
    assert len(result.stderr.strip().splitlines()) == 1 and "127.0.0.1:9" in result.stderr
    doc = history.read(s.memory_file)
    assert len(doc.messages) == 8 and doc.compaction_pending


def test_llm_summary_replaces_the_window_with_one_call(monkeypatch, runner, fake_server):
    s = fill(monkeypatch, 4, LLAMA_CPP_URL=fake_server.url)
    fake_server.chat_reply("Le serveur 0 a 8 Go et le serveur 2 a 24 Go.")
    result = invoke(runner, "compact", "--strategy", "llm_summary")
    assert result.exit_code == 0, result.stderr
    calls = fake_server.requests_to("/v1/chat/completions")
    assert len(calls) == 1
    sent = calls[0].json["messages"][-1]["content"]
    assert "user: Le serveur 0 a combien de RAM ?" in sent and "[no results]" not in sent
    doc = history.read(s.memory_file)
    summary = doc.messages[0]
    assert summary.role == "system" and summary.meta["compaction"] == "summary"
    assert "serveur 2 a 24 Go" in summary.content
    assert [m.id for m in doc.messages[1:]] == [7, 8] and not s.rag_db_file.exists()


def test_llm_summary_failure_leaves_the_history_and_says_why(monkeypatch, runner, fake_server):
    s = fill(monkeypatch, 4, LLAMA_CPP_URL=fake_server.url)
    before = history.read(s.memory_file)
    fake_server.status("/v1/chat/completions", 500, {"error": {"code": 500, "message": "boom"}})
    result = invoke(runner, "compact", "--strategy", "llm_summary")
    assert result.exit_code == 1
    assert "HTTP 500" in result.stderr and fake_server.url in result.stderr
    after = history.read(s.memory_file)
    assert after.messages == before.messages and after.next_id == before.next_id


def test_the_real_forge_script_cron_form(script_runner, monkeypatch):
    monkeypatch.setenv("COMPACTION_THRESHOLD", "4")
    monkeypatch.setenv("COMPACTION_KEEP_RECENT", "2")
    s = load_settings()
    result = script_runner.run(["forge", "compact", "--if-needed"])
    assert result.returncode == 0 and "nothing to compact" in result.stderr
    history.append(s.memory_file, [NewMessage("user", "Mon NAS est un DS220+"), NewMessage("assistant", "Noté."),
                                   NewMessage("user", "Et le routeur ?"), NewMessage("assistant", "OPNsense.")],
                   max_history=200)
    result = script_runner.run(["forge", "compact", "--if-needed", "--json"])
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["trigger"] == "count"
    assert history.read(s.memory_file).messages[0].meta["compaction"] == "pointer"


def test_llm_summary_that_is_a_placeholder_is_refused_and_says_which(monkeypatch, runner, fake_server):
    """A looping or empty summary would replace the window with nothing worth reading; it is
    refused like the router's placeholders (the same detector) and the history stays."""
    s = fill(monkeypatch, 4, LLAMA_CPP_URL=fake_server.url)
    before = history.read(s.memory_file)
    for reply, reason in (("Le serveur a 8 Go. " * 12, "placeholder_repetition"), ("", "placeholder_empty"),
                          ("[no results]", "[no results]")):
        fake_server.chat_reply(reply)
        result = invoke(runner, "compact", "--strategy", "llm_summary")
        assert result.exit_code == 1, result.stdout
        assert "no usable summary" in result.stderr and reason in result.stderr
        assert history.read(s.memory_file).messages == before.messages


def _damage(path, table: str = "memory_entries") -> None:
    """A valid header and schema, garbage in one table's pages (a bad sector, a torn copy)."""
    import random
    import sqlite3

    plain = sqlite3.connect(path)  # no extension needed to read the schema
    page_size = plain.execute("pragma page_size").fetchone()[0]
    root = plain.execute("select rootpage from sqlite_master where name = ?", (table,)).fetchone()[0]
    plain.close()
    rnd = random.Random(7)
    with open(path, "r+b") as fh:
        fh.seek((root - 1) * page_size)
        fh.write(bytes(rnd.randrange(256) for _ in range(page_size)))


def _unreadable(path) -> None:
    """Not a database at all (overwritten by something else)."""
    path.write_bytes(b"this is not a database\n" * 4000)


def _assert_damage_message(stderr: str, path) -> None:
    line = stderr.strip().splitlines()[-1]
    assert str(path) in line and "left untouched" in line
    assert f'sqlite3 {path} "pragma integrity_check"' in line
    assert "backup" in line and "`forge reindex` does not help" in line


def test_a_damaged_or_unreadable_store_names_the_file_and_compaction_marks_itself_pending(
        monkeypatch, runner):
    import pytest

    for spoil in (_damage, _unreadable):
        s = fill(monkeypatch, 4, COMPACTION_THRESHOLD=40)
        assert invoke(runner, "remember", "Le NAS est un Synology").exit_code == 0
        spoil(s.rag_db_file)
        before = s.rag_db_file.read_bytes()
        for args in (["memory", "ls"], ["recall", "NAS"], ["remember", "autre"], ["compact"]):
            result = invoke(runner, *args)
            assert result.exit_code == 1, (spoil.__name__, args, result.stdout)
            _assert_damage_message(result.stderr, s.rag_db_file)
        assert s.rag_db_file.read_bytes() == before
        assert history.read(s.memory_file).compaction_pending, spoil.__name__
        assert len(history.read(s.memory_file).messages) == 8
        for p in s.rag_db_file.parent.iterdir():
            p.unlink()
