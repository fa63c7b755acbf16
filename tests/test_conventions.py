"""The conventions users of simonw/llm and sqlite-utils expect:
destructive commands that ask or need --yes and have --dry-run, --csv/--tsv/--no-headers on
every listing, export / edit, recall --kind / --limit, history --grep, exit 2 for an unknown
kind typed as an argument, help within 80 columns, shell completion."""
from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
from pathlib import Path

import click
import pytest

from conftest import command_paths, invoke
from forge.store import history, rag
from forge.cli.main import cli
from forge.store.history import NewMessage

ENTRIES = [
    ("decision", "forge", "Use SQLite-vec instead of an external vector database"),
    ("todo", None, "Buy a UPS for the NAS"),
    ("fact", "homelab", "The NAS runs Debian 12 on a Ryzen, with 32 GB of RAM"),
    ("todo", "homelab", "Replace the NAS fan, it rattles"),
    ("preference", None, "Answers in French, short, with commands\tand a tab"),
]


@pytest.fixture
def store(runner):
    lines = "".join(json.dumps({"kind": k, "project": p, "content": c}) + "\n" for k, p, c in ENTRIES)
    result = invoke(runner, "remember", "--batch", "-", input=lines)
    assert result.exit_code == 0, result.stderr
    return runner


def listed(runner, *args) -> list[dict]:
    result = invoke(runner, "memory", "ls", *args, "--nl")
    assert result.exit_code == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


def add_history(settings, *pairs):
    history.append(settings.memory_file, [NewMessage(r, c) for r, c in pairs], max_history=200)


# ----------------------------------------------------------------------------- 16: destructive

def test_forget_takes_several_ids_and_a_missing_one_forgets_nothing(store):
    missing = invoke(store, "memory", "forget", "1", "99")
    assert missing.exit_code == 1 and "#99" in missing.stderr
    assert "nothing was forgotten" in missing.stderr
    assert len(listed(store)) == 5
    done = invoke(store, "memory", "forget", "1", "3", "--json")
    assert done.exit_code == 0, done.stderr
    assert [r["id"] for r in json.loads(done.stdout)] == [1, 3]
    assert [e["id"] for e in listed(store)] == [2, 4, 5]
    one = invoke(store, "memory", "forget", "2")  # one id: the line scripts always read
    assert one.stdout.strip() == "forgot #2 [todo]"


def test_bulk_forget_needs_yes_without_a_terminal_and_dry_run_changes_nothing(store):
    dry = invoke(store, "memory", "forget", "--kind", "todo", "--dry-run", "--nl")
    assert dry.exit_code == 0
    assert [json.loads(line)["id"] for line in dry.stdout.splitlines()] == [2, 4]
    assert "would forget 2 entries" in dry.stderr
    refused = invoke(store, "memory", "forget", "--kind", "todo", input="y\n")
    assert refused.exit_code == 2 and "--yes" in refused.stderr
    assert len(listed(store)) == 5
    scoped = invoke(store, "memory", "forget", "--kind", "todo", "-p", "homelab", "--yes")
    assert scoped.exit_code == 0 and scoped.stdout.strip() == "forgot #4 [todo]"
    assert invoke(store, "memory", "forget", "--project", "homelab", "--yes").exit_code == 0
    assert [e["id"] for e in listed(store)] == [1, 2, 5]
    both = invoke(store, "memory", "forget", "1", "--kind", "todo")
    assert both.exit_code == 2 and "not both" in both.stderr
    assert invoke(store, "memory", "forget").exit_code == 2


def test_dry_run_of_forget_by_id_lists_and_keeps(store):
    dry = invoke(store, "memory", "forget", "1", "2", "--dry-run")
    assert dry.exit_code == 0 and "Buy a UPS" in dry.stdout and "would forget 2" in dry.stderr
    assert len(listed(store)) == 5


