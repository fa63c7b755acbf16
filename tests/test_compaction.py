"""Compaction: triggers, the window, rag_pointer against the real store, failures, the cap,
pins and the history lock."""
from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest

from forge.memory import compaction
from forge.store import history, rag
from forge.core import tokens
from forge.core.errors import ForgeError, ServerError
from forge.store.history import NewMessage
from forge.core.settings import load_settings


def configure(monkeypatch, **values) -> object:
    for name, value in values.items():
        monkeypatch.setenv(name, str(value))
    return load_settings()


def add_exchanges(settings, n: int, *, start: int = 0, reply=None, max_history: int | None = None):
    messages = []
    for i in range(start, start + n):
        messages.append(NewMessage("user", f"question {i}: the NiPoGi item number {i}?", ref=f"ext/{i}"))
        messages.append(NewMessage("assistant", reply(i) if reply else f"answer {i}: item {i} is fine"))
    return history.append(settings.memory_file, messages, max_history=max_history or settings.max_history)


def archive_entries(settings) -> list:
    with rag.open_store(settings, check_identity=False) as store:
        return rag.list_entries(store, kind=rag.ARCHIVE_KIND)


# -- triggers and the window --------------------------------------------------------------------

def test_count_trigger_keeps_the_recent_and_the_pinned(monkeypatch):
    s = configure(monkeypatch, COMPACTION_THRESHOLD=12, COMPACTION_KEEP_RECENT=4)
    add_exchanges(s, 5)                        # ids 1..10
    history.set_pinned(s.memory_file, 3, True)  # pins exchange 3-4
    assert compaction.needs_compaction(s, history.read(s.memory_file)) is None
    add_exchanges(s, 2, start=5)               # ids 11..14: 12 non-pinned now
    assert compaction.needs_compaction(s, history.read(s.memory_file)) == "count"

    report = compaction.compact(s, if_needed=True)

    assert report.trigger == "count"
    assert sorted(report.removed_ids) == [1, 2, 5, 6, 7, 8, 9, 10]
    doc = history.read(s.memory_file)
    pointer = doc.messages[0]
    assert pointer.role == "system" and pointer.meta["compaction"] == "pointer"
    assert [m.id for m in doc.messages[1:]] == [3, 4, 11, 12, 13, 14]
    assert [m.pinned for m in doc.messages[1:3]] == [True, True]
    entries = archive_entries(s)
    assert sorted(e.refs["messages"] for e in entries) == [[1, 2], [5, 6], [7, 8], [9, 10]]
    assert pointer.meta["entries"] == [e.id for e in sorted(entries, key=lambda e: e.id)]
    ids = sorted(e.id for e in entries)
    assert f"archive entries #{ids[0]}–#{ids[-1]}" in pointer.content and "forge recall" in pointer.content


def test_the_window_never_splits_an_exchange(monkeypatch):
    s = configure(monkeypatch, COMPACTION_THRESHOLD=6, COMPACTION_KEEP_RECENT=3)
    history.append(s.memory_file, [
        NewMessage("user", "q1"), NewMessage("assistant", "a1"),
        NewMessage("user", "lis notes.txt"), NewMessage("assistant", '{"action": "files"}'),
        NewMessage("tool", "le contenu"), NewMessage("assistant", "le fichier dit X"),
        NewMessage("user", "q3"), NewMessage("assistant", "a3"),
    ], max_history=s.max_history)
    # The 3 most recent start inside exchange 3-6 (at message 6): the cut moves back to 3.
    report = compaction.compact(s)
    assert report.removed_ids == [1, 2]
    assert [m.id for m in history.read(s.memory_file).messages[1:]] == [3, 4, 5, 6, 7, 8]


