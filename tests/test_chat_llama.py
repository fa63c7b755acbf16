"""A chat turn against the real llama-server with the small GGUF model (marker `llama`).

The small model often answers nonsense; the point is the wire and the rules: whatever it says is
a persisted answer or a classified placeholder, never a crash, and the second turn reuses the
server's prompt cache (one slot, `id_slot` pinned) with the trace recording it.
"""
from __future__ import annotations

import pytest

from chat_helpers import history_messages, load
from forge.store import history, rag, traces
from forge.chat.run import run_turn
from forge.chat.outcome import NOT_PERSISTED

pytestmark = pytest.mark.llama

MAX_TOKENS = 24  # the small model rarely stops by itself; keep each turn short


def settings_for(server, **env):
    return load(LLAMA_CPP_URL=server.url, LLAMA_CPP_ID_SLOT="0", **env)


def check_turn(settings, result) -> None:
    """The turn ended as an answer (persisted) or a classified non-answer, never a crash."""
    assert result.ok
    if result.not_answered in NOT_PERSISTED:
        assert result.reply == "" and result.persisted == []
    elif result.compaction is not None:
        # Compacted right after persisting: an answered exchange is archived (one entry per
        # exchange), an unanswered one is left out of the store.
        with rag.open_store(settings, check_identity=False) as store:
            archived = rag.find_by_message_ids(store, result.persisted)
        assert bool(archived) == result.answered
    else:
        stored = {m.id: m for m in history_messages(settings)}
        assert result.persisted and all(i in stored for i in result.persisted)
        assert stored[result.persisted[-1]].content == result.reply
        assert all(stored[i].answered == result.answered for i in result.persisted)


def test_a_turn_end_to_end_then_cache_reuse(llama_chat_server):
    # One earlier exchange in the history and a threshold of 2: any persisted turn compacts.
    settings = settings_for(llama_chat_server, COMPACTION_THRESHOLD="2", COMPACTION_KEEP_RECENT="0",
                            ENABLED_TOOLS="files,git")
    history.append(settings.memory_file, [history.NewMessage("user", "Bonjour"),
                                          history.NewMessage("assistant", "Bonjour !")],
                   max_history=settings.max_history)
    first = run_turn(settings, "Say hello in one short sentence.", max_tokens=MAX_TOKENS)
    check_turn(settings, first)
    record = traces.tail(settings.trace_file, 1)[-1]
    assert record["run_id"] == first.run_id and record["ok"] is True
    assert record["llm"]["calls"] >= 1 and record["llm"]["prompt_n"] > 0
    assert record["llm"]["models"] and record["llm"]["models"][0].endswith(".gguf")
    assert record["llm"]["predicted_n"] > 0 and record["llm"]["prompt_ms"] > 0
    if first.persisted:
        assert first.compaction is not None and first.compaction.trigger == "count"
        assert any(m.is_compaction for m in history_messages(settings))

    second = run_turn(settings, "And now say goodbye.", max_tokens=MAX_TOKENS)
    check_turn(settings, second)
    record = traces.tail(settings.trace_file, 1)[-1]
    assert record["run_id"] == second.run_id
    # The system prompt and tool descriptions are a stable prefix in the one slot.
    assert record["llm"]["cache_n"] > 0


@pytest.mark.parametrize("text", ["Quelle heure est-il ?", "List the files here.",
                                  "Remember that my NAS runs Debian."])
def test_whatever_the_model_says_is_an_answer_or_a_classified_placeholder(llama_chat_server, text):
    settings = settings_for(llama_chat_server)
    result = run_turn(settings, text, max_tokens=MAX_TOKENS)
    check_turn(settings, result)
    assert traces.tail(settings.trace_file, 1)[-1]["not_answered"] == result.not_answered


def test_system_and_options_keep_the_cached_prefix_on_a_real_server(llama_chat_server):
    """`forge chat -s TEXT -o KEY VALUE`: the real server takes the sampling fields,
    and with the same -s on every turn (a REPL) each prompt extends the last, so the router's
    system prompt and the history are served from the slot's cache."""
    settings = settings_for(llama_chat_server)
    system = "Answer in French, in one short sentence."
    options = {"temperature": 0, "top_k": 1, "seed": 7}
    for text in ("Say hello.", "Say goodbye."):
        result = run_turn(settings, text, max_tokens=MAX_TOKENS, system=system, options=options)
        check_turn(settings, result)
    record = traces.tail(settings.trace_file, 1)[-1]
    assert record["ok"] is True and record["llm"]["cache_n"] > 300  # the system prompt: ~320


def test_a_message_larger_than_the_servers_context_is_named_in_tokens(llama_chat_server):
    from forge.core.errors import ServerError
    from forge.core.llm import ChatClient

    with ChatClient(settings_for(llama_chat_server)) as client:
        with pytest.raises(ServerError) as e:
            client.complete([{"role": "user", "content": "mot " * 20000}], max_tokens=4)
    text = str(e.value)
    assert "tokens" in text and "context" in text and "forge compact" in text
    assert "start one" not in text
