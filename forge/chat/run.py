"""One chat turn: router → tool or recall graph → outcome → persist → trace → compaction check.

    result = run_turn(settings, "Remember that the NAS runs Debian")

The router prompt is system + enabled tools + history + this turn (forge.memory.router_prompt), a stable
prefix so the server's cache is reused. The model answers with a JSON envelope or plain text
(forge.chat.router.envelope). With `done: false` and MAX_STEPS > 1 a tool result folds into the
conversation and the router runs again; at the last step a tool result is the answer as it came.

Everything ends on one exit path (`_finish`): forge.chat.outcome decides ok / not_answered once, the
same value marks the exchange `answered: false` in the history and goes into the trace; the
compaction check runs after persisting and its failure is a warning, never a failed turn.
"""
from __future__ import annotations

import re
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from ..store import history, traces
from . import outcome
from ..core.errors import ForgeError
from ..core.log import log
from ..core.secret_scan import Redactions
from .router import envelope
from ..memory import placeholders, router_prompt as prompt
from .tools import ToolContext, ToolResult, dispatch
from ..store.traces import LLMUsage, Step

ROUTER_MAX_TOKENS = 768

# What the user sees instead of a placeholder (nothing of it is kept).


@dataclass
class TurnResult:
    run_id: str
    reply: str                      # what the user reads ("" for a placeholder)
    ok: bool
    not_answered: str | None
    error: str | None = None
    notice: str | None = None       # a short line for stderr instead of a placeholder
    shown: str = ""                 # the part of `reply` already streamed to the terminal
    persisted: list[int] = field(default_factory=list)
    trace: dict[str, Any] | None = None
    compaction: Any = None
    secrets_redacted: dict[str, int] = field(default_factory=dict)   # by type, before the writes

    @property
    def answered(self) -> bool:
        return self.ok and self.not_answered is None

    def to_dict(self) -> dict[str, Any]:
        return {"reply": self.reply, "run_id": self.run_id, "answered": self.answered,
                "ok": self.ok, "not_answered": self.not_answered, "notice": self.notice,
                "persisted": self.persisted, "secrets_redacted": self.secrets_redacted}


class StreamFilter:
    """Shows a reply on the terminal while it streams.

    Plain text goes through, held back at a possible chat-template token (where the answer
    ends); a JSON chat envelope shows only its `content` string, decoded as it arrives; a tool
    call shows nothing (its result is printed when it comes).
    """

    _CONTENT = re.compile(r'"action"\s*:\s*"chat".*?"content"\s*:\s*"', re.DOTALL)
    _ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}

    def __init__(self, sink: Callable[[str], None]):
        self.sink = sink
        self.buf = ""
        self.mode: str | None = None
        self.pos = 0            # next index of buf to consider
        self.stopped = False
        self.shown = ""

    def _emit(self, text: str) -> None:
        if text:
            self.shown += text
            self.sink(text)

    def __call__(self, piece: str) -> None:
        self.buf += piece
        if self.stopped:
            return
        if self.mode is None:
            head = self.buf.lstrip()
            if not head:
                return
            self.mode = "json" if head[0] in "{`[" else "text"
            self.pos = len(self.buf) - len(head)
        if self.mode == "text":
            self._text()
        else:
            self._json()

    def _text(self) -> None:
        m = placeholders.TEMPLATE_TOKEN.search(self.buf, self.pos)
        if m:
            self._emit(self.buf[self.pos:m.start()].rstrip())
            self.stopped = True
            return
        end = len(self.buf)
        lt = self.buf.rfind("<", self.pos)
        if lt >= 0 and ">" not in self.buf[lt:] and end - lt < 24:
            end = lt
        self._emit(self.buf[self.pos:end])
        self.pos = end

    def _json(self) -> None:
        if self.mode == "json":
            m = self._CONTENT.search(self.buf)
            if not m:
                return
            self.mode, self.pos = "json-content", m.end()
        out = []
        i = self.pos
        while i < len(self.buf):
            ch = self.buf[i]
            if ch == "\\":
                if i + 1 >= len(self.buf):
                    break
                nxt = self.buf[i + 1]
                if nxt == "u":
                    if i + 6 > len(self.buf):
                        break
                    try:
                        out.append(chr(int(self.buf[i + 2:i + 6], 16)))
                    except ValueError:
                        pass
                    i += 6
                    continue
                out.append(self._ESCAPES.get(nxt, nxt))
                i += 2
                continue
            if ch == '"':
                self.stopped = True
                break
            out.append(ch)
            i += 1
        self.pos = i
        self._emit("".join(out))


