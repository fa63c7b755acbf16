"""The routes of `forge serve`. Each calls the library function its CLI twin calls and answers
the same JSON as that command's `--json`:

    POST /chat            forge chat M --json          (server-sent events with "stream": true)
    POST /remember        forge remember KIND TEXT [--replaces ID]... --json   ("conflicts": ids)
    GET  /search          forge recall Q --json [--kind K] [--limit N]
    GET  /memory          forge memory ls [KIND] --limit N [--cursor C] [--filter Q] --json
    GET  /memory/export   forge memory export [--kind K] [--project P]   (JSON Lines)
    GET  /memory/{id}     forge memory show ID --json
    PATCH /memory/{id}    forge memory edit ID [CONTENT] [--kind K] --json
    DELETE /memory/{id}   forge memory forget ID --json
    GET  /memory/conflicts  forge memory conflicts [--kind K] [--project P] --json
    POST /memory/supersede  forge memory supersede ID... (--by ID | --undo) --json
    GET  /history         forge history --json [-n N]
    POST /history/import  forge history import FILE --json
    POST /compact         forge compact --json [--dry-run]
    GET  /context         forge context --json
    GET  /drawer          forge drawer --json
    POST /drawer/pin      forge pin ID --json
    POST /drawer/unpin    forge unpin ID --json
    GET  /traces          forge trace tail -n N --json
    POST /aggregate       forge aggregate [--project P] [--apply] [--undo ID] --json
    POST /calibrate       forge calibrate --hit Q --expect ID --miss Q --json   (never --write)

Errors are `{"error": "one line"}`: 400 bad input, 404 unknown id, 409 a store written by another
embedding model, 502 a model server down (named), 503 a lock held too long. A refusal (recall
found nothing) is not an error: 200 with `answered: false`.
"""
from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, Callable

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.schemas import SchemaGenerator
from starlette.staticfiles import StaticFiles

from ..core import checks
from ..core.errors import ForgeError, LockTimeout, NotFoundError, ServerError, StoreError
from ..core.log import log
from . import guard

STATIC = Path(__file__).resolve().parent / "static"


class BadRequest(Exception):
    """The request itself is wrong: 400 with one line."""


# -- plumbing ----------------------------------------------------------------------------------

def error_status(exc: BaseException) -> int:
    if isinstance(exc, BadRequest):
        return 400
    if isinstance(exc, NotFoundError):
        return 404
    if isinstance(exc, ServerError):
        return 502
    if isinstance(exc, LockTimeout):
        return 503
    if isinstance(exc, StoreError):
        return 409
    if isinstance(exc, ForgeError):
        return 400
    return 500


def error_body(exc: BaseException) -> dict[str, Any]:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if not isinstance(exc, (ForgeError, BadRequest)):
        log.exception("internal error")
        text = f"internal error: {type(exc).__name__}"
    body: dict[str, Any] = {"error": text}
    if isinstance(exc, ServerError):
        body["server"] = exc.url
    bad = getattr(exc, "bad", None)
    if bad:
        body["bad"] = [str(b) for b in bad]
    return body


def error_response(exc: BaseException) -> JSONResponse:
    return JSONResponse(error_body(exc), status_code=error_status(exc))


