"""`--write-docs`: a benchmark writes its own figures into `docs/bench/NAME.txt`.

The file holds the command line the benchmark ran (`$ python bench/NAME.py ARGS`, with the
variables of ENV_SHOWN that were set), then everything it printed on stdout, verbatim; a harness
with several modes writes one file per mode, `NAME-MODE.txt`. `tee(name, enabled)` copies stdout
and writes the file atomically when its block ends without an exception, and only then.
"""
from __future__ import annotations

import contextlib
import io
import os
import shlex
import sys
from pathlib import Path
from typing import Iterator

DOCS_BENCH = Path(__file__).resolve().parent.parent / "docs" / "bench"
HELP = "also write the command line and this output to docs/bench/NAME.txt (the docs include it)"
ENV_SHOWN = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "FORGE_LOCOMO", "RECALL_SPARSE")


def command_line() -> str:
    """The command as a user would type it again, `--write-docs` left out."""
    script = Path(sys.argv[0])
    try:
        script = script.resolve().relative_to(Path(__file__).resolve().parent.parent)
    except ValueError:
        pass
    args = [a for a in sys.argv[1:] if a != "--write-docs"]
    env = [f"{k}={shlex.quote(os.environ[k])}" for k in ENV_SHOWN if k in os.environ]
    return " ".join(env + ["python", str(script)] + [shlex.quote(a) for a in args])


class _Tee(io.TextIOBase):
    def __init__(self, stream, copy: io.StringIO) -> None:
        self.stream, self.copy = stream, copy

    def write(self, text: str) -> int:
        self.copy.write(text)
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()


@contextlib.contextmanager
def tee(name: str, enabled: bool) -> Iterator[None]:
    """Copy stdout into docs/bench/NAME.txt when `enabled`, headed by the command line."""
    if not enabled:
        yield
        return
    copy = io.StringIO()
    real = sys.stdout
    sys.stdout = _Tee(real, copy)
    try:
        yield
    finally:
        sys.stdout = real
    target = DOCS_BENCH / f"{name}.txt"
    temp = target.with_suffix(".txt.tmp")   # then a rename: a reader never sees half of it
    temp.write_text(f"$ {command_line()}\n{copy.getvalue().rstrip()}\n", encoding="utf-8")
    os.replace(temp, target)
    print(f"wrote {target}", file=sys.stderr)
