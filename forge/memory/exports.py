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
keeps its keys) and cut to REF_TITLE_CHARS there: the whole title is stored once, at the head of
the conversation's first message. Times become ISO 8601 UTC with a `Z` (forge/core/checks.py).

What a file from the internet may cost is bounded: a UTF-8 BOM is read past; a conversation nested
deeper than MAX_DEPTH levels is refused (a bad conversation: `--skip-bad` leaves it out), and the
reading keeps no per-level state beyond a counter, so memory follows the largest conversation and
not the square of its depth (ijson's `items` keeps one path string per level: a 600 KB file nested
100,000 deep took 10.8 GB); an id longer than MAX_ID_CHARS, a tree whose `children` or `parent`
are not node ids, a cycle, a time out of range: refused with one line naming the conversation.
"""
from __future__ import annotations

import contextlib
import json
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Iterator

from ..core import checks
from ..core.checks import shown
from ..core.errors import ForgeError

KINDS = ("chatgpt", "claude")
IMAGE = "[image]"
MAX_DEPTH = 100          # levels of nesting inside one conversation (real exports: under 20)
MAX_ID_CHARS = 200       # a conversation's or a message's id (real ones: 36-character UUIDs)
REF_TITLE_CHARS = 100    # the title as each message's ref repeats it
BOM = b"\xef\xbb\xbf"


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
    return ref_of(f"{kind}:{conversation_id}/{message_id}", title)


def ref_of(key: str, title: str) -> str:
    """A message's ref: its key and the title cut to REF_TITLE_CHARS. Hand the title over
    redacted: a token cut in two is no longer recognised by the scan the history write runs.
    A marker is never cut in two either (`[secret: GitHub tok…` would read as a keyword and
    its value): the cut falls before it."""
    if len(title) > REF_TITLE_CHARS:
        cut = title[:REF_TITLE_CHARS - 1]
        start = cut.rfind("[secret: ")
        if start >= 0 and "]" not in cut[start:]:
            cut = cut[:start].rstrip()
        title = cut + "…"
    return f"{key} {json.dumps(title, ensure_ascii=False)}"


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
                _past_bom(member)
                yield member
        return
    try:
        handle = open(path, "rb")
    except OSError as e:
        raise BadExportError(f"{path}: {e.strerror}") from None
    with handle:
        _past_bom(handle)
        yield handle


def _past_bom(stream: IO[bytes]) -> None:
    """Leave `stream` after the UTF-8 BOM some Windows tools write, or where it was."""
    if stream.read(len(BOM)) != BOM:
        stream.seek(0)


def sniff(path: Path) -> str | None:
    """chatgpt, claude, or None (not an export: a Forge transcript, or garbage) from the first
    conversation's keys, read as parse events: a file cut inside its first conversation is still
    recognised (and then refused as truncated)."""
    import ijson

    depth = 0
    try:
        with open_export(path) as stream:
            for event, value in ijson.basic_parse(stream):
                if event in ("start_map", "start_array"):
                    if depth == 0 and event == "start_map":
                        return None
                    depth += 1
                elif event in ("end_map", "end_array"):
                    depth -= 1
                    if depth <= 1:
                        return None   # the first conversation ended, or the array did
                elif depth == 0:
                    return None       # a bare value
                elif depth == 2 and event == "map_key":
                    if value in ("mapping", "current_node"):
                        return "chatgpt"
                    if value == "chat_messages":
                        return "claude"
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
            for index, raw in enumerate(_items(ijson.basic_parse(stream, use_float=True)), 1):
                try:
                    if isinstance(raw, _TooDeep):
                        raise _Malformed(f"it is nested deeper than {MAX_DEPTH} levels (Forge "
                                         f"reads at most {MAX_DEPTH}); is it an export?")
                    yield read(raw)
                except (KeyError, TypeError, ValueError, AttributeError, _Malformed) as e:
                    yield Bad(index, _conversation_id(raw), _why(e))
    except ijson.JSONError as e:
        why = str(e).splitlines()[0][:120] if str(e) else type(e).__name__
        if "UTF8" in why:
            problem = f"the JSON is not UTF-8 after conversation {index}"
        else:
            problem = f"the JSON is broken after conversation {index} ({why.strip()})"
            if "premature EOF" in why:
                problem += "; is the file truncated?"
        yield Bad(index + 1, None, problem)
    except (zipfile.BadZipFile, EOFError, OSError) as e:
        yield Bad(index + 1, None, f"the .zip is damaged after conversation {index} ({e})")


class _TooDeep:
    """An array item nested deeper than MAX_DEPTH, built without its too-deep parts (null in
    their place): read for its id only."""

    def __init__(self, partial: Any):
        self.partial = partial


def _items(events: Iterator[tuple[str, Any]]) -> Iterator[Any]:
    """The items of the top-level JSON array, built from ijson's basic events: no path string
    per level (what makes `ijson.items` quadratic in the depth), a depth counter instead. A
    value nested deeper than MAX_DEPTH inside an item is skipped unbuilt, and the item comes
    as a _TooDeep."""
    import ijson

    depth = 0
    builder: Any = None
    too_deep = False
    for event, value in events:
        if event in ("start_map", "start_array"):
            depth += 1
            if depth == 1:
                if event == "start_map":
                    return   # not an array: no conversations (sniff said so already)
                continue
            if depth == 2:
                builder, too_deep = ijson.ObjectBuilder(), False
            elif depth - 1 > MAX_DEPTH:
                too_deep = True
                level = depth
                for event, _ in events:   # skip this value, building nothing of it
                    if event in ("start_map", "start_array"):
                        level += 1
                    elif event in ("end_map", "end_array"):
                        level -= 1
                        if level < depth:
                            break
                depth -= 1
                builder.event("null", None)
                continue
        elif event in ("end_map", "end_array"):
            depth -= 1
            if depth == 0:
                return
            if depth == 1:
                builder.event(event, value)
                yield _TooDeep(builder.value) if too_deep else builder.value
                builder = None
                continue
        elif depth == 1:
            yield value   # a bare value as an item: refused by the reader
            continue
        builder.event(event, value)


def _conversation_id(raw: Any) -> str | None:
    """The id a Bad names its conversation by, when one can be read."""
    if isinstance(raw, _TooDeep):
        raw = raw.partial
    if not isinstance(raw, dict):
        return None
    cid = raw.get("conversation_id") or raw.get("id") or raw.get("uuid")
    if not isinstance(cid, (str, int)) or isinstance(cid, bool):
        return None
    cid = str(cid)
    return cid if len(cid) <= MAX_ID_CHARS else cid[:MAX_ID_CHARS - 1] + "…"


class _Malformed(Exception):
    pass


def _id(value: Any, what: str) -> str:
    """A conversation's or a message's id: a string (or a number) of at most MAX_ID_CHARS
    characters, as the message keys and refs repeat it."""
    if isinstance(value, bool) or not isinstance(value, (str, int)) or not str(value):
        raise _Malformed(f"{what} {shown(value)} is not an id")
    text = str(value)
    if len(text) > MAX_ID_CHARS:
        raise _Malformed(f"{what} {shown(text)} is longer than {MAX_ID_CHARS} characters: not an "
                         "id an export gives")
    return text


def _why(error: Exception) -> str:
    if isinstance(error, KeyError):
        return f"missing field {shown(error.args[0])}"
    text = str(error) or type(error).__name__
    return text.splitlines()[0][:300]


# -- ChatGPT --------------------------------------------------------------------------------------

def _chatgpt(raw: Any) -> Conversation:
    if not isinstance(raw, dict):
        raise _Malformed("not an object")
    mapping = raw["mapping"]
    if not isinstance(mapping, dict):
        raise _Malformed("mapping is not an object")
    cid = _id(raw.get("conversation_id") or raw["id"], "conversation_id")
    title = _title(raw.get("title"))
    conversation = Conversation("chatgpt", cid, title)
    for node in _chatgpt_path(mapping, raw.get("current_node")):
        message = node.get("message")
        if not message:
            continue
        text = _chatgpt_text(message)
        if text is None:
            continue
        mid = _id(message.get("id") or node.get("id"), "message id")
        conversation.messages.append(ExportMessage(
            key=f"chatgpt:{cid}/{mid}", role=message["author"]["role"], content=text,
            ts=_epoch(message.get("create_time")), ref=make_ref("chatgpt", cid, mid, title)))
    return conversation


def _chatgpt_path(mapping: dict[str, Any], current: Any) -> list[dict[str, Any]]:
    """The nodes from the root to `current_node`, in order. Without a current node (very old
    exports), the last child at each step from the root."""
    if current is None:
        roots = [n for n in mapping.values() if isinstance(n, dict) and not n.get("parent")]
        if not roots:
            return []
        path, seen, node = [], set(), roots[0]
        while node is not None:
            if id(node) in seen:
                raise _Malformed("its message tree has a cycle")
            seen.add(id(node))
            path.append(node)
            children = node.get("children") or []
            if not isinstance(children, list) or not all(isinstance(c, str) for c in children):
                raise _Malformed(f"node {shown(node.get('id'))} has children "
                                 f"{shown(children)}, not a list of node ids")
            if children and children[-1] not in mapping:
                raise _Malformed(f"node {shown(node.get('id'))} names a child "
                                 f"{shown(children[-1])} that is not in its mapping")
            node = mapping[children[-1]] if children else None
            if node is not None and not isinstance(node, dict):
                raise _Malformed(f"node {shown(children[-1])} is not an object")
        return path
    if not isinstance(current, str) or current not in mapping:
        raise _Malformed(f"current_node {shown(current)} is not in its mapping")
    path, seen, node_id = [], set(), current
    while node_id is not None:
        if not isinstance(node_id, str):
            raise _Malformed(f"a node names a parent {shown(node_id)} that is not a node id")
        if node_id in seen:
            raise _Malformed("its message tree has a cycle")
        seen.add(node_id)
        node = mapping.get(node_id)
        if node is None:
            raise _Malformed(f"message {shown(node_id)} names a parent that is not in its mapping")
        if not isinstance(node, dict):
            raise _Malformed(f"node {shown(node_id)} is not an object")
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
            raise _Malformed(f"message {shown(message.get('id'))} has a part that is neither "
                             "text nor an object")
    text = "\n".join(pieces).strip()
    return text or None


def _epoch(value: Any) -> str | None:
    if value is None:
        return None
    try:
        return checks.epoch_time(value, "create_time")
    except checks.BadValue as e:
        raise _Malformed(f"create_time {e.why}") from None


def _title(value: Any) -> str:
    """A conversation's title: text, or nothing (a title that is not text is not one)."""
    return value if isinstance(value, str) else ""


# -- Claude ---------------------------------------------------------------------------------------

ROLES_CLAUDE = {"human": "user", "assistant": "assistant"}


def _claude(raw: Any) -> Conversation:
    if not isinstance(raw, dict):
        raise _Malformed("not an object")
    cid = _id(raw["uuid"], "uuid")
    title = _title(raw.get("name"))
    messages = raw["chat_messages"]
    if not isinstance(messages, list):
        raise _Malformed("chat_messages is not a list")
    conversation = Conversation("claude", cid, title)
    for message in messages:
        sender = message["sender"]
        if sender not in ROLES_CLAUDE:
            raise _Malformed(f"message {shown(message.get('uuid'))} has an unknown sender "
                             f"{shown(sender)}")
        text = _claude_text(message)
        if not text:
            continue
        mid = _id(message["uuid"], "message uuid")
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
    try:
        return checks.iso_time(value, "created_at")
    except checks.BadValue as e:
        raise _Malformed(f"created_at {e.why}") from None
