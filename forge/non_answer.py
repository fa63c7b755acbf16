"""Forge's own fixed non-answer strings, and the prefix test that keeps them out of the store (H7).

Every refusal or failure string Forge itself writes as a reply lives here and starts with one of
`MARKERS`, so compaction (and resplit, whose old input carries no `answered` flag) can recognise
it by its text. Refusals a model words itself are deliberately not matched: no phrase list reaches
them without also dropping real answers.
"""
from __future__ import annotations

ERROR = "[error]"
NO_MEMORY = "[no memory]"
TOOL_ERROR = "Tool error:"
SOMETHING_WENT_WRONG = "Something went wrong:"
NO_RESULTS = "[no results]"
TARGET_NOT_FOUND = "[cible introuvable]"
COLLECT_FAILED = "[collecte impossible]"

# The delegation flow asks the user again instead of acting; that reply answers nothing.
DELEGATION_REASK_MARKER = "[précision demandée]"
DELEGATION_REASK = (
    f"{DELEGATION_REASK_MARKER} Which machine or service should this run on? "
    "Name it and ask again."
)

# What recall answers when the distance cutoff dropped every row it found (V8).
CUTOFF_MARKER = "[nothing close enough]"
CUTOFF_REFUSAL = (
    f"{CUTOFF_MARKER} Memory holds entries, but none is close enough to this question "
    "(every match was beyond RECALL_MAX_DISTANCE)."
)

# What recall answers when the search found nothing at all (V8).
NOTHING_FOUND = f"{NO_MEMORY} Nothing in memory matches this question."

MARKERS: tuple[str, ...] = (
    ERROR, NO_MEMORY, TOOL_ERROR, SOMETHING_WENT_WRONG, NO_RESULTS, TARGET_NOT_FOUND,
    COLLECT_FAILED, DELEGATION_REASK_MARKER, CUTOFF_MARKER,
)


def is_non_answer(text: str) -> str | None:
    """The marker `text` starts with (after leading whitespace), else None."""
    stripped = text.lstrip()
    for marker in MARKERS:
        if stripped.startswith(marker):
            return marker
    return None
