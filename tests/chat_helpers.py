"""Shared helpers of the chat tests: a fake chat server wired into the settings."""
from __future__ import annotations

import json

import pytest

from fakeserver import FakeServer


@pytest.fixture
def chat_fake(monkeypatch: pytest.MonkeyPatch):
    """A fake llama-server for scripted model replies; LLAMA_CPP_URL points at it."""
    with FakeServer() as server:
        monkeypatch.setenv("LLAMA_CPP_URL", server.url)
        yield server


def load(**env: str):
    import os

    from forge.core.settings import load_settings

    return load_settings({**os.environ, **env})


def history_messages(settings) -> list:
    from forge.store import history

    return history.read(settings.memory_file).messages


def last_trace(settings) -> dict:
    from forge.store import traces

    return traces.tail(settings.trace_file, 1)[-1]


def envelope(action: str, **fields) -> str:
    return json.dumps({"action": action, **fields}, ensure_ascii=False)
