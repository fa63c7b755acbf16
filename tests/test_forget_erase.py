"""A forgotten or redacted text leaves no byte in any file of the data folder, on a store large
enough for its pages to have split (a 3-entry store never splits one: the old records that a
split leaves in the unused part of a page are what `secure_delete` never reaches).

One store of 520 entries is written once per session with the embedded model, 30 of them
holding a GitHub token (written under FORGE_KEEP_SECRETS, as a store from before redaction);
each test works on its own copy, through the real CLI, the HTTP route or the MCP tool, then
reads the raw bytes of every file of the data folder (the database, its WAL and journal, the
vector copy).
"""
from __future__ import annotations

import json
import random
import shutil
import string
import time
from pathlib import Path

import pytest
from conftest import invoke

from forge.store import rag

SIZE = 520
SECRETS = 30
WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike "
         "november oscar papa quebec romeo sierra tango").split()


def texts_and_tokens(seed: int = 7) -> tuple[list[str], list[str]]:
    rng = random.Random(seed)
    tokens = ["ghp_" + "".join(rng.choice(string.ascii_letters + string.digits)
                               for _ in range(36)) for _ in range(SECRETS)]
    holders = sorted(rng.sample(range(SIZE), SECRETS))
    texts = []
    for n in range(SIZE):
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 14))) + f" (note {n})"
        if n in holders:
            text += f" my GitHub token is {tokens[holders.index(n)]}"
        texts.append(text)
    return texts, tokens


@pytest.fixture(scope="session")
def secret_store(tmp_path_factory) -> tuple[Path, list[str]]:
    """(the 520-entry store's file, its 30 tokens), written once."""
    from forge.core.settings import load_settings

    folder = tmp_path_factory.mktemp("secret-store")
    texts, tokens = texts_and_tokens()
    settings = load_settings({"FORGE_DATA_DIR": str(folder), "FORGE_KEEP_SECRETS": "1",
                              "LLAMA_CPP_URL": "http://127.0.0.1:9"}, cwd=folder)
    with rag.open_store(settings) as store:
        rag.remember_many(store, [rag.NewEntry("fact", t) for t in texts], batch_size=64)
    return settings.rag_db_file, tokens


@pytest.fixture
def store_copy(secret_store, settings) -> list[str]:
    """The 520-entry store as this test's store; returns its tokens."""
    source, tokens = secret_store
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, settings.rag_db_file)
    return tokens


def copies(folder: Path, tokens: list[str]) -> dict[str, int]:
    """How many times each token, or its word as the word index keeps it (lower-cased, its
    end: FTS5 writes a term after the prefix it shares with the term before it), is in the raw
    bytes of the files of `folder`."""
    found: dict[str, int] = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            data = path.read_bytes()
            for t in tokens:
                n = data.count(t.encode()) + data.count(t[-24:].lower().encode())
                if n:
                    found[f"{path.name}: {t}"] = found.get(f"{path.name}: {t}", 0) + n
    return found


def secret_ids(settings) -> list[int]:
    with rag.open_store(settings, mode="rows") as store:
        return [i for i, text in rag.texts(store) if "ghp_" in text]


def assert_gone(settings, tokens: list[str], *, quiet: bool = True) -> None:
    """No copy of a token in any file; when nothing else writes (`quiet`), an empty WAL too
    (beside writers, theirs may start a new one at once)."""
    assert copies(settings.data_dir, tokens) == {}
    wal = Path(f"{settings.rag_db_file}-wal")
    assert not quiet or not wal.exists() or wal.stat().st_size == 0
    with rag.open_store(settings, mode="rows") as store:
        for t in tokens:
            word = t.split("_", 1)[1].lower()
            assert store.conn.execute("select count(*) from memory_fts where memory_fts match ?",
                                      (f'"{word}"',)).fetchone()[0] == 0


def test_the_store_has_split_pages_that_keep_old_copies_of_the_records(secret_store, settings,
                                                                       store_copy):
    """What the other tests rely on: before any forget, some token is in the file more than
    once (a stale copy a page split left behind), as on a store people actually have."""
    found = copies(settings.data_dir, store_copy)
    assert len(found) == SECRETS
    assert sum(found.values()) > SECRETS


