"""The router's tools: files (no escape), git (read-only), shell (asks, refuses in pipelines),
memory (kind default, the question rule). A failure is a result string, never a crash."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from chat_helpers import load
from forge.memory import non_answer
from forge.chat.tools import ToolContext, dispatch


def ctx(turn: str = "do it", *, interactive: bool = False, confirm=None, client=None, **env: str):
    return ToolContext(settings=load(**env), turn_text=turn, interactive=interactive,
                       confirm=confirm, client=client)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "sub").mkdir(parents=True)
    (root / "notes.txt").write_text("the NAS runs Debian\n", encoding="utf-8")
    (root / "sub" / "a.md").write_text("# A\n", encoding="utf-8")
    (tmp_path / "secret.txt").write_text("outside", encoding="utf-8")
    return root


def files(workspace: Path, payload: dict):
    return dispatch("files", payload, ctx(FORGE_WORKSPACE=str(workspace)))


def test_files_reads_and_lists_under_the_workspace(workspace):
    assert files(workspace, {"op": "read", "path": "notes.txt"}).text == "the NAS runs Debian\n"
    listing = files(workspace, {"op": "list", "path": "."}).text
    assert listing.splitlines() == ["notes.txt", "sub/"]
    assert files(workspace, {"op": "read", "path": "sub/../notes.txt"}).not_answered is None


@pytest.mark.parametrize("path", ["../secret.txt", "sub/../../secret.txt", "/etc/passwd"])
def test_files_refuses_paths_that_escape_the_workspace(workspace, path):
    result = files(workspace, {"op": "read", "path": path})
    assert result.text.startswith(non_answer.TOOL_ERROR) and "outside the workspace" in result.text
    assert "outside" not in result.text.split("outside the workspace")[0].replace(path, "")
    assert result.not_answered == "tool_error"


def test_files_refuses_a_symlink_that_points_outside(workspace):
    os.symlink(workspace.parent / "secret.txt", workspace / "link.txt")
    os.symlink(workspace.parent, workspace / "up")
    for path in ("link.txt", "up/secret.txt"):
        result = files(workspace, {"op": "read", "path": path})
        assert "outside the workspace" in result.text and "outside\n" not in result.text
    assert files(workspace, {"op": "list", "path": "up"}).not_answered == "tool_error"


def test_files_failures_are_result_strings(workspace):
    (workspace / "bin.dat").write_bytes(b"\x00\x01\x02")
    for payload in ({"op": "read", "path": "missing.txt"}, {"op": "read", "path": "bin.dat"},
                    {"op": "delete", "path": "notes.txt"}, {"op": "list", "path": "notes.txt"}):
        result = files(workspace, payload)
        assert result.text.startswith(non_answer.TOOL_ERROR), payload
    assert (workspace / "notes.txt").exists()


def test_an_empty_file_says_so(workspace):
    (workspace / "empty.txt").write_text("")
    assert files(workspace, {"op": "read", "path": "empty.txt"}).text == "empty.txt: empty file"


def test_files_defaults_to_the_working_directory():
    Path("here.txt").write_text("hi", encoding="utf-8")
    assert dispatch("files", {"op": "read", "path": "here.txt"}, ctx()).text == "hi"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@x"}
    run = lambda *a: subprocess.run(["git", *a], cwd=root, env=env, check=True, capture_output=True)
    run("init", "-q")
    (root / "a.txt").write_text("one\n")
    run("add", "a.txt")
    run("commit", "-q", "-m", "first commit")
    (root / "a.txt").write_text("two\n")
    return root


def git(repo: Path, payload: dict):
    return dispatch("git", payload, ctx(FORGE_WORKSPACE=str(repo)))


def test_git_reads_status_log_diff_and_show(repo):
    assert "a.txt" in git(repo, {"op": "status", "args": "--short"}).text
    assert "first commit" in git(repo, {"op": "log", "args": "--oneline -n 1"}).text
    assert "+two" in git(repo, {"op": "diff"}).text
    assert "first commit" in git(repo, {"op": "show", "args": ["--stat", "HEAD"]}).text


@pytest.mark.parametrize("payload", [
    {"op": "commit", "args": "-m x"},
    {"op": "diff", "args": "--output=/tmp/forge-pwned"},
    {"op": "log", "args": "--ext-diff -p"},
    {"op": "status", "args": "-c core.fsmonitor=touch"},
])
def test_git_is_read_only(repo, payload):
    result = git(repo, payload)
    assert result.text.startswith(non_answer.TOOL_ERROR) and result.not_answered == "tool_error"
    assert not Path("/tmp/forge-pwned").exists()


def test_git_outside_a_repository_is_a_tool_error(tmp_path):
    result = git(tmp_path, {"op": "status"})
    assert result.text.startswith(non_answer.TOOL_ERROR) and "not a git repository" in result.text


def test_shell_is_off_unless_named():
    result = dispatch("shell", {"command": "echo hi"}, ctx())
    assert "no tool named 'shell' is enabled" in result.text


def test_shell_refuses_in_a_pipeline_without_shell_auto(tmp_path):
    result = dispatch("shell", {"command": f"touch {tmp_path}/made"}, ctx(ENABLED_TOOLS="shell"))
    assert result.not_answered == "tool_refused" and "FORGE_SHELL_AUTO=1" in result.text
    assert not (tmp_path / "made").exists()


def test_shell_runs_with_shell_auto():
    result = dispatch("shell", {"command": "echo hi; exit 3"},
                      ctx(ENABLED_TOOLS="shell", FORGE_SHELL_AUTO="1"))
    assert result.text == "$ echo hi; exit 3\nhi\n(exit 3)"


def test_shell_asks_in_the_repl_and_honours_no(tmp_path):
    asked: list[str] = []
    no = dispatch("shell", {"command": f"touch {tmp_path}/made"},
                  ctx(ENABLED_TOOLS="shell", interactive=True,
                      confirm=lambda q: asked.append(q) or False))
    assert asked and "touch" in asked[0] and no.not_answered == "tool_refused"
    assert not (tmp_path / "made").exists()
    yes = dispatch("shell", {"command": f"touch {tmp_path}/made"},
                   ctx(ENABLED_TOOLS="shell", interactive=True, confirm=lambda q: True))
    assert yes.not_answered is None and (tmp_path / "made").exists()


@pytest.mark.parametrize("command", [
    "sleep 5",
    "(sleep 0.6; touch {marker}) | cat",   # the shell's children outlive a kill of the shell alone
])
def test_shell_is_time_limited_and_stops_everything_it_started(monkeypatch, tmp_path, command):
    import time

    from forge.chat.tools import shell

    monkeypatch.setattr(shell, "TIMEOUT_S", 0.3)
    marker = tmp_path / "still-running"
    started = time.monotonic()
    result = dispatch("shell", {"command": command.format(marker=marker)},
                      ctx(ENABLED_TOOLS="shell", FORGE_SHELL_AUTO="1"))
    assert "did not finish within" in result.text and result.not_answered == "tool_error"
    assert time.monotonic() - started < 3
    if "{marker}" in command:  # a surviving child would touch it 0.6 s after the start
        time.sleep(max(0.0, started + 1.2 - time.monotonic()))
        assert not marker.exists()


def test_unknown_tool_is_a_result_string():
    assert dispatch("web_fetch", {}, ctx()).text.startswith(non_answer.TOOL_ERROR)


# -- memory (real store, real embedder)

def entries():
    from forge.store import rag

    with rag.open_store(load(), check_identity=False) as store:
        return rag.list_entries(store)


def test_memory_remember_defaults_a_missing_kind_to_fact():
    result = dispatch("memory", {"op": "remember", "content": "I own a Steam Deck"},
                      ctx("Remember that I own a Steam Deck"))
    assert result.text.startswith("Remembered #") and result.not_answered is None
    [entry] = entries()
    assert (entry.kind, entry.content) == ("fact", "I own a Steam Deck")


def test_memory_remember_keeps_a_valid_kind_and_project():
    dispatch("memory", {"op": "remember", "kind": "decision", "project": "forge",
                        "content": "Use SQLite-vec"}, ctx("We decided: use SQLite-vec"))
    [entry] = entries()
    assert (entry.kind, entry.project) == ("decision", "forge")


def test_question_turn_never_writes_and_is_answered_with_a_recall():
    """The question rule: the payload lost the question mark; the turn did not."""
    result = dispatch("memory", {"op": "remember", "kind": "fact", "content": "Possède un serveur"},
                      ctx("Je possède un serveur ?"))
    assert entries() == []
    assert result.text == non_answer.NOTHING_FOUND and result.not_answered == "recall_nothing_found"


def test_a_long_message_merely_ending_in_a_question_mark_still_writes():
    turn = ("Note this down for later: the backup NAS in the office runs Debian 12 with a "
            "ZFS mirror of two 4 TB disks, snapshots every hour, replication to the cloud "
            "each night, and the admin password lives in the vault, ok?")
    assert len(turn) > 200
    dispatch("memory", {"op": "remember", "content": "Backup NAS: Debian 12, ZFS mirror"}, ctx(turn))
    assert [e.content for e in entries()] == ["Backup NAS: Debian 12, ZFS mirror"]


def test_memory_outage_is_an_error_string(monkeypatch):
    from fakeserver import closed_url

    result = dispatch("memory", {"op": "remember", "content": "x"},
                      ctx("remember x", EMBEDDING_URL=closed_url() + "/embedding"))
    assert result.text.startswith(non_answer.ERROR) and result.not_answered == "tool_error"


def test_memory_without_an_op_or_content_is_a_tool_error():
    assert dispatch("memory", {"kind": "fact"}, ctx()).text.startswith(non_answer.TOOL_ERROR)


# -- no link followed at open time, git confined to the workspace, secrets


def test_a_symlink_swapped_in_after_the_check_is_not_followed(workspace, monkeypatch):
    from forge.chat.tools import files as files_tool

    (workspace / "flip.txt").write_text("inside", encoding="utf-8")
    checked = files_tool.resolve

    def resolve_then_swap(root, relative):  # the attacker wins the race, every time
        target = checked(root, relative)
        (workspace / "flip.txt").unlink()
        os.symlink(workspace.parent / "secret.txt", workspace / "flip.txt")
        return target

    monkeypatch.setattr(files_tool, "resolve", resolve_then_swap)
    result = files(workspace, {"op": "read", "path": "flip.txt"})
    assert result.text.startswith(non_answer.TOOL_ERROR) and "outside" not in result.text.replace(
        "outside the workspace", "")


def test_a_symlink_inside_the_workspace_still_reads(workspace):
    os.symlink("notes.txt", workspace / "alias.txt")
    assert files(workspace, {"op": "read", "path": "alias.txt"}).text == "the NAS runs Debian\n"


@pytest.mark.parametrize("path", [".env", ".env.local", "sub/.env", ".ssh/id_ed25519", ".netrc",
                                  "deploy.pem", "server.key", "id_rsa"])
def test_files_refuses_secret_files_unless_a_setting_allows_them(workspace, path):
    target = workspace / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("API_TOKEN=hunter2\n", encoding="utf-8")
    result = files(workspace, {"op": "read", "path": path})
    assert result.text.startswith(non_answer.TOOL_ERROR) and "hunter2" not in result.text
    assert "FORGE_READ_SECRETS" in result.text
    allowed = dispatch("files", {"op": "read", "path": path},
                       ctx(FORGE_WORKSPACE=str(workspace), FORGE_READ_SECRETS="true"))
    assert "hunter2" in allowed.text


def test_files_named_in_a_setting_are_secret_too(workspace):
    result = dispatch("files", {"op": "read", "path": "sub/a.md"},
                      ctx(FORGE_WORKSPACE=str(workspace), FORGE_SECRET_FILES="*.md, vault/*"))
    assert result.text.startswith(non_answer.TOOL_ERROR) and "# A" not in result.text


@pytest.fixture
def nested(tmp_path: Path) -> Path:
    """A workspace that is a folder of a larger repository (the default workspace, the working
    directory, usually is)."""
    outer = tmp_path / "outer"
    (outer / "ws").mkdir(parents=True)
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@x"}
    run = lambda *a: subprocess.run(["git", *a], cwd=outer, env=env, check=True, capture_output=True)
    run("init", "-q")
    (outer / "README.md").write_text("parent secret plans\n")
    (outer / "ws" / "a.txt").write_text("one\n")
    (outer / "ws" / ".env").write_text("API_TOKEN=hunter2\n")
    run("add", "-A")
    run("commit", "-q", "-m", "first commit")
    (outer / "README.md").write_text("parent secret plans, changed\n")
    (outer / "ws" / "a.txt").write_text("two\n")
    (outer / "ws" / ".env").write_text("API_TOKEN=hunter3\n")
    return outer / "ws"


@pytest.mark.parametrize("payload", [
    {"op": "show", "args": "HEAD:../README.md"},
    {"op": "show", "args": "HEAD~0:./../README.md"},
    {"op": "log", "args": ["-p", "--", "../README.md"]},
    {"op": "diff", "args": "../README.md"},
    {"op": "diff", "args": "/etc/passwd"},
    {"op": "show", "args": ":/README.md"},
])
def test_git_refuses_revisions_and_paths_that_leave_the_workspace(nested, payload):
    result = git(nested, payload)
    assert result.text.startswith(non_answer.TOOL_ERROR), result.text
    assert "leaves the workspace" in result.text and "parent secret" not in result.text


def test_git_in_a_workspace_inside_a_larger_repository_sees_only_the_workspace(nested):
    for payload in ({"op": "status", "args": "--short"}, {"op": "diff"}, {"op": "log", "args": "-p"},
                    {"op": "show", "args": "HEAD"}, {"op": "show", "args": "HEAD:"}):
        text = git(nested, payload).text
        assert "README" not in text and "parent secret" not in text, payload
        assert "hunter" not in text, payload
    assert git(nested, {"op": "show", "args": "HEAD:a.txt"}).text == "one\n"
    # a tree path is read from the workspace, not from the top of the larger repository
    assert "parent secret" not in git(nested, {"op": "show", "args": "HEAD:README.md"}).text
    assert "+two" in git(nested, {"op": "diff"}).text
    refused = git(nested, {"op": "show", "args": "HEAD:.env"})
    assert refused.text.startswith(non_answer.TOOL_ERROR) and "hunter" not in refused.text


@pytest.mark.parametrize("error", [KeyError("op"), RuntimeError("lost"), RecursionError("deep"),
                                   UnicodeEncodeError("utf-8", "\udce9", 0, 1, "surrogates")])
def test_any_exception_from_a_tool_is_a_tool_error_naming_its_type(workspace, monkeypatch, error):
    from forge.chat.tools import files as files_tool

    def broken(ctx, payload):
        raise error

    monkeypatch.setattr(files_tool, "run", broken)
    result = files(workspace, {"op": "read", "path": "notes.txt"})
    assert result.text.startswith(f"{non_answer.TOOL_ERROR} files: {type(error).__name__}")
    assert result.not_answered == "tool_error"
