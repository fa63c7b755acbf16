"""`forge history import --from chatgpt|claude`: the hand-written exports in fixtures/exports/,
shaped like the real ones, read, imported, compacted, recalled, re-imported and resumed."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import invoke
from terminal import run_with_a_terminal

from forge.memory import compaction
from forge.store import history, rag
from forge.memory.export_import import _read_ledger, ledger_path
from forge.memory.exports import Conversation, conversations, key_of, sniff
from forge.core.settings import load_settings

EXPORTS = Path(__file__).resolve().parent / "fixtures" / "exports"
CHATGPT = EXPORTS / "chatgpt_conversations.json"
CLAUDE = EXPORTS / "claude_conversations.json"
CHATGPT_1 = "chatgpt:67a1c0de-0001-4000-8000-000000000001"


def zipped(json_path: Path, tmp_path: Path, extra: dict[str, str] | None = None) -> Path:
    """The export as the services ship it: conversations.json in a .zip beside other files."""
    out = tmp_path / (json_path.stem.split("_")[0] + "-export.zip")
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        z.write(json_path, "conversations.json")
        z.writestr("user.json", '{"id": "user-1"}')
        for name, text in (extra or {}).items():
            z.writestr(name, text)
    return out


def read_all(path: Path, kind: str) -> list[Conversation]:
    items = list(conversations(path, kind))
    assert all(isinstance(c, Conversation) for c in items)
    return items  # type: ignore[return-value]


def small_history(monkeypatch, max_history: int = 4) -> None:
    monkeypatch.setenv("MEMORY_MAX_HISTORY", str(max_history))
    monkeypatch.setenv("COMPACTION_THRESHOLD", str(max_history))
    monkeypatch.setenv("COMPACTION_KEEP_RECENT", "0")


def stored_keys(settings) -> list[str]:
    """Every export key in the history and the archive, duplicates kept."""
    keys = [key_of(m.ref) for m in history.read(settings.memory_file).messages if key_of(m.ref)]
    if settings.rag_db_file.exists():
        with rag.open_store(settings, check_identity=False) as store:
            for e in rag.list_entries(store, kind=rag.ARCHIVE_KIND):
                keys += [key_of(r) for r in e.refs.get("external", []) if key_of(r)]
    return keys


# -- reading ------------------------------------------------------------------------------------

def test_chatgpt_follows_current_node_and_keeps_only_what_the_user_saw():
    first, second = read_all(CHATGPT, "chatgpt")
    assert first.title == "NAS silencieux pour quatre disques"
    assert [(m.role, m.content) for m in first.messages] == [
        # the edited question, not the one edited away (u1-old) nor its answer
        ("user", "Quel NAS silencieux me conseilles-tu pour 4 disques ?"),
        # the browsing call and the tool's page are left out; the answer after them is kept
        ("assistant", "Le TerraMaster F4-424 avec des disques WD Red Plus reste sous 20 dB au repos."),
        ("user", "[image]\nVoici la baie de brassage, où le mettre ?"),
        ("assistant", "Sur l'étagère du bas, loin du routeur, pour la ventilation."),
    ]
    assert first.messages[0].ts == "2024-10-27T03:35:00.250000Z"      # create_time, UTC
    assert first.messages[0].ref == (f'{CHATGPT_1}/u1-new "NAS silencieux pour quatre disques"')
    assert [m.key for m in second.messages] == ["chatgpt:67a1c0de-0002-4000-8000-000000000002/q2",
                                               "chatgpt:67a1c0de-0002-4000-8000-000000000002/p2"]


def test_claude_reads_content_blocks_and_appends_attachments_to_their_message():
    ups, empty, jellyfin = read_all(CLAUDE, "claude")
    assert [m.role for m in ups.messages] == ["user", "assistant"]
    assert ups.messages[0].content == (
        "Voici la config de mon onduleur, comment déclencher l'arrêt du NAS ?\n"
        "[attachment: ups.conf]\n[eaton]\n  driver = usbhid-ups\n  port = auto")
    # text was empty: the text blocks, not the tool_use block
    assert ups.messages[1].content == ("Avec NUT : mets SHUTDOWNCMD dans upsmon.conf et le "
                                       "pilote usbhid-ups suffit.")
    assert ups.messages[1].ts == "2024-11-02T09:15:05.000000Z"         # +02:00 turned into UTC
    assert empty.messages == [] and len(jellyfin.messages) == 2


def test_the_format_is_sniffed_from_the_shape_and_a_zip_reads_like_its_json(tmp_path):
    assert sniff(CHATGPT) == "chatgpt" and sniff(CLAUDE) == "claude"
    for path, kind in ((CHATGPT, "chatgpt"), (CLAUDE, "claude")):
        z = zipped(path, tmp_path)
        assert sniff(z) == kind
        assert [c.messages for c in read_all(z, kind)] == [c.messages for c in read_all(path, kind)]
    forge_transcript = tmp_path / "t.jsonl"
    forge_transcript.write_text('{"role": "user", "content": "a"}\n{"role": "assistant", "content": "b"}\n')
    assert sniff(forge_transcript) is None


# -- importing ----------------------------------------------------------------------------------

def test_both_zipped_exports_import_without_from_and_a_reimport_adds_nothing(runner, tmp_path):
    settings = load_settings()
    gpt, claude = zipped(CHATGPT, tmp_path), zipped(CLAUDE, tmp_path)
    first = invoke(runner, "history", "import", str(gpt), "--json")
    assert first.exit_code == 0, first.stderr
    assert json.loads(first.stdout)["imported"] == 6 and json.loads(first.stdout)["kind"] == "chatgpt"
    second = invoke(runner, "history", "import", str(claude), "--json")
    report = json.loads(second.stdout)
    assert (report["kind"], report["imported"], report["empty"], report["conversations"]) == ("claude", 4, 1, 3)
    msgs = history.read(settings.memory_file).messages
    assert msgs[0].content.startswith("[conversation: NAS silencieux pour quatre disques]\n")
    assert msgs[6].ts == "2024-11-02T09:15:01.000000Z"

    again = invoke(runner, "history", "import", str(gpt))
    assert again.exit_code == 0 and "imported 0 message(s)" in again.stdout
    assert "6 imported before" in again.stdout
    assert len(history.read(settings.memory_file).messages) == 10


def test_a_compacting_import_is_recalled_with_its_conversation_and_never_imported_twice(monkeypatch, runner):
    small_history(monkeypatch)
    settings = load_settings()
    for path in (CHATGPT, CLAUDE):
        result = invoke(runner, "history", "import", str(path), "--compact", "--json")
        assert result.exit_code == 0, result.stderr
        assert json.loads(result.stdout)["compactions"] >= 1
    assert sorted(stored_keys(settings)) == sorted(set(stored_keys(settings)))
    assert len(stored_keys(settings)) == 10

    words = invoke(runner, "recall", "usbhid-ups SHUTDOWNCMD", "--nl")
    rows = [json.loads(line) for line in words.stdout.splitlines()]
    assert rows[0]["refs"]["external"][0].startswith(
        'claude:5b2e9a10-0001-4c00-9000-00000000000a/m-0001 "Onduleur et arrêt propre"')
    title = invoke(runner, "recall", "Sauvegarde restic", "--nl")     # the title is searchable
    top = json.loads(title.stdout.splitlines()[0])
    assert "[conversation: Sauvegarde restic]" in top["content"]

    # archived, then forgotten: a re-import brings back neither
    with rag.open_store(settings, check_identity=False) as store:
        doomed = next(e for e in rag.list_entries(store, kind=rag.ARCHIVE_KIND) if "restic" in e.content)
        rag.forget(store, doomed.id)
    for path in (CHATGPT, CLAUDE):
        again = invoke(runner, "history", "import", str(path), "--compact", "--json")
        assert json.loads(again.stdout)["imported"] == 0
    assert len(stored_keys(settings)) == 8


def test_a_newer_export_adds_only_the_new_messages(runner, tmp_path):
    settings = load_settings()
    invoke(runner, "history", "import", str(CLAUDE))
    newer = json.loads(CLAUDE.read_text(encoding="utf-8"))
    newer[2]["chat_messages"].append({"uuid": "m-0103", "text": "Et pour le HDR ?", "content": [],
                                      "sender": "human", "created_at": "2024-11-05T08:00:00Z",
                                      "attachments": [], "files": []})
    newer[2]["name"] = "Jellyfin transcodage (renommée)"
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps(newer), encoding="utf-8")
    result = invoke(runner, "history", "import", str(path), "--json")
    assert json.loads(result.stdout)["imported"] == 1
    assert history.read(settings.memory_file).messages[-1].content == "Et pour le HDR ?"


@pytest.mark.parametrize("crash,cron", [("export_piece", False), ("export_history_write", False),
                                        ("export_history_write", True), ("export_pending", True)])
def test_a_killed_import_resumes_where_it_stopped(monkeypatch, crash, cron):
    """kill -9 after a conversation's write, between its history write and its committed keys,
    or between its pending keys and its history write; with `cron`, a `forge compact` archives
    what the killed import left before it is run again. The re-run imports the rest, nothing
    twice, nothing lost."""
    small_history(monkeypatch, 6)
    settings = load_settings()
    command = [sys.executable, "-m", "forge", "history", "import", str(CHATGPT), "--compact"]
    killed = subprocess.run(command, env={**os.environ, compaction.CRASH_ENV: crash},
                            capture_output=True, text=True, timeout=300)
    assert killed.returncode == 137, killed.stderr
    if cron:
        subprocess.run([sys.executable, "-m", "forge", "compact"], check=True, timeout=300,
                       capture_output=True)
    assert len(stored_keys(settings)) < 6
    resumed = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    keys = stored_keys(settings)
    assert len(keys) == 6 and len(set(keys)) == 6
    committed, unsettled = _read_ledger(ledger_path(settings))
    assert committed == set(keys) and not unsettled - committed


# -- bad input ----------------------------------------------------------------------------------

def test_a_file_that_is_neither_export_is_one_line_and_exit_1(runner, tmp_path):
    path = tmp_path / "notes.json"
    path.write_text('[{"hello": "world"}]', encoding="utf-8")
    result = invoke(runner, "history", "import", str(path), "--from", "chatgpt")
    assert result.exit_code == 1
    assert result.stderr.strip().count("\n") == 0
    assert str(path) in result.stderr and "neither a ChatGPT nor a Claude export" in result.stderr
    wrong = invoke(runner, "history", "import", str(CLAUDE), "--from", "chatgpt")
    assert wrong.exit_code == 1 and "a Claude export, not a ChatGPT one" in wrong.stderr
    empty_zip = tmp_path / "x.zip"
    with zipfile.ZipFile(empty_zip, "w") as z:
        z.writestr("readme.txt", "hi")
    result = invoke(runner, "history", "import", str(empty_zip))
    assert result.exit_code == 1 and "without a conversations.json" in result.stderr


def test_a_truncated_export_imports_nothing_or_with_skip_bad_what_came_before(runner, tmp_path):
    settings = load_settings()
    text = CHATGPT.read_text(encoding="utf-8")
    cut = tmp_path / "conversations.json"
    cut.write_text(text[: text.index('"title": "Sauvegarde restic"') + 40], encoding="utf-8")
    result = invoke(runner, "history", "import", str(cut))
    assert result.exit_code == 1
    assert str(cut) in result.stderr and "truncated" in result.stderr
    assert "nothing was imported" in result.stderr
    assert history.read(settings.memory_file).messages == []

    result = invoke(runner, "history", "import", str(cut), "--skip-bad", "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["imported"] == 4 and len(report["skipped"]) == 1

    early = tmp_path / "early.json"   # cut inside the first conversation: still sniffed
    early.write_text(text[:2000], encoding="utf-8")
    result = invoke(runner, "history", "import", str(early))
    assert result.exit_code == 1 and str(early) in result.stderr and "truncated" in result.stderr


def test_a_malformed_conversation_is_named_and_skip_bad_counts_it(runner, tmp_path):
    settings = load_settings()
    broken = json.loads(CHATGPT.read_text(encoding="utf-8"))
    broken[0]["current_node"] = "nowhere"
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps(broken), encoding="utf-8")
    result = invoke(runner, "history", "import", str(path))
    assert result.exit_code == 1
    assert f"conversation 1 ({CHATGPT_1.split(':')[1]}): current_node 'nowhere'" in result.stderr
    assert history.read(settings.memory_file).messages == []
    result = invoke(runner, "history", "import", str(path), "--skip-bad", "--json")
    report = json.loads(result.stdout)
    assert report["imported"] == 2 and len(report["skipped"]) == 1
    assert "skipped conversation 1" in result.stderr


def test_an_embedding_outage_fails_a_compacting_export_import_before_any_write(monkeypatch, runner):
    monkeypatch.setenv("EMBEDDING_URL", "http://127.0.0.1:9/embedding")
    settings = load_settings()
    result = invoke(runner, "history", "import", str(CLAUDE), "--compact")
    assert result.exit_code == 1 and "127.0.0.1:9" in result.stderr
    assert history.read(settings.memory_file).messages == []
    assert not ledger_path(settings).exists()


def test_over_the_cap_without_compact_an_export_is_refused_before_writing(monkeypatch, runner):
    monkeypatch.setenv("MEMORY_MAX_HISTORY", "5")
    monkeypatch.setenv("COMPACTION_THRESHOLD", "5")
    monkeypatch.setenv("COMPACTION_KEEP_RECENT", "1")
    settings = load_settings()
    result = invoke(runner, "history", "import", str(CHATGPT))
    assert result.exit_code == 1 and "over MEMORY_MAX_HISTORY=5" in result.stderr
    assert "--compact" in result.stderr
    assert history.read(settings.memory_file).messages == [] and not ledger_path(settings).exists()


def test_a_terminal_sees_the_progress_bar_a_pipeline_does_not(runner):
    code, out, err = run_with_a_terminal(["history", "import", str(CLAUDE)], on="stderr")
    assert code == 0 and "importing conversations" in err and "100%" in err
    assert "imported 4 message(s)" in out
    piped = invoke(runner, "history", "import", str(CHATGPT))
    assert piped.exit_code == 0 and "importing conversations" not in piped.stderr


# -- what an untrusted file may cost ------------------------------------------------------------

def restic(**changes) -> dict:
    """The fixture's second ChatGPT conversation (two messages), changed."""
    conv = json.loads(CHATGPT.read_text(encoding="utf-8"))[1]
    conv.update(changes)
    return conv


