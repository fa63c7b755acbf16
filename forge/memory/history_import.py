"""`forge history import`: append an outside transcript to the history, compacting as it goes.

Input is a JSON array or JSON Lines of `{role, content, ts?, ref?, answered?}`. Every record is
checked before anything is written: a file with bad records imports nothing (each bad record is
reported with its line number) unless the caller skips them. Imported messages get new stable
ids from the history's counter and keep their `ref`, which compaction then carries into the
archive entries' refs.

Without compaction an import that would push the history over MEMORY_MAX_HISTORY fails before
writing, because the cap would drop messages that were never archived. With it, messages go in
by chunks that fit under the cap and each chunk is compacted before the next, so a long
transcript ends up archived, one entry per exchange, and the cap never drops an imported message.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from . import compaction
from ..core import checks
from ..core.checks import shown
from ..store import history
from ..core.errors import ForgeError
from ..store.history import ROLES, NewMessage
from ..core.log import log
from ..core.secret_scan import Redactions

FIELDS = ("role", "content", "ts", "ref", "answered")


@dataclass
class BadRecord:
    line: int
    problem: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.problem}"


class BadRecordsError(ForgeError):
    """Some records do not parse; nothing was imported."""

    def __init__(self, source: str, bad: list[BadRecord]):
        self.bad = bad
        super().__init__(f"{source}: {len(bad)} bad record{'s' if len(bad) != 1 else ''} "
                         f"(first: {bad[0]}); nothing was imported: fix them, or pass --skip-bad "
                         "to import the others")


@dataclass
class ImportReport:
    source: str
    read: int = 0
    imported: int = 0
    first_id: int | None = None
    last_id: int | None = None
    skipped: list[BadRecord] = field(default_factory=list)
    compactions: int = 0
    archived: int = 0
    left_out: int = 0
    messages_after: int = 0
    secrets_redacted: dict[str, int] = field(default_factory=dict)   # by type, before the writes

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# -- parsing ------------------------------------------------------------------------------------

def decode(data: bytes, source: str) -> str:
    """A transcript's bytes as text: UTF-8, with or without the BOM some Windows tools write."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise ForgeError(f"{source}: not UTF-8 (byte 0x{data[e.start]:02x} on line {line}); nothing "
                         "was imported: convert it first, e.g. `iconv -f latin1 -t utf-8`") from None


def _check(obj: Any) -> tuple[NewMessage | None, str | None, set[str]]:
    """One record -> a NewMessage, or the problem with it; plus the unknown field names."""
    if not isinstance(obj, dict):
        return None, "expected an object like {\"role\": \"user\", \"content\": \"...\"}", set()
    try:
        checks.json_text(obj, "record")
    except checks.BadValue as e:
        return None, e.why, set()
    unknown = set(obj) - set(FIELDS)
    role = obj.get("role")
    if not isinstance(role, str) or role not in ROLES:
        return None, f"role must be one of {', '.join(ROLES)} (got {shown(role)})", unknown
    content = obj.get("content")
    if not isinstance(content, str):
        return None, "content must be a string", unknown
    ts = obj.get("ts")
    if ts is not None:
        if not isinstance(ts, str):
            return None, f"ts is not an ISO 8601 time ({shown(ts)})", unknown
        from ..core.when import to_stored

        try:   # the rule of remember --at (it dates the exchange); kept as written
            to_stored(ts, what="ts")
        except ForgeError as e:
            return None, str(e), unknown
    ref = obj.get("ref")
    if ref is not None and not isinstance(ref, (str, int)) or isinstance(ref, bool):
        return None, "ref must be a string", unknown
    answered = obj.get("answered", True)
    if not isinstance(answered, bool):
        return None, "answered must be true or false", unknown
    return NewMessage(role=role, content=content, answered=answered,
                      ref=str(ref) if ref is not None else None, ts=ts,
                      ts_known=ts is not None), None, unknown


def _array_items(text: str) -> list[tuple[int, Any]]:
    """The items of a JSON array with the line each starts on. A broken array is fatal: past a
    syntax error nothing tells where the next record starts."""
    decoder = json.JSONDecoder()
    items: list[tuple[int, Any]] = []
    pos = text.index("[") + 1

    def skip(p: int) -> int:
        while p < len(text) and text[p] in " \t\r\n":
            p += 1
        return p

    def line_of(p: int) -> int:
        return text.count("\n", 0, p) + 1

    pos = skip(pos)
    if pos < len(text) and text[pos] == "]":
        pos += 1
    else:
        while True:
            try:
                obj, end = decoder.raw_decode(text, pos)
            except json.JSONDecodeError as e:
                raise ForgeError(f"the JSON array is broken at line {e.lineno} column {e.colno} "
                                 f"({e.msg}); nothing was imported") from None
            except RecursionError:
                raise ForgeError(f"the JSON array's item at line {line_of(pos)} is nested too "
                                 "deeply to be a message; nothing was imported") from None
            items.append((line_of(pos), obj))
            pos = skip(end)
            if pos < len(text) and text[pos] == ",":
                pos = skip(pos + 1)
                continue
            if pos < len(text) and text[pos] == "]":
                pos += 1
                break
            raise ForgeError(f"the JSON array is broken at line {line_of(pos)}: expected ',' or ']'; "
                             "nothing was imported")
    if skip(pos) < len(text):
        raise ForgeError(f"text after the JSON array at line {line_of(skip(pos))}; nothing was imported")
    return items


