"""`forge remember`, `forge recall`, `forge memory ls|show|forget|edit|export|hot|conflicts|supersede`,
`forge reindex`."""
from __future__ import annotations

import json
import sys
from typing import Any

import click

from ..core.checks import MAX_COUNT
from .main import CURSOR, ENTRY_ID, FILTER, Number, get_settings
from .output import (confirm_destructive, dumps, emit, emit_one, note, note_secrets,
                     output_options, renderer)

RECALL_COLUMNS = ["id", "date", "kind", "project", "channel", "distance", "bm25", "fused",
                  "content"]
LS_COLUMNS = ["entry", "project", "created", "content"]


def _open(**kwargs: Any) -> Any:
    """Open the store; a read (`mode="read"` or `"rows"`) never creates one and says so."""
    from ..store import rag

    store = rag.open_store(get_settings(), **kwargs)
    if store.missing:
        note(f"no store at {store.location} yet; `forge remember` creates it")
    return store


def _note_unknown_project(store: Any, project: str | None) -> None:
    """A mistyped --project finds nothing: say so rather than look like an empty memory."""
    from ..store import rag

    if project is None:
        return
    known = rag.projects(store)
    if project not in known:
        note(f"no entry in project {project!r}; projects: {', '.join(known) or 'none yet'}")


def _read_stdin_if_dash(text: str) -> str:
    if text != "-":
        return text
    try:
        data = sys.stdin.read()
        data.encode("utf-8")
    except (UnicodeDecodeError, UnicodeEncodeError):  # surrogates, or a strict decoder
        raise click.UsageError("stdin is not UTF-8 text; convert it first, "
                               "e.g. `iconv -f latin1 -t utf-8`") from None
    return data.rstrip("\n")


class Kind(click.ParamType):
    """A kind typed on the command line: a usage error (exit 2) when unknown, completed by
    the shell. `archive`: the compaction kind is accepted too (listing, forgetting)."""

    name = "kind"

    def __init__(self, archive: bool = False):
        self.archive = archive

    def choices(self) -> tuple[str, ...]:
        from ..store.rag import ARCHIVE_KIND, KINDS

        return KINDS + ((ARCHIVE_KIND,) if self.archive else ())

    def convert(self, value: Any, param: Any, ctx: Any) -> str:
        from ..core.errors import ForgeError
        from ..store.rag import normalize_kind

        try:
            return normalize_kind(str(value), archive=self.archive)
        except ForgeError as e:
            self.fail(str(e), param, ctx)

    def shell_complete(self, ctx: Any, param: Any, incomplete: str) -> list[Any]:
        from click.shell_completion import CompletionItem

        return [CompletionItem(k) for k in self.choices() if k.startswith(incomplete)]


@click.command()
@click.argument("kind_or_content", required=False, metavar="[KIND]")
@click.argument("content", required=False)
@click.option("--project", "-p", help="Project namespace of the entry.")
@click.option("--batch", "batch", type=click.File("rb"), metavar="FILE|-",
              help='Newline-delimited JSON: {"kind", "content", "project", "created"} per line '
                   '(what `forge memory export` writes).')
@click.option("--replaces", "replaces", type=ENTRY_ID, multiple=True, metavar="ID",
              help="This entry replaces entry ID (repeatable): linked in the same transaction; "
                   "`forge memory supersede --undo ID` releases it.")
@click.option("--at", "at", metavar="WHEN",
              help="When it happened, for a note written after the fact: an ISO date or "
                   "datetime (2024-03-05, 2024-03-05T14:30; local time unless it has an "
                   "offset), years 0001 to 9999, not after today [default: now].")
@click.option("--may-replace", "may_replace", is_flag=True,
              help="Also name the notes nearest this one by meaning, written before it (up to "
                   "5; --json: \"may_replace\"): a fact changed in other words is rarely worded "
                   "like the old one; `forge memory supersede ID --by NEW` links the one that "
                   "states the former value.")