async def call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run a library call off the event loop (they block on files, SQLite and servers)."""
    return await run_in_threadpool(fn, *args, **kwargs)


def api(fn: Callable[[Request], Any]) -> Callable[[Request], Any]:
    """A route handler whose ForgeError becomes its status and one line."""
    async def handler(request: Request) -> Response:
        try:
            return await fn(request)
        except (ForgeError, BadRequest) as e:
            return error_response(e)
    handler.__doc__ = fn.__doc__
    handler.__name__ = fn.__name__
    return handler


async def json_body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if not raw.strip():
        return {}
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BadRequest("the request body is not UTF-8") from None
    try:
        body = json.loads(text)
    except ValueError as e:
        raise BadRequest(f"the request body is not JSON: {e}") from None
    except RecursionError:
        raise BadRequest("the request body is nested too deeply to be a request") from None
    try:
        checks.json_text(body, "body")
    except checks.BadValue as e:
        raise BadRequest(f"the request body: {e.why}") from None
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    return body


def text_field(body: dict[str, Any], name: str, *, required: bool = True) -> str | None:
    value = body.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str) or (required and not value.strip()):
        raise BadRequest(f'"{name}" must be a non-empty string')
    return value


def bool_field(body: dict[str, Any], name: str) -> bool:
    value = body.get(name, False)
    if not isinstance(value, bool):
        raise BadRequest(f'"{name}" must be true or false')
    return value


def kind_value(raw: Any, name: str, *, archive: bool) -> str | None:
    """A kind as the CLI's Kind type takes it: trimmed, lower case, one of the known kinds
    (`archive` too where the CLI accepts it: search, listing)."""
    from ..store.rag import normalize_kind

    if raw is None or raw == "":
        return None
    if not isinstance(raw, str):
        raise BadRequest(f'"{name}" must be a string')
    try:
        return normalize_kind(raw, archive=archive)
    except ForgeError as e:
        raise BadRequest(str(e)) from None


def settings_of(request: Request) -> Any:
    return request.app.state.settings


def _open(settings: Any) -> Any:
    from ..store import rag

    return rag.open_store(settings)


# -- the library calls, one per CLI twin (each returns the twin's --json document) --------------

def do_remember(settings: Any, kind: str | None, content: str, project: str | None,
                replaces: list[int] | None = None, at: str | None = None,
                may_replace: bool = False) -> dict:
    from ..memory import conflicts

    created = None
    if at is not None:   # read before the store opens: a refused time writes nothing
        from ..core.when import to_stored

        created = to_stored(at, what="at")
    with _open(settings) as store:
        result = conflicts.remember(store, kind or "fact", content, project=project,
                                    replaces=replaces or (), created=created)
        if not may_replace:
            return result.to_dict()
        return {**result.to_dict(), "may_replace": conflicts.may_replace_written(store, result)}


def do_conflicts(settings: Any, kind: str | None, project: str | None) -> dict:
    from ..memory import conflicts
    from ..store import rag

    with rag.open_store(settings, mode="rows") as store:
        return {"conflicts": [c.to_dict() for c in
                              conflicts.find(store, project=project, kind=kind).conflicts]}


def do_supersede(settings: Any, ids: list[int], by: int | None, undo: bool) -> dict:
    from ..store import rag

    with _open(settings) as store:
        if undo:
            done = rag.unreplace(store, ids)
            return {"released": done["released"], "by": {str(k): v for k, v in done["by"].items()}}
        return rag.replace(store, ids, by)


def do_search(settings: Any, query: str, project: str | None, vector_k: int | None,
              lexical_k: int | None, kind: str | None = None, limit: int | None = None,
              neighbours: bool = True, since: str | None = None, until: str | None = None,
              read_time: bool = True, as_of: str | None = None) -> dict:
    from ..store import rag
    from ..recall import rank, timeline

    timing = timeline.arguments(settings, since, until, as_of, prefix="")
    with rag.open_store(settings, mode="read") as store:
        return rank.recall(store, query, limit=limit, vector_k=vector_k,
                           lexical_k=lexical_k, project=project, kind=kind,
                           neighbours=neighbours, read_time=read_time,
                           **timing).to_dict()


def do_memory_ls(settings: Any, kind: str | None, project: str | None, query: str | None = None,
                 cursor: str | None = None, limit: int | None = None,
                 since: str | None = None, until: str | None = None) -> dict:
    from ..store import rag

    from ..recall import timeline

    window = timeline.arguments(settings, since, until, prefix="").get("window")
    with rag.open_store(settings, mode="rows") as store:
        page, by_kind = rag.listing(store, kind=kind, project=project, query=query,
                                    cursor=cursor, limit=limit, window=window)
    return {**page.to_dict(), "by_kind": by_kind}


def do_memory_show(settings: Any, entry_id: int) -> dict:
    from ..store import rag

    with rag.open_store(settings, mode="rows") as store:
        entry = rag.get_entry(store, entry_id)
        events = rag.entry_events(store, entry_id)
    return {**entry.to_dict(), "events": events}


def do_forget(settings: Any, entry_id: int) -> dict:
    from ..store import rag

    with _open(settings) as store:
        return rag.forget(store, entry_id).to_dict()


def do_edit(settings: Any, entry_id: int, content: str | None, kind: str | None) -> dict:
    from ..store import rag

    from ..recall.writing import rows_written

    with _open(settings) as store:
        return rag.edit(rows_written(store), entry_id, content=content, kind=kind).to_dict()


def do_export(settings: Any, kind: str | None, project: str | None) -> list[dict]:
    """The lines of `forge memory export`: deliberate entries, oldest first, archives left out."""
    from ..store import rag

    with rag.open_store(settings, mode="rows") as store:
        entries = rag.list_entries(store, kind=kind, project=project)
    return [e.export_line() for e in entries if e.kind != rag.ARCHIVE_KIND]


def do_aggregate(settings: Any, project: str | None, apply: bool, undo_id: int | None) -> dict:
    from ..memory import aggregate as tier

    with tier.open_db(settings, None) as store:
        if undo_id is not None:
            return tier.undo(store, undo_id)
        return tier.run(store, project=project, apply=apply).to_dict()


def do_calibrate(settings: Any, cases: Any, project: str | None, vector_k: int,
                 lexical_k: int) -> dict:
    """`forge calibrate --json` without `--write`: over HTTP nothing edits the .env file."""
    from ..recall import calibrate as cal

    with cal.open_readonly(settings) as store:
        return cal.calibrate(store, cases, vector_k=vector_k, lexical_k=lexical_k,
                             project=project).to_dict()


def do_history(settings: Any, last: int | None) -> list[dict]:
    from ..store import history

    messages = history.read(settings.memory_file).messages
    if last:
        messages = messages[-last:]
    return [m.to_dict() for m in messages]


def do_drawer(settings: Any) -> list[dict]:
    from ..store import history

    return [m.to_dict() for m in history.drawer(settings.memory_file)]


def do_pin(settings: Any, message_id: int, pinned: bool, only: bool) -> list[dict]:
    from ..store import history

    changed = history.set_pinned(settings.memory_file, message_id, pinned, only=only)
    return [{"id": i, "pinned": pinned} for i in changed]


def do_traces(settings: Any, n: int) -> list[dict]:
    from ..store import traces

    return traces.tail(settings.trace_file, n)


def do_compact(settings: Any, strategy: str | None, if_needed: bool, dry_run: bool) -> dict:
    from ..memory.compaction import compact

    return compact(settings, strategy=strategy, if_needed=if_needed, dry_run=dry_run).to_dict()


def do_context(settings: Any) -> dict:
    from ..memory.compaction import context

    return context(settings)


def do_import(settings: Any, text: str, skip_bad: bool, compact: bool) -> dict:
    from ..memory.history_import import import_history

    return import_history(settings, text, source="request", skip_bad=skip_bad,
                          compact=compact).to_dict()


# -- routes ------------------------------------------------------------------------------------

async def page(request: Request) -> Response:
    """The web page's shell (no data in it; the page asks for the token and calls the API)."""
    return FileResponse(STATIC / "index.html", headers={"cache-control": "no-cache"})