def test_history_clear_needs_yes_without_a_terminal_and_dry_run_lists(settings, runner):
    add_history(settings, ("user", "keep"), ("assistant", "kept"), ("user", "trial"), ("assistant", "x"))
    invoke(runner, "pin", "1")
    dry = invoke(runner, "history", "clear", "--dry-run", "--nl")
    assert [json.loads(line)["id"] for line in dry.stdout.splitlines()] == [3, 4]
    assert "would discard 2 message(s)" in dry.stderr
    refused = invoke(runner, "history", "clear", input="y\n")
    assert refused.exit_code == 2 and "--yes" in refused.stderr
    assert len(history.read(settings.memory_file).messages) == 4
    assert invoke(runner, "history", "clear", "--yes").exit_code == 0
    assert [m.id for m in history.read(settings.memory_file).messages] == [1, 2]
    # Nothing to discard: nothing to confirm.
    invoke(runner, "unpin", "1")
    invoke(runner, "unpin", "2")
    assert invoke(runner, "history", "clear", "--yes").exit_code == 0
    assert invoke(runner, "history", "clear").exit_code == 0


def run_on_a_terminal(args: list[str], answer: bytes) -> tuple[int, str]:
    """Run the real `forge` with stdin on a pseudo-terminal; type `answer`."""
    import pty

    primary, secondary = pty.openpty()
    try:
        proc = subprocess.Popen([shutil.which("forge"), *args], stdin=secondary,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=os.environ)
        os.write(primary, answer)
        out, err = proc.communicate(timeout=60)
    finally:
        os.close(primary)
        os.close(secondary)
    return proc.returncode, (out + err).decode()


def test_on_a_terminal_clear_and_bulk_forget_ask_first(settings, store):
    add_history(settings, ("user", "trial"), ("assistant", "x"))
    code, text = run_on_a_terminal(["history", "clear"], b"n\n")
    assert code == 1 and "discard 2 message(s) without archiving them? [y/N]" in text
    assert len(history.read(settings.memory_file).messages) == 2
    code, text = run_on_a_terminal(["history", "clear"], b"y\n")
    assert code == 0 and history.read(settings.memory_file).messages == []
    code, text = run_on_a_terminal(["memory", "forget", "--kind", "todo"], b"y\n")
    assert code == 0 and "forget 2 entries of kind 'todo'? [y/N]" in text
    assert [e["kind"] for e in listed(store)] == ["decision", "fact", "preference"]


# ----------------------------------------------------------------------------- 17: output

def listing_commands() -> list[list[str]]:
    """Every command path whose output goes through the shared renderer."""
    paths = []
    ctx = click.Context(cli)
    for name in cli.list_commands(ctx):
        cmd = cli.get_command(ctx, name)
        subs = [[name, s] for s in cmd.list_commands(ctx)] if isinstance(cmd, click.Group) else []
        for path in ([[name]] + subs):
            command = cmd if len(path) == 1 else cmd.get_command(ctx, path[1])
            if any("--json" in p.opts for p in command.params):
                paths.append(path)
    return paths


def test_every_command_with_json_has_csv_tsv_and_no_headers():
    paths = listing_commands()
    assert ["memory", "ls"] in paths and ["history"] in paths and ["trace", "tail"] in paths
    ctx = click.Context(cli)
    for path in paths:
        cmd = cli.get_command(ctx, path[0])
        if len(path) == 2:
            cmd = cmd.get_command(ctx, path[1])
        opts = {o for p in cmd.params for o in p.opts}
        assert {"--nl", "--csv", "--tsv", "--no-headers"} <= opts, path


def test_csv_and_tsv_hold_the_nl_rows(store):
    nl = listed(store)
    as_csv = invoke(store, "memory", "ls", "--csv").stdout
    rows = list(csv.DictReader(io.StringIO(as_csv)))
    assert [r["id"] for r in rows] == [str(e["id"]) for e in nl]
    assert list(rows[0]) == list(nl[0])
    assert rows[4]["content"] == ENTRIES[4][2]      # a tab inside a field survives
    tsv = invoke(store, "memory", "ls", "--tsv", "--no-headers").stdout
    parsed = list(csv.reader(io.StringIO(tsv), delimiter="\t"))
    assert len(parsed) == 5 and parsed[0][:2] == ["1", "decision"] and parsed[4][3] == ENTRIES[4][2]
    table = invoke(store, "memory", "ls", "--no-headers").stdout
    assert "entry" not in table.splitlines()[0] and "#1 [decision]" in table.splitlines()[0]
    clash = invoke(store, "memory", "ls", "--csv", "--json")
    assert clash.exit_code == 2 and "exclusive" in clash.stderr
    assert invoke(store, "memory", "ls", "--nl", "--no-headers").exit_code == 2


