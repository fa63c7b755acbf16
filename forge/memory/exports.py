"""ChatGPT and Claude data exports, read as a stream of conversations (`forge history import
--from chatgpt|claude`).

Both exports hold a `conversations.json`: one JSON array of conversations, read here one
conversation at a time with ijson, so a several-hundred-MB export never sits in memory whole. The
file may be that JSON itself or the export's `.zip` (read from inside the archive, not unpacked).

- ChatGPT: a conversation is a tree (`mapping`: node id -> {message, parent, children}). The
  conversation as the user last saw it is the path from `current_node` back to the root, so
  branches edited away are left out. Only `user` and `assistant` messages addressed to everyone
  (`recipient` "all") whose content is `text` or `multimodal_text` are kept; system, tool and
  browsing messages, tool calls, hidden messages (`is_visually_hidden_from_conversation`) and the
  user's custom instructions are left out. An image part becomes `[image]`.
- Claude: `chat_messages` in order; `human` -> user, `assistant` -> assistant; the text of the
  `text` content blocks when `text` is empty; each attachment's `extracted_content` appended after
  a line `[attachment: FILE_NAME]`.

Every message keeps its provenance in `ref`: `KIND:CONVERSATION_ID/MESSAGE_ID "TITLE"`; the part
before the space is the message's key (`key_of`), the title is informative (a renamed conversation
keeps its keys). Times become ISO 8601 UTC with a `Z`.
"""
from __future__ import annotations

import contextlib
import json
import zipfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any, Iterator

from ..core.errors import ForgeError

KINDS = ("chatgpt", "claude")
IMAGE = "[image]"


class BadExportError(ForgeError):
    """A file that is no export, or a conversation in it that cannot be read."""


@dataclass
class ExportMessage:
    key: str          # KIND:CONVERSATION_ID/MESSAGE_ID, the idempotence key
    role: str         # user | assistant
    content: str
    ts: str | None
    ref: str          # the key and the conversation's title


@dataclass
class Conversation:
    kind: str
    id: str
    title: str
    messages: list[ExportMessage] = field(default_factory=list)


@dataclass
class Bad:
    """A conversation that could not be read: its position in the file and why."""

    index: int
    conversation: str | None
    problem: str

    def __str__(self) -> str:
        if self.problem.startswith(("the JSON", "the .zip")):
            return self.problem   # the file itself is broken there, not one conversation
        which = f" ({self.conversation})" if self.conversation else ""
        return f"conversation {self.index}{which}: {self.problem}"


def key_of(ref: str | None) -> str | None:
    """The idempotence key of a history message's ref, when an export import wrote it."""
    if not ref or not ref.startswith(tuple(k + ":" for k in KINDS)):
        return None
    return ref.split(" ", 1)[0]


def make_ref(kind: str, conversation_id: str, message_id: str, title: str) -> str:
    return f"{kind}:{conversation_id}/{message_id} {json.dumps(title, ensure_ascii=False)}"


# -- opening --------------------------------------------------------------------------------------

@contextlib.contextmanager
def open_export(path: Path) -> Iterator[IO[bytes]]:
    """The bytes of conversations.json: the file itself, or the member of an export .zip."""
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            names = [n for n in archive.namelist() if n.rsplit("/", 1)[-1] == "conversations.json"]
            if not names:
                raise BadExportError(f"{path}: a .zip without a conversations.json; is it a "
                                     "ChatGPT or Claude data export?")
            with archive.open(min(names, key=len)) as member:
                yield member
        return
    try:
        handle = open(path, "rb")
    except OSError as e:
        raise BadExportError(f"{path}: {e.strerror}") from None
    with handle:
        yield handle


def sniff(path: Path) -> str | None:
    """chatgpt, claude, or None (not an export: a Forge transcript, or garbage) from the first
    conversation's keys, read as parse events: a file cut inside its first conversation is still
    recognised (and then refused as truncated)."""
    import ijson

    try:
        with open_export(path) as stream:
            for prefix, event, value in ijson.parse(stream):
                if prefix == "item" and event == "map_key":
                    if value in ("mapping", "current_node"):
                        return "chatgpt"
                    if value == "chat_messages":
                        return "claude"
                elif prefix == "item" and event == "end_map" or prefix == "" and event in (
                        "start_map", "string", "number", "boolean", "null"):
                    return None
    except BadExportError:
        raise
    except Exception:  # noqa: BLE001  (ijson's errors, a bad zip: not an export)
        return None
    return None


def conversations(path: Path, kind: str) -> Iterator[Conversation | Bad]:
    """Each conversation of the export in file order, or a Bad for one that cannot be read. A
    file broken mid-way (truncated, not JSON) yields one last Bad: nothing after it can be read."""
    import ijson

    read = _chatgpt if kind == "chatgpt" else _claude
    index = 0
    try:
        with open_export(path) as stream:
            for index, raw in enumerate(ijson.items(stream, "item", use_float=True), 1):
                try:
                    yield read(raw)
                except (KeyError, TypeError, ValueError, AttributeError, _Malformed) as e:
                    cid = raw.get("conversation_id") or raw.get("id") or raw.get("uuid") \
                        if isinstance(raw, dict) else None
                    yield Bad(index, str(cid) if cid else None, _why(e))
    except ijson.JSONError as e:
        yield Bad(index + 1, None, f"the JSON is broken after conversation {index} "
                                   f"({str(e).splitlines()[0][:120]}); is the file truncated?")
    except (zipfile.BadZipFile, EOFError, OSError) as e:
        yield Bad(index + 1, None, f"the .zip is damaged after conversation {index} ({e})")


