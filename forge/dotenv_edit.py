"""Set one KEY in a `.env` file, keeping every other byte of the file as it was.

`forge calibrate --write` uses it for `RECALL_MAX_DISTANCE`. The rules are the dotenv ones
(python-dotenv's, which `forge` reads): `export KEY=value`, values in single or double quotes
(a double-quoted value may run over several lines), `# comments` after an unquoted value when a
space precedes the `#`, blank and comment lines. With a key set twice the last line is the one
in force, so the last line is the one replaced; the others stay as they are. A key not in the
file is appended on a line of its own.

The replaced line keeps its indentation, its `export `, its quoting style, its trailing comment
and its line ending. The file is rewritten atomically with its permissions (a symlink is
followed, not replaced). After writing, the file is read back with the settings' own `.env`
reader (its public `read_dotenv`): if that reader does not see the new value the original bytes
go back and the edit fails, so a file this module misreads is never left half-changed.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .errors import ForgeError

_ASSIGN = re.compile(r"^(?P<indent>[ \t]*)(?P<export>export[ \t]+)?(?P<key>[A-Za-z_][A-Za-z0-9_.\-]*)"
                     r"(?P<eq>[ \t]*=[ \t]*)(?P<rest>.*)$", re.DOTALL)
_EOL = re.compile(r"(\r\n|\n|\r)$")
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


def _split_lines(text: str) -> list[str]:
    """Lines with their endings (\\n, \\r\\n or \\r), so joining them gives the text back."""
    return text.splitlines(keepends=True)


def _value_extent(lines: list[str], start: int, rest: str) -> tuple[int, str, str, str]:
    """For an assignment whose text after `=` is `rest` (line ending stripped) on line `start`:
    (last line index of the value, quote char or "", the raw value, what follows the value on
    its last line: closing quote excluded, trailing spaces and comment included)."""
    if rest[:1] in ("'", '"'):
        quote = rest[0]
        body = rest[1:]
        end = _closing_quote(body, quote)
        if end is not None:
            return start, quote, body[:end], body[end + 1:]
        if quote == '"':  # a double-quoted value may run over the next lines
            collected = [body]
            for index in range(start + 1, len(lines)):
                text = _EOL.sub("", lines[index])
                end = _closing_quote(text, quote)
                if end is not None:
                    collected.append(text[:end])
                    return index, quote, "\n".join(collected), text[end + 1:]
                collected.append(text)
        raise ForgeError(f"line {start + 1} opens a {quote} quote that never closes; fix the .env "
                         "file by hand first")
    match = re.search(r"[ \t]#", rest)
    value = (rest[:match.start()] if match else rest).rstrip(" \t")
    return start, "", value, rest[len(value):]


def _closing_quote(text: str, quote: str) -> int | None:
    i = 0
    while i < len(text):
        if text[i] == "\\" and quote == '"':
            i += 2
            continue
        if text[i] == quote:
            return i
        i += 1
    return None


def _quote(value: str, quote: str) -> str:
    if quote == "'":
        if "'" in value:
            raise ForgeError(f"cannot write {value!r} inside single quotes")
        return f"'{value}'"
    if quote == '"':
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if not _SAFE_UNQUOTED.fullmatch(value):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return value


def assignments(text: str, key: str) -> list[tuple[int, int, re.Match[str]]]:
    """(first line index, last line index, match) of every line assigning `key`, in order."""
    lines = _split_lines(text)
    found = []
    index = 0
    while index < len(lines):
        line = _EOL.sub("", lines[index])
        match = _ASSIGN.match(line)
        if match and not line.lstrip().startswith("#"):
            try:
                last, _q, _v, _tail = _value_extent(lines, index, match.group("rest"))
            except ForgeError:
                last = index
            if match.group("key") == key:
                found.append((index, last, match))
            index = last + 1
            continue
        index += 1
    return found


def edit_text(text: str, key: str, value: str) -> tuple[str, int, str | None]:
    """The new text, the 1-based line written and the previous raw value (None: appended)."""
    lines = _split_lines(text)
    found = assignments(text, key)
    if not found:
        prefix = "" if not text or text.endswith(("\n", "\r")) else _newline_of(text)
        line = f"{key}={_quote(value, '')}{_newline_of(text)}"
        return text + prefix + line, len(lines) + 1, None
    first, last, match = found[-1]
    _last, quote, previous, tail = _value_extent(lines, first, match.group("rest"))
    if not quote and previous.startswith("#") and match.group("eq")[-1:] in (" ", "\t"):
        previous, tail = "", " " + previous + tail   # `KEY= # comment`: an empty value
    ending = _EOL.search(lines[last])
    new_line = (match.group("indent") + (match.group("export") or "") + match.group("key")
                + match.group("eq") + _quote(value, quote) + tail + (ending.group(1) if ending else ""))
    return "".join(lines[:first] + [new_line] + lines[last + 1:]), first + 1, previous


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