class _Turn:
    """The state of one turn, so every path can end through `_finish`."""

    def __init__(self, settings: Any, text: str, *, client: Any,
                 sink: Callable[[str], None] | None, interactive: bool,
                 confirm: Callable[[str], bool] | None, max_tokens: int,
                 system: str | None = None):
        self.settings = settings
        self.system = system
        self.text = text
        self.client = client
        self.sink = sink
        self.interactive = interactive
        self.confirm = confirm
        self.max_tokens = max_tokens
        self.run_id = traces.new_run_id()
        self.started = time.monotonic()
        self.usage = LLMUsage()
        self.steps: list[Step] = []
        self.folded: list[str] = []       # tool results folded into the conversation (MAX_STEPS)
        self.filters: list[StreamFilter] = []

    def _filter(self) -> Callable[[str], None] | None:
        if self.sink is None:
            return None
        f = StreamFilter(self.sink)
        self.filters.append(f)
        return f

    @property
    def shown(self) -> str:
        return "".join(f.shown for f in self.filters)

    def _router_call(self, messages: list[dict]) -> str:
        t0 = time.monotonic()
        completion = self.client.complete(messages, max_tokens=self.max_tokens,
                                          stream=self.sink is not None, on_token=self._filter())
        self.steps.append(Step("router", round((time.monotonic() - t0) * 1000, 1)))
        self.usage.add_completion(completion)
        return completion.content

    def _tool(self, env: envelope.Envelope) -> ToolResult:
        ctx = ToolContext(settings=self.settings, turn_text=self.text,
                          interactive=self.interactive, confirm=self.confirm, client=self.client,
                          usage=self.usage, on_token=self._filter())
        t0 = time.monotonic()
        result: ToolResult | None = None
        try:
            result = dispatch(env.action, env.payload, ctx)
            return result
        finally:
            self.steps.append(Step(env.action, round((time.monotonic() - t0) * 1000, 1),
                                   detail=getattr(result, "trace", None)))

    def route(self) -> tuple[str, str | None]:
        """Run the router (and tools) to a reply; returns (reply, not_answered reason)."""
        doc = history.read(self.settings.memory_file)
        messages = prompt.render(self.settings.enabled_tools, doc.messages, user_input=self.text)
        if self.system:  # after the router's own text: the routing rules and cached prefix hold
            messages[0] = {**messages[0], "content": messages[0]["content"] + "\n\n" + self.system}
        instructions = [messages[0]["content"]]
        for step in range(1, self.settings.max_steps + 1):
            raw = self._router_call(messages)
            reason = placeholders.classify(raw, prompt_texts=instructions)
            if reason:
                return "", reason
            cleaned = placeholders.clean(raw)
            env = envelope.parse(cleaned)
            if env.malformed:
                return "", "placeholder_garbled"
            if env.is_chat or (env.action not in self.settings.enabled_tools and env.content):
                reply = (env.content or "").strip()
                if not reply:
                    return "", "placeholder_empty"
                return ("", "placeholder_leak") if placeholders.is_echo(reply, self.text) else (reply, None)
            result = self._tool(env)
            if result.from_model:
                from .graphs.recall import prompt_texts

                reason = placeholders.classify(result.text,
                                               prompt_texts=[*prompt_texts(), *result.instructions])
                if reason:
                    return "", reason
                result.text = placeholders.clean(result.text)
            if result.final or env.done or step == self.settings.max_steps:
                return result.text, result.not_answered
            label = prompt.LABELS["tool"]
            messages += [{"role": "assistant", "content": cleaned},
                         {"role": "user", "content": f"{label} {result.text}"}]
            self.folded.append(result.text)
        raise AssertionError("unreachable: the last step always returns")

    def finish(self, *, reply: str, reason: str | None, error: str | None) -> TurnResult:
        verdict = outcome.decide(reply=reply, reason=reason, error=error)
        persisted: list[int] = []
        # The history write replaces the secrets of every message it adds (tool outputs and the
        # reply too); the user's text is cleaned here once, for the trace's preview as well.
        found = Redactions.for_settings(self.settings)
        user_text = found.text(self.text)
        if verdict.persist:
            answered = verdict.not_answered is None
            new = [history.NewMessage("user", user_text, answered=answered)]
            new += [history.NewMessage("tool", t, answered=answered) for t in self.folded]
            new.append(history.NewMessage("assistant", reply, answered=answered))
            # The history cap waits for the compaction check: applied now, it could drop the oldest
            # exchange that compaction is about to archive.
            stored = history.append(self.settings.memory_file, new, max_history=sys.maxsize,
                                    redactions=found)
            persisted = [m.id for m in stored]
        trace_error = error
        if trace_error is None and verdict.not_answered == "tool_error":
            trace_error = reply.splitlines()[0][:200] if reply else None
        record = traces.make_record(run_id=self.run_id, user_input=user_text, steps=self.steps,
                                    started=self.started, ok=verdict.ok,
                                    not_answered=verdict.not_answered, error=trace_error,
                                    llm=self.usage)
        traces.append(self.settings.trace_file, record, redactions=found)
        notice = None
        if verdict.not_answered in outcome.NOT_PERSISTED:
            notice = f"no answer: {traces.NOT_ANSWERED_REASONS[verdict.not_answered]}; nothing was kept"
        elif verdict.not_answered == "non_answer_reply":
            # The model wrote one of Forge's fixed strings (e.g. an `[error]` from the
            # history); it is shown, kept marked unanswered, never archived: say so.
            notice = ("this reply is one of Forge's fixed non-answers; it was not kept as an "
                      "answer (the history marks it unanswered and compaction leaves it out)")
        result = TurnResult(run_id=self.run_id, reply=reply if verdict.persist else "",
                            ok=verdict.ok, not_answered=verdict.not_answered, error=error,
                            notice=notice, shown=self.shown, persisted=persisted,
                            trace=record.to_dict(), secrets_redacted=found.to_dict())
        if persisted:
            result.compaction = _compaction_check(self.settings)
        return result