def import_in_a_child(path: Path, *extra: str) -> subprocess.CompletedProcess:
    """`forge history import` in its own process, its address space capped at 2 GB (a file that
    can make an import swell past that would fail here, not take the machine down)."""
    import resource

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 * 2**30, 2 * 2**30))

    forge = str(Path(sys.executable).parent / "forge")
    return subprocess.run([forge, "history", "import", str(path), *extra], capture_output=True,
                          text=True, timeout=300, preexec_fn=cap)


def refused_in_one_line(done: subprocess.CompletedProcess, *needles: str) -> None:
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert done.stderr.count("\n") == 1 and "bug in Forge" not in done.stderr, done.stderr
    for needle in needles:
        assert needle in done.stderr, done.stderr


def test_a_utf8_bom_before_an_export_is_read_past(runner, tmp_path):
    path = tmp_path / "conversations.json"
    path.write_bytes(b"\xef\xbb\xbf" + CHATGPT.read_bytes())
    assert sniff(path) == "chatgpt"
    result = invoke(runner, "history", "import", str(path), "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["imported"] == 6


def test_children_that_are_not_a_list_of_node_ids_are_refused_not_dropped(runner, tmp_path):
    settings = load_settings()
    for children, needle in (("q2", "children"), (["nowhere"], "'nowhere'"), (["r2"], "cycle")):
        conv = restic(current_node=None)
        conv["mapping"]["r2"]["children"] = children if children != ["r2"] else ["q2"]
        if children == ["r2"]:                       # q2 -> r2 -> q2 -> ...
            conv["mapping"]["q2"]["children"] = ["r2"]
        path = tmp_path / "conversations.json"
        path.write_text(json.dumps([conv]), encoding="utf-8")
        done = import_in_a_child(path)
        refused_in_one_line(done, "conversation 1 (67a1c0de-0002", needle, "nothing was imported")
        assert history.read(settings.memory_file).messages == []


def test_a_time_out_of_range_is_one_line_naming_it(tmp_path):
    settings = load_settings()
    for value in (1e300, 1e12, -1e300):
        conv = restic()
        conv["mapping"]["q2"]["message"]["create_time"] = value
        path = tmp_path / "conversations.json"
        path.write_text(json.dumps([conv]), encoding="utf-8")
        refused_in_one_line(import_in_a_child(path), f"create_time {value!r} is not a time")
        assert history.read(settings.memory_file).messages == []


def test_a_huge_title_is_stored_once_not_in_every_message(runner, tmp_path):
    settings = load_settings()
    title = "T" * 200_000
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps([restic(title=title)]), encoding="utf-8")
    result = invoke(runner, "history", "import", str(path), "--json")
    assert result.exit_code == 0, result.stderr
    first, second = history.read(settings.memory_file).messages
    assert first.content.startswith(f"[conversation: {title}]\n")
    assert len(first.ref) < 300 and len(second.ref) < 300 and second.ref.startswith(key_of(second.ref))
    assert settings.memory_file.stat().st_size < 1.2 * len(title)