async def health(request: Request) -> Response:
    """
    summary: Is the server up (no token needed; says nothing else)
    responses:
      200: {description: '{"status": "ok"}'}
    """
    return JSONResponse({"status": "ok"})


async def status(request: Request) -> Response:
    """
    summary: What the page shows in its header, token needed (version, auth mode, chat server up)
    responses:
      200: {description: '{"status": "ok", "version", "auth": bool, "chat_server": {"up": bool}}'}
    """
    from ..memory.doctor import probe_health

    up, _ = await call(probe_health, settings_of(request).llama_cpp_url, 1.0)
    from importlib.metadata import version

    return JSONResponse({"status": "ok", "version": version("forge-memory"),
                         "auth": bool(settings_of(request).api_token),
                         "chat_server": {"up": bool(up)}})


@api
async def remember(request: Request) -> Response:
    """
    summary: Write one deliberate memory (forge remember KIND CONTENT [--at WHEN] --json)
    requestBody:
      content:
        application/json:
          schema: {type: object, required: [content], properties: {kind: {type: string}, content: {type: string}, project: {type: string}, replaces: {type: array, items: {type: integer}}, at: {type: string, description: 'when it happened (remember --at): an ISO date or datetime, years 0001 to 9999, not after today'}, may_replace: {type: boolean, default: false, description: 'remember --may-replace: also name the notes nearest it by meaning, written before it'}}}
    responses:
      200: {description: '{"id", "created", "replaced", "conflicts", "secrets_redacted"}: created false for an exact duplicate; conflicts = the active entries it may contradict (written all the same); secrets_redacted = the secrets replaced by a marker before the write, by type; with may_replace true, "may_replace": [{id, content, created, created_known}]'}
      400: {description: 'bad input (unknown kind, over a cap, bad JSON, a refused replacement, an "at" that is not a date Forge stores, or after today)'}
      404: {description: a replaced id that does not exist; nothing written}
      502: {description: the embedding server is down; nothing written}
    """
    body = await json_body(request)
    content = text_field(body, "content")
    kind = text_field(body, "kind", required=False)
    project = text_field(body, "project", required=False)
    replaces = _ids(body, "replaces", required=False)
    at = text_field(body, "at", required=False)
    named = bool_field(body, "may_replace")
    return JSONResponse(await call(do_remember, settings_of(request), kind, content, project,
                                   replaces, at, named))