class _Malformed(Exception):
    pass


def _why(error: Exception) -> str:
    if isinstance(error, KeyError):
        return f"missing field {error.args[0]!r}"
    return str(error) or type(error).__name__


# -- ChatGPT --------------------------------------------------------------------------------------

def _chatgpt(raw: Any) -> Conversation:
    if not isinstance(raw, dict):
        raise _Malformed("not an object")
    mapping = raw["mapping"]
    if not isinstance(mapping, dict):
        raise _Malformed("mapping is not an object")
    cid = str(raw.get("conversation_id") or raw["id"])
    title = str(raw.get("title") or "")
    conversation = Conversation("chatgpt", cid, title)
    for node in _chatgpt_path(mapping, raw.get("current_node")):
        message = node.get("message")
        if not message:
            continue
        text = _chatgpt_text(message)
        if text is None:
            continue
        mid = str(message.get("id") or node.get("id"))
        conversation.messages.append(ExportMessage(
            key=f"chatgpt:{cid}/{mid}", role=message["author"]["role"], content=text,
            ts=_epoch(message.get("create_time")), ref=make_ref("chatgpt", cid, mid, title)))
    return conversation


def _chatgpt_path(mapping: dict[str, Any], current: Any) -> list[dict[str, Any]]:
    """The nodes from the root to `current_node`, in order. Without a current node (very old
    exports), the last child at each step from the root."""
    if current is None:
        roots = [n for n in mapping.values() if not n.get("parent")]
        if not roots:
            return []
        path, node = [], roots[0]
        while node is not None:
            path.append(node)
            children = node.get("children") or []
            node = mapping.get(children[-1]) if children else None
        return path
    if current not in mapping:
        raise _Malformed(f"current_node {current!r} is not in its mapping")
    path, seen, node_id = [], set(), current
    while node_id is not None:
        if node_id in seen:
            raise _Malformed("its message tree has a cycle")
        seen.add(node_id)
        node = mapping.get(node_id)
        if node is None:
            raise _Malformed(f"message {node_id!r} names a parent that is not in its mapping")
        path.append(node)
        node_id = node.get("parent")
    return path[::-1]


def _chatgpt_text(message: dict[str, Any]) -> str | None:
    """The text a person saw, or None for a message Forge leaves out."""
    role = message["author"]["role"]
    if role not in ("user", "assistant"):
        return None
    metadata = message.get("metadata") or {}
    if metadata.get("is_visually_hidden_from_conversation") or metadata.get("is_user_system_message"):
        return None
    if message.get("recipient", "all") != "all":
        return None   # a tool call (python, browser, dalle...)
    content = message.get("content") or {}
    if content.get("content_type") not in ("text", "multimodal_text"):
        return None
    pieces = []
    for part in content.get("parts") or []:
        if isinstance(part, str):
            if part:
                pieces.append(part)
        elif isinstance(part, dict):
            if "image" in str(part.get("content_type", "")) or "asset_pointer" in part:
                pieces.append(IMAGE)
            elif isinstance(part.get("text"), str) and part["text"]:
                pieces.append(part["text"])
        elif part is not None:
            raise _Malformed(f"message {message.get('id')!r} has a part that is neither text "
                             "nor an object")
    text = "\n".join(pieces).strip()
    return text or None


def _epoch(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise _Malformed(f"create_time {value!r} is not a number of seconds")
    return datetime.fromtimestamp(value, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# -- Claude ---------------------------------------------------------------------------------------

ROLES_CLAUDE = {"human": "user", "assistant": "assistant"}


def _claude(raw: Any) -> Conversation:
    if not isinstance(raw, dict):
        raise _Malformed("not an object")
    cid = str(raw["uuid"])
    title = str(raw.get("name") or "")
    messages = raw["chat_messages"]
    if not isinstance(messages, list):
        raise _Malformed("chat_messages is not a list")
    conversation = Conversation("claude", cid, title)
    for message in messages:
        sender = message["sender"]
        if sender not in ROLES_CLAUDE:
            raise _Malformed(f"message {message.get('uuid')!r} has an unknown sender {sender!r}")
        text = _claude_text(message)
        if not text:
            continue
        mid = str(message["uuid"])
        conversation.messages.append(ExportMessage(
            key=f"claude:{cid}/{mid}", role=ROLES_CLAUDE[sender], content=text,
            ts=_iso(message.get("created_at")), ref=make_ref("claude", cid, mid, title)))
    return conversation


def _claude_text(message: dict[str, Any]) -> str:
    text = message.get("text") or ""
    if not text.strip():
        blocks = message.get("content") or []
        text = "\n".join(b["text"] for b in blocks
                         if isinstance(b, dict) and b.get("type") == "text" and b.get("text"))
    pieces = [text.strip()] if text.strip() else []
    for attachment in message.get("attachments") or []:
        extracted = attachment.get("extracted_content") or ""
        if extracted.strip():
            pieces.append(f"[attachment: {attachment.get('file_name') or 'unnamed'}]\n"
                          f"{extracted.strip()}")
    return "\n".join(pieces)


def _iso(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise _Malformed(f"created_at {value!r} is not a time")
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise _Malformed(f"created_at {value!r} is not an ISO 8601 time") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=timezone.utc)
    return parsed.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