@output_options
def remember(kind_or_content: str | None, content: str | None, project: str | None,
             batch: Any, replaces: tuple[int, ...], at: str | None, may_replace: bool,
             fmt: str) -> None:
    """Write one deliberate memory: KIND (decision, todo, fact, preference, correction;
    fact when left out) and CONTENT (`-` reads it from stdin).

    An exact duplicate (same kind, project and text up to whitespace) writes nothing and
    prints the existing id. An active entry the new one may contradict is named on stderr
    (`--json`: "conflicts"); it is written all the same. Its date is now, or --at's (a
    --batch line's "created").
    """
    from ..memory import conflicts
    from ..store import rag

    created = None
    if at is not None:
        from ..core.when import to_stored

        created = to_stored(at, what="--at")
    if batch is not None:
        if kind_or_content is not None:
            raise click.UsageError("--batch reads every entry from the file; give no KIND or CONTENT")
        if at is not None:
            raise click.UsageError('--at dates one entry; a --batch line carries its own '
                                   '"created"')
        from .output import progress

        if replaces:
            raise click.UsageError("--replaces names what ONE new entry replaces; give it "
                                   "without --batch")
        if may_replace:
            raise click.UsageError("--may-replace names what ONE new entry may replace; give "
                                   "it without --batch")
        items = _read_batch(batch, project)
        with _open() as store, progress(items, length=len(items), label="embedding") as bar:
            results = conflicts.remember_many(store, items, on_progress=bar.update)
        rows = [{"line": n, "id": r.id, "created": r.created, "conflicts": r.conflict_ids,
                 "secrets_redacted": r.secrets_redacted} for n, r in enumerate(results, 1)]
        clashing = sum(1 for r in results if r.conflicts)
        emit(rows, fmt, columns=["line", "id", "created"] + (["conflicts"] if clashing else []))
        from ..core.secret_scan import Redactions

        redacted = Redactions()
        for r in results:
            redacted.merge(r.secrets_redacted)
        note_secrets(redacted.counts)
        made = sum(r.created for r in results)
        note(f"{made} remembered, {len(results) - made} already stored"
             + (f", {clashing} may contradict an active entry (`forge memory conflicts` lists "
                "them)" if clashing else ""))
        return
    if kind_or_content is None:
        raise click.UsageError("give CONTENT (and optionally a KIND before it), or --batch FILE")
    if content is None and kind_or_content.strip().lower() in rag.KINDS:
        raise click.UsageError(f"CONTENT is missing after the kind {kind_or_content!r} "
                               f"(`forge remember {kind_or_content} -` reads it from stdin)")
    kind, text = ("fact", kind_or_content) if content is None else (kind_or_content, content)
    if kind.strip().lower() not in rag.KINDS:
        raise click.BadParameter(f"unknown kind {kind[:64]!r}; valid kinds: {', '.join(rag.KINDS)}",
                                 param_hint="KIND")
    from_stdin = text == "-"
    text = _read_stdin_if_dash(text)
    if from_stdin and not text.strip():
        from ..core.errors import ForgeError

        raise ForgeError("stdin is empty: nothing to remember (CONTENT `-` reads it from stdin)")
    with _open() as store:
        result = conflicts.remember(store, kind, text, project=project, replaces=replaces,
                                    created=created)
        named = conflicts.may_replace_written(store, result) if may_replace else None
    message = (f"remembered #{result.id}" if result.created
               else f"already stored as #{result.id} (exact duplicate, nothing written)")
    if result.replaced:
        message += "; it replaces " + ", ".join(f"#{i}" for i in result.replaced)
    data = result.to_dict() if named is None else {**result.to_dict(), "may_replace": named}
    emit_one(data, fmt, text=message)
    note_secrets(result.secrets_redacted)
    for line in result.notes():
        note(f"note: {line}")
    if named:
        for n in named:
            note(f"may replace: #{n['id']} {_date(n['created'], n['created_known'])} "
                 f"{n['content']}")
        note(f"`forge memory supersede ID --by {result.id}` links the one that states the "
             "former value (a second thing of the kind replaces nothing)")


def _read_batch(stream: Any, project: str | None) -> list[Any]:
    from ..core import checks
    from ..core.errors import ForgeError
    from ..store import rag

    items = []
    for number, raw in enumerate(stream, 1):  # bytes, so a bad encoding names its line
        try:
            line = raw.decode("utf-8-sig" if number == 1 else "utf-8")  # a BOM from Windows editors
        except UnicodeDecodeError:
            raise ForgeError(f"--batch line {number} is not UTF-8; convert the file with "
                             "`iconv -t UTF-8`") from None
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as e:
            raise ForgeError(f"--batch line {number} is not JSON: {e.msg}") from None
        except RecursionError:
            raise ForgeError(f"--batch line {number} is nested too deeply to be an entry") from None
        try:
            checks.json_text(obj, "line")
        except checks.BadValue as e:
            raise ForgeError(f"--batch line {number}: {e.why}") from None
        if not isinstance(obj, dict) or not isinstance(obj.get("content"), str):
            raise ForgeError(f'--batch line {number} needs an object with a "content" string')
        item = rag.NewEntry(kind=obj.get("kind") or "fact", content=obj["content"],
                            project=obj.get("project", project), created=obj.get("created"),
                            created_known=obj.get("created_known", True))
        try:
            items.append(rag.validate_new(item))
        except ForgeError as e:
            raise ForgeError(f"--batch line {number}: {e}") from None
    return items


@click.command()
@click.argument("query", required=False)
@click.option("--queries", "queries_file", type=click.File("rb"), metavar="FILE|-",
              help='Many queries in one process: one per line, or JSONL {"q": ..., "id": ...}; '
                   "with --nl one JSON line per query, in input order.")
@click.option("--project", "-p", help="Search this project only.")
@click.option("--limit", "-n", type=Number(1, 1000), default=None,
              help="Rows budget [default: 10]: one fused ranking of the three channels fills it.")
@click.option("--vector-k", type=Number(0, 1000), default=None,
              help="Calibration: a budget per channel instead of --limit (no latent terms); rows the "
                   "vector channel may return (taken before the cutoff) [5 when only "
                   "--lexical-k is given].")