def _ids(body: dict[str, Any], name: str, *, required: bool = True) -> list[int]:
    raw = body.get(name)
    if raw is None and not required:
        return []
    if not isinstance(raw, list) or not raw:
        raise BadRequest(f'"{name}" must be a non-empty list of entry ids')
    return [checks.entry_id(i, name) for i in raw]


@api
async def memory_conflicts(request: Request) -> Response:
    """
    summary: Pairs of active entries that may contradict each other (forge memory conflicts --json)
    parameters:
      - {name: kind, in: query, schema: {type: string}}
      - {name: project, in: query, schema: {type: string}}
    responses:
      200: {description: '{"conflicts": [{"ids": [A, B], "reason", "words", "details", "contents", "kind", "project"}]}'}
      400: {description: an unknown kind}
    """
    kind = kind_value(request.query_params.get("kind"), "kind", archive=False)
    project = request.query_params.get("project") or None
    return JSONResponse(await call(do_conflicts, settings_of(request), kind, project))


@api
async def memory_supersede(request: Request) -> Response:
    """
    summary: A newer entry replaces older ones, or --undo releases them (forge memory supersede --json)
    requestBody:
      content:
        application/json:
          schema: {type: object, required: [ids], properties: {ids: {type: array, items: {type: integer}}, by: {type: integer}, undo: {type: boolean}}}
    responses:
      200: {description: '{"by", "replaced"}, or for undo {"released", "by"}'}
      400: {description: 'a refused replacement (itself, a cycle, a superseded --by, archive, across kinds or projects), or neither / both of by and undo'}
      404: {description: no such entry; nothing changed}
    """
    body = await json_body(request)
    ids = _ids(body, "ids")
    undo = bool_field(body, "undo")
    by = None
    if body.get("by") is not None:
        by = checks.entry_id(body["by"], "by")
    if undo == (by is not None):
        raise BadRequest('give "by" (the entry that replaces them) or "undo": true')
    return JSONResponse(await call(do_supersede, settings_of(request), ids, by, undo))


@api
async def search(request: Request) -> Response:
    """
    summary: Hybrid search (forge recall Q --json); every row says its channel and distance
    parameters:
      - {name: q, in: query, required: true, schema: {type: string}}
      - {name: project, in: query, schema: {type: string}}
      - {name: vector_k, in: query, schema: {type: integer}, description: 'calibration: per-channel budgets instead of limit (recall --vector-k)'}
      - {name: lexical_k, in: query, schema: {type: integer}, description: 'calibration: per-channel budgets instead of limit (recall --lexical-k)'}
      - {name: neighbours, in: query, schema: {type: boolean, default: true}, description: 'recall --neighbours/--no-neighbours'}
      - {name: kind, in: query, schema: {type: string}, description: 'entries of this kind only (recall --kind)'}
      - {name: limit, in: query, schema: {type: integer, minimum: 1}, description: 'rows budget filled from one fused ranking, default 10 (recall --limit)'}
      - {name: since, in: query, schema: {type: string}, description: 'only entries from the start of this on: an ISO date or datetime, or an expression (last week, en mars 2024) (recall --since)'}
      - {name: until, in: query, schema: {type: string}, description: 'only entries up to the end of this (recall --until)'}
      - {name: time, in: query, schema: {type: boolean, default: true}, description: 'read a time expression in q (false: recall --no-time)'}
      - {name: as_of, in: query, schema: {type: string}, description: 'as the store stood at the end of this (recall --as-of)'}
    responses:
      200: {description: '{"rows": [...], "dropped_by_cutoff", ..., "time": {"since", "until", "from_query", "as_of", "excluded"} or null}; no rows is not an error'}
      400: {description: 'q empty, an unknown kind, a bad number, a time that cannot be read'}
      502: {description: the embedding server is down}
    """
    q = request.query_params
    query = (q.get("q") or "").strip()
    if not query:
        raise BadRequest("q is empty")
    from ..recall import channels

    if len(query) > channels.MAX_QUERY_CHARS:
        raise BadRequest(f"q is {len(query)} characters; recall takes at most "
                         f"{channels.MAX_QUERY_CHARS} (a question, not a document)")
    raw_v, raw_l, raw_limit = q.get("vector_k"), q.get("lexical_k"), q.get("limit")
    vector_k = checks.whole_number(raw_v, "vector_k", minimum=0, maximum=1000) if raw_v else None
    lexical_k = checks.whole_number(raw_l, "lexical_k", minimum=0, maximum=1000) if raw_l else None
    kind = kind_value(q.get("kind"), "kind", archive=True)
    limit = checks.whole_number(raw_limit, "limit", minimum=1, maximum=1000) if raw_limit else None
    if limit is not None and (vector_k is not None or lexical_k is not None):
        raise BadRequest("give limit (fused rows budget) or vector_k/lexical_k (per-channel "
                         "budgets), not both")
    neighbours = (q.get("neighbours") or "true").lower() not in ("0", "false", "no")
    read_time = (q.get("time") or "true").lower() not in ("0", "false", "no")
    return JSONResponse(await call(do_search, settings_of(request), query, q.get("project"),
                                   vector_k, lexical_k, kind, limit, neighbours,
                                   q.get("since"), q.get("until"), read_time, q.get("as_of")))


