"""The rolling conversation history: one readable JSON file (stable message ids, the cap,
pinning, a lock held only to read and rewrite).

Layout of `memory.json`::

    {"version": 1, "history_id": "h-5f0c9e2a41d7b3e8", "next_id": 42, "compaction_pending": false,
     "messages": [{"id": 7, "role": "user", "content": "...", "pinned": false,
                   "answered": true, "ts": "2026-11-29T22:31:05Z", "ref": null}, ...]}

Ids come from `next_id`, which only grows, so an id is never reused, not even after a clear.
`history_id` names this history among every machine's (a random id written on the first write,
and on the first write of an older file that has none): archive entries carry it in their refs,
so message ids of two machines compacting into one shared store never collide.
The lock is held only to read and to rewrite (`edit`), never while embedding or waiting for a
model. A file that does not parse is never overwritten.
"""
from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from ..core.errors import CorruptFileError, ForgeError, NotFoundError
from ..core.fileio import atomic_write, locked
from ..core.log import log
from ..core.secret_scan import Redactions, prepare
from ..core.timestamps import utc_now  # noqa: F401  (history.utc_now: compaction, tests)

ROLES = ("user", "assistant", "system", "tool")
FORMAT_VERSION = 1


@dataclass
class Message:
    id: int
    role: str
    content: str
    pinned: bool = False
    answered: bool = True
    ts: str = ""
    ref: str | None = None
    # Compaction marks its pointer/summary here, e.g. {"compaction": "pointer", "entries": [3, 4]}.
    meta: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # False: `ts` is when an import stored it, its record saying no time (written as
    # `"ts_known": false`, and only then: a file with every time known reads as before).
    ts_known: bool = True

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"id": self.id, "role": self.role, "content": self.content,
                             "pinned": self.pinned, "answered": self.answered, "ts": self.ts,
                             "ref": self.ref}
        if not self.ts_known:
            d["ts_known"] = False
        if self.meta is not None:
            d["meta"] = self.meta
        d.update(self.extra)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Message":
        known = {"id", "role", "content", "pinned", "answered", "ts", "ref", "meta", "ts_known"}
        return cls(id=int(d["id"]), role=str(d["role"]), content=str(d.get("content", "")),
                   pinned=bool(d.get("pinned", False)), answered=bool(d.get("answered", True)),
                   ts=str(d.get("ts", "")), ref=d.get("ref"), meta=d.get("meta"),
                   ts_known=d.get("ts_known") is not False,
                   extra={k: v for k, v in d.items() if k not in known})

    @property
    def is_compaction(self) -> bool:
        return bool(self.meta and self.meta.get("compaction"))


@dataclass
class NewMessage:
    """A message before it has an id: what callers hand to `append`."""

    role: str
    content: str
    answered: bool = True
    ref: str | None = None
    ts: str | None = None
    pinned: bool = False
    meta: dict[str, Any] | None = None
    # False: an import's record without a time (`ts` is then the import's: see Message).
    ts_known: bool = True

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ForgeError(f"unknown role {self.role!r}; expected one of {', '.join(ROLES)}")


@dataclass
class HistoryDoc:
    next_id: int = 1
    messages: list[Message] = field(default_factory=list)
    # Set when compaction should have archived messages and could not: the cap then
    # drops nothing until a compaction succeeds.
    compaction_pending: bool = False
    history_id: str | None = None   # None until the first write (or in an older file)

    def to_json(self) -> bytes:
        doc: dict[str, Any] = {"version": FORMAT_VERSION}
        if self.history_id is not None:
            doc["history_id"] = self.history_id
        doc |= {"next_id": self.next_id,
               "compaction_pending": self.compaction_pending,
               "messages": [m.to_dict() for m in self.messages]}
        return (json.dumps(doc, ensure_ascii=False, indent=1) + "\n").encode("utf-8")

    def by_id(self, message_id: int) -> Message:
        for m in self.messages:
            if m.id == message_id:
                return m
        raise NotFoundError(f"no message #{message_id} in the history")

    def new_id(self) -> int:
        value = self.next_id
        self.next_id += 1
        return value