@click.option("--lexical-k", type=Number(0, 1000), default=None,
              help="Calibration: rows the word channel may return [5 when only --vector-k "
                   "is given].")
@click.option("--neighbours/--no-neighbours", default=True, show_default=True,
              help="With --limit: the archived exchanges beside the best row, when the vector "
                   "and word channels both found it, join the rows, tagged neighbour (after "
                   "the first five when one channel put another row first).")
@click.option("--kind", "-k", type=Kind(archive=True), help="Search entries of this kind only.")
@click.option("--all", "all_", is_flag=True,
              help="Also entries a newer one replaced (`remember --replaces`, `memory "
                   "supersede`), tagged with what replaced them.")
@click.option("--since", metavar="WHEN",
              help="Only entries from the start of WHEN on: an ISO date or datetime, or an "
                   "expression (last week, 2024, en mars 2024, il y a deux ans).")
@click.option("--until", metavar="WHEN",
              help="Only entries up to the end of WHEN (as --since).")
@click.option("--no-time", "no_time", is_flag=True,
              help="Do not read a time expression in QUERY (its words stay words).")
@click.option("--as-of", "as_of", metavar="WHEN",
              help="As the store stood at the end of WHEN: entries created by then, and not "
                   "replaced by an entry created by then.")
@output_options
def recall(query: str | None, queries_file: Any, project: str | None, limit: int | None,
           vector_k: int | None, lexical_k: int | None, neighbours: bool, kind: str | None,
           all_: bool, since: str | None, until: str | None, no_time: bool, as_of: str | None,
           fmt: str) -> None:
    """Search the deliberate memory: three channels fused into one ranking.

    The vector channel reads the question's meaning (distance), the word channel its rare
    words (bm25), the latent-term channel the terms of meaning it shares with an entry
    (sparse, embedded embedder only). Each row's channel says what found it: vector, lexical,
    both (vector and word channels), latent (the latent-term channel alone), neighbour (an
    archived exchange beside the best row), replacement (what replaced an entry they found,
    in its place) or replaced (for a question about the past, what a row replaced). Its
    fused score orders the rows: each channel that found it adds a share in [0, 1], and a
    second model re-reads the candidate notes
    (RECALL_SENTENCE, on by default: `sentence`), so fused is in [0, 4]. --since/--until narrow every channel to that window. A time
    expression in QUERY ("last week", "en mars 2024") names a period: every channel searches
    what was said from 14 days before it on, and the rows said in it come first. With no
    time, the newer of two rows that state a changed fact comes first (the older says which);
    a question about a former value ("before", "avant"...) gets the older, replaced ones too.
    QUERY `-` reads stdin. `--queries FILE|-` answers many queries with one model load.
    """
    from ..recall import channels
    from ..recall import rank

    if limit is not None and (vector_k is not None or lexical_k is not None):
        raise click.UsageError("give --limit (fused rows budget) or --vector-k/--lexical-k "
                               "(per-channel budgets), not both")
    if limit is None and vector_k is None and lexical_k is None:
        limit = rank.DEFAULT_LIMIT
    timing = _recall_time(since, until, as_of)
    if queries_file is not None:
        if query is not None:
            raise click.UsageError("give QUERY or --queries FILE, not both")
        if all_:
            raise click.UsageError("--all shows replaced entries for one QUERY; --queries "
                                   "answers with active entries only")
        _recall_many(queries_file, project, vector_k, lexical_k, kind, limit, neighbours, fmt,
                     read_time=not no_time, **timing)
        return
    if query is None:
        raise click.UsageError("give a QUERY (`-` reads stdin), or --queries FILE")
    query = _read_stdin_if_dash(query).strip()
    if not query:
        raise click.UsageError("QUERY is empty")
    if len(query) > channels.MAX_QUERY_CHARS:
        raise click.BadParameter(
            f"the query is {len(query)} characters; recall takes at most {channels.MAX_QUERY_CHARS} "
            "characters (a question, not a document): shorten it to the words that matter",
            param_hint="QUERY")
    beside_ends = None
    if limit is not None and get_settings().recall_sentence:
        # the fused ranking reads the sentence model: its load starts now, beside the store's
        # opening, rather than once the channels start (docs/recall.md, "What it costs"); the
        # renderer first, so a process forked for the load shares its import
        from ..recall import sentence

        renderer(fmt)
        sentence.load_later()
        beside_ends = sentence.end_beside
    try:
        with _open(mode="read") as store:
            result = rank.recall(store, query, limit=limit, vector_k=vector_k,
                                 lexical_k=lexical_k, project=project, kind=kind,
                                 neighbours=neighbours, replaced=all_,
                                 read_time=not no_time, **timing)
            if not result.rows:
                _note_unknown_project(store, project)
    finally:
        if beside_ends is not None:   # once the rows are ranked: asked or not, it is done
            beside_ends()
    rows = [row.to_dict() for row in result.rows]
    for row, r in zip(rows, result.rows):
        row["date"] = _date(r.entry.created, r.entry.created_known)
        row["content"] = _marked(r, row["content"])
    if result.time is not None:
        _note_window(result.time)
    if result.cutoff is not None:
        nearest = (f", the nearest at {result.nearest_dropped:.4f}"
                   if result.nearest_dropped is not None else "")
        note(f"cutoff {result.cutoff} dropped {result.dropped_by_cutoff} vector row(s){nearest}")
    if result.coverage is not None:
        from ..recall.refusal import Coverage

        note(Coverage(**result.coverage).explain())
    emit(rows, fmt, columns=RECALL_COLUMNS, document=result.to_dict(), empty="no results")


