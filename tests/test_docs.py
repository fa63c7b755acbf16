"""The README keeps up with the code: every setting, every command, the generated settings table."""
from __future__ import annotations

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