def parse(path: Path, data: bytes) -> HistoryDoc:
    try:
        raw = json.loads(data.decode("utf-8")) if data.strip() else {}
    except UnicodeDecodeError as e:
        raise CorruptFileError(f"{path}: not UTF-8 at byte {e.start}; the file was left untouched") from None
    except json.JSONDecodeError as e:
        raise CorruptFileError(
            f"{path}: not valid JSON at line {e.lineno} column {e.colno} ({e.msg}); "
            "the file was left untouched"
        ) from None
    except RecursionError:
        raise CorruptFileError(f"{path}: nested too deeply to be a Forge history; "
                               "the file was left untouched") from None
    try:
        if isinstance(raw, list):
            # The older layout: a bare list of {role, content}. Ids are assigned in order.
            doc = HistoryDoc()
            for item in raw:
                doc.messages.append(Message(id=doc.new_id(), role=item["role"],
                                            content=item.get("content", ""),
                                            pinned=bool(item.get("pinned", False)),
                                            ts=item.get("ts", "")))
            return doc
        if not isinstance(raw, dict):
            raise TypeError("top level is neither an object nor a list")
        messages = [Message.from_dict(m) for m in raw.get("messages", [])]
        highest = max((m.id for m in messages), default=0)
        history_id = raw.get("history_id")
        return HistoryDoc(next_id=max(int(raw.get("next_id", 1)), highest + 1),
                          messages=messages,
                          compaction_pending=bool(raw.get("compaction_pending", False)),
                          history_id=str(history_id) if history_id else None)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise CorruptFileError(
            f"{path}: not a Forge history ({type(e).__name__}: {e}); the file was left untouched"
        ) from None


