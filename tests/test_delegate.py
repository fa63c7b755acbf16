"""Delegation: the turn names the target or Forge asks which one; the block is collected for real
on the local target; the second model at DELEGATE_URL answers, and every model that answered is
in the trace's llm.models.

The router's decision is scripted on the fake server for the asking-back rules; the success path
runs on two real llama-server processes (marker `llama`), the router's and the delegate's replies
constrained by each server's --grammar so the test cannot be flaky. The fake stands in for the
delegate only for its failure mode (a server that cannot be reached).
"""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from chat_helpers import envelope, history_messages, last_trace, load
from forge.memory import non_answer
from forge.store import traces
from forge.chat.run import run_turn
from forge.chat.outcome import NOT_PERSISTED
from forge.chat.tools import ToolContext, delegate, dispatch, inventory, sysadmin

LOG = ("Nov 30 03:12:01 nas smartd[611]: Device: /dev/sda, 8 Currently unreadable (pending) sectors\n"
       "Nov 30 03:12:01 nas smartd[611]: Device: /dev/sda, SMART Failure: FAILURE PREDICTION THRESHOLD EXCEEDED\n")


@pytest.fixture
def inv(tmp_path: Path) -> Path:
    log = tmp_path / "smart.log"
    log.write_text(LOG, encoding="utf-8")
    path = tmp_path / "targets.yaml"
    path.write_text(yaml.safe_dump({"targets": {
        "nas": {"local": True, "commands": {"smart": ["cat", str(log)]}},
        "backup": {"local": True, "commands": {"smart": ["cat", str(log)]}},
    }}), encoding="utf-8")
    return path


def test_the_target_comes_from_the_turn_never_from_the_router_alone(inv):
    targets = inventory.load(inv)
    assert delegate.choose_target("is the disk of the NAS failing?", None, targets) == "nas"
    assert delegate.choose_target("is the disk of the nas failing?", "backup", targets) == "nas"
    assert delegate.choose_target("is my disk failing?", "nas", targets) is None      # guessed
    assert delegate.choose_target("nas or backup: which disk fails?", None, targets) is None
    assert delegate.choose_target("nas or backup: which disk fails?", "backup", targets) == "backup"
    assert delegate.choose_target("is the nasal spray ok?", None, targets) is None


@pytest.mark.parametrize("turn, expected", [
    ("Is the disk failing?", non_answer.DELEGATION_REASK),
    ("Le disque est-il en train de lâcher ?", non_answer.DELEGATION_REASK_FR),
])
def test_a_question_that_names_no_target_is_asked_back(inv, chat_fake, turn, expected):
    chat_fake.chat_reply(envelope("delegate", payload={"target": "nas"}))   # the router guesses
    settings = load(ENABLED_TOOLS="delegate", SYSADMIN_INVENTORY=str(inv),
                    DELEGATE_URL="http://127.0.0.1:9")     # never reached
    result = run_turn(settings, turn)
    assert result.reply == expected and result.not_answered == "delegation_reask"
    record = last_trace(settings)
    assert traces.state(record) == "∅" and record["llm"]["calls"] == 1
    assert record["steps"][1]["detail"] == {"target": None, "commands": []}
    assert [m.answered for m in history_messages(settings)] == [False, False]


def test_a_long_message_ending_with_a_question_mark_is_not_asked_back(inv):
    """The same 200-character bound as the memory rule: past it, not a question."""
    turn = ("I changed the disks last week and everything was fine until this morning. " * 3).strip() + " Any idea?"
    ctx = ToolContext(settings=load(ENABLED_TOOLS="delegate", SYSADMIN_INVENTORY=str(inv)),
                      turn_text=turn)
    result = dispatch("delegate", {}, ctx)
    assert result.text.startswith(non_answer.TARGET_NOT_FOUND) and "known: backup, nas" in result.text
    assert result.not_answered == "target_not_found"


def test_an_unreachable_delegate_is_a_marked_failure(inv, chat_fake):
    chat_fake.chat_reply(envelope("delegate", payload={}))
    settings = load(ENABLED_TOOLS="delegate", SYSADMIN_INVENTORY=str(inv),
                    DELEGATE_URL="http://127.0.0.1:9")
    result = run_turn(settings, "is the disk of the nas failing?")
    assert result.ok and result.reply.startswith(non_answer.TOOL_ERROR)
    assert "127.0.0.1:9" in result.reply and result.not_answered == "tool_error"
    assert traces.state(last_trace(settings)) == "∅"


def test_delegate_is_off_unless_named(inv):
    ctx = ToolContext(settings=load(SYSADMIN_INVENTORY=str(inv)), turn_text="nas disk?")
    assert "no tool named 'delegate' is enabled" in dispatch("delegate", {}, ctx).text


# Two real llama-servers, each constrained by its own --grammar (the default for every request
# it gets): the router can only choose delegation to the nas, the delegate can only give one
# answer. The decisions are fixed; the servers, the wire, the streaming and the trace are real.
ROUTER_GRAMMAR = 'root ::= "{\\"action\\": \\"delegate\\", \\"payload\\": {\\"target\\": \\"nas\\"}}"'
DELEGATE_ANSWER = "The nas disk is failing: SMART reports 8 unreadable sectors."
DELEGATE_GRAMMAR = f'root ::= "{DELEGATE_ANSWER}"'


@pytest.fixture(scope="module")
def router_and_delegate(tmp_path_factory):
    from servers import running_llama_server

    with running_llama_server("chat", tmp_path_factory.mktemp("router"),
                              extra_args=["--grammar", ROUTER_GRAMMAR, "--alias", "router-model"]) as router, \
            running_llama_server("chat", tmp_path_factory.mktemp("delegate"),
                                 extra_args=["--grammar", DELEGATE_GRAMMAR,
                                             "--alias", "delegate-model"]) as second:
        yield router, second


@pytest.mark.llama
def test_a_delegated_turn_is_answered_by_the_second_model(inv, router_and_delegate, monkeypatch):
    """Router on one real llama-server, the delegate another at DELEGATE_URL: the block is
    collected on the target the turn names, the second model answers from it, both calls are in
    the trace, and the answer is kept."""
    router, second = router_and_delegate
    settings = load(ENABLED_TOOLS="delegate", SYSADMIN_INVENTORY=str(inv),
                    LLAMA_CPP_URL=router.url, DELEGATE_URL=second.url)
    result = run_turn(settings, "Is the disk of the nas failing?")
    record = last_trace(settings)
    assert record["llm"]["calls"] == 2
    assert record["llm"]["models"] == ["router-model", "delegate-model"]
    assert record["llm"]["prompt_n"] > 60          # the delegate read the block, not just the turn
    assert record["steps"][1]["detail"] == {"target": "nas", "commands": ["smart"]}
    assert "SMART Failure" not in settings.trace_file.read_text()
    # only the delegate server can say this: the answer came from the second model, and is kept
    assert result.answered and result.reply.strip() == DELEGATE_ANSWER
    assert [m.content for m in history_messages(settings)][-1].strip() == DELEGATE_ANSWER
