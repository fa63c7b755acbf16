"""Compaction: triggers, the two strategies, and the crash-safe order of writes.

The order is what makes it safe:

1. read the history (a snapshot: writers replace the file by rename, no lock needed);
2. pick the window (oldest non-pinned messages, cut at a user turn) and cut it into exchanges;
3. store the exchanges (`rag_pointer`) or summarise them (`llm_summary`) with NO lock held —
   embedding or a model call can take seconds and a chat turn must not wait on it;
4. rewrite the history under the lock, removing exactly the ids of the window, so a message
   appended meanwhile by another process survives.

A crash between 3 and 4 loses nothing and duplicates nothing: the store recognises an archive
entry by the history message ids it holds, so the next run finds the exchanges already
stored and only rewrites the history. If step 3 fails, the history is left as it was and
`compaction_pending` is set, so the hard cap drops nothing that was never archived.
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

from ..store import history
from . import transcript
from ..core.errors import ForgeError
from ..store.history import HistoryDoc, Message
from ..core.log import log
from ..core.secret_scan import Redactions
from . import router_prompt
from ..core.tokens import TokenCounter, token_counter

POINTER = "pointer"
SUMMARY = "summary"

# Test hook, documented in the README: with FORGE_TEST_CRASH_AFTER=store_write the process dies
# (exit 137, like a SIGKILL) after the store write and before the history rewrite.
CRASH_ENV = "FORGE_TEST_CRASH_AFTER"

# A rough per-message overhead of the rendered prompt (role header, separators).
_MESSAGE_OVERHEAD = 4
# What the pointer is budgeted at while choosing a token-triggered window.
_POINTER_BUDGET = 80

SUMMARY_SYSTEM = (
    "You condense an earlier part of a conversation between a user and their assistant, Forge, "
    "so the conversation can continue without it. Write a short factual summary in the "
    "conversation's language: what the user said about themselves, their machines and plans, "
    "what was decided, what is still to do. No preamble, no advice, no invented details."
)


@dataclass
class ArchivedExchange:
    message_ids: list[int]
    entry_id: int | None          # None in a dry run when the exchange is not stored yet
    already_stored: bool          # found in the store by its message ids (a re-run after a crash)
    external_refs: list[str]
    preview: str


@dataclass
class LeftOutExchange:
    message_ids: list[int]
    reason: str
    preview: str


@dataclass
class CompactionReport:
    """What a compaction did (or, in a dry run, would do)."""

    trigger: str | None           # "count" | "tokens" | "forced" | None (under the thresholds)
    strategy: str
    dry_run: bool
    archived: list[ArchivedExchange] = field(default_factory=list)
    left_out: list[LeftOutExchange] = field(default_factory=list)
    removed_ids: list[int] = field(default_factory=list)
    pointer: str | None = None     # the pointer or summary text that replaced the window
    pointer_id: int | None = None
    tokens_before: int = 0
    tokens_after: int = 0
    token_source: str = "estimate"
    messages_before: int = 0
    messages_after: int = 0
    aggregate: dict | None = None  # what the aggregation pass did after it, when it ran
    secrets_redacted: dict[str, int] = field(default_factory=dict)  # by type, before the writes

    @property
    def archived_ids(self) -> dict[int, int | None]:
        """History message id -> archive entry id."""
        return {mid: a.entry_id for a in self.archived for mid in a.message_ids}

    @property
    def did_something(self) -> bool:
        return bool(self.removed_ids)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["archived_ids"] = {str(k): v for k, v in self.archived_ids.items()}
        return d


# -- weighing the next prompt -------------------------------------------------------------------

def prompt_weight(settings: Any, messages: Sequence[Any], counter: TokenCounter | None = None) -> dict[str, int]:
    """Tokens of the next router prompt: system and tool descriptions, history, total."""
    counter = counter or token_counter(settings)
    rendered = router_prompt.render(settings.enabled_tools, messages)
    system_tools = counter(router_prompt.as_text(rendered[:1]))
    total = counter(router_prompt.as_text(rendered))
    return {"system_tools": system_tools, "history": max(0, total - system_tools), "total": total}


def needs_compaction(settings: Any, doc: HistoryDoc, *, counter: TokenCounter | None = None) -> str | None:
    """"count" when the non-pinned messages reach COMPACTION_THRESHOLD, "tokens" when the rendered
    router prompt reaches COMPACTION_TOKEN_THRESHOLD, else None. The count is checked first:
    it needs no tokenizer."""
    if sum(1 for m in doc.messages if not m.pinned) >= settings.compaction_threshold:
        return "count"
    if prompt_weight(settings, doc.messages, counter)["total"] >= settings.compaction_token_threshold:
        return "tokens"
    return None


# -- choosing the window ------------------------------------------------------------------------

def _align(messages: Sequence[Message], cut: int) -> int:
    """Move a cut back to the user turn that opens the exchange it falls in, so no exchange is
    split. Messages before the first user turn belong to no exchange and may be cut anywhere."""
    if cut >= len(messages) or messages[cut].role == "user":
        return cut
    i = cut
    while i > 0 and messages[i].role != "user":
        i -= 1
    return i if messages[i].role == "user" else cut


def count_cut(messages: Sequence[Message], keep_recent: int) -> int:
    """Index of the first kept message when keeping the `keep_recent` most recent non-pinned ones."""
    unpinned = [i for i, m in enumerate(messages) if not m.pinned]
    if len(unpinned) <= keep_recent:
        return 0
    cut = unpinned[len(unpinned) - keep_recent] if keep_recent > 0 else len(messages)
    return _align(messages, cut)


def token_cut(messages: Sequence[Message], costs: Sequence[int], fixed: int, target: int) -> int:
    """The earliest user turn from which the kept prompt fits `target` tokens. Never evicts the
    latest exchange: over target even then, the cut stops there."""
    starts = [i for i, m in enumerate(messages) if m.role == "user" and i > 0]
    for cut in starts:
        kept = sum(c for i, (m, c) in enumerate(zip(messages, costs)) if i >= cut or m.pinned)
        if fixed + _POINTER_BUDGET + kept <= target:
            return cut
    return starts[-1] if starts else 0


def select_window(settings: Any, doc: HistoryDoc, trigger: str, counter: TokenCounter) -> list[Message]:
    """The non-pinned messages compaction evicts, in history order: the oldest beyond
    COMPACTION_KEEP_RECENT (or down to COMPACTION_TOKEN_TARGET), cut at a user turn."""
    messages = doc.messages
    if trigger == "tokens":
        costs = [counter(m.content) + _MESSAGE_OVERHEAD for m in messages]
        fixed = prompt_weight(settings, [], counter)["system_tools"]
        cut = token_cut(messages, costs, fixed, settings.compaction_token_target)
    else:
        cut = count_cut(messages, settings.compaction_keep_recent)
    return [m for m in messages[:cut] if not m.pinned]


# -- the pointer --------------------------------------------------------------------------------

def _ranges(ids: Sequence[int]) -> str:
    ordered = sorted(set(ids))
    spans: list[tuple[int, int]] = []
    for i in ordered:
        if spans and i == spans[-1][1] + 1:
            spans[-1] = (spans[-1][0], i)
        else:
            spans.append((i, i))
    if len(spans) > 4:
        return f"{len(ordered)} entries between #{ordered[0]} and #{ordered[-1]}"
    return ", ".join(f"#{a}" if a == b else f"#{a}–#{b}" for a, b in spans)


def pointer_text(entry_ids: Sequence[int] | None, exchanges: int, first_ts: str, last_ts: str) -> str:
    """The one system message that replaces an archived window. `entry_ids` None = a dry run."""
    span = ""
    if first_ts and last_ts:
        a, b = first_ts[:10], last_ts[:10]
        span = f" ({a})" if a == b else f" ({a} to {b})"
    where = "as new archive entries" if entry_ids is None else (
        f"as archive entries {_ranges(entry_ids)}" if entry_ids else "nowhere (nothing was worth keeping)")
    return (f"[archived] {exchanges} earlier exchange{'s' if exchanges != 1 else ''}{span} "
            f"left this conversation; they are kept in memory {where}. "
            "To use them, recall them by words or meaning (`forge recall WORDS`, or the memory "
            "tool's recall).")


# -- the plan -----------------------------------------------------------------------------------

@dataclass
class _Plan:
    window: list[Message]
    old_pointers: list[Message]
    keep: list[transcript.Unit]
    left: list[tuple[transcript.Unit, str]]

    @property
    def removed_ids(self) -> list[int]:
        return [m.id for m in self.window]

    def carried_entries(self) -> list[int]:
        return [e for p in self.old_pointers for e in (p.meta or {}).get("entries", [])]

    def carried_exchanges(self) -> int:
        return sum(int((p.meta or {}).get("exchanges", 0)) for p in self.old_pointers)


def _shown(settings: Any, text: str) -> str:
    """A text of the window as the report shows it: its secrets replaced, as the archive entry
    stores them (uncounted: the write counts them)."""
    if getattr(settings, "keep_secrets", False):
        return text
    from ..core.secret_scan import redact

    return redact(text)[0]


def _preview(settings: Any, unit: transcript.Unit) -> str:
    """The exchange as the report shows it: redacted first, then cut, so no piece of a secret
    is shown."""
    text = " ".join(_shown(settings, unit.question or unit.reply).split())
    return text if len(text) <= 70 else text[:69] + "…"


def _refs_shown(settings: Any, unit: transcript.Unit) -> list[str]:
    return [_shown(settings, r) for r in unit.external_refs]


def _plan(window: list[Message], strategy: str) -> _Plan:
    pointers = [m for m in window if transcript.is_pointer(m)]
    if strategy == "llm_summary":
        # A pointer names archive entries a summary cannot replace: it stays where it is.
        window = [m for m in window if not transcript.is_pointer(m)]
    keep, left = transcript.partition(transcript.units(window))
    return _Plan(window, pointers if strategy == "rag_pointer" else [], keep, left)


def _crash_point(name: str) -> None:
    if os.environ.get(CRASH_ENV) == name:
        os._exit(137)


# -- the strategies -----------------------------------------------------------------------------

def _store_exchanges(settings: Any, plan: _Plan, store: Any,
                     found: Redactions) -> list[ArchivedExchange]:
    """rag_pointer's write: one archive entry per exchange, embedded first, one transaction.
    Each carries the history's id with its message ids (written into the file first when an
    older file has none), so a re-run after a crash finds the same keys."""
    from ..store import rag

    if not plan.keep:
        return []
    history_id = history.ensure_history_id(settings.memory_file)
    # created: when the exchange happened (its first message's time), not when it is archived;
    # unknown when that time is only the import's (a record without one)
    items = [rag.NewEntry(kind=rag.ARCHIVE_KIND, content=u.text(), source="compaction",
                          refs={**u.refs(), **({"history": history_id} if history_id else {})},
                          created=u.first_ts, created_known=u.first_ts_known)
             for u in plan.keep]
    own = store is None
    store = rag.open_store(settings) if own else store
    try:
        results = rag.remember_many(store, items)
    finally:
        if own:
            store.close()
    for r in results:
        found.merge(r.secrets_redacted)
    return [ArchivedExchange(u.message_ids, r.id, not r.created, _refs_shown(settings, u), _preview(settings, u))
            for u, r in zip(plan.keep, results)]


def _existing(settings: Any, plan: _Plan, store: Any) -> dict[int, int]:
    """For a dry run: which window messages are already archived (no write, no embedding)."""
    from ..store import rag

    ids = [i for u in plan.keep for i in u.message_ids]
    if not ids or (store is None and not settings.database_url and not settings.rag_db_file.exists()):
        return {}
    own = store is None
    store = rag.open_store(settings, check_identity=False) if own else store
    try:
        return rag.find_by_message_ids(store, ids,
                                       history=history.read(settings.memory_file).history_id)
    finally:
        if own:
            store.close()


def summarise(settings: Any, plan: _Plan) -> str:
    """llm_summary's one model call. Raises ForgeError (the history is then left as it was)."""
    from . import non_answer
    from ..core.llm import ChatClient
    from . import placeholders

    text = "\n\n".join(u.text() for u in plan.keep)
    messages = [{"role": "system", "content": SUMMARY_SYSTEM},
                {"role": "user", "content": f"Conversation to summarise:\n\n{text}"}]
    with ChatClient(settings) as client:
        completion = client.complete(messages, max_tokens=512, temperature=0.2)
    # The router's placeholder detector: an empty, garbled, looping or echoing summary is no summary.
    why = placeholders.classify(completion.content, prompt_texts=[SUMMARY_SYSTEM])
    summary = transcript.unwrap_envelope(placeholders.clean(completion.content)).strip()
    why = why or ("placeholder_empty" if not summary else non_answer.is_non_answer(summary))
    if why:
        raise ForgeError(f"the chat server ({client.url}) returned no usable summary ({why}); "
                         "the history was left as it was")
    return summary


