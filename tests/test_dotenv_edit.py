"""`forge.core.dotenv_edit`: one key changes, every other byte of `.env` stays (calibrate --write)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from forge.core.dotenv_edit import set_value
from forge.core.errors import ForgeError
from forge.core.settings import read_dotenv

KEY = "RECALL_MAX_DISTANCE"


def edit(tmp_path: Path, before: str | bytes, value: str = "0.57@f1ed89") -> tuple[str, object]:
    env = tmp_path / ".env"
    env.write_bytes(before if isinstance(before, bytes) else before.encode())
    result = set_value(env, KEY, value)
    return env.read_bytes().decode(), result


@pytest.mark.parametrize("before, after", [
    ("RECALL_MAX_DISTANCE=0.88@a5c47b\n", "RECALL_MAX_DISTANCE=0.57@f1ed89\n"),
    ("export RECALL_MAX_DISTANCE=0.88\n", "export RECALL_MAX_DISTANCE=0.57@f1ed89\n"),
    ("  RECALL_MAX_DISTANCE = 0.88\n", "  RECALL_MAX_DISTANCE = 0.57@f1ed89\n"),
    ('RECALL_MAX_DISTANCE="0.88@a5c47b"\n', 'RECALL_MAX_DISTANCE="0.57@f1ed89"\n'),
    ("RECALL_MAX_DISTANCE='0.88'\n", "RECALL_MAX_DISTANCE='0.57@f1ed89'\n"),
    ("RECALL_MAX_DISTANCE=0.88  # measured in May\n", "RECALL_MAX_DISTANCE=0.57@f1ed89  # measured in May\n"),
    ("RECALL_MAX_DISTANCE=\n", "RECALL_MAX_DISTANCE=0.57@f1ed89\n"),
    ("RECALL_MAX_DISTANCE= # fill in\n", "RECALL_MAX_DISTANCE= 0.57@f1ed89 # fill in\n"),
    ("RECALL_MAX_DISTANCE=0.88", "RECALL_MAX_DISTANCE=0.57@f1ed89"),          # no final newline
    ("A=1\r\nRECALL_MAX_DISTANCE=0.88\r\nB=2\r\n", "A=1\r\nRECALL_MAX_DISTANCE=0.57@f1ed89\r\nB=2\r\n"),
])
def test_the_line_keeps_its_shape(tmp_path, before, after):
    text, result = edit(tmp_path, before)
    assert text == after
    assert read_dotenv(tmp_path / ".env")[KEY] == "0.57@f1ed89"


def test_only_the_last_of_duplicate_keys_changes_and_the_rest_is_byte_for_byte(tmp_path):
    before = ("# Forge\n"
              "RECALL_MAX_DISTANCE=0.5\n"
              "# RECALL_MAX_DISTANCE=0.1\n"
              "MAX_STEPS=2 # steps\n"
              "RECALL_MAX_DISTANCE=0.95@a5c47b\n"
              "EMBEDDING_QUERY_INSTRUCT=\"Given a query, retrieve passages\"\n"
              "\n")
    text, result = edit(tmp_path, before)
    assert text == before.replace("RECALL_MAX_DISTANCE=0.95@a5c47b", "RECALL_MAX_DISTANCE=0.57@f1ed89")
    assert result.line == 5 and result.previous == "0.95@a5c47b" and not result.appended


def test_a_missing_key_is_appended_and_a_missing_file_created(tmp_path):
    text, result = edit(tmp_path, "MAX_STEPS=2")
    assert text == "MAX_STEPS=2\nRECALL_MAX_DISTANCE=0.57@f1ed89\n" and result.appended
    fresh = tmp_path / "sub" / ".env"
    made = set_value(fresh, KEY, "0.6@abcdef")
    assert fresh.read_text() == "RECALL_MAX_DISTANCE=0.6@abcdef\n" and made.created


def test_a_multiline_double_quoted_value_before_it_is_not_mistaken_for_lines(tmp_path):
    # (the text edit alone: whether the settings reader accepts multi-line values is its own rule)
    from forge.core.dotenv_edit import edit_text

    before = 'NOTE="first\nRECALL_MAX_DISTANCE=0.1\nlast"\nRECALL_MAX_DISTANCE=0.9\n'
    text, line, previous = edit_text(before, KEY, "0.57@f1ed89")
    assert text == 'NOTE="first\nRECALL_MAX_DISTANCE=0.1\nlast"\nRECALL_MAX_DISTANCE=0.57@f1ed89\n'
    assert line == 4 and previous == "0.9"


def test_an_edit_the_settings_reader_does_not_see_is_undone(tmp_path, monkeypatch):
    import forge.core.settings

    env = tmp_path / ".env"
    env.write_text("A=1\nRECALL_MAX_DISTANCE=0.9\n")
    monkeypatch.setattr(forge.core.settings, "read_dotenv", lambda path: {KEY: "0.9"})
    with pytest.raises(ForgeError, match="put back"):
        set_value(env, KEY, "0.57@f1ed89")
    assert env.read_text() == "A=1\nRECALL_MAX_DISTANCE=0.9\n"


def test_permissions_are_kept_and_a_symlink_followed(tmp_path):
    real = tmp_path / "real.env"
    real.write_text("RECALL_MAX_DISTANCE=0.9\n")
    os.chmod(real, 0o600)
    link = tmp_path / ".env"
    link.symlink_to(real)
    set_value(link, KEY, "0.57@f1ed89")
    assert link.is_symlink() and real.read_text() == "RECALL_MAX_DISTANCE=0.57@f1ed89\n"
    assert real.stat().st_mode & 0o777 == 0o600


def test_a_group_readable_mode_is_kept_where_set_key_would_write_0600(tmp_path):
    env = tmp_path / ".env"
    env.write_text("RECALL_MAX_DISTANCE=0.9\n")
    os.chmod(env, 0o640)
    set_value(env, KEY, "0.57@f1ed89")
    assert env.stat().st_mode & 0o777 == 0o640


def test_a_byte_order_mark_and_the_bindings_before_the_key_are_kept(tmp_path):
    before = "\ufeff# Forge\nA='x # y'\n\nexport RECALL_MAX_DISTANCE=\"0.88\"  # May\nB=2\n"
    text, result = edit(tmp_path, before)
    assert text == "\ufeff# Forge\nA='x # y'\n\nexport RECALL_MAX_DISTANCE=\"0.57@f1ed89\"  # May\nB=2\n"
    assert result.line == 4 and result.previous == "0.88"


@pytest.mark.parametrize("before, after", [
    # a quoted key is the same key for the reader: it is replaced, not appended beside
    ("'RECALL_MAX_DISTANCE'=0.5\n", "'RECALL_MAX_DISTANCE'=0.57@f1ed89\n"),
    # an escaped quote inside the old value: the whole value is replaced, the comment kept
    ("RECALL_MAX_DISTANCE='x\\'y' # c\n", "RECALL_MAX_DISTANCE='0.57@f1ed89' # c\n"),
])
def test_the_line_the_settings_reader_reads_is_the_one_replaced(tmp_path, before, after):
    text, result = edit(tmp_path, before)
    assert text == after and not result.appended
    assert read_dotenv(tmp_path / ".env")[KEY] == "0.57@f1ed89"


def test_an_unclosed_quote_is_refused_and_nothing_changes(tmp_path):
    env = tmp_path / ".env"
    env.write_text("RECALL_MAX_DISTANCE='0.9\nA=1\n")
    with pytest.raises(ForgeError, match="never closes"):
        set_value(env, KEY, "0.57@f1ed89")
    assert env.read_text() == "RECALL_MAX_DISTANCE='0.9\nA=1\n"
