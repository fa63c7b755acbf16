"""Forge's own table (`forge/cli/text_table.py`) prints what tabulate printed for Forge, byte for
byte: on thousands of generated tables and on the rows real commands hand the renderer.
tabulate stays a test dependency, as the reference."""
from __future__ import annotations

import json
import random

import pytest

from conftest import invoke
from forge.cli import output
from forge.cli.text_table import render

tabulate_module = pytest.importorskip("tabulate")


@pytest.fixture(autouse=True)
def code_point_widths(monkeypatch):
    """The reference is tabulate without the optional wcwidth package (widths in code points,
    what Forge's environment has): were wcwidth installed, tabulate would count CJK as two."""
    monkeypatch.setattr(tabulate_module, "wcwidth", None)


def reference(rows, headers, maxwidths) -> str:
    """tabulate as forge/cli/output.py called it before."""
    if headers is None:
        return tabulate_module.tabulate(rows, tablefmt="plain", maxcolwidths=maxwidths,
                                        disable_numparse=True)
    return tabulate_module.tabulate(rows, headers=headers, tablefmt="simple",
                                    maxcolwidths=maxwidths, disable_numparse=True)


WORDS = ["the", "NAS", "has", "32", "GB", "café", "crème", "brûlée", "œuvre", "à", "Noël",
         "naïve", "e\u0301te\u0301",  # combining accents: two code points, one column
         "long-term", "self-hosted", "x-", "--", "-", "état-major", "0.5", "1e3", "007", "True",
         "None", "日本語", "🙂", "λ", "/srv/nas/backup", "https://example.org/a?b=c", "a,b",
         '{"k": 1}', "tab\there", "nbsp\u00a0here", "ideographic\u3000space",
         # terminal escapes, as piped coloured output leaves them: colours, a hyperlink, strays
         "\x1b[31mrouge\x1b[0m", "\x1b[1;32mvert", "fin\x1b[0m", "\x1b[0m", "\x1b[4m", "\x1b", "\x1b[",
         "\x1b]8;;https://example.org/x\x1b\\lien\x1b]8;;\x1b\\", "\x1b[33m" + "jaune" * 12 + "\x1b[0m",
         "a\x1b[31mb\x1b[0mc" * 9]


