"""The commands that touch the deliberate store print the same thing on both
backends. One script of real `forge` commands runs against a SQLite store and against a real
PostgreSQL store; their outputs, timestamps masked, must be equal line for line."""
from __future__ import annotations

import re

import pytest

from conftest import invoke

pytestmark = pytest.mark.postgres

SCRIPT = [
    ["remember", "fact", "Le NiPoGi a 32 Go de RAM", "-p", "homelab"],
    ["remember", "Possède un Steam Deck"],
    ["remember", "decision", "Use SQLite-vec instead of an external vector DB", "-p", "forge"],
    ["remember", "fact", "Le  NiPoGi a 32 Go de RAM ", "-p", "homelab"],
    ["remember", "todo", "Renouveler le certificat TLS du reverse proxy Caddy", "-p", "homelab"],
    ["recall", "Combien de RAM a le NiPoGi ?"],
    ["recall", "certificat Caddy", "-p", "homelab", "--json"],
    ["recall", "console portable", "--vector-k", "2", "--lexical-k", "2"],
    ["memory", "ls"],
    ["memory", "ls", "--json"],
    ["memory", "show", "1"],
    ["memory", "edit", "2", "Possède un Steam Deck OLED"],
    ["memory", "forget", "3", "--yes"],
    ["memory", "show", "3"],
    ["memory", "export"],
    ["aggregate"],
    ["resplit"],
    ["reindex"],
    ["memory", "ls", "-p", "homelab"],
    ["calibrate", "--hit", "Combien de RAM a le NiPoGi ?", "--expect", "1",
     "--miss", "Quelle est la capitale du Pérou ?"],
    ["history", "import", "export.jsonl"],
    ["compact"],
    ["memory", "ls", "archive"],
    ["recall", "Quel NAS ai-je ?", "--kind", "archive"],
    ["context"],
]

EXPORT = "\n".join(
    '{"role": "%s", "content": "%s"}' % pair for pair in [
        ("user", "Quel NAS ai-je ?"), ("assistant", "Un Synology DS920+."),
        ("user", "Et combien de disques ?"), ("assistant", "Quatre disques de 4 To."),
        ("user", "Quel OS sur le NiPoGi ?"), ("assistant", "Proxmox VE 8."),
    ]) + "\n"

STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z")
# sqlite-vec and pgvector agree on a distance to about 1e-7, not to the last digit of a double
FLOAT = re.compile(r"-?\d+\.\d{5,}")


SECONDS = re.compile(r"(in|embedding|database) \d+\.\d+ s\b")


def masked(text: str) -> str:
    text = SECONDS.sub(lambda m: f"{m.group(1)} <t> s", STAMP.sub("<time>", text))
    return FLOAT.sub(lambda m: f"{float(m.group()):.4f}", text)


def run_script(runner) -> list[tuple[str, int, str, str]]:
    from pathlib import Path

    Path("export.jsonl").write_text(EXPORT, encoding="utf-8")
    out = []
    for args in SCRIPT:
        result = invoke(runner, *args)
        out.append((" ".join(args), result.exit_code, masked(result.stdout), masked(result.stderr)))
    return out


def test_the_store_commands_print_the_same_on_both_backends(runner, postgres_url, monkeypatch,
                                                             settings):
    monkeypatch.setenv("COMPACTION_THRESHOLD", "4")
    monkeypatch.setenv("COMPACTION_KEEP_RECENT", "2")
    # the latent-term channel is SQLite's only: its third share would change `fused`
    monkeypatch.setenv("RECALL_SPARSE", "off")
    on_sqlite = run_script(runner)
    assert settings.rag_db_file.exists()
    monkeypatch.setenv("FORGE_DATA_DIR", str(settings.data_dir.parent / "pg-machine"))
    monkeypatch.setenv("FORGE_DATABASE_URL", postgres_url)
    on_postgres = run_script(runner)
    assert not (settings.data_dir.parent / "pg-machine" / "forge_rag.db").exists()
    for sq, pg in zip(on_sqlite, on_postgres):
        assert sq == pg, sq[0]
    codes = {cmd: code for cmd, code, _, _ in on_postgres}
    assert codes.pop("memory show 3") == 1      # forgotten
    assert set(codes.values()) == {0}
