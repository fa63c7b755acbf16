"""sysadmin: inventory commands only, on named targets; real commands on real files for the local
target, a real OpenSSH server on loopback for the ssh target. Failures are the fixed non-answers
`[cible introuvable]` and `[collecte impossible]`; traces hold names, never the block."""
from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest
import yaml

from chat_helpers import envelope, history_messages, last_trace, load
from forge.memory import non_answer
from forge.chat.tools import ToolContext, dispatch, inventory, sysadmin

LOG_LINES = [f"2026-11-30T10:{i:02d}:00 nas nginx[812]: worker {i} ok" for i in range(50)]
LOG_LINES[47] = "2026-11-30T10:47:00 nas kernel: Out of memory: Killed process 812 (nginx)"


@pytest.fixture
def logs(tmp_path: Path) -> Path:
    path = tmp_path / "var" / "nginx.log"
    path.parent.mkdir()
    path.write_text("\n".join(LOG_LINES) + "\n", encoding="utf-8")
    (tmp_path / "var" / "big.log").write_text("x" * 99 + "\n" * 1 + ("y" * 99 + "\n") * 100)
    return path


def write_inventory(tmp_path: Path, targets: dict) -> Path:
    path = tmp_path / "targets.yaml"
    path.write_text(yaml.safe_dump({"targets": targets}, sort_keys=False), encoding="utf-8")
    return path


def local_commands(logs: Path) -> dict:
    return {
        "tail": {"argv": ["tail", "-n", "{lines}", str(logs)], "args": {"lines": "[0-9]{1,4}"},
                 "defaults": {"lines": "5"}},
        "grep": {"argv": ["grep", "-i", "--", "{word}", str(logs)], "args": {"word": "[a-z0-9 ]{1,30}"}},
        "big": ["cat", str(logs.parent / "big.log")],
        "slow": ["sleep", "5"],
        "missing": ["tail", "-n", "1", str(logs.parent / "nope.log")],
    }


@pytest.fixture
def local_inventory(tmp_path: Path, logs: Path) -> Path:
    return write_inventory(tmp_path, {"box": {"local": True, "commands": local_commands(logs)}})


def collect(inv: Path, target: str, command: str | None, args: dict | None = None, **env: str):
    settings = load(SYSADMIN_INVENTORY=str(inv), **env)
    return sysadmin.collect(settings, inventory.load(inv), target, command, args)


def test_the_local_target_runs_inventory_commands_on_real_files(local_inventory):
    got = collect(local_inventory, "box", "tail", {"lines": "3"})
    assert got.block.splitlines() == LOG_LINES[-3:] and not got.cut
    assert collect(local_inventory, "box", "tail").block.splitlines() == LOG_LINES[-5:]   # default
    assert collect(local_inventory, "box", "grep", {"word": "out of memory"}).block == LOG_LINES[47] + "\n"


@pytest.mark.parametrize("args, words", [
    ({"lines": "3; rm -rf /"}, "does not match tail's pattern"),
    ({"lines": "$(id)"}, "does not match"),
    ({"lines": "3", "path": "/etc/shadow"}, "takes no argument 'path'"),
    ({"lines": "3\n4"}, "does not match"),
])
def test_model_arguments_must_match_their_pattern(local_inventory, args, words):
    with pytest.raises(sysadmin.CollectFailed, match=words.replace("(", r"\(")):
        collect(local_inventory, "box", "tail", args)


def test_an_argument_is_one_word_never_shell(local_inventory, tmp_path):
    # The grep pattern allows spaces: "a b" reaches grep as ONE argument, no shell splits it.
    assert collect(local_inventory, "box", "grep", {"word": "worker 4 ok"}).block.count("\n") == 1


def test_output_is_capped_keeping_the_newest_lines(local_inventory):
    got = collect(local_inventory, "box", "big", SYSADMIN_MAX_BYTES="1024")
    assert got.cut and len(got.block.encode()) <= 1024
    assert got.block.endswith("y" * 99 + "\n") and "x" not in got.block
    assert got.block.startswith("y")     # no half line at the top


