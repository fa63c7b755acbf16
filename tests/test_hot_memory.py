"""The hot block: every deliberate entry, oldest first, within its budget, framed as a
complete list of descriptions, byte-identical from one render to the next."""
from __future__ import annotations

from chat_helpers import load
from forge.store import rag
from forge.recall.hot_memory import BEGIN, END, hot_block, render_hot_block
from forge.core.tokens import estimate_tokens
from forge.core.when import local_date


def fill(store, items):
    return [rag.remember(store, kind, content, project=project).id for kind, content, project in items]


def test_block_lists_every_deliberate_entry_oldest_first_and_skips_archive_and_superseded():
    settings = load()
    with rag.open_store(settings) as store:
        a, b, c = fill(store, [("fact", "Possède un Steam Deck", None),
                               ("decision", "Ne pas épingler les messages avec des emojis", "chat"),
                               ("fact", "Possède un Steam Deck sous SteamOS", None)])
        rag.remember_many(store, [rag.NewEntry("archive", "user: hi\nassistant: hello",
                                               source="compaction", refs={"messages": [1, 2]})])
        rag.supersede(store, [a], by=c)
        day = {i: local_date(rag.get_entry(store, i).created) for i in (b, c)}
    block = hot_block(settings)
    assert block.entry_ids == [b, c] and block.left_out == 0
    assert block.text.splitlines()[2:4] == [   # each line carries its entry's (stable) date
        f"- [decision/chat, {day[b]}] Ne pas épingler les messages avec des emojis",
        f"- [fact, {day[c]}] Possède un Steam Deck sous SteamOS"]
    assert "complete list" in block.text and "not instructions" in block.text
    assert "user: hi" not in block.text
    assert hot_block(settings).text == block.text  # byte-identical


class E:
    def __init__(self, id: int, content: str, kind: str = "fact", project: str | None = None,
                 created: str = "2024-05-02T10:00:00.000000Z"):
        self.id, self.content, self.kind, self.project = id, content, kind, project
        self.created = created


def test_empty_store_renders_nothing():
    block = render_hot_block([], max_tokens=1000)
    assert block.text == "" and block.entry_ids == []


def test_over_budget_cuts_the_newest_and_says_so_inside_the_block():
    entries = [E(i, f"entry number {i} about the machine called host{i} in rack {i}") for i in range(1, 41)]
    full = render_hot_block(entries, max_tokens=100_000)
    assert full.left_out == 0 and full.tokens > 200
    cut = render_hot_block(entries, max_tokens=200)
    assert 0 < len(cut.entry_ids) < 40 and cut.left_out == 40 - len(cut.entry_ids)
    assert cut.entry_ids == list(range(1, len(cut.entry_ids) + 1))  # oldest kept, tail cut
    assert cut.tokens <= 200 and estimate_tokens(cut.text) <= 200
    assert f"the {cut.left_out} most recent entries are left out" in cut.text
    assert "NOT complete" in cut.text and "complete list" not in cut.text
    inside = cut.text.split(BEGIN)[1].split(END)[0]
    assert all(f"host{i} " in inside for i in cut.entry_ids)
    assert render_hot_block(entries, max_tokens=200).text == cut.text


def test_a_budget_nothing_fits_in_means_no_block():
    entries = [E(1, "one entry that is far longer than the tiny budget allows here")]
    for budget in (0, 5):
        block = render_hot_block(entries, max_tokens=budget)
        assert block.text == "" and block.entry_ids == [] and block.left_out == 1


def test_multi_line_entries_stay_whole():
    block = render_hot_block([E(1, "line one\nline two")], max_tokens=1000)
    assert "- [fact, 2024-05-02] line one\n  line two" in block.text


def test_forge_memory_hot_prints_the_block(runner):
    from conftest import invoke

    with rag.open_store(load()) as store:
        fill(store, [("todo", "Renouveler le certificat TLS", None)])
    result = invoke(runner, "memory", "hot")
    assert result.exit_code == 0, result.output
    assert "- [todo, " in result.stdout and "] Renouveler le certificat TLS" in result.stdout
    assert result.stdout.strip() == hot_block(load()).text


def test_forge_memory_hot_needs_no_embedding_call(runner):
    """Reading the block is a plain SELECT: it works while the embedding server is down."""
    from conftest import invoke
    from fakeserver import FakeServer

    with FakeServer() as server:
        url = server.url + "/embedding"
        with rag.open_store(load(EMBEDDING_URL=url)) as store:
            fill(store, [("fact", "Le NAS tourne sous Debian", None)])
        server.refuse()
        result = invoke(runner, "memory", "hot", "--json", env={"EMBEDDING_URL": url})
    assert result.exit_code == 0, result.output
    import json

    assert json.loads(result.stdout)["entry_ids"] == [1]


def test_forge_memory_hot_says_when_no_entry_fits(runner):
    from conftest import invoke

    with rag.open_store(load()) as store:
        fill(store, [("fact", "Le NAS tourne sous Debian", None)])
    result = invoke(runner, "memory", "hot", env={"RECALL_HOT_MAX_TOKENS": "0"})
    assert result.exit_code == 0 and result.stdout == ""
    assert "not one of the 1 entries fits in RECALL_HOT_MAX_TOKENS=0" in result.stderr
