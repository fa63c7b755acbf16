"""The rolling history: ids, cap, pins, clear, locks, corrupt files."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import invoke
from forge.store import history
from forge.core.errors import CorruptFileError
from forge.store.history import NewMessage


def add(path: Path, *pairs: tuple[str, str], cap: int = 200):
    return history.append(path, [NewMessage(r, c) for r, c in pairs], max_history=cap)


@pytest.fixture
def path(settings) -> Path:
    return settings.memory_file


def test_messages_carry_stable_ids_full_content_and_flags(path):
    long = "x" * 100_000
    stored = add(path, ("user", "hello"), ("assistant", long))
    doc = json.loads(path.read_text())  # readable JSON
    assert [m["id"] for m in doc["messages"]] == [m.id for m in stored] == [1, 2]
    assert doc["messages"][1]["content"] == long  # never truncated
    first = doc["messages"][0]
    assert first["pinned"] is False and first["answered"] is True and first["ref"] is None
    assert first["ts"].endswith("Z")


def test_ids_are_never_reused_not_even_after_a_clear(path):
    add(path, ("user", "a"), ("assistant", "b"))
    history.clear(path, everything=True)
    assert history.read(path).messages == []
    (m,) = add(path, ("user", "c"))
    assert m.id == 3


def test_cap_drops_the_oldest_non_pinned_message(path):
    add(path, ("user", "q1"), ("assistant", "a1"), ("user", "q2"), ("assistant", "a2"))
    history.set_pinned(path, 1, True)  # pins q1 and a1
    add(path, ("user", "q3"), cap=4)
    assert [m.content for m in history.read(path).messages] == ["q1", "a1", "a2", "q3"]


def test_pinned_messages_alone_over_the_cap_stay_with_a_warning(path, caplog):
    add(path, ("user", "q1"), ("assistant", "a1"))
    history.set_pinned(path, 1, True)
    with caplog.at_level("WARNING", logger="forge"):
        add(path, ("user", "q2"), cap=1)
    assert [m.content for m in history.read(path).messages] == ["q1", "a1"]
    assert "pinned messages alone exceed MEMORY_MAX_HISTORY=1" in caplog.text


def test_cap_drops_nothing_while_a_compaction_is_pending(path, caplog):
    add(path, ("user", "q1"), ("assistant", "a1"))
    with history.edit(path) as doc:
        doc.compaction_pending = True
    with caplog.at_level("WARNING", logger="forge"):
        add(path, ("user", "q2"), cap=2)
    assert len(history.read(path).messages) == 3
    assert "none is dropped" in caplog.text


def test_pinning_a_question_pins_every_answer_up_to_the_next_user_turn(path):
    add(path, ("user", "q1"), ("assistant", "a1"), ("tool", "t1"), ("assistant", "a1b"),
        ("user", "q2"), ("assistant", "a2"))
    assert history.set_pinned(path, 1, True) == [1, 2, 3, 4]
    assert [m.id for m in history.drawer(path)] == [1, 2, 3, 4]


def test_pinning_an_answer_pins_its_question(path):
    add(path, ("user", "q1"), ("assistant", "a1"), ("user", "q2"), ("assistant", "a2"))
    assert history.set_pinned(path, 4, True) == [3, 4]


def test_pin_only_and_unpin_act_on_one_message(path):
    add(path, ("user", "q1"), ("assistant", "a1"))
    assert history.set_pinned(path, 1, True, only=True) == [1]
    history.set_pinned(path, 2, True)
    assert history.set_pinned(path, 2, False) == [2]
    assert [m.id for m in history.drawer(path)] == [1]


def test_clear_keeps_pinned_messages_unless_all(path, runner):
    add(path, ("user", "keep"), ("assistant", "kept"), ("user", "trial"), ("assistant", "x"))
    invoke(runner, "pin", "1")
    result = invoke(runner, "history", "clear", "--yes")
    assert "discarded 2 message(s)" in result.stderr
    assert [m.content for m in history.read(path).messages] == ["keep", "kept"]
    invoke(runner, "history", "clear", "--all", "--yes")
    assert history.read(path).messages == []


def test_cli_pin_unpin_drawer_and_history_outputs(path, runner):
    add(path, ("user", "Quel est mon NAS ?"), ("assistant", "Un Synology DS920+"))
    assert "pinned #1, #2" in invoke(runner, "pin", "2").stderr
    drawer = [json.loads(line) for line in invoke(runner, "drawer", "--nl").stdout.splitlines()]
    assert [d["id"] for d in drawer] == [1, 2]
    invoke(runner, "unpin", "1")
    doc = json.loads(invoke(runner, "history", "--json").stdout)
    assert [(d["id"], d["pinned"]) for d in doc] == [(1, False), (2, True)]
    table = invoke(runner, "history").stdout
    assert "Synology DS920+" in table and "pinned" in table


def test_unknown_id_is_a_one_line_error(path, runner):
    add(path, ("user", "q"))
    from forge.cli.main import cli

    result = runner.invoke(cli, ["pin", "99"])
    assert result.exit_code == 1
    assert result.stderr.strip() == "Error: no message #99 in the history"


def test_a_corrupt_history_is_never_overwritten(path, runner):
    path.parent.mkdir(parents=True)
    broken = b'{"next_id": 3, "messages": [{"id": 1, "role": "user",\n "content": "hi"'
    path.write_bytes(broken)
    from forge.cli.main import cli

    for args in (["history"], ["pin", "1"], ["history", "clear", "--all", "--yes"]):
        result = runner.invoke(cli, args)
        assert result.exit_code == 1
        assert str(path) in result.stderr and "line 2 column" in result.stderr
        assert "Traceback" not in result.output
    with pytest.raises(CorruptFileError):
        add(path, ("user", "new"))
    assert path.read_bytes() == broken


def test_the_seeds_bare_list_layout_is_read(path):
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps([{"role": "user", "content": "old"},
                                {"role": "assistant", "content": "reply"}]))
    (m,) = add(path, ("user", "new"))
    assert m.id == 3
    assert [x.content for x in history.read(path).messages] == ["old", "reply", "new"]


WRITER = """
import sys
from pathlib import Path
from forge.store import history
from forge.store.history import NewMessage
path, tag = Path(sys.argv[1]), sys.argv[2]
for i in range(N):
    history.append(path, [NewMessage("user", f"{tag}-{i}")], max_history=10_000)