@api
async def memory_ls(request: Request) -> Response:
    """
    summary: One page of entries, by id, and the breakdown by kind (forge memory ls --limit N --json); no embedding call
    parameters:
      - {name: kind, in: query, schema: {type: string}}
      - {name: project, in: query, schema: {type: string}}
      - {name: q, in: query, schema: {type: string}, description: 'entries whose text holds this (case-insensitive; ls --filter)'}
      - {name: limit, in: query, schema: {type: integer, default: 100, minimum: 1, maximum: 1000}}
      - {name: cursor, in: query, schema: {type: string}, description: 'the next_cursor of the previous page'}
      - {name: since, in: query, schema: {type: string}, description: 'only entries created from the start of this on (ls --since)'}
      - {name: until, in: query, schema: {type: string}, description: 'only entries created up to the end of this (ls --until)'}
    responses:
      200: {description: '{"entries": [...], "total": N, "next_cursor": "..." or null, "by_kind": {...}}'}
      400: {description: 'an unknown kind, a bad limit or cursor, a time that cannot be read'}
    """
    q = request.query_params
    kind = kind_value(q.get("kind"), "kind", archive=True)
    raw_limit = q.get("limit")
    limit = checks.whole_number(raw_limit, "limit", minimum=1, maximum=1000) if raw_limit else 100
    query = checks.filter_text(q.get("q"), "q")   # named as this route names it
    return JSONResponse(await call(do_memory_ls, settings_of(request), kind, q.get("project"),
                                   query, q.get("cursor"), limit, q.get("since"),
                                   q.get("until")))


def _entry_id(request: Request) -> int:
    return checks.entry_id(request.path_params["entry_id"], "id")


@api
async def memory_show(request: Request) -> Response:
    """
    summary: One entry and its events (forge memory show ID --json)
    parameters:
      - {name: entry_id, in: path, required: true, schema: {type: integer}}
    responses:
      200: {description: the entry with its events}
      404: {description: no such entry}
    """
    return JSONResponse(await call(do_memory_show, settings_of(request), _entry_id(request)))


@api
async def memory_forget(request: Request) -> Response:
    """
    summary: Forget one entry (forge memory forget ID --json)
    parameters:
      - {name: entry_id, in: path, required: true, schema: {type: integer}}
    responses:
      200: {description: '{"id", "kind", "released"}'}
      404: {description: no such entry}
    """
    return JSONResponse(await call(do_forget, settings_of(request), _entry_id(request)))


@api
async def memory_edit(request: Request) -> Response:
    """
    summary: Change an entry's text and/or kind in place (forge memory edit ID [CONTENT] [--kind K] --json)
    description: The id stays; a new text is embedded again. An edit that would duplicate another
      entry, or touch a folded source or an aggregate, is refused (400) and changes nothing.
    parameters:
      - {name: entry_id, in: path, required: true, schema: {type: integer}}
    requestBody:
      content:
        application/json:
          schema: {type: object, properties: {content: {type: string}, kind: {type: string}}}
    responses:
      200: {description: 'the entry as it now stands, with "changed": ["content", "kind"] (empty: nothing changed)'}
      400: {description: 'neither content nor kind, an unknown kind, a duplicate, a folded entry'}
      404: {description: no such entry}
      502: {description: the embedding server is down; nothing changed}
    """
    entry_id = _entry_id(request)
    body = await json_body(request)
    content = text_field(body, "content", required=False)
    kind = kind_value(body.get("kind"), "kind", archive=False)
    if content is None and kind is None:
        raise BadRequest('give the new "content", or "kind", or both')
    return JSONResponse(await call(do_edit, settings_of(request), entry_id, content, kind))


