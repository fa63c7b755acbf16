"""forge.core.llm against the fake server: wire format, llama.cpp extras, failures named with the URL."""
from __future__ import annotations

import pytest

from chat_helpers import load
from fakeserver import closed_url
from forge.core.errors import ServerError
from forge.core.llm import ChatClient

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hi"}]


def client(**env: str) -> ChatClient:
    return ChatClient(load(**env))


def test_complete_reads_content_model_and_timings(chat_fake):
    chat_fake.chat_reply("hello there", prompt_n=40, cache_n=32, predicted_n=3)
    done = client().complete(MESSAGES, max_tokens=16)
    assert done.content == "hello there"
    assert done.model == "/models/fake-model.gguf"
    assert (done.prompt_n, done.cache_n, done.predicted_n) == (40, 32, 3)
    assert done.prompt_ms > 0 and done.raw_timings["cache_n"] == 32
    body = chat_fake.requests_to("/v1/chat/completions")[-1].json
    assert body["cache_prompt"] is True and body["max_tokens"] == 16
    assert "id_slot" not in body


def test_id_slot_is_sent_when_configured(chat_fake):
    client(LLAMA_CPP_ID_SLOT="0").complete(MESSAGES)
    assert chat_fake.requests_to("/v1/chat/completions")[-1].json["id_slot"] == 0


def test_streaming_hands_out_pieces_and_keeps_the_timings(chat_fake):
    chat_fake.chat_reply("one two three", cache_n=7)
    pieces: list[str] = []
    done = client().complete(MESSAGES, stream=True, on_token=pieces.append)
    assert "".join(pieces) == "one two three" and len(pieces) == 3
    assert done.content == "one two three" and done.cache_n == 7


def test_usage_block_is_used_when_a_server_has_no_timings(chat_fake):
    chat_fake.chat_reply("hi", prompt_n=10, cache_n=6, predicted_n=2, timings=None)
    done = client().complete(MESSAGES)
    assert (done.prompt_n, done.cache_n, done.predicted_n) == (10, 6, 2)
    assert done.raw_timings is None


def test_a_server_rejecting_the_extras_gets_the_plain_openai_request(chat_fake):
    chat_fake.status("/v1/chat/completions", 400,
                     {"error": {"message": "Unrecognized request argument supplied: cache_prompt"}})
    done = client(LLAMA_CPP_URL=chat_fake.url + "/v1").complete(MESSAGES)
    assert done.content == "ok"
    first, second = chat_fake.requests_to("/v1/chat/completions")[-2:]
    assert "cache_prompt" in first.json and "cache_prompt" not in second.json


def test_a_server_that_requires_a_model_name_gets_the_one_it_lists(chat_fake):
    """Ollama's OpenAI endpoint answers 400 "model is required"; llama-server needs none. The
    name comes from the server's own /v1/models, so no setting is needed."""
    chat_fake.status("/v1/chat/completions", 400, {"error": {"message": "model is required"}})
    done = client().complete(MESSAGES)
    assert done.content == "ok"
    first, second = chat_fake.requests_to("/v1/chat/completions")[-2:]
    assert "model" not in first.json and second.json["model"] == chat_fake.model
    client().complete(MESSAGES)   # known from then on: one request, no second failure
    assert chat_fake.requests_to("/v1/chat/completions")[-1].json["model"] == chat_fake.model
    assert len(chat_fake.requests_to("/v1/models")) == 1


def test_refused_connection_names_the_url_and_how_to_start_a_server():
    url = closed_url()
    with pytest.raises(ServerError) as e:
        client(LLAMA_CPP_URL=url).complete(MESSAGES)
    assert url in str(e.value) and "tools/llama-server chat" in str(e.value)
    assert "\n" not in str(e.value)


def test_timeout_is_a_server_error_naming_the_setting(chat_fake):
    chat_fake.delay("/v1/chat/completions", 1)
    with pytest.raises(ServerError, match="LLAMA_CPP_TIMEOUT") as e:
        client(LLAMA_CPP_TIMEOUT="0.3").complete(MESSAGES)
    assert chat_fake.url in str(e.value)


