"""A chat turn end to end against the fake server (scripted model replies; real history, store,
traces and embedder): what is persisted, what the trace says, how failures end."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from chat_helpers import envelope, history_messages, last_trace, load
from conftest import invoke
from forge.memory import non_answer
from forge.store import rag
from forge.chat.run import run_turn
from forge.core.errors import ServerError


def test_a_chat_reply_is_persisted_and_traced(chat_fake):
    chat_fake.chat_reply(envelope("chat", content="Bonjour !"), prompt_n=50, cache_n=20,
                         model="gemma-test")
    settings = load()
    result = run_turn(settings, "Salut")
    assert (result.reply, result.answered) == ("Bonjour !", True)
    user, reply = history_messages(settings)
    assert (user.role, user.content, reply.role, reply.content) == ("user", "Salut", "assistant", "Bonjour !")
    assert result.persisted == [user.id, reply.id]
    trace = last_trace(settings)
    assert trace["run_id"] == result.run_id and trace["ok"] and trace["not_answered"] is None
    assert trace["user_input_preview"] == "Salut" and trace["steps"][0]["tool"] == "router"
    assert trace["llm"]["models"] == ["gemma-test"]
    assert (trace["llm"]["prompt_n"], trace["llm"]["cache_n"], trace["llm"]["calls"]) == (50, 20, 1)


def test_plain_text_is_a_chat_reply(chat_fake):
    chat_fake.chat_reply("Just text.")
    assert run_turn(load(), "hi").reply == "Just text."


def test_router_prompt_is_system_tools_history_then_the_turn(chat_fake):
    chat_fake.chat_replies(["first answer", "second answer"])
    run_turn(load(), "first question")
    run_turn(load(), "second question")
    first, second = (r.json["messages"] for r in chat_fake.requests_to("/v1/chat/completions"))
    assert first[0]["role"] == "system" and "memory:" in first[0]["content"]
    assert "files:" in first[0]["content"] and "shell:" not in first[0]["content"]
    assert second[: len(first)] == first  # a stable prefix: the server's cache keeps it
    assert second[1:] == [{"role": "user", "content": "first question"},
                          {"role": "assistant", "content": "first answer"},
                          {"role": "user", "content": "second question"}]


@pytest.mark.parametrize("raw, reason", [
    ("", "placeholder_empty"),
    ("\ufffd\ufffd\ufffd\ufffd\ufffd", "placeholder_garbled"),
    ('{"action": "chat", "content": "unterminated', "placeholder_garbled"),
    ("bla " * 40, "placeholder_repetition"),
    ("Plain text that is not JSON is taken as a chat answer.", "placeholder_leak"),
])
def test_placeholders_are_never_persisted(chat_fake, raw, reason):
    chat_fake.chat_reply(raw)
    settings = load()
    result = run_turn(settings, "hello")
    assert result.ok and result.not_answered == reason and result.reply == ""
    assert result.notice and "nothing was kept" in result.notice
    assert history_messages(settings) == []
    trace = last_trace(settings)
    assert trace["ok"] is True and trace["not_answered"] == reason


def test_a_reply_starting_with_a_fixed_marker_is_kept_unanswered(chat_fake):
    """The marker says it is no answer even when no step reported it."""
    chat_fake.chat_reply(envelope("chat", content="[no results] rien trouvé"))
    settings = load()
    result = run_turn(settings, "cherche x")
    assert result.ok and result.not_answered == "non_answer_reply"
    assert [m.answered for m in history_messages(settings)] == [False, False]


def test_a_tool_error_is_a_reply_marked_unanswered(chat_fake, tmp_path):
    chat_fake.chat_reply(envelope("files", payload={"op": "read", "path": "../../etc/passwd"}))
    settings = load()
    result = run_turn(settings, "show me /etc/passwd")
    assert result.reply.startswith(non_answer.TOOL_ERROR) and result.not_answered == "tool_error"
    assert [m.answered for m in history_messages(settings)] == [False, False]
    trace = last_trace(settings)
    assert [s["tool"] for s in trace["steps"]] == ["router", "files"]
    assert trace["ok"] is True and "outside the workspace" in trace["error"]


def test_at_one_step_a_files_result_is_the_answer_as_it_came(chat_fake):
    Path("notes.txt").write_text("line one\nline two\n", encoding="utf-8")
    chat_fake.chat_reply(envelope("files", payload={"op": "read", "path": "notes.txt"}, done=False))
    result = run_turn(load(), "read notes.txt")
    assert result.reply == "line one\nline two\n" and result.answered
    assert len(chat_fake.requests_to("/v1/chat/completions")) == 1
    trace = last_trace(load())
    assert "line one" not in json.dumps(trace)  # traces never hold tool output


def test_with_more_steps_a_tool_result_folds_into_the_conversation(chat_fake):
    Path("notes.txt").write_text("the NAS runs Debian", encoding="utf-8")
    chat_fake.chat_reply(envelope("files", payload={"op": "read", "path": "notes.txt"}, done=False))
    chat_fake.chat_reply(envelope("chat", content="Your NAS runs Debian."))
    settings = load(MAX_STEPS="2")
    result = run_turn(settings, "what does my NAS run")
    assert result.reply == "Your NAS runs Debian."
    second = chat_fake.requests_to("/v1/chat/completions")[1].json["messages"]
    assert second[-1] == {"role": "user", "content": "[tool result] the NAS runs Debian"}
    assert [m.role for m in history_messages(settings)] == ["user", "tool", "assistant"]


def test_question_rule_end_to_end(chat_fake):
    """The question rule on a real turn: the router wants to remember, the turn is a question."""
    with rag.open_store(load()) as store:
        rag.remember(store, "fact", "Possède un Steam Deck")
    chat_fake.chat_reply(envelope("memory", payload={"op": "remember", "kind": "fact",
                                                     "content": "Possède un serveur"}))
    chat_fake.chat_reply("Non, je ne sais que pour le Steam Deck.")
    settings = load()
    result = run_turn(settings, "Je possède un serveur ?")
    with rag.open_store(settings, check_identity=False) as store:
        assert [e.content for e in rag.list_entries(store)] == ["Possède un Steam Deck"]
    assert result.reply == "Non, je ne sais que pour le Steam Deck."
    assert [s["tool"] for s in last_trace(settings)["steps"]] == ["router", "memory"]


def test_a_flat_envelope_without_payload_still_reaches_the_tool(chat_fake):
    chat_fake.chat_reply('{"action": "memory", "op": "remember", "kind": "todo", "content": "Renew TLS"}')
    result = run_turn(load(), "Remind me to renew TLS")
    assert result.reply.startswith("Remembered #1 [todo] Renew TLS")


def test_a_statement_routed_to_memory_writes(chat_fake):
    chat_fake.chat_reply(envelope("memory", payload={"op": "remember", "content": "Possède un serveur"}))
    result = run_turn(load(), "Je possède un serveur.")
    assert result.reply.startswith("Remembered #1 [fact] Possède un serveur") and result.answered


def test_a_stream_that_dies_midway_persists_nothing_and_fails(chat_fake):
    chat_fake.stream_dies(after=2)
    settings = load()
    with pytest.raises(ServerError):
        run_turn(settings, "hello", on_token=lambda piece: None)
    assert history_messages(settings) == []
    trace = last_trace(settings)
    assert trace["ok"] is False and trace["error"] and trace["not_answered"] is None


def test_server_down_is_a_traced_failure_naming_the_url():
    settings = load()
    with pytest.raises(ServerError, match="127.0.0.1:9"):
        run_turn(settings, "hello")
    assert history_messages(settings) == [] and last_trace(settings)["ok"] is False


def test_ctrl_c_during_generation_keeps_nothing(chat_fake):
    chat_fake.chat_reply("one two three four five six")
    seen: list[str] = []

    def on_token(piece: str) -> None:
        seen.append(piece)
        if len(seen) == 2:
            raise KeyboardInterrupt

    settings = load()
    with pytest.raises(KeyboardInterrupt):
        run_turn(settings, "count", on_token=on_token)
    assert history_messages(settings) == []
    assert last_trace(settings)["not_answered"] == "interrupted"


def test_streaming_shows_the_chat_content_only(chat_fake):
    chat_fake.chat_reply(envelope("chat", content="Bonjour à toi"))
    shown: list[str] = []
    result = run_turn(load(), "salut", on_token=shown.append)
    assert "".join(shown) == "Bonjour à toi" == result.shown == result.reply


def test_compaction_check_runs_after_persisting(chat_fake):
    settings = load(COMPACTION_THRESHOLD="2", COMPACTION_KEEP_RECENT="0")
    chat_fake.chat_replies(["one", "two"])
    run_turn(settings, "first")
    result = run_turn(settings, "second")
    assert result.compaction is not None and result.compaction.trigger == "count"
    messages = history_messages(settings)
    assert any(m.is_compaction for m in messages)
    with rag.open_store(settings, check_identity=False) as store:
        assert {e.kind for e in rag.list_entries(store)} == {"archive"}


def test_a_failing_compaction_is_a_warning_not_a_failed_turn(chat_fake, caplog):
    from fakeserver import closed_url

    settings = load(COMPACTION_THRESHOLD="2", COMPACTION_KEEP_RECENT="0",
                    EMBEDDING_URL=closed_url() + "/embedding")
    chat_fake.chat_replies(["one", "two"])
    run_turn(settings, "first")
    with caplog.at_level("WARNING", logger="forge"):
        result = run_turn(settings, "second")
    assert result.answered and result.compaction is None
    assert "compaction check failed" in caplog.text
    assert len(history_messages(settings)) == 4


# -- the CLI

def test_cli_chat_json(runner, chat_fake):
    chat_fake.chat_reply(envelope("chat", content="Bonjour"))
    result = invoke(runner, "chat", "--json", "Salut")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["reply"] == "Bonjour" and doc["answered"] is True and len(doc["run_id"]) == 12


def test_cli_chat_reads_stdin_with_dash(runner, chat_fake):
    chat_fake.chat_reply("pong")
    result = invoke(runner, "chat", "-", input="ping from stdin\n")
    assert result.stdout == "pong\n"
    assert history_messages(load())[0].content == "ping from stdin\n"


def test_cli_placeholder_prints_a_notice_and_exits_zero(runner, chat_fake):
    chat_fake.chat_reply("")
    result = invoke(runner, "chat", "hello")
    assert result.exit_code == 0 and result.stdout == ""
    assert "no answer: the model returned nothing; nothing was kept" in result.stderr


def test_cli_a_parroted_non_answer_says_on_stderr_it_was_not_kept_as_an_answer(runner, chat_fake):
    # the model repeats an imported `[error] server down` as if it were its answer
    chat_fake.chat_reply(envelope("chat", content="[error] server down"))
    result = invoke(runner, "chat", "Le serveur va bien ?")
    assert result.exit_code == 0 and result.stdout == "[error] server down\n"
    assert "is one of Forge's fixed non-answers" in result.stderr
    assert "not kept as an answer" in result.stderr
    assert [m.answered for m in history_messages(load())] == [False, False]


def test_cli_server_down_is_one_line_and_exit_1(runner):
    result = invoke(runner, "chat", "hello")
    assert result.exit_code == 1
    assert "http://127.0.0.1:9" in result.stderr and "tools/llama-server chat" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_real_forge_script_one_turn(script_runner, chat_fake):
    chat_fake.chat_reply(envelope("chat", content="Salut !"))
    result = script_runner.run(["forge", "chat", "--json", "Bonjour"])
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["reply"] == "Salut !"


@pytest.mark.parametrize("args, expected_rc", [
    (["chat", "--json", "Bonjour"], 0),   # a message given: stdin is never needed
    (["chat"], 2),                        # no message, nothing to read: a usage error
])
def test_forge_chat_with_stdin_closed_as_under_some_schedulers(chat_fake, args, expected_rc):
    import os
    import subprocess
    import sys

    chat_fake.chat_reply(envelope("chat", content="Salut !"))
    forge = Path(sys.executable).with_name("forge")
    done = subprocess.run([str(forge), *args], capture_output=False, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, timeout=60, preexec_fn=lambda: os.close(0))
    stderr = done.stderr.decode()
    assert done.returncode == expected_rc, stderr
    assert "AttributeError" not in stderr and "Traceback" not in stderr
    if expected_rc == 0:
        assert json.loads(done.stdout)["reply"] == "Salut !"
    else:
        assert "message" in stderr and done.stdout == b""


def test_turns_while_the_embedding_server_is_down_grow_past_the_cap_then_recover(chat_fake, caplog):
    """The history cap through real turns: nothing that was never archived is dropped, and the
    next turn after the outage archives it all."""
    from fakeserver import closed_url

    limits = dict(MEMORY_MAX_HISTORY="6", COMPACTION_THRESHOLD="4", COMPACTION_KEEP_RECENT="2")
    down = load(**limits, EMBEDDING_URL=closed_url() + "/embedding")
    chat_fake.chat_replies([f"answer {i}" for i in range(6)])
    with caplog.at_level("WARNING", logger="forge"):
        for i in range(5):
            assert run_turn(down, f"question {i}").answered
    assert [m.content for m in history_messages(down)][::2] == [f"question {i}" for i in range(5)]
    assert "over MEMORY_MAX_HISTORY=6" in caplog.text and "compaction check failed" in caplog.text

    up = load(**limits)   # the embedded model: compaction can run again
    result = run_turn(up, "question 5")
    assert result.compaction is not None and result.compaction.did_something
    from forge.store import history

    doc = history.read(up.memory_file)
    assert not doc.compaction_pending and len(doc.messages) <= 6
    with rag.open_store(up, check_identity=False) as store:
        archived = [e.content for e in rag.list_entries(store, kind="archive")]
    assert sorted(archived) == sorted(f"user: question {i}\nassistant: answer {i}" for i in range(5))


def test_a_message_that_is_not_utf8_is_a_usage_error_not_a_traceback():
    import subprocess
    import sys

    forge = str(Path(sys.executable).with_name("forge"))
    env = {**__import__("os").environ, "LC_ALL": "C.UTF-8"}
    for args, data in ((["chat", "-"], b"caf\xe9 ?"), (["chat", b"caf\xe9 ?"], b"")):
        done = subprocess.run([forge, *args], input=data, capture_output=True, timeout=60, env=env)
        stderr = done.stderr.decode()
        assert done.returncode == 2, stderr
        assert "not UTF-8" in stderr and "Error" in stderr and "UnicodeEncodeError" not in stderr
    assert not load().trace_file.exists()   # no turn ran


def test_a_turn_that_takes_the_history_over_the_cap_is_archived_before_the_cap_drops(chat_fake):
    """The cap never drops what compaction was about to archive. A folded tool result makes a
    turn three messages, so the append alone crosses MEMORY_MAX_HISTORY=4 (= the threshold)."""
    Path("notes.txt").write_text("the NAS runs Debian", encoding="utf-8")
    chat_fake.chat_reply(envelope("files", payload={"op": "read", "path": "notes.txt"}, done=False))
    chat_fake.chat_reply(envelope("chat", content="Your NAS runs Debian."))
    chat_fake.chat_reply("The router runs OpenWrt.")
    settings = load(MAX_STEPS="2", MEMORY_MAX_HISTORY="4", COMPACTION_THRESHOLD="4",
                    COMPACTION_KEEP_RECENT="2")
    run_turn(settings, "what does my NAS run")
    result = run_turn(settings, "and my router?")
    assert result.compaction is not None and result.compaction.did_something
    with rag.open_store(settings, check_identity=False) as store:
        [entry] = rag.list_entries(store, kind="archive")
    assert entry.refs["messages"] == [1, 2, 3] and entry.content.startswith("user: what does my NAS run")
    assert [m.content for m in history_messages(settings)][1:] == ["and my router?", "The router runs OpenWrt."]


def test_any_compaction_failure_after_persisting_is_a_warning(chat_fake, caplog, monkeypatch):
    """The turn is already persisted and traced when the check runs: whatever breaks in it
    (here an unexpected error, not a ForgeError) must not turn a kept answer into a crash."""
    from forge.memory import compaction

    def broken(settings):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(compaction, "maybe_compact", broken)
    chat_fake.chat_reply("fine")
    with caplog.at_level("WARNING", logger="forge"):
        result = run_turn(load(), "hello")
    assert result.answered and result.reply == "fine"
    assert "compaction check failed" in caplog.text and "No space left" in caplog.text
