"""Transcript units: cutting a window of messages into exchanges, and back.

An exchange is a user turn plus every non-user message up to the next user turn: the smallest
piece of a conversation that still stands on its own, so it is what compaction stores, one
archive entry each. Live eviction (`units`) and resplit of old stored blocks (`split`) share the
rendering and the non-answer test here, so they cannot filter differently.

Rendering (what an archive entry's content looks like)::

    user: Quel processeur a mon NiPoGi ?
    assistant: Un Ryzen 5 5500U.

A line that starts with a role name and ": " (the space included, so `user:admin` in a pasted
config does not) opens a message; other lines continue it.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from . import non_answer

RENDER_ROLES = ("user", "assistant", "system", "tool")
_HEADER = re.compile(r"^(user|assistant|system|tool): ", re.MULTILINE)
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)

# Why an exchange was left out of the store.
LEFT_OUT_NOT_ANSWERED = "answered: false"


@dataclass
class Part:
    """One message of a unit, as it is stored: role and (unwrapped) text."""

    role: str
    content: str
    id: int | None = None
    ref: str | None = None
    answered: bool = True
    ts: str = ""            # when it was said (the history message's ts; "" when unknown)
    ts_known: bool = True   # False: `ts` is only when an import without times stored it


@dataclass
class Unit:
    """One exchange: a user turn and what answered it (or a lone message before any user turn)."""

    parts: list[Part] = field(default_factory=list)

    @property
    def message_ids(self) -> list[int]:
        return [p.id for p in self.parts if p.id is not None]

    @property
    def external_refs(self) -> list[str]:
        refs: list[str] = []
        for p in self.parts:
            if p.ref and p.ref not in refs:
                refs.append(p.ref)
        return refs

    @property
    def first_ts(self) -> str | None:
        """When the exchange happened: its first message's time that can be read, as a stored
        time (None when no message says when)."""
        first = self._first_time()
        return None if first is None else first[0]

    @property
    def first_ts_known(self) -> bool:
        """Whether `first_ts` is when it was said (False: an import without times stored the
        message then)."""
        first = self._first_time()
        return True if first is None else first[1]

    def _first_time(self) -> tuple[str, bool] | None:
        """(the stored time, whether it is known) of the first message whose time can be read."""
        from ..core.errors import ForgeError
        from ..core.when import to_stored

        for p in self.parts:
            if p.ts:
                try:
                    return to_stored(p.ts), p.ts_known
                except ForgeError:
                    continue
        return None

    @property
    def question(self) -> str:
        return next((p.content for p in self.parts if p.role == "user"), "")

    @property
    def reply(self) -> str:
        """The last non-user text: what finally answered the user turn."""
        return next((p.content for p in reversed(self.parts) if p.role != "user"), "")

    def text(self) -> str:
        return render(self.parts)

    def refs(self) -> dict[str, list]:
        return {"messages": self.message_ids, "external": self.external_refs}


def unwrap_envelope(text: str) -> str:
    """A raw router-JSON envelope (`{"action": "chat", "content": ...}`) becomes its content.

    Anything that is not such an envelope comes back unchanged, so a user who pastes JSON keeps it.
    """
    stripped = text.strip()
    fenced = _FENCE.match(stripped)
    if fenced:
        stripped = fenced.group(1)
    if not (stripped.startswith("{") and stripped.endswith("}")):
        return text
    try:
        doc = json.loads(stripped)
    except ValueError:
        return text
    if not isinstance(doc, dict) or not ("action" in doc or "tool" in doc):
        return text
    for key in ("content", "answer", "response", "message", "query"):
        if isinstance(doc.get(key), str):
            return doc[key]
    payload = doc.get("payload")
    if isinstance(payload, dict):
        for key in ("content", "query", "answer"):
            if isinstance(payload.get(key), str):
                return payload[key]
    return text


def is_pointer(message: Any) -> bool:
    meta = getattr(message, "meta", None) or {}
    return meta.get("compaction") == "pointer"


def units(messages: Sequence[Any]) -> list[Unit]:
    """Cut history messages (with .id .role .content .ref .answered .meta) into exchanges.

    Compaction pointers are skipped: a pointer answers no question and never reaches the store.
    Envelopes are unwrapped. The caller passes only the messages it evicts, in history order.
    """
    out: list[Unit] = []
    for m in messages:
        if is_pointer(m):
            continue
        part = Part(role=m.role, content=unwrap_envelope(m.content), id=m.id,
                    ref=getattr(m, "ref", None), answered=bool(getattr(m, "answered", True)),
                    ts=str(getattr(m, "ts", "") or ""),
                    ts_known=getattr(m, "ts_known", True) is not False)
        if part.role == "user" or not out:
            out.append(Unit([part]))
        else:
            out[-1].parts.append(part)
    return out


def render(parts: Iterable[Part]) -> str:
    return "\n".join(f"{p.role}: {p.content}" for p in parts)


def split(text: str) -> list[Unit]:
    """Parse a stored block in Forge's rendering back into exchanges (the resplit input).

    Text before the first role header is kept as a lone unit rather than dropped.
    """
    headers = list(_HEADER.finditer(text))
    parts: list[Part] = []
    if not headers:
        return [Unit([Part("user", text.strip())])] if text.strip() else []
    lead = text[: headers[0].start()].strip()
    if lead:
        parts.append(Part("system", lead))
    for i, h in enumerate(headers):
        end = headers[i + 1].start() if i + 1 < len(headers) else len(text)
        parts.append(Part(h.group(1), text[h.end():end].rstrip("\n")))
    out: list[Unit] = []
    for p in parts:
        if p.role == "user" or not out:
            out.append(Unit([p]))
        else:
            out[-1].parts.append(p)
    return out


def left_out_reason(unit: Unit, *, text_only: bool = False) -> str | None:
    """Why this exchange must not be stored, or None.

    Two rules, different in kind: the run said so (`answered: false` on any of its messages),
    or the reply starts with one of Forge's fixed markers. `text_only` is for resplit, whose old
    blocks carry no flag.
    """
    if not text_only and any(not p.answered for p in unit.parts):
        return LEFT_OUT_NOT_ANSWERED
    # The final reply decides: a tool error the model then recovered from is a real answer.
    if any(p.role != "user" for p in unit.parts):
        marker = non_answer.is_non_answer(unit.reply)
        if marker:
            return f"reply starts with {marker}"
    return None


def partition(found: Sequence[Unit], *, text_only: bool = False) -> tuple[list[Unit], list[tuple[Unit, str]]]:
    """Units to store, and units left out with the reason."""
    keep: list[Unit] = []
    left: list[tuple[Unit, str]] = []
    for u in found:
        reason = left_out_reason(u, text_only=text_only)
        if reason:
            left.append((u, reason))
        else:
            keep.append(u)
    return keep, left