def _recall_time(since: str | None, until: str | None, as_of: str | None) -> dict[str, Any]:
    """--since/--until/--as-of as rank.recall's arguments (timeline.arguments)."""
    if since is None and until is None and as_of is None:
        return {}
    from ..recall import timeline

    return timeline.arguments(get_settings(), since, until, as_of)


def _date(created: str, known: bool = True) -> str:
    from ..core.when import shown_date

    return shown_date(created, known)


def _marked(r: Any, content: str) -> str:
    """A row's content as a table shows it: what replaced it, or that a newer one states the
    fact, or which replaced entries it stands in for."""
    from ..store import rag

    if rag.is_replaced(r.entry):
        content = f"(replaced by #{r.entry.superseded_by}) {content}"
    elif r.newer is not None:
        content = f"(older: #{r.newer} is newer) {content}"
    if r.in_place_of:
        ids = ", ".join(f"#{i}" for i in r.in_place_of[:3])
        more = f" and {len(r.in_place_of) - 3} more" if len(r.in_place_of) > 3 else ""
        content = f"(in place of {ids}{more}) {content}"
    return content


def _note_window(time: dict[str, Any]) -> None:
    """The window on stderr: what was read, and what an empty one left out."""
    if time["since"] is not None or time["until"] != time.get("as_of"):
        span = (f"{_date(time['since']) if time['since'] else '…'} to "
                f"{_date(time['until']) if time['until'] else 'now'} (until excluded)")
        said = f'"{time["from_query"]}": ' if time.get("from_query") else ""
        searched = time.get("searched") or {}
        if time.get("from_query"):
            told = (f"from {_date(searched['since'])} on" if searched.get("since")
                    else "at any time")
            note(f"time {said}{span}; rows said in it first, then others said {told}")
        else:
            note(f"time window {said}{span}")
            if time.get("unknown_time_excluded"):
                note(f"{time['unknown_time_excluded']} entr"
                     f"{'y' if time['unknown_time_excluded'] == 1 else 'ies'} whose time is "
                     "unknown (imported without one) left out: a window filters known times")
    if time.get("as_of"):
        from ..core.when import local_date

        note(f"as the store stood before {local_date(time['as_of'])} (--as-of)")
    if time.get("excluded") is not None:
        note(f"no entry in this window; {time['excluded']} row(s) outside it match "
             "(--no-time, or another window, to see them)")


BATCH_COLUMNS = ["n", "id", "query", "entry", "channel", "distance", "fused", "content"]


def _recall_many(stream: Any, project: str | None, vector_k: int | None, lexical_k: int | None,
                 kind: str | None, limit: int | None, neighbours: bool, fmt: str,
                 **timing: Any) -> None:
    from ..recall import many
    from ..core.errors import ForgeError

    name = getattr(stream, "name", "-")
    source = "--queries -" if name in ("-", "<stdin>") else f"--queries {name}"
    try:
        text = stream.read().decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ForgeError(f"{source} is not UTF-8") from None
    queries = many.parse_queries(text, source=source)
    if not queries:
        raise click.UsageError(f"{source} holds no query")
    with _open(mode="read") as store:
        batch = many.search_many(store, queries, project=project,
                                 vector_k=vector_k, lexical_k=lexical_k,
                                 kind=kind, limit=limit, neighbours=neighbours,
                                 **timing)
    answers = [a.to_dict() for a in batch.answers]
    if fmt == "nl":
        emit(answers, fmt, columns=[])
    else:
        rows = [{"n": n, "id": a.query.id, "query": a.query.q, "entry": f"#{r.entry.id}",
                 "channel": r.channel, "distance": r.distance, "fused": r.fused,
                 "content": _marked(r, r.entry.content)}
                for n, a in enumerate(batch.answers, 1) for r in a.result.rows]
        emit(rows, fmt, columns=BATCH_COLUMNS, document=answers, empty="no results")
    dropped = sum(a.result.dropped_by_cutoff for a in batch.answers)
    cutoff = batch.answers[0].result.cutoff if batch.answers else None
    if cutoff is not None:
        note(f"cutoff {cutoff} dropped {dropped} vector row(s) over {len(answers)} queries")
    judged = [a.result.coverage for a in batch.answers if a.result.coverage is not None]
    if judged:
        note(f"RECALL_MIN_COVERAGE {judged[0]['threshold']}: {sum(c['refused'] for c in judged)} "
             f"of {len(answers)} queries refused (no row): too little of their latent terms in "
             "their nearest entries")
    note(f"{len(answers)} queries: embedding {batch.embed_seconds:.2f} s, "
         f"search {batch.search_seconds:.2f} s")


@click.group()
def memory() -> None:
    """List, show, edit, export and forget deliberate memories."""