# -- compaction ---------------------------------------------------------------------------------

def _mark_pending(settings: Any) -> None:
    with history.edit(settings.memory_file) as doc:
        doc.compaction_pending = True


def _rewrite(settings: Any, remove: list[int], new_message: Message | None,
             found: Redactions | None = None) -> Message | None:
    """Under the lock: drop exactly `remove`, put `new_message` where the first of them was.
    Returns the message inserted (None when every id was already gone, e.g. another compaction
    got there first)."""
    drop = set(remove)
    inserted = None
    with history.edit(settings.memory_file, redactions=found) as doc:
        # Pinned since the snapshot: it stays; its exchange is stored already and a later
        # compaction finds it there by its message ids.
        drop -= {m.id for m in doc.messages if m.pinned}
        if any(m.id in drop for m in doc.messages) and new_message is not None \
                and transcript.is_pointer(new_message):
            # A concurrent compaction may have written a pointer to some of the same entries;
            # the new pointer names them all, so one pointer stays.
            covered = set(new_message.meta["entries"])
            drop |= {m.id for m in doc.messages if transcript.is_pointer(m)
                     and set(m.meta.get("entries", [])) <= covered}
        positions = [i for i, m in enumerate(doc.messages) if m.id in drop]
        if positions:
            doc.messages = [m for m in doc.messages if m.id not in drop]
            if new_message is not None:
                new_message.id = doc.new_id()
                doc.messages.insert(positions[0], new_message)
                inserted = new_message
        doc.compaction_pending = False
        history.apply_cap(doc, settings.max_history)
    return inserted


