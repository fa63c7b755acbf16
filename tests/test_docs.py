"""The README keeps up with the code: every setting, every command, the generated settings table."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import click

from forge.cli.main import cli
from forge.settings import SPECS

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_settings_table_is_generated_from_the_code():
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "settings_table.py"), "--check",
                           str(ROOT / "README.md")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_every_setting_is_in_the_readme():
    missing = [s.name for s in SPECS if f"`{s.name}`" not in README]
    assert not missing


def test_every_command_has_an_example_in_the_readme():
    ctx = click.Context(cli)
    missing = []
    for name in cli.list_commands(ctx):
        cmd = cli.get_command(ctx, name)
        subs = cmd.list_commands(ctx) if isinstance(cmd, click.Group) else []
        for words in ([[name]] if not subs else [[name, sub] for sub in subs]):
            if f"forge {' '.join(words)}" not in README:
                missing.append(" ".join(words))
    assert not missing, f"commands with no example in README.md: {missing}"


def test_every_setting_is_in_the_env_example():
    example = (ROOT / "deploy" / ".env.example").read_text(encoding="utf-8")
    missing = [s.name for s in SPECS if f"# {s.name}=" not in example]
    assert not missing


def test_the_env_example_as_a_dotenv_gives_the_defaults(tmp_path, monkeypatch):
    """Uncommenting every line of deploy/.env.example must change nothing."""
    from forge.settings import load_settings

    text = (ROOT / "deploy" / ".env.example").read_text(encoding="utf-8")
    lines = [line[2:] for line in text.splitlines() if line.startswith("# ") and "=" in line
             and line[2:].split("=", 1)[0].isupper() and " " not in line[2:].split("=", 1)[0]]
    (tmp_path / ".env").write_text("\n".join(lines) + "\n")
    for spec in SPECS:
        monkeypatch.delenv(spec.name, raising=False)
    from_example = load_settings(cwd=tmp_path)
    defaults = load_settings(cwd=tmp_path / "empty")
    assert all(from_example.sources[s.name] == ".env" for s in SPECS)
    # FORGE_WORKSPACE defaults to the working directory, which differs between the two loads.
    pairs = lambda st: [(r["setting"], r["value"]) for r in st.rows() if r["setting"] != "FORGE_WORKSPACE"]
    assert pairs(from_example) == pairs(defaults)


def test_the_readme_examples_are_what_forge_prints_today(tmp_path):
    """The marked console blocks are real runs (tools/readme_examples.py); times, run ids,
    decimals and column widths aside, they must match a run of today's code."""
    env = {k: v for k, v in os.environ.items() if k != "FORGE_DATA_DIR"}
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "readme_examples.py"), "--check",
                           str(ROOT / "README.md")], capture_output=True, text=True, env=env,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert text.count("<!-- example: ") >= 6


def test_the_example_checker_catches_a_drifted_output(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("<!-- example: s/one -->\n```console\n$ forge remember 'Un fait'\n"
                      "remembered #7\n```\n<!-- /example -->\n", encoding="utf-8")
    tool = str(ROOT / "tools" / "readme_examples.py")
    stale = subprocess.run([sys.executable, tool, "--check", str(readme)], capture_output=True,
                           text=True, timeout=300)
    assert stale.returncode == 1 and "s/one drifted" in stale.stderr
    assert subprocess.run([sys.executable, tool, "--write", str(readme)], timeout=300).returncode == 0
    assert "remembered #1" in readme.read_text(encoding="utf-8")
    assert subprocess.run([sys.executable, tool, "--check", str(readme)], timeout=300).returncode == 0
