"""`forge history import`: formats, bad records, the cap, and import + compaction + recall."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import invoke

from forge.store import history, rag
from forge.store.history import NewMessage
from forge.memory.history_import import BadRecordsError, import_history, parse_records
from forge.core.settings import load_settings

SAMPLE = Path(__file__).resolve().parents[1] / "forge" / "samples" / "transcript.jsonl"


def jsonl(records) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)


def test_jsonl_is_appended_with_new_ids_and_refs_kept(settings):
    history.append(settings.memory_file, [NewMessage("user", "déjà là")], max_history=200)
    text = jsonl([{"role": "user", "content": "Quel NAS ?", "ts": "2026-09-01T10:00:00Z", "ref": "x/1"},
                  {"role": "assistant", "content": "Un DS220+.", "ref": 7, "answered": True},
                  {"role": "assistant", "content": "rien", "answered": False}])
    report = import_history(settings, text)
    assert (report.imported, report.first_id, report.last_id) == (3, 2, 4)
    msgs = history.read(settings.memory_file).messages
    assert [(m.id, m.ref, m.answered) for m in msgs[1:]] == [(2, "x/1", True), (3, "7", True), (4, None, False)]
    assert msgs[1].ts == "2026-09-01T10:00:00Z" and msgs[2].ts  # a missing ts gets the import time


def test_a_json_array_is_accepted_and_ids_are_never_reused(settings):
    history.append(settings.memory_file, [NewMessage("user", "gone")], max_history=200)
    history.clear(settings.memory_file)
    text = '[\n {"role": "user", "content": "a"},\n {"role": "assistant", "content": "b"}\n]'
    report = import_history(settings, text)
    assert (report.first_id, report.last_id) == (2, 3)


def test_bad_records_are_reported_by_line_and_nothing_is_imported(settings, runner, tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"role": "user", "content": "ok"}\n'
                    '{"role": "robot", "content": "x"}\n'
                    '\n'
                    'not json at all\n'
                    '{"role": "user", "content": "ts", "ts": "yesterday"}\n'
                    '{"role": "assistant", "content": "fine"}\n', encoding="utf-8")
    result = invoke(runner, "history", "import", str(path))
    assert result.exit_code == 1
    assert "line 2: role must be one of" in result.stderr
    assert "line 4: not JSON" in result.stderr
    assert "line 5: ts 'yesterday' is not an ISO 8601 date or datetime" in result.stderr
    assert "nothing was imported" in result.stderr and "--skip-bad" in result.stderr
    assert history.read(settings.memory_file).messages == []

    result = invoke(runner, "history", "import", str(path), "--skip-bad")
    assert result.exit_code == 0, result.stderr
    assert "imported 2 message(s)" in result.stdout and "skipped line 2" in result.stderr
    assert [m.content for m in history.read(settings.memory_file).messages] == ["ok", "fine"]


def test_bad_items_of_an_array_are_reported_by_the_line_they_start_on(settings):
    text = '[\n {"role": "user", "content": "a"},\n {"role": "user"},\n 3\n]'
    with pytest.raises(BadRecordsError) as failure:
        import_history(settings, text)
    assert [(b.line, b.problem.split(" ")[0]) for b in failure.value.bad] == [(3, "content"), (4, "expected")]


def test_a_broken_array_is_refused_whole(settings):
    with pytest.raises(Exception, match="broken at line 2"):
        import_history(settings, '[{"role": "user", "content": "a"}\n  {"role": "user"}]')


def test_stdin_is_read_with_a_dash(settings, runner):
    result = invoke(runner, "history", "import", "-", "--json",
                    input=jsonl([{"role": "user", "content": "from a pipe"}]))
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["imported"] == 1


def test_over_the_cap_without_compact_fails_before_writing(monkeypatch, runner, tmp_path):
    monkeypatch.setenv("MEMORY_MAX_HISTORY", "50")
    settings = load_settings()
    path = tmp_path / "long.jsonl"
    path.write_text(jsonl([{"role": "user", "content": f"m{i}"} for i in range(60)]), encoding="utf-8")
    result = invoke(runner, "history", "import", str(path))
    assert result.exit_code == 1
    assert "MEMORY_MAX_HISTORY=50" in result.stderr and "--compact" in result.stderr
    assert not settings.memory_file.exists()


def test_the_shipped_sample_parses_without_a_bad_record():
    messages, bad = parse_records(SAMPLE.read_text(encoding="utf-8"))
    assert bad == [] and len(messages) >= 80
    assert {m.role for m in messages} == {"user", "assistant"} and all(m.ref for m in messages)
    assert any(not m.answered for m in messages)


def test_an_import_of_400_messages_is_compacted_and_recalled_by_words_and_meaning(monkeypatch, runner, tmp_path):
    monkeypatch.setenv("MEMORY_MAX_HISTORY", "120")
    settings = load_settings()
    records = []
    for i in range(200):
        records.append({"role": "user", "content": f"Note {i}: le serveur numéro {i} est dans la baie {i % 7}.",
                        "ref": f"export/{2 * i}"})
        records.append({"role": "assistant", "content": f"Noté pour le serveur {i}.", "ref": f"export/{2 * i + 1}"})
    records[100] = {"role": "user", "content": "My backup job copies the photos to a Backblaze B2 bucket every night with restic.",
                    "ref": "export/needle-q"}
    records[101] = {"role": "assistant", "content": "Good, nightly restic to B2 it is.", "ref": "export/needle-a"}
    path = tmp_path / "long.jsonl"
    path.write_text(jsonl(records), encoding="utf-8")

    result = invoke(runner, "history", "import", str(path), "--compact", "--json")

    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["imported"] == 400 and report["compactions"] >= 3
    doc = history.read(settings.memory_file)
    assert len(doc.messages) < settings.compaction_threshold          # a long transcript ends up archived
    with rag.open_store(settings, check_identity=False) as store:
        archived = rag.list_entries(store, kind=rag.ARCHIVE_KIND)
    in_store = {r for e in archived for r in e.refs["external"]}
    in_history = {m.ref for m in doc.messages}
    assert {r["ref"] for r in records} <= in_store | in_history      # the cap dropped nothing
    assert len(archived) == 200 - sum(m.role == "user" for m in doc.messages)

    words = invoke(runner, "recall", "Backblaze", "--nl")
    assert words.exit_code == 0, words.stderr
    rows = [json.loads(line) for line in words.stdout.splitlines()]
    assert rows[0]["channel"] in ("lexical", "both")
    assert rows[0]["refs"]["external"] == ["export/needle-q", "export/needle-a"]

    meaning = invoke(runner, "recall", "where do my pictures get saved offsite each day?", "--nl")
    rows = [json.loads(line) for line in meaning.stdout.splitlines()]
    top = [r for r in rows if r["channel"] in ("vector", "both")][:3]
    assert any(r["refs"]["external"] == ["export/needle-q", "export/needle-a"] for r in top)


def test_an_embedding_outage_fails_a_compacting_import_before_anything_is_appended(monkeypatch, runner, tmp_path):
    monkeypatch.setenv("EMBEDDING_URL", "http://127.0.0.1:9/embedding")
    settings = load_settings()
    path = tmp_path / "t.jsonl"
    path.write_text(jsonl([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]),
                    encoding="utf-8")
    result = invoke(runner, "history", "import", str(path), "--compact")
    assert result.exit_code == 1 and "127.0.0.1:9" in result.stderr
    assert history.read(settings.memory_file).messages == []


def test_a_file_that_is_not_utf8_is_one_line_saying_so_and_a_bom_is_fine(settings, runner, tmp_path):
    latin1 = tmp_path / "export-latin1.jsonl"
    latin1.write_bytes(jsonl([{"role": "user", "content": "Quel débit ?"}]).encode("latin-1"))
    result = invoke(runner, "history", "import", str(latin1))
    assert result.exit_code == 1
    assert "export-latin1.jsonl" in result.stderr and "UTF-8" in result.stderr
    assert "UnicodeDecodeError" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert history.read(settings.memory_file).messages == []

    bom = tmp_path / "export-bom.jsonl"   # what some Windows tools write
    bom.write_bytes(b"\xef\xbb\xbf" + jsonl([{"role": "user", "content": "Quel débit ?"}]).encode())
    result = invoke(runner, "history", "import", str(bom))
    assert result.exit_code == 0, result.stderr
    assert [m.content for m in history.read(settings.memory_file).messages] == ["Quel débit ?"]


def test_a_failure_midway_through_a_compacting_import_says_how_far_it_got(monkeypatch, runner, tmp_path):
    """What was imported stays (each chunk is whole and compacted in order); the one line says
    how many of the file's messages went in, so the rest can be imported without duplicates."""
    from forge.memory import compaction
    from forge.core.errors import ServerError

    for name, value in {"MEMORY_MAX_HISTORY": 6, "COMPACTION_THRESHOLD": 4, "COMPACTION_KEEP_RECENT": 2}.items():
        monkeypatch.setenv(name, str(value))
    settings = load_settings()
    real, calls = compaction.compact, []

    def fails_the_second_time(*args, **kw):
        calls.append(1)
        if len(calls) == 2:
            raise ServerError("http://127.0.0.1:9/embedding", "cannot reach the embedding server", "start one")
        return real(*args, **kw)

    monkeypatch.setattr(compaction, "compact", fails_the_second_time)
    path = tmp_path / "t.jsonl"
    path.write_text(jsonl([{"role": r, "content": f"{r} {i}"} for i in range(6) for r in ("user", "assistant")]),
                    encoding="utf-8")
    result = invoke(runner, "history", "import", str(path), "--compact")
    assert result.exit_code == 1
    line = result.stderr.strip()
    assert len(line.splitlines()) == 1 and "127.0.0.1:9" in line
    assert "the first 6 of 12 messages were imported" in line
    kept = [m.content for m in history.read(settings.memory_file).messages if not m.is_compaction]
    with rag.open_store(settings, check_identity=False) as store:
        stored = [e.content for e in rag.list_entries(store, kind=rag.ARCHIVE_KIND)]
    assert len(kept) + 2 * len(stored) == 6