def compact(settings: Any, *, strategy: str | None = None, if_needed: bool = False,
            dry_run: bool = False, store: Any = None,
            counter: TokenCounter | None = None) -> CompactionReport:
    """Compact the history now (thresholds or not), or only when a trigger fires (`if_needed`).

    `store` (an open rag store) and `counter` let a caller that compacts many times (import)
    open them once. Raises ForgeError when the store write or the summary fails; the history
    is then unchanged except for `compaction_pending`.
    """
    strategy = strategy or settings.compaction_strategy
    if strategy not in ("rag_pointer", "llm_summary"):
        raise ForgeError(f"unknown compaction strategy {strategy!r}; expected rag_pointer or llm_summary")
    counter = counter or token_counter(settings)
    doc = history.read(settings.memory_file)
    trigger = needs_compaction(settings, doc, counter=counter)
    before = prompt_weight(settings, doc.messages, counter)["total"]
    report = CompactionReport(trigger=trigger, strategy=strategy, dry_run=dry_run,
                              tokens_before=before, tokens_after=before,
                              token_source=counter.source, messages_before=len(doc.messages),
                              messages_after=len(doc.messages))
    if trigger is None and if_needed:
        return report
    trigger = report.trigger = trigger or "forced"
    plan = _plan(select_window(settings, doc, trigger, counter), strategy)
    if not plan.keep and not plan.left:
        if doc.compaction_pending and not dry_run:
            _rewrite(settings, [], None)  # nothing is waiting to be archived: lift the hold
        return report
    report.left_out = [LeftOutExchange(u.message_ids, why, _preview(settings, u)) for u, why in plan.left]
    report.removed_ids = plan.removed_ids
    if dry_run:
        return _dry_run(settings, report, doc, plan, store, counter)
    found = Redactions.for_settings(settings, counts=report.secrets_redacted)
    try:
        if strategy == "rag_pointer":
            report.archived = _store_exchanges(settings, plan, store, found)
            carried = plan.carried_entries()
            # An exchange a pin kept back from an earlier pointer is named there already.
            new_entries = [a.entry_id for a in report.archived if a.entry_id not in carried]
            entries = carried + new_entries
            exchanges = plan.carried_exchanges() + len(new_entries)
            new = _pointer_message(entries, exchanges, plan) if entries else None
        else:
            new = _summary_message(summarise(settings, plan), plan) if plan.keep else None
    except ForgeError:
        _mark_pending(settings)
        raise
    _crash_point("store_write")
    inserted = _rewrite(settings, plan.removed_ids, new, found)
    if inserted is not None:
        report.pointer, report.pointer_id = inserted.content, inserted.id
    after = history.read(settings.memory_file)
    report.tokens_after = prompt_weight(settings, after.messages, counter)["total"]
    report.messages_after = len(after.messages)
    log.info("compaction (%s, %s): %d exchanges archived, %d left out, %d messages removed",
             trigger, strategy, len(report.archived), len(report.left_out), len(report.removed_ids))
    if report.did_something and settings.compaction_aggregate:
        # After the compaction committed, only when one happened; never raises.
        from .aggregate import after_compaction

        report.aggregate = after_compaction(settings, store)
    return report


