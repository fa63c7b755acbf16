"""The memory tool: remember and recall through the same store code as `forge remember` and
`forge recall` (forge.store.rag), with two rules a router cannot be trusted with:

- a missing kind is `fact` (a small model asked to classify on the fly won't always say), and so
  is a kind outside rag.KINDS, reported in the result;
- the question rule: a turn whose text is a question never writes, whatever the payload
  says; it is answered with a recall of the turn instead. The test is on the turn
  (forge.chat.turn.is_question), never on the payload, which has already lost the question mark.

A recall runs the recall graph (hybrid search, refusal paths, hot block, one synthesis call).
An embedding outage is an `[error]` result string, like every other entry point's one line.
"""
from __future__ import annotations

from typing import Any

from ...memory import non_answer
from ...core.errors import ForgeError
from ..turn import is_question
from . import ToolContext, ToolResult, failure


def _op(payload: dict[str, Any]) -> str:
    op = str(payload.get("op") or payload.get("action") or "").strip().lower()
    if op in ("remember", "recall"):
        return op
    if payload.get("query"):
        return "recall"
    return "remember" if payload.get("content") else op


def run(ctx: ToolContext, payload: dict[str, Any]) -> ToolResult:
    op = _op(payload)
    if op == "remember" and is_question(ctx.turn_text):
        return recall(ctx, ctx.turn_text, project=payload.get("project"))
    if op == "remember":
        return remember(ctx, payload)
    if op == "recall":
        query = str(payload.get("query") or payload.get("content") or ctx.turn_text)
        return recall(ctx, query, project=payload.get("project"))
    return failure(f"memory: unknown op {op or '(none)'!r}; use remember or recall")


def remember(ctx: ToolContext, payload: dict[str, Any]) -> ToolResult:
    """Write through `conflicts.remember`: the result names every active entry the new one
    may contradict (conflicts are listed, never folded), so the model can tell the user and
    ask which one holds."""
    from ...memory import conflicts
    from ...store import rag

    content = str(payload.get("content") or "").strip()
    if not content:
        return failure("memory: nothing to remember (the payload has no content)")
    kind = str(payload.get("kind") or "fact").strip().lower()
    note = ""
    if kind not in rag.KINDS:
        note = f" (kind {kind!r} is not one of {', '.join(rag.KINDS)}; stored as fact)"
        kind = "fact"
    project = payload.get("project") or None
    try:
        with rag.open_store(ctx.settings) as store:
            done = conflicts.remember(store, kind, content,
                                      project=str(project) if project else None,
                                      source="remember")
    except ForgeError as e:
        return ToolResult(f"{non_answer.ERROR} memory: {e}", not_answered="tool_error")
    label = f"{kind}/{project}" if project else kind
    text = f"Remembered #{done.id} [{label}] {content}{note}"
    if done.conflicts:
        text += ("\nIt may contradict what memory already holds; tell the user and ask which "
                 "one is true:\n" + "\n".join(f"- {line}" for line in done.notes()))
    trace = {"conflicts": done.conflict_ids} if done.conflicts else None
    return ToolResult(text, trace=trace) if trace else ToolResult(text)


def recall(ctx: ToolContext, query: str, *, project: Any = None) -> ToolResult:
    from ..graphs import recall as graph

    return graph.run(ctx.settings, query, client=ctx.client, usage=ctx.usage,
                     project=str(project) if project else None, on_token=ctx.on_token)
