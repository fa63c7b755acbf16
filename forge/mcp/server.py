"""`forge mcp`: the tools of `documents.py` on the official MCP Python SDK's `MCPServer`
(`mcp` 2.x), over stdio (the default: stdout carries the protocol and nothing else, logs go to
stderr) or streamable HTTP (`--http HOST:PORT`, behind `forge serve`'s whole guard: Host and Origin
checks, rate limit, body cap, JSON bodies, bearer token).

Each tool answers one text block holding exactly its CLI twin's `--json` document, and the same
document as structured content. A bad argument or a library error is a tool error (`isError`)
carrying the CLI's one-line message; anything unexpected is logged on stderr with its traceback
and answered as one line naming its type, never the traceback.
"""
from __future__ import annotations

import json
from typing import Annotated, Any, Callable

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field, WithJsonSchema

from ..core import checks
from ..core.errors import ForgeError
from ..core.log import log
from . import documents

HOT_URI = "forge://hot"
INSTRUCTIONS = (
    "Forge is the user's durable memory, shared with their other assistants. Call `recall` "
    "before answering anything about the user's machines, projects, decisions or past "
    "conversations; call `remember` when the user states or confirms something worth knowing "
    "next time. The resource forge://hot holds the short list of recent deliberate memories "
    "that every answer should respect.")

def argument(description: str, schema: dict[str, Any], *, optional: bool = False,
             **extra: Any) -> Any:
    """A tool argument published with this JSON schema and handed to the tool as the client
    sent it: no pydantic model coerces it (lax mode reads `true` as the id 1 and `1.0` as 1,
    and words a refusal in four lines with a URL). documents.py checks it as the CLI checks
    the option, with the CLI's one line."""
    published = {"anyOf": [schema, {"type": "null"}], **extra} if optional else {**schema, **extra}
    return Annotated[Any, WithJsonSchema(published), Field(description=description)]


Kind = argument("decision, todo, fact, preference or correction", {"type": "string"},
                optional=True, enum=["decision", "todo", "fact", "preference", "correction", None])
SearchKind = argument("only entries of this kind: decision, todo, fact, preference, correction, "
                      "or archive (past conversations compaction or an import stored)",
                      {"type": "string"}, optional=True)
Project = argument("project namespace (letters, digits, spaces and _ . - /); none = every project",
                   {"type": "string"}, optional=True)
EntryId = argument("an entry id, as recall and memory_list show it",
                   {"type": "integer", "minimum": 1})
Limit = argument("rows to return, 1 to 1000", {"type": "integer", "minimum": 1, "maximum": 1000},
                 optional=True)
Content = argument("the memory, one self-contained sentence (at most 8000 characters)",
                   {"type": "string"})
Replaces = argument("ids of entries this one makes obsolete (a newer fact, a changed decision): "
                    "linked in the same write", {"type": "array", "items": {"type": "integer"}},
                    optional=True)
Query = argument("a question or the words that matter, at most 2000 characters",
                 {"type": "string"})
Cursor = argument("next_cursor of the previous page", {"type": "string"}, optional=True)
When = argument("a date or time: an ISO date or datetime (2024-03-05; years 0001 to 9999, "
                "four digits), or an expression in English or French (last week, 2024, en mars "
                "2024, il y a deux ans)",
                {"type": "string"}, optional=True)
At = argument("when it happened, for a note written after the fact: an ISO date or datetime "
              "(2024-03-05, 2024-03-05T14:30 local time, 2024-03-05T13:30:00Z), years 0001 to "
              "9999, not after today; default now", {"type": "string"}, optional=True)
Filter = argument(f"only entries whose text holds this (case-insensitive; at most "
                  f"{checks.MAX_FILTER_CHARS} characters)", {"type": "string"}, optional=True)


