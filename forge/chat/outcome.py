"""A turn's outcome, computed once on the single exit path.

`ok` is a rendering directive: show the run as a message, not a crash. `not_answered` is the
verdict: a documented reason (forge.store.traces.NOT_ANSWERED_REASONS) or None. The same value is
written to the trace and marks the exchange `answered: false` in the history, which is what
keeps it out of the store at compaction time, days later.

Which outcomes are persisted (only genuine answers are kept):
- a dispatch failure (ok=False) never is;
- a placeholder (empty, garbled, a loop, a leak) or an interrupted turn never is — saving one
  would feed the confusion back as context on the next turn;
- a refusal or a tool failure is, marked `answered: false`, so the history shows what happened
  and compaction leaves it out;
- a reply that starts with one of Forge's fixed non-answer markers is marked the same way even
  when no step reported it (the text says so: non-answers stay out of the store).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..memory import non_answer

NOT_PERSISTED = frozenset({
    "placeholder_empty", "placeholder_garbled", "placeholder_repetition", "placeholder_leak",
    "interrupted",
})


@dataclass(frozen=True)
class Outcome:
    ok: bool
    not_answered: str | None
    error: str | None
    persist: bool

    @property
    def answered(self) -> bool:
        return self.ok and self.not_answered is None


def decide(*, reply: str | None, reason: str | None = None, error: str | None = None) -> Outcome:
    """The one place a turn's verdict is made."""
    if error is not None:
        return Outcome(ok=False, not_answered=None, error=error, persist=False)
    if reason is None and reply is not None and non_answer.is_non_answer(reply):
        reason = "non_answer_reply"
    return Outcome(ok=True, not_answered=reason, error=None,
                   persist=reason not in NOT_PERSISTED)
