"""The sysadmin tool: collect a log block from a target of the inventory, then answer a question
from it. Off unless `sysadmin` is in ENABLED_TOOLS.

    {"action": "sysadmin", "payload": {"target": "nas", "command": "journal",
                                       "args": {"unit": "nginx"}, "question": "why did nginx stop?"}}

Only commands of the inventory run (forge.chat.tools.inventory), as argument lists, with
`SYSADMIN_TIMEOUT` and the last `SYSADMIN_MAX_BYTES` of their output kept; nothing the model
writes becomes a shell string. An unknown target is `[cible introuvable]`, a failed collection
(a command or an argument the inventory does not allow, ssh that cannot connect, a non-zero exit,
a timeout) is `[collecte impossible]`, in the language of the user's turn (forge.memory.non_answer).

Then one model call answers the question from the block (the chat server, or for a delegated turn
the second model at DELEGATE_URL). Whether that model can tell that a block does not answer the
question is a judgement, measured by bench/chat_model.py verdict, not filtered by a phrase rule.
The trace step records the target and the command name, never the block (a trace holds no
tool output).
"""
from __future__ import annotations

import os
import selectors
import signal
import subprocess
import time
from dataclasses import dataclass
from typing import Any, Callable

from ...memory import non_answer
from ...store.traces import LLMUsage
from . import ToolContext, ToolResult, failure
from .inventory import InventoryError, Target, load

ANSWER_MAX_TOKENS = 512
PREAMBLE = (
    "You answer a question about the user's machine from a block of its logs, collected just "
    "now and shown below. Answer in the user's language, in a few plain sentences, without JSON. "
    "Use only what the block shows. When the block does not answer the question, say so plainly "
    "instead of guessing."
)


@dataclass
class Collection:
    target: str
    commands: list[str]     # the inventory command names that ran, in order
    block: str              # their output, one section per command when there are several
    cut: bool               # older output was dropped to fit SYSADMIN_MAX_BYTES


class CollectFailed(Exception):
    """A collection that failed; the message is the `why` of [collecte impossible]."""


class Unreachable(CollectFailed):
    """ssh could not connect or log in: no other command on that target can do better."""


class UnknownTarget(Exception):
    def __init__(self, target: str | None, known: list[str]):
        super().__init__(target)
        self.target, self.known = target, known


def inventory(settings: Any) -> dict[str, Target]:
    if not settings.sysadmin_inventory:
        raise InventoryError("no inventory: set SYSADMIN_INVENTORY to a targets file "
                             "(example: deploy/targets.yaml)")
    return load(settings.sysadmin_inventory)


def collect(settings: Any, targets: dict[str, Target], target: str | None,
            command: Any = None, args: dict[str, Any] | None = None) -> Collection:
    """Run inventory commands on one target, all within SYSADMIN_TIMEOUT. Raises UnknownTarget
    or CollectFailed.

    `command` names one command (or a list of them). Without it, every command of the target
    whose arguments are all given (in `args` or by the inventory's defaults) runs, in inventory
    order: the router asks for a target and a question, the inventory says what to read there.
    One failing command among several is reported in the block; ssh that cannot connect, or
    every command failing, fails the collection.
    """
    found = targets.get(str(target)) if target else None
    if found is None:
        raise UnknownTarget(target, sorted(targets))
    plan = _plan(found, command, args)
    deadline = time.monotonic() + settings.sysadmin_timeout
    sections, ran, cut, failures = [], [], False, []
    for name, command_argv in plan:
        try:
            out, was_cut = _run(found.argv(command_argv), deadline=deadline,
                                timeout=settings.sysadmin_timeout,
                                cap=settings.sysadmin_max_bytes, via_ssh=not found.local)
        except Unreachable:
            raise
        except CollectFailed as e:
            if len(plan) == 1:
                raise
            failures.append(name)
            out, was_cut = f"(this command failed: {e})\n", False
        ran.append(name)
        cut = cut or was_cut
        sections.append(out if len(plan) == 1 else f"### {name}\n{out}")
    if len(failures) == len(plan):
        raise CollectFailed(f"every command failed ({', '.join(failures)})")
    return Collection(found.name, ran, "\n".join(sections), cut)


def _plan(found: Target, command: Any, args: Any) -> list[tuple[str, list[str]]]:
    """(command name, argument list) for each command to run, arguments checked."""
    if args is not None and not isinstance(args, dict):
        raise CollectFailed("the arguments must be a JSON object of name: value")
    args = args or {}
    if command and not isinstance(command, (str, list)):
        raise CollectFailed("`command` is a command name or a list of them")
    names = [str(c) for c in ([command] if isinstance(command, str) else (command or []))]
    for name in names:
        if name not in found.commands:
            raise CollectFailed(f"{name!r} is not an allowed command there "
                                f"(allowed: {', '.join(found.commands)})")
    if not names:
        plan = []
        for spec in found.commands.values():
            try:
                plan.append((spec.name, spec.build({k: v for k, v in args.items() if k in spec.args})))
            except ValueError:
                continue        # needs an argument nobody gave: not part of the default read
        if not plan:
            raise CollectFailed("every command there needs an argument; name one "
                                f"(allowed: {', '.join(found.commands)})")
        return plan
    specs = [found.commands[name] for name in names]
    unknown = [k for k in args if not any(k in spec.args for spec in specs)]
    if unknown and len(specs) > 1:
        raise CollectFailed(f"none of {', '.join(names)} takes the argument {unknown[0]!r}")
    try:
        if len(specs) == 1:
            return [(specs[0].name, specs[0].build(args))]
        return [(spec.name, spec.build({k: v for k, v in args.items() if k in spec.args}))
                for spec in specs]
    except ValueError as e:
        raise CollectFailed(str(e)) from None


