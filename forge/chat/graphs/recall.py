"""The recall graph: hybrid search → refusal paths → synthesis prompt → one LLM call.

The synthesis prompt is ordered preamble → hot block → today's date, question → retrieved
entries. The preamble and the hot block form the system message, byte-identical from one recall
to the next, so the server's prompt cache keeps them; everything that changes per turn (today's
date included) comes after. Each entry line carries its date; the older of two rows that state
a changed fact says which row is newer.

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


def synthesis_messages(hot: HotBlock, question: str, rows: list, *,
                       today: str | None = None, time: dict | None = None
                       ) -> list[dict[str, str]]:
    """The two messages of the synthesis call; `today`: the local date (YYYY-MM-DD) the user
    message opens with (the clock's when None); `time`: the recall's window (its JSON's
    "time"), said when it held no entry."""
    from ...core.when import local_date, today as local_today

    system = PREAMBLE if not hot.text else f"{PREAMBLE}\n\n{hot.text}"
    if rows:
        retrieved = "\n".join(retrieved_line(r) for r in rows)
        tail = f"Entries retrieved for this question, closest first:\n{retrieved}"
    elif time is not None:
        searched = time.get("searched") or time
        since = local_date(searched["since"]) if searched.get("since") else "the beginning"
        until = local_date(searched["until"]) if searched.get("until") else "today"
        tail = (f"No entry dated from {since} to {until} (excluded) was found for this "
                "question; say so, and do not answer from entries of other dates.")
    else:
        tail = "No entry was retrieved for this question; answer from the memory above."
    day = today or local_today()
    return [{"role": "system", "content": system},
            {"role": "user", "content": f"Today is {day}.\nQuestion: {question.strip()}\n\n{tail}"}]


def retrieved_line(row: Any) -> str:
    """One retrieved row as the model reads it: the hot block's line, its id, which row is
    newer when it states an older value of the same fact, and what it replaced when it stands
    in the place of a replaced entry the question found."""
    older = f"; older: #{row.newer} is newer" if getattr(row, "newer", None) is not None else ""
    if getattr(row, "in_place_of", None):
        older += f"; replaced #{', #'.join(map(str, row.in_place_of))}"
    return f"{entry_line(row.entry)} (#{row.entry.id}{older})"


def _today(settings: Any) -> str:
    from ...core.when import today

    return today(settings.now)


def prompt_texts() -> list[str]:
    """The instructions a synthesis answer must not echo (placeholder leak detection)."""
    from ...recall.hot_memory import HEADER_COMPLETE, HEADER_PARTIAL

    return [PREAMBLE, HEADER_COMPLETE, HEADER_PARTIAL]


def run(settings: Any, question: str, *, client: Any, usage: LLMUsage,
        project: str | None = None,
        on_token: Callable[[str], None] | None = None) -> ToolResult:
    from ...store import rag
    from ...recall import rank

    try:
        with rag.open_store(settings, mode="read") as store:
            found = rank.recall(store, question, limit=rank.DEFAULT_LIMIT,
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
    completion = client.complete(synthesis_messages(hot, question, rows,
                                                    today=_today(settings), time=found.time),
                                 max_tokens=SYNTHESIS_MAX_TOKENS, stream=on_token is not None,
                                 on_token=on_token)
    usage.add_completion(completion)
    return ToolResult(completion.content, final=True, streamed=on_token is not None,
                      from_model=True)