class ForgeMCPServer(MCPServer):
    """The SDK's MCPServer, whose tool calls first check the argument names as the CLI checks
    its options: a missing argument or an unknown one (a misspelt `filter` would list
    everything) is one line, before any tool runs."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.arguments: dict[str, tuple[list[str], list[str]]] = {}   # tool -> (all, required)

    def forge_tool(self, **options: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """`MCPServer.tool`, recording the tool's argument names."""
        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            import inspect

            params = inspect.signature(fn).parameters.values()
            self.arguments[fn.__name__] = ([p.name for p in params],
                                           [p.name for p in params if p.default is p.empty])
            return self.tool(**options)(fn)
        return register

    async def call_tool(self, name: str, arguments: dict[str, Any],
                        context: Any = None) -> Any:
        known = self.arguments.get(name)
        if known is not None:
            every, required = known
            missing = [a for a in required if a not in arguments]
            if missing:
                raise ToolError(f"Missing argument '{missing[0]}'")
            unknown = [a for a in arguments if a not in every]
            if unknown:
                raise ToolError(f"No such argument {checks.shown(unknown[0])} ({name} takes "
                                f"{', '.join(every) or 'none'})")
        return await super().call_tool(name, arguments, context)


def document_result(doc: dict[str, Any]) -> CallToolResult:
    """The twin's `--json` text (as `forge X --json` prints it: cli/output.dumps, indent 2)
    and the same document structured."""
    text = json.dumps(doc, ensure_ascii=False, indent=2)
    return CallToolResult(content=[TextContent(type="text", text=text)],
                          structured_content=doc)


def error_result(message: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=message)], is_error=True)


async def answer(work: Callable[[], dict[str, Any]], tool: str) -> CallToolResult:
    """Run one library call in a worker thread (the store and the embedder block), as a tool
    result or a tool error."""
    try:
        return document_result(await anyio.to_thread.run_sync(work))
    except ForgeError as e:
        return error_result(str(e))
    except Exception as e:  # noqa: BLE001  (a bug: logged on stderr, one line to the client)
        log.exception("forge mcp: the %s tool failed", tool)
        return error_result(f"internal error in {tool}: {type(e).__name__} (the server's stderr "
                            "has the details)")