def read(path: Path) -> HistoryDoc:
    """A consistent snapshot without the lock: writers replace the file by rename."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return HistoryDoc()
    except NotADirectoryError as e:  # FORGE_DATA_DIR names a file
        from ..core.fileio import folder_error

        raise folder_error(path, e) from None
    return parse(path, data)


@contextlib.contextmanager
def edit(path: Path, *, after_write: Callable[[], None] | None = None,
         redactions: Redactions | None = None) -> Iterator[HistoryDoc]:
    """Read under the lock, let the caller change the document, rewrite atomically.

    Nothing is written if the body raises. Keep the body short: other processes wait.
    `after_write` runs once the file is replaced, the lock still held (an export import records
    the keys it wrote before any compaction can move those messages).

    Every message the body added or whose text it changed has its secrets replaced by markers
    before the write (`redactions`: the caller's tally, which also says FORGE_KEEP_SECRETS;
    None: redact, uncounted), so no writer of the history can skip the scan. Messages already
    in the file are not rescanned here: `forge memory scan --redact` cleans those.
    """
    with locked(path):
        doc = read(path)
        before = doc.to_json()
        texts = {m.id: (m.content, m.ref) for m in doc.messages}
        yield doc
        found = redactions if redactions is not None else Redactions()
        for m in doc.messages:
            if texts.get(m.id) != (m.content, m.ref):
                m.content = found.text(m.content)
                if isinstance(m.ref, str):
                    m.ref = found.text(m.ref)
        if doc.history_id is None and (path.exists() or doc.to_json() != before):
            doc.history_id = new_history_id()
        after = doc.to_json()
        if after != before:
            atomic_write(path, after)
            if after_write is not None:
                after_write()


def new_history_id() -> str:
    import secrets

    return "h-" + secrets.token_hex(8)


def ensure_history_id(path: Path) -> str | None:
    """This history's id, written into the file first when it has none yet (an older file);
    None when there is no history file."""
    with edit(path) as doc:
        pass
    return doc.history_id


def apply_cap(doc: HistoryDoc, max_history: int) -> list[Message]:
    """The hard cap: drop the oldest non-pinned messages beyond it; return what was dropped.

    Never drops while a compaction is pending (those messages were never archived).
    """
    excess = len(doc.messages) - max_history
    if excess <= 0:
        return []
    if doc.compaction_pending:
        log.warning("history holds %d messages, over MEMORY_MAX_HISTORY=%d: compaction could not "
                    "archive them yet, so none is dropped (run `forge compact`)",
                    len(doc.messages), max_history)
        return []
    dropped: list[Message] = []
    keep: list[Message] = []
    for m in doc.messages:
        if excess > 0 and not m.pinned:
            dropped.append(m)
            excess -= 1
        else:
            keep.append(m)
    doc.messages = keep
    if excess > 0:
        log.warning("pinned messages alone exceed MEMORY_MAX_HISTORY=%d: the history holds %d",
                    max_history, len(keep))
    return dropped


def append(path: Path, messages: Iterable[NewMessage], *, max_history: int,
           redactions: Redactions | None = None,
           after_write: Callable[[], None] | None = None) -> list[Message]:
    """Append messages with fresh ids, apply the cap, return the stored messages (their secrets
    replaced by markers, counted in `redactions`: see `edit`)."""
    messages = list(messages)
    if redactions is None or not redactions.keep:
        prepare(m.content for m in messages)   # the scanner's load, before the lock
    with edit(path, after_write=after_write, redactions=redactions) as doc:
        stored = [_materialise(doc, m) for m in messages]
        doc.messages.extend(stored)
        apply_cap(doc, max_history)
    return stored


def _materialise(doc: HistoryDoc, m: NewMessage) -> Message:
    return Message(id=doc.new_id(), role=m.role, content=m.content, pinned=m.pinned,
                   answered=m.answered, ts=m.ts or utc_now(), ref=m.ref, meta=m.meta,
                   ts_known=m.ts_known)


def clear_plan(doc: HistoryDoc, *, everything: bool = False) -> list[Message]:
    """The messages `clear` would discard."""
    return [m for m in doc.messages if everything or not m.pinned]


def grep(messages: Iterable[Message], text: str) -> list[Message]:
    """Messages whose content holds `text`, ignoring case."""
    needle = text.casefold()
    return [m for m in messages if needle in m.content.casefold()]


def clear(path: Path, *, everything: bool = False) -> list[Message]:
    """Discard without archiving; pinned messages stay unless `everything`."""
    with edit(path) as doc:
        removed = clear_plan(doc, everything=everything)
        doc.messages = [] if everything else [m for m in doc.messages if m.pinned]
        if everything:
            doc.compaction_pending = False
    return removed


def exchange_ids(doc: HistoryDoc, message_id: int) -> list[int]:
    """The exchange a message belongs to: its user turn and every non-user message after it,
    up to the next user turn. A message before any user turn stands alone."""
    index = next((i for i, m in enumerate(doc.messages) if m.id == message_id), None)
    if index is None:
        raise NotFoundError(f"no message #{message_id} in the history")
    start = index
    while start > 0 and doc.messages[start].role != "user":
        start -= 1
    if doc.messages[start].role != "user":
        start = index
    end = start + 1
    while end < len(doc.messages) and doc.messages[end].role != "user":
        end += 1
    return [m.id for m in doc.messages[start:end]]


def set_pinned(path: Path, message_id: int, pinned: bool, *, only: bool = False) -> list[int]:
    """Pin (or unpin) a message. Pinning pins its whole exchange unless `only`;
    unpinning acts on the one message. Returns the ids whose flag changed."""
    with edit(path) as doc:
        doc.by_id(message_id)  # raises NotFoundError for an unknown id
        ids = [message_id] if (only or not pinned) else exchange_ids(doc, message_id)
        changed = []
        for m in doc.messages:
            if m.id in ids and m.pinned != pinned:
                m.pinned = pinned
                changed.append(m.id)
    return changed


def drawer(path: Path) -> list[Message]:
    return [m for m in read(path).messages if m.pinned]
