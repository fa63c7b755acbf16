"""The recall graph (V8): hybrid search → refusal paths → synthesis prompt → one LLM call.

The synthesis prompt is ordered preamble → hot block → question → retrieved entries. The
preamble and the hot block form the system message, byte-identical from one recall to the next,
so the server's prompt cache keeps them; everything that changes per turn comes after.

Two refusals end the run with no LLM call, `ok=true` and a `not_answered` reason — the search
found nothing (`recall_nothing_found`), or the distance cutoff dropped every row (`recall_cutoff`)
— unless a hot block exists, in which case synthesis runs on it. An embedding outage never falls
back to the hot block: answering fluently from a partial capability is how an outage lasts a
week, so it fails the same way as every other entry point (here an `[error]` result string).
"""
from __future__ import annotations

from typing import Any, Callable

from ...memory import non_answer
from ...core.errors import ForgeError
from ...recall.hot_memory import HotBlock, entry_line, render_hot_block
from ...core.log import log
from ..tools import ToolResult
from ...store.traces import LLMUsage

PREAMBLE = (
    "You answer the user's question from their own memory, shown below. "
    "Answer in the user's language, in a few plain sentences, without JSON. "
    "When the memory does not hold the answer, say that you do not know."
)
SYNTHESIS_MAX_TOKENS = 512


def synthesis_messages(hot: HotBlock, question: str, rows: list) -> list[dict[str, str]]:
    system = PREAMBLE if not hot.text else f"{PREAMBLE}\n\n{hot.text}"
    if rows:
        retrieved = "\n".join(f"{entry_line(r.entry)} (#{r.entry.id})" for r in rows)
        tail = f"Entries retrieved for this question, closest first:\n{retrieved}"
    else:
        tail = "No entry was retrieved for this question; answer from the memory above."
    return [{"role": "system", "content": system},
            {"role": "user", "content": f"Question: {question.strip()}\n\n{tail}"}]


def prompt_texts() -> list[str]:
    """The instructions a synthesis answer must not echo (placeholder leak detection)."""
    from ...recall.hot_memory import HEADER_COMPLETE, HEADER_PARTIAL

    return [PREAMBLE, HEADER_COMPLETE, HEADER_PARTIAL]


def run(settings: Any, question: str, *, client: Any, usage: LLMUsage,
        project: str | None = None,
        on_token: Callable[[str], None] | None = None) -> ToolResult:
    from ...store import rag
    from ...recall import recall_rank

    try:
        with rag.open_store(settings, mode="read") as store:
            found = recall_rank.search(store, question, limit=recall_rank.DEFAULT_LIMIT,
                                       project=project)
            hot = render_hot_block(rag.hot_entries(store, project=project),
                                   max_tokens=settings.recall_hot_max_tokens)
    except ForgeError as e:
        # Outage (or an unusable store): deliberately no hot-block fallback.
        return ToolResult(f"{non_answer.ERROR} memory: {e}", not_answered="tool_error", final=True)
    rows = list(found.rows)
    if not rows and not hot.text:
        if found.dropped_by_cutoff:
            return ToolResult(non_answer.CUTOFF_REFUSAL, not_answered="recall_cutoff", final=True)
        return ToolResult(non_answer.NOTHING_FOUND, not_answered="recall_nothing_found", final=True)
    completion = client.complete(synthesis_messages(hot, question, rows),
                                 max_tokens=SYNTHESIS_MAX_TOKENS, stream=on_token is not None,
                                 on_token=on_token)
    usage.add_completion(completion)
    return ToolResult(completion.content, final=True, streamed=on_token is not None,
                      from_model=True)
