"""`forge history import --from chatgpt|claude FILE`: a ChatGPT or Claude data export appended to
the history, compacting as it goes (the export's reading is `forge/memory/exports.py`).

Two passes over the file, each a stream:

1. **Validation**: every conversation is read and checked; nothing is written. A file that is no
   export, or holds a conversation that cannot be read (a malformed record, a truncated file),
   fails here with one line naming the file and the first problem, and nothing is imported,
   unless `skip_bad`: then the bad conversations are counted and left out. Conversations without
   a message Forge keeps are counted as empty, not errors.
2. **Writing**: each conversation's new messages go into the history in ONE locked write (the
   unit of atomicity), and their keys into the ledger in the same lock, right after; with
   `compact`, a conversation longer than the room under MEMORY_MAX_HISTORY goes in pieces that
   fit, each one such write, compacted before the next.

Idempotence: the ledger (`<MEMORY_FILE>.imported`, append-only) holds every message key
`KIND:CONVERSATION_ID/MESSAGE_ID` ever imported, so a re-import of the same export, or of a newer
one holding the same conversations, adds only the messages not seen before, whether the first
import's messages are still in the history, were archived by compaction, or were forgotten since
(a re-import does not bring back what the user deleted). Each write is bracketed: a `?` line
lists its keys as pending, the history is written, then the keys are committed (one line each)
under the history lock. A kill -9 between the two leaves them pending; the next import settles
them (`known_keys`): found in the history's refs or, if compaction moved them meanwhile, in the
archive's refs, they are committed; found nowhere, they were never written and import again.
An interrupted import therefore resumes where it stopped, nothing twice, nothing lost.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..store import history
from ..core.errors import ForgeError
from ..core.secret_scan import Redactions
from .exports import Bad, BadExportError, Conversation, conversations, key_of, ref_of, sniff
from ..core.fileio import append_line, locked
from ..store.history import NewMessage
from .history_import import ImportReport, _run


def _crash_point(name: str) -> None:
    """Tests kill the import here (as kill -9 would) to check that a re-run resumes."""
    from .compaction import _crash_point as crash

    crash(name)


@dataclass
class ExportReport:
    source: str
    kind: str
    conversations: int = 0          # read, bad ones included
    empty: int = 0                  # no message Forge keeps
    skipped: list[str] = field(default_factory=list)   # the bad ones (with skip_bad)
    messages: int = 0               # kept messages in the export
    already: int = 0                # of which imported before (the ledger)
    imported: int = 0
    first_id: int | None = None
    last_id: int | None = None
    compactions: int = 0
    archived: int = 0
    left_out: int = 0
    messages_after: int = 0
    secrets_redacted: dict[str, int] = field(default_factory=dict)   # by type, before the writes

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def ledger_path(settings: Any) -> Path:
    memory = Path(settings.memory_file)
    return memory.with_name(memory.name + ".imported")


def known_keys(settings: Any) -> set[str]:
    """Every message key imported before (the ledger's committed keys), after settling what a
    killed import left pending: a pending key found in the history's refs or in an archive
    entry's refs was written (it is committed now); one found nowhere was not (it is marked
    settled, and imports again)."""
    ledger = ledger_path(settings)
    with locked(settings.memory_file):
        committed, pending = _read_ledger(ledger)
        unsettled = pending - committed
        if unsettled:
            in_history = {key_of(m.ref) for m in history.read(settings.memory_file).messages}
            found = unsettled & in_history
            rest = unsettled - found
            if rest:
                found |= rest & _archived_keys(settings)
            if found:
                append_line(ledger, "\n".join(sorted(found)).encode("utf-8"))
            if unsettled - found:
                append_line(ledger, ("-" + "\t".join(sorted(unsettled - found))).encode("utf-8"))
            committed |= found
    return committed


def _read_ledger(ledger: Path) -> tuple[set[str], set[str]]:
    """(committed keys, pending keys not settled). A line is a committed key; `?KEY<TAB>KEY...`
    lists the keys of a write about to happen; `-KEY<TAB>KEY...` settles pending keys never
    written."""
    committed: set[str] = set()
    pending: set[str] = set()
    settled: set[str] = set()
    try:
        with open(ledger, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if line.startswith("?"):
                    pending.update(line[1:].split("\t"))
                elif line.startswith("-"):
                    settled.update(line[1:].split("\t"))
                elif line:
                    committed.add(line)
    except FileNotFoundError:
        pass
    return committed, pending - settled


def _archived_keys(settings: Any) -> set[str]:
    """The export keys in the archive's refs (a killed import's messages that compaction moved
    out of the history before the import was run again). Read only after such a kill."""
    from ..store import rag

    keys: set[str] = set()
    with rag.open_store(settings, mode="rows", check_identity=False) as store:
        if store.missing:
            return keys
        for entry in rag.list_entries(store, kind=rag.ARCHIVE_KIND):
            keys.update(k for k in (key_of(r) for r in (entry.refs or {}).get("external") or [])
                        if k)
    return keys


def resolve_kind(path: Path, kind: str | None) -> str:
    found = sniff(path)
    if found is None:
        raise BadExportError(
            f"{path}: neither a ChatGPT nor a Claude export (expected their conversations.json, "
            "a JSON array of conversations, or the export's .zip)")
    if kind is not None and kind != found:
        raise BadExportError(f"{path}: a {_name(found)} export, not a {_name(kind)} one "
                             f"(drop --from, or pass --from {found})")
    return found


def _name(kind: str) -> str:
    return {"chatgpt": "ChatGPT", "claude": "Claude"}[kind]


def import_export(settings: Any, path: Path, *, kind: str | None = None, skip_bad: bool = False,
                  compact: bool = False, strategy: str | None = None,
                  on_progress: Callable[[int, int], None] | None = None) -> ExportReport:
    """Import a ChatGPT or Claude export (see the module docstring for the rules)."""
    path = Path(path)
    kind = resolve_kind(path, kind)
    report = ExportReport(source=str(path), kind=kind)
    known = known_keys(settings)
    new = _validate(path, kind, known, report, skip_bad)
    if not compact and new:
        current = len(history.read(settings.memory_file).messages)
        if current + new > settings.max_history:
            raise ForgeError(
                f"{path}: importing {new} messages would take the history to {current + new}, "
                f"over MEMORY_MAX_HISTORY={settings.max_history}, and the cap would drop messages "
                "that were never archived; nothing was imported: use --compact to archive as it "
                "imports")
    if new:
        _write(settings, path, kind, known, report, compact, strategy, on_progress)
    report.messages_after = len(history.read(settings.memory_file).messages)
    return report


def _validate(path: Path, kind: str, known: set[str], report: ExportReport,
              skip_bad: bool) -> int:
    """The validation pass: counts into `report`, returns how many messages are new."""
    new = 0
    for item in conversations(path, kind):
        report.conversations += 1
        if isinstance(item, Bad):
            if not skip_bad:
                raise BadExportError(f"{path}: {item}; nothing was imported: fix it, or pass "
                                     "--skip-bad to import the other conversations")
            report.skipped.append(str(item))
            continue
        if not item.messages:
            report.empty += 1
            continue
        report.messages += len(item.messages)
        fresh = sum(1 for m in item.messages if m.key not in known)
        report.already += len(item.messages) - fresh
        new += fresh
    return new


def _new_messages(conversation: Conversation, known: set[str],
                  found: Redactions) -> list[tuple[str, NewMessage]]:
    """The messages not imported yet. The title is redacted here, whole, before each ref cuts
    it (counted once): cut first, half a token would no longer be recognised."""
    if all(m.key in known for m in conversation.messages):
        return []
    title = found.text(conversation.title)
    out = []
    for i, m in enumerate(conversation.messages):
        if m.key in known:
            continue
        content = m.content
        if i == 0 and title:
            # The title is searchable through the conversation's first exchange.
            content = f"[conversation: {title}]\n{content}"
        ref = ref_of(m.key, title) if title != conversation.title else m.ref
        out.append((m.key, NewMessage(role=m.role, content=content, ref=ref, ts=m.ts,
                                      ts_known=m.ts is not None)))
    return out


def _write(settings: Any, path: Path, kind: str, known: set[str], report: ExportReport,
           compact: bool, strategy: str | None,
           on_progress: Callable[[int, int], None] | None) -> None:
    from ..core.tokens import token_counter

    strategy = strategy or settings.compaction_strategy
    store = None
    if compact and strategy == "rag_pointer":
        from ..store import rag

        store = rag.open_store(settings)
    counter = token_counter(settings) if compact else None
    # history_import's compaction loop counts into an ImportReport; its totals are copied over.
    # the history writes and the compactions count what they redacted into the report
    found = Redactions.for_settings(settings, counts=report.secrets_redacted)
    tally = ImportReport(source=str(path), secrets_redacted=report.secrets_redacted)
    total = report.conversations
    try:
        if store is not None:
            store.checked_embedder()   # an embedding outage fails here, before any write
        for done, item in enumerate(conversations(path, kind), 1):
            if isinstance(item, Conversation):
                pending = _new_messages(item, known, found)
                while pending:
                    pending = _write_piece(settings, pending, known, report, tally, compact,
                                           strategy, store, counter, found)
            if on_progress:
                on_progress(done, total)
    except ForgeError as e:
        if not report.imported:
            raise
        raise ForgeError(f"{e}; {report.imported} messages were imported before it: run the "
                         "same import again once this is fixed, it resumes where it stopped") from None
    finally:
        report.compactions, report.archived = tally.compactions, tally.archived
        report.left_out = tally.left_out
        if store is not None:
            store.close()


def _write_piece(settings: Any, pending: list[tuple[str, NewMessage]], known: set[str],
                 report: ExportReport, tally: ImportReport, compact: bool, strategy: str,
                 store: Any, counter: Any, found: Redactions) -> list[tuple[str, NewMessage]]:
    """One locked write of as much of `pending` as fits; the rest is returned."""
    room = len(pending)
    if compact:
        room = settings.max_history - len(history.read(settings.memory_file).messages)
        if room <= 0:
            _run(settings, tally, strategy, store, counter, forced=True)
            if len(history.read(settings.memory_file).messages) >= settings.max_history:
                raise ForgeError(f"the history is full (MEMORY_MAX_HISTORY={settings.max_history}) "
                                 "of messages compaction cannot evict (pinned?)")
            return pending
    piece, rest = pending[:room], pending[room:]
    if rest and rest[0][1].role != "user":
        # End the piece on a whole exchange, so compaction never archives a question without
        # the answer that comes in the next piece.
        last_user = max((i for i, (_, m) in enumerate(piece) if m.role == "user"), default=0)
        if last_user > 0:
            piece, rest = piece[:last_user], piece[last_user:] + rest
        elif _run(settings, tally, strategy, store, counter, forced=True):
            return pending   # room was made: the exchange may fit whole now
    keys = [k for k, _ in piece]
    ledger = ledger_path(settings)
    def record() -> None:
        _crash_point("export_history_write")
        append_line(ledger, "\n".join(keys).encode("utf-8"))

    # Pending first: a kill between the history write and the committed keys leaves them
    # pending, and the next import finds them in the history or the archive (known_keys).
    append_line(ledger, ("?" + "\t".join(keys)).encode("utf-8"))
    _crash_point("export_pending")

    stored = history.append(settings.memory_file, [m for _, m in piece],
                            max_history=settings.max_history, after_write=record,
                            redactions=found)
    known.update(keys)
    _crash_point("export_piece")
    if stored:
        report.first_id = report.first_id or stored[0].id
        report.last_id = stored[-1].id
    report.imported += len(stored)
    if compact:
        while _run(settings, tally, strategy, store, counter, forced=False):
            pass
    return rest
