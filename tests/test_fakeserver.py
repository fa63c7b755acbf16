"""The fake llama-server does what its docstring promises, seen through httpx like Forge's clients."""
from __future__ import annotations

import json
import math
import time

import httpx
import pytest

from fakeserver import FakeServer, closed_url


def sse_events(response: httpx.Response) -> list:
    events = []
    for line in response.iter_lines():
        if line.startswith("data: "):
            payload = line[len("data: "):]
            events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


CHAT = {"messages": [{"role": "system", "content": "You are terse."},
                     {"role": "user", "content": "Hello there"}]}


def test_scripted_chat_replies_come_in_order_then_the_default(fake_server):
    fake_server.chat_replies(['{"tool": "memory", "action": "recall"}', "second"])
    answers = [httpx.post(fake_server.url + "/v1/chat/completions", json=CHAT).json()
               for _ in range(3)]
    assert [a["choices"][0]["message"]["content"] for a in answers] == [
        '{"tool": "memory", "action": "recall"}', "second", "ok"]
    assert fake_server.paths() == ["/v1/chat/completions"] * 3
    assert fake_server.requests[0].json["messages"][0]["content"] == "You are terse."


def test_chat_reply_carries_model_usage_and_timings_like_llama_server(fake_server):
    fake_server.chat_reply("hi", prompt_n=7, cache_n=30, model="m.gguf")
    doc = httpx.post(fake_server.url + "/v1/chat/completions", json=CHAT).json()
    assert doc["model"] == "m.gguf"
    assert doc["timings"]["prompt_n"] == 7 and doc["timings"]["cache_n"] == 30
    assert isinstance(doc["timings"]["prompt_ms"], float)
    # llama-server counts cached tokens inside usage.prompt_tokens
    assert doc["usage"]["prompt_tokens"] == 37
    assert doc["usage"]["prompt_tokens_details"]["cached_tokens"] == 30


def test_chat_reply_without_timings_block(fake_server):
    fake_server.chat_reply("hi", timings=None)
    doc = httpx.post(fake_server.url + "/v1/chat/completions", json=CHAT).json()
    assert "timings" not in doc


def test_streamed_reply_with_usage_ends_with_a_usage_chunk_then_done(fake_server):
    fake_server.chat_reply("one two three", cache_n=4)
    body = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
    with httpx.stream("POST", fake_server.url + "/v1/chat/completions", json=body) as response:
        events = sse_events(response)
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == "one two three"
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop" and "timings" not in chunks[-2]
    assert chunks[-1]["choices"] == [] and chunks[-1]["timings"]["cache_n"] == 4
    assert chunks[-1]["usage"]["prompt_tokens_details"]["cached_tokens"] == 4


def test_streamed_reply_without_usage_has_timings_on_the_finish_chunk(fake_server):
    fake_server.chat_reply("one", prompt_n=9)
    with httpx.stream("POST", fake_server.url + "/v1/chat/completions",
                      json={**CHAT, "stream": True}) as response:
        *_, final, done = sse_events(response)
    assert done == "[DONE]"
    assert final["choices"][0]["finish_reason"] == "stop" and final["timings"]["prompt_n"] == 9
    assert "usage" not in final


def test_stream_that_dies_midway_is_a_transport_error_after_some_content(fake_server):
    fake_server.stream_dies(after=2)
    received = []
    with pytest.raises(httpx.RemoteProtocolError):
        with httpx.stream("POST", fake_server.url + "/v1/chat/completions",
                          json={**CHAT, "stream": True}) as response:
            for line in response.iter_lines():
                received.append(line)
    contents = [json.loads(x[6:])["choices"][0]["delta"].get("content") for x in received
                if x.startswith("data: ")]
    assert len([c for c in contents if c]) == 2
    assert "data: [DONE]" not in received


def test_delay_makes_a_client_time_out_and_is_used_once(fake_server):
    fake_server.delay("/embedding", 3)
    started = time.monotonic()
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(fake_server.url + "/embedding", json={"content": "x"}, timeout=0.3)
    assert time.monotonic() - started < 2
    assert httpx.post(fake_server.url + "/embedding", json={"content": "x"}).status_code == 200


def test_status_with_body_and_sticky_behaviour_until_reset(fake_server):
    fake_server.status("/embedding", 500, {"error": {"code": 500, "message": "boom"}}, times=None)
    for _ in range(2):
        response = httpx.post(fake_server.url + "/embedding", json={"content": "x"})
        assert response.status_code == 500 and response.json()["error"]["message"] == "boom"
    fake_server.reset("/embedding")
    assert httpx.post(fake_server.url + "/embedding", json={"content": "x"}).status_code == 200


def test_non_json_and_wrong_shape_bodies(fake_server):
    fake_server.body("/v1/chat/completions", b"<html>gateway</html>", content_type="text/html")
    fake_server.body("/v1/chat/completions", {"choices": "nope"})
    first = httpx.post(fake_server.url + "/v1/chat/completions", json=CHAT)
    assert first.status_code == 200 and first.text == "<html>gateway</html>"
    with pytest.raises(json.JSONDecodeError):
        first.json()
    assert httpx.post(fake_server.url + "/v1/chat/completions", json=CHAT).json() == {"choices": "nope"}


def test_refused_connections():
    with pytest.raises(httpx.ConnectError):
        httpx.get(closed_url() + "/health")
    server = FakeServer()
    assert httpx.get(server.url + "/health").json() == {"status": "ok"}
    url = server.refuse()
    with pytest.raises(httpx.ConnectError):
        httpx.get(url + "/health", timeout=2)


def test_native_embedding_is_nested_and_openai_embedding_is_flat(fake_server):
    one = httpx.post(fake_server.url + "/embedding", json={"content": "a"}).json()
    assert len(one) == 1 and one[0]["index"] == 0 and len(one[0]["embedding"]) == 1
    vector = one[0]["embedding"][0]
    assert len(vector) == fake_server.embedding_dim
    assert math.isclose(math.fsum(x * x for x in vector), 1.0, rel_tol=1e-9)
    many = httpx.post(fake_server.url + "/embedding", json={"content": ["a", "b"]}).json()
    assert [m["index"] for m in many] == [0, 1] and many[0]["embedding"][0] == vector
    assert many[1]["embedding"][0] != vector
    flat = httpx.post(fake_server.url + "/v1/embeddings", json={"input": ["a", "b"]}).json()
    assert flat["data"][0]["embedding"] == vector and flat["data"][1]["object"] == "embedding"


def test_scripted_embedding_vectors(fake_server):
    fake_server.embedding_vectors([[1.0, 0.0]])
    assert httpx.post(fake_server.url + "/embedding", json={"content": "a"}).json() == [
        {"index": 0, "embedding": [[1.0, 0.0]]}]


def test_tokenize_props_and_unknown_path(fake_server):
    tokens = httpx.post(fake_server.url + "/tokenize", json={"content": "Hello, world"}).json()["tokens"]
    assert len(tokens) == 3
    assert httpx.get(fake_server.url + "/props").json()["model_path"] == fake_server.model
    missing = httpx.get(fake_server.url + "/nope")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == 404


def test_a_sticky_delay_slows_every_request_then_answers_what_is_scripted(fake_server):
    fake_server.delay("/v1/chat/completions", 0.2, times=None)
    fake_server.chat_replies(["first", "second"])
    started = time.monotonic()
    answers = [httpx.post(fake_server.url + "/v1/chat/completions", json=CHAT).json()
               ["choices"][0]["message"]["content"] for _ in range(3)]
    assert answers == ["first", "second", "ok"]
    assert time.monotonic() - started >= 0.6
