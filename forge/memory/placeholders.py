"""Router placeholders: model output that dispatch accepts but that is not an answer.

Four kinds, each a documented `not_answered` reason in `forge.store.traces`:
- placeholder_empty: nothing, or only whitespace/punctuation/template tokens;
- placeholder_garbled: mostly not text (replacement characters, control bytes, symbol soup),
  or a JSON envelope that does not parse;
- placeholder_repetition: a loop, the same span repeated to the end of the output;
- placeholder_leak: the model echoes its own prompt instructions or the chat template, or
  parrots the user's turn back word for word (stored, that exchange would be a near-copy of its
  own question: the best match the next time it is asked, with nothing in it).

Saving one would feed it back as context on the next turn, where a model that got confused once
is more likely to get confused again; so they are shown as a notice and never persisted.
"""
from __future__ import annotations

import re
from typing import Iterable

# Chat-template tokens of common families. A reply that runs past its end-of-turn marker is
# the model writing the next turn itself (a server with the wrong template does not stop it).
TEMPLATE_TOKEN = re.compile(
    r"<\|im_end\|>|<\|im_start\|>|<end_of_turn>|<start_of_turn>|<\|eot_id\|>|"
    r"<\|start_header_id\|>|<\|end_header_id\|>|<\|endoftext\|>|</s>|<\|end\|>|<\|user\|>|"
    r"<\|assistant\|>|<\|system\|>"
)
_LETTER = re.compile(r"[^\W\d_]", re.UNICODE)
_WORD = re.compile(r"\w+", re.UNICODE)

REPETITION_MIN_REPEATS = 4        # a short span must come back this many times in a row...
REPETITION_LONG_SPAN = 15         # ...a span this long (a sentence) only three times...
REPETITION_MIN_CHARS = 60         # ...covering at least this many characters...
REPETITION_MIN_SHARE = 0.4        # ...and this share of the whole reply
LEAK_MIN_WORDS = 7                # a prompt sentence this long found verbatim is a leak


def clean(text: str) -> str:
    """Cut the reply at the first chat-template token: what follows is a turn the model
    invented; a trailing end-of-turn token alone is simply removed."""
    m = TEMPLATE_TOKEN.search(text)
    return (text[: m.start()] if m else text).strip()


def _is_empty(text: str) -> bool:
    return not any(ch.isalnum() for ch in text)


def _is_garbled(text: str) -> bool:
    if "\ufffd" in text and text.count("\ufffd") * 10 >= len(text):
        return True
    controls = sum(1 for ch in text if ord(ch) < 32 and ch not in "\n\r\t")
    if controls * 20 >= len(text):
        return True
    visible = [ch for ch in text if not ch.isspace()]
    if len(visible) >= 12:
        letters = sum(1 for ch in visible if _LETTER.match(ch) or ch.isdigit())
        if letters / len(visible) < 0.35:
            return True
    return False


def _repeated_tail(text: str) -> bool:
    """True when the end of the text is one span repeated (a loop the sampler fell into)."""
    t = " ".join(text.split())[-3000:]
    n = len(t)
    for period in range(1, min(400, n // 3 + 2)):
        run = 0
        i = n - 1
        while i >= period and t[i] == t[i - period]:
            run += 1
            i -= 1
        covered = run + period + 1  # the last copy may lack its trailing separator
        repeats = 3 if period >= REPETITION_LONG_SPAN else REPETITION_MIN_REPEATS
        if (covered >= period * repeats and covered >= REPETITION_MIN_CHARS
                and covered >= REPETITION_MIN_SHARE * n):
            return True
    return False


def _repeated_lines(text: str) -> bool:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if len(lines) < REPETITION_MIN_REPEATS:
        return False
    top = max(lines.count(ln) for ln in set(lines))
    return top >= REPETITION_MIN_REPEATS and top * 2 >= len(lines)


def _sentences(prompt_texts: Iterable[str]) -> list[str]:
    found = []
    for text in prompt_texts:
        for piece in re.split(r"(?<=[.:!?])\s+|\n+", text):
            words = _WORD.findall(piece.lower())
            if len(words) >= LEAK_MIN_WORDS:
                found.append(" ".join(words))
    return found


def _leaks(text: str, prompt_texts: Iterable[str]) -> bool:
    reply = " ".join(_WORD.findall(text.lower()))
    return any(sentence in reply for sentence in _sentences(prompt_texts))


def is_echo(reply: str, user_text: str) -> bool:
    """The reply is the user's turn again: the same words in the same order (case, spacing and
    punctuation aside). A reply that quotes the question and then answers it is not an echo."""
    words = _WORD.findall(reply.lower())
    return bool(words) and words == _WORD.findall(user_text.lower())


def classify(text: str, *, prompt_texts: Iterable[str] = ()) -> str | None:
    """The placeholder reason for a reply, or None when it is a real answer.

    `text` is the raw model output; `prompt_texts` are the instructions it must not echo
    (the system text, tool descriptions, a synthesis preamble).
    """
    body = clean(text)
    if "\ufffd" in body and _is_garbled(body):
        return "placeholder_garbled"
    if _is_empty(body):
        rest = TEMPLATE_TOKEN.sub(" ", text)
        return "placeholder_leak" if not _is_empty(rest) else "placeholder_empty"
    if _leaks(body, prompt_texts):
        return "placeholder_leak"
    if _is_garbled(body):
        return "placeholder_garbled"
    if _repeated_tail(body) or _repeated_lines(body):
        return "placeholder_repetition"
    return None
