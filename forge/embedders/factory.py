"""The one place an embedder is chosen from the settings. Apart from the package's
`__init__.py` (the interface each backend module imports), so that the interface never imports
its implementations back."""
from __future__ import annotations

from typing import TYPE_CHECKING

from . import Embedder, query_wrapper_for, server_kind, sparse_wanted

if TYPE_CHECKING:
    from ..core.settings import Settings


def make_embedder(settings: "Settings") -> Embedder:
    if not settings.embedding_url:
        from .embedded import EmbeddedEmbedder

        return EmbeddedEmbedder(sparse=sparse_wanted(settings))
    kind = server_kind(settings.embedding_url)
    wrapper = query_wrapper_for(settings)
    if kind == "openai":
        from .openai import OpenAIEmbedder

        return OpenAIEmbedder(settings.embedding_url, wrapper, timeout=settings.embedding_timeout)
    from .llamacpp import LlamaCppEmbedder

    return LlamaCppEmbedder(settings.embedding_url, wrapper, timeout=settings.embedding_timeout)
