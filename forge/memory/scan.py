"""`forge memory scan [--redact]`: the secrets that a store, a history and a trace log written
before Forge redacted them (or under FORGE_KEEP_SECRETS) still hold, and their rewrite in place.

The scan reads every entry's text and refs, every history message and every trace record with
the same scanner the writes use (forge/core/secret_scan.py), and lists where each secret is, by type,
with a preview in which it is already replaced: nothing it prints holds a secret. `--redact`
rewrites what it found: the entries through `rag.redact_entries` (text, words, vector and latent
terms, one erasing transaction), the history under its lock (each message scanned again there),
the trace log whole under the lock its appenders take. FORGE_KEEP_SECRETS does not apply: the
command is asked for by name.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ..core.secret_scan import Redactions, redact

PREVIEW_CHARS = 100


@dataclass
class Holder:
    """One place that holds a secret: an entry, a history message or a trace record."""

    place: str                       # "entry" | "message" | "trace"
    id: int | str                    # entry id, message id, trace run_id
    secrets: dict[str, int]          # type -> how many
    preview: str                     # the start of the text, its secrets already replaced

    def to_dict(self) -> dict[str, Any]:
        return {"place": self.place, "id": self.id, "secrets": self.secrets,
                "preview": self.preview}


@dataclass
class ScanReport:
    holders: list[Holder] = field(default_factory=list)
    redacted: bool = False           # --redact rewrote them

    def count(self, place: str) -> int:
        return sum(1 for h in self.holders if h.place == place)

    @property
    def secrets(self) -> dict[str, int]:
        total = Redactions()
        for h in self.holders:
            total.merge(h.secrets)
        return total.to_dict()

    def to_dict(self) -> dict[str, Any]:
        return {"entries": self.count("entry"), "messages": self.count("message"),
                "traces": self.count("trace"), "secrets": self.secrets,
                "redacted": self.redacted, "holders": [h.to_dict() for h in self.holders]}


def _preview(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= PREVIEW_CHARS else flat[:PREVIEW_CHARS - 1] + "…"


def _counts(labels: list[str]) -> dict[str, int]:
    found = Redactions()
    found.add(labels)
    return found.to_dict()


def scan(settings: Any, *, redact_them: bool = False) -> ScanReport:
    """Every entry, history message and trace record that holds a secret; with `redact_them`,
    each rewritten with its secrets replaced by markers."""
    from ..core.errors import StoreError

    report = ScanReport(redacted=redact_them)
    unfinished: StoreError | None = None
    try:
        report.holders += _entries(settings, redact_them)
    except StoreError as e:
        if not redact_them:
            raise
        # the store's own failure (its file rewrite waited past the timeout: the entries are
        # redacted, their old bytes not yet overwritten) keeps no secret in the other two
        unfinished = e
    report.holders += _messages(settings, redact_them)
    report.holders += _traces(settings, redact_them)
    if unfinished is not None:
        raise StoreError(f"{unfinished}; the history and the trace log were scanned and "
                         "redacted") from None
    return report


def entries_holding_secrets(texts: Any) -> dict[int, tuple[str, dict[str, int]]]:
    """id -> (the redacted text, its secrets by type) of every entry among `texts` ((id, text)
    pairs) that holds one."""
    out: dict[int, tuple[str, dict[str, int]]] = {}
    for entry_id, text in texts:
        cleaned, labels = redact(text)
        if labels:
            out[entry_id] = (cleaned, _counts(labels))
    return out


def _entries(settings: Any, redact_them: bool) -> list[Holder]:
    """Each entry's text, and its refs (an archive entry repeats its messages' refs, which name
    a conversation's title)."""
    from ..store import rag

    if not settings.database_url and not settings.rag_db_file.exists():
        return []
    ids: list[int] = []

    def texts() -> Any:
        for entry_id, text in rag.texts(store):
            ids.append(entry_id)
            yield entry_id, text

    with rag.open_store(settings, mode="write" if redact_them else "rows") as store:
        found = entries_holding_secrets(texts())
        new_refs: dict[int, dict] = {}
        for start in range(0, len(ids), 500):
            for entry_id, entry in store.backend.entries_by_id(ids[start:start + 500]).items():
                tally = Redactions()
                cleaned = tally.value(entry.refs)
                if not tally.counts:
                    continue
                new_refs[entry_id] = cleaned
                text, counts = found.get(entry_id, (entry.content, {}))
                found[entry_id] = (text, Redactions(counts=dict(counts)).merge(tally).to_dict())
        if redact_them and found:
            from ..recall.writing import rows_written

            rag.redact_entries(rows_written(store), found, new_refs)
    return [Holder("entry", i, counts, _preview(text))
            for i, (text, counts) in sorted(found.items())]


def _messages(settings: Any, redact_them: bool) -> list[Holder]:
    from ..store import history

    holders: list[Holder] = []

    def look(doc: Any) -> None:
        holders.clear()
        for m in doc.messages:
            cleaned, labels = redact(m.content)
            ref_cleaned, ref_labels = redact(m.ref) if isinstance(m.ref, str) else (m.ref, [])
            if labels or ref_labels:
                holders.append(Holder("message", m.id, _counts(labels + ref_labels),
                                      _preview(cleaned)))
                if redact_them:
                    m.content, m.ref = cleaned, ref_cleaned

    if not settings.memory_file.exists():
        return []
    if redact_them:
        with history.edit(settings.memory_file) as doc:
            look(doc)
    else:
        look(history.read(settings.memory_file))
    return holders


def _traces(settings: Any, redact_them: bool) -> list[Holder]:
    from ..core.fileio import rewrite_log
    from ..store.traces import redact_record

    holders: list[Holder] = []

    def change(data: bytes) -> bytes:
        holders.clear()
        lines = data.split(b"\n")
        for n, raw in enumerate(lines):
            try:
                record = json.loads(raw)
            except (ValueError, UnicodeDecodeError):
                continue   # a torn line stays as it is
            if not isinstance(record, dict):
                continue
            found = Redactions()
            cleaned = redact_record(record, found)
            if found.counts:
                holders.append(Holder("trace", str(record.get("run_id", "?")), found.to_dict(),
                                      _preview(str(cleaned.get("user_input_preview", "")))))
                lines[n] = json.dumps(cleaned, ensure_ascii=False,
                                      separators=(",", ":")).encode("utf-8")
        return b"\n".join(lines)

    path = settings.trace_file
    if not path.exists():
        return []
    if redact_them:
        rewrite_log(path, change)
    else:
        change(path.read_bytes())
    return holders
