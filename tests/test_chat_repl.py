"""The REPL: chat turns and `!` commands that run their CLI twins (same code, same rendering)."""
from __future__ import annotations

import pytest

from chat_helpers import envelope, history_messages, last_trace, load
from forge.store import rag
from forge.cli.chat_cmds import _run_cli_command
from forge.chat.repl import Io, ReplUsage, repl, translate


class Script:
    """Feeds lines to the REPL and collects what it writes."""

    def __init__(self, lines, answers=()):
        self.lines = list(lines)
        self.answers = list(answers)
        self.out: list[str] = []
        self.err: list[str] = []
        self.asked: list[str] = []

    def read_line(self, prompt: str) -> str:
        if not self.lines:
            raise EOFError
        line = self.lines.pop(0)
        if isinstance(line, BaseException):
            raise line
        return line

    def confirm(self, question: str) -> bool:
        self.asked.append(question)
        return self.answers.pop(0) if self.answers else False

    def io(self) -> Io:
        return Io(read_line=self.read_line, write=self.out.append, note=self.err.append,
                  confirm=self.confirm)


def run(lines, answers=(), **env):
    script = Script(lines, answers)
    turns = repl(load(**env), io=script.io(), run_command=_run_cli_command)
    return script, turns


@pytest.mark.parametrize("line, args", [
    ("!remember decision Use SQLite-vec --project forge",
     ["remember", "--project", "forge", "decision", "Use SQLite-vec"]),
    ("!recall how should I index embeddings", ["recall", "how should I index embeddings"]),
    ("!memory fact", ["memory", "ls", "fact"]),
    ("!forget 3", ["memory", "forget", "3"]),
    ("!compact", ["compact"]),
    ("!trace 5", ["trace", "tail", "-n", "5"]),
    ("!clear --all", ["history", "clear", "--all"]),
    ("!pin 4", ["pin", "4"]),
    ("!help", None),
])
def test_commands_translate_to_their_cli_twins(line, args):
    assert translate(line) == args


def test_unknown_command_is_a_usage_note():
    with pytest.raises(ReplUsage):
        translate("!frobnicate")
    script, _ = run(["!frobnicate", "!remember onlykind"])
    assert any("unknown command !frobnicate" in e for e in script.err)
    assert any("usage: !remember" in e for e in script.err)


def test_a_failing_command_is_one_error_line_and_the_repl_goes_on(capsys):
    script, _ = run(["!forget 999", "!pin abc", "!help"])
    err = capsys.readouterr().err
    assert "error:" in err and "999" in err          # the CLI's own one-line error
    assert "!remember KIND CONTENT" in "".join(script.out)  # and the loop went on


def test_remember_recall_memory_forget_through_the_cli_code(capsys):
    # !remember is never subject to the question rule: a note ending in `?` is stored.
    run(["!remember fact Je possède un serveur ?", "!remember decision Use SQLite-vec --project forge"])
    with rag.open_store(load(), check_identity=False) as store:
        entries = rag.list_entries(store)
    assert [(e.kind, e.project, e.content) for e in entries] == [
        ("fact", None, "Je possède un serveur ?"), ("decision", "forge", "Use SQLite-vec")]
    capsys.readouterr()
    run(["!recall vector database sqlite"])
    out = capsys.readouterr().out
    assert "Use SQLite-vec" in out and "channel" in out  # the raw rows, as `forge recall` prints them
    run(["!forget 1", "!memory"])
    out = capsys.readouterr().out
    assert "Use SQLite-vec" in out and "Je possède un serveur" not in out.split("forgot")[-1]


def test_chat_turns_clear_pin_and_trace(chat_fake, capsys):
    chat_fake.chat_replies([envelope("chat", content="Bonjour !"), "Encore bonjour."])
    script, turns = run(["Salut", "Re-salut", "!pin 1", "!trace 1"])
    assert turns == 2 and "".join(script.out).count("onjour") == 2
    settings = load()
    assert [m.pinned for m in history_messages(settings)] == [True, True, False, False]
    assert last_trace(settings)["user_input_preview"] == "Re-salut"
    run(["!clear"])  # not a terminal here: it needs --yes, and changes nothing
    assert len(history_messages(settings)) == 4
    assert "--yes" in capsys.readouterr().err
    run(["!clear --yes"])
    assert [m.id for m in history_messages(settings)] == [1, 2]  # pinned stay
    with rag.open_store(settings, check_identity=False) as store:
        assert rag.count_entries(store) == 0  # discarded, never archived


def test_a_server_down_is_an_error_line_and_the_repl_goes_on():
    script, turns = run(["hello", "!help"])
    assert turns == 1 and any("127.0.0.1:9" in e for e in script.err)
    assert "!remember KIND CONTENT" in "".join(script.out)


def test_ctrl_c_during_an_answer_keeps_nothing_and_the_repl_goes_on(chat_fake):
    chat_fake.chat_reply("one two three four five")
    chat_fake.chat_reply("second")

    script = Script(["count slowly", "again"])

    def write(text: str) -> None:
        script.out.append(text)
        if text.strip() == "two":
            raise KeyboardInterrupt

    io = Io(read_line=script.read_line, write=write, note=script.err.append, confirm=script.confirm)
    turns = repl(load(), io=io, run_command=_run_cli_command)
    assert turns == 2 and any("interrupted" in e for e in script.err)
    assert [m.content for m in history_messages(load())] == ["again", "second"]


