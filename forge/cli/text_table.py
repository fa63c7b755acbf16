"""The human table: the text tabulate printed for Forge, without importing tabulate.

tabulate (`tablefmt="simple"` with headers, `"plain"` without, `disable_numparse=True`,
`maxcolwidths`) cost a fresh process ~19 ms to import, most of it `importlib.metadata` for its
version string. This is the part of it Forge used, byte for byte, and
`tests/test_table.py` compares the two on generated and real rows:

- every cell is its text (`None` is empty, anything else `format(value)`), stripped at both
  ends, left-aligned; columns are two spaces apart; every line loses its trailing whitespace;
- with headers, a column is at least its header plus two wide, and a rule of dashes as wide as
  each column follows the header line;
- a column with a maximum width wraps each of its cell's lines (blank lines dropped) with
  textwrap, breaking a word longer than the width at the width (not at a hyphen inside it);
- once any cell or header holds a CR or LF, every cell is laid out line by line and a row is as
  tall as its tallest cell.

Widths are counted in code points, as tabulate does without the optional wcwidth package.
Where tabulate rewrote a wrapped cell's text, this prints it as given: a cell that is exactly
"False" (tabulate printed "True") or a number with thousands separators such as "1,000"
(tabulate raised ValueError).
"""
from __future__ import annotations

import re
import textwrap
from typing import Any, Sequence

_GAP = "  "
_LINE_BREAK = re.compile(r"\r|\n")   # what makes tabulate lay a table out line by line


class _Wrapper(textwrap.TextWrapper):
    """textwrap's wrapping, but a word longer than the line is cut at the line's width, never
    after a hyphen inside it (tabulate's own `_handle_long_word`)."""

    def _handle_long_word(self, reversed_chunks: list[str], cur_line: list[str], cur_len: int,
                          width: int) -> None:
        space_left = 1 if width < 1 else width - cur_len
        if self.break_long_words and space_left > 0:
            chunk = reversed_chunks[-1]
            cur_line.append(chunk[:space_left])
            reversed_chunks[-1] = chunk[space_left:]
        elif not cur_line:
            cur_line.append(reversed_chunks.pop())


def _wrapped(value: Any, wrapper: _Wrapper) -> str:
    text = "" if value is None else str(value)
    return "\n".join("\n".join(wrapper.wrap(line)) for line in text.splitlines()
                     if line.strip() != "")


def _text(value: Any) -> str:
    return "" if value is None else f"{value}"


def _width(text: str) -> int:
    return max(len(part) for part in _LINE_BREAK.split(text))


def _pad(text: str, width: int, multiline: bool) -> str:
    if multiline:
        return "\n".join(line.ljust(width) for line in text.splitlines())
    return text.ljust(width)


def render(rows: Sequence[Sequence[Any]], headers: Sequence[str] | None = None,
           maxwidths: Sequence[int | None] | None = None) -> str:
    """`rows` as text lines under `headers` (none: no header line and no rule); a column whose
    entry in `maxwidths` is a number wraps to that many characters. No rows: the header and
    its rule alone, or "" without headers."""
    heads = [str(h) for h in headers or ()]
    if not rows and not heads:
        return ""
    ncols = len(rows[0]) if rows else len(heads)
    limits = list(maxwidths or ()) + [None] * ncols
    wrappers = [_Wrapper(width=w) if w is not None else None for w in limits[:ncols]]
    texts = [[_text(_wrapped(v, wrapper) if wrapper else v) for v, wrapper in zip(row, wrappers)]
             for row in rows]
    multiline = any(_LINE_BREAK.search(t) for t in heads) or any(
        _LINE_BREAK.search(t) for row in texts for t in row)
    width_of = _width if multiline else len

    columns = [[t.strip() for t in column] for column in zip(*texts)] or [[] for _ in heads]
    widths = [max([*map(width_of, column), width_of(heads[i]) + 2 if heads else 0])
              for i, column in enumerate(columns)]
    cells = [[_pad(t, w, multiline) for t in column] for column, w in zip(columns, widths)]
    body = [list(row) for row in zip(*cells)]

    lines: list[str] = []
    if heads:
        if multiline:
            head = ["\n".join(part.ljust(w) for part in _LINE_BREAK.split(h))
                    for h, w in zip(heads, widths)]
        else:
            head = [h.ljust(w) for h, w in zip(heads, widths)]
        body.insert(0, head)
    for n, row in enumerate(body):
        if not multiline:
            lines.append(_GAP.join(row).rstrip())
        else:
            parts = [cell.splitlines() for cell in row]
            height = max(map(len, parts))
            for i in range(height):
                lines.append(_GAP.join(p[i] if i < len(p) else " " * w
                                       for p, w in zip(parts, widths)).rstrip())
        if n == 0 and heads:
            lines.append(_GAP.join("-" * w for w in widths).rstrip())
    return "\n".join(lines)
