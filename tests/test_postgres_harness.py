"""The harness workflow on a PostgreSQL store: a snapshot of the shared store
is a scratch SQLite file made by `forge store migrate`'s transfer (bench/store_snapshot.py);
`forge aggregate --db SNAPSHOT` and calibration run on it, and the shared store is left as it
was; `forge calibrate` reads the PostgreSQL store itself without writing to it."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from conftest import invoke
from forge.store import rag
from forge.core.settings import load_settings

pytestmark = pytest.mark.postgres
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

NOTES = [("Possède un Steam Deck", None),
         ("Possède un Steam Deck sous SteamOS, fait tourner des conteneurs Podman dessus", None),
         ("Matériel : NiPoGi AM06PRO, processeur Ryzen 5500U, 32 Go de RAM, SSD 256 Go", "homelab"),
         ("NiPoGi AM06PRO, Arch, 5500U, 32Go RAM, SSD 256Go, Ansible, services Podman", "homelab"),
         ("Le NiPoGi a 32 Go de RAM", "homelab"),
         ("The NAS runs Debian 12", None)]


@pytest.fixture
def pg_settings(postgres_url, monkeypatch, forge_env):
    monkeypatch.setenv("FORGE_DATABASE_URL", postgres_url)
    settings = load_settings()
    with rag.open_store(settings) as store:
        for content, project in NOTES:
            rag.remember(store, "fact", content, project=project)
    return settings


def contents(settings, path=None) -> list[tuple[int, str, str | None]]:
    with rag.open_store(settings, path=path, mode="rows") as store:
        return [(e.id, e.content, e.superseded_by) for e in rag.list_entries(store)]


def test_a_snapshot_of_a_postgresql_store_is_a_scratch_sqlite_file_with_every_entry(pg_settings):
    import store_snapshot

    copy = store_snapshot.fresh_snapshot(None, pg_settings)
    assert copy.suffix == ".db" and copy.is_file()
    assert contents(pg_settings, copy) == contents(pg_settings)
    assert not pg_settings.rag_db_file.exists()       # no SQLite store appeared beside it


def test_aggregate_db_on_the_snapshot_folds_there_and_leaves_postgresql_as_it_was(pg_settings, runner):
    import store_snapshot

    before = contents(pg_settings)
    copy = store_snapshot.fresh_snapshot(None, pg_settings)
    result = invoke(runner, "aggregate", "--db", str(copy), "--apply", "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["applied"] and report["subjects"]
    folded = contents(pg_settings, copy)
    assert any(superseded for _, _, superseded in folded)
    assert contents(pg_settings) == before


def test_calibration_on_the_snapshot_and_on_the_postgresql_store_agree(pg_settings, runner):
    import store_snapshot
    from forge.recall import calibrate

    cases = calibrate.cases_from_mapping(
        {"hits": [{"question": "Which OS does the NAS run?", "expect": 6}],
         "misses": ["What is my dog's name?"]}, "test")
    with store_snapshot.open_snapshot(None, pg_settings) as store:
        on_copy = calibrate.calibrate(store, cases, vector_k=5, lexical_k=5).to_dict()
    direct = invoke(runner, "calibrate", "--hit", "Which OS does the NAS run?", "--expect", "6",
                    "--miss", "What is my dog's name?", "--json")
    assert direct.exit_code == 0, direct.stderr
    on_pg = json.loads(direct.stdout)
    assert on_copy["hits"][0]["in_top_k"] and on_pg["hits"][0]["in_top_k"]
    assert on_copy["hits"][0]["rank"] == on_pg["hits"][0]["rank"]
    assert on_copy["proposed"] == pytest.approx(on_pg["proposed"], abs=1e-4)
    assert on_copy["hits"][0]["distance"] == pytest.approx(on_pg["hits"][0]["distance"], abs=1e-4)
    assert on_copy["misses"][0]["distance"] == pytest.approx(on_pg["misses"][0]["distance"], abs=1e-4)
