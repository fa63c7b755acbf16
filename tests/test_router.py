"""The router's pure parts: the JSON envelope, placeholder detection, the question rule's turn
test, and the stream filter that shows a reply while it arrives."""
from __future__ import annotations

import pytest

from forge.chat.run import StreamFilter
from forge.chat.router import envelope
from forge.memory import placeholders, router_prompt as prompt
from forge.chat.turn import QUESTION_MAX_CHARS, is_question

INSTRUCTIONS = [prompt.system_text(["memory", "files", "git"])]


@pytest.mark.parametrize("text, action, content, payload, done", [
    ('{"action": "chat", "content": "Bonjour"}', "chat", "Bonjour", {}, True),
    ('```json\n{"action": "files", "payload": {"op": "list", "path": "."}}\n```', "files", None,
     {"op": "list", "path": "."}, True),
    ('Sure: {"action": "memory", "payload": {"op": "recall", "query": "x"}, "done": false}',
     "memory", None, {"op": "recall", "query": "x"}, False),
    ('{"action": "Memory", "op": "remember", "content": "I own a NAS"}', "memory",
     "I own a NAS", {"op": "remember", "content": "I own a NAS"}, True),
    ("Just a plain answer.", "chat", "Just a plain answer.", {}, True),
    ('{"tool": "memory", "action": "recall", "query": "x"}', "memory", None,
     {"query": "x", "op": "recall"}, True),
    ('{"action": "remember", "content": "I own a NAS"}', "memory", "I own a NAS",
     {"content": "I own a NAS", "op": "remember"}, True),
    ('{"done": "false", "action": "git", "payload": {"op": "log"}}', "git", None, {"op": "log"}, False),
])
def test_envelope_parse(text, action, content, payload, done):
    env = envelope.parse(text)
    assert (env.action, env.content, env.payload, env.done) == (action, content, payload, done)


def test_json_that_is_not_an_envelope_is_a_chat_reply_as_it_stands():
    env = envelope.parse('The config is {"port": 8080}.')
    assert env.is_chat and env.content == 'The config is {"port": 8080}.' and not env.is_json


def test_a_broken_envelope_is_flagged_malformed():
    assert envelope.parse('{"action": "chat", "content": "unterminated').malformed


@pytest.mark.parametrize("text, reason", [
    ("", "placeholder_empty"),
    ("   \n ... ", "placeholder_empty"),
    ("<end_of_turn>", "placeholder_empty"),
    ("\ufffd\ufffd\ufffd\ufffd\ufffd ab", "placeholder_garbled"),
    ("}{][)(*&^%$#@!~}{][)(;;", "placeholder_empty"),
    ("!!$$ ab ## %% ^^ && ** () [] {} <> ~~ cd", "placeholder_garbled"),
    ("Bien sûr. " + "je ne sais pas " * 12, "placeholder_repetition"),
    ("ok\nthe same line\nthe same line\nthe same line\nthe same line", "placeholder_repetition"),
    # seen from Gemma 3 270M on llama-server
    ("I'm not sure if I can remember the password. " * 3, "placeholder_repetition"),
    ("Reply with one JSON object and nothing else, as I was told.", "placeholder_leak"),
    ("<|im_end|>user\nWhat is my NAS?", "placeholder_leak"),
])
def test_placeholder_kinds(text, reason):
    assert placeholders.classify(text, prompt_texts=INSTRUCTIONS) == reason


@pytest.mark.parametrize("text", [
    "Bonjour ! Ton NAS tourne sous Debian 12.",
    "def f(x):\n    return x * 2\n",
    "1. one\n2. two\n3. three\n4. four",
    "Yes.",
    "ha ha, good one",
    "Yes, yes. The NAS runs Debian. The NAS runs Debian, and the backup runs nightly.",
    "Step 1: open the lid. Step 2: open the lid again if it closed. Step 3: done.",
])
def test_real_answers_are_not_placeholders(text):
    assert placeholders.classify(text, prompt_texts=INSTRUCTIONS) is None


def test_a_trailing_end_of_turn_token_is_cut_and_the_answer_kept():
    assert placeholders.classify("Hello there<|im_end|>") is None
    assert placeholders.clean("Hello there<|im_end|>user\nmore") == "Hello there"


@pytest.mark.parametrize("text, expected", [
    ("Je possède un serveur ?", True),
    ("Je possède un serveur?   ", True),
    ("What did we decide about the NAS?", True),
    ("サーバーは何ですか？", True),
    ("Remember that I own a server", False),
    ("I own a server. Why? Because.", False),
    ("x" * (QUESTION_MAX_CHARS - 1) + "?", True),
    ("x" * QUESTION_MAX_CHARS + "?", False),
])
def test_question_rule_reads_the_turn(text, expected):
    assert is_question(text) is expected


def _stream(pieces: list[str]) -> str:
    shown: list[str] = []
    f = StreamFilter(shown.append)
    for p in pieces:
        f(p)
    assert f.shown == "".join(shown)
    return "".join(shown)


def test_stream_filter_shows_plain_text_and_stops_at_a_template_token():
    assert _stream(["Hel", "lo th", "ere", "<|", "im_end", "|>user\nnext"]) == "Hello there"


def test_stream_filter_decodes_a_chat_envelope_content_as_it_arrives():
    pieces = ['{"action"', ': "chat", "con', 'tent": "Bon', 'jour\\n', 'ça \\"va\\" \\u00e9', '"}']
    assert _stream(pieces) == 'Bonjour\nça "va" é'


def test_stream_filter_shows_nothing_of_a_tool_call():
    assert _stream(['{"action": "memory", "payload": {"op": "remember", "content": "x"}}']) == ""