def _entry_label(entry: Any) -> str:
    label = f"#{entry.id} [{entry.kind}]"
    if not entry.superseded_by:
        return label
    replaced = " (replaced)" if entry.superseded_reason == "replace" else ""
    return f"{label} -> #{entry.superseded_by}{replaced}"


@memory.command("ls")
@click.argument("kind", required=False, type=Kind(archive=True))
@click.option("--project", "-p", help="Only this project.")
@click.option("--filter", "query", type=FILTER,
              help="Only entries whose text holds this (case-insensitive).")
@click.option("--limit", type=Number(1, MAX_COUNT),
              help="At most N entries (a page); default all.")
@click.option("--cursor", type=CURSOR, help="Start after the page that gave this next_cursor.")
@click.option("--since", metavar="WHEN",
              help="Only entries created from the start of WHEN on (as `recall --since`).")
@click.option("--until", metavar="WHEN", help="Only entries created up to the end of WHEN.")
@output_options
def memory_ls(kind: str | None, project: str | None, query: str | None, limit: int | None,
              cursor: str | None, since: str | None, until: str | None, fmt: str) -> None:
    """List entries by id, and the count by kind (of KIND only, when given).
    Superseded entries show the entry that speaks for them: `#312 [fact] -> #341`.
    With --limit, one page: --json gives its next_cursor for --cursor. --since/--until:
    entries created in that window (the count by kind too)."""
    from ..store import rag

    window = _recall_time(since, until, None).get("window")
    with _open(mode="rows") as store:
        page, by_kind = rag.listing(store, kind=kind, project=project, query=query,
                                    cursor=cursor, limit=limit, window=window)
        entries = page.entries
        if not entries:
            _note_unknown_project(store, project)
    data = [e.to_dict() for e in entries]
    rows = [{**d, "entry": _entry_label(e), "created": e.created + ("" if e.created_known else "?")}
            for d, e in zip(data, entries)]
    emit(rows, fmt, columns=LS_COLUMNS, data=data,
         document={**page.to_dict(), "by_kind": by_kind}, empty="no entries")
    if page.next_cursor and fmt == "table":
        note(f"{page.total} entries match; the next page: --cursor {page.next_cursor}")
    if fmt == "table" and (entries or kind is None) and by_kind:
        total = sum(by_kind.values())
        summary = ", ".join(f"{k} {n}" for k, n in by_kind.items())
        click.echo("\n" + summary + ("" if kind is not None else f" (total {total})"))


CONFLICT_COLUMNS = ["ids", "reason", "older", "newer"]


@memory.command("conflicts")
@click.option("--project", "-p", help="Only this project.")
@click.option("--kind", "-k", type=Kind(), help="Only this kind.")
@output_options
def memory_conflicts(project: str | None, kind: str | None, fmt: str) -> None:
    """List every pair of active entries (same kind and project) that may say opposite
    things: a negation bearing on words the other states (`negation: never`), or two values
    for the same thing (`number: 8 / 64 Go`). Reads rows only: no embedding. Settle one with
    `forge memory supersede OLD --by NEW`."""
    from ..memory import conflicts

    with _open(mode="rows") as store:
        report = conflicts.find(store, project=project, kind=kind)
        if not report.conflicts:
            _note_unknown_project(store, project)
    data = [c.to_dict() for c in report.conflicts]
    def said(c: Any, n: int) -> str:   # a note whose time is unknown is neither side
        return ("(time unknown) " if c.ids[n] in c.time_unknown else "") + c.contents[n]

    rows = [{"ids": f"#{c.ids[0]} #{c.ids[1]}", "reason": c.reason, "older": said(c, 0),
             "newer": said(c, 1)} for c in report.conflicts]
    emit(rows, fmt, columns=CONFLICT_COLUMNS, data=data, wide=("older", "newer"),
         document={"conflicts": data}, empty="no conflicts")
    if fmt == "table" and rows:
        note(f"{len(rows)} conflict(s) among {report.entries_scanned} active entries; "
             "`forge memory supersede OLD --by NEW` keeps the newer")


VACUUM_HELP = ("PostgreSQL: then VACUUM FULL the entries' tables, so the old row versions "
               "leave the table files (takes a lock; seconds on a large store). SQLite "
               "always rewrites its file after a forget or redaction: nothing more to do.")


SCAN_COLUMNS = ("place", "id", "secrets", "preview")


@memory.command("scan")
@click.option("--redact", is_flag=True,
              help="Rewrite each place found with its secrets replaced by markers: the "
                   "entries' text, word index, vector and latent terms, the history, the trace "
                   "log (asks first).")
@click.option("--yes", "-y", is_flag=True, help="Do not ask (--redact).")
@click.option("--vacuum", is_flag=True,
              help="Then VACUUM FULL the entries' tables (PostgreSQL: the old row versions "
                   "leave the table files; takes a lock) or rewrite the SQLite file again (what "
                   "finishes a rewrite another process held up); even when nothing is found.")