@pytest.mark.parametrize("shape", ["object", "array"])
def test_nesting_past_the_documented_depth_is_refused_with_a_line(tmp_path, shape):
    """100,000 levels in a node's metadata (a 600 KB file) made the reading swell to 10.8 GB;
    now it is refused past exports.MAX_DEPTH, in a process capped at 2 GB."""
    from forge.memory.exports import MAX_DEPTH

    settings = load_settings()
    deep = ('{"a":' * 100_000 + "1" + "}" * 100_000) if shape == "object" else \
        ("[" * 100_000 + "]" * 100_000)
    text = json.dumps([restic(), restic(conversation_id="c-deep", id="c-deep")])
    text = text.replace('"metadata": {}', f'"metadata": {deep}', 1).replace(
        '"conversation_id": "67a1c0de-0002-4000-8000-000000000002"', '"conversation_id": "c-first"', 1)
    path = tmp_path / "conversations.json"
    path.write_text(text, encoding="utf-8")
    assert MAX_DEPTH < 1000
    refused_in_one_line(import_in_a_child(path), "conversation 1 (c-first)",
                        f"nested deeper than {MAX_DEPTH} levels")
    assert history.read(settings.memory_file).messages == []
    done = import_in_a_child(path, "--skip-bad", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["imported"] == 2 and "skipped conversation 1" in done.stderr

    claude = json.loads(CLAUDE.read_text(encoding="utf-8"))[:1]
    claude[0]["chat_messages"][0]["attachments"] = "ATTACH"
    path.write_text(json.dumps(claude).replace('"ATTACH"', deep), encoding="utf-8")
    refused_in_one_line(import_in_a_child(path), f"nested deeper than {MAX_DEPTH} levels")


def test_a_deep_first_conversation_is_still_sniffed(tmp_path):
    path = tmp_path / "conversations.json"
    path.write_text('[{"zzz": ' + '{"a":' * 100_000 + "1" + "}" * 100_000 + ', "mapping": {}}]',
                    encoding="utf-8")
    done = import_in_a_child(path)
    assert done.returncode == 1 and "bug in Forge" not in done.stderr, done.stderr