@api
async def memory_export(request: Request) -> Response:
    """
    summary: The deliberate entries as JSON Lines, oldest first (forge memory export)
    description: The format `forge remember --batch` reads; archive entries stay out.
    parameters:
      - {name: kind, in: query, schema: {type: string}}
      - {name: project, in: query, schema: {type: string}}
    responses:
      200: {description: 'application/x-ndjson: {"kind", "project", "content", "id", "created"} per line'}
    """
    q = request.query_params
    kind = kind_value(q.get("kind"), "kind", archive=False)
    lines = await call(do_export, settings_of(request), kind, q.get("project"))
    text = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)
    return Response(text, media_type="application/x-ndjson",
                    headers={"content-disposition": 'inline; filename="forge-memory.jsonl"'})


@api
async def aggregate(request: Request) -> Response:
    """
    summary: The aggregation tier (forge aggregate --json); a dry run unless apply
    description: '{"apply": true} writes the folds (the new lines are embedded); {"undo": ID}
      unfolds one aggregate. There is no --db over HTTP: the pass runs on the server''s store.'
    requestBody:
      content:
        application/json:
          schema: {type: object, properties: {project: {type: string}, apply: {type: boolean}, undo: {type: integer}}}
    responses:
      200: {description: 'the report (subjects, counts, hot block before and after), or for undo {"id", "kind", "released", "forgot"}'}
      400: {description: 'undo with apply or project; an entry that speaks for no other'}
      404: {description: no such entry to undo}
      502: {description: the embedding server is down; nothing written}
    """
    body = await json_body(request)
    project = text_field(body, "project", required=False)
    apply = bool_field(body, "apply")
    undo_id = None
    if body.get("undo") is not None:
        undo_id = checks.entry_id(body["undo"], "undo")
        if apply or project:
            raise BadRequest('"undo" takes no "apply" or "project"')
    return JSONResponse(await call(do_aggregate, settings_of(request), project, apply, undo_id))


@api
async def calibrate(request: Request) -> Response:
    """
    summary: Measure hit and miss questions and propose RECALL_MAX_DISTANCE (forge calibrate --json)
    description: Reads the store only. Over HTTP the proposal is never written to .env
      ("write" is refused); `forge calibrate --write` on the server's machine does that.
    requestBody:
      content:
        application/json:
          schema: {type: object, required: [hits, misses], properties: {hits: {type: array, items: {type: object, properties: {question: {type: string}, expect: {type: integer}}}}, misses: {type: array, items: {type: string}}, project: {type: string}, vector_k: {type: integer}, lexical_k: {type: integer}}}
    responses:
      200: {description: the calibration document of `forge calibrate --json`}
      400: {description: 'no hit or no miss, a malformed case, "write" asked'}
      404: {description: an expected entry id that is not in the store}
      502: {description: the embedding server is down}
    """
    from ..recall.calibrate import cases_from_mapping

    body = await json_body(request)
    if body.get("write"):
        raise BadRequest("calibrate over HTTP never writes .env; run `forge calibrate --write` "
                         "on the server's machine")
    for name in ("hits", "misses"):
        if not isinstance(body.get(name, []), list):
            raise BadRequest(f'"{name}" must be a list')
    cases = cases_from_mapping({"hits": body.get("hits"), "misses": body.get("misses")},
                               "the request body")
    project = text_field(body, "project", required=False)
    vector_k = checks.whole_number(body.get("vector_k", 5), "vector_k", minimum=1, maximum=1000)
    lexical_k = checks.whole_number(body.get("lexical_k", 5), "lexical_k", minimum=0, maximum=1000)
    return JSONResponse(await call(do_calibrate, settings_of(request), cases, project,
                                   vector_k, lexical_k))


@api
async def history_route(request: Request) -> Response:
    """
    summary: The rolling history (forge history --json), whole messages
    parameters:
      - {name: n, in: query, schema: {type: integer}, description: only the last n messages}
    responses:
      200: {description: a list of messages}
    """
    raw = request.query_params.get("n")
    last = checks.whole_number(raw, "n", minimum=1, maximum=checks.MAX_COUNT) if raw else None
    return JSONResponse(await call(do_history, settings_of(request), last))


