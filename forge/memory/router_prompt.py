"""Renders the router prompt: system, descriptions of the enabled tools, then the history,
in that order so the prefix stays stable for the server's cache.

It lives in the core package so compaction's token trigger can weigh the next prompt without any
chat code. The prefix (system + tools) is byte-identical from turn to turn and the history only
grows at its end, so llama-server's prompt cache keeps everything before the new turn.

Chat templates of small models (Gemma among them) insist on alternating user/assistant roles after
one leading system message, so history messages of other roles are rendered as labelled text and
consecutive messages of one role are joined.
"""
from __future__ import annotations

from typing import Any, Iterable, Sequence

SYSTEM = (
    "You are Forge, a personal assistant running on the user's own machine. You answer in the "
    "user's language. You either answer directly, or call one tool.\n"
    "Reply with one JSON object and nothing else:\n"
    '{"action": "chat", "content": "<your answer>"}\n'
    'or {"action": "<tool>", "payload": {...}, "done": true}\n'
    'Set "done": false only when you must read the tool result before answering.\n'
    "Plain text that is not JSON is taken as a chat answer."
)

TOOL_DESCRIPTIONS: dict[str, str] = {
    "memory": (
        'memory: the user\'s deliberate memory. {"action": "memory", "payload": {"op": "remember", '
        '"kind": "fact|decision|todo|preference|correction", "content": "..."}} when the user states '
        'something to keep; {"action": "memory", "payload": {"op": "recall", "query": "..."}} when the '
        "user asks about something they told you before."
    ),
    "files": (
        'files: read-only access to the workspace. {"action": "files", "payload": {"op": "read", '
        '"path": "relative/path"}} or {"op": "list", "path": "."}.'
    ),
    "git": (
        'git: read-only git in the workspace. {"action": "git", "payload": {"op": "status|log|diff|show", '
        '"args": "..."}}.'
    ),
    "shell": (
        'shell: run one shell command, only when the user explicitly asks for it. {"action": "shell", '
        '"payload": {"command": "..."}}.'
    ),
    "web_fetch": (
        'web_fetch: read one web page the user named. {"action": "web_fetch", "payload": {"url": '
        '"https://..."}}. Only a URL or host that appears in the user\'s message.'
    ),
    "sysadmin": (
        'sysadmin: collect logs from one of the user\'s machines and answer from them. '
        '{"action": "sysadmin", "payload": {"target": "<machine named by the user>", '
        '"question": "..."}}.'
    ),
    "delegate": (
        'delegate: hand a question about one of the user\'s machines or services to the admin '
        'model, which collects its logs and answers. {"action": "delegate", "payload": '
        '{"target": "<machine named by the user>"}}.'
    ),
}

# How non-chat history messages appear inside the conversation.
LABELS = {"system": "[memory note]", "tool": "[tool result]"}


def system_text(enabled_tools: Sequence[str]) -> str:
    tools = [TOOL_DESCRIPTIONS[t] for t in enabled_tools if t in TOOL_DESCRIPTIONS]
    if not tools:
        return SYSTEM + "\nNo tools are available: always answer with chat."
    return SYSTEM + "\nTools:\n" + "\n".join(f"- {t}" for t in tools)


def _as_chat(role: str, content: str) -> tuple[str, str]:
    if role in ("user", "assistant"):
        return role, content
    return "user", f"{LABELS.get(role, f'[{role}]')} {content}"


def render(enabled_tools: Sequence[str], history: Iterable[Any],
           user_input: str | None = None) -> list[dict[str, str]]:
    """The chat messages of the next router call. `history` items need `.role` and `.content`."""
    turns: list[dict[str, str]] = []
    items = [(m.role, m.content) for m in history]
    if user_input is not None:
        items.append(("user", user_input))
    for role, content in items:
        role, text = _as_chat(role, content)
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"] += "\n\n" + text
        else:
            turns.append({"role": role, "content": text})
    if turns and turns[0]["role"] != "user":
        turns.insert(0, {"role": "user", "content": "(earlier conversation)"})
    return [{"role": "system", "content": system_text(enabled_tools)}, *turns]


def as_text(messages: Sequence[dict[str, str]]) -> str:
    """A flat rendering for token counting: role headers and contents, in order."""
    return "\n".join(f"<{m['role']}>\n{m['content']}" for m in messages)