@output_options
def memory_scan(redact: bool, yes: bool, vacuum: bool, fmt: str) -> None:
    """List the entries, history messages and trace records that hold a secret (an API key,
    a token, a private key, a password): written before Forge redacted them, or under
    FORGE_KEEP_SECRETS. Nothing it prints holds the secret itself. --redact rewrites them in
    place, the old text's bytes erased from the store's file (asks on a terminal; --yes
    otherwise)."""
    from ..core.secret_scan import describe
    from ..memory.scan import scan

    if vacuum and not redact:
        raise click.UsageError("--vacuum goes with --redact")
    settings = get_settings()
    report = scan(settings)
    if redact and report.holders:
        confirm_destructive(
            f"redact {describe(report.secrets, '')} in {report.count('entry')} entr"
            f"{'y' if report.count('entry') == 1 else 'ies'}, {report.count('message')} "
            f"message(s) and {report.count('trace')} trace(s)", yes,
            preview="`forge memory scan` without --redact lists them")
        if report.count("entry"):
            _note_rewrite(settings)
        report = scan(settings, redact_them=True)
    data = [h.to_dict() for h in report.holders]
    rows = [{**h.to_dict(), "secrets": ", ".join(f"{k} ×{n}" if n > 1 else k
                                                  for k, n in h.secrets.items())}
            for h in report.holders]
    emit(rows, fmt, columns=SCAN_COLUMNS, data=data, wide=("preview",),
         document=report.to_dict(), empty="no secret found")
    if report.holders:
        where = (f"in {report.count('entry')} entries, {report.count('message')} messages, "
                 f"{report.count('trace')} traces")
        note(f"{describe(report.secrets)} {where}" if report.redacted else
             f"{describe(report.secrets, 'found')} {where}; `forge memory scan --redact` "
             "replaces them")
    if vacuum:
        _vacuum(settings)


@memory.command("supersede")
@click.argument("entry_ids", nargs=-1, required=True, type=ENTRY_ID, metavar="ID...")
@click.option("--by", "by", type=ENTRY_ID, metavar="ID", help="The entry that replaces them.")
@click.option("--undo", is_flag=True,
              help="Release each replaced ID: active again, in the hot block and recall.")
@output_options
def memory_supersede(entry_ids: tuple[int, ...], by: int | None, undo: bool, fmt: str) -> None:
    """Entry --by ID replaces each ID (a newer fact): one transaction, the link's reason is
    `replace`; a replaced entry leaves the hot block and recall's rows (`recall --all` shows
    it). `--undo` releases them. Refused: an entry replacing itself, a cycle, a --by entry
    that is itself superseded, archive entries, across kinds or projects."""
    from ..store import rag

    if undo == (by is not None):
        raise click.UsageError("give --by ID (the entry that replaces them), or --undo")
    with _open() as store:
        if undo:
            done = rag.unreplace(store, entry_ids)
            text = "released " + ", ".join(f"#{i} (was replaced by #{done['by'][i]})"
                                           for i in done["released"])
            done = {"released": done["released"], "by": {str(k): v for k, v in done["by"].items()}}
        else:
            done = rag.replace(store, entry_ids, by)
            text = (", ".join(f"#{i}" for i in done["replaced"]) + f" replaced by #{by}; "
                    f"`forge memory supersede --undo {' '.join(map(str, done['replaced']))}` "
                    "releases them")
    emit_one(done, fmt, text=text)


@memory.command("show")
@click.argument("entry_id", type=ENTRY_ID)
@output_options
def memory_show(entry_id: int, fmt: str) -> None:
    """One entry: its content, refs and the events that touched it."""
    from ..store import rag

    with _open(mode="rows") as store:
        entry = rag.get_entry(store, entry_id)
        events = rag.entry_events(store, entry_id)
    lines = [_entry_label(entry) + (f" project {entry.project}" if entry.project else ""),
             f"source {entry.source}, created {entry.created}"
             + ("" if entry.created_known else
                " (time unknown: when an import without times stored it)")
             + f", updated {entry.updated}"]
    if entry.refs:
        lines.append("refs " + dumps(entry.refs))
    lines += ["", entry.content, "", "events:"]
    for ev in events:
        link = f" -> #{ev['link']}" if ev["link"] else ""
        if ev["link"] and (ev.get("info") or {}).get("reason") == "replace":
            link += " (replace)"
        lines.append(f"  {ev['at']} {ev['event']} #{ev['entry_id']}{link}")
    emit_one({**entry.to_dict(), "events": events}, fmt, text="\n".join(lines))