def test_forget_leaves_no_byte_of_the_text_in_any_file(runner, settings, store_copy):
    ids = secret_ids(settings)
    assert len(ids) == SECRETS
    done = invoke(runner, "memory", "forget", *map(str, ids), "--json")
    assert done.exit_code == 0, done.stderr
    assert sorted(r["id"] for r in json.loads(done.stdout)) == ids
    assert_gone(settings, store_copy)
    with rag.open_store(settings, mode="rows") as store:
        assert rag.count_entries(store) == SIZE - SECRETS


def test_forget_of_one_entry_leaves_no_byte_of_its_text(runner, settings, store_copy):
    with rag.open_store(settings, mode="rows") as store:
        texts = dict(rag.texts(store))
    target = secret_ids(settings)[0]
    token = next(t for t in store_copy if t in texts[target])
    assert invoke(runner, "memory", "forget", str(target)).exit_code == 0
    assert_gone(settings, [token])
    others = [t for t in store_copy if t != token]
    assert set(copies(settings.data_dir, others)) == {f"forge_rag.db: {t}" for t in others}


def test_scan_redact_leaves_no_byte_of_the_old_text_in_any_file(runner, settings, store_copy):
    done = invoke(runner, "memory", "scan", "--redact", "--yes", "--json")
    assert done.exit_code == 0, done.stderr
    assert json.loads(done.stdout)["entries"] == SECRETS
    assert_gone(settings, store_copy)
    assert secret_ids(settings) == []


def test_an_edit_of_the_text_leaves_no_byte_of_the_old_one(runner, settings, store_copy):
    target = secret_ids(settings)[0]
    with rag.open_store(settings, mode="rows") as store:
        token = next(t for t in store_copy if t in rag.get_entry(store, target).content)
    done = invoke(runner, "memory", "edit", str(target), "the token was revoked")
    assert done.exit_code == 0, done.stderr
    assert_gone(settings, [token])


def test_undoing_an_aggregate_leaves_no_byte_of_its_line(runner, settings, store_copy):
    from forge.store.results import Fold

    token = "ghp_" + "Aggr3gat3dT0k3nQ" * 2 + "xY9z"
    with rag.open_store(settings) as store:
        sources = rag.entries_by_id(store, secret_ids(settings)[:2])
        line = f"two notes, one line: the token is {token}"
        [result] = rag.apply_folds(store, [Fold(
            sources=sorted(sources), expected={i: e.content for i, e in sources.items()},
            aggregate=rag.NewEntry("fact", line, source="aggregate"),
            vector=store.embedder.embed_documents([line])[0])])
    assert copies(settings.data_dir, [token])
    done = invoke(runner, "aggregate", "--undo", str(result.id))
    assert done.exit_code == 0, done.stderr
    assert_gone(settings, [token])


def test_the_http_and_mcp_forgets_give_the_same_guarantee(settings, store_copy):
    from starlette.testclient import TestClient

    from forge.mcp import documents
    from forge.serve.app import create_app

    first, second = secret_ids(settings)[:2]
    with rag.open_store(settings, mode="rows") as store:
        texts = dict(rag.texts(store))
    tokens = [next(t for t in store_copy if t in texts[i]) for i in (first, second)]
    client = TestClient(create_app(settings), base_url="http://127.0.0.1:8765")
    answer = client.delete(f"/memory/{first}")
    assert answer.status_code == 200, answer.text
    assert_gone(settings, tokens[:1])
    assert documents.forget(settings, second)["id"] == second
    assert_gone(settings, tokens)


def test_a_reader_holding_the_store_past_the_timeout_gets_a_clear_line_and_the_next_forget_finishes(
        settings, store_copy, monkeypatch):
    from forge.core.errors import StoreError
    from forge.store import db

    monkeypatch.setattr(db, "BUSY_TIMEOUT_MS", 300)
    ids = secret_ids(settings)
    reader = db.connect(settings.rag_db_file, readonly=True, vec=False)
    try:
        reader.execute("begin")
        reader.execute("select count(*) from memory_entries").fetchone()  # holds a snapshot
        with rag.open_store(settings) as store:
            with pytest.raises(StoreError, match=r"could not be rewritten .*next forget"):
                rag.forget(store, ids[0])
            assert ids[0] not in rag.entries_by_id(store, [ids[0]])   # the forget is done
    finally:
        reader.execute("rollback")
        reader.close()
    with rag.open_store(settings) as store:
        rag.forget_many(store, ids[1:])
    assert_gone(settings, store_copy)