def create_server(settings: Any) -> MCPServer:
    server = ForgeMCPServer("forge", title="Forge memory", instructions=INSTRUCTIONS,
                            version=_version(), log_level="WARNING")

    @server.forge_tool(annotations=ToolAnnotations(title="Remember", destructive_hint=False,
                                             idempotent_hint=True, open_world_hint=False))
    async def remember(content: Content, kind: Kind = None, project: Project = None,
                       replaces: Replaces = None, at: At = None) -> CallToolResult:
        """Save one durable memory the user will want used in later conversations: a decision,
        a todo, a fact (the default), a preference, or a correction of something remembered
        wrongly. Call it when the user states or confirms something worth knowing next time (a
        setting, a choice, a fact about their machines or people), written so it stands alone
        without this conversation. An exact duplicate writes nothing and returns the existing
        id. When it makes an older entry obsolete, pass that entry's id in `replaces`. A fact
        that changed (a new employer, phone, address, provider) is rarely worded like the old
        one, and Forge does not pair them by itself: `may_replace` lists the notes nearest this
        one by meaning, written before it ({id, content, created, created_known}); when one
        states the same thing with its former value (not a second thing of the kind, as a
        second cat), call `supersede` with its id and this entry's id. Recall then answers a
        question about now with this entry in the old one's place, and one about the former
        value with the old one. `conflicts` lists active entries whose words it may contradict
        (it is written all the same): ask the user which holds; when the old one is over, call
        `supersede` with its id and this entry's id. `at`: when it happened, for something the
        user tells after the fact (default now). Answers `forge remember --json`: {"id",
        "created", "replaced", "conflicts", "secrets_redacted"}, and "may_replace" (empty for a
        duplicate or with `replaces`): a secret in the content (an API key, a password) is
        replaced by a marker naming its type before the write."""
        return await answer(lambda: documents.remember(settings, content, kind, project,
                                                       replaces, at), "remember")

    @server.forge_tool(annotations=ToolAnnotations(title="Recall", read_only_hint=True,
                                             open_world_hint=False))
    async def recall(query: Query,
                     limit: Limit = None, project: Project = None,
                     kind: SearchKind = None, since: When = None,
                     until: When = None) -> CallToolResult:
        """Search the user's memory by meaning and by words: deliberate memories and archived
        past conversations. Call it before answering anything about the user's setup, projects,
        past decisions or earlier conversations. Each row is one entry: its `content`, `kind`
        (archive = a past exchange; `refs.external` names the imported conversation it came
        from), `id` (for memory_show and forget), `channel` (vector = found by meaning, lexical = by words,
        both, neighbour = the exchange beside a strong hit, replacement = the entry that
        replaced one found, in its place: `in_place_of`, or replaced = for a question about the
        past, what a row replaced), `distance` (lower is closer), and
        `fused`, the score rows are ordered by; `created` says when it happened (UTC), and
        `newer`, on an older statement of a fact that changed, the id of the newer one.
        `since`/`until` limit the rows to that window. A time in the query ("last week", "en
        mars 2024") names a period: rows said in it come first, then what was said after it
        (or just before) that may tell of it (`time` says which). No row means nothing relevant is stored: say so rather
        than guess. Answers `forge recall QUERY --json`; 10 rows by default."""
        return await answer(lambda: documents.recall(settings, query, limit, project, kind,
                                                     since, until), "recall")

    @server.forge_tool(annotations=ToolAnnotations(title="List memories", read_only_hint=True,
                                             open_world_hint=False))
    async def memory_list(kind: SearchKind = None, project: Project = None, limit: Limit = None,
                          cursor: Cursor = None,
                          filter: Filter = None,  # noqa: A002  (the CLI's word)
                          since: When = None, until: When = None) -> CallToolResult:
        """List stored memories, in the order they were written, with the count of each kind: to review what is
        remembered, or to find an id to show or forget. One page of at most `limit` entries
        (100 by default); `total` counts every match; when `next_cursor` is not null, call
        again with it as `cursor` for the next page. `since`/`until`: entries created in that
        window; each entry's `created` says when it happened (UTC). Answers `forge memory ls
        --limit N --json`: {"entries", "total", "next_cursor", "by_kind"}."""
        return await answer(lambda: documents.memory_list(settings, kind, project, limit, cursor,
                                                          filter, since, until), "memory_list")

    @server.forge_tool(annotations=ToolAnnotations(title="Show a memory", read_only_hint=True,
                                             open_world_hint=False))
    async def memory_show(id: EntryId) -> CallToolResult:  # noqa: A002  (the CLI's word)
        """One memory entry in full: its content, kind, project, refs (where it came from) and
        the events that touched it (remembered, edited, folded, forgotten neighbours). Answers
        `forge memory show ID --json`."""
        return await answer(lambda: documents.memory_show(settings, id), "memory_show")

    @server.forge_tool(annotations=ToolAnnotations(title="Forget a memory", destructive_hint=True,
                                             idempotent_hint=False, open_world_hint=False))
    async def forget(id: EntryId) -> CallToolResult:  # noqa: A002
        """Delete one memory entry for good (its text, vector and words): only when the user
        asks to forget it, or it is wrong and the user agrees. To fix a memory, `remember` a
        correction instead. Answers `forge memory forget ID --json`: {"id", "kind",
        "released"} (entries it had absorbed come back)."""
        return await answer(lambda: documents.forget(settings, id), "forget")

    @server.forge_tool(annotations=ToolAnnotations(title="Supersede", destructive_hint=False,
                                             idempotent_hint=True, open_world_hint=False))
    async def supersede(ids: Replaces, by: EntryId) -> CallToolResult:
        """Mark entries as replaced by a newer one (`by`): a fact that changed (a new employer,
        a new phone, a provider switched). They leave the hot block; in recall's rows the newer
        stands in their place (channel `replacement`) unless the question asks about the past;
        they stay stored and linked (`forge memory supersede --undo ID` releases them). Use it
        when the user says a fact changed and an older entry states the former value
        (`remember` lists the ones its words contradict in `conflicts`; recall may show
        others). Answers `forge memory supersede IDS --by ID --json`: {"by", "replaced"}."""
        return await answer(lambda: documents.supersede(settings, ids, by), "supersede")

    @server.forge_tool(annotations=ToolAnnotations(title="Conflicts", read_only_hint=True,
                                             open_world_hint=False))
    async def memory_conflicts(project: Project = None, kind: Kind = None) -> CallToolResult:
        """Every pair of active memories (same kind and project) that may say opposite things:
        a negation of what the other states, or two values for the same thing. Use it to tidy
        the memory with the user: for each pair, ask which holds, then `remember` the right one
        with `replaces`, or `forget` the wrong one. Answers `forge memory conflicts --json`:
        {"conflicts": [{"ids", "reason", "contents", ...}]}."""
        return await answer(lambda: documents.memory_conflicts(settings, project, kind),
                            "memory_conflicts")

    @server.forge_tool(annotations=ToolAnnotations(title="Hot block", read_only_hint=True,
                                             open_world_hint=False))
    async def hot_block(project: Project = None) -> CallToolResult:
        """The hot block: the most recent deliberate memories, as Forge's own assistant keeps
        them in every answer's context (budgeted; it says when it is cut). Read it at the start
        of a task to respect the user's standing decisions and preferences. Answers `forge
        memory hot --json`: {"text", "entry_ids", "left_out", "tokens"}. Also the resource
        forge://hot."""
        return await answer(lambda: documents.hot_block(settings, project), "hot_block")

    @server.resource(HOT_URI, name="hot", title="Forge hot block", mime_type="text/plain",
                     description="The most recent deliberate memories, as `forge memory hot` "
                                 "prints them: put it in context without a tool call.")
    async def hot() -> str:
        return (await anyio.to_thread.run_sync(lambda: documents.hot_block(settings)))["text"]

    @server.resource(HOT_URI + "/{project}", name="hot_project", mime_type="text/plain",
                     title="Forge hot block of a project",
                     description="The hot block of one project, as `forge memory hot -p "
                                 "PROJECT` prints it.")
    async def hot_project(project: str) -> str:
        return (await anyio.to_thread.run_sync(
            lambda: documents.hot_block(settings, project)))["text"]

    return server


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("forge-memory")
    except PackageNotFoundError:
        return "0"


