"""The real PostgreSQL the Postgres tests run against (tests/postgres_server.py)."""
from __future__ import annotations

import socket

from postgres_server import connect, postgres_server_module


def test_the_server_answers_a_pgvector_distance(postgres_url):
    with connect(postgres_url) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        (distance,) = conn.execute("SELECT '[1,2,3]'::vector <-> '[3,2,1]'").fetchone()
    assert abs(distance - 8 ** 0.5) < 1e-9


def test_each_test_gets_its_own_empty_database(postgres_server, postgres_url):
    with connect(postgres_url) as conn:
        (name,) = conn.execute("SELECT current_database()").fetchone()
        tables = conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone()
        conn.execute("CREATE TABLE mine (x int)")
    assert name.startswith("forge_test_") and postgres_url.endswith("/" + name)
    assert tables == (0,)
    assert postgres_url != postgres_server.url


def test_the_password_is_required_over_tcp(postgres_server):
    import psycopg
    import pytest

    wrong = postgres_server.url.replace(postgres_server.password, "not-the-password")
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(wrong, connect_timeout=5)


def test_stop_by_pid_then_a_restart_in_the_same_folder_keeps_the_data():
    ps = postgres_server_module()
    first = ps.start(fsync=False)  # a new temporary folder
    try:
        with connect(first.url) as conn:
            conn.execute("CREATE TABLE kept (x int)")
            conn.execute("INSERT INTO kept VALUES (42)")
        assert ps.stop(first.pid) is True  # by pid, as `tools/postgres stop PID` does
        assert first.process.wait(5) == 0  # a clean (fast) shutdown, not a kill
        with socket.socket() as sock:
            assert sock.connect_ex(("127.0.0.1", first.port)) != 0
        assert ps.stop(first.pid) is False  # nothing left to stop

        again = ps.start(first.dir, fsync=False)
        try:
            assert again.password == first.password
            with connect(again.url) as conn:
                assert conn.execute("SELECT x FROM kept").fetchall() == [(42,)]
        finally:
            ps.stop(again)
    finally:
        ps.stop(first)
        ps.remove(first.dir)
