"""The one SQLite helper: binding fallback, sqlite-vec, FTS5, transactions, migrations, snapshots."""
from __future__ import annotations

import subprocess
import sys

import pytest

from forge.store import db
from forge.core.errors import StoreError


def test_connection_has_sqlite_vec_wal_and_fts5(tmp_path):
    conn = db.connect(tmp_path / "x.db")
    assert db.vec_version(conn).startswith("v")
    assert conn.execute("pragma journal_mode").fetchone()[0] == "wal"
    assert conn.execute("pragma busy_timeout").fetchone()[0] == db.BUSY_TIMEOUT_MS
    assert db.has_fts5(conn)


def test_a_short_busy_timeout_ends_with_its_block_even_when_the_block_fails(tmp_path):
    """A cache write or a checkpoint loop waits briefly for a lock; whatever happens in it,
    the connection then waits the full timeout again for every later write."""
    conn = db.connect(tmp_path / "x.db")
    with pytest.raises(StoreError), db.busy_timeout(conn, 0):
        assert conn.execute("pragma busy_timeout").fetchone()[0] == 0
        raise StoreError("a long writer holds the lock")
    assert conn.execute("pragma busy_timeout").fetchone()[0] == db.BUSY_TIMEOUT_MS


def test_a_binding_that_cannot_load_extensions_is_refused_clearly():
    """This machine's stdlib sqlite3 has no enable_load_extension: forcing it must say so."""
    import sqlite3

    code = "from forge.store import db\ntry:\n    db.binding()\nexcept Exception as e:\n    print(e)\nelse:\n    print('ok', db.binding().name)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"FORGE_SQLITE_BINDING": "sqlite3", "PATH": ""}).stdout
    if hasattr(sqlite3.Connection, "enable_load_extension"):
        assert out.strip() == "ok sqlite3"  # where the standard binding can, it is used
    else:
        assert "sqlite3 (cannot load extensions)" in out and "pip install sqlean.py" in out


def test_unknown_forced_binding_is_an_error(monkeypatch):
    monkeypatch.setattr(db, "_binding", None)
    monkeypatch.setenv("FORGE_SQLITE_BINDING", "oracle")
    with pytest.raises(StoreError, match="FORGE_SQLITE_BINDING: unknown binding 'oracle'"):
        db.binding()


def test_transaction_rolls_back_on_error(tmp_path):
    conn = db.connect(tmp_path / "x.db")
    conn.execute("create table t (x)")
    with pytest.raises(RuntimeError):
        with db.transaction(conn):
            conn.execute("insert into t values (1)")
            raise RuntimeError("half-way")
    assert conn.execute("select count(*) from t").fetchone()[0] == 0


def test_migrations_apply_in_order_once(tmp_path):
    calls = []

    def m1(conn):
        calls.append("m1")
        conn.execute("create table a (x)")

    def m2(conn):
        calls.append("m2")
        conn.execute("create table b (x)")

    conn = db.connect(tmp_path / "x.db")
    assert db.migrate(conn, [m1]) == ["m1"]
    assert db.migrate(conn, [m1, m2]) == ["m2"]
    assert db.migrate(conn, [m1, m2]) == []
    assert calls == ["m1", "m2"] and db.schema_version(conn) == 2
    with pytest.raises(StoreError, match="newer than this forge"):
        db.migrate(conn, [m1])


def test_a_failing_migration_leaves_the_schema_as_it_was(tmp_path):
    def good(conn):
        conn.execute("create table a (x)")

    def bad(conn):
        conn.execute("create table b (x)")
        raise RuntimeError("boom")

    conn = db.connect(tmp_path / "x.db")
    with pytest.raises(RuntimeError):
        db.migrate(conn, [good, bad])
    assert db.schema_version(conn) == 1
    assert conn.execute("select name from sqlite_master where name = 'b'").fetchone() is None


def test_snapshot_includes_pages_still_in_the_wal(tmp_path):
    live = db.connect(tmp_path / "live.db")
    live.execute("pragma wal_autocheckpoint = 0")  # keep everything in the WAL
    live.execute("create table t (x)")
    with db.transaction(live):
        live.executemany("insert into t values (?)", [(i,) for i in range(1000)])
    assert (tmp_path / "live.db-wal").stat().st_size > 0
    copy = db.snapshot(tmp_path / "live.db", tmp_path / "copy.db")
    assert db.connect(copy).execute("select count(*) from t").fetchone()[0] == 1000


def test_a_readonly_connection_cannot_write(tmp_path):
    conn = db.connect(tmp_path / "x.db")
    conn.execute("create table t (x)")
    ro = db.connect(tmp_path / "x.db", readonly=True)
    with pytest.raises(Exception, match="readonly"):
        ro.execute("insert into t values (1)")


def test_an_untouched_connection_creates_no_side_files_and_sees_committed_rows(tmp_path):
    folder = tmp_path / "store"
    folder.mkdir()
    path = folder / "a b%c.db"  # a path that needs quoting in a file: URI
    conn = db.connect(path)
    conn.execute("create table t (x)")
    conn.execute("insert into t values (1)")
    conn.close()  # the last connection checkpoints and removes the -wal and -shm files
    before = sorted(p.name for p in folder.iterdir())
    ro = db.connect(path, untouched=True)
    assert ro.execute("select x from t").fetchall() == [(1,)]
    ro.close()
    assert sorted(p.name for p in folder.iterdir()) == before == ["a b%c.db"]
    writer = db.connect(path)  # another process has it open: read through its WAL
    writer.execute("insert into t values (2)")
    ro = db.connect(path, untouched=True)
    assert ro.execute("select count(*) from t").fetchone() == (2,)
    with pytest.raises(Exception, match="readonly"):
        ro.execute("insert into t values (3)")
    ro.close()
    writer.close()


def test_two_connections_opening_a_fresh_database_at_once_both_succeed(tmp_path):
    """Switching a new file to WAL needs a lock the busy timeout does not always wait for."""
    import threading

    errors: list[str] = []

    def open_and_write(path, barrier):
        barrier.wait()
        try:
            conn = db.connect(path, vec=False)
            with db.transaction(conn):
                conn.execute("create table if not exists t (x)")
            conn.close()
        except Exception as e:  # noqa: BLE001 - collected for the assertion
            errors.append(str(e))

    for i in range(60):
        barrier = threading.Barrier(2)
        threads = [threading.Thread(target=open_and_write, args=(tmp_path / f"fresh{i}.db", barrier))
                   for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == []
