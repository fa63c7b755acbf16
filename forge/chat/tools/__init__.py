"""The router's tools. Each takes a payload and returns a result string, never raises.

A failure is a result string that starts with one of Forge's fixed markers (`Tool error:` or
`[error]`, see `forge.memory.non_answer`) and carries a `not_answered` reason: the router treats it as
an ordinary, if unhelpful, tool result, and the turn still ends as a message, not a crash.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable

from ...memory import non_answer
from ...core.errors import ForgeError
from ...core.log import log
from ...store.traces import LLMUsage

# tool name -> module under forge.chat.tools exposing `run(ctx, payload) -> ToolResult`
TOOLS = {"memory": "memory", "files": "files", "git": "git", "shell": "shell",
         "web_fetch": "web_fetch", "sysadmin": "sysadmin", "delegate": "delegate"}


@dataclass
class ToolContext:
    """What a tool may use besides its payload."""

    settings: Any
    turn_text: str                       # the user's turn, for the question rule
    interactive: bool = False            # a human can answer y/N (the REPL)
    confirm: Callable[[str], bool] | None = None
    client: Any = None                   # forge.core.llm.ChatClient, for the recall graph's synthesis
    usage: LLMUsage = field(default_factory=LLMUsage)
    on_token: Callable[[str], None] | None = None


@dataclass
class ToolResult:
    text: str
    not_answered: str | None = None      # a documented reason (forge.store.traces) when it answers nothing
    final: bool = False                  # already an answer for the user (the recall graph)
    streamed: bool = False               # the text already went out through on_token
    from_model: bool = False             # model output: checked for placeholders like the router's
    instructions: tuple[str, ...] = ()   # prompt texts a from_model answer must not echo
    trace: dict[str, Any] | None = None  # names only (a host, a target, command names) for the
                                         # trace step; never content


def failure(message: str, *, reason: str = "tool_error") -> ToolResult:
    return ToolResult(f"{non_answer.TOOL_ERROR} {message}", not_answered=reason)


def dispatch(name: str, payload: dict[str, Any], ctx: ToolContext) -> ToolResult:
    """Run one tool. Unknown or disabled tools, bad payloads and tool crashes become results."""
    if name not in ctx.settings.enabled_tools or name not in TOOLS:
        enabled = ", ".join(ctx.settings.enabled_tools) or "none"
        return failure(f"no tool named {name!r} is enabled (ENABLED_TOOLS: {enabled})")
    if not isinstance(payload, dict):
        return failure(f"{name}: the payload must be a JSON object")
    module = importlib.import_module(f"forge.chat.tools.{TOOLS[name]}")
    try:
        return module.run(ctx, payload)
    except ForgeError as e:
        return failure(f"{name}: {e}")
    except Exception as e:  # whatever a tool raises is a result, never a failed turn
        log.info("tool %s failed: %s: %s", name, type(e).__name__, e)
        text = str(e).splitlines()[0] if str(e) else ""
        return failure(f"{name}: {type(e).__name__}: {text}" if text else f"{name}: {type(e).__name__}")
