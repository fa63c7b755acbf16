"""The dated sets bench/true_now.py scores (the held-out true-now, true-now-2 and dated, the
development set read through its adapter, the time set): every label names a note of the set,
every pair it calls a changed fact or a pair that stays true is an older and a newer note of one
kind and project, and a question is scored on its first row (one note expected) or its first 3
(two)."""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import true_now  # noqa: E402


def load(name: str) -> dict:
    return true_now.read(true_now.SETS[name])


def test_every_label_names_a_note_and_every_changed_pair_is_older_then_newer():
    for name in true_now.SETS:
        data = load(name)
        notes = {e["key"]: e for e in data["entries"]}
        keys = list(notes) + [h["key"] for h in data["history"]]
        assert len(keys) == len(set(keys)), name
        assert all(e["at"] < data["now"] for e in data["entries"]), name
        for q in data["questions"]:
            assert set(true_now.expected(q)) | set(q.get("also", [])) <= set(keys), q
            assert q["type"] in {t for _, kind in true_now.GROUPS[name] if kind
                                 for t in kind.partition("@")[0].split("|")}, q
        for older, newer in data.get("changed", []) + data.get("stay_true", []):
            a, b = notes[older], notes[newer]
            assert a["at"] < b["at"], (older, newer)
            assert (a["kind"], a.get("project")) == (b["kind"], b.get("project")), (older, newer)


def test_the_true_now_set_has_the_shape_it_promises():
    data = load("true-now")
    kinds = [q["type"] for q in data["questions"]]
    assert kinds.count("current") >= 30 and kinds.count("former") == 10
    assert kinds.count("both") == 10 == len(data["stay_true"])
    assert len(data["changed"]) >= 30
    labelled = {k for pair in data["changed"] + data["stay_true"] for k in pair}
    assert sum(1 for e in data["entries"] if e["key"] not in labelled) >= 30


def test_the_second_true_now_set_has_the_shape_it_promises():
    """Written apart from the first on another life: one `current` question per changed fact,
    at least 10 about the former value, one `both` question per pair that stays true, at least
    30 unrelated notes; a duplicate or a pair that stays true is never labelled a change."""
    data = load("true-now-2")
    first = load("true-now")
    kinds = [q["type"] for q in data["questions"]]
    assert len(data["changed"]) >= 32 and kinds.count("former") >= 10
    assert kinds.count("both") == len(data["stay_true"]) >= 10
    current = [q["expect"][0] for q in data["questions"] if q["type"] == "current"]
    assert sorted(current) == sorted(newer for _, newer in data["changed"])
    older = {o for o, _ in data["changed"]}
    assert all(q["expect"][0] in older for q in data["questions"] if q["type"] == "former")
    both = [sorted(q["expect"]) for q in data["questions"] if q["type"] == "both"]
    assert sorted(both) == sorted(sorted(p) for p in data["stay_true"])
    changed = {frozenset(p) for p in data["changed"]}
    assert not changed & {frozenset(p) for p in data["stay_true"] + data["duplicates"]}
    labelled = {k for pair in data["changed"] + data["stay_true"] for k in pair}
    assert sum(1 for e in data["entries"] if e["key"] not in labelled) >= 30
    assert {k for pair in data["duplicates"] for k in pair} <= {e["key"] for e in data["entries"]}
    # held out from the first set: none of its notes or questions
    assert not ({e["content"] for e in data["entries"]}
                & {e["content"] for e in first["entries"]})
    assert not {q["q"] for q in data["questions"]} & {q["q"] for q in first["questions"]}


def test_the_development_set_reads_as_the_held_out_sets_do():
    """In the held-out sets' form: a changed fact's old and new notes (`KEY.old`, `KEY.new`),
    its current and past questions, a pair's notes and question, unrelated notes; its own seed,
    read in UTC."""
    data = load("dev")
    kinds = [q["type"] for q in data["questions"]]
    assert (kinds.count("current"), kinds.count("former"), kinds.count("both")) == (32, 10, 10)
    assert (len(data["entries"]), len(data["changed"]), len(data["stay_true"])) == (114, 32, 10)
    assert [e["key"] for e in data["entries"]][:3] == ["work.old", "work.new", "operator.old"]
    assert data["seed"] == 11 and data["questions"][0] == {
        "id": "current-work", "q": "Where do I work?", "type": "current", "expect": ["work.new"]}


def test_a_question_is_right_on_its_first_row_or_both_notes_in_the_first_three():
    data = {"questions": [
        {"id": "current-01", "q": "Where do I work?", "type": "current", "expect": ["new"],
         "also": ["office"]},
        {"id": "former-01", "q": "Where did I work before?", "type": "former", "expect": "old"},
        {"id": "both-01", "q": "What pets do I have?", "type": "both", "expect": ["a", "b"]}]}
    ids = {"new": 1, "old": 2, "office": 3, "a": 4, "b": 5, "other": 6}
    judged = true_now.judge(data, ids, [[3, 1], [1, 2], [4, 6, 5]])
    assert [j["ok"] for j in judged] == [True, False, True]
    assert judged[1]["ranks"] == [2] and judged[1]["first"] == "new"
    judged = true_now.judge(data, ids, [[2, 1], [], [4, 6, 1, 5]])
    assert [j["ok"] for j in judged] == [False, False, False]
    assert judged[2]["ranks"] == [1, 4] and judged[1]["first"] is None
