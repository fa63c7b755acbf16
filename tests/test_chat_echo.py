"""A reply that only parrots the user's turn is a placeholder, never an answer.

Stored, such an exchange is a near-copy of its own question: the store's best match the next
time the question is asked, with nothing in it (the seed measured an archived refusal at 0.4519
ahead of the real entry at 0.7891). The tiny real model does exactly this most of the time.
"""
from __future__ import annotations

import pytest

from chat_helpers import envelope, history_messages, last_trace, load
from forge.chat.run import run_turn


@pytest.mark.parametrize("raw", [
    "Combien de RAM a le NiPoGi ?",                             # plain text, verbatim
    "  combien de RAM a le NiPoGi?  ",                           # case, spaces and punctuation
    envelope("chat", content="Combien de RAM a le NiPoGi ?"),   # inside the envelope
])
def test_a_parroted_turn_is_not_kept(chat_fake, raw):
    chat_fake.chat_reply(raw)
    settings = load()
    result = run_turn(settings, "Combien de RAM a le NiPoGi ?")
    assert result.ok and result.not_answered == "placeholder_leak" and result.reply == ""
    assert history_messages(settings) == []
    assert last_trace(settings)["not_answered"] == "placeholder_leak"


def test_an_answer_that_quotes_the_question_is_kept(chat_fake):
    chat_fake.chat_reply("Combien de RAM a le NiPoGi ? 32 Go.")
    settings = load()
    result = run_turn(settings, "Combien de RAM a le NiPoGi ?")
    assert result.not_answered is None
    assert [m.content for m in history_messages(settings)][-1] == "Combien de RAM a le NiPoGi ? 32 Go."
