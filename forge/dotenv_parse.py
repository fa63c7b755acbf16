""".env files: python-dotenv's grammar (its parser.py, 1.2), so a file that works with dotenv
works here. `parse_dotenv` keeps every binding's text and position, so a tool that edits `.env`
(forge calibrate --write, forge/dotenv_edit.py) can replace one binding and leave comments and
order alone; `dotenv_values_of` gives KEY -> value as python-dotenv's `dotenv_values` does.

Its own module so that a command run where there is no `.env` (a cron job, a shell loop) loads
none of it: settings.read_dotenv imports it when the file exists.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Callable, Mapping

_DOTENV = {name: re.compile(rx, flags) for name, rx, flags in (
    ("newline", r"(\r\n|\n|\r)", 0),
    ("multiline_whitespace", r"\s*", re.MULTILINE),
    ("whitespace", r"[^\S\r\n]*", 0),
    ("export", r"(?:export[^\S\r\n]+)?", 0),
    ("single_quoted_key", r"'([^']+)'", 0),
    ("unquoted_key", r"([^=\#\s]+)", 0),
    ("equal_sign", r"(=[^\S\r\n]*)", 0),
    ("single_quoted_value", r"'((?:\\.|[^'\\])*)'", re.DOTALL),
    ("double_quoted_value", r'"((?:\\.|[^"\\])*)"', re.DOTALL),
    ("unquoted_value", r"([^\r\n]*)", 0),
    ("comment", r"(?:[^\S\r\n]*#[^\r\n]*)?", 0),
    ("end_of_line", r"[^\S\r\n]*(?:\r\n|\n|\r|$)", 0),
    ("rest_of_line", r"[^\r\n]*(?:\r|\n|\r\n)?", 0),
    ("double_quote_escapes", r"\\[\\'\"abfnrtv]", 0),
    ("single_quote_escapes", r"\\[\\']", 0),
    ("variable", r"\$\{(?P<name>[^\}:]*)(?::-(?P<default>[^\}]*))?\}", 0),
)}


@dataclass(frozen=True)
class DotenvBinding:
    """One statement of a `.env` file: `key` None for a blank or comment line; `value` None for
    a bare KEY (no `=`); `error` for text that is not a binding. `start`/`end` are the offsets
    of `text` (the statement with its line end) in the file's text; `line` is 1-based."""

    key: str | None
    value: str | None
    line: int
    start: int
    end: int
    text: str
    error: bool = False
    # where the value is written, quotes included (an editor replaces exactly that), and its quote
    value_start: int | None = None
    value_end: int | None = None
    quote: str = ""


class _Stop(Exception):
    pass


def _decode_escapes(regex: re.Pattern[str], value: str) -> str:
    import codecs

    return regex.sub(lambda m: codecs.decode(m.group(0), "unicode-escape"), value)


def parse_dotenv(text: str) -> list[DotenvBinding]:
    """Every statement of a `.env` text, by python-dotenv's rules: `export ` allowed, `'quoted'`
    keys, whitespace around `=`, single-quoted values (only \\' and \\\\ escapes) and
    double-quoted values (C escapes), both able to span lines and be followed by a `# comment`;
    an unquoted value ends at ` #` (a `#` right after `=` is part of it)."""
    text = text.removeprefix("\ufeff")
    out: list[DotenvBinding] = []
    pos, line = 0, 1

    def read(name: str) -> tuple[str, ...]:
        nonlocal pos
        m = _DOTENV[name].match(text, pos)
        if m is None:
            raise _Stop()
        pos = m.end()
        return m.groups()

    while pos < len(text) or not out:
        start = pos
        key: str | None = None
        value: str | None = None
        error = False
        span: tuple[int | None, int | None] = (None, None)
        quote = ""
        try:
            read("multiline_whitespace")
            if pos < len(text):
                read("export")
                if text[pos:pos + 1] == "#":
                    key = None
                elif text[pos:pos + 1] == "'":
                    (key,) = read("single_quoted_key")
                else:
                    (key,) = read("unquoted_key")
                read("whitespace")
                if text[pos:pos + 1] == "=":
                    (equal,) = read("equal_sign")
                    vstart = pos
                    quote = text[pos:pos + 1] if text[pos:pos + 1] in ("'", '"') else ""
                    if len(equal) > 1 and text[pos:pos + 1] == "#":
                        value = ""
                    else:
                        value = _dotenv_value(text, pos, read)
                    # an unquoted read runs to the line's end: its value stops before ` #`
                    raw = text[vstart:pos]
                    span = (vstart, vstart + (len(raw) if quote else
                                             len(re.sub(r"\s+#.*", "", raw).rstrip())))
                read("comment")
                read("end_of_line")
        except _Stop:
            read("rest_of_line")
            key, value, error = None, None, True
            span, quote = (None, None), ""
        chunk = text[start:pos]
        # the statement's own line: after the blank lines that precede it
        lead = len(chunk) - len(chunk.lstrip())
        first = line + len(_DOTENV["newline"].findall(chunk[:lead]))
        out.append(DotenvBinding(key, value, first, start, pos, chunk, error, *span, quote))
        line += len(_DOTENV["newline"].findall(chunk))
        if pos >= len(text):
            break
    return out


def _dotenv_value(text: str, pos: int, read: Callable[[str], tuple[str, ...]]) -> str:
    char = text[pos:pos + 1]
    if char == "'":
        (value,) = read("single_quoted_value")
        return _decode_escapes(_DOTENV["single_quote_escapes"], value)
    if char == '"':
        (value,) = read("double_quoted_value")
        return _decode_escapes(_DOTENV["double_quote_escapes"], value)
    if char in ("", "\n", "\r"):
        return ""
    (part,) = read("unquoted_value")
    return re.sub(r"\s+#.*", "", part).rstrip()


def _expand(value: str, env: Mapping[str, str | None]) -> str:
    """POSIX `${NAME}` and `${NAME:-default}`, as python-dotenv expands them."""
    def one(m: re.Match[str]) -> str:
        found = env.get(m["name"], m["default"] if m["default"] is not None else "")
        return found if found is not None else ""
    return _DOTENV["variable"].sub(one, value)


def dotenv_values_of(text: str, *, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """KEY -> value of a `.env` text, variables expanded as python-dotenv's `dotenv_values`
    does (earlier keys of the file first, then the environment). Bare keys are left out."""
    environ = os.environ if environ is None else environ
    values: dict[str, str] = {}
    for b in parse_dotenv(text):
        if b.key is not None and b.value is not None:
            values[b.key] = _expand(b.value, {**environ, **values})
    return values
