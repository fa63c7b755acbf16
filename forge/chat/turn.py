"""What a user turn is. The question rule (a question never writes memory) reads the TURN,
never the router's payload.

A payload like {"op": "remember", "content": "Possède un serveur"} has lost the question mark
of "Je possède un serveur ?"; the turn text is the one thing the payload cannot lose.
"""
from __future__ import annotations

# A message longer than this that merely ends with "?" is not treated as a question:
# a long statement with a trailing aside still writes.
QUESTION_MAX_CHARS = 200

_QUESTION_MARKS = ("?", "？", "¿")


def is_question(text: str) -> bool:
    """True when the turn ends with a question mark (French " ?" and the full-width "？"
    included, trailing spaces ignored) and is at most QUESTION_MAX_CHARS characters long."""
    stripped = text.rstrip()
    if not stripped or len(stripped) > QUESTION_MAX_CHARS:
        return False
    return stripped.endswith(_QUESTION_MARKS)