def test_token_trigger_compacts_down_to_the_target_and_keeps_pinned(monkeypatch):
    trace = "Traceback (most recent call last):\n" + "  File \"x.py\", line 1, in f\n    boom()\n" * 10
    # Thresholds from the real weights, so a change of the router's system text cannot move them:
    # four traced exchanges cross the threshold; the target has room for one, not two.
    fixed = compaction.prompt_weight(load_settings(), [])["system_tools"]
    exchange = tokens.estimate_tokens(f"regarde cette trace 0\n{trace}") + 10
    threshold, target = fixed + 3 * exchange, fixed + 100 + exchange + exchange // 2
    s = configure(monkeypatch, COMPACTION_THRESHOLD=40, COMPACTION_KEEP_RECENT=10,
                  COMPACTION_TOKEN_THRESHOLD=threshold, COMPACTION_TOKEN_TARGET=target)
    history.append(s.memory_file, [NewMessage("user", "note épinglée"),
                                   NewMessage("assistant", "gardée")], max_history=s.max_history)
    history.set_pinned(s.memory_file, 1, True)
    for i in range(4):
        history.append(s.memory_file, [NewMessage("user", f"regarde cette trace {i}"),
                                       NewMessage("assistant", trace)], max_history=s.max_history)
    doc = history.read(s.memory_file)
    # Ten messages: far under the count threshold, yet the prompt is over the token threshold.
    assert sum(not m.pinned for m in doc.messages) < s.compaction_threshold
    assert compaction.needs_compaction(s, doc) == "tokens"

    report = compaction.compact(s, if_needed=True)

    assert report.trigger == "tokens" and report.tokens_before >= threshold
    assert report.tokens_after <= target
    assert report.removed_ids == [3, 4, 5, 6, 7, 8]   # just enough: the fourth trace stays
    after = history.read(s.memory_file)
    assert [m.id for m in after.messages if m.pinned] == [1, 2]
    assert [m.id for m in after.messages][-2:] == [9, 10]
    assert compaction.needs_compaction(s, after) is None


def test_an_earlier_pointer_is_folded_into_the_next_never_archived(monkeypatch):
    s = configure(monkeypatch, COMPACTION_THRESHOLD=6, COMPACTION_KEEP_RECENT=2)
    add_exchanges(s, 3)
    first = compaction.compact(s)
    add_exchanges(s, 3, start=3)
    second = compaction.compact(s)

    entries = archive_entries(s)
    assert len(entries) == 5
    assert not any("[archived]" in e.content for e in entries)
    doc = history.read(s.memory_file)
    pointers = [m for m in doc.messages if m.is_compaction]
    assert len(pointers) == 1 and pointers[0].id == second.pointer_id != first.pointer_id
    assert sorted(pointers[0].meta["entries"]) == sorted(e.id for e in entries)
    assert pointers[0].meta["exchanges"] == 5 and "5 earlier exchanges" in pointers[0].content


def test_envelopes_are_stored_unwrapped_and_refs_kept(monkeypatch):
    s = configure(monkeypatch, COMPACTION_KEEP_RECENT=0, COMPACTION_THRESHOLD=2)
    history.append(s.memory_file, [
        NewMessage("user", "Quel processeur a mon NiPoGi ?", ref="chat/41"),
        NewMessage("assistant", '{"action": "chat", "content": "Un Ryzen 5 5500U."}', ref="chat/42"),
    ], max_history=s.max_history)
    report = compaction.compact(s)
    (entry,) = archive_entries(s)
    assert entry.content == "user: Quel processeur a mon NiPoGi ?\nassistant: Un Ryzen 5 5500U."
    hid = history.read(s.memory_file).history_id
    assert hid and entry.refs == {"messages": [1, 2], "external": ["chat/41", "chat/42"],
                                  "history": hid}
    assert report.archived_ids == {1: entry.id, 2: entry.id}


def test_non_answers_are_left_out_by_both_rules_and_reported(monkeypatch):
    s = configure(monkeypatch, COMPACTION_KEEP_RECENT=0, COMPACTION_THRESHOLD=2)
    history.append(s.memory_file, [
        NewMessage("user", "Tu peux me lister mon matériel ?"),
        NewMessage("assistant", "Je ne trouve rien.", answered=False),
        NewMessage("user", "Et le NAS ?"),
        NewMessage("assistant", "[no memory] Nothing in memory matches this question."),
        NewMessage("user", "Le NAS est un Synology DS220+."),
        NewMessage("assistant", "Noté."),
    ], max_history=s.max_history)
    report = compaction.compact(s)
    assert [(x.message_ids, x.reason) for x in report.left_out] == [
        ([1, 2], "answered: false"), ([3, 4], "reply starts with [no memory]")]
    assert [e.refs["messages"] for e in archive_entries(s)] == [[5, 6]]
    assert report.removed_ids == [1, 2, 3, 4, 5, 6]   # evicted all the same, never stored
    assert [m.role for m in history.read(s.memory_file).messages] == ["system"]


