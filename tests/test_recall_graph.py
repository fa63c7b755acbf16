"""The recall graph with a real store and embedder, a fake chat server for the synthesis:
prompt order, the two refusal paths with and without a hot block, the outage path."""
from __future__ import annotations

from chat_helpers import envelope, history_messages, last_trace, load
from forge.memory import non_answer
from forge.store import rag
from forge.chat.run import run_turn
from forge.chat.graphs import recall as graph
from forge.recall.hot_memory import hot_block
from forge.core.llm import ChatClient
from forge.store.traces import LLMUsage

RECALL = envelope("memory", payload={"op": "recall", "query": "Quel matériel ai-je ?"})


def remember(*items, **env):
    with rag.open_store(load(**env)) as store:
        return [rag.remember(store, k, c).id for k, c in items]


def archive(text: str, ids: list[int]):
    with rag.open_store(load()) as store:
        rag.remember_many(store, [rag.NewEntry("archive", text, source="compaction",
                                               refs={"messages": ids})])


def synthesis_requests(server):
    return [r.json for r in server.requests_to("/v1/chat/completions")
            if r.json["messages"][0]["content"].startswith(graph.PREAMBLE)]


def test_synthesis_prompt_is_preamble_hot_block_question_then_entries(chat_fake):
    remember(("fact", "Possède un NiPoGi AM06PRO"), ("fact", "Possède un Steam Deck"))
    chat_fake.chat_reply("Un NiPoGi AM06PRO et un Steam Deck.")
    settings = load(FORGE_NOW="2031-07-14T12:00")
    usage = LLMUsage()
    with ChatClient(settings) as client:
        result = graph.run(settings, "Quel matériel ai-je ?", client=client, usage=usage)
    assert result.text == "Un NiPoGi AM06PRO et un Steam Deck." and result.not_answered is None
    [body] = synthesis_requests(chat_fake)
    system, user = body["messages"]
    assert system["content"] == graph.PREAMBLE + "\n\n" + hot_block(settings).text
    # today's date comes with the question, after the cached prefix; each line has its date
    assert "2031-07-14" not in system["content"]
    assert user["content"].startswith("Today is 2031-07-14.\nQuestion: Quel matériel ai-je ?\n\n"
                                      "Entries retrieved")
    assert "- [fact, " in user["content"] and "] Possède un NiPoGi AM06PRO (#1)" in user["content"]
    assert usage.calls == 1


def test_hot_block_is_byte_identical_across_recalls(chat_fake):
    remember(("fact", "Possède un NiPoGi AM06PRO"))
    for question in ("Quel matériel ai-je ?", "Combien de RAM ?"):
        chat_fake.chat_reply(RECALL)
        chat_fake.chat_reply("Un NiPoGi.")
        run_turn(load(), question)
    first, second = synthesis_requests(chat_fake)
    assert first["messages"][0] == second["messages"][0]


def test_nothing_found_without_hot_block_refuses_with_no_llm_call(chat_fake):
    chat_fake.chat_reply(RECALL)
    result = run_turn(load(), "Quel matériel ai-je ?")
    assert result.reply == non_answer.NOTHING_FOUND
    assert result.ok and result.not_answered == "recall_nothing_found"
    assert synthesis_requests(chat_fake) == []
    user, reply = history_messages(load())
    assert (user.answered, reply.answered) == (False, False)
    trace = last_trace(load())
    assert trace["ok"] is True and trace["not_answered"] == "recall_nothing_found"
    assert trace["llm"]["calls"] == 1  # the router only


def test_cutoff_dropping_every_row_refuses_with_no_llm_call(chat_fake):
    archive("user: bonjour\nassistant: salut", [1, 2])
    chat_fake.chat_reply(RECALL)
    result = run_turn(load(RECALL_MAX_DISTANCE="0.01"), "Quel matériel ai-je ?")
    assert result.reply == non_answer.CUTOFF_REFUSAL and result.not_answered == "recall_cutoff"
    assert synthesis_requests(chat_fake) == []
    assert [m.answered for m in history_messages(load())] == [False, False]


def test_both_refusals_continue_to_synthesis_when_a_hot_block_exists(chat_fake):
    remember(("fact", "Possède un NiPoGi AM06PRO"))
    settings = load(RECALL_MAX_DISTANCE="0.01")
    chat_fake.chat_reply(RECALL)
    chat_fake.chat_reply("Un NiPoGi AM06PRO.")
    result = run_turn(settings, "zzz qwxv ?")
    assert result.answered and result.reply == "Un NiPoGi AM06PRO."
    [body] = synthesis_requests(chat_fake)
    assert "No entry was retrieved" in body["messages"][1]["content"]
    assert "Possède un NiPoGi AM06PRO" in body["messages"][0]["content"]
    assert [m.answered for m in history_messages(settings)] == [True, True]


def test_with_the_hot_tier_off_the_refusal_stands(chat_fake):
    remember(("fact", "Possède un NiPoGi AM06PRO"))
    chat_fake.chat_reply(RECALL)
    result = run_turn(load(RECALL_MAX_DISTANCE="0.01", RECALL_HOT_MAX_TOKENS="0"), "zzz qwxv ?")
    assert result.reply == non_answer.CUTOFF_REFUSAL and result.not_answered == "recall_cutoff"
    assert synthesis_requests(chat_fake) == []


def test_embedding_outage_never_falls_back_to_the_hot_block(chat_fake):
    from fakeserver import FakeServer

    with FakeServer() as embedding_server:
        url = embedding_server.url + "/embedding"
        remember(("fact", "Possède un NiPoGi AM06PRO"), EMBEDDING_URL=url)
        settings = load(EMBEDDING_URL=url)
        assert hot_block(settings).entry_ids == [1]
        embedding_server.refuse()  # the embedding server goes down
        chat_fake.chat_reply(RECALL)
        result = run_turn(settings, "Quel matériel ai-je ?")
    assert result.reply.startswith(non_answer.ERROR) and url in result.reply
    assert result.ok and result.not_answered == "tool_error"
    assert synthesis_requests(chat_fake) == []
    trace = last_trace(settings)
    assert trace["not_answered"] == "tool_error" and trace["error"].startswith(non_answer.ERROR)
    assert [m.answered for m in history_messages(settings)] == [False, False]
