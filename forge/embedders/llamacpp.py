"""llama.cpp's native `/embedding` endpoint.

Request `{"content": [texts]}`; answer `[{"index": i, "embedding": [[floats]]}]` — a list
inside a list with a pooled model (`--pooling last|mean|cls`); one inner list per token when
the server runs with `--pooling none`, which Forge cannot use.
"""
from __future__ import annotations

from typing import Any

from .server import ServerEmbedder


class LlamaCppEmbedder(ServerEmbedder):
    backend = "llamacpp"

    def _payload(self, texts: list[str]) -> dict[str, Any]:
        return {"content": texts}

    def _parse(self, body: Any, n: int) -> list[list[float]]:
        items = body if isinstance(body, list) else [body]
        items = sorted(items, key=lambda item: item.get("index", 0))
        rows = []
        for item in items:
            emb = item["embedding"]
            if emb and isinstance(emb[0], list):
                if len(emb) != 1:
                    raise ValueError(f"{len(emb)} vectors for one input: the server returns one "
                                     "per token; start it with --pooling last (or mean)")
                emb = emb[0]
            rows.append([float(x) for x in emb])
        return rows