def test_shell_asks_y_n_in_the_repl(chat_fake, tmp_path):
    target = tmp_path / "made"
    chat_fake.chat_reply(envelope("shell", payload={"command": f"touch {target}"}))
    script, _ = run(["make the file"], answers=[False], ENABLED_TOOLS="shell")
    assert script.asked and not target.exists()
    chat_fake.chat_reply(envelope("shell", payload={"command": f"touch {target}"}))
    script, _ = run(["make the file"], answers=[True], ENABLED_TOOLS="shell")
    assert target.exists() and "(exit 0)" in "".join(script.out)


class Terminal:
    """`forge ARGS` on a pseudo-terminal that is its controlling terminal (Ctrl-C is SIGINT)."""

    def __init__(self, *args: str, env: dict | None = None):
        import os
        import pty
        import subprocess
        import sys

        def controlling_terminal() -> None:
            import fcntl
            import termios

            os.setsid()
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        self.master, slave = pty.openpty()
        self.proc = subprocess.Popen([sys.executable, "-m", "forge", *args], stdin=slave,
                                     stdout=slave, stderr=slave, close_fds=True,
                                     preexec_fn=controlling_terminal,
                                     env={**os.environ, **(env or {})})
        os.close(slave)
        self.seen = b""
        self.pos = 0

    def read_until(self, marker: bytes, timeout: float = 30.0) -> None:
        """Wait for `marker` after what the previous call consumed."""
        import os
        import select
        import time

        deadline = time.monotonic() + timeout
        while self.seen.find(marker, self.pos) < 0:
            assert time.monotonic() < deadline, self.seen.decode(errors="replace")
            ready, _, _ = select.select([self.master], [], [], 0.2)
            if ready:
                try:
                    self.seen += os.read(self.master, 4096)
                except OSError:
                    break
        found = self.seen.find(marker, self.pos)
        assert found >= 0, self.seen.decode(errors="replace")
        self.pos = found + len(marker)

    def type(self, data: bytes) -> None:
        import os

        os.write(self.master, data)

    def close(self) -> int:
        import os

        try:
            return self.proc.wait(timeout=30)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            os.close(self.master)


def test_forge_chat_on_a_terminal_is_a_repl_and_ctrl_c_stops_an_answer(chat_fake):
    """The real `forge chat` on a pseudo-terminal: a turn, Ctrl-C while the server is still
    generating (nothing kept, the REPL goes on), !help, Ctrl-D to leave."""
    import time

    term = Terminal("chat")
    try:
        term.read_until(b"Forge > ")
        chat_fake.chat_reply(envelope("chat", content="Bonjour du terminal"))
        term.type(b"Salut\n")
        term.read_until(b"Bonjour du terminal")
        term.read_until(b"Forge > ")
        chat_fake.delay("/v1/chat/completions", 5)
        term.type(b"Compte jusqu'a dix\n")
        deadline = time.monotonic() + 30  # Ctrl-C once the request is with the server
        while len(chat_fake.requests_to("/v1/chat/completions")) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        term.type(b"\x03")
        term.read_until(b"interrupted")
        term.type(b"!help\n")
        term.read_until(b"!remember KIND CONTENT")
        term.type(b"\x04")
    finally:
        assert term.close() == 0
    messages = history_messages(load())
    assert [m.content for m in messages] == ["Salut", "Bonjour du terminal"]
    assert last_trace(load())["not_answered"] == "interrupted"


def test_one_turn_on_a_terminal_asks_before_running_a_shell_command(chat_fake, tmp_path):
    target = tmp_path / "made"
    chat_fake.chat_reply(envelope("shell", payload={"command": f"touch {target}"}))
    term = Terminal("chat", "make the file", env={"ENABLED_TOOLS": "shell"})
    try:
        term.read_until(b"[y/N]")
        term.type(b"y\n")
        term.read_until(b"(exit 0)")
    finally:
        assert term.close() == 0
    assert target.exists()


def test_a_stream_dying_on_a_terminal_starts_its_error_on_a_new_line(chat_fake):
    chat_fake.stream_dies(after=3)
    term = Terminal("chat", "Raconte une histoire")
    try:
        term.read_until(b"Error:")
    finally:
        assert term.close() == 1
    before = term.seen[: term.seen.find(b"Error:")]
    assert b"this answer" in before, term.seen  # the start of the answer was shown
    assert before.endswith(b"\n"), term.seen


def test_a_stream_dying_in_the_repl_starts_its_error_on_a_new_line(chat_fake):
    term = Terminal("chat")
    try:
        term.read_until(b"Forge > ")
        chat_fake.stream_dies(after=3)
        term.type(b"Raconte une histoire\n")
        term.read_until(b"error:")
        term.read_until(b"Forge > ")
        term.type(b"\x04")
    finally:
        assert term.close() == 0
    before = term.seen[: term.seen.find(b"error:")]
    assert b"this answer" in before, term.seen
    assert before.endswith(b"\n"), term.seen