def _compaction_check(settings: Any) -> Any:
    """After persisting: compaction when a trigger fires, then the hard cap (MEMORY_MAX_HISTORY,
    which waits for compaction, so it never drops what compaction was about to archive). The turn is
    persisted and traced already, so any failure here is a warning, never a failed turn."""
    from ..memory import compaction

    report = None
    try:
        report = compaction.maybe_compact(settings)
    except Exception as e:
        why = str(e) if isinstance(e, ForgeError) else f"{type(e).__name__}: {e}"
        log.warning("compaction check failed, the turn is kept: %s", why)
    try:
        with history.edit(settings.memory_file) as doc:
            history.apply_cap(doc, settings.max_history)
    except Exception as e:
        log.warning("the history cap could not be applied after this turn: %s", e)
    return report


def run_turn(settings: Any, text: str, *, on_token: Callable[[str], None] | None = None,
             interactive: bool = False, confirm: Callable[[str], bool] | None = None,
             client: Any = None, max_tokens: int = ROUTER_MAX_TOKENS, system: str | None = None,
             options: dict[str, Any] | None = None) -> TurnResult:
    """One chat turn. `on_token` receives the visible text while it streams.

    `system`: the user's own instructions, appended to the router's system prompt (never
    stored). `options`: request fields for every call of this turn (temperature, top_p, ...).

    A chat server that cannot be reached (any ForgeError before an answer) is a dispatch
    failure: traced with ok=false, nothing persisted, and the error is raised again. Ctrl-C
    (KeyboardInterrupt, also raised from `on_token`) is traced as `interrupted`, nothing is
    persisted, and it is raised again so the caller stops.
    """
    if not text.strip():
        raise ForgeError("nothing to send: the message is empty")
    own_client = client is None
    if own_client:
        from ..core.llm import ChatClient

        client = ChatClient(settings, options=options)
    elif options:
        client.options = {**client.options, **options}
    turn = _Turn(settings, text, client=client, sink=on_token, interactive=interactive,
                 confirm=confirm, max_tokens=max_tokens, system=system)
    try:
        try:
            reply, reason = turn.route()
        except KeyboardInterrupt:
            turn.finish(reply="", reason="interrupted", error=None)
            raise
        except Exception as e:
            message = str(e).splitlines()[0] if str(e) else type(e).__name__
            if not isinstance(e, ForgeError):
                message = f"{type(e).__name__}: {message}"
            turn.finish(reply="", reason=None, error=message)
            raise
        return turn.finish(reply=reply, reason=reason, error=None)
    finally:
        if own_client:
            client.close()