def test_a_slow_command_is_stopped_at_the_timeout(local_inventory):
    started = time.monotonic()
    with pytest.raises(sysadmin.CollectFailed, match="within 0.5s"):
        collect(local_inventory, "box", "slow", SYSADMIN_TIMEOUT="0.5")
    assert time.monotonic() - started < 3


def tool(inv: Path, payload: dict, turn: str = "why did nginx stop on box?", client=None, **env):
    ctx = ToolContext(settings=load(ENABLED_TOOLS="sysadmin", SYSADMIN_INVENTORY=str(inv), **env),
                      turn_text=turn, client=client)
    return dispatch("sysadmin", payload, ctx)


def test_unknown_target_and_failed_collection_are_fixed_non_answers(local_inventory):
    result = tool(local_inventory, {"target": "nas", "command": "tail"})
    assert result.text.startswith(non_answer.TARGET_NOT_FOUND) and "'nas'" in result.text
    assert "known: box" in result.text and result.not_answered == "target_not_found"
    assert result.trace == {"target": "nas", "commands": ["tail"]}

    french = tool(local_inventory, {"target": "box", "command": "rm"},
                  turn="pourquoi nginx est tombé sur box ?")
    assert french.text.startswith(non_answer.COLLECT_FAILED)
    assert "Collecte impossible sur box" in french.text and "'rm' is not an allowed command" in french.text
    assert french.not_answered == "collect_failed"

    missing = tool(local_inventory, {"target": "box", "command": "missing"})
    assert missing.text.startswith(non_answer.COLLECT_FAILED) and "tail exited with status 1" in missing.text
    assert all(non_answer.is_non_answer(r.text) for r in (result, french, missing))


def test_no_inventory_is_a_tool_error(tmp_path):
    ctx = ToolContext(settings=load(ENABLED_TOOLS="sysadmin"), turn_text="logs of box?")
    result = dispatch("sysadmin", {"target": "box"}, ctx)
    assert result.text.startswith(non_answer.TOOL_ERROR) and "SYSADMIN_INVENTORY" in result.text
    bad = write_inventory(tmp_path, {"box": {"local": True, "commands": {"x": ["tail", "{p}"]}}})
    with pytest.raises(inventory.InventoryError, match="no pattern under `args` for 'p'"):
        inventory.load(bad)


def test_sysadmin_is_off_unless_named(local_inventory):
    ctx = ToolContext(settings=load(SYSADMIN_INVENTORY=str(local_inventory)), turn_text="box logs?")
    assert "no tool named 'sysadmin' is enabled" in dispatch("sysadmin", {"target": "box"}, ctx).text


def test_a_chat_turn_traces_names_never_the_block(local_inventory, chat_fake):
    """The router picks sysadmin, the block is collected for real, the model answers from it;
    the trace holds the target and command names, and none of the log's text."""
    from forge.store import traces
    from forge.chat.run import run_turn

    chat_fake.chat_reply(envelope("sysadmin", payload={"target": "box", "command": "grep",
                                                       "args": {"word": "out of memory"}}))
    chat_fake.chat_reply("nginx was killed by the kernel: out of memory.")
    settings = load(ENABLED_TOOLS="sysadmin", SYSADMIN_INVENTORY=str(local_inventory))
    result = run_turn(settings, "why did nginx stop on box?")
    assert result.answered and "out of memory" in result.reply
    chats = [r for r in chat_fake.requests if r.path == "/v1/chat/completions"]
    answer_prompt = chats[-1].json["messages"]
    assert LOG_LINES[47] in answer_prompt[1]["content"]
    record = last_trace(settings)
    assert record["steps"][1]["detail"] == {"target": "box", "commands": ["grep"]}
    raw = settings.trace_file.read_text()
    assert "Killed process" not in raw and "worker" not in raw
    assert traces.state(record) == "✓"


def test_a_failed_collection_in_a_chat_turn_shows_as_nothing_answered(local_inventory, chat_fake):
    from forge.store import traces
    from forge.chat.run import run_turn

    chat_fake.chat_reply(envelope("sysadmin", payload={"target": "router", "command": "dmesg"}))
    settings = load(ENABLED_TOOLS="sysadmin", SYSADMIN_INVENTORY=str(local_inventory))
    result = run_turn(settings, "anything odd on the router?")
    assert result.ok and result.not_answered == "target_not_found"
    assert traces.state(last_trace(settings)) == "∅"
    assert [m.answered for m in history_messages(settings)] == [False, False]


