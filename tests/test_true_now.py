"""What is true now comes first: a fact changed in other words (the newer note names the new
value in its own words, often in the other language) is still a changed fact: recall puts the
current value first (the former one for a question about the past), two notes that both stay
true both stay, `forge remember` names what it may replace, `forge memory conflicts` lists the
pair as "changed". Real store, the embedded embedder and the sentence model."""
from __future__ import annotations

import asyncio
import json
import os

import pytest

from conftest import invoke
from forge.recall import timeline

NOW = "2026-03-18T15:00:00"

NOTES = [   # key, text, date (written in this order: ids do not follow dates)
    ("car_new", "Sold the Peugeot and bought a used Tesla Model 3", "2025-06-30"),
    ("op_old", "Mon opérateur mobile est Free", "2022-06-10"),
    ("cat_b", "We adopted a second cat, Pixel, a black kitten", "2025-06-01"),
    ("fridge", "The wifi password for guests is on the fridge", "2024-01-12"),
    ("car_old", "I drive a 2012 Peugeot 308", "2021-09-14"),
    ("boiler", "La chaudière est révisée chaque année en octobre", "2024-09-09"),
    ("op_new", "Passé chez Bouygues Telecom pour le forfait du téléphone", "2025-04-02"),
    ("cat_a", "Our cat Miso is a grey tabby", "2022-05-01"),
    ("blood", "My blood type is O+", "2021-08-08"),
    ("pizza", "Pizza dough: 65% hydration, 48 h in the fridge", "2023-08-30"),
]


def _remember(runner, *args: str) -> dict:
    result = invoke(runner, "remember", *args, "--json")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def _recall(runner, question: str) -> dict:
    result = invoke(runner, "recall", question, "--json")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


@pytest.fixture
def changed(runner, monkeypatch):
    monkeypatch.setenv("FORGE_NOW", NOW)
    return {key: _remember(runner, "fact", text, "--at", at)["id"] for key, text, at in NOTES}


@pytest.mark.parametrize("question, new, old", [
    ("What car do I drive?", "car_new", "car_old"),
    ("Quel est mon opérateur ?", "op_new", "op_old"),
])
def test_the_current_value_comes_first_when_the_fact_changed_in_other_words(
        runner, changed, question, new, old):
    doc = _recall(runner, question)
    ids = [r["id"] for r in doc["rows"]]
    assert ids[0] == changed[new], ids
    older = next(r for r in doc["rows"] if r["id"] == changed[old])   # still visible
    assert older["newer"] == changed[new]
    assert older["newer_reason"] == "same thing (meaning)"
    assert "newer" not in doc["rows"][0]
    assert f"(older: #{changed[new]} is newer)" in invoke(runner, "recall", question).stdout


@pytest.mark.parametrize("question, old", [
    ("What car did I have before the Tesla?", "car_old"),
    ("Quel était mon ancien opérateur ?", "op_old"),
])
def test_a_question_about_the_past_gets_the_former_value_first(runner, changed, question, old):
    doc = _recall(runner, question)
    assert doc["rows"][0]["id"] == changed[old], [r["id"] for r in doc["rows"]]
    assert doc["rows"][0]["newer"] is not None


def test_two_notes_that_both_stay_true_both_stay_in_the_first_rows(runner, changed):
    doc = _recall(runner, "What are our cats called?")
    first = [r["id"] for r in doc["rows"][:3]]
    assert {changed["cat_a"], changed["cat_b"]} <= set(first), first
    assert not any(r.get("newer") for r in doc["rows"][:3] if r["id"] in first)


@pytest.mark.parametrize("question, past", [
    ("Which laptop did I have before?", True),
    ("What did our CI use to run on?", True),
    ("Who was my previous manager?", True),
    ("Quel téléphone avais-je avant ?", True),
    ("Quelle était mon ancienne banque ?", True),
    ("Qui était mon dentiste précédent ?", True),
    ("Which laptop do I have?", False),
    ("Quel est mon opérateur ?", False),
    ("Where is the beforehand checklist?", False),   # whole words only
])
def test_which_questions_ask_about_the_past(question, past):
    assert timeline.asks_past(question) is past


def test_remember_names_what_it_may_replace_on_stderr_and_in_json(runner, changed):
    result = invoke(runner, "remember", "fact", "My car is now a Renault Zoe, the Tesla is sold",
                    "--json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert [m["id"] for m in doc["may_replace"]] == [changed["car_new"]], doc
    assert doc["may_replace"][0]["reason"] == "same thing, other value"
    assert (f"may replace #{changed['car_new']} 'Sold the Peugeot and bought a used Tesla "
            "Model 3' (same thing, other value" in result.stderr), result.stderr
    # a note that adds names nothing
    third = _remember(runner, "fact", "We also adopted a third cat, Nori")
    assert third["may_replace"] == []


def test_memory_conflicts_lists_a_fact_changed_in_other_words_as_changed(runner, changed):
    result = invoke(runner, "memory", "conflicts", "--json")
    assert result.exit_code == 0, result.stderr
    pairs = {tuple(c["ids"]): c["reason"] for c in json.loads(result.stdout)["conflicts"]}
    assert pairs.get((changed["car_old"], changed["car_new"]), "").startswith("changed")
    # the two cats both stay true: never a changed pair
    cats = {changed["cat_a"], changed["cat_b"]}
    assert not any(set(ids) == cats for ids in pairs)


def test_post_remember_answers_may_replace(runner, changed):
    from starlette.testclient import TestClient

    from forge.core.settings import load_settings
    from forge.serve.app import create_app

    client = TestClient(create_app(load_settings({**os.environ, "FORGE_NOW": NOW})),
                        base_url="http://127.0.0.1:8765")
    answer = client.post("/remember", json={
        "kind": "fact", "content": "My car is now a Renault Zoe, the Tesla is sold"})
    assert answer.status_code == 200, answer.text
    assert [m["id"] for m in answer.json()["may_replace"]] == [changed["car_new"]]


def test_mcp_remember_answers_may_replace_and_says_to_supersede(runner, changed):
    pytest.importorskip("mcp")
    from test_mcp import ok, stdio

    async def run():
        async with stdio({"FORGE_NOW": NOW}) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            made = ok(await client.call_tool("remember", {
                "content": "My car is now a Renault Zoe, the Tesla is sold"}))
            return tools["remember"].description, made

    description, made = asyncio.run(run())
    assert "may_replace" in description and "supersede" in description
    assert [m["id"] for m in made["may_replace"]] == [changed["car_new"]]


def test_on_both_backends_recall_remember_and_conflicts_read_the_change(runner, monkeypatch,
                                                                        backend):
    """The stored vectors (the neighbours `remember` and `memory conflicts` read) and the
    recall's rows come from either backend alike."""
    monkeypatch.setenv("FORGE_NOW", NOW)
    ids = {key: _remember(runner, "fact", text, "--at", at)["id"] for key, text, at in NOTES}
    assert _recall(runner, "What car do I drive?")["rows"][0]["id"] == ids["car_new"]
    listed = json.loads(invoke(runner, "memory", "conflicts", "--json").stdout)["conflicts"]
    assert [ids["car_old"], ids["car_new"]] in [c["ids"] for c in listed
                                               if c["reason"].startswith("changed")]
    made = _remember(runner, "fact", "My car is now a Renault Zoe, the Tesla is sold")
    assert [m["id"] for m in made["may_replace"]] == [ids["car_new"]]
