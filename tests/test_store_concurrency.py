"""Several machines, one PostgreSQL store: real `forge` processes, each with
its own history file and data folder, writing at once into the same database.

- two `forge compact` at once, histories whose message ids and texts are the SAME (both start
  at #1): nothing lost, nothing duplicated, each archive entry tied to its own history;
- `forge remember` of the same note from several processes at once: stored once (an exact
  duplicate writes nothing, under the unique constraint and the write lock);
- kill -9 in the middle of a compaction's write transaction, and after the store write but
  before the history rewrite: the next run repairs exactly as with SQLite;
- a server that is down or refuses the password: one line naming the URL without the
  password, exit 1, nothing written locally.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from forge.memory import compaction
from forge.store import history, rag
from forge.store.history import NewMessage
from forge.core.settings import load_settings

pytestmark = pytest.mark.postgres

FORGE = [sys.executable, "-m", "forge"]


def machine(root: Path, name: str, url: str, **extra: str) -> dict[str, str]:
    """The environment of one "machine": its own data folder (history, traces, no store)."""
    data = root / name
    data.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("RAG_DB_FILE", "MEMORY_FILE", "TRACE_FILE")}
    env.update(FORGE_DATA_DIR=str(data), FORGE_DATABASE_URL=url, COMPACTION_THRESHOLD="4",
               COMPACTION_KEEP_RECENT="2", **extra)
    return env


def settings_of(env: dict[str, str]):
    return load_settings({k: v for k, v in env.items()
                          if k.startswith(("FORGE_", "COMPACTION_", "MEMORY_", "RAG_"))},
                         cwd=Path(env["FORGE_DATA_DIR"]))


def fill_history(env: dict[str, str], exchanges: int) -> None:
    s = settings_of(env)
    msgs = []
    for i in range(exchanges):
        msgs += [NewMessage("user", f"question {i}: the NiPoGi item number {i}?"),
                 NewMessage("assistant", f"answer {i}: item {i} is fine")]
    history.append(s.memory_file, msgs, max_history=10_000)


def archives(url: str, root: Path) -> list:
    s = load_settings({"FORGE_DATABASE_URL": url, "FORGE_DATA_DIR": str(root / "reader")},
                      cwd=root)
    with rag.open_store(s, check_identity=False) as store:
        return rag.list_entries(store, kind="archive")


def check_each_message_archived_once(envs, entries) -> None:
    for env in envs:
        doc = history.read(settings_of(env).memory_file)
        mine = [e for e in entries if e.refs.get("history") == doc.history_id]
        ids = [m for e in mine for m in e.refs["messages"]]
        assert len(ids) == len(set(ids)), "a message archived twice"
        kept = {m.id for m in doc.messages if not m.is_compaction}
        pointers = [m for m in doc.messages if m.is_compaction]
        assert len(pointers) == 1
        assert sorted(pointers[0].meta["entries"]) == sorted(e.id for e in mine)
        # every message of the history is either still there or archived, never both
        assert kept.isdisjoint(ids)
        assert sorted(kept | set(ids)) == list(range(1, max(kept | set(ids)) + 1))


def test_two_machines_compacting_at_once_lose_nothing_and_duplicate_nothing(postgres_url, tmp_path):
    envs = [machine(tmp_path, name, postgres_url) for name in ("laptop", "desktop")]
    for env in envs:
        fill_history(env, 12)     # the same 24 message ids and the same texts on both
    procs = [subprocess.Popen(FORGE + ["compact", "--json"], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE) for env in envs]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1].decode() for o in outs]
    entries = archives(postgres_url, tmp_path)
    assert len(entries) == 2 * 11       # 11 exchanges archived per machine, the last one kept
    histories = {history.read(settings_of(env).memory_file).history_id for env in envs}
    assert {e.refs["history"] for e in entries} == histories and len(histories) == 2
    check_each_message_archived_once(envs, entries)
    for env in envs:
        assert not settings_of(env).rag_db_file.exists()   # no SQLite store on either machine

    # both again at once, with nothing new: nothing written
    again = [subprocess.run(FORGE + ["compact"], env=env, capture_output=True, timeout=300)
             for env in envs]
    assert [p.returncode for p in again] == [0, 0]
    assert len(archives(postgres_url, tmp_path)) == 22


def test_the_same_note_remembered_by_several_machines_at_once_is_stored_once(postgres_url, tmp_path):
    envs = [machine(tmp_path, f"m{i}", postgres_url) for i in range(3)]
    note = "Le NAS du salon tourne sous TrueNAS Scale"
    procs = [subprocess.Popen(FORGE + ["remember", "fact", note, "--json"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for env in envs]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], [o[1].decode() for o in outs]
    answers = [json.loads(o[0]) for o in outs]
    assert len({a["id"] for a in answers}) == 1
    assert sorted(a["created"] for a in answers) == [False, False, True]
    s = load_settings({"FORGE_DATABASE_URL": postgres_url, "FORGE_DATA_DIR": str(tmp_path / "r")},
                      cwd=tmp_path)
    with rag.open_store(s, check_identity=False) as store:
        assert [e.content for e in rag.list_entries(store)] == [note]


def test_kill_9_inside_the_write_transaction_then_a_rerun_archives_everything_once(
        postgres_url, tmp_path):
    """The test holds an exclusive lock on memory_message_refs: the compaction's transaction
    has inserted its first entry and waits there. kill -9 then: PostgreSQL rolls the open
    transaction back, nothing half-written; the re-run archives every exchange once."""
    import psycopg

    env = machine(tmp_path, "laptop", postgres_url)
    fill_history(env, 6)
    # a first, ordinary write creates the schema and the vector table
    subprocess.run(FORGE + ["remember", "fact", "Possède un Steam Deck"], env=env, check=True,
                   capture_output=True, timeout=300)
    before = history.read(settings_of(env).memory_file)
    database = postgres_url.rsplit("/", 1)[1]
    # `watch` looks from outside the blocker's transaction (inside it, pg_stat_activity would
    # be one snapshot taken at its first read)
    with psycopg.connect(postgres_url, autocommit=True) as blocker, \
            psycopg.connect(postgres_url, autocommit=True) as watch:
        blocker.execute("begin")
        blocker.execute("lock table memory_message_refs in access exclusive mode")
        proc = subprocess.Popen(FORGE + ["compact"], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        deadline = time.monotonic() + 120
        waiting = []
        while time.monotonic() < deadline and not waiting:
            waiting = [r for r in watch.execute(
                "select a.pid from pg_stat_activity a where a.datname = %s and "
                "a.application_name = 'forge' and a.wait_event_type = 'Lock'", (database,))]
            time.sleep(0.05)
        if not waiting:
            proc.kill()
            out, err = proc.communicate(timeout=30)
            pytest.fail(f"the compaction never reached its write transaction: {err.decode()}")
        # its open transaction has written into memory_entries (the row lock it holds says so)
        inserted = watch.execute(
            "select 1 from pg_locks l join pg_stat_activity a on a.pid = l.pid "
            "where a.application_name = 'forge' and a.datname = %s and l.granted "
            "and l.relation = 'memory_entries'::regclass and l.mode = 'RowExclusiveLock'",
            (database,)).fetchone()
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        blocker.execute("rollback")
    assert proc.returncode == -signal.SIGKILL
    assert inserted is not None
    assert archives(postgres_url, tmp_path) == []          # the open transaction rolled back
    assert history.read(settings_of(env).memory_file).messages == before.messages
    rerun = subprocess.run(FORGE + ["compact"], env=env, capture_output=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr.decode()
    entries = archives(postgres_url, tmp_path)
    assert len(entries) == 5
    check_each_message_archived_once([env], entries)


def test_a_crash_after_the_store_write_is_repaired_by_the_next_run(postgres_url, tmp_path):
    """As tests/test_compaction.py does with SQLite: the process dies after the archive
    entries are committed and before the history is rewritten; the re-run finds them by
    (history id, message ids) and rewrites the history, writing no second copy."""
    env = machine(tmp_path, "laptop", postgres_url)
    fill_history(env, 4)
    before = history.read(settings_of(env).memory_file)
    killed = subprocess.run(FORGE + ["compact"], env={**env, compaction.CRASH_ENV: "store_write"},
                            capture_output=True, timeout=300)
    assert killed.returncode == 137, killed.stderr.decode()
    after_crash = history.read(settings_of(env).memory_file)
    assert after_crash.messages == before.messages and after_crash.history_id
    stored = archives(postgres_url, tmp_path)
    assert sorted(e.refs["messages"] for e in stored) == [[1, 2], [3, 4], [5, 6]]
    rerun = subprocess.run(FORGE + ["compact", "--json"], env=env, capture_output=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr.decode()
    report = json.loads(rerun.stdout)
    assert all(a["already_stored"] for a in report["archived"])
    assert sorted(e.id for e in archives(postgres_url, tmp_path)) == sorted(e.id for e in stored)
    check_each_message_archived_once([env], archives(postgres_url, tmp_path))


@pytest.mark.parametrize("what", ["down", "password"])
def test_an_unreachable_server_is_one_line_exit_1_and_nothing_written_locally(
        what, postgres_server, tmp_path):
    import socket

    if what == "down":
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        url = f"postgresql://forge:s3cret-pw@127.0.0.1:{port}/forge"
    else:
        url = postgres_server.url.replace(f":{postgres_server.password}@", ":s3cret-pw@")
    env = machine(tmp_path, "laptop", url)
    for args in (["remember", "fact", "Possède un Steam Deck"], ["recall", "Steam Deck"],
                 ["memory", "ls"]):
        done = subprocess.run(FORGE + args, env=env, capture_output=True, timeout=120)
        err = done.stderr.decode().strip()
        assert done.returncode == 1, (args, err)
        assert "s3cret-pw" not in err and "s3cret-pw" not in done.stdout.decode()
        assert len(err.splitlines()) == 1, err
        assert "127.0.0.1" in err and "***" in err, err
    data = Path(env["FORGE_DATA_DIR"])
    assert not settings_of(env).rag_db_file.exists()
    assert not list(data.glob("*.db*"))


# -- two connections whose transactions really overlap ----------------------------------------

def two_backends(url: str, root: Path):
    from forge.store import postgres

    s = load_settings({"FORGE_DATABASE_URL": url, "FORGE_DATA_DIR": str(root / "two")}, cwd=root)
    return s, postgres.open_backend(s, mode="write", url=url), postgres.open_backend(s, mode="write", url=url)


def test_two_write_transactions_on_two_connections_are_serialised_by_the_advisory_lock(
        postgres_url, tmp_path):
    """A is inside its write transaction and holds it; B starts its own on another connection
    (the barrier says A is in); B may only get in after A committed. Without
    pg_advisory_xact_lock, B gets in at once, while A is still inside: this test goes red."""
    import threading

    _, a, b = two_backends(postgres_url, tmp_path)
    a_inside = threading.Barrier(2, timeout=30)
    times: dict[str, float] = {}

    def writer_a() -> None:
        with a.transaction():
            a_inside.wait()
            time.sleep(0.8)          # B is trying to get in now
            times["a_commit"] = time.monotonic()
        times["a_done"] = time.monotonic()

    def writer_b() -> None:
        a_inside.wait()
        time.sleep(0.1)
        with b.transaction():
            times["b_in"] = time.monotonic()

    threads = [threading.Thread(target=writer_a), threading.Thread(target=writer_b)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
    finally:
        a.close()
        b.close()
    assert times["b_in"] >= times["a_commit"], "B wrote while A's transaction was open"


def test_a_dedup_key_race_with_a_writer_that_took_no_lock_is_already_stored(postgres_url, tmp_path):
    """B (another connection, no advisory lock: an older Forge, a script) has inserted the same
    text in a transaction it has not committed yet; A's remember re-checks (B's row is not
    visible), inserts, waits on the UNIQUE dedup key, and B commits: A must answer "already
    stored" with B's id, as SQLite would, not fail with a UniqueViolation."""
    import threading

    from forge.store.common import NewEntry, dedup_key, validate_new
    from forge.core.timestamps import utc_now

    s, _, b = two_backends(postgres_url, tmp_path)
    note = NewEntry("fact", "Le NAS du salon tourne sous TrueNAS Scale", None, "remember", None)
    with rag.open_store(s) as store:        # the identity and the vector table exist
        first = rag.remember(store, "fact", "Une autre note, pour créer le store")
        vector = store.embedder.embed_documents([note.content])[0]
    result: dict[str, object] = {}

    def writer_a() -> None:
        try:
            with rag.open_store(s) as store:
                result["a"] = rag.remember(store, note.kind, note.content)
        except Exception as e:  # noqa: BLE001 - the test reports it
            result["a"] = e

    try:
        with b.conn.transaction():           # B's transaction, without pg_advisory_xact_lock
            clean = validate_new(note)
            result["b"] = b.insert_entry(clean, dedup_key(clean), vector, utc_now())
            a = threading.Thread(target=writer_a)
            a.start()
            waited = 0.0
            while waited < 20 and not _waiting_on_a_lock(postgres_url):
                time.sleep(0.1)
                waited += 0.1
            assert waited < 20, "A never reached the insert"
        a.join(timeout=60)
    finally:
        b.close()
    assert not isinstance(result["a"], Exception), result["a"]
    assert (result["a"].id, result["a"].created) == (result["b"], False)
    with rag.open_store(s, check_identity=False) as store:
        assert sorted(e.id for e in rag.list_entries(store)) == sorted([first.id, result["b"]])


def _waiting_on_a_lock(url: str) -> bool:
    """Another session is waiting for a lock (A on B's uncommitted dedup key)."""
    from psycopg import connect

    with connect(url, autocommit=True) as c:
        return c.execute("select count(*) from pg_stat_activity where wait_event_type = 'Lock' "
                         "and datname = current_database()").fetchone()[0] > 0