# -- ssh: a real OpenSSH server on loopback ------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ssh_unavailable(reason: str) -> None:
    """Skip, or fail where FORGE_REQUIRE_SSH=1 (.ci/run): a CI that installs sshd must run the
    ssh tests, not skip them unnoticed."""
    if os.environ.get("FORGE_REQUIRE_SSH", "").strip() in ("1", "true", "yes"):
        pytest.fail(f"FORGE_REQUIRE_SSH=1 but {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def sshd(tmp_path_factory) -> Iterator[dict]:
    """A real sshd on 127.0.0.1 (its own host key and config, key login for the current user)."""
    binary = shutil.which("sshd") or ("/usr/sbin/sshd" if os.path.exists("/usr/sbin/sshd") else None)
    if binary is None or shutil.which("ssh") is None or shutil.which("ssh-keygen") is None:
        ssh_unavailable("no OpenSSH server here (Debian: apt-get install openssh-server; .ci/run "
                        "installs it when it runs as root)")
    home = tmp_path_factory.mktemp("sshd")
    for name in ("host_key", "client_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(home / name)],
                       check=True)
    (home / "authorized_keys").write_bytes((home / "client_key.pub").read_bytes())
    os.chmod(home / "authorized_keys", 0o600)
    port = _free_port()
    config = home / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {home / 'host_key'}\n"
        f"AuthorizedKeysFile {home / 'authorized_keys'}\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\nPermitRootLogin prohibit-password\n"
        f"PidFile {home / 'sshd.pid'}\nLogLevel ERROR\n")
    os.makedirs("/run/sshd", exist_ok=True) if os.geteuid() == 0 else None
    log = open(home / "sshd.log", "wb")
    proc = subprocess.Popen([binary, "-D", "-e", "-f", str(config)], stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            ssh_unavailable(f"sshd would not start here: {(home / 'sshd.log').read_text()[-300:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.1)
    try:
        yield {"port": port, "key": str(home / "client_key"), "home": home}
    finally:
        proc.terminate()
        proc.wait(timeout=5)
        log.close()


def ssh_target(sshd: dict, logs: Path, **over) -> dict:
    ssh = {"user": getpass.getuser(), "host": "127.0.0.1", "port": sshd["port"],
           "connect_timeout": 3, "identity_file": sshd["key"],
           "options": ["StrictHostKeyChecking=accept-new",
                       f"UserKnownHostsFile={sshd['home'] / 'known_hosts'}"], **over}
    return {"ssh": ssh, "commands": local_commands(logs)}


def test_an_ssh_target_collects_through_a_real_sshd(sshd, tmp_path, logs):
    inv = write_inventory(tmp_path, {"nas": ssh_target(sshd, logs)})
    assert collect(inv, "nas", "tail", {"lines": "2"}).block.splitlines() == LOG_LINES[-2:]
    # Each argument is quoted for the remote shell: a space stays inside one argument.
    assert collect(inv, "nas", "grep", {"word": "out of memory"}).block == LOG_LINES[47] + "\n"


def test_an_ssh_target_that_refuses_the_key_is_a_failed_collection(sshd, tmp_path, logs):
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    inv = write_inventory(tmp_path, {"nas": ssh_target(sshd, logs, identity_file=str(other))})
    started = time.monotonic()
    with pytest.raises(sysadmin.CollectFailed, match="ssh could not connect or log in"):
        collect(inv, "nas", "tail")
    assert time.monotonic() - started < 10   # BatchMode: no password prompt waits for anyone
    closed = write_inventory(tmp_path, {"nas": ssh_target(sshd, logs, port=_free_port())})
    with pytest.raises(sysadmin.CollectFailed, match="ssh could not connect"):
        collect(closed, "nas", "tail")


def test_without_a_command_every_command_that_needs_no_argument_runs(tmp_path, logs):
    """The router asks for a target and a question; the inventory says what to read there."""
    commands = local_commands(logs)
    del commands["slow"], commands["missing"]
    inv = write_inventory(tmp_path, {"box": {"local": True, "commands": commands}})
    got = collect(inv, "box", None)
    assert got.commands == ["tail", "big"]       # grep needs a word nobody gave
    assert got.block.startswith("### tail\n" + "\n".join(LOG_LINES[-5:]))
    assert "### big\nx" in got.block
    with_word = collect(inv, "box", None, {"word": "killed"})
    assert with_word.commands == ["tail", "grep", "big"]
    assert collect(inv, "box", ["grep", "tail"], {"word": "killed", "lines": "1"}).commands == ["grep", "tail"]


def test_one_failing_command_among_several_is_reported_in_the_block(local_inventory):
    got = collect(local_inventory, "box", ["tail", "missing"])
    assert got.commands == ["tail", "missing"]
    assert "### missing\n(this command failed: tail exited with status 1" in got.block


@pytest.mark.parametrize("turn", ["why did nginx stop on nas?", "pourquoi nginx est tombé sur nas ?"])
def test_every_refusal_string_is_one_compaction_recognises(turn):
    """The text says it is no answer, even in a block older than the `answered` flag (resplit)."""
    texts = [non_answer.target_not_found(turn, "nas", ["box"]),
             non_answer.target_not_found(turn, None, ["box"]),
             non_answer.collect_failed(turn, "nas", "ssh exit 255"),
             non_answer.delegation_reask(turn)]
    assert all(non_answer.is_non_answer(t) for t in texts)
    assert ("Collecte impossible" in texts[2]) == turn.startswith("pourquoi")


def test_an_answer_that_echoes_the_answer_prompt_is_a_placeholder(local_inventory, chat_fake):
    """The answering model parroting its own instructions is never kept as an answer."""
    from forge.chat.run import run_turn

    chat_fake.chat_reply(envelope("sysadmin", payload={"target": "box", "command": "tail"}))
    # Its own sentences, not the ones it shares with the recall graph's preamble.
    chat_fake.chat_reply("When the block does not answer the question, say so plainly instead "
                         "of guessing.")
    settings = load(ENABLED_TOOLS="sysadmin", SYSADMIN_INVENTORY=str(local_inventory))
    result = run_turn(settings, "why did nginx stop on box?")
    assert result.not_answered == "placeholder_leak" and result.persisted == []


def test_bad_settings_of_the_new_tools_name_the_variable():
    from forge.core.errors import SettingsError

    for name, value in (("WEB_FETCH_ALLOW_HOSTS", "https://example.org/"), ("DELEGATE_URL", "gpu-box"),
                        ("SYSADMIN_TIMEOUT", "-1"), ("WEB_FETCH_MAX_TOKENS", "ten"),
                        ("ENABLED_TOOLS", "memory,webfetch")):
        with pytest.raises(SettingsError, match=name):
            load(**{name: value})


def test_the_example_inventory_loads():
    example = Path(__file__).resolve().parent.parent / "deploy" / "targets.yaml"
    targets = inventory.load(example)
    assert set(targets) == {"local", "nas"} and targets["local"].local
    argv = targets["nas"].argv(targets["nas"].commands["journal"].build({"unit": "nginx"}))
    assert argv[:6] == ["ssh", "-T", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5"]
    assert argv[-2:] == ["admin@nas.lan", "journalctl --no-pager -u nginx --since -1h"]


def test_forge_require_ssh_turns_the_ssh_skip_into_a_failure(monkeypatch):
    monkeypatch.setenv("FORGE_REQUIRE_SSH", "1")
    with pytest.raises(pytest.fail.Exception, match="FORGE_REQUIRE_SSH=1 but no sshd"):
        ssh_unavailable("no sshd")
    monkeypatch.delenv("FORGE_REQUIRE_SSH")
    with pytest.raises(pytest.skip.Exception, match="no sshd"):
        ssh_unavailable("no sshd")
    ci = (Path(__file__).resolve().parent.parent / ".ci" / "run").read_text()
    assert "export FORGE_REQUIRE_SSH=1" in ci and "openssh-server" in ci