@memory.command("forget")
@click.argument("entry_ids", nargs=-1, type=ENTRY_ID, metavar="[ID]...")
@click.option("--kind", "-k", type=Kind(archive=True), help="Forget every entry of this kind.")
@click.option("--project", "-p", help="Forget every entry of this project.")
@click.option("--dry-run", is_flag=True, help="List what would be forgotten; change nothing.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask (--kind/--project).")
@click.option("--vacuum", is_flag=True, help=VACUUM_HELP)
@output_options
def memory_forget(entry_ids: tuple[int, ...], kind: str | None, project: str | None,
                  dry_run: bool, yes: bool, vacuum: bool, fmt: str) -> None:
    """Remove entries from the rows, vectors and words: each ID, or every entry of --kind
    and/or --project (which asks first; --yes when stdin is not a terminal). The event log
    keeps only that an id was forgotten; entries one superseded are released back into the
    hot tier. A missing ID forgets nothing."""
    from ..store import rag

    bulk = kind is not None or project is not None
    if entry_ids and bulk:
        raise click.UsageError("give IDs or --kind/--project, not both")
    if not entry_ids and not bulk:
        raise click.UsageError("give the ID of the entry to forget (several are fine), or "
                               "--kind/--project to forget every entry that matches")
    with _open() as store:
        if bulk:
            targets = rag.list_entries(store, kind=kind, project=project)
            if not targets:
                _note_unknown_project(store, project)
        else:
            targets = _entries_or_none(store, list(dict.fromkeys(entry_ids)))
        if dry_run or not targets:
            rows = [{"id": e.id, "kind": e.kind, "project": e.project, "content": e.content}
                    for e in targets]
            emit(rows, fmt, columns=("id", "kind", "project", "content"),
                 empty="no entry matches: nothing to forget")
            if targets:
                note(f"would forget {len(targets)} entr{'y' if len(targets) == 1 else 'ies'}; "
                     "dry run, nothing changed")
            return
        if bulk:
            scope = " and ".join(f"{name} {value!r}" for name, value in
                                 (("kind", kind), ("project", project)) if value is not None)
            confirm_destructive(f"forget {len(targets)} entr{'y' if len(targets) == 1 else 'ies'} "
                          f"of {scope}", yes)
        _note_rewrite(get_settings())
        results = [f.to_dict() for f in rag.forget_many(store, [e.id for e in targets])]
        if vacuum:
            _vacuum_note(rag.vacuum(store, after_erase=True))
    if len(entry_ids) == 1:  # one ID: one object, as scripts have always read it
        r = results[0]
        emit_one(r, fmt, text=_forgot_line(r))
    elif fmt == "table":
        for r in results:
            click.echo(_forgot_line(r))
    else:
        emit(results, fmt, columns=("id", "kind", "released"))


LARGE_STORE_BYTES = 100_000_000   # ~25k entries: the rewrite after a forget takes a second or more


def _note_rewrite(settings: Any) -> None:
    """A forget, redaction or edit rewrites the SQLite file after its commit (no byte of the old
    text stays): on a large file, say so first rather than look stuck."""
    if settings.database_url:
        return
    try:
        size = settings.rag_db_file.stat().st_size
    except OSError:
        return
    if size >= LARGE_STORE_BYTES:
        note(f"rewriting {settings.rag_db_file.name} ({size / 1e6:.0f} MB) afterwards so that no "
             "byte of the old text stays: this takes a few seconds")


def _vacuum(settings: Any) -> None:
    from ..store import rag

    if not settings.database_url and not settings.rag_db_file.exists():
        return
    with rag.open_store(settings) as store:
        _vacuum_note(rag.vacuum(store))


def _vacuum_note(done: dict[str, Any]) -> None:
    if done["vacuumed"]:
        note(f"vacuumed {', '.join(done['vacuumed'])} in {done['seconds']:.1f} s")


def _entries_or_none(store: Any, entry_ids: list[int]) -> list[Any]:
    """Every entry asked for, or a NotFoundError naming each missing id: one missing id
    forgets nothing."""
    from ..store import rag
    from ..core.errors import NotFoundError

    found, missing = [], []
    for entry_id in entry_ids:
        try:
            found.append(rag.get_entry(store, entry_id))
        except NotFoundError:
            missing.append(entry_id)
    if missing:
        listed = ", ".join(f"#{i}" for i in missing)
        raise NotFoundError(f"no memory entry {listed}; `forge memory ls` lists them"
                            + ("" if len(entry_ids) == 1 else "; nothing was forgotten"))
    return found


def _forgot_line(result: dict[str, Any]) -> str:
    text = f"forgot #{result['id']} [{result['kind']}]"
    if result["released"]:
        text += "; released " + ", ".join(f"#{i}" for i in result["released"])
    return text


@memory.command("edit")
@click.argument("entry_id", type=ENTRY_ID)
@click.argument("content", required=False)
@click.option("--kind", "-k", type=Kind(), help="The new kind.")
@output_options
def memory_edit(entry_id: int, content: str | None, kind: str | None, fmt: str) -> None:
    """Change entry ID's text to CONTENT (`-` reads stdin) and/or its kind, in place: the id
    stays, the vector and words are redone, and the event log records the edit.

    An edit that would duplicate another entry is refused and names it; a folded source or
    an aggregate must have its fold undone first.
    """
    from ..store import rag

    if content is None and kind is None:
        raise click.UsageError("give the new CONTENT, or --kind, or both")
    if content is not None:
        from_stdin = content == "-"
        content = _read_stdin_if_dash(content)
        if from_stdin and not content.strip():
            raise click.UsageError("stdin is empty: no new CONTENT (`-` reads it from stdin)")
    from ..recall.writing import rows_written

    with _open() as store:
        edited = rag.edit(rows_written(store), entry_id, content=content, kind=kind)
    entry = edited.entry
    text = (f"edited #{entry.id} [{entry.kind}]: {' and '.join(edited.changed)} changed"
            if edited.changed else f"#{entry.id} already says that: nothing changed")
    emit_one(edited.to_dict(), fmt, text=text)
    note_secrets(edited.secrets_redacted)