def _span(plan: _Plan) -> tuple[str, str]:
    stamps = [m.ts for m in plan.window if m.ts and not transcript.is_pointer(m)]
    return (stamps[0], stamps[-1]) if stamps else ("", "")


def _pointer_message(entries: list[int | None], exchanges: int, plan: _Plan) -> Message:
    ids = [e for e in entries if e is not None]
    first, last = _span(plan)
    if plan.old_pointers:
        first = plan.old_pointers[0].meta.get("from", first) or first
    return Message(id=0, role="system", content=pointer_text(ids, exchanges, first, last),
                   ts=history.utc_now(),
                   meta={"compaction": POINTER, "entries": ids, "exchanges": exchanges,
                         "from": first, "to": last})


def _summary_message(summary: str, plan: _Plan) -> Message:
    first, last = _span(plan)
    return Message(id=0, role="system", content=f"[summary] Earlier in this conversation: {summary}",
                   ts=history.utc_now(),
                   meta={"compaction": SUMMARY, "exchanges": len(plan.keep), "from": first, "to": last})


def _dry_run(settings: Any, report: CompactionReport, doc: HistoryDoc, plan: _Plan, store: Any,
             counter: TokenCounter) -> CompactionReport:
    existing = _existing(settings, plan, store) if report.strategy == "rag_pointer" else {}
    report.archived = [
        ArchivedExchange(u.message_ids, existing.get(u.message_ids[0]) if u.message_ids else None,
                         bool(u.message_ids) and u.message_ids[0] in existing, _refs_shown(settings, u),
                         _preview(settings, u))
        for u in plan.keep
    ]
    if report.strategy == "rag_pointer":
        first, last = _span(plan)
        text = pointer_text(None, plan.carried_exchanges() + len(plan.keep), first, last)
    else:
        text = "[summary] (written by the chat model when run for real)"
    report.pointer = text
    drop = set(plan.removed_ids)
    kept = [m for m in doc.messages if m.id not in drop]
    first_pos = next(i for i, m in enumerate(doc.messages) if m.id in drop)
    kept.insert(first_pos, Message(id=0, role="system", content=text))
    report.tokens_after = prompt_weight(settings, kept, counter)["total"]
    report.messages_after = len(kept)
    return report


