"""The human table: the text tabulate printed for Forge, without importing tabulate.

tabulate (`tablefmt="simple"` with headers, `"plain"` without, `disable_numparse=True`,
`maxcolwidths`) cost a fresh process ~19 ms to import, most of it `importlib.metadata` for its
version string. This is the part of it Forge used, byte for byte, and
`tests/test_text_table.py` compares the two on generated and real rows:

- every cell is its text (`None` is empty, anything else `format(value)`), stripped at both
  ends, left-aligned; columns are two spaces apart; every line loses its trailing whitespace;
- with headers, a column is at least its header plus two wide, and a rule of dashes as wide as
  each column follows the header line;
- a column with a maximum width wraps each of its cell's lines (blank lines dropped) with
  textwrap, breaking a word longer than the width at the width (not at a hyphen inside it);
- once any cell or header holds a CR or LF, every cell is laid out line by line and a row is as
  tall as its tallest cell;
- terminal escape sequences (colours, hyperlinks) take no width, and a colour a wrapped cell
  opens is closed at the end of each of its lines and reopened on the next.

Widths are counted in code points, as tabulate does without the optional wcwidth package.
Where tabulate lost or rewrote the data, this prints it as given: a wrapped cell that is exactly
"False" (tabulate printed "True") or a number with thousands separators such as "1,000"
(tabulate raised ValueError), a row whose first or second cell is "\\x01" (tabulate drew a rule
in its place).
"""
from __future__ import annotations

import re
import textwrap
from typing import Any, Callable, Sequence

_GAP = "  "
_LINE_BREAK = re.compile(r"\r|\n")   # what makes tabulate lay a table out line by line
_ESCAPES = re.compile(r"""
    (
        \x1b\[ [\x30-\x3f]* [\x20-\x2f]* [\x40-\x7e]   # CSI: colours and the like
    |
        \x1b\]8; (\w+=\w+:?)* ; ([^\x1b]+) \x1b\\      # a hyperlink: its target,
        ([^\x1b]+) \x1b\]8;;\x1b\\                     # the text shown, the closing OSC
    )""", re.VERBOSE)
_RESET = "\x1b[0m"


def _visible(text: str) -> str:
    return _ESCAPES.sub(r"\4", text) if "\x1b" in text else text


def _visible_len(text: str) -> int:
    return len(_visible(text))


class _Wrapper(textwrap.TextWrapper):
    """textwrap's chunks, laid out as tabulate's `_CustomTextWrap` does: escape sequences take
    no width and an open colour is carried to the next line; a word longer than the line is cut
    at the line's width, never after a hyphen inside it. One per cell: colours carry over."""

    def __init__(self, width: int) -> None:
        super().__init__(width=width)
        self._open: list[str] = []

    def _add_line(self, lines: list[str], line: str) -> None:
        codes = [m.group(0) for m in _ESCAPES.finditer(line)] if "\x1b" in line else []
        line = "".join(self._open) + line
        for code in codes:
            self._open = [] if code == _RESET else [*self._open, code]
        lines.append(line + _RESET if self._open else line)

    def _handle_long_word(self, reversed_chunks: list[str], cur_line: list[str], cur_len: int,
                          width: int) -> None:
        space_left = 1 if width < 1 else width - cur_len
        if self.break_long_words and space_left > 0:
            chunk = reversed_chunks[-1]
            cut = space_left
            if "\x1b" in chunk:
                shown = _visible(chunk)
                i = 1
                while i <= len(shown) and _visible_len(shown[:i]) <= space_left:
                    i += 1
                escaped, start = 0, 0
                for found in _ESCAPES.finditer(chunk):
                    code = found.group(1)
                    if code in chunk[start:i + escaped + len(code) - 1]:
                        escaped += len(code)
                        start += _ESCAPES.search(chunk[start:]).end()
                cut = i + escaped - 1
            cur_line.append(chunk[:cut])
            reversed_chunks[-1] = chunk[cut:]
        elif not cur_line:
            cur_line.append(reversed_chunks.pop())

    def _wrap_chunks(self, chunks: list[str]) -> list[str]:
        lines: list[str] = []
        chunks.reverse()
        while chunks:
            cur_line: list[str] = []
            cur_len = 0
            if self.drop_whitespace and chunks[-1].strip() == "" and lines:
                del chunks[-1]
            while chunks and cur_len + _visible_len(chunks[-1]) <= self.width:
                cur_len += _visible_len(chunks[-1])
                cur_line.append(chunks.pop())
            if chunks and _visible_len(chunks[-1]) > self.width:
                self._handle_long_word(chunks, cur_line, cur_len, self.width)
            if self.drop_whitespace and cur_line and cur_line[-1].strip() == "":
                del cur_line[-1]
            if cur_line:
                self._add_line(lines, "".join(cur_line))
        return lines