def test_history_csv_has_the_json_fields(settings, runner):
    add_history(settings, ("user", "Quel NAS ?"), ("assistant", "Un Synology, \"DS920+\""))
    doc = json.loads(invoke(runner, "history", "--json").stdout)
    rows = list(csv.DictReader(io.StringIO(invoke(runner, "history", "--csv").stdout)))
    assert list(rows[0]) == list(doc[0]) and rows[1]["content"] == doc[1]["content"]


def test_memory_ls_nl_rows_are_the_json_entries(store):
    doc = json.loads(invoke(store, "memory", "ls", "--json").stdout)
    assert listed(store) == doc["entries"]


def test_memory_ls_kind_counts_that_kind_only(store):
    table = invoke(store, "memory", "ls", "todo").stdout
    assert table.rstrip().splitlines()[-1] == "todo 2"
    assert json.loads(invoke(store, "memory", "ls", "todo", "--json").stdout)["by_kind"] == {"todo": 2}
    bare = invoke(store, "memory", "ls").stdout.rstrip().splitlines()[-1]
    assert bare == "decision 1, fact 1, preference 1, todo 2 (total 5)"


# ----------------------------------------------------------------------------- 18: export, edit

def test_export_reads_back_into_another_store(store, runner, tmp_path, monkeypatch, settings):
    from forge.memory.compaction import compact

    add_history(settings, ("user", "Quel NAS ?"), ("assistant", "Un Synology"),
                ("user", "Et le CPU ?"), ("assistant", "Un Ryzen"))
    monkeypatch.setenv("COMPACTION_KEEP_RECENT", "2")
    from forge.core.settings import load_settings

    compact(load_settings())  # an archive entry: history, not exported
    exported = invoke(runner, "memory", "export")
    assert exported.exit_code == 0 and "1 archive entries left out" in exported.stderr
    path = tmp_path / "memory.jsonl"
    path.write_text(exported.stdout, encoding="utf-8")
    monkeypatch.setenv("FORGE_DATA_DIR", str(tmp_path / "other"))
    again = invoke(runner, "remember", "--batch", str(path))
    assert again.exit_code == 0, again.stderr
    assert [(e["kind"], e["project"], e["content"]) for e in listed(runner)] == ENTRIES
    only = invoke(runner, "memory", "export", "--kind", "todo", "-p", "homelab").stdout
    assert [json.loads(line)["content"] for line in only.splitlines()] == [ENTRIES[3][2]]


def test_edit_changes_text_in_place_and_recall_finds_the_new_text(store, settings):
    done = invoke(store, "memory", "edit", "2", "Buy an APC UPS for the router and the switch")
    assert done.exit_code == 0 and done.stdout.strip() == "edited #2 [todo]: content changed"
    rows = json.loads(invoke(store, "recall", "APC router switch", "--json").stdout)["rows"]
    assert rows[0]["id"] == 2 and rows[0]["channel"] == "both"
    assert "UPS for the NAS" not in invoke(store, "recall", "NAS", "--nl").stdout
    kind = invoke(store, "memory", "edit", "2", "--kind", "decision", "--json")
    assert json.loads(kind.stdout)["kind"] == "decision" and json.loads(kind.stdout)["id"] == 2
    shown = invoke(store, "memory", "show", "2").stdout
    assert shown.count(" edit #2") == 2
    same = invoke(store, "memory", "edit", "2", "--kind", "decision")
    assert "nothing changed" in same.stdout
    with rag.open_store(settings) as s:
        assert s.conn.execute("select count(*) from memory_vectors").fetchone()[0] == 5


def test_edit_refuses_a_duplicate_and_folded_entries(store, settings):
    with rag.open_store(settings) as s:
        rag.remember(s, "todo", "Replace the NAS fan", project="homelab")    # 6
        rag.remember(s, "fact", "Buy a UPS for the NAS")                     # 7
    clash = invoke(store, "memory", "edit", "4", "Replace the  NAS fan")
    assert clash.exit_code == 1 and "duplicate of #6" in clash.stderr
    by_kind = invoke(store, "memory", "edit", "2", "--kind", "fact")
    assert by_kind.exit_code == 1 and "duplicate of #7" in by_kind.stderr
    assert listed(store, "todo")[0]["content"] == ENTRIES[1][2]  # nothing changed
    with rag.open_store(settings) as s:
        rag.supersede(s, [1], 3)
    folded = invoke(store, "memory", "edit", "1", "new text")
    assert folded.exit_code == 1 and "folded into #3" in folded.stderr and "undo the fold" in folded.stderr
    aggregate = invoke(store, "memory", "edit", "3", "new text")
    assert aggregate.exit_code == 1 and "aggregate of #1" in aggregate.stderr
    assert invoke(store, "memory", "edit", "3").exit_code == 2
    assert invoke(store, "memory", "edit", "99", "x").exit_code == 1


