"""`forge context` and token counting: the estimate offline, the real `/tokenize` when reachable."""
from __future__ import annotations

import json

import pytest
from conftest import invoke

from forge.store import history, rag
from forge.core import tokens
from forge.memory.compaction import context, prompt_weight
from forge.store.history import NewMessage
from forge.memory import router_prompt


def test_context_weighs_the_router_prompt_against_the_thresholds(settings, runner):
    history.append(settings.memory_file, [NewMessage("user", "Mon NAS est un Synology DS220+."),
                                          NewMessage("assistant", "Noté.")], max_history=200)
    result = invoke(runner, "context", "--json")
    assert result.exit_code == 0, result.stderr
    c = json.loads(result.stdout)
    p = c["router_prompt"]
    assert p["system_tools"] > 0 and p["history"] > 0
    assert p["total"] == p["system_tools"] + p["history"]
    expected = tokens.estimate_tokens(router_prompt.as_text(router_prompt.render(
        settings.enabled_tools, history.read(settings.memory_file).messages)))
    assert p["total"] == expected and c["token_source"] == "estimate"   # no chat server in tests
    assert c["thresholds"] == {"messages": 40, "keep_recent": 10, "tokens": 6000, "target": 3000,
                               "max_history": 200}
    assert c["unpinned"] == 2 and c["trigger"] is None
    assert c["hot_block"]["tokens"] == 0 and not settings.rag_db_file.exists()


def test_context_table_and_the_hot_block(settings, runner):
    with rag.open_store(settings) as store:
        rag.remember(store, "fact", "Le NiPoGi AM06PRO a 32 Go de RAM")
        rag.remember(store, "decision", "On garde Pi-hole")
        rag.remember_many(store, [rag.NewEntry("archive", "user: q\nassistant: a", source="compaction",
                                               refs={"messages": [1, 2]})])
    result = invoke(runner, "context")
    assert result.exit_code == 0, result.stderr
    lines = {line.split("  ")[0]: line for line in result.stdout.splitlines()}
    assert "router prompt total" in lines and "compacts at 6000, down to 3000" in lines["router prompt total"]
    assert "2 entries, budget 1000" in lines["hot block (recall)"]   # the archive entry is not hot
    assert "offline estimate" in result.stderr
    c = context(settings)
    assert c["hot_block"]["entries"] == 2 and c["hot_block"]["tokens"] > 10


def test_context_says_when_compaction_would_fire(monkeypatch, runner):
    monkeypatch.setenv("COMPACTION_THRESHOLD", "4")
    monkeypatch.setenv("COMPACTION_KEEP_RECENT", "2")
    from forge.core.settings import load_settings

    s = load_settings()
    history.append(s.memory_file, [NewMessage("user", f"m{i}") for i in range(4)], max_history=200)
    result = invoke(runner, "context")
    assert "compaction would fire now (count)" in result.stderr


def test_the_estimate_follows_the_shape_of_text():
    assert tokens.estimate_tokens("") == 0
    assert tokens.estimate_tokens("le chat") == 2
    assert tokens.estimate_tokens("2026") == 4                      # digits one by one
    long_word = tokens.estimate_tokens("anticonstitutionnellement")
    assert 3 <= long_word <= 6
    assert tokens.estimate_tokens("a -> b") == 3


def test_an_unreachable_chat_server_falls_back_to_the_estimate(settings):
    counter = tokens.token_counter(settings)          # LLAMA_CPP_URL is a closed port in tests
    assert counter.source == "estimate"
    assert tokens.count_tokens(settings, "bonjour tout le monde") == tokens.estimate_tokens("bonjour tout le monde")


@pytest.mark.llama
def test_real_tokenize_from_a_real_llama_server(llama_chat_server, monkeypatch, runner):
    monkeypatch.setenv("LLAMA_CPP_URL", llama_chat_server.url)
    from forge.core.llm import ChatClient
    from forge.core.settings import load_settings

    s = load_settings()
    text = "Le NiPoGi AM06PRO a un Ryzen 5 5500U et 32 Go de RAM ; restic sauvegarde vers B2."
    with ChatClient(s) as client:
        real = len(client.tokenize(text))
    counter = tokens.token_counter(s)
    assert counter.source == "server"
    assert counter(text) == real == tokens.count_tokens(s, text)
    # The estimate stays within the error the README states for it.
    assert abs(tokens.estimate_tokens(text) - real) <= 0.25 * real

    history.append(s.memory_file, [NewMessage("user", text)], max_history=200)
    result = invoke(runner, "context", "--json")
    c = json.loads(result.stdout)
    assert c["token_source"] == "server"
    assert c["router_prompt"] == prompt_weight(s, history.read(s.memory_file).messages, counter)


def test_a_chat_server_that_does_not_answer_costs_seconds_not_llama_cpp_timeout(chat_fake, monkeypatch):
    """Weighing a prompt (forge context, compact --if-needed in cron) probes /tokenize with a
    short timeout of its own: a hung server means the estimate, not a wait of LLAMA_CPP_TIMEOUT."""
    import time

    from chat_helpers import load

    monkeypatch.setattr(tokens, "PROBE_TIMEOUT_S", 0.3)
    chat_fake.delay("/tokenize", 5)
    started = time.monotonic()
    counter = tokens.token_counter(load(LLAMA_CPP_TIMEOUT="120"))
    assert counter.source == "estimate" and time.monotonic() - started < 3
