"""How the deliberate store opens: reads never create it, a read-only folder still reads, a
data folder that is a file says so."""
from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest

from conftest import invoke

NOTE = "yet; `forge remember` creates it"


@pytest.fixture
def read_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Make a folder read-only for this process: chmod for a normal user; for root (whom
    permission bits do not stop) a read-only bind mount over it, as a read-only disk would."""
    mounts: list[Path] = []

    def make(folder: Path) -> Path:
        if os.geteuid() != 0:
            folder.chmod(0o555)
            return folder
        target = folder.with_name(folder.name + "-ro")
        target.mkdir()
        proc = subprocess.run(["mount", "--bind", "-o", "ro", str(folder), str(target)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            pytest.skip(f"running as root without `mount --bind -o ro`: {proc.stderr.strip()}")
        mounts.append(target)
        return target

    yield make
    for target in mounts:
        subprocess.run(["umount", "--lazy", str(target)], check=False)  # even if a handle is open


def test_reads_on_a_missing_store_exit_0_with_empty_output_and_create_nothing(runner, forge_env):
    listing = invoke(runner, "memory", "ls", "--json")
    assert listing.exit_code == 0, listing.stderr
    assert json.loads(listing.stdout) == {"entries": [], "by_kind": {}, "total": 0,
                                          "next_cursor": None}
    assert f"no store at {forge_env / 'forge_rag.db'} {NOTE}" in listing.stderr
    nl = invoke(runner, "memory", "ls", "--nl")
    assert nl.exit_code == 0 and nl.stdout == ""
    found = invoke(runner, "recall", "what CPU does the NiPoGi have", "--nl")
    assert found.exit_code == 0, found.stderr
    assert found.stdout == "" and NOTE in found.stderr
    hot = invoke(runner, "memory", "hot", "--json")
    assert hot.exit_code == 0, hot.stderr
    assert invoke(runner, "context", "--json").exit_code == 0
    assert not forge_env.exists(), list(forge_env.iterdir())
    assert invoke(runner, "remember", "fact", "the NAS has 32 GB").exit_code == 0
    assert (forge_env / "forge_rag.db").exists()
    again = invoke(runner, "memory", "ls", "--nl")
    assert NOTE not in again.stderr and "the NAS has 32 GB" in again.stdout


def test_a_data_folder_that_is_a_file_says_so(runner, tmp_path, monkeypatch):
    afile = tmp_path / "not-a-folder"
    afile.write_text("x")
    monkeypatch.setenv("FORGE_DATA_DIR", str(afile))
    for args in (["remember", "fact", "x"], ["memory", "ls"], ["recall", "x"]):
        result = invoke(runner, *args)
        assert result.exit_code == 1, (args, result.stdout)
        assert f"{afile} is a file, not a folder" in result.stderr, result.stderr
        assert "File exists" not in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
    doctor = invoke(runner, "doctor", "--json")
    rows = {r["check"]: r for r in json.loads(doctor.stdout) if r["check"] == "data folder"}
    assert rows["data folder"]["status"] == "fail"


def test_a_read_only_folder_reads_and_refuses_writes_in_one_line(runner, forge_env, monkeypatch,
                                                                read_only):
    assert invoke(runner, "remember", "fact", "the NiPoGi has an N100 CPU").exit_code == 0
    assert invoke(runner, "remember", "todo", "renew the domain", "-p", "homelab").exit_code == 0
    before = sorted(p.name for p in forge_env.iterdir())
    ro = read_only(forge_env)
    monkeypatch.setenv("FORGE_DATA_DIR", str(ro))
    listing = invoke(runner, "memory", "ls", "--nl")
    assert listing.exit_code == 0, listing.stderr
    assert [json.loads(line)["content"] for line in listing.stdout.splitlines()] == [
        "the NiPoGi has an N100 CPU", "renew the domain"]
    shown = invoke(runner, "memory", "show", "1", "--json")
    assert shown.exit_code == 0 and json.loads(shown.stdout)["id"] == 1
    found = invoke(runner, "recall", "which processor is in the NiPoGi", "--nl")
    assert found.exit_code == 0, found.stderr
    assert json.loads(found.stdout.splitlines()[0])["content"] == "the NiPoGi has an N100 CPU"
    assert invoke(runner, "memory", "hot", "--json").exit_code == 0
    context = invoke(runner, "context", "--json")
    assert context.exit_code == 0, context.stderr
    for args in (["remember", "fact", "a new fact"], ["memory", "forget", "1"]):
        refused = invoke(runner, *args)
        assert refused.exit_code == 1
        assert refused.stderr.strip().splitlines() == [
            f"Error: the data folder {ro} is read-only: cannot write forge_rag.db "
            "(make it writable or point FORGE_DATA_DIR elsewhere)"]
    doctor = invoke(runner, "doctor", "--json")
    rows = {r["check"]: r for r in json.loads(doctor.stdout)}
    assert rows["data folder"]["status"] == "warn" and "read-only" in rows["data folder"]["detail"]
    assert rows["memory store"]["status"] == "ok", rows["memory store"]
    assert sorted(p.name for p in ro.iterdir()) == before


def test_a_read_only_store_that_needs_a_migration_says_how(runner, forge_env, monkeypatch,
                                                           read_only):
    forge_env.mkdir()
    old = sqlite3.connect(forge_env / "forge_rag.db")  # a database from before any schema
    old.execute("create table t(x)")
    old.commit()
    old.close()
    ro = read_only(forge_env)
    monkeypatch.setenv("FORGE_DATA_DIR", str(ro))
    result = invoke(runner, "memory", "ls")
    assert result.exit_code == 1
    assert "has schema 0, this forge needs" in result.stderr
    assert "make" in result.stderr and "writable" in result.stderr
    monkeypatch.setenv("FORGE_DATA_DIR", str(forge_env))
    if os.geteuid() != 0:
        forge_env.chmod(0o755)
    migrated = invoke(runner, "memory", "ls", "--json")
    assert migrated.exit_code == 0, migrated.stderr
    assert json.loads(migrated.stdout)["entries"] == []


def test_a_listing_loads_no_vector_extension_and_sweeps_nothing(runner, forge_env, settings):
    """Migrations and the orphan sweep wait for a write or a vector read: a listing starts fast."""
    from forge.store import db, rag

    assert invoke(runner, "remember", "fact", "one").exit_code == 0
    assert invoke(runner, "remember", "fact", "two").exit_code == 0
    plain = sqlite3.connect(forge_env / "forge_rag.db")  # a shell without sqlite-vec
    plain.execute("delete from memory_entries where id = 1")
    plain.commit()
    plain.close()
    with rag.open_store(settings, mode="rows") as store:
        assert db.vec_version(store.conn) is None
        assert [e.id for e in rag.list_entries(store)] == [2]
        assert store.conn.execute("select count(*) from memory_vector_orphans").fetchone()[0] == 1
    with rag.open_store(settings, mode="read") as store:
        assert store.conn.execute("select count(*) from memory_vector_orphans").fetchone()[0] == 0
        assert store.conn.execute("select count(*) from memory_vectors").fetchone()[0] == 1


def test_history_writes_on_a_read_only_folder_or_a_file_say_so_in_one_line(runner, forge_env,
                                                                          monkeypatch, read_only,
                                                                          tmp_path):
    forge_env.mkdir()
    ro = read_only(forge_env)
    monkeypatch.setenv("FORGE_DATA_DIR", str(ro))
    listing = invoke(runner, "history", "--nl")
    assert listing.exit_code == 0 and listing.stdout == ""
    pinned = invoke(runner, "history", "clear")
    assert pinned.exit_code == 1
    assert pinned.stderr.strip().splitlines() == [
        f"Error: the data folder {ro} is read-only: cannot write memory.json "
        "(make it writable or point FORGE_DATA_DIR elsewhere)"]
    afile = tmp_path / "afile"
    afile.write_text("x")
    monkeypatch.setenv("FORGE_DATA_DIR", str(afile))
    cleared = invoke(runner, "history", "clear")
    assert cleared.exit_code == 1
    assert f"{afile} is a file, not a folder" in cleared.stderr