@pytest.mark.parametrize("script", [
    lambda s: s.status("/v1/chat/completions", 500, {"error": {"message": "boom"}}),
    lambda s: s.body("/v1/chat/completions", b"<html>not json</html>"),
    lambda s: s.body("/v1/chat/completions", {"data": "wrong shape"}),
])
def test_unusable_answers_are_server_errors(chat_fake, script):
    script(chat_fake)
    with pytest.raises(ServerError) as e:
        client().complete(MESSAGES)
    assert chat_fake.url in str(e.value)


def test_a_stream_that_dies_midway_is_an_error_not_half_an_answer(chat_fake):
    chat_fake.chat_reply("one two three four five")
    chat_fake.stream_dies(after=2)
    pieces: list[str] = []
    with pytest.raises(ServerError, match="mid-answer|ended before"):
        c = client()
        c.complete(MESSAGES)  # consumes the scripted reply
        c.complete(MESSAGES, stream=True, on_token=pieces.append)


def test_an_exception_from_the_token_callback_stops_the_request(chat_fake):
    chat_fake.chat_reply("one two three four")

    def interrupt(piece: str) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        client().complete(MESSAGES, stream=True, on_token=interrupt)


def test_tokenize_and_health(chat_fake):
    c = client()
    assert c.tokenize("hello world !") and len(c.tokenize("hello world !")) == 3
    assert c.health() is True
    assert client(LLAMA_CPP_URL=closed_url()).health() is False


def test_requests_stop_at_chat_template_end_markers(chat_fake):
    """A GGUF without a chat template makes the server fall back to ChatML, and a model that
    does not know it writes `<|im_end|>` as text and runs to max_tokens: stop there."""
    client().complete(MESSAGES)
    assert "<|im_end|>" in chat_fake.requests_to("/v1/chat/completions")[-1].json["stop"]


# -- unreachable, an HTTP error, and a request too large are three messages


def test_an_http_error_does_not_advise_starting_a_server(chat_fake):
    chat_fake.status("/v1/chat/completions", 404, {"error": {"message": "File Not Found"}})
    with pytest.raises(ServerError) as e:
        client().complete(MESSAGES)
    text = str(e.value)
    assert "HTTP 404" in text and "File Not Found" in text and chat_fake.url in text
    assert "start one" not in text and "tools/llama-server" not in text
    assert "LLAMA_CPP_URL" in text  # a 404 is most often a wrong address


def test_an_error_body_is_never_cut_mid_string(chat_fake):
    long_message = "the model failed to load because " + "of a very long reason " * 20 + "THE END"
    chat_fake.status("/v1/chat/completions", 500, {"error": {"code": 500, "message": long_message}})
    with pytest.raises(ServerError) as e:
        client().complete(MESSAGES)
    assert long_message in str(e.value) and "start one" not in str(e.value)
    chat_fake.status("/v1/chat/completions", 502, "<html>" + "bad gateway " * 100 + "</html>",
                     )
    with pytest.raises(ServerError) as e:
        client().complete(MESSAGES)
    text = str(e.value)
    assert "HTTP 502" in text and '"' not in text.split("HTTP 502", 1)[1][:3]
    assert text.rstrip().endswith(("…", "</html>")) or "more characters" in text


def test_a_request_larger_than_the_context_says_the_tokens_and_what_to_do(chat_fake):
    # llama-server's own answer (measured against b6xxx builds, see test_chat_llama.py).
    chat_fake.status("/v1/chat/completions", 400, {"error": {
        "code": 400, "message": "the request exceeds the available context size, try increasing it",
        "type": "exceed_context_size_error", "n_prompt_tokens": 5210, "n_ctx": 4096}})
    with pytest.raises(ServerError) as e:
        client().complete(MESSAGES)
    text = str(e.value)
    assert "5210 tokens" in text and "4096" in text and "context" in text
    assert "forge compact" in text and "-c" in text and "shorten" in text
    assert "start one" not in text