"""
# Each append is a locked rewrite with two fsyncs (~20 ms of disk wait, most of this test's
# time); 200 per writer keep both writers contending for seconds at 2/5 of the wait of 500.
# (Measured: the holder mostly re-takes the lock at once, so the writers' messages alternate
# in runs; one run of 200 each switched writer 3 times.)
APPENDS = 200


def test_two_processes_appending_many_messages_each_lose_nothing(path):
    path.parent.mkdir(parents=True)
    n = APPENDS
    procs = [subprocess.Popen([sys.executable, "-c", f"N = {n}\n" + WRITER, str(path), tag])
             for tag in "ab"]
    assert [p.wait(timeout=300) for p in procs] == [0, 0]
    doc = json.loads(path.read_text())  # the file parses
    contents = [m["content"] for m in doc["messages"]]
    assert sorted(contents) == sorted(f"{t}-{i}" for t in "ab" for i in range(n))
    ids = [m["id"] for m in doc["messages"]]
    assert len(set(ids)) == 2 * n and doc["next_id"] == 2 * n + 1
    for tag in "ab":  # each writer's messages keep their order
        mine = [c for c in contents if c.startswith(tag)]
        assert mine == [f"{tag}-{i}" for i in range(n)]


def test_a_writer_killed_mid_rewrite_leaves_no_temporary_file_after_the_next_write(path):
    # A real kill -9 between writing the temporary file and renaming it over memory.json.
    add(path, ("user", "before"))
    script = (
        "import os, sys, time\n"
        "from pathlib import Path\n"
        "from forge.store import history\n"
        "os.replace = lambda *a: (print('tmp', flush=True), time.sleep(60))\n"
        "history.append(Path(sys.argv[1]), [history.NewMessage('user', 'dies')], max_history=200)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script, str(path)], stdout=subprocess.PIPE)
    assert proc.stdout.readline().strip() == b"tmp"
    proc.kill()
    proc.wait()
    assert list(path.parent.glob(f".{path.name}.*.tmp"))  # the crash leftover
    add(path, ("user", "after"))
    assert list(path.parent.glob(f".{path.name}.*.tmp")) == []
    assert [m.content for m in history.read(path).messages] == ["before", "after"]


def test_a_history_gets_a_stable_id_on_its_first_write_and_an_older_file_keeps_working(tmp_path):
    """Message ids are per history; the id tells two machines' histories apart in one shared
    store. A file written before ids existed gets one on its next write, messages untouched."""
    path = tmp_path / "memory.json"
    assert history.read(path).history_id is None
    history.append(path, [NewMessage("user", "salut")], max_history=100)
    hid = history.read(path).history_id
    assert hid and hid.startswith("h-")
    history.append(path, [NewMessage("assistant", "bonjour")], max_history=100)
    assert history.read(path).history_id == hid
    other = tmp_path / "other.json"
    history.append(other, [NewMessage("user", "salut")], max_history=100)
    assert history.read(other).history_id != hid

    old = tmp_path / "old.json"
    old.write_text(json.dumps({"version": 1, "next_id": 3, "messages": [
        {"id": 1, "role": "user", "content": "vieux"},
        {"id": 2, "role": "assistant", "content": "message"}]}))
    assert history.read(old).history_id is None
    given = history.ensure_history_id(old)
    doc = history.read(old)
    assert given and doc.history_id == given
    assert [(m.id, m.content) for m in doc.messages] == [(1, "vieux"), (2, "message")]
    assert history.ensure_history_id(old) == given
    assert history.ensure_history_id(tmp_path / "none.json") is None
    assert not (tmp_path / "none.json").exists()
