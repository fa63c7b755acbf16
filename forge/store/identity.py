"""The embedding identity, compared the same way whatever the backend: what is
recorded, how two identities are compared (family, model, dimension, prefix, the probe
sentence's cosine), the query fingerprint and the cutoff it tags."""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ..core.digest import sha256
from ..core.errors import StoreError

if TYPE_CHECKING:
    import numpy as np

    from ..core.settings import Settings

PROBE_TEXT = ("Forge embedding identity probe: le NiPoGi a 32 Go de RAM, "
              "the Steam Deck runs Podman containers.")
PROBE_MIN_COSINE = 0.999
IDENTITY_KEYS = ("backend", "model", "dim", "document_prefix", "sparse")


class EmbeddingMismatch(StoreError):
    """The configured embedder is not the one that wrote the store's vectors."""


def identity_core(identity: dict[str, Any]) -> dict[str, Any]:
    return {k: identity.get(k) for k in IDENTITY_KEYS}


def describe(identity: dict[str, Any]) -> str:
    return f"{identity.get('backend')} model {identity.get('model')!r} ({identity.get('dim')} dims)"


def encode_vec(vec: "np.ndarray") -> str:
    import base64

    import numpy as np

    return base64.b64encode(np.asarray(vec, dtype=np.float32).tobytes()).decode()


def decode_vec(text: str) -> "np.ndarray":
    import base64

    import numpy as np

    return np.frombuffer(base64.b64decode(text), dtype=np.float32)


def family(backend: str | None) -> str:
    # /embedding and /v1/embeddings of one server give the same vectors: compare server vs embedded.
    return "embedded" if backend == "embedded" else "server"


def same_probe(recorded: dict[str, Any], probe: "np.ndarray") -> bool:
    """The recorded probe vector and `probe` agree (same shape, cosine >= PROBE_MIN_COSINE)."""
    import numpy as np

    old = decode_vec(recorded["probe"])
    return old.shape == probe.shape and float(np.dot(old, probe)) >= PROBE_MIN_COSINE


def compare_identity(recorded: dict[str, Any], current: dict[str, Any], probe: "np.ndarray") -> None:
    """Raise EmbeddingMismatch saying every difference between the identity that wrote the
    store and the configured embedder's; return when they are the same embedder."""
    import numpy as np

    differs = []
    if family(recorded.get("backend")) != family(current.get("backend")):
        differs.append(f"backend {recorded.get('backend')} -> {current.get('backend')}")
    if recorded.get("model") != current.get("model") and "unknown" not in (
            recorded.get("model"), current.get("model")):
        differs.append(f"model {recorded.get('model')!r} -> {current.get('model')!r}")
    if recorded.get("dim") != current.get("dim"):
        differs.append(f"dimension {recorded.get('dim')} -> {current.get('dim')}")
    if recorded.get("document_prefix") != current.get("document_prefix"):
        differs.append(f"document prefix {recorded.get('document_prefix')!r} -> "
                       f"{current.get('document_prefix')!r}")
    if recorded.get("sparse") != current.get("sparse"):   # the latent-term index
        differs.append(f"latent-term index {recorded.get('sparse') or 'none'} -> "
                       f"{current.get('sparse') or 'none'} (RECALL_SPARSE)")
    if not differs and recorded.get("probe"):
        old = decode_vec(recorded["probe"])
        if old.shape == probe.shape:
            cosine = float(np.dot(old, probe))
            if cosine < PROBE_MIN_COSINE:
                differs.append(f"probe sentence cosine {cosine:.4f} < {PROBE_MIN_COSINE} "
                               "(another model behind the same name)")
    if differs:
        raise EmbeddingMismatch(
            f"this store's vectors were written by {describe(recorded)}, not the configured "
            f"{describe(current)} ({'; '.join(differs)}): run `forge reindex` to re-embed "
            "every entry, or configure the original embedder")


def query_fingerprint(settings: "Settings", identity: dict | None) -> str:
    """Six hex of SHA-256 over the query wrapper and the store's embedding identity.

    No network call: the wrapper comes from settings, the identity from the store's meta
    table. With no identity recorded yet (an empty store), only the backend kind stands in.
    """
    from ..embedders import backend_for, query_wrapper_for

    # the vectors' identity: the latent-term index does not move a distance cutoff
    core = ({k: identity.get(k) for k in IDENTITY_KEYS if k != "sparse"} if identity
            else {"backend": backend_for(settings)})
    payload = json.dumps({"query_wrapper": query_wrapper_for(settings), "identity": core},
                         sort_keys=True, ensure_ascii=False)
    return sha256(payload.encode()).hexdigest()[:6]


def resolve_cutoff(settings: "Settings", fingerprint: str) -> tuple[float | None, str | None]:
    """(the cutoff to apply or None, a warning or None) for `RECALL_MAX_DISTANCE=value@tag`."""
    cutoff = settings.recall_max_distance
    if cutoff is None:
        return None, None
    if cutoff.tag == fingerprint:
        return cutoff.value, None
    if cutoff.tag is None:
        return cutoff.value, (f"RECALL_MAX_DISTANCE={cutoff.value} carries no fingerprint; "
                              f"write it back as RECALL_MAX_DISTANCE={cutoff.value}@{fingerprint}")
    return None, (f"RECALL_MAX_DISTANCE={cutoff} was measured under fingerprint {cutoff.tag}, "
                  f"but this store and query wrapper are {fingerprint}: cutoff off; "
                  "re-measure it on this store with `forge calibrate --cases FILE --write`")


# The sentence model's rows (RECALL_SENTENCE) are stored with each note, so the store records
# which model wrote them, as it records the first model: its name, version and dimension, and
# the row of a probe text, compared by cosine as the first model's probe (a shared store read
# from machines whose BLAS kernels differ in the last bits of a row still matches).
SENTENCE_KEYS = ("model", "dim")


def describe_sentence(identity: dict[str, Any]) -> str:
    return f"{identity.get('model')} {identity.get('version')} ({identity.get('dim')} dims)"


def sentence_differences(recorded: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """What differs between the sentence model that wrote a store's rows and `current` (the
    version alone is not a difference: the same weights under a new release write the same
    rows, which the probe says)."""
    import numpy as np

    differs = [f"{key} {recorded.get(key)!r} -> {current.get(key)!r}" for key in SENTENCE_KEYS
               if recorded.get(key) != current.get(key)]
    if not differs and recorded.get("probe") and current.get("probe"):
        old, new = decode_vec(recorded["probe"]), decode_vec(current["probe"])
        cosine = float(np.dot(old, new)) if old.shape == new.shape else 0.0
        if cosine < PROBE_MIN_COSINE:
            differs.append(f"probe row cosine {cosine:.4f} < {PROBE_MIN_COSINE} "
                           "(other weights behind the same name)")
    return differs


def compare_sentence(recorded: dict[str, Any], current: dict[str, Any]) -> None:
    """Raise EmbeddingMismatch when the store's sentence rows were written by another model
    than `current`."""
    differs = sentence_differences(recorded, current)
    if differs:
        raise EmbeddingMismatch(
            f"this store's sentence rows were written by {describe_sentence(recorded)}, not "
            f"the installed {describe_sentence(current)} ({'; '.join(differs)}): run "
            "`forge reindex --sentence` to re-embed them, or set RECALL_SENTENCE=off")
