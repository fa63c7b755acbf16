"""`forge resplit` on a store holding multi-exchange blocks, as an older version or an
import wrote them: the dry run, --backup required, idempotence, and a real kill -9 between the
insert of the pieces and the delete of the block."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import invoke, kill_when_paused

from forge.store import rag
from forge.core.settings import load_settings

BLOCK_A = [("Quel processeur a mon NiPoGi ?", "Un Ryzen 5 5500U."),
           ("Et la RAM ?", "[error] the chat server did not answer"),
           ("Combien de disques dans le NAS ?", "Quatre disques de 4 To en RAID 5.")]
BLOCK_B = [("What runs the backups?", "restic, every night at 03:00."),
           ("Where do they go?", "To a Backblaze B2 bucket.")]
REFUSAL = [("Comment s'appelle mon chat ?", "[no memory] Nothing in memory matches this question.")]


def render(exchanges) -> str:
    return "\n".join(f"user: {q}\nassistant: {a}" for q, a in exchanges)


@pytest.fixture
def blocks(forge_env: Path) -> dict[str, int]:
    """Two imported multi-exchange blocks (one message ref per message), a refusal-only entry
    and a deliberate note."""
    settings = load_settings()
    items = [
        rag.NewEntry(rag.ARCHIVE_KIND, render(BLOCK_A), "homelab", "import",
                     {"external": [f"export/{i}" for i in range(6)]}),
        rag.NewEntry(rag.ARCHIVE_KIND, render(BLOCK_B), None, "compaction",
                     {"messages": [11, 12, 13, 14], "external": []}),
        rag.NewEntry(rag.ARCHIVE_KIND, render(REFUSAL), None, "import", {"external": ["export/99"]}),
        rag.NewEntry("fact", "Possède un Steam Deck"),
    ]
    with rag.open_store(settings) as store:
        ids = [r.id for r in rag.remember_many(store, items)]
    return dict(zip(("a", "b", "refusal", "note"), ids))


def archive(runner) -> list[dict]:
    rows = json.loads(invoke(runner, "memory", "ls", "archive", "--json").stdout)["entries"]
    return rows


def exchanges_stored(runner) -> list[str]:
    return sorted(e["content"] for e in archive(runner))


def expected_pieces() -> list[str]:
    kept = [BLOCK_A[0], BLOCK_A[2], *BLOCK_B]
    return sorted([render([x]) for x in kept] + [render(REFUSAL)])


def test_the_dry_run_lists_blocks_left_out_units_and_refusals_and_writes_nothing(runner, blocks):
    before = exchanges_stored(runner)
    result = invoke(runner, "resplit", "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert [(b["id"], b["exchanges"], b["pieces"]) for b in report["blocks"]] == [
        (blocks["a"], 3, [0, 2]), (blocks["b"], 2, [0, 1])]
    assert report["left_out"] == [{"block": blocks["a"], "piece": 1,
                                   "reason": "reply starts with [error]", "preview": "Et la RAM ?"}]
    assert report["refusals"] == [blocks["refusal"]] and not report["applied"]
    table = invoke(runner, "resplit").stdout
    assert "would split" in table and "reply starts with [error]" in table
    assert f"a refusal and nothing else" in table and f"#{blocks['refusal']}" in table
    assert exchanges_stored(runner) == before


def test_apply_without_backup_is_refused_and_writes_nothing(runner, blocks):
    before = exchanges_stored(runner)
    result = invoke(runner, "resplit", "--apply")
    assert result.exit_code == 2 and "--backup" in result.stderr
    assert exchanges_stored(runner) == before


def test_apply_splits_carries_refs_and_a_second_run_changes_nothing(runner, blocks, tmp_path):
    backup = tmp_path / "before.db"
    result = invoke(runner, "resplit", "--apply", "--backup", str(backup), "--json")
    assert result.exit_code == 0, result.stderr
    assert exchanges_stored(runner) == expected_pieces()
    rows = {e["content"]: e for e in archive(runner)}
    first = rows[render([BLOCK_A[0]])]
    assert first["project"] == "homelab" and first["source"] == "import"
    assert first["refs"]["external"] == ["export/0", "export/1"]
    assert first["refs"]["resplit"] == {"block": blocks["a"], "piece": 0}
    assert rows[render([BLOCK_B[1]])]["refs"]["messages"] == [13, 14]
    # The backup is a consistent store holding the blocks as they were.
    with rag.open_store(load_settings(), path=backup, check_identity=False) as old:
        assert rag.get_entry(old, blocks["a"]).content == render(BLOCK_A)
    again = invoke(runner, "resplit", "--apply", "--backup", str(tmp_path / "again.db"), "--json")
    assert again.exit_code == 0 and json.loads(again.stdout)["blocks"] == []
    assert exchanges_stored(runner) == expected_pieces()
    taken = invoke(runner, "resplit", "--apply", "--backup", str(backup))
    assert taken.exit_code == 1 and "never overwritten" in taken.stderr


def test_a_kill_between_insert_and_delete_then_a_rerun_keeps_every_exchange_once(runner, blocks,
                                                                                 tmp_path):
    env = {**os.environ, "FORGE_TEST_PAUSE_AT": "resplit_insert"}
    forge = Path(sys.executable).parent / "forge"
    proc = subprocess.Popen([str(forge), "resplit", "--apply", "--backup", str(tmp_path / "b1.db")],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    kill_when_paused(proc, "resplit_insert")
    # A visible duplicate, never a loss: block A and its pieces are both in.
    stored = exchanges_stored(runner)
    assert render(BLOCK_A) in stored and render([BLOCK_A[0]]) in stored
    result = invoke(runner, "resplit", "--apply", "--backup", str(tmp_path / "b2.db"), "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["blocks"][0]["already"] == 2
    assert exchanges_stored(runner) == expected_pieces()


def test_deploy_rag_resplit_is_the_same_command(blocks):
    script = Path(__file__).resolve().parent.parent / "deploy" / "rag_resplit.py"
    dry = subprocess.run([sys.executable, str(script), "--json"], capture_output=True, text=True)
    assert dry.returncode == 0, dry.stderr
    assert [b["id"] for b in json.loads(dry.stdout)["blocks"]] == [blocks["a"], blocks["b"]]
    refused = subprocess.run([sys.executable, str(script), "--apply"], capture_output=True, text=True)
    assert refused.returncode == 2 and "--backup" in refused.stderr


def test_a_block_holding_a_secret_leaves_no_byte_of_it_after_the_split(runner, forge_env,
                                                                       monkeypatch, tmp_path):
    """A block written while secrets were kept (FORGE_KEEP_SECRETS, or an older Forge): its
    pieces are redacted as they are written, so deleting the block erases: no byte of the token
    stays in any file of the data folder."""
    token = "ghp_" + "Zq7Lm2Xv9Rt4Kp8Wn3Yb6Hc1Jd5Fg0Se2Ua"
    block = [("Quel est le jeton GitHub ?", f"Le jeton est {token}"),
             ("Et le NAS ?", "Quatre disques de 4 To en RAID 5.")]
    monkeypatch.setenv("FORGE_KEEP_SECRETS", "1")
    with rag.open_store(load_settings()) as store:
        rag.remember_many(store, [rag.NewEntry(rag.ARCHIVE_KIND, render(block), None, "import",
                                               {"external": ["export/1", "export/2"]})])
    monkeypatch.delenv("FORGE_KEEP_SECRETS")
    data = forge_env   # the data folder

    def holding() -> list[str]:
        return [p.name for p in sorted(data.rglob("*")) if p.is_file()
                and token[-24:].lower().encode() in p.read_bytes().lower()]

    assert holding()   # the block holds it, as it was written
    result = invoke(runner, "resplit", "--apply", "--backup", str(tmp_path / "before.db"))
    assert result.exit_code == 0, result.stderr
    assert len(archive(runner)) == 2
    assert holding() == []