def maybe_compact(settings: Any) -> CompactionReport | None:
    """The check a chat turn runs after it persists: compact when a trigger fires, else None.

    Raises ForgeError when compaction fails (the chat turn shows it as a warning and succeeds).
    A second pass runs when the first left the prompt still over the token threshold.
    """
    counter = token_counter(settings)
    if needs_compaction(settings, history.read(settings.memory_file), counter=counter) is None:
        return None
    report = compact(settings, if_needed=True, counter=counter)
    if report.did_something:
        again = compact(settings, if_needed=True, counter=counter)
        if again.did_something:
            report.archived += again.archived
            report.left_out += again.left_out
            report.removed_ids += again.removed_ids
            report.pointer, report.pointer_id = again.pointer, again.pointer_id
            Redactions(counts=report.secrets_redacted).merge(again.secrets_redacted)
            report.tokens_after, report.messages_after = again.tokens_after, again.messages_after
    return report


# -- what the next prompts weigh ----------------------------------------------------------------

def context(settings: Any) -> dict[str, Any]:
    """What the next router prompt weighs against the thresholds, and the hot block a recall's
    synthesis prompt would carry (no embedding call: the store is read, never embedded into)."""
    counter = token_counter(settings)
    doc = history.read(settings.memory_file)
    weight = prompt_weight(settings, doc.messages, counter)
    unpinned = sum(1 for m in doc.messages if not m.pinned)
    trigger = ("count" if unpinned >= settings.compaction_threshold else
               "tokens" if weight["total"] >= settings.compaction_token_threshold else None)
    return {
        "router_prompt": weight,
        "token_source": counter.source,
        "messages": len(doc.messages),
        "unpinned": unpinned,
        "compaction_pending": doc.compaction_pending,
        "thresholds": {"messages": settings.compaction_threshold,
                       "keep_recent": settings.compaction_keep_recent,
                       "tokens": settings.compaction_token_threshold,
                       "target": settings.compaction_token_target,
                       "max_history": settings.max_history},
        "trigger": trigger,
        "hot_block": _hot_block(settings),
    }


def _hot_block(settings: Any) -> dict[str, Any]:
    budget = settings.recall_hot_max_tokens
    empty = {"tokens": 0, "entries": 0, "left_out": 0, "max_tokens": budget}
    if not settings.database_url and not settings.rag_db_file.exists():  # weighing creates nothing
        return empty
    from ..recall.hot_memory import hot_block

    block = hot_block(settings)
    return {"tokens": block.tokens, "entries": len(block.entry_ids), "left_out": block.left_out,
            "max_tokens": budget}
