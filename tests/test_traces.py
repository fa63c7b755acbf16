"""Traces: single-write appends, tail from the end, torn lines, the three states."""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from conftest import invoke
from forge.store import traces
from forge.store.traces import LLMUsage, Step


def record(i: int, **over) -> dict:
    base = {"run_id": f"r{i}", "timestamp": "2026-11-29T22:00:00Z", "user_input_preview": f"q{i}",
            "steps": [{"tool": "chat", "duration_ms": 1.0}], "total_ms": 5.0, "ok": True,
            "not_answered": None, "error": None, "llm": {"calls": 1}}
    base.update(over)
    return base


def test_make_record_keeps_a_preview_and_documented_reasons_only():
    started = time.monotonic()
    r = traces.make_record(run_id="x", user_input="é" * 500, steps=[Step("memory", 3.0)],
                           started=started, ok=True, not_answered="recall_nothing_found",
                           error=None, llm=LLMUsage())
    assert len(r.user_input_preview) == 120
    assert set(r.to_dict()) == {"run_id", "timestamp", "user_input_preview", "steps", "total_ms",
                                "ok", "not_answered", "error", "llm"}
    with pytest.raises(ValueError):
        traces.make_record(run_id="x", user_input="", steps=[], started=started, ok=True,
                           not_answered="because", error=None, llm=LLMUsage())


def test_llm_usage_sums_calls_and_lists_models_once():
    u = LLMUsage()
    u.add(prompt_n=10, predicted_n=3, cache_n=4, model="gemma")
    u.add(prompt_n=5, predicted_n=2, model="gemma")
    assert (u.calls, u.prompt_n, u.predicted_n, u.cache_n, u.models) == (2, 15, 5, 4, ["gemma"])


def test_three_states():
    assert traces.state(record(1)) == "✓"
    assert traces.state(record(1, not_answered="recall_cutoff")) == "∅"
    assert traces.state(record(1, ok=False, error="boom")) == "✗"


def test_tail_returns_the_last_records_in_order(settings):
    for i in range(30):
        traces.append(settings.trace_file, record(i))
    assert [r["run_id"] for r in traces.tail(settings.trace_file, 3)] == ["r27", "r28", "r29"]
    assert len(traces.tail(settings.trace_file, 100)) == 30
    assert traces.tail(settings.trace_file.with_name("missing.jsonl"), 5) == []


def test_tail_skips_a_torn_last_line_with_a_warning(settings, runner):
    for i in range(3):
        traces.append(settings.trace_file, record(i))
    with open(settings.trace_file, "ab") as fh:
        fh.write(b'{"run_id": "r3", "ok": tr')  # a writer died mid-line
    result = invoke(runner, "trace", "tail", "-n", "5", "--nl")
    assert [json.loads(x)["run_id"] for x in result.stdout.splitlines()] == ["r0", "r1", "r2"]
    assert "skipped a torn last line" in result.stderr


def test_tail_reads_only_the_end_of_the_file(settings, caplog):
    # A bad line at the very start would warn if tail read the whole file.
    settings.trace_file.parent.mkdir(parents=True)
    settings.trace_file.write_bytes(b"not json at all\n" + b"x" * 300_000 + b"\n")
    for i in range(5):
        traces.append(settings.trace_file, record(i))
    with caplog.at_level("WARNING", logger="forge"):
        got = traces.tail(settings.trace_file, 2)
    assert [r["run_id"] for r in got] == ["r3", "r4"]
    assert caplog.text == ""


def test_trace_tail_table_shows_the_three_states(settings, runner):
    traces.append(settings.trace_file, record(1))
    traces.append(settings.trace_file, record(2, not_answered="recall_nothing_found"))
    traces.append(settings.trace_file, record(3, ok=False, error="server down"))
    out = invoke(runner, "trace", "tail").stdout
    lines = out.splitlines()[2:]
    assert [line.split()[0] for line in lines] == ["✓", "∅", "✗"]
    assert "server down" in out
    assert "5.0000" not in out and lines[0].split()[3] == "5"  # whole milliseconds


def test_follow_yields_lines_appended_later(settings):
    traces.append(settings.trace_file, record(0))
    it = traces.follow(settings.trace_file, poll=0.01, stop_after=2.0)
    with open(settings.trace_file, "ab") as fh:
        fh.write(json.dumps(record(1)).encode()[:10])  # half a line: must wait for its end
        fh.flush()
        time.sleep(0.05)
        fh.write(json.dumps(record(1)).encode()[10:] + b"\n")
    assert next(it)["run_id"] == "r1"


APPENDER = """
import sys
from pathlib import Path
from forge.store import traces
path, tag = Path(sys.argv[1]), sys.argv[2]
for i in range(500):
    # 100 kB of words: a line no secret can hide in, so the scan of each append skips it
    traces.append(path, {"run_id": f"{tag}{i}", "pad": (tag + " ") * 50_000})
"""


def test_two_processes_appending_500_long_lines_each_never_interleave(settings):
    settings.trace_file.parent.mkdir(parents=True)
    procs = [subprocess.Popen([sys.executable, "-c", APPENDER, str(settings.trace_file), t])
             for t in "ab"]
    assert [p.wait(timeout=300) for p in procs] == [0, 0]
    lines = settings.trace_file.read_bytes().split(b"\n")
    assert lines[-1] == b""
    parsed = [json.loads(line) for line in lines[:-1]]  # every line is one whole record
    assert len(parsed) == 1000
    for r in parsed:
        assert r["pad"] == (r["run_id"][0] + " ") * 50_000


def test_ctrl_c_stops_follow_quietly_after_printing_what_came(settings):
    import os
    import shutil
    import signal

    traces.append(settings.trace_file, {"run_id": "before", "ok": True, "not_answered": None})
    import queue
    import threading

    proc = subprocess.Popen([shutil.which("forge"), "trace", "tail", "--follow", "--nl"], env=os.environ,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: lines.put(proc.stdout.readline()), daemon=True).start()
    try:
        assert json.loads(lines.get(timeout=20))["run_id"] == "before"
        traces.append(settings.trace_file, {"run_id": "after", "ok": True, "not_answered": None})
        threading.Thread(target=lambda: lines.put(proc.stdout.readline()), daemon=True).start()
        assert json.loads(lines.get(timeout=20))["run_id"] == "after"
    except BaseException:
        proc.kill()
        raise
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=10)
    assert proc.returncode == 0 and err == "" and out == ""


def test_tail_up_to_an_offset_then_follow_from_it_shows_each_record_once(settings):
    traces.append(settings.trace_file, record(0))
    start = traces.end_offset(settings.trace_file)
    traces.append(settings.trace_file, record(1))  # lands between the tail and the follow
    assert [r["run_id"] for r in traces.tail(settings.trace_file, 10, end=start)] == ["r0"]
    followed = traces.follow(settings.trace_file, start=start, poll=0.01, stop_after=0.5)
    assert [r["run_id"] for r in followed] == ["r1"]
    assert traces.end_offset(settings.trace_file.with_name("none.jsonl")) == 0


def test_an_append_after_a_torn_last_line_starts_on_a_fresh_line(settings):
    traces.append(settings.trace_file, record(0))
    with open(settings.trace_file, "ab") as fh:
        fh.write(b'{"run_id": "r1", "ok": tr')  # a crash mid-append, a full disk
    traces.append(settings.trace_file, record(2))
    traces.append(settings.trace_file, record(3))
    assert [r["run_id"] for r in traces.tail(settings.trace_file, 10)] == ["r0", "r2", "r3"]