@api
async def history_import(request: Request) -> Response:
    """
    summary: Append messages to the history (forge history import FILE --json)
    requestBody:
      content:
        application/json:
          schema: {type: object, required: [messages], properties: {messages: {type: array, items: {type: object}}, compact: {type: boolean}, skip_bad: {type: boolean}}}
    responses:
      200: {description: the import report}
      400: {description: bad records; nothing imported unless skip_bad}
    """
    body = await json_body(request)
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise BadRequest('"messages" must be a list of {"role", "content", ...} objects')
    text = json.dumps(messages, ensure_ascii=False)
    return JSONResponse(await call(do_import, settings_of(request), text,
                                   bool_field(body, "skip_bad"), bool_field(body, "compact")))


@api
async def compact(request: Request) -> Response:
    """
    summary: Compact the history now (forge compact --json); dry_run previews
    requestBody:
      content:
        application/json:
          schema: {type: object, properties: {dry_run: {type: boolean}, if_needed: {type: boolean}, strategy: {type: string, enum: [rag_pointer, llm_summary]}}}
    responses:
      200: {description: the compaction report}
      502: {description: a server needed by the strategy is down; the history is unchanged}
    """
    body = await json_body(request)
    strategy = text_field(body, "strategy", required=False)
    if strategy is not None and strategy not in ("rag_pointer", "llm_summary"):
        raise BadRequest(f"unknown strategy {strategy!r}; expected rag_pointer or llm_summary")
    return JSONResponse(await call(do_compact, settings_of(request), strategy,
                                   bool_field(body, "if_needed"), bool_field(body, "dry_run")))


@api
async def context(request: Request) -> Response:
    """
    summary: What the next router prompt weighs against the compaction thresholds (forge context --json)
    responses:
      200: {description: tokens, thresholds, hot block}
    """
    return JSONResponse(await call(do_context, settings_of(request)))


@api
async def drawer(request: Request) -> Response:
    """
    summary: The drawer, every pinned message (forge drawer --json)
    responses:
      200: {description: a list of messages}
    """
    return JSONResponse(await call(do_drawer, settings_of(request)))


async def _pin_body(request: Request) -> tuple[int, bool]:
    body = await json_body(request)
    if "id" not in body:
        raise BadRequest('"id" (a message id) is missing')
    return checks.entry_id(body["id"], "id"), bool_field(body, "only")


@api
async def drawer_pin(request: Request) -> Response:
    """
    summary: Pin a message and, unless only, its exchange (forge pin ID --json)
    requestBody:
      content:
        application/json:
          schema: {type: object, required: [id], properties: {id: {type: integer}, only: {type: boolean}}}
    responses:
      200: {description: '[{"id", "pinned"}] for each message that changed'}
      404: {description: no such message}
    """
    message_id, only = await _pin_body(request)
    return JSONResponse(await call(do_pin, settings_of(request), message_id, True, only))


@api
async def drawer_unpin(request: Request) -> Response:
    """
    summary: Unpin one message, never its pair (forge unpin ID --json)
    requestBody:
      content:
        application/json:
          schema: {type: object, required: [id], properties: {id: {type: integer}}}
    responses:
      200: {description: '[{"id", "pinned"}] for the message if it changed'}
      404: {description: no such message}
    """
    message_id, _ = await _pin_body(request)
    return JSONResponse(await call(do_pin, settings_of(request), message_id, False, True))


@api
async def traces_route(request: Request) -> Response:
    """
    summary: The last n run records (forge trace tail -n N --json)
    parameters:
      - {name: n, in: query, schema: {type: integer, default: 10}}
    responses:
      200: {description: a list of trace records, oldest first}
    """
    n = checks.whole_number(request.query_params.get("n", "10"), "n", minimum=1, maximum=10000)
    return JSONResponse(await call(do_traces, settings_of(request), n))


def _sse(event: str, data: Any) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