def test_dry_run_writes_nothing(monkeypatch):
    s = configure(monkeypatch, COMPACTION_THRESHOLD=4, COMPACTION_KEEP_RECENT=2)
    add_exchanges(s, 3)
    before = s.memory_file.read_bytes()
    report = compaction.compact(s, dry_run=True)
    assert report.dry_run and len(report.archived) == 2 and report.removed_ids == [1, 2, 3, 4]
    assert report.messages_after == 3 and "[archived] 2 earlier exchanges" in report.pointer
    assert s.memory_file.read_bytes() == before
    assert not s.rag_db_file.exists()


def test_if_needed_under_the_thresholds_does_nothing(settings):
    add_exchanges(settings, 2)
    report = compaction.compact(settings, if_needed=True)
    assert report.trigger is None and not report.did_something
    assert compaction.maybe_compact(settings) is None


def test_maybe_compact_runs_when_a_trigger_fires(monkeypatch):
    s = configure(monkeypatch, COMPACTION_THRESHOLD=4, COMPACTION_KEEP_RECENT=2)
    add_exchanges(s, 2)
    report = compaction.maybe_compact(s)
    assert report is not None and report.trigger == "count" and len(report.archived) == 1


# -- failures -----------------------------------------------------------------------------------

def test_the_cap_drops_nothing_while_the_embedding_server_is_down(monkeypatch, caplog):
    s = configure(monkeypatch, MEMORY_MAX_HISTORY=8, COMPACTION_THRESHOLD=6, COMPACTION_KEEP_RECENT=2,
                  EMBEDDING_URL="http://127.0.0.1:9/embedding")
    add_exchanges(s, 3)
    with pytest.raises(ServerError) as failure:
        compaction.maybe_compact(s)
    assert "127.0.0.1:9" in str(failure.value)
    doc = history.read(s.memory_file)
    assert doc.compaction_pending and [m.id for m in doc.messages] == [1, 2, 3, 4, 5, 6]

    with caplog.at_level(logging.WARNING, logger="forge"):
        add_exchanges(s, 3, start=3)      # 12 messages, over the cap of 8
    assert [m.id for m in history.read(s.memory_file).messages] == list(range(1, 13))
    assert "over MEMORY_MAX_HISTORY=8" in caplog.text

    monkeypatch.delenv("EMBEDDING_URL")   # the embedded model: compaction can run again
    s = load_settings()
    report = compaction.compact(s)
    doc = history.read(s.memory_file)
    assert not doc.compaction_pending
    assert sorted(report.removed_ids) == list(range(1, 11))
    assert len(archive_entries(s)) == 5 and len(doc.messages) == 3


def test_a_message_appended_by_another_process_during_compaction_survives(monkeypatch):
    s = configure(monkeypatch, COMPACTION_THRESHOLD=4, COMPACTION_KEEP_RECENT=2)
    add_exchanges(s, 3)
    real = rag.remember_many
    other = ("from forge.store import history; from forge.store.history import NewMessage; import sys;"
             "history.append(__import__('pathlib').Path(sys.argv[1]), "
             "[NewMessage('user', 'written while compaction embeds')], max_history=200)")

    def embed_while_another_process_appends(store, items, **kw):
        # If compaction held the history lock here, this process would wait and time out.
        subprocess.run([sys.executable, "-c", other, str(s.memory_file)], check=True, timeout=30)
        return real(store, items, **kw)

    monkeypatch.setattr(rag, "remember_many", embed_while_another_process_appends)
    report = compaction.compact(s)
    doc = history.read(s.memory_file)
    assert report.removed_ids == [1, 2, 3, 4]
    assert [m.content for m in doc.messages][-1] == "written while compaction embeds"
    assert [m.id for m in doc.messages] == [8, 5, 6, 7]   # pointer (#8) first, then 5, 6 and the newcomer


CRASH_SCRIPT = """
import sys
from forge.core.settings import load_settings
from forge.memory.compaction import compact
compact(load_settings())
"""


