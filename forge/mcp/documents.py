"""What each MCP tool answers: the library calls its CLI twin makes and that twin's `--json`
document, with the arguments checked as the twin's options are (no `mcp` import here).

    remember     forge remember KIND CONTENT [--project P] [--replaces ID]... --json
    memory_conflicts  forge memory conflicts [--project P] [--kind K] --json
    recall       forge recall QUERY [--limit N] [--project P] [--kind K] --json
    memory_list  forge memory ls [KIND] [--project P] --limit N [--cursor C] [--filter Q] --json
    memory_show  forge memory show ID --json
    forget       forge memory forget ID --json
    hot_block    forge memory hot [--project P] --json

A bad argument raises BadArgument with the one line the CLI would print; the library's own
errors (ForgeError: a missing id, an embedding server down, a lock held too long) pass through.
"""
from __future__ import annotations

from typing import Any

from ..core.errors import ForgeError, NotFoundError

MAX_LIMIT = 1000
LIST_LIMIT = 100   # memory_list's page when no limit is given


class BadArgument(ForgeError):
    """An argument the CLI would refuse as a usage error."""


def _invalid(name: str, why: str) -> BadArgument:
    return BadArgument(f"Invalid value for '{name}': {why}")


def check_limit(value: int | None, name: str = "limit") -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _invalid(name, f"{value!r} is not a valid integer")
    if not 1 <= value <= MAX_LIMIT:
        raise _invalid(name, f"{value} is not in the range 1<=x<={MAX_LIMIT}")
    return value


def check_id(value: int, name: str = "id") -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 2 ** 63:
        raise _invalid(name, f"{value!r} is not an entry id (ids are whole numbers from 1 to "
                             "2^63-1)")
    return value


def check_kind(value: str | None, *, archive: bool) -> str | None:
    from ..store.rag import normalize_kind

    if value is None or value == "":
        return None
    try:
        return normalize_kind(value, archive=archive)
    except ForgeError as e:
        raise _invalid("kind", str(e)) from None


def check_text(value: str, name: str) -> str:
    if not value.strip():
        raise _invalid(name, "it is empty")
    return value


# -- the documents -------------------------------------------------------------------------------

def remember(settings: Any, content: str, kind: str | None = None, project: str | None = None,
             replaces: list[int] | None = None) -> dict[str, Any]:
    """`forge remember KIND CONTENT [--replaces ID]... --json` ({id, created, replaced,
    conflicts, secrets_redacted}): conflicts.remember, as the CLI calls it."""
    from ..memory import conflicts
    from ..store import rag

    kind = check_kind(kind, archive=False) or "fact"
    check_text(content, "content")
    ids = tuple(check_id(i, "replaces") for i in (replaces or ()))
    with rag.open_store(settings) as store:
        return conflicts.remember(store, kind, content, project=project, replaces=ids).to_dict()


def memory_conflicts(settings: Any, project: str | None = None,
                     kind: str | None = None) -> dict[str, Any]:
    """`forge memory conflicts [--project P] [--kind K] --json`: {"conflicts": [...]}."""
    from ..memory import conflicts
    from ..store import rag

    kind = check_kind(kind, archive=False)
    with rag.open_store(settings, mode="rows") as store:
        report = conflicts.find(store, project=project, kind=kind)
    return {"conflicts": [c.to_dict() for c in report.conflicts]}


def recall(settings: Any, query: str, limit: int | None = None, project: str | None = None,
           kind: str | None = None, since: str | None = None,
           until: str | None = None) -> dict[str, Any]:
    from ..store import rag
    from ..recall import channels
    from ..recall import recall_rank, recall_time

    query = check_text(query, "query").strip()
    if len(query) > channels.MAX_QUERY_CHARS:
        raise _invalid("query", f"the query is {len(query)} characters; recall takes at most "
                                f"{channels.MAX_QUERY_CHARS} characters (a question, not a document): "
                                "shorten it to the words that matter")
    limit = check_limit(limit) or recall_rank.DEFAULT_LIMIT
    kind = check_kind(kind, archive=True)
    timing = recall_time.arguments(settings, _text_or_none(since, "since"),
                                   _text_or_none(until, "until"), prefix="")
    with rag.open_store(settings, mode="read") as store:
        return recall_rank.recall(store, query, limit=limit, project=project, kind=kind,
                                  **timing).to_dict()


def _text_or_none(value: Any, name: str) -> str | None:
    return None if value is None else check_text(value, name)


def memory_list(settings: Any, kind: str | None = None, project: str | None = None,
                limit: int | None = None, cursor: str | None = None,
                query: str | None = None, since: str | None = None,
                until: str | None = None) -> dict[str, Any]:
    """`forge memory ls [KIND] --limit N [--cursor C] [--filter Q] --json`: one page
    ({entries, total, next_cursor, by_kind}); `limit` is 100 when not given (the CLI lists
    everything without --limit: a model should page)."""
    from ..store import rag

    kind = check_kind(kind, archive=True)
    limit = check_limit(limit) or LIST_LIMIT
    window = None
    if since is not None or until is not None:
        from ..recall import recall_time

        window = recall_time.arguments(settings, _text_or_none(since, "since"),
                                       _text_or_none(until, "until"), prefix="").get("window")
    with rag.open_store(settings, mode="rows") as store:
        page, by_kind = rag.listing(store, kind=kind, project=project, query=query,
                                    cursor=cursor, limit=limit, window=window)
    return {**page.to_dict(), "by_kind": by_kind}


def memory_show(settings: Any, entry_id: int) -> dict[str, Any]:
    from ..store import rag

    check_id(entry_id)
    with rag.open_store(settings, mode="rows") as store:
        entry = rag.get_entry(store, entry_id)
        events = rag.entry_events(store, entry_id)
    return {**entry.to_dict(), "events": events}


def forget(settings: Any, entry_id: int) -> dict[str, Any]:
    from ..store import rag

    check_id(entry_id)
    with rag.open_store(settings) as store:
        try:
            rag.get_entry(store, entry_id)
        except NotFoundError:
            raise NotFoundError(f"no memory entry #{entry_id}; `forge memory ls` lists them") from None
        forgotten = rag.forget_many(store, [entry_id])
        return {"id": forgotten[0].id, "kind": forgotten[0].kind,
                "released": rag.released_by(store, entry_id)}


def hot_block(settings: Any, project: str | None = None) -> dict[str, Any]:
    from ..recall.hot_memory import hot_block as block

    return block(settings, project=project).to_dict()
