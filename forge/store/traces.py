"""Execution traces: one JSON line per run in `traces.jsonl`.

A record holds run_id, timestamp, user_input_preview (first 120 characters), steps (tool,
duration_ms), total_ms, ok, not_answered (a reason value or null), error, and llm (calls,
prompt_n, predicted_n, prompt_ms, predicted_ms, cache_n, models). Traces record what ran, never
tool output or file contents.

`ok` says "show as a message, not a crash"; `not_answered` is the verdict. Three states follow:
✓ answered, ∅ ran and answered nothing, ✗ failed. Reading (tail, follow) is in
forge/store/trace_read.py, re-exported here.
"""
from __future__ import annotations

import json
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..core.fileio import append_line
from ..core.secret_scan import Redactions
from ..core.settings import scrub
from ..core.timestamps import utc_now
from .trace_read import end_offset, follow, state, tail  # noqa: F401  (traces.tail and so on)

PREVIEW_CHARS = 120

# The documented `not_answered` reasons. Chat and the recall graph use only these.
NOT_ANSWERED_REASONS = {
    "placeholder_empty": "the model returned nothing",
    "placeholder_garbled": "the model returned garbled text",
    "placeholder_repetition": "the model fell into a repetition loop",
    "placeholder_leak": "the model echoed its prompt (its instructions, or your message)",
    "recall_nothing_found": "recall found nothing in the store",
    "recall_cutoff": "the distance cutoff dropped every row recall found",
    "non_answer_reply": "the reply is one of Forge's fixed non-answers",
    "tool_refused": "a tool refused to run",
    "tool_error": "a tool failed (an outage, a bad payload); its error string is the reply",
    "target_not_found": "sysadmin or delegation: the target is not in the inventory",
    "collect_failed": "sysadmin: the collection on the target failed",
    "delegation_reask": "delegation asked which machine or service the question is about",
    "interrupted": "the turn was interrupted",
}


@dataclass
class LLMUsage:
    calls: int = 0
    prompt_n: int = 0
    predicted_n: int = 0
    prompt_ms: float = 0.0
    predicted_ms: float = 0.0
    cache_n: int = 0
    models: list[str] = field(default_factory=list)

    def add(self, *, prompt_n: int = 0, predicted_n: int = 0, prompt_ms: float = 0.0,
            predicted_ms: float = 0.0, cache_n: int = 0, model: str | None = None) -> None:
        self.calls += 1
        self.prompt_n += prompt_n
        self.predicted_n += predicted_n
        self.prompt_ms += prompt_ms
        self.predicted_ms += predicted_ms
        self.cache_n += cache_n
        if model and model not in self.models:
            self.models.append(model)

    def add_completion(self, completion: Any) -> None:
        """Count one `llm.Completion` (any object with its usage fields)."""
        self.add(prompt_n=completion.prompt_n, predicted_n=completion.predicted_n,
                 prompt_ms=completion.prompt_ms, predicted_ms=completion.predicted_ms,
                 cache_n=completion.cache_n, model=completion.model)


@dataclass
class Step:
    tool: str
    duration_ms: float
    detail: dict[str, Any] | None = None   # names only: web_fetch's host, sysadmin's target and
                                           # command names; never what a tool returned


@dataclass
class TraceRecord:
    run_id: str
    timestamp: str
    user_input_preview: str
    steps: list[Step]
    total_ms: float
    ok: bool
    not_answered: str | None
    error: str | None
    llm: LLMUsage

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for step in data["steps"]:
            if step.get("detail") is None:
                step.pop("detail", None)
        return data


def new_run_id() -> str:
    return uuid.uuid4().hex[:12]


def make_record(*, run_id: str, user_input: str, steps: list[Step], started: float, ok: bool,
                not_answered: str | None, error: str | None, llm: LLMUsage) -> TraceRecord:
    """`user_input` is cut to its preview here: hand it over redacted (a key cut in two is no
    longer found by the scan `append` runs)."""
    if not_answered is not None and not_answered not in NOT_ANSWERED_REASONS:
        raise ValueError(f"undocumented not_answered reason {not_answered!r}")
    return TraceRecord(run_id=run_id, timestamp=utc_now(),
                       user_input_preview=user_input[:PREVIEW_CHARS], steps=steps,
                       total_ms=round((time.monotonic() - started) * 1000, 1), ok=ok,
                       not_answered=not_answered, error=error, llm=llm)


def append(path: Path, record: TraceRecord | dict[str, Any], *,
           redactions: Redactions | None = None) -> None:
    """One line for `record`. Every text in it has its secrets replaced by markers first (an
    error that quotes a token, a preview cut from a pasted key): `redactions` is the caller's
    tally (FORGE_KEEP_SECRETS); None redacts, uncounted."""
    data = record.to_dict() if isinstance(record, TraceRecord) else record
    data = redact_record(data, redactions if redactions is not None else Redactions())
    line = scrub(json.dumps(data, ensure_ascii=False, separators=(",", ":")))  # no database password
    append_line(path, line.encode("utf-8"))


def redact_record(value: Any, found: Redactions) -> Any:
    """A record (any JSON value) with every string's secrets replaced, counted in `found`; then
    a database URL's password left (FORGE_KEEP_SECRETS) is `***`, as everywhere Forge shows one
    (settings.scrub). The scanner reads the text as it is: scrubbed first, a URL's password
    would be `***` already, neither counted nor rewritten by `memory scan`."""
    if isinstance(value, str):
        return scrub(found.text(value))
    if isinstance(value, dict):
        return {k: redact_record(v, found) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_record(v, found) for v in value]
    return value