def run_stdio(settings: Any) -> None:
    """Serve over stdio, each frame the client writes screened first (forge/mcp/stdio.py)."""
    from .frames import screened_stdio

    server = create_server(settings)
    with screened_stdio():
        server.run()


def http_app(settings: Any, host: str) -> Any:
    """The streamable HTTP app at /mcp behind `forge serve`'s whole guard (guard.protect): Host
    (421: DNS rebinding) and Origin (403) checks, the rate limit, the body cap, JSON bodies only,
    the bearer token (API_TOKEN); inside it, each POST body screened (frames.screened_http). The
    SDK's own Host/Origin check is off: the guard's is the one Forge configures
    (SERVE_ALLOWED_HOSTS, SERVE_CORS_ORIGINS, SERVE_TRUSTED_PROXIES)."""
    from starlette.middleware import Middleware

    from ..serve import guard
    from .frames import screened_http

    app = create_server(settings).streamable_http_app(
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        host=host)
    guard.protect(app, settings, host)
    app.user_middleware.append(Middleware(screened_http))   # inside the guard: token, body cap
    return app


def run_http(settings: Any, host: str, port: int) -> None:
    import uvicorn

    # The SDK's session manager starts in the Starlette app's lifespan, which the guard passes
    # through (it only looks at "http" scopes).
    uvicorn.run(http_app(settings, host), host=host, port=port, log_level="warning",
                access_log=False, server_header=False, proxy_headers=False)
