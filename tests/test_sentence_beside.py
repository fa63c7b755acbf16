"""A fresh `forge recall` loads the sentence model in a process forked beside it (Linux): the
command's own process never imports numpy, gives the rows a process that loads the model itself
gives (byte for byte), still refuses another model's rows with its one line, and leaves no
process behind.

Real parts: the `forge` command in real subprocesses, the embedded embedder, the sentence model,
SQLite with sqlite-vec and FTS5.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from forge.core.settings import load_settings

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="the process beside a recall is forked on Linux only")
QUESTION = "Quel fond sonore pour me concentrer ?"
FIXTURE = Path(__file__).parent / "fixtures" / "french_no_word.json"
# Runs the command as the `forge` script does, then says on stderr whether this process (the
# command's, not the child's) imported numpy.
RUN = ("import sys\n{before}"
       "from forge.cli.main import cli\n"
       "try:\n    cli(prog_name='forge')\nexcept SystemExit as e:\n    code = e.code\n"
       "print('numpy here:', 'numpy' in sys.modules, file=sys.stderr)\n"
       "sys.exit(code)\n")


def fill(*, rows: bool = True) -> None:
    """The no-word fixture's 56 notes, with their sentence rows stored as `remember` stores
    them, or without (a store written before rows were stored: the child embeds each note)."""
    from forge.memory import conflicts
    from forge.store import rag

    data = json.loads(FIXTURE.read_text(encoding="utf-8"))
    items = [rag.NewEntry(e["kind"], e["content"]) for e in data["entries"]]
    with rag.open_store(load_settings()) as store:
        (conflicts.remember_many if rows else rag.remember_many)(store, items)


def forge(*args: str, numpy_first: bool = False) -> subprocess.CompletedProcess:
    code = RUN.format(before="import numpy\n" if numpy_first else "")
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("rows", [True, False], ids=["stored rows", "rows embedded at recall"])
def test_a_fresh_recall_scores_beside_itself_the_rows_of_a_process_that_loads_the_model(
        forge_env, rows):
    fill(rows=rows)
    beside = forge("recall", QUESTION, "--json")
    here = forge("recall", QUESTION, "--json", numpy_first=True)   # the model loaded in-process
    assert beside.returncode == 0 and here.returncode == 0, (beside.stderr, here.stderr)
    assert "numpy here: False" in beside.stderr, beside.stderr
    assert "numpy here: True" in here.stderr
    rows = json.loads(beside.stdout)["rows"]
    assert sum(r["sentence"] is not None for r in rows) >= 5   # the model's share is there
    assert beside.stdout == here.stdout


def test_another_models_rows_still_refuse_with_one_line(forge_env):
    """The child cannot score rows another model wrote: the command loads the model itself,
    which says what to do, as a process without the child would."""
    import numpy as np

    from forge.store import rag
    from forge.store.identity import encode_vec

    fill()
    with rag.open_store(load_settings()) as store:
        other = {**rag.sentence_identity(store), "version": "0.1.0",
                 "probe": encode_vec(np.eye(512, dtype=np.float32)[3])}
        with store.backend.transaction():
            store.backend.write_meta("sentence", other)
    done = forge("recall", QUESTION)
    assert done.returncode == 1, done
    lines = [line for line in done.stderr.splitlines() if not line.startswith("numpy here")]
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("Error: this store's sentence rows were written by ")
    assert "`forge reindex --sentence`" in lines[0]
    assert done.stdout == ""


def children_of_this_test(data_dir: Path) -> list[int]:
    """The processes still running with this test's data folder in their environment."""
    marker = f"FORGE_DATA_DIR={data_dir}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if marker in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@pytest.mark.parametrize("args", [(QUESTION,), ("--limit", "-3", QUESTION)],
                         ids=["rows", "bad option"])
def test_no_process_is_left_behind(forge_env, args):
    """Whether the recall asked the child (rows) or failed before: the child leaves with the
    command, so a shell pipe or a cron line never waits."""
    fill()
    forge("recall", *args)
    deadline = time.monotonic() + 5
    while children_of_this_test(forge_env) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert children_of_this_test(forge_env) == []




# The child broken where `where` says (its load, or its scoring), this process's left as it is:
# the child is a fork, it runs the function it was given, and only there is its pid another.
BREAK = ("import os, time\nfrom forge.recall import beside, sentence\n"
         "beside.ANSWER_WITHIN = 1.0\nreal, parent = sentence.{where}, os.getpid()\n"
         "def broken(*args):\n    if os.getpid() != parent:\n        {how}\n"
         "    return real(*args)\n"
         "sentence.{where} = broken\n")
CHILD_FAILS = {
    # its scoring never answers: the recall waits ANSWER_WITHIN (1 s here), then kills it
    "hangs as it scores": ("scored", "time.sleep(60)"),
    # it dies as it scores (a crash): the recall reads the pipe's end
    "dies as it scores": ("scored", "os._exit(3)"),
    # its load never ends, so it never reads the request: a request larger than the pipe's
    # buffer (40 notes' rows, ~80 KB) must not block the recall's write either
    "hangs as it loads": ("model", "time.sleep(60)"),
}


def broken_recall(where: str, how: str, *args: str) -> subprocess.CompletedProcess:
    code = RUN.format(before=BREAK.format(where=where, how=how))
    return subprocess.run([sys.executable, "-c", code, "recall", *args], capture_output=True,
                          text=True, timeout=120)


def gone(data_dir: Path, within: float) -> bool:
    deadline = time.monotonic() + within
    while children_of_this_test(data_dir) and time.monotonic() < deadline:
        time.sleep(0.02)
    return children_of_this_test(data_dir) == []


@pytest.mark.parametrize("how", list(CHILD_FAILS))
def test_a_child_that_fails_costs_its_wait_not_the_answer(forge_env, how):
    fill()
    args = (QUESTION, "--json", "--limit", "40")
    expected = forge("recall", *args)
    started = time.monotonic()
    done = broken_recall(*CHILD_FAILS[how], *args)
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - started < 30
    assert done.stdout == expected.stdout
    assert "numpy here: True" in done.stderr   # this process loaded the model itself
    assert gone(forge_env, 5)


def test_a_child_never_asked_ends_with_the_recall(forge_env):
    """A recall that finds nothing (an empty store) never asks the child: it still ends it
    when it is done, rather than leaving it to finish loading a model nobody reads (here a load
    of 60 s)."""
    done = broken_recall("model", "time.sleep(60)", QUESTION)
    assert done.returncode == 0, done.stderr
    assert "numpy here: False" in done.stderr
    assert gone(forge_env, 2)


def test_a_closed_child_is_never_signalled_again(monkeypatch):
    """A recall can end the child twice (its answer failed, then the command ends it): once it
    is closed and reaped, its pid may be another process's, which must get no signal."""
    from forge.recall import beside

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    to_child, from_child = os.pipe()
    ended = beside.Beside(child.pid, to_child, from_child)
    ended.close()
    assert child.wait(timeout=10) != 0   # SIGTERM ended it
    beside._reap()                       # and it is reaped: its pid is free
    signals = []
    monkeypatch.setattr(os, "kill", lambda pid, sig: signals.append((pid, sig)))
    ended.close()
    ended.close(kill=True)
    assert signals == []
