"""Forge's own fixed non-answer strings, and the prefix test that keeps them out of the store.

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
DELEGATION_REASK_FR = (
    f"{DELEGATION_REASK_MARKER} Sur quelle machine ou quel service ? "
    "Nommez-le et reposez la question."
)

# sysadmin (and delegation): the target is not in the inventory, or the collection failed.
# English and French, picked by the language of the user's turn (`looks_french`); the details
# (a target name, a command's exit status) are filled in by `target_not_found` / `collect_failed`.
TARGET_NOT_FOUND_EN = TARGET_NOT_FOUND + " No target named {target} in the inventory (known: {known})."
TARGET_NOT_FOUND_FR = TARGET_NOT_FOUND + " Aucune cible nommée {target} dans l'inventaire (connues : {known})."
NO_TARGET_EN = TARGET_NOT_FOUND + " This message names no target of the inventory (known: {known})."
NO_TARGET_FR = TARGET_NOT_FOUND + " Ce message ne nomme aucune cible de l'inventaire (connues : {known})."
COLLECT_FAILED_EN = COLLECT_FAILED + " Could not collect from {target}: {why}."
COLLECT_FAILED_FR = COLLECT_FAILED + " Collecte impossible sur {target} : {why}."

# What recall answers when the distance cutoff dropped every row it found.
CUTOFF_MARKER = "[nothing close enough]"
CUTOFF_REFUSAL = (
    f"{CUTOFF_MARKER} Memory holds entries, but none is close enough to this question "
    "(every match was beyond RECALL_MAX_DISTANCE)."
)

# What recall answers when the search found nothing at all.
NOTHING_FOUND = f"{NO_MEMORY} Nothing in memory matches this question."


def target_not_found(turn: str, target: str | None, known: list[str]) -> str:
    names = ", ".join(known) or "-"
    if not target:
        return (NO_TARGET_FR if looks_french(turn) else NO_TARGET_EN).format(known=names)
    template = TARGET_NOT_FOUND_FR if looks_french(turn) else TARGET_NOT_FOUND_EN
    return template.format(target=repr(target), known=names)


def collect_failed(turn: str, target: str, why: str) -> str:
    template = COLLECT_FAILED_FR if looks_french(turn) else COLLECT_FAILED_EN
    return template.format(target=target, why=why)


def delegation_reask(turn: str) -> str:
    """The re-ask in the turn's language: French when the turn reads French (its ` ?`, or a
    French word among the commonest ones), else English."""
    return DELEGATION_REASK_FR if looks_french(turn) else DELEGATION_REASK


_FRENCH_WORDS = frozenset("le la les un une des est sont quoi pourquoi comment quel quelle quels "
                          "quelles mon ma mes sur dans avec pas qui que".split())


def looks_french(text: str) -> bool:
    words = {w.strip(".,;:!?'\"()").lower() for w in text.replace("'", " ").split()}
    return text.rstrip().endswith(" ?") or len(words & _FRENCH_WORDS) >= 2


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
