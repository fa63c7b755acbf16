"""SHA-256 without `hashlib` where CPython has its own module: hashlib loads OpenSSL (~5 ms of a
fresh `forge recall` or `forge remember`, measured with -X importtime) for a short digest."""
from __future__ import annotations

from typing import Any


def sha256(data: bytes) -> Any:
    """A SHA-256 hash object of `data` (hexdigest() as hashlib's)."""
    try:
        from _sha256 import sha256 as make  # type: ignore[import-not-found]  # CPython 3.11
    except ImportError:
        try:
            from _sha2 import sha256 as make  # type: ignore[import-not-found,no-redef]  # 3.12+
        except ImportError:
            from hashlib import sha256 as make  # type: ignore[no-redef]
    return make(data)