def test_recall_kind_and_limit(store):
    rows = [json.loads(line) for line in
            invoke(store, "recall", "NAS", "--kind", "todo", "--nl").stdout.splitlines()]
    assert {r["kind"] for r in rows} == {"todo"} and {r["id"] for r in rows} == {2, 4}
    assert len(invoke(store, "recall", "NAS", "--limit", "1", "--nl").stdout.splitlines()) == 1
    scoped = invoke(store, "recall", "NAS", "-k", "todo", "-p", "homelab", "--nl").stdout.splitlines()
    assert [json.loads(line)["id"] for line in scoped] == [4]


def test_history_grep(settings, runner):
    add_history(settings, ("user", "Quel NAS ?"), ("assistant", "Un Synology"),
                ("user", "Et le nas du bureau ?"), ("assistant", "Un QNAP"))
    found = [json.loads(line)["id"] for line in
             invoke(runner, "history", "--grep", "nas", "--nl").stdout.splitlines()]
    assert found == [1, 3]
    assert [json.loads(line)["id"] for line in
            invoke(runner, "history", "-g", "nas", "-n", "1", "--nl").stdout.splitlines()] == [3]
    none = invoke(runner, "history", "--grep", "zfs")
    assert none.exit_code == 0 and none.stdout == "" and "no message holds 'zfs'" in none.stderr


# ----------------------------------------------------------------------------- 20: usage

@pytest.mark.parametrize("args", [
    ["remember", "idea", "x"], ["memory", "ls", "idea"], ["recall", "x", "--kind", "idea"],
    ["memory", "forget", "--kind", "idea"], ["memory", "edit", "1", "--kind", "idea"],
    ["memory", "export", "--kind", "idea"],
])
def test_an_unknown_kind_typed_as_an_argument_exits_2(runner, args):
    result = invoke(runner, *args)
    assert result.exit_code == 2 and "unknown kind 'idea'" in result.stderr, result.stderr


def test_compact_dry_run_says_would_archive(settings, runner, monkeypatch):
    add_history(settings, ("user", "Quel NAS ?"), ("assistant", "Un Synology"),
                ("user", "Et le CPU ?"), ("assistant", "Un Ryzen"))
    monkeypatch.setenv("COMPACTION_KEEP_RECENT", "2")
    out = invoke(runner, "compact", "--dry-run").stdout
    assert "would archive 1 exchange(s)" in out and "exchange(s) archived" not in out


def test_help_text_fits_80_columns():
    from click.testing import CliRunner

    runner = CliRunner()
    wide = []
    for path in [[], *command_paths()]:
        result = runner.invoke(cli, [*path, "--help"], terminal_width=80)
        assert result.exit_code == 0, path
        wide += [f"forge {' '.join(path)}: {line}" for line in result.output.splitlines()
                 if len(line) > 80]
    assert not wide, "\n".join(wide)


def test_shell_completion_completes_commands_and_kinds():
    forge = shutil.which("forge")

    def complete(words: str) -> list[str]:
        env = {**os.environ, "_FORGE_COMPLETE": "bash_complete", "COMP_WORDS": words,
               "COMP_CWORD": str(len(words.split()) - (0 if words.endswith(" ") else 1))}
        done = subprocess.run([forge], env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return [line.split(",", 1)[1] for line in done.stdout.splitlines()]

    assert "memory" in complete("forge mem")
    assert complete("forge memory l") == ["ls"]
    assert complete("forge memory ls t") == ["todo"]
    source = subprocess.run([forge], env={**os.environ, "_FORGE_COMPLETE": "bash_source"},
                            capture_output=True, text=True, timeout=60)
    assert "_forge_completion" in source.stdout
