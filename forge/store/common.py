"""What every deliberate-store backend shares, written once: the dataclasses that cross the
seam (forge/store/backend.py: Entry, NewEntry) and the rules above the SQL: kinds and caps,
validation, dedup keys (exact duplicates), the word channel's admission rule (rarity).
What rag's writes and searches return is in results.py (a listing does not import it)."""
from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass
from typing import Any

from ..core.errors import ForgeError, StoreError

KINDS = ("decision", "todo", "fact", "preference", "correction")   # user kinds
ARCHIVE_KIND = "archive"
SOURCES = ("remember", "compaction", "aggregate", "import")
ARCHIVE_SOURCES = ("compaction", "import")
# The modes a backend opens in (forge/store/backend.py says what each means); here, not there,
# so that opening a store does not build the Backend protocol class (~2 ms of a fresh process).
BACKEND_MODES = ("write", "read", "rows", "inspect", "readonly")
# Why an entry is superseded (the `superseded_reason` column, the supersede event's info).
FOLD, REPLACE = "fold", "replace"

# Caps on what a user types: over one is an error, never a silent cut. Archive entries have none.
MAX_CONTENT_CHARS = 8000
MAX_NAME_CHARS = 64
# A project name: letters (accents included), digits, `_ . - /` and inner spaces.
PROJECT_RE = re.compile(r"[^\W_]|[^\W_][\w .\-/]*[\w.\-/]", re.UNICODE)


class DuplicateKey(StoreError):
    """Another writer stored the same text between this transaction's dedup check and its
    insert (a writer that takes no write lock); the transaction was rolled back."""


class StoreReadOnly(StoreError):
    """A write to a store whose folder (or file) cannot be written."""


# --------------------------------------------------------------------------- dataclasses

@dataclass
class Entry:
    """One row of the deliberate store, as every backend returns it."""

    id: int
    kind: str
    project: str | None
    content: str
    source: str
    refs: dict
    created: str
    updated: str
    superseded_by: int | None
    # Why it is superseded: "fold" (the aggregation tier) or "replace" (a user's newer
    # fact); None while active. Only meaningful with `superseded_by` set.
    superseded_reason: str | None = None
    # Whether `created` is when it was said (True), or only when it entered the store (False:
    # an import whose messages carried no time dated them at the import).
    created_known: bool = True

    def to_dict(self) -> dict[str, Any]:
        """asdict(self), written out: asdict's field-by-field recursive copy took ~95 ms of
        `forge memory ls` over 10,000 entries, this ~10 ms (refs is still a deep copy)."""
        return {"id": self.id, "kind": self.kind, "project": self.project,
                "content": self.content, "source": self.source,
                "refs": copy.deepcopy(self.refs), "created": self.created,
                "updated": self.updated, "superseded_by": self.superseded_by,
                "superseded_reason": self.superseded_reason,
                "created_known": self.created_known}

    def export_line(self) -> dict[str, Any]:
        """The line `forge memory export` writes (and `remember --batch` reads back):
        `created_known` only when the time is unknown, so a store whose times are all known
        exports as before."""
        line = {"kind": self.kind, "project": self.project, "content": self.content,
                "id": self.id, "created": self.created}
        if not self.created_known:
            line["created_known"] = False
        return line


@dataclass
class NewEntry:
    """An entry to write: validate_new cleans it, dedup_key keys it."""

    kind: str
    content: str
    project: str | None = None
    source: str = "remember"
    refs: dict | None = None
    # When what it holds happened or was said (a stored UTC time); None: now, at the write.
    created: str | None = None
    # False: `created` is only when it entered the store (an import without times).
    created_known: bool = True


# --------------------------------------------------------------------------- rules

def normalize_text(text: str) -> str:
    return " ".join(text.split())


def message_ids(refs: dict | None) -> list[int]:
    """The history message ids an archive entry holds (`refs["messages"]`), sorted, distinct."""
    return sorted({int(m) for m in (refs or {}).get("messages") or []})


def normalize_kind(raw: str, *, archive: bool = False) -> str:
    """A kind as typed (CLI argument, HTTP parameter): trimmed, lower case, one of KINDS, or
    `archive` where `archive` allows it (search, listing); else ForgeError naming the kinds."""
    kind = raw.strip().lower()
    valid = KINDS + ((ARCHIVE_KIND,) if archive else ())
    if kind not in valid:
        shown = kind if len(kind) <= MAX_NAME_CHARS else kind[:MAX_NAME_CHARS] + "…"
        raise ForgeError(f"unknown kind {shown!r}; valid kinds: {', '.join(valid)}")
    return kind


