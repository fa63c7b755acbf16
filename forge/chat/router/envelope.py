"""The router's reply: a small JSON envelope, or plain text that is a chat reply.

    {"action": "chat", "content": "..."}
    {"action": "<tool>", "payload": {...}, "done": true}

Small models wrap JSON in code fences, add prose around it, or put the payload's keys at the
top level; all of that is read. Text that holds no JSON object is a chat reply as it stands.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

_FENCE = re.compile(r"^```[a-zA-Z]*\s*\n?(.*?)\n?```\s*$", re.DOTALL)
_ENVELOPE_KEYS = {"action", "content", "payload", "done", "tool"}


@dataclass
class Envelope:
    action: str                      # "chat" or a tool name (lower-case)
    content: str | None = None       # the chat reply, when action is "chat"
    payload: dict[str, Any] = field(default_factory=dict)
    done: bool = True
    is_json: bool = False            # False: the model answered in plain text
    malformed: bool = False          # looked like an envelope but does not parse

    @property
    def is_chat(self) -> bool:
        return self.action == "chat"


def _strip_fence(text: str) -> str:
    m = _FENCE.match(text.strip())
    return m.group(1).strip() if m else text.strip()


def _first_object(text: str) -> tuple[dict[str, Any] | None, bool]:
    """The first JSON object in `text`, and whether text looked like one that did not parse."""
    start = text.find("{")
    if start < 0:
        return None, False
    decoder = json.JSONDecoder()
    for i in range(start, len(text)):
        if text[i] != "{":
            continue
        try:
            value, _ = decoder.raw_decode(text, i)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value, False
    return None, '"action"' in text


def _as_bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() not in ("false", "0", "no")
    return bool(value) if value is not None else True


# Operations small models put in "action" instead of the tool's name.
_OP_TOOL = {"remember": "memory", "recall": "memory", "read": "files", "list": "files"}


def _action(data: dict[str, Any]) -> tuple[str, str | None]:
    """(tool or "chat", an op found where the tool's name belongs).

    Read `{"tool": "memory", "action": "recall"}` and `{"action": "recall"}` as the memory tool's
    recall, as well as the documented `{"action": "memory", "payload": {"op": "recall"}}`.
    """
    act = str(data.get("action") or "").strip().lower()
    tool = str(data.get("tool") or "").strip().lower()
    if tool and tool != "chat":
        return tool, (act if act and act != tool else None)
    if act in _OP_TOOL:
        return _OP_TOOL[act], act
    return act or tool or "chat", None


def parse(text: str) -> Envelope:
    body = _strip_fence(text)
    data, malformed = _first_object(body)
    if data is None or not (_ENVELOPE_KEYS & data.keys()):
        return Envelope(action="chat", content=text.strip(), malformed=malformed)
    action, op = _action(data)
    done = _as_bool(data.get("done", True))
    content = data.get("content")
    if content is not None and not isinstance(content, str):
        content = json.dumps(content, ensure_ascii=False)
    payload = data.get("payload")
    if not isinstance(payload, dict):
        # Some models put the payload's keys next to "action" ("content" included).
        payload = {k: v for k, v in data.items() if k not in ("action", "tool", "done", "payload")}
        if action == "chat":
            payload.pop("content", None)
    if op and "op" not in payload:
        payload = {**payload, "op": op}
    return Envelope(action=action, content=content, payload=payload, done=done, is_json=True)

