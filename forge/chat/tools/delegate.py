"""Delegation: the router hands the user's turn to the tool that acts on a target, and a second
model answers from what it collected. Off unless `delegate` is in ENABLED_TOOLS.

    {"action": "delegate", "payload": {"target": "nas", "command": "journal", "args": {...}}}

What it does, in order:

1. The target comes from the TURN, never from the router alone: the inventory targets whose name
   (or ssh host) appears in the user's message. The router's `target` is taken when it is one of
   them; else the one target the message names. The question the block must answer is the turn
   itself, whole.
2. When the message names no target (or several, and the router picked none of them) Forge does
   not guess. A question (forge.chat.turn.is_question: it ends with a question mark and is at most
   200 characters, the memory rule's bound) gets the re-ask, `non_answer.DELEGATION_REASK`
   (French for a French turn), asking which machine or service is meant; anything else gets
   `[cible introuvable]`. Both are marked non-answers: the trace shows ∅ and compaction leaves
   the exchange out.
3. The sysadmin tool collects the block on that target (inventory commands only; the router's
   `command` and `args`, or the target's only command with its defaults).
4. The second model at `DELEGATE_URL` answers the turn from the block; unset, the chat server
   does. Every model that answered (the router's and the delegate's) is listed in the trace's
   `llm.models`; the step records the target and the command name.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any

from ...memory import non_answer
from ..turn import is_question
from . import ToolContext, ToolResult, failure
from .inventory import InventoryError, Target
from .sysadmin import collect_and_answer, inventory


def named_targets(turn: str, targets: dict[str, Target]) -> list[str]:
    """Targets whose name or ssh host appears in the turn as a whole word (case-insensitive)."""
    text = turn.lower()
    found = []
    for name, target in targets.items():
        words = {name.lower()} | ({target.host.lower()} if target.host else set())
        if any(re.search(r"(?<![\w.-])" + re.escape(w) + r"(?![\w-]|\.[\w-])", text)
               for w in words):
            found.append(name)
    return found


def choose_target(turn: str, proposed: Any, targets: dict[str, Target]) -> str | None:
    named = named_targets(turn, targets)
    if proposed and str(proposed) in named:
        return str(proposed)
    return named[0] if len(named) == 1 else None


def delegate_client(settings: Any) -> Any:
    """A chat client for DELEGATE_URL (same timeout as the chat server), or None when unset."""
    if not settings.delegate_url:
        return None
    from ...core.llm import ChatClient

    return ChatClient(dataclasses.replace(settings, llama_cpp_url=settings.delegate_url,
                                          llama_cpp_id_slot=None))


def run(ctx: ToolContext, payload: dict[str, Any]) -> ToolResult:
    proposed = payload.get("target")
    try:
        targets = inventory(ctx.settings)
    except InventoryError as e:
        return failure(f"delegate: {e}")
    target = choose_target(ctx.turn_text, proposed, targets)
    if target is None:
        if is_question(ctx.turn_text):
            result = ToolResult(non_answer.delegation_reask(ctx.turn_text),
                                not_answered="delegation_reask", final=True)
        else:
            unnamed = proposed if proposed and str(proposed) not in targets else None
            result = ToolResult(non_answer.target_not_found(ctx.turn_text, unnamed, sorted(targets)),
                                not_answered="target_not_found", final=True)
        result.trace = {"target": None, "commands": []}
        return result
    client = delegate_client(ctx.settings)
    try:
        return collect_and_answer(ctx, target, payload.get("command"), payload.get("args"),
                                  ctx.turn_text, client=client or ctx.client, targets=targets)
    finally:
        if client is not None:
            client.close()
