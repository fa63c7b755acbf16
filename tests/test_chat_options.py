"""`forge chat` habits of simonw/llm: -s/--system, -o KEY VALUE,
--no-stream, and `--repl` reading its lines from a pipe or a here-doc."""
from __future__ import annotations

import json
import os
import shutil
import subprocess

from chat_helpers import envelope, history_messages, load
from conftest import invoke
from terminal import run_with_a_terminal
from forge.memory.router_prompt import system_text


def chat_requests(server) -> list[dict]:
    return [r.json for r in server.requests_to("/v1/chat/completions")]


def test_system_is_appended_after_the_router_prompt_and_never_stored(runner, chat_fake):
    chat_fake.chat_replies(["first", envelope("chat", content="Bonjour")])
    assert invoke(runner, "chat", "Salut").exit_code == 0
    result = invoke(runner, "chat", "-s", "Réponds en une ligne, en français.", "Et toi ?")
    assert result.exit_code == 0, result.stderr
    plain, with_system = (r["messages"] for r in chat_requests(chat_fake))
    router = system_text(load().enabled_tools)
    assert plain[0]["content"] == router
    assert with_system[0]["content"] == router + "\n\nRéponds en une ligne, en français."
    assert with_system[1:2] == plain[1:]  # the conversation after it is unchanged
    assert result.stdout == "Bonjour\n"  # the routing still reads the envelope
    assert all("Réponds en une ligne" not in m.content for m in history_messages(load()))


def test_options_reach_the_server_over_forges_own(runner, chat_fake):
    chat_fake.chat_reply("ok")
    result = invoke(runner, "chat", "-o", "temperature", "0.7", "-o", "seed", "42",
                    "-o", "grammar", "root ::= \"ok\"", "hi")
    assert result.exit_code == 0, result.stderr
    body = chat_requests(chat_fake)[0]
    assert body["temperature"] == 0.7 and body["seed"] == 42 and body["grammar"] == 'root ::= "ok"'
    refused = invoke(runner, "chat", "-o", "stream", "false", "hi")
    assert refused.exit_code == 2 and "'stream' is set by Forge" in refused.stderr


def run_with_stdout_on_a_terminal(args: list[str]) -> tuple[int, str]:
    code, out, _ = run_with_a_terminal(args, on="stdout")
    return code, out


def test_no_stream_asks_for_the_whole_answer_even_on_a_terminal(chat_fake):
    chat_fake.chat_replies(["streamed", "whole"])
    code, out = run_with_stdout_on_a_terminal(["chat", "one"])
    assert code == 0 and "streamed" in out
    code, out = run_with_stdout_on_a_terminal(["chat", "--no-stream", "two"])
    assert code == 0 and "whole" in out
    assert [r["stream"] for r in chat_requests(chat_fake)] == [True, False]


def test_repl_reads_a_here_doc_line_by_line(chat_fake):
    chat_fake.chat_replies(["Bonjour !", "Debian, d'après ta mémoire."])
    lines = ("Salut\n"
             "!remember fact The NAS runs Debian\n"
             "!memory\n"
             "\n"
             "Que tourne sur le NAS ?\n"
             "!clear\n")
    done = subprocess.run([shutil.which("forge"), "chat", "--repl", "-s", "Be brief."], input=lines,
                          capture_output=True, text=True, timeout=120, env=os.environ)
    assert done.returncode == 0, done.stderr
    assert "Forge >" not in done.stdout  # no prompt in a pipeline's data
    out = done.stdout.splitlines()
    assert out[0] == "Bonjour !" and out[1] == "remembered #1"
    assert any("The NAS runs Debian" in line for line in out) and "Debian, d'après ta mémoire." in out
    requests = chat_requests(chat_fake)
    assert len(requests) == 2 and all(r["messages"][0]["content"].endswith("Be brief.") for r in requests)
    assert "--yes" in done.stderr  # !clear from a pipe cannot ask
    assert [m.content for m in history_messages(load())][0] == "Salut"


def test_repl_refuses_a_message_and_machine_formats():
    forge = shutil.which("forge")
    for args in (["chat", "--repl", "hello"], ["chat", "--repl", "--json"]):
        done = subprocess.run([forge, *args], input="", capture_output=True, text=True, timeout=60)
        assert done.returncode == 2, done.stderr