def word(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.08:  # longer than any width: must be broken
        return "".join(rng.choice("abcdéfghij-klmnop") for _ in range(rng.randint(25, 140)))
    if roll < 0.12:
        return "-".join(rng.choice(WORDS) for _ in range(rng.randint(2, 6)))
    return rng.choice(WORDS)


def text(rng: random.Random, width: int | None) -> str:
    target = rng.choice([0, 1, 5, 20, 29, 30, 31, 45, 80, 200, 600]) if width is None else \
        rng.choice([0, width - 1, width, width + 1, 2 * width, 5 * width, rng.randint(0, 400)])
    out = ""
    while len(out) < target:
        sep = rng.choices([" ", "  ", "\n", "\n\n", "\r\n", "\r", " \n ", "\t", "\n   \n"],
                          weights=[60, 5, 6, 2, 2, 1, 2, 1, 1])[0]
        out += (sep if out else "") + word(rng)
    if rng.random() < 0.1:
        out = " " * rng.randint(1, 3) + out + rng.choice([" ", "\n", "  \n"])
    return out


def cell(rng: random.Random, width: int | None):
    roll = rng.random()
    if roll < 0.06:
        return None
    if roll < 0.10:
        return ""
    if roll < 0.16 and width is None:  # ints and bools as rows hand them over (id, pinned, …)
        return rng.choice([0, 7, 1234, 10 ** 12, -3, True, False])
    if roll < 0.20 and width is None:
        return f"{rng.random():.4f}"
    return text(rng, width)


def table_case(rng: random.Random):
    ncols = rng.randint(1, 6)
    maxwidths = [rng.choice([None, None, rng.randint(30, 90), rng.randint(1, 29)])
                 for _ in range(ncols)]
    if rng.random() < 0.3:
        maxwidths = [None] * ncols
    rows = [[cell(rng, w) for w in maxwidths] for _ in range(rng.randint(1, 8))]
    headers = None if rng.random() < 0.25 else \
        [rng.choice(["id", "kind", "project", "content", "x", "a_much_longer_header"])
         for _ in range(ncols)]
    return rows, headers, maxwidths


@pytest.mark.parametrize("seed", range(8))
def test_generated_tables_match_tabulate(seed):
    rng = random.Random(seed)
    seen = {"multiline": 0, "wrapped": 0, "cut word": 0, "headers": 0, "plain": 0, "escapes": 0}
    for n in range(400):
        rows, headers, maxwidths = table_case(rng)
        expected = reference(rows, headers, maxwidths)
        assert render(rows, headers, maxwidths) == expected, \
            f"seed {seed} case {n}: {json.dumps([rows, headers, maxwidths], ensure_ascii=False)}"
        seen["headers" if headers else "plain"] += 1
        seen["multiline"] += any("\n" in str(c) for r in rows for c in r)
        seen["escapes"] += any("\x1b[" in str(c) for r in rows for c in r)
        seen["wrapped"] += any(w and len(str(r[i] or "")) > w
                               for r in rows for i, w in enumerate(maxwidths))
        seen["cut word"] += any(w and any(len(x) > w for x in str(r[i] or "").split())
                                for r in rows for i, w in enumerate(maxwidths))
    assert min(seen.values()) >= 40, seen  # the corpus reaches every path


@pytest.mark.parametrize("rows, headers, maxwidths", [
    ([["a", ""]], ["x", "y"], [None, None]),                     # trailing empty cell
    ([["", ""]], ["x", "y"], [None, None]),                      # a row of nothing
    ([["", ""], ["a\nb", ""]], ["x", "y"], [None, 30]),           # multiline: the empty row vanishes
    ([["a\r\nb", "c"]], None, [None, None]),
    ([["  padded  ", "x"]], ["h", "i"], [None, None]),
    ([[None, True, 3]], ["n", "b", "i"], [None, None, None]),
    ([["word " * 30]], ["content"], [30]),
    ([["\n\n   \n"]], ["content"], [30]),                          # only blank lines: empty
    ([["x" * 95]], None, [30]),                                    # a long word cut at 30
    ([["a\x0bb", "c\nd"]], ["h", "i"], [None, None]),              # splitlines' other breaks
    ([["a\u2028b"]], ["h"], [None]),
])
def test_edge_tables_match_tabulate(rows, headers, maxwidths):
    assert render(rows, headers, maxwidths) == reference(rows, headers, maxwidths)


def test_no_rows():
    assert render([], ["id", "content"], [None, 30]) == reference([], ["id", "content"], [None, 30])
    assert render([], None, [None]) == "" == reference([], None, [None])


def test_a_wrapped_cell_is_printed_as_given_where_tabulate_rewrote_it():
    """tabulate turned a wrapped cell that is exactly "False" into "True" and raised on a
    number with thousands separators; Forge prints the text."""
    assert render([[1, "False"]], ["id", "content"], [None, 30]).splitlines()[-1] == "1     False"
    assert "True" in reference([[1, "False"]], ["id", "content"], [None, 30])
    assert render([[1, "1,000"]], ["id", "content"], [None, 30]).splitlines()[-1] == "1     1,000"
    with pytest.raises(ValueError):
        reference([[1, "1,000"]], ["id", "content"], [None, 30])


def test_a_memory_that_is_a_number_with_a_thousands_separator_is_listed(runner):
    """`forge remember fact "1,000"` made every `forge memory ls` table a ValueError."""
    assert invoke(runner, "remember", "fact", "1,000").exit_code == 0
    result = invoke(runner, "memory", "ls")
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[2].endswith("  1,000")


def test_a_row_starting_with_x01_is_a_row():
    """tabulate drew a rule in place of a row whose first or second cell is "\\x01"."""
    rows = [[1, "fact"], ["\x01", "fact"]]
    assert render(rows, ["id", "kind"], [None, None]).splitlines()[-1] == "\x01     fact"
    assert reference(rows, ["id", "kind"], [None, None]).splitlines()[-1] == "----  ------"


def _tabulate_table(rows, columns, *, wide=("content",), headers=True) -> str:
    """forge/cli/output.table as it was, with tabulate."""
    import shutil

    if not rows:
        return ""
    width = shutil.get_terminal_size((120, 24)).columns
    narrow_width = sum(max(len(str(c)), *(len(str(output._cell(r.get(c)))) for r in rows)) + 2
                       for c in columns if c not in wide)
    room = max(30, width - narrow_width - 2)
    maxcol = [room if c in wide else None for c in columns]
    body = [[output._cell(r.get(c)) for c in columns] for r in rows]
    return reference(body, list(columns) if headers else None, maxcol)


@pytest.fixture
def table_calls(monkeypatch):
    """Every table a command prints: its rows, columns and options, as emit handed them."""
    calls = []
    real = output.table

    def spy(rows, columns, **kwargs):
        calls.append((rows, columns, kwargs))
        return real(rows, columns, **kwargs)

    monkeypatch.setattr(output, "table", spy)
    return calls, real


def test_real_commands_tables_match_tabulate(runner, table_calls, monkeypatch):
    from forge import history, traces
    from forge.history import NewMessage
    from forge.settings import load_settings

    monkeypatch.setenv("COLUMNS", "100")
    settings = load_settings()
    texts = ["the NAS has 32 GB of RAM and runs ZFS on four disks in raidz1",
             "Le serveur de sauvegarde s'appelle « mnémosyne » et tourne sous Debian à l'étage",
             "rotate the restic keys every quarter; the passphrase is in the safe, not in git",
             "line one\nline two, which is a good deal longer than the first and must wrap",
             "x" * 150]
    for i, t in enumerate(texts):
        assert invoke(runner, "remember", "fact", t, "-p", ["homelab", "maison"][i % 2]).exit_code == 0
    history.append(settings.memory_file, [NewMessage("user", "bonjour, où est le NAS ?"),
                                          NewMessage("assistant", "Au grenier.\nÀ côté du routeur.")],
                   max_history=10)
    traces.append(settings.trace_file, {"run_id": "r1", "input": "où est le NAS ?", "steps": [],
                                         "total_ms": 12.5, "ok": True})
    for args in (["memory", "ls"], ["memory", "ls", "--no-headers"], ["recall", "NAS"],
                 ["recall", "sauvegarde", "--no-headers"], ["history"], ["trace", "tail"],
                 ["config"], ["memory", "hot"]):
        result = invoke(runner, *args)
        assert result.exit_code == 0, (args, result.output)
    calls, table = table_calls
    assert len(calls) >= 7
    for rows, columns, kwargs in calls:
        assert table(rows, columns, **kwargs) == _tabulate_table(rows, columns, **kwargs)


def test_no_forge_module_imports_tabulate():
    """tabulate is a test dependency only (setup.cfg's `test` extra): no command may need it."""
    import ast
    from pathlib import Path

    package = Path(output.__file__).resolve().parents[1]
    importers = []
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            importers += [str(path) for name in names if name.split(".")[0] == "tabulate"]
    assert len(list(package.rglob("*.py"))) > 50 and not importers, importers