def _wrapped(value: Any, width: int) -> str:
    text = "" if value is None else str(value)
    wrapper = _Wrapper(width)
    return "\n".join("\n".join(wrapper.wrap(line)) for line in text.splitlines()
                     if line.strip() != "")


def _text(value: Any) -> str:
    return "" if value is None else f"{value}"


def _lines_width(line_width: Callable[[str], int]) -> Callable[[str], int]:
    return lambda text: max(map(line_width, _LINE_BREAK.split(text)))


def _pad_column(column: list[str], width: int, multiline: bool, escapes: bool) -> list[str]:
    """tabulate's `_align_column` for left alignment, once the column's width is known."""
    if not multiline:
        if not escapes:
            return [t.ljust(width) for t in column]
        return [t.ljust(width + len(t) - _visible_len(t)) for t in column]
    if not escapes:
        return ["\n".join(line.ljust(width) for line in t.splitlines()) for t in column]
    # tabulate pairs splitlines()' lines with the widths of the CR/LF-split parts
    return ["\n".join(line.ljust(width + len(part) - _visible_len(part))
                      for line, part in zip(t.splitlines(), _LINE_BREAK.split(t)))
            for t in column]


def render(rows: Sequence[Sequence[Any]], headers: Sequence[str] | None = None,
           maxwidths: Sequence[int | None] | None = None) -> str:
    """`rows` as text lines under `headers` (none: no header line and no rule); a column whose
    entry in `maxwidths` is a number wraps to that many characters. No rows: the header and
    its rule alone, or "" without headers."""
    heads = [str(h) for h in headers or ()]
    if not rows and not heads:
        return ""
    ncols = len(rows[0]) if rows else len(heads)
    limits = [*(maxwidths or ()), *[None] * ncols][:ncols]
    cells = [[v if w is None else _wrapped(v, w) for v, w in zip(row, limits)] for row in rows]
    texts = [[_text(v) for v in row] for row in cells]
    everything = "\t".join([*heads, *(str(v) for row in cells for v in row)])  # as tabulate
    multiline = _LINE_BREAK.search(everything) is not None
    escapes = "\x1b" in everything and _ESCAPES.search(everything) is not None
    line_width = _visible_len if escapes else len
    width_of = _lines_width(line_width) if multiline else line_width

    columns = [[t.strip() for t in column] for column in zip(*texts)] or [[] for _ in heads]
    least = [width_of(h) + 2 for h in heads] or [0] * len(columns)
    padded = [_pad_column(column, max([*map(width_of, column), floor]), multiline, escapes)
              for column, floor in zip(columns, least)]
    widths = [max([*map(width_of, column or [""]), floor]) for column, floor in zip(padded, least)]
    body = [list(row) for row in zip(*padded)]

    lines: list[str] = []
    if heads:
        body.insert(0, ["\n".join(part.ljust(w + len(part) - line_width(part))
                                  for part in _LINE_BREAK.split(h)) if multiline
                        else h.ljust(w + len(h) - line_width(h)) for h, w in zip(heads, widths)])
    for n, row in enumerate(body):
        if not multiline:
            lines.append(_GAP.join(row).rstrip())
        else:
            parts = [cell.splitlines() for cell in row]
            for i in range(max(map(len, parts))):
                lines.append(_GAP.join(p[i] if i < len(p) else " " * w
                                       for p, w in zip(parts, widths)).rstrip())
        if n == 0 and heads:
            lines.append(_GAP.join("-" * w for w in widths).rstrip())
    return "\n".join(lines)