WRITER = """
import sys, time
from forge.store import db
conn = db.connect(sys.argv[1])
n, until = 0, time.monotonic() + float(sys.argv[2])
while time.monotonic() < until:
    with conn:
        conn.execute("insert into memory_entries(kind, content, source, refs, created, updated) "
                     "values ('fact', ?, 'remember', '{}', '2024-01-01T00:00:00Z', "
                     "'2024-01-01T00:00:00Z')", (f"written beside the forget {n}",))
    n += 1
    if n % 5 == 0:
        conn.execute("pragma wal_checkpoint(passive)")   # as SQLite's auto-checkpoint does
"""


def test_a_forget_beside_busy_writers_still_rewrites_the_file(settings, store_copy):
    """Under load (`forge serve` answering several clients, a `forge compact` cron job), other
    connections keep writing and checkpointing while a forget rewrites the file: SQLite refuses
    its checkpoint at once, busy timeout or not, whenever another one is under way or a write
    came after it. The forget asks again until the timeout instead of answering at once that
    the rewrite is left for later (it did for 19 forgets in 20 beside two writers), and asks
    often enough to find the write lock free between the writers' transactions (SQLite's busy
    handler, polling with sleeps up to 100 ms, waited up to 9.8 s of 10 beside four writers)."""
    import subprocess
    import sys

    ids = secret_ids(settings)
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(settings.rag_db_file), "60"])
               for _ in range(4)]
    try:
        time.sleep(1.5)   # all writing
        with rag.open_store(settings) as store:
            for entry_id in ids:
                rag.forget(store, entry_id)   # no "could not be rewritten"
    finally:
        for writer in writers:
            writer.kill()
            writer.wait()
    assert_gone(settings, store_copy, quiet=False)   # the writers' new rows may be in a WAL


# ------------------------------------------------------------------ PostgreSQL

def database_files(conn) -> list[Path]:
    """Every file of the current database's folder (tables, TOAST, indexes, catalogs), but
    the planner's statistics (pg_statistic): an ANALYZE (autovacuum's, on its own schedule)
    copies sample values there, which docs/secrets.md says and forge cannot clear."""
    folder = Path(conn.execute("show data_directory").fetchone()[0])
    oid = conn.execute("select oid from pg_database where datname = current_database()"
                       ).fetchone()[0]
    stats = conn.execute("select pg_relation_filenode('pg_statistic')").fetchone()[0]
    return [p for p in (folder / "base" / str(oid)).iterdir()
            if p.is_file() and p.name.split("_")[0].split(".")[0] != str(stats)]


def holding(conn, token: str) -> list[str]:
    conn.execute("checkpoint")   # the shared buffers written to the files
    wanted = (token.encode(), token[-24:].lower().encode())
    return sorted(p.name for p in database_files(conn)
                  if any(w in p.read_bytes() for w in wanted))


def holding_bytes(conn, blob: bytes) -> list[str]:
    conn.execute("checkpoint")
    return sorted(p.name for p in database_files(conn) if blob in p.read_bytes())


