"""The bench harnesses: the shared snapshot helper (the live store is never opened), a harness
run end to end on a snapshot, and bench/locomo.py on one conversation so it cannot rot."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
LOCOMO = Path(os.environ.get("FORGE_LOCOMO") or ROOT.parent / "shared" / "data" / "locomo" / "locomo-dev.json")
sys.path.insert(0, str(BENCH))


def test_the_snapshot_helper_refuses_the_live_store(settings, forge_env):
    import store_snapshot

    live = Path(settings.rag_db_file)
    live.parent.mkdir(parents=True, exist_ok=True)
    from forge.store import db

    db.connect(live).close()
    for spelling in (live, Path(os.path.relpath(live)), live.parent / "." / live.name):
        with pytest.raises(store_snapshot.LiveStoreRefused, match="live store"):
            store_snapshot.refuse_live(spelling, settings)
    import dataclasses

    # A snapshot whose destination would be the live store is refused before anything is copied.
    beside = dataclasses.replace(settings, rag_db_file=live.parent / "snapshot.db")
    with pytest.raises(store_snapshot.LiveStoreRefused):
        store_snapshot.fresh_snapshot(live, beside, folder=live.parent)
    assert not (live.parent / "snapshot.db").exists()
    copy = store_snapshot.fresh_snapshot(None, settings)
    assert copy != live and copy.exists() and store_snapshot.refuse_live(copy, settings) == copy


def test_the_snapshot_includes_pages_still_in_the_wal(settings, tmp_path):
    import store_snapshot

    from forge.store import db

    source = tmp_path / "busy.db"
    writer = db.connect(source, vec=False)
    writer.execute("pragma wal_autocheckpoint = 0")   # keep every page in the WAL
    writer.execute("create table t (x text)")
    with db.transaction(writer):
        writer.executemany("insert into t values (?)", [(f"row {i}",) for i in range(500)])
    assert (tmp_path / "busy.db-wal").stat().st_size > 0
    plain = tmp_path / "plain-copy.db"
    shutil.copyfile(source, plain)   # what a file copy gets: the main file only
    reader = db.connect(plain, vec=False)
    try:
        copied = reader.execute("select count(*) from sqlite_master where name = 't'").fetchone()[0]
    finally:
        reader.close()
    assert copied == 0, "the main file already held the rows: this test would prove nothing"
    copy = store_snapshot.fresh_snapshot(source, settings)
    snap = db.connect(copy, vec=False)
    try:
        assert snap.execute("select count(*) from t").fetchone()[0] == 500
    finally:
        snap.close()
        writer.close()


@pytest.fixture(scope="module")
def built_store(tmp_path_factory):
    from fixtures.memory_entries import build_store

    return build_store(tmp_path_factory.mktemp("bench-store"))


def run_bench(script: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(BENCH / script), *args], cwd=cwd,
                          capture_output=True, text=True, timeout=600, env=os.environ.copy())


def test_a_harness_runs_on_a_snapshot_and_leaves_the_store_as_it_was(built_store, settings, forge_env):
    from fixtures.memory_entries import copy_store

    live = copy_store(built_store, settings.rag_db_file)
    before = live.read_bytes()
    result = run_bench("aggregate.py", "snapshot", "--json", cwd=Path.cwd())
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["db"] != str(live) and doc["applied"] is False and doc["subjects"]
    assert live.read_bytes() == before
    assert not Path(f"{live}-wal").exists() or Path(f"{live}-wal").stat().st_size == 0


def test_locomo_runs_on_one_conversation(tmp_path):
    if not LOCOMO.exists():
        pytest.skip(f"the LoCoMo data set is not in this checkout ({LOCOMO}); it sits beside the "
                    "repository on the development machine only")
    result = run_bench("locomo.py", "--conversations", "1", "--sessions", "2", "--questions", "4",
                       "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["questions"] == 4 and doc["entries"] > 0
    overall = doc["table"][0]
    assert overall["questions"] == "all" and overall["n"] == 4
    assert 0 <= overall["any@5"] <= overall["any@10"] <= 1
    assert {row["questions"] for row in doc["table"]} >= {"all", "1 multi-hop", "2 temporal", "4 single-hop"}
    for q in doc["per_question"]:   # the fused rows budget is filled
        assert q["rows@5"] == min(5, doc["entries"]) and q["rows@10"] == min(10, doc["entries"])
        assert q["any@5"] >= (q["vector@5"] or q["lexical@5"])   # or a neighbour row
    assert doc["protocol"]["budgets"]["5"] == {"limit": 5}
    # the session-level protocol: every question with evidence, category 5 included, scored on
    # the first k distinct sessions of 2k rows
    sessions = {row["questions"]: row for row in doc["session_table"]}
    assert sessions["all"]["n"] >= 4 and "5 adversarial" in sessions
    assert 0 <= sessions["all"]["session@5"] <= sessions["all"]["session@10"] <= 1
    assert doc["protocol"]["sessions"]["rows"]["5"] == {"limit": 10}


def test_forget_erase_finds_no_copy_of_a_forgotten_token(tmp_path):
    result = run_bench("forget_erase.py", "--size", "200", "--secrets", "5", "--rounds", "1",
                       cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    before = re.search(r"before any forget: (\d+) copies of the 5 tokens", result.stdout)
    assert before and int(before[1]) >= 5   # the count sees every token before
    rows = {" ".join(line.split()[:2]): line.split() for line in result.stdout.splitlines()
            if line.startswith(("forget ", "redact "))}
    assert set(rows) == {"forget one", "forget 5", "redact 5"}
    for row in rows.values():   # median s, rewrite s, then no token and no FTS5 word left
        assert float(row[2]) >= 0 and float(row[3]) >= 0 and row[4:] == ["0", "0"], row


def test_recall_latency_runs_on_a_small_store(tmp_path):
    if not LOCOMO.exists():
        pytest.skip(f"the LoCoMo data set is not in this checkout ({LOCOMO})")
    result = run_bench("recall_latency.py", "--sizes", "300", "--queries", "4", "--real-texts",
                       "40", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    header, _, row = result.stdout.splitlines()[:3]
    assert header.split()[:2] == ["entries", "remember"] and row.split()[0] == "300"
    figures = dict(zip(["recall@10", "RSS", "file", "copy"], row.split()[-5:-1]))
    assert figures["recall@10"] == "1.000" and figures["copy"] == "0"   # vec0 below the threshold


def test_personal_facts_bench_reports_its_figures_and_the_refusal_rules(tmp_path):
    # --no-sparse: the sparse head's second pass over the entries would double the test's time
    result = run_bench("personal_facts.py", "--keep", str(tmp_path / "store"), "--json",
                       "--no-sparse", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert (doc["entries"], doc["hits"], doc["misses"]) == (45, 30, 15)
    assert 0 <= doc["top1"] <= doc["any@5"] <= doc["any@10"] <= 1
    assert doc["rule"] is None   # --no-sparse: no coverage rule
    sweep = doc["sweep"]   # the distance cutoff swept: a larger cutoff keeps more hits
    assert sweep[0]["cutoff"] == 0 and sweep[-1]["hits_kept"] == 1.0
    assert [r["hits_kept"] for r in sweep] == sorted(r["hits_kept"] for r in sweep)
    assert doc["calibrate"]["message"]