@memory.command("export")
@click.option("--kind", "-k", type=Kind(), help="Only this kind.")
@click.option("--project", "-p", help="Only this project.")
def memory_export(kind: str | None, project: str | None) -> None:
    """Write the deliberate entries as JSON Lines on stdout, by id: the format
    `forge remember --batch` reads, so `forge memory export > m.jsonl` then
    `forge remember --batch m.jsonl` copies them into another store. Archive entries stay
    out: compaction wrote them from the history."""
    from ..store import rag

    with _open(mode="rows") as store:
        entries = rag.list_entries(store, kind=kind, project=project)
        if not entries:
            _note_unknown_project(store, project)
    kept = [e for e in entries if e.kind != rag.ARCHIVE_KIND]
    for e in kept:
        click.echo(dumps(e.export_line()))
    note(f"exported {len(kept)} entr{'y' if len(kept) == 1 else 'ies'}"
         + (f"; {len(entries) - len(kept)} archive entries left out" if len(kept) < len(entries)
            else ""))


@click.command()
@click.option("--batch-size", default=64, show_default=True, type=Number(1, 4096),
              help="Entries embedded per request and committed per transaction.")
@click.option("--sentence", is_flag=True,
              help="Only the sentence model's rows (RECALL_SENTENCE): write those the notes "
                   "lack (a store written before they were stored), or all of them again "
                   "under another model than the one the store records.")
@output_options
def reindex(batch_size: int, sentence: bool, fmt: str) -> None:
    """Re-embed every entry from its text with the configured embedder.

    Needed after changing the embedding model. Resumable: an interrupted run continues
    where it stopped; the store keeps its old vectors until the last batch is written.
    With RECALL_SENTENCE on (the default), the notes lacking their sentence row get it after.
    """
    from ..recall.writing import rows_written
    from ..store import rag
    from .output import progress

    settings = get_settings()
    if sentence and not settings.recall_sentence:
        raise click.UsageError("--sentence writes the sentence model's rows, but "
                               "RECALL_SENTENCE is off")
    result = rows = None
    with _open(check_identity=False) as store:
        if not sentence:
            total = rag.count_entries(store)
            with progress(range(total), length=total, label="re-embedding") as bar:
                def advance(n: int, _total: int) -> None:
                    bar.update(n)

                result = rag.reindex(store, batch_size=batch_size, on_progress=advance)
        if settings.recall_sentence:
            rows = _sentence_rows(rows_written(store), batch_size)
    lines = []
    if result is not None:
        ident = result.identity
        lines.append(f"re-embedded {result.entries} entries with {ident['backend']} model "
                     f"{ident['model']!r} ({ident['dim']} dims)"
                     + (f", resuming after {result.resumed_from} already done"
                        if result.resumed_from else ""))
    if rows is not None and (sentence or rows["rows"] or rows["cleared"]):
        lines.append(f"wrote {rows['rows']} sentence rows with {rows['identity']['model']} "
                     f"{rows['identity']['version']}"
                     + (f" ({rows['cleared']} rows of another model dropped)"
                        if rows["cleared"] else ""))
    doc = {**(result.to_dict() if result is not None else {}),
           **({"sentence": rows} if rows is not None else {})}
    emit_one(doc, fmt, text="\n".join(lines))


def _sentence_rows(store: Any, batch_size: int) -> dict[str, Any]:
    """rag.reindex_sentence with its progress bar (stderr, on a terminal), drawn once the count
    of rows to write is known."""
    import contextlib

    from ..store import rag
    from .output import progress

    with contextlib.ExitStack() as stack:
        bars: list[Any] = []

        def advance(n: int, total: int) -> None:
            if not bars:
                bars.append(stack.enter_context(progress(range(total), length=total,
                                                         label="sentence rows")))
            bars[0].update(n)

        return rag.reindex_sentence(store, batch_size=batch_size, on_progress=advance)


@memory.command("hot")
@click.option("--project", "-p", help="Only this project.")
@output_options
def memory_hot(project: str | None, fmt: str) -> None:
    """Print the hot block exactly as the recall synthesis prompt holds it (no embedding call)."""
    from ..recall.hot_memory import hot_block

    block = hot_block(get_settings(), project=project)
    if fmt != "table" or block.text:
        emit_one(block.to_dict(), fmt, text=block.text)
    budget = get_settings().recall_hot_max_tokens
    if not block.text and block.left_out:
        note(f"no hot block: not one of the {block.left_out} entries fits in "
             f"RECALL_HOT_MAX_TOKENS={budget}")
    elif not block.text:
        note("the hot block is empty: no deliberate entry in memory")
    elif block.left_out:
        note(f"{block.left_out} newer entries are left out (RECALL_HOT_MAX_TOKENS={budget})")