@pytest.mark.postgres
def test_postgres_keeps_a_forgotten_row_in_its_table_file_until_forget_vacuum(
        runner, monkeypatch, postgres_url):
    import psycopg

    _, tokens = texts_and_tokens()
    monkeypatch.setenv("FORGE_DATABASE_URL", postgres_url)
    monkeypatch.setenv("FORGE_KEEP_SECRETS", "1")
    for n, token in enumerate(tokens[:3]):
        done = invoke(runner, "remember", f"token {n} is {token}")
        assert done.exit_code == 0, done.stderr
    assert invoke(runner, "remember", "the NAS runs Debian 12").exit_code == 0
    monkeypatch.delenv("FORGE_KEEP_SECRETS")
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        ids = [r[0] for r in conn.execute("select id from memory_entries where content like "
                                          "'token %' order by id")]
        # each note's sentence-model row, embedded from the text with its token
        rows = {i: bytes(r)[:256] for i, r in conn.execute("select entry_id, row from "
                                                           "memory_sentence")}
        assert set(ids) <= set(rows)
        assert invoke(runner, "memory", "forget", str(ids[0])).exit_code == 0
        assert holding(conn, tokens[0])          # a dead tuple: the bytes are still in the file
        assert holding_bytes(conn, rows[ids[0]])
        done = invoke(runner, "memory", "forget", str(ids[1]), "--vacuum")
        assert done.exit_code == 0, done.stderr
        assert "vacuumed memory_entries" in done.stderr
        assert holding(conn, tokens[0]) == [] and holding(conn, tokens[1]) == []
        assert holding_bytes(conn, rows[ids[0]]) == [] and holding_bytes(conn, rows[ids[1]]) == []
        assert holding(conn, tokens[2])          # what is not forgotten stays
        assert invoke(runner, "memory", "scan", "--redact", "--yes").exit_code == 0
        assert holding(conn, tokens[2])          # the redaction left a dead tuple
        done = invoke(runner, "memory", "scan", "--redact", "--yes", "--vacuum")
        assert done.exit_code == 0, done.stderr
        assert holding(conn, tokens[2]) == []
        assert holding_bytes(conn, rows[ids[2]]) == []   # the row of the text with the token
        assert [r[0] for r in conn.execute("select content from memory_entries order by id")] == [
            "token 2 is [secret: GitHub token]", "the NAS runs Debian 12"]


def test_vacuum_on_sqlite_is_accepted_and_needs_no_more_work(runner, settings, store_copy):
    target = secret_ids(settings)[0]
    done = invoke(runner, "memory", "forget", str(target), "--vacuum")
    assert done.exit_code == 0, done.stderr
    assert "vacuumed" not in done.stderr     # the forget has rewritten the file already
    refused = invoke(runner, "memory", "scan", "--vacuum")
    assert refused.exit_code == 2 and "--vacuum goes with --redact" in refused.stderr
    done = invoke(runner, "memory", "scan", "--redact", "--yes", "--vacuum")
    assert done.exit_code == 0, done.stderr
    assert "vacuumed forge_rag.db" in done.stderr
    assert_gone(settings, store_copy)


def test_a_large_store_says_first_that_it_rewrites_the_file(runner, settings, store_copy,
                                                             monkeypatch):
    from forge.cli import memory_cmds

    target = secret_ids(settings)[0]
    done = invoke(runner, "memory", "forget", str(target))
    assert done.exit_code == 0 and "rewriting" not in done.stderr   # 3 MB: nothing to say
    monkeypatch.setattr(memory_cmds, "LARGE_STORE_BYTES", 1_000_000)
    done = invoke(runner, "memory", "scan", "--redact", "--yes")
    assert done.exit_code == 0, done.stderr
    assert "rewriting forge_rag.db (" in done.stderr and "no byte of the old text" in done.stderr


def test_a_scan_whose_file_rewrite_waits_past_the_timeout_still_redacts_the_history_and_traces(
        settings, store_copy, monkeypatch):
    """The store's rewrite runs after its entries are redacted; a reader holding it past the
    timeout must not keep the scan from the history and the trace log."""
    from forge.core.errors import StoreError
    from forge.core.secret_scan import Redactions
    from forge.core.settings import load_settings
    from forge.memory import scan
    from forge.store import db, history, traces

    token = store_copy[0]
    monkeypatch.setattr(db, "BUSY_TIMEOUT_MS", 300)
    kept = load_settings()
    history.append(kept.memory_file, [history.NewMessage(role="user", content=f"jeton {token}")],
                   max_history=200, redactions=Redactions(keep=True))
    traces.append(kept.trace_file, {"run_id": "r1", "ok": True, "error": f"jeton {token}"},
                  redactions=Redactions(keep=True))
    assert token in kept.memory_file.read_text() and token in kept.trace_file.read_text()
    reader = db.connect(settings.rag_db_file, readonly=True, vec=False)
    try:
        reader.execute("begin")
        reader.execute("select count(*) from memory_entries").fetchone()  # holds a snapshot
        with pytest.raises(StoreError, match=r"could not be rewritten .*history and the trace"):
            scan.scan(load_settings(), redact_them=True)
    finally:
        reader.execute("rollback")
        reader.close()
    assert token not in kept.memory_file.read_text()
    assert token not in kept.trace_file.read_text()