def test_a_crash_between_the_store_write_and_the_history_rewrite_loses_and_duplicates_nothing(monkeypatch):
    s = configure(monkeypatch, COMPACTION_THRESHOLD=6, COMPACTION_KEEP_RECENT=2)
    add_exchanges(s, 4)
    before = history.read(s.memory_file)

    env = {**os.environ, compaction.CRASH_ENV: "store_write"}
    killed = subprocess.run([sys.executable, "-c", CRASH_SCRIPT], env=env, capture_output=True,
                            timeout=120)
    assert killed.returncode == 137, killed.stderr.decode()
    assert history.read(s.memory_file).messages == before.messages   # the rewrite never happened
    stored = archive_entries(s)
    assert sorted(e.refs["messages"] for e in stored) == [[1, 2], [3, 4], [5, 6]]

    report = compaction.compact(s)     # the re-run finds them by their message ids

    assert all(a.already_stored for a in report.archived)
    assert sorted(e.id for e in archive_entries(s)) == sorted(e.id for e in stored)
    doc = history.read(s.memory_file)
    assert [m.id for m in doc.messages][1:] == [7, 8]
    assert sorted(doc.messages[0].meta["entries"]) == sorted(e.id for e in stored)


def test_llm_summary_failure_leaves_the_history_as_it_was(monkeypatch):
    s = configure(monkeypatch, COMPACTION_THRESHOLD=4, COMPACTION_KEEP_RECENT=2)
    add_exchanges(s, 3)
    before = history.read(s.memory_file)
    with pytest.raises(ServerError) as failure:
        compaction.compact(s, strategy="llm_summary")
    assert "127.0.0.1:9" in str(failure.value) and "llama-server" in str(failure.value)
    after = history.read(s.memory_file)
    assert after.messages == before.messages and after.next_id == before.next_id
    assert not s.rag_db_file.exists()


def test_an_unknown_strategy_is_refused(settings):
    with pytest.raises(ForgeError, match="unknown compaction strategy"):
        compaction.compact(settings, strategy="magic")


def test_two_compactions_racing_leave_one_pointer_and_no_duplicate(monkeypatch):
    s = configure(monkeypatch, COMPACTION_THRESHOLD=6, COMPACTION_KEEP_RECENT=2)
    add_exchanges(s, 4)
    real = rag.remember_many
    raced = []

    def another_compaction_first(store, items, **kw):
        # While this compaction embeds, a cron compaction of the same window runs to the end.
        if not raced:
            raced.append(True)
            subprocess.run([sys.executable, "-c", CRASH_SCRIPT], check=True, timeout=120)
        return real(store, items, **kw)

    monkeypatch.setattr(rag, "remember_many", another_compaction_first)
    report = compaction.compact(s)
    assert all(a.already_stored for a in report.archived)
    assert len(archive_entries(s)) == 3
    doc = history.read(s.memory_file)
    assert [m.is_compaction for m in doc.messages] == [True, False, False]
    assert [m.id for m in doc.messages[1:]] == [7, 8]


def test_a_message_pinned_while_compaction_embeds_stays_in_the_history(monkeypatch):
    """The pin a user sets while compaction works outside the lock is honoured by the
    rewrite; the exchange is already in the store, and a later compaction finds it there."""
    s = configure(monkeypatch, COMPACTION_THRESHOLD=4, COMPACTION_KEEP_RECENT=2)
    add_exchanges(s, 3)
    real = rag.remember_many

    def embed_while_the_user_pins(store, items, **kw):
        history.set_pinned(s.memory_file, 1, True)     # pins the exchange 1-2
        return real(store, items, **kw)

    monkeypatch.setattr(rag, "remember_many", embed_while_the_user_pins)
    compaction.compact(s)
    doc = history.read(s.memory_file)
    assert [(m.id, m.pinned) for m in doc.messages if not m.is_compaction] == \
        [(1, True), (2, True), (5, False), (6, False)]
    monkeypatch.setattr(rag, "remember_many", real)

    history.set_pinned(s.memory_file, 1, False)
    history.set_pinned(s.memory_file, 2, False)
    add_exchanges(s, 2, start=3)
    report = compaction.compact(s)
    assert [a.already_stored for a in report.archived if a.message_ids == [1, 2]] == [True]
    assert sorted(e.refs["messages"] for e in archive_entries(s)) == [[1, 2], [3, 4], [5, 6], [8, 9]]
    [pointer] = [m for m in history.read(s.memory_file).messages if m.is_compaction]
    assert sorted(pointer.meta["entries"]) == sorted(e.id for e in archive_entries(s))
    assert pointer.meta["exchanges"] == 4 and "4 earlier exchanges" in pointer.content
