"""Set one KEY in a `.env` file, keeping every other byte of the file as it was.

`forge calibrate --write` uses it for `RECALL_MAX_DISTANCE`. The rules are the dotenv ones
(python-dotenv's, which `forge` reads): `export KEY=value`, values in single or double quotes
(a double-quoted value may run over several lines), `# comments` after an unquoted value when a
space precedes the `#`, blank and comment lines. With a key set twice the last line is the one
in force, so the last line is the one replaced; the others stay as they are. A key not in the
file is appended on a line of its own.

The bindings are python-dotenv's (`dotenv.parser.parse_stream`, the parser `forge` reads `.env`
with): each carries its original text, and those texts make up the file, so the last binding
of KEY is found at its offset; python-dotenv's own readers then find where its value is written
inside that text. The value replaced is the one `forge` reads. Only the value
changes: the line keeps its indentation, its `export `, its quoting style, its trailing comment
and its line ending. The file is rewritten atomically with its permissions (a symlink is
followed, not replaced). After writing, the file is read back with the settings' own `.env`
reader (its public `read_dotenv`): if that reader does not see the new value the original bytes
go back and the edit fails, so a file this module misreads is never left half-changed.

Not python-dotenv's `set_key`: it replaces a symlinked `.env` with a file, sets mode 0600 and
re-quotes the value, where `calibrate --write` promises one value changed and every other byte
(and the file's mode, and the link) kept.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .errors import ForgeError

_SAFE_UNQUOTED = re.compile(r"[A-Za-z0-9_.:@/+\-,]*")


@dataclass
class DotenvEdit:
    path: str
    key: str
    value: str
    line: int                 # 1-based line of the assignment written
    previous: str | None      # the raw value that line held, None when the key was appended
    appended: bool
    created: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _quote(value: str, quote: str) -> str:
    if quote == "'":
        if "'" in value:
            raise ForgeError(f"cannot write {value!r} inside single quotes")
        return f"'{value}'"
    if quote == '"' or not _SAFE_UNQUOTED.fullmatch(value):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return value


def edit_text(text: str, key: str, value: str) -> tuple[str, int, str | None]:
    """The new text, the 1-based line written and the previous raw value (None: appended).

    The bindings are python-dotenv's, the settings reader's (`settings.dotenv_bindings`), so
    the value replaced is the one that reader takes for `key`: the last binding of it."""
    from .settings import dotenv_bindings, statement_line

    bom = 1 if text.startswith("\ufeff") else 0   # the parser's text starts past it
    found = None
    offset = bom
    for b in dotenv_bindings(text):
        if b.error:
            raise ForgeError(f"line {statement_line(b)} is not a dotenv binding (a quote that "
                             "never closes?); fix the .env file by hand first")
        if b.key == key and b.value is not None:
            found = (b, offset)
        offset += len(b.original.string)
    if found is None:
        prefix = "" if not text or text.endswith(("\n", "\r")) else _newline_of(text)
        line = f"{key}={_quote(value, '')}{_newline_of(text)}"
        return text + prefix + line, len(text.splitlines()) + 1, None
    b, at = found
    start, end, quote = _value_span(b.original.string)
    start, end = start + at, end + at
    previous = text[start + 1:end - 1] if quote else text[start:end]
    written = _quote(value, quote)
    if start == end and text[end:end + 1] == "#":   # `KEY= # comment`: an empty value
        written += " "
    return text[:start] + written + text[end:], statement_line(b), previous


def _value_span(statement: str) -> tuple[int, int, str]:
    """Where a binding's value is written in its text, quotes included, and its quote: the
    binding read again with python-dotenv's parser steps, which track the position."""
    import io

    from dotenv import parser as p

    reader = p.Reader(io.StringIO(statement))
    reader.read_regex(p._multiline_whitespace)
    reader.read_regex(p._export)
    p.parse_key(reader)
    reader.read_regex(p._whitespace)
    (equal,) = reader.read_regex(p._equal_sign)
    start = reader.position.chars
    first = reader.peek(1)
    if len(equal) > 1 and first == "#":
        return start, start, ""
    p.parse_value(reader)
    if first in ("'", '"'):
        return start, reader.position.chars, first
    # an unquoted read runs to the line's end: the value stops before ` #` and trailing blanks
    raw = statement[start:reader.position.chars]
    return start, start + len(re.sub(r"\s+#.*", "", raw).rstrip()), ""


def _newline_of(text: str) -> str:
    return "\r\n" if "\r\n" in text else "\n"


def set_value(path: Path | str, key: str, value: str) -> DotenvEdit:
    """Write `key=value` into the `.env` at `path` (created when missing); see the module doc."""
    from .settings import read_dotenv

    path = Path(path)
    target = path.resolve() if path.is_symlink() else path
    created = not target.exists()
    original = b"" if created else target.read_bytes()
    try:
        text = original.decode("utf-8")
    except UnicodeDecodeError:
        raise ForgeError(f"{path} is not UTF-8; nothing was written") from None
    new_text, line, previous = edit_text(text, key, value)
    mode = target.stat().st_mode & 0o7777 if not created else 0o644
    _atomic_write(target, new_text.encode("utf-8"), mode)
    try:
        seen = read_dotenv(target).get(key)
    except Exception as e:  # the reader refuses the file: put the original back
        seen = f"<unreadable: {e}>"
    if seen != value:
        if created:
            target.unlink()
        else:
            _atomic_write(target, original, mode)
        raise ForgeError(f"{path}: after the edit the settings reader saw {key}={seen!r}, not "
                         f"{value!r}; the file was put back as it was: set {key}={value} by hand")
    return DotenvEdit(str(path), key, value, line, previous, previous is None, created)


def _atomic_write(path: Path, data: bytes, mode: int) -> None:
    from .fileio import atomic_write

    atomic_write(path, data, mode=mode)
