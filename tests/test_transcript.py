"""Transcript units, the envelope unwrap, and the non-answer filters."""
from __future__ import annotations

import pytest

from forge.memory import non_answer, transcript
from forge.store.history import Message


def msg(i: int, role: str, content: str, **kw) -> Message:
    return Message(id=i, role=role, content=content, **kw)


def test_an_exchange_is_a_user_turn_and_every_non_user_message_up_to_the_next():
    window = [
        msg(1, "system", "a note before any user turn"),
        msg(2, "user", "lis le fichier notes.txt"),
        msg(3, "assistant", '{"action": "files", "payload": {"op": "read", "path": "notes.txt"}}'),
        msg(4, "tool", "contenu du fichier"),
        msg(5, "assistant", "Le fichier parle de Podman."),
        msg(6, "user", "merci"),
        msg(7, "assistant", "de rien"),
    ]
    units = transcript.units(window)
    assert [u.message_ids for u in units] == [[1], [2, 3, 4, 5], [6, 7]]
    assert units[1].question == "lis le fichier notes.txt"
    assert units[1].reply == "Le fichier parle de Podman."


def test_a_compaction_pointer_never_becomes_a_unit():
    pointer = msg(1, "system", "[archived] 3 earlier exchanges ...",
                  meta={"compaction": "pointer", "entries": [1, 2, 3]})
    units = transcript.units([pointer, msg(2, "user", "q"), msg(3, "assistant", "a")])
    assert [u.message_ids for u in units] == [[2, 3]]
    assert "[archived]" not in "".join(u.text() for u in units)


@pytest.mark.parametrize("raw, expected", [
    ('{"action": "chat", "content": "Un Ryzen 5 5500U."}', "Un Ryzen 5 5500U."),
    ('```json\n{"action": "chat", "content": "fenced"}\n```', "fenced"),
    ('{"action": "memory", "payload": {"op": "remember", "content": "Possède un Steam Deck"}}',
     "Possède un Steam Deck"),
    ('{"tool": "memory", "action": "recall", "query": "mon matériel"}', "mon matériel"),
])
def test_a_router_envelope_is_unwrapped_to_its_content(raw, expected):
    assert transcript.unwrap_envelope(raw) == expected
    unit = transcript.units([msg(1, "user", "q"), msg(2, "assistant", raw)])[0]
    assert unit.text() == f"user: q\nassistant: {expected}"


@pytest.mark.parametrize("raw", [
    '{"name": "not an envelope", "content": "x"}',   # no action: a user's own JSON
    '{"action": "chat", "content": ',                # broken JSON
    "plain text {with braces}",
])
def test_text_that_is_not_an_envelope_is_kept_as_it_is(raw):
    assert transcript.unwrap_envelope(raw) == raw


def test_render_and_split_round_trip_several_exchanges():
    units = transcript.units([
        msg(1, "user", "Quel processeur ?"), msg(2, "assistant", "Un 5500U.\nSix cœurs."),
        msg(3, "user", "Et la RAM ?"), msg(4, "assistant", "32 Go."),
    ])
    block = "\n".join(u.text() for u in units)
    back = transcript.split(block)
    assert [[(p.role, p.content) for p in u.parts] for u in back] == [
        [("user", "Quel processeur ?"), ("assistant", "Un 5500U.\nSix cœurs.")],
        [("user", "Et la RAM ?"), ("assistant", "32 Go.")],
    ]


def test_split_keeps_text_without_headers():
    assert [u.text() for u in transcript.split("just a sentence")] == ["user: just a sentence"]


def test_an_exchange_marked_answered_false_is_left_out():
    units = transcript.units([msg(1, "user", "Tu peux me lister mon matériel ?"),
                              msg(2, "assistant", "Je n'ai pas cette information.", answered=False),
                              msg(3, "user", "Le NiPoGi a 32 Go"), msg(4, "assistant", "Noté.")])
    keep, left = transcript.partition(units)
    assert [u.message_ids for u in keep] == [[3, 4]]
    assert [(u.message_ids, why) for u, why in left] == [([1, 2], "answered: false")]


@pytest.mark.parametrize("reply", [
    non_answer.NOTHING_FOUND, non_answer.CUTOFF_REFUSAL, non_answer.DELEGATION_REASK,
    "  [error] the embedding server did not answer", "Tool error: git failed",
    "Something went wrong: boom", "[no results]", "[cible introuvable] host", "[collecte impossible]",
    '{"action": "chat", "content": "[no memory] rien"}',
])
def test_a_reply_starting_with_a_forge_marker_is_left_out(reply):
    units = transcript.units([msg(1, "user", "q"), msg(2, "assistant", reply)])
    keep, left = transcript.partition(units)
    assert keep == []
    assert left[0][1] == f"reply starts with {non_answer.is_non_answer(transcript.unwrap_envelope(reply))}"


def test_a_refusal_the_model_words_itself_is_kept_and_a_recovered_tool_error_too():
    units = transcript.units([
        msg(1, "user", "q1"), msg(2, "assistant", "Je ne sais pas, désolé."),
        msg(3, "user", "q2"), msg(4, "tool", "Tool error: timeout"), msg(5, "assistant", "Voici la réponse."),
    ])
    keep, left = transcript.partition(units)
    assert [u.message_ids for u in keep] == [[1, 2], [3, 4, 5]] and left == []


def test_text_only_ignores_the_flag_for_old_blocks():
    units = transcript.units([msg(1, "user", "q"), msg(2, "assistant", "ok", answered=False)])
    assert transcript.partition(units, text_only=True)[0] == units


def test_refs_hold_message_ids_and_external_refs():
    unit = transcript.units([msg(7, "user", "q", ref="chat/1"), msg(8, "assistant", "a", ref="chat/2"),
                             msg(9, "assistant", "b", ref="chat/2")])[0]
    assert unit.refs() == {"messages": [7, 8, 9], "external": ["chat/1", "chat/2"]}


def test_every_fixed_non_answer_string_starts_with_a_listed_marker():
    strings = [v for k, v in vars(non_answer).items() if k.isupper() and isinstance(v, str)]
    assert len(strings) >= 12
    for s in strings:
        assert non_answer.is_non_answer(s) in non_answer.MARKERS, s
    assert non_answer.NOTHING_FOUND.startswith(non_answer.NO_MEMORY)
    assert non_answer.is_non_answer("The [error] is in the middle") is None


def test_split_of_a_rendered_window_gives_back_the_units_live_eviction_cut():
    """Live eviction (units) and resplit (split) must see the same exchanges, even when a
    message holds lines that look like a role name (a login, a config key)."""
    window = [
        msg(1, "user", "mes identifiants ?"),
        msg(2, "assistant", "Connecte-toi avec\nuser:admin\nsystem:prod\n\nrien d'autre"),
        msg(3, "tool", "tool:ok"),
        msg(4, "user", "merci"), msg(5, "assistant", ""),
    ]
    live = transcript.units(window)
    back = transcript.split("\n".join(u.text() for u in live))
    assert [[(p.role, p.content) for p in u.parts] for u in back] == \
        [[(p.role, p.content) for p in u.parts] for u in live]