def _run(argv: list[str], *, deadline: float, timeout: float, cap: int,
         via_ssh: bool) -> tuple[str, bool]:
    """Run `argv` (no shell) in its own process group until `deadline` (time.monotonic());
    keep the last `cap` bytes of stdout. `timeout` is only for the message."""
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True, cwd="/")
    except FileNotFoundError:
        raise CollectFailed(f"{argv[0]} is not installed here") from None
    except OSError as e:
        raise CollectFailed(f"{argv[0]} could not start: {e.strerror}") from None
    out, err = bytearray(), bytearray()
    cut = False
    try:
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ, out)
            sel.register(proc.stderr, selectors.EVENT_READ, err)
            while sel.get_map():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise CollectFailed(f"no result within {timeout:g}s (SYSADMIN_TIMEOUT)")
                for key, _ in sel.select(timeout=min(left, 0.5)):
                    chunk = os.read(key.fileobj.fileno(), 65536)
                    if not chunk:
                        sel.unregister(key.fileobj)
                        continue
                    buf = key.data
                    buf += chunk
                    if len(buf) > cap:
                        del buf[:len(buf) - cap]
                        cut = cut or buf is out
        code = proc.wait(timeout=max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        raise CollectFailed(f"no result within {timeout:g}s (SYSADMIN_TIMEOUT)") from None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    if code != 0:
        last = err.decode("utf-8", errors="replace").strip().splitlines()
        detail = last[-1][:200] if last else "no message"
        if via_ssh and code == 255:
            raise Unreachable(f"ssh could not connect or log in ({detail})")
        raise CollectFailed(f"{os.path.basename(argv[0]) if not via_ssh else 'the command'} "
                            f"exited with status {code} ({detail})")
    text = out.decode("utf-8", errors="replace")
    if cut:
        newline = text.find("\n")
        text = text[newline + 1:] if 0 <= newline < 200 else text   # no half first line
    return text, cut


# -- answering from the block --------------------------------------------------------------------
def answer_messages(collection: Collection, question: str) -> list[dict[str, str]]:
    """The answer prompt: the fixed preamble first (cached), then the question, then the block."""
    note = " (older lines were cut to fit SYSADMIN_MAX_BYTES)" if collection.cut else ""
    block = collection.block.strip() or "(the command printed nothing)"
    commands = ", ".join(collection.commands)
    return [{"role": "system", "content": PREAMBLE},
            {"role": "user", "content": f"Question: {question.strip()}\n\nLog block from "
                                        f"{collection.target} ({commands}){note}:"
                                        f"\n```\n{block}\n```"}]


def answer(collection: Collection, question: str, *, client: Any, usage: LLMUsage,
           on_token: Callable[[str], None] | None = None) -> ToolResult:
    completion = client.complete(answer_messages(collection, question),
                                 max_tokens=ANSWER_MAX_TOKENS, stream=on_token is not None,
                                 on_token=on_token)
    usage.add_completion(completion)
    return ToolResult(completion.content, final=True, streamed=on_token is not None,
                      from_model=True, instructions=(PREAMBLE,))


def collect_and_answer(ctx: ToolContext, target: str | None, command: str | None,
                       args: Any, question: str, *, client: Any,
                       targets: dict[str, Target] | None = None) -> ToolResult:
    """Collect, then answer; every refusal and failure is a marked non-answer result.
    `targets`: the inventory, when the caller has read it already (delegation)."""
    named = [str(c) for c in command] if isinstance(command, list) else [str(command)] if command else []
    trace = {"target": str(target) if target else None, "commands": named}
    try:
        if targets is None:
            targets = inventory(ctx.settings)
        collection = collect(ctx.settings, targets, target, command, args)
    except InventoryError as e:
        result = failure(f"sysadmin: {e}")
    except UnknownTarget as e:
        result = ToolResult(non_answer.target_not_found(ctx.turn_text, e.target, e.known),
                            not_answered="target_not_found")
    except CollectFailed as e:
        result = ToolResult(non_answer.collect_failed(ctx.turn_text, str(target), str(e)),
                            not_answered="collect_failed")
    else:
        trace["commands"] = collection.commands
        result = answer(collection, question, client=client, usage=ctx.usage,
                        on_token=ctx.on_token)
    result.trace = trace
    return result


def run(ctx: ToolContext, payload: dict[str, Any]) -> ToolResult:
    question = str(payload.get("question") or "").strip() or ctx.turn_text
    return collect_and_answer(ctx, payload.get("target"), payload.get("command"),
                              payload.get("args"), question, client=ctx.client)