def validate_new(item: NewEntry) -> NewEntry:
    """Kind, source, project and caps; returns the cleaned item or raises ForgeError."""
    for name in ("kind", "project"):  # from JSON (--batch, the chat's memory tool): any type
        if getattr(item, name) is not None and not isinstance(getattr(item, name), str):
            raise ForgeError(f'"{name}" must be a string, not {type(getattr(item, name)).__name__}')
    kind = (item.kind or "fact").strip().lower()
    source = item.source or "remember"
    if source not in SOURCES:
        raise ForgeError(f"unknown source {source!r}; expected one of {', '.join(SOURCES)}")
    if kind == ARCHIVE_KIND:
        if source not in ARCHIVE_SOURCES:
            raise ForgeError(f"kind 'archive' is written by compaction; valid kinds: {', '.join(KINDS)}")
    elif kind not in KINDS:
        shown = kind if len(kind) <= MAX_NAME_CHARS else kind[:MAX_NAME_CHARS] + "…"
        raise ForgeError(f"unknown kind {shown!r}; valid kinds: {', '.join(KINDS)}")
    content = item.content
    if not isinstance(content, str) or not content.strip():
        raise ForgeError("the content is empty; write something to remember")
    if kind != ARCHIVE_KIND and len(content) > MAX_CONTENT_CHARS:
        raise ForgeError(f"the content is {len(content)} characters, over the cap of "
                         f"{MAX_CONTENT_CHARS}; split it into several entries")
    project = item.project.strip() if isinstance(item.project, str) else item.project
    project = project or None
    if project is not None and kind != ARCHIVE_KIND:
        if len(project) > MAX_NAME_CHARS:
            raise ForgeError(f"the project name is {len(project)} characters, over the cap of "
                             f"{MAX_NAME_CHARS}")
        if not PROJECT_RE.fullmatch(project):
            raise ForgeError(f"invalid project name {project!r}: use letters, digits, spaces "
                             "and _ . - /")
    refs = dict(item.refs or {})
    created = item.created
    if created is not None:
        if not isinstance(created, str):
            raise ForgeError(f'"created" must be an ISO 8601 date or datetime string, not '
                             f"{type(created).__name__}")
        from ..core.when import to_stored

        created = to_stored(created, what='"created"')
    known = item.created_known
    if not isinstance(known, bool):
        raise ForgeError(f'"created_known" must be true or false, not {type(known).__name__}')
    if not known and created is None:
        raise ForgeError('"created_known": false needs the "created" time it qualifies')
    return NewEntry(kind=kind, content=content, project=project, source=source, refs=refs,
                    created=created, created_known=known)


def dedup_key(item: NewEntry) -> str | None:
    """The key that makes an exact duplicate: a deliberate entry by kind, project and
    whitespace-normalised content; an archive entry by the history message ids it holds
    (identical text of other messages is kept)."""
    if item.kind == ARCHIVE_KIND:
        piece = (item.refs or {}).get("resplit")
        if isinstance(piece, dict):  # a piece of a re-sliced block: (block id, piece index)
            return f"r:{int(piece['block'])}:{int(piece['piece'])}"
        ids = message_ids(item.refs)
        if ids:  # message ids are per history: two machines' #1 are two messages
            history = (item.refs or {}).get("history")
            return "m:" + (f"{history}:" if history else "") + ",".join(map(str, ids))
        external = sorted(str(x) for x in (item.refs or {}).get("external") or [])
        return "x:" + json.dumps(external) if external else None
    from ..core.digest import sha256  # here: a listing never hashes

    digest = sha256(json.dumps([item.kind, item.project, normalize_text(item.content)],
                                       ensure_ascii=False).encode()).hexdigest()
    return "c:" + digest


# Below this many entries a document frequency says little (in 10 entries, `is` and `my` sit in
# 2, as rare as `nipogi` by the default 20%): the bound shrinks with the store. The
# measurements on LoCoMo: docs/benchmarks/memory.md.
LEXICAL_FULL_STORE = 50


def is_informative(df: int, entries: int, max_df: float) -> bool:
    """The rarity rule, the one rule for "this word is rare enough to mean something" (the word
    channel's admission, and the aggregation tier's informative words): a word in `df` of `entries`
    entries is informative when

        1 <= df <= max(1, max_df × entries × min(1, entries / LEXICAL_FULL_STORE))

    From 50 entries on, it is `max(1, RECALL_LEXICAL_MAX_DF × entries)` exactly;
    below, the share shrinks with the store, so up to 22 entries (at 0.2) a word must be in
    at most one entry."""
    scale = min(1.0, entries / LEXICAL_FULL_STORE)
    return 1 <= df <= max(1.0, max_df * entries * scale)


def rare_by_document_frequency(doc_count: int, total: int, max_share: float) -> bool:
    """The aggregation tier's "informative": the word channel's rule, `is_informative`."""
    return total > 0 and is_informative(doc_count, total, max_share)


def beyond_cutoff(channel: str, distance: float | None, cutoff: float | None) -> bool:
    """The distance cutoff refuses a vector-only row farther than it; word matches are spared."""
    return channel == "vector" and cutoff is not None and distance is not None and distance > cutoff


def like_pattern(text: str) -> str:
    """`text` as a LIKE pattern matching it anywhere, its own `%`, `_` and `\\` taken literally
    (with `escape '\\'`)."""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def entry_filters(project: str | None, kind: str | None, placeholder: str = "?", *,
                  since: str | None = None, until: str | None = None, collate: str = "",
                  unknown_time: bool | None = None) -> tuple[str, list[Any]]:
    """` and e.project = ? and e.kind = ?` (and the time window `e.created >= since and
    e.created < until`) for the ones given, and their values: the filter a channel's query puts
    on `memory_entries e` (the backend's own placeholder; `collate`: what makes its text
    comparison bytewise, stored times being compared as text).

    An entry whose time is unknown (`created_known` false: its `created` is only when an import
    stored it) with a window: `unknown_time` False, it is left out (the window is a filter on
    known times: --since/--until); True, `since` does not bound it, only `until` does (a period
    a question names, the store as it stood at --as-of); None, its stored time is compared
    like any other (a listing)."""
    sql, args = "", []
    for column, value in (("project", project), ("kind", kind)):
        if value is not None:
            sql += f" and e.{column} = {placeholder}"
            args.append(value)
    windowed = since is not None or until is not None
    if windowed and unknown_time is False:
        sql += f" and e.created_known = {placeholder}"
        args.append(True)
    if since is not None:
        if windowed and unknown_time:
            sql += f" and (e.created{collate} >= {placeholder} or e.created_known = {placeholder})"
            args += [since, False]
        else:
            sql += f" and e.created{collate} >= {placeholder}"
            args.append(since)
    if until is not None:
        sql += f" and e.created{collate} < {placeholder}"
        args.append(until)
    return sql, args
