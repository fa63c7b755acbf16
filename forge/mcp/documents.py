"""What each MCP tool answers: the library calls its CLI twin makes and that twin's `--json`
document, with the arguments checked as the twin's options are (no `mcp` import here).

    remember     forge remember KIND CONTENT [--project P] [--replaces ID]... --json
    memory_conflicts  forge memory conflicts [--project P] [--kind K] --json
    supersede    forge memory supersede ID... --by ID --json
    recall       forge recall QUERY [--limit N] [--project P] [--kind K] --json
    memory_list  forge memory ls [KIND] [--project P] --limit N [--cursor C] [--filter Q] --json
    memory_show  forge memory show ID --json
    forget       forge memory forget ID --json
    hot_block    forge memory hot [--project P] --json

Each argument comes as the client sent it (server.py lets no model coerce it: pydantic would
read `true` as the id 1) and is checked here as the twin's option is, by the same checks
(forge/core/checks.py). A bad argument raises BadArgument or checks.BadValue with the one line
the CLI would print; the library's own errors (ForgeError: a missing id, an embedding server
down, a lock held too long) pass through.
"""
from __future__ import annotations

from typing import Any

from ..core import checks
from ..core.errors import ForgeError

MAX_LIMIT = 1000
LIST_LIMIT = 100   # memory_list's page when no limit is given


class BadArgument(ForgeError):
    """An argument the CLI would refuse as a usage error."""


def _invalid(name: str, why: str) -> BadArgument:
    return BadArgument(f"Invalid value for '{name}': {why}")


def check_limit(value: Any, name: str = "limit") -> int | None:
    if value is None:
        return None
    return checks.whole_number(value, name, minimum=1, maximum=MAX_LIMIT)


def check_id(value: Any, name: str = "id") -> int:
    return checks.entry_id(value, name)


def check_ids(value: Any, name: str) -> tuple[int, ...]:
    """A list of entry ids (`replaces`), or None for none."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise _invalid(name, f"{checks.shown(value)} is not a list of entry ids")
    return tuple(check_id(i, name) for i in value)


def check_kind(value: Any, *, archive: bool) -> str | None:
    from ..store.rag import normalize_kind

    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise _invalid("kind", f"{checks.shown(value)} is not text")
    try:
        return normalize_kind(value, archive=archive)
    except ForgeError as e:
        raise _invalid("kind", str(e)) from None


def check_text(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise _invalid(name, f"{checks.shown(value)} is not text")
    if not value.strip():
        raise _invalid(name, "it is empty")
    return value


def check_project(value: Any) -> str | None:
    """A project name, or None for every project (its rules are the store's, on a write)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise _invalid("project", f"{checks.shown(value)} is not text")
    return value


# -- the documents -------------------------------------------------------------------------------

def remember(settings: Any, content: Any, kind: Any = None, project: Any = None,
             replaces: Any = None, at: Any = None) -> dict[str, Any]:
    """`forge remember KIND CONTENT [--replaces ID]... [--at WHEN] --json` ({id, created,
    replaced, conflicts, secrets_redacted}): conflicts.remember, as the CLI calls it, and
    `may_replace` (conflicts.may_replace_written: for the agent to judge)."""
    from ..memory import conflicts
    from ..store import rag

    kind = check_kind(kind, archive=False) or "fact"
    content = check_text(content, "content")
    project = check_project(project)
    ids = check_ids(replaces, "replaces")
    created = None
    if at is not None:
        from ..core.when import to_stored

        created = to_stored(check_text(at, "at"), what="at")
    with rag.open_store(settings) as store:
        noted = conflicts.remember(store, kind, content, project=project, replaces=ids,
                                   created=created)
        return {**noted.to_dict(), "may_replace": conflicts.may_replace_written(store, noted)}


def supersede(settings: Any, ids: Any, by: Any) -> dict[str, Any]:
    """`forge memory supersede IDS --by ID --json`: {"by", "replaced"} (rag.replace, as the
    CLI calls it)."""
    from ..store import rag

    targets = check_ids(ids, "ids")
    if not targets:
        raise _invalid("ids", "give at least one entry id")
    newer = check_id(by, "by")
    with rag.open_store(settings) as store:
        return rag.replace(store, list(targets), newer)


def memory_conflicts(settings: Any, project: Any = None, kind: Any = None) -> dict[str, Any]:
    """`forge memory conflicts [--project P] [--kind K] --json`: {"conflicts": [...]}."""
    from ..memory import conflicts
    from ..store import rag

    kind = check_kind(kind, archive=False)
    project = check_project(project)
    with rag.open_store(settings, mode="rows") as store:
        report = conflicts.find(store, project=project, kind=kind)
    return {"conflicts": [c.to_dict() for c in report.conflicts]}


def recall(settings: Any, query: Any, limit: Any = None, project: Any = None,
           kind: Any = None, since: Any = None, until: Any = None) -> dict[str, Any]:
    from ..store import rag
    from ..recall import channels
    from ..recall import rank, timeline

    query = check_text(query, "query").strip()
    if len(query) > channels.MAX_QUERY_CHARS:
        raise _invalid("query", f"the query is {len(query)} characters; recall takes at most "
                                f"{channels.MAX_QUERY_CHARS} characters (a question, not a document): "
                                "shorten it to the words that matter")
    limit = check_limit(limit) or rank.DEFAULT_LIMIT
    kind = check_kind(kind, archive=True)
    project = check_project(project)
    timing = timeline.arguments(settings, _text_or_none(since, "since"),
                                _text_or_none(until, "until"), prefix="")
    with rag.open_store(settings, mode="read") as store:
        return rank.recall(store, query, limit=limit, project=project, kind=kind,
                           **timing).to_dict()


def _text_or_none(value: Any, name: str) -> str | None:
    return None if value is None else check_text(value, name)


def memory_list(settings: Any, kind: Any = None, project: Any = None, limit: Any = None,
                cursor: Any = None, query: Any = None, since: Any = None,
                until: Any = None) -> dict[str, Any]:
    """`forge memory ls [KIND] --limit N [--cursor C] [--filter Q] --json`: one page
    ({entries, total, next_cursor, by_kind}); `limit` is 100 when not given (the CLI lists
    everything without --limit: a model should page)."""
    from ..store import rag

    kind = check_kind(kind, archive=True)
    project = check_project(project)
    limit = check_limit(limit) or LIST_LIMIT   # the cursor and the filter: rag.list_page's checks
    from ..recall import timeline

    window = timeline.arguments(settings, _text_or_none(since, "since"),
                                _text_or_none(until, "until"), prefix="").get("window")
    with rag.open_store(settings, mode="rows") as store:
        page, by_kind = rag.listing(store, kind=kind, project=project, query=query,
                                    cursor=cursor, limit=limit, window=window)
    return {**page.to_dict(), "by_kind": by_kind}


def memory_show(settings: Any, entry_id: Any) -> dict[str, Any]:
    from ..store import rag

    entry_id = check_id(entry_id)
    with rag.open_store(settings, mode="rows") as store:
        entry = rag.get_entry(store, entry_id)
        events = rag.entry_events(store, entry_id)
    return {**entry.to_dict(), "events": events}


def forget(settings: Any, entry_id: Any) -> dict[str, Any]:
    from ..store import rag

    entry_id = check_id(entry_id)
    with rag.open_store(settings) as store:
        return rag.forget(store, entry_id).to_dict()


def hot_block(settings: Any, project: Any = None) -> dict[str, Any]:
    from ..recall.hot_memory import hot_block as block

    return block(settings, project=check_project(project)).to_dict()