def parse_records(text: str) -> tuple[list[NewMessage], list[BadRecord]]:
    """Records of a JSON array or of JSON Lines, and the bad ones with their line numbers."""
    if text.lstrip().startswith("["):
        raw = _array_items(text)
        raw_bad: list[BadRecord] = []
    else:
        raw, raw_bad = [], []
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                raw.append((number, json.loads(line)))
            except ValueError as e:
                raw_bad.append(BadRecord(number, f"not JSON ({getattr(e, 'msg', e)})"))
            except RecursionError:
                raw_bad.append(BadRecord(number, "nested too deeply to be a message"))
    good: list[NewMessage] = []
    bad = list(raw_bad)
    unknown: set[str] = set()
    for number, obj in raw:
        message, problem, extra = _check(obj)
        unknown |= extra
        if problem:
            bad.append(BadRecord(number, problem))
        else:
            good.append(message)  # type: ignore[arg-type]
    if unknown:
        log.warning("ignored fields not in {%s}: %s", ", ".join(FIELDS),
                    ", ".join(shown(name) for name in sorted(unknown)[:20]))
    bad.sort(key=lambda b: b.line)
    return good, bad


# -- importing ----------------------------------------------------------------------------------

def import_history(settings: Any, text: str, *, source: str = "-", skip_bad: bool = False,
                   compact: bool = False, strategy: str | None = None,
                   on_progress: Callable[[int, int], None] | None = None) -> ImportReport:
    """Append the records in `text` to the history. See the module docstring for the rules."""
    messages, bad = parse_records(text)
    if bad and not skip_bad:
        raise BadRecordsError(source, bad)
    report = ImportReport(source=source, read=len(messages) + len(bad), skipped=bad)
    if not messages:
        report.messages_after = len(history.read(settings.memory_file).messages)
        return report
    found = Redactions.for_settings(settings, counts=report.secrets_redacted)
    if not compact:
        current = len(history.read(settings.memory_file).messages)
        if current + len(messages) > settings.max_history:
            raise ForgeError(
                f"importing {len(messages)} messages would take the history to "
                f"{current + len(messages)}, over MEMORY_MAX_HISTORY={settings.max_history}, and "
                "the cap would drop messages that were never archived; nothing was imported: "
                "use --compact to archive as it imports")
        _append(settings, messages, report, found)
    else:
        _import_compacting(settings, messages, report, strategy, on_progress, found)
    report.messages_after = len(history.read(settings.memory_file).messages)
    return report


def _append(settings: Any, messages: list[NewMessage], report: ImportReport,
            found: Redactions) -> None:
    stored = history.append(settings.memory_file, messages, max_history=settings.max_history,
                            redactions=found)
    if stored:
        report.first_id = report.first_id or stored[0].id
        report.last_id = stored[-1].id
    report.imported += len(stored)


def _import_compacting(settings: Any, messages: list[NewMessage], report: ImportReport,
                       strategy: str | None, on_progress: Callable[[int, int], None] | None,
                       found: Redactions) -> None:
    from ..store import rag
    from ..core.tokens import token_counter

    strategy = strategy or settings.compaction_strategy
    counter = token_counter(settings)
    # Opened once for every chunk, and before the first write: a store that cannot embed fails
    # the import before anything is appended.
    store = rag.open_store(settings) if strategy == "rag_pointer" else None
    try:
        if store is not None:
            store.checked_embedder()   # embeds the identity probe: an outage fails here
        remaining = list(messages)
        while remaining:
            room = settings.max_history - len(history.read(settings.memory_file).messages)
            if room <= 0:
                _run(settings, report, strategy, store, counter, forced=True)
                if len(history.read(settings.memory_file).messages) >= settings.max_history:
                    raise ForgeError(
                        f"the history is full (MEMORY_MAX_HISTORY={settings.max_history}) of "
                        f"messages compaction cannot evict (pinned?); imported {report.imported} "
                        f"of {len(messages)}")
                continue
            chunk, remaining = remaining[:room], remaining[room:]
            _append(settings, chunk, report, found)
            while _run(settings, report, strategy, store, counter, forced=False):
                pass
            if on_progress:
                on_progress(report.imported, len(messages))
    except ForgeError as e:
        if not report.imported:
            raise
        # What went in stays (whole chunks, compacted in order); say where to resume.
        raise ForgeError(f"{e}; the first {report.imported} of {len(messages)} messages were "
                         f"imported, the rest were not: import the records after message "
                         f"{report.imported} once this is fixed") from None
    finally:
        if store is not None:
            store.close()


def _run(settings: Any, report: ImportReport, strategy: str, store: Any, counter: Any, *,
         forced: bool) -> bool:
    result = compaction.compact(settings, strategy=strategy, if_needed=not forced, store=store,
                                counter=counter)
    if not result.did_something:
        return False
    report.compactions += 1
    report.archived += len(result.archived)
    report.left_out += len(result.left_out)
    Redactions(counts=report.secrets_redacted).merge(result.secrets_redacted)
    return True