@api
async def chat(request: Request) -> Response:
    """
    summary: One chat turn (forge chat M --json); server-sent events when stream is true
    description: 'With stream true (or Accept: text/event-stream) the answer comes as "token" events
      ({"text"}) and one "done" event holding the same object as the JSON answer, or one "error".'
    requestBody:
      content:
        application/json:
          schema: {type: object, required: [message], properties: {message: {type: string}, stream: {type: boolean}}}
    responses:
      200: {description: '{"reply", "run_id", "answered", "ok", "not_answered", ...}; a refusal is answered false'}
      502: {description: the chat server is down; the turn is not persisted}
    """
    from ..chat.run import run_turn

    body = await json_body(request)
    message = text_field(body, "message")
    settings = settings_of(request)
    stream = bool_field(body, "stream") or "text/event-stream" in request.headers.get("accept", "")
    if not stream:
        result = await call(run_turn, settings, message)
        return JSONResponse(result.to_dict())

    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()

    def put(kind: str, payload: Any) -> None:
        loop.call_soon_threadsafe(queue.put_nowait, (kind, payload))

    def work() -> None:
        try:
            put("done", run_turn(settings, message, on_token=lambda t: put("token", t)).to_dict())
        except BaseException as e:  # noqa: BLE001 - handed to the response, never lost
            put("error", e)

    loop.run_in_executor(None, work)
    first = await queue.get()
    if first[0] == "error":  # nothing sent yet: a plain status, as without streaming
        return error_response(first[1])

    async def events() -> Any:
        kind, payload = first
        while True:
            if kind == "token":
                yield _sse("token", {"text": payload})
            elif kind == "done":
                yield _sse("done", payload)
                return
            else:
                yield _sse("error", {**error_body(payload), "status": error_status(payload)})
                return
            kind, payload = await queue.get()

    return StreamingResponse(events(), media_type="text/event-stream",
                             headers={"cache-control": "no-cache", "x-accel-buffering": "no"})


SCHEMAS = SchemaGenerator({
    "openapi": "3.0.3",
    "info": {"title": "Forge", "version": "1"},
    "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
    "security": [{"bearer": []}],
})


async def openapi(request: Request) -> Response:
    """
    summary: This OpenAPI document
    responses:
      200: {description: OpenAPI 3 JSON}
    """
    doc = SCHEMAS.get_schema(routes=request.app.routes)
    doc["paths"].setdefault("/health", {}).setdefault("get", {})["security"] = []
    return JSONResponse(doc)


ROUTES = [
    Route("/", page, methods=["GET"], include_in_schema=False),
    Route("/health", health, methods=["GET"]),
    Route("/status", status, methods=["GET"]),
    Route("/openapi.json", openapi, methods=["GET"]),
    Route("/chat", chat, methods=["POST"]),
    Route("/remember", remember, methods=["POST"]),
    Route("/search", search, methods=["GET"]),
    Route("/memory", memory_ls, methods=["GET"]),
    Route("/memory/export", memory_export, methods=["GET"]),   # before /memory/{entry_id}
    Route("/memory/conflicts", memory_conflicts, methods=["GET"]),
    Route("/memory/supersede", memory_supersede, methods=["POST"]),
    Route("/memory/{entry_id}", memory_show, methods=["GET"]),
    Route("/memory/{entry_id}", memory_edit, methods=["PATCH"]),
    Route("/memory/{entry_id}", memory_forget, methods=["DELETE"]),
    Route("/history", history_route, methods=["GET"]),
    Route("/history/import", history_import, methods=["POST"]),
    Route("/compact", compact, methods=["POST"]),
    Route("/context", context, methods=["GET"]),
    Route("/drawer", drawer, methods=["GET"]),
    Route("/drawer/pin", drawer_pin, methods=["POST"]),
    Route("/drawer/unpin", drawer_unpin, methods=["POST"]),
    Route("/traces", traces_route, methods=["GET"]),
    Route("/aggregate", aggregate, methods=["POST"]),
    Route("/calibrate", calibrate, methods=["POST"]),
    Mount("/static", StaticFiles(directory=STATIC), name="static"),
]


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return JSONResponse({"error": exc.detail}, status_code=exc.status_code, headers=exc.headers)


async def _internal(request: Request, exc: Exception) -> Response:
    return error_response(exc)


def create_app(settings: Any, bind_host: str | None = None) -> Starlette:
    """The application for these settings (read once, at start), behind guard.protect: the
    Host it answers to is loopback, `bind_host` and SERVE_ALLOWED_HOSTS."""
    middleware = []
    if settings.serve_cors_origins:
        from starlette.middleware.cors import CORSMiddleware

        middleware.append(Middleware(CORSMiddleware, allow_origins=list(settings.serve_cors_origins),
                                     allow_methods=["GET", "POST", "PATCH", "DELETE"],
                                     allow_headers=["authorization", "content-type"]))
    app = Starlette(routes=ROUTES, middleware=middleware,
                    exception_handlers={HTTPException: _http_error, Exception: _internal})
    app.state.settings = settings
    return guard.protect(app, settings, bind_host)
