"""OpenAI-compatible `/v1/embeddings` (llama-server, vLLM, Ollama, LM Studio).

Request `{"input": [texts], "model": name}`; answer `{"data": [{"index", "embedding"}], "model"}`.
"""
from __future__ import annotations

from typing import Any

from .server import ServerEmbedder


class OpenAIEmbedder(ServerEmbedder):
    backend = "openai"

    def _payload(self, texts: list[str]) -> dict[str, Any]:
        payload: dict[str, Any] = {"input": texts, "encoding_format": "float"}
        model = self._model
        payload["model"] = model if model and model != "unknown" and "," not in model else "default"
        return payload

    def _parse(self, body: Any, n: int) -> list[list[float]]:
        items = sorted(body["data"], key=lambda item: item.get("index", 0))
        return [[float(x) for x in item["embedding"]] for item in items]
