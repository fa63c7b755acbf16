"""The human table: tabulate's layout, the cells wrapped by `forge/cli/output.py` before the call.

These are the cases that once made Forge draw its tables itself: with tabulate's own
`maxcolwidths`, tabulate 0.10 typed each wrapped cell again, so a cell `False` printed True and
`1,000` raised ValueError; a row whose first or second cell is "\\x01" became a rule; accents
and terminal colours must not upset the widths or the wrapping."""
from __future__ import annotations

import re

import pytest

from conftest import invoke
from forge.cli import output

ESCAPE = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture(autouse=True)
def columns(monkeypatch):
    monkeypatch.setenv("COLUMNS", "60")


def rows_of(*contents, **extra):
    return [{"id": i, "kind": "fact", "content": c, **extra} for i, c in enumerate(contents, 1)]


def test_a_wrapped_cell_false_prints_false():
    text = output.table(rows_of("False", "True"), ["id", "kind", "content"])
    assert text.splitlines()[2:] == ["1     fact    False", "2     fact    True"]


def test_a_number_with_thousands_separators_prints_as_given():
    text = output.table(rows_of("1,000", "12,345.6"), ["id", "kind", "content"])
    assert text.splitlines()[2:] == ["1     fact    1,000", "2     fact    12,345.6"]


def test_a_cell_x01_is_a_row_not_a_rule_and_shows_its_control_character():
    # tabulate takes a row whose first or second cell is "\x01" for a rule; a table also
    # shows a control character rather than send it to the terminal (--json and --nl keep it)
    rows = [{"id": "\x01", "kind": "fact", "content": "a"},
            {"id": 2, "kind": "\x01", "content": "b\x07c"}]
    for headers in (True, False):
        lines = output.table(rows, ["id", "kind", "content"], headers=headers).splitlines()
        assert [line.split() for line in lines[-2:]] == [["\\x01", "fact", "a"],
                                                         ["2", "\\x01", "b\\x07c"]]


def test_accents_count_one_column_each_and_wrap_at_the_terminal_width():
    long = "crème brûlée à la fête de Noël, naïve œuvre " * 6
    rows = [{"id": 1, "kind": "fait", "content": long}, {"id": 22, "kind": "été", "content": "à"}]
    lines = output.table(rows, ["id", "kind", "content"]).splitlines()
    starts = {line.index(word) for line in lines[2:] for word in line.split()[2:3]
              if line.startswith(("1 ", "22"))}
    assert len(starts) == 1                               # the content column starts at one place
    assert max(len(line) for line in lines[2:]) < 60      # wrapped, widths in code points
    assert " ".join(w for line in lines[2:] for w in line.split() if w not in
                    ("1", "22", "fait", "été")) == " ".join((long + " à").split())  # nothing lost


def test_a_coloured_cell_takes_its_visible_width_and_keeps_its_colour_on_every_line():
    red = "\x1b[31m" + "rouge " * 25 + "\x1b[0m"
    rows = [{"id": 1, "kind": "fact", "content": red}, {"id": 2, "kind": "fact", "content": "x"}]
    lines = output.table(rows, ["id", "kind", "content"]).splitlines()
    body = lines[2:-1]
    assert len(body) > 1                                   # it wrapped
    plain = output.table([{**rows[0], "content": ESCAPE.sub("", red)}, rows[1]],
                         ["id", "kind", "content"]).splitlines()
    assert [ESCAPE.sub("", line).rstrip() for line in lines] == plain  # escapes take no width
    assert all(line.count("\x1b[31m") == 1 and line.endswith("\x1b[0m") for line in body)
    assert lines[-1] == "2     fact    x"                   # the escapes took no width


def test_no_headers_drops_the_header_and_its_rule():
    text = output.table(rows_of("a"), ["id", "kind", "content"], headers=False)
    assert text == "1  fact  a"


def test_a_memory_that_is_a_number_with_a_thousands_separator_is_listed(runner):
    """`forge remember fact "1,000"` once made every `forge memory ls` table a ValueError."""
    assert invoke(runner, "remember", "fact", "1,000").exit_code == 0
    assert invoke(runner, "remember", "fact", "False").exit_code == 0
    result = invoke(runner, "memory", "ls")
    assert result.exit_code == 0, result.output
    contents = [line.rsplit("  ", 1)[-1] for line in result.output.splitlines()[2:]
                if line.startswith("#")]
    assert sorted(contents) == ["1,000", "False"]
