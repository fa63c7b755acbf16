"""Settings: defaults, .env, precedence, and every kind of bad value named."""
from __future__ import annotations

from pathlib import Path

import pytest

from conftest import invoke
from forge.core.errors import SettingsError
from forge.core.settings import Cutoff, load_settings


def test_defaults_match_the_spec_table(settings):
    assert settings.max_history == 200
    assert (settings.compaction_threshold, settings.compaction_keep_recent) == (40, 10)
    assert (settings.compaction_token_threshold, settings.compaction_token_target) == (6000, 3000)
    assert settings.compaction_strategy == "rag_pointer"
    assert settings.compaction_aggregate is False
    assert settings.embedding_url is None  # the embedded model, not the seed's server URL
    assert settings.recall_max_distance is None  # no cutoff is the safe start
    assert settings.recall_lexical_max_df == 0.2
    assert settings.enabled_tools == ("memory", "files", "git")
    assert settings.max_steps == 1


def test_data_dir_moves_all_three_stores(monkeypatch, tmp_path):
    monkeypatch.setenv("FORGE_DATA_DIR", str(tmp_path / "elsewhere"))
    s = load_settings()
    assert s.memory_file == tmp_path / "elsewhere" / "memory.json"
    assert s.rag_db_file == tmp_path / "elsewhere" / "forge_rag.db"
    assert s.trace_file == tmp_path / "elsewhere" / "traces.jsonl"


def test_dotenv_is_read_and_the_environment_wins(monkeypatch):
    Path(".env").write_text("# comment\nMEMORY_MAX_HISTORY=300\nexport MAX_STEPS='3'\n"
                            "COMPACTION_THRESHOLD=50 # inline comment\n")
    monkeypatch.setenv("MAX_STEPS", "2")
    s = load_settings()
    assert s.max_history == 300 and s.sources["MEMORY_MAX_HISTORY"] == ".env"
    assert s.compaction_threshold == 50
    assert s.max_steps == 2 and s.sources["MAX_STEPS"] == "environment"
    assert s.sources["COMPACTION_STRATEGY"] == "default"


def test_empty_instruction_means_none_and_unset_means_default(monkeypatch):
    assert load_settings().embedding_query_instruct.startswith("Given a web search query")
    monkeypatch.setenv("EMBEDDING_QUERY_INSTRUCT", "")
    assert load_settings().embedding_query_instruct == ""


@pytest.mark.parametrize("name, value, words", [
    ("MEMORY_MAX_HISTORY", "lots", "whole number"),
    ("MEMORY_MAX_HISTORY", "-5", ">= 1"),
    ("COMPACTION_KEEP_RECENT", "-1", ">= 0"),
    ("COMPACTION_STRATEGY", "magic", "unknown strategy"),
    ("RECALL_MAX_DISTANCE", "0.88@xyz", "six hex"),
    ("RECALL_MAX_DISTANCE", "far", "0.88@a5c47b"),
    ("RECALL_MAX_DISTANCE", "3.5", "(0, 2]"),
    ("RECALL_LEXICAL_MAX_DF", "1.5", "between 0.0 and 1.0"),
    ("COMPACTION_AGGREGATE", "perhaps", "true or false"),
    ("LLAMA_CPP_URL", "localhost:8080", "http://"),
    ("ENABLED_TOOLS", "memory,teleport", "unknown tool"),
    ("EMBEDDING_DIM", "0", ">= 1"),
])
def test_a_bad_value_is_an_error_naming_the_variable(monkeypatch, name, value, words):
    monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError) as e:
        load_settings()
    assert str(e.value).startswith(name + ":")
    assert words in str(e.value)


@pytest.mark.parametrize("env, named", [
    ({"COMPACTION_KEEP_RECENT": "40"}, "COMPACTION_KEEP_RECENT"),           # keep == threshold
    ({"COMPACTION_KEEP_RECENT": "50"}, "COMPACTION_KEEP_RECENT"),           # keep > threshold
    ({"COMPACTION_THRESHOLD": "250"}, "COMPACTION_THRESHOLD"),              # threshold > cap
    ({"MEMORY_MAX_HISTORY": "30"}, "COMPACTION_THRESHOLD"),                 # cap below threshold
    ({"COMPACTION_TOKEN_TARGET": "6000"}, "COMPACTION_TOKEN_TARGET"),       # target == threshold
    ({"COMPACTION_TOKEN_THRESHOLD": "2000"}, "COMPACTION_TOKEN_TARGET"),    # threshold < target
])
def test_an_inconsistent_set_is_an_error_naming_a_variable(monkeypatch, env, named):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(SettingsError) as e:
        load_settings()
    assert str(e.value).startswith(named + ":")


def test_threshold_equal_to_cap_is_allowed(monkeypatch):
    monkeypatch.setenv("COMPACTION_THRESHOLD", "200")
    assert load_settings().compaction_threshold == 200


def test_cutoff_with_and_without_tag(monkeypatch):
    monkeypatch.setenv("RECALL_MAX_DISTANCE", "0.88@a5c47b")
    assert load_settings().recall_max_distance == Cutoff(0.88, "a5c47b")
    monkeypatch.setenv("RECALL_MAX_DISTANCE", "0.9")
    assert load_settings().recall_max_distance == Cutoff(0.9, None)


def test_bad_setting_fails_the_command_before_anything_is_written(runner, monkeypatch, forge_env):
    monkeypatch.setenv("COMPACTION_STRATEGY", "nope")
    result = runner.invoke(__import__("forge.cli.main", fromlist=["cli"]).cli, ["pin", "1"])
    assert result.exit_code == 1
    assert "COMPACTION_STRATEGY" in result.output
    assert not forge_env.exists()


def test_config_shows_value_and_source(runner, monkeypatch):
    import json

    Path(".env").write_text("MAX_STEPS=2\n")
    monkeypatch.setenv("API_TOKEN", "s3cret")
    result = invoke(runner, "config", "--json")
    doc = json.loads(result.stdout)
    assert doc["MAX_STEPS"] == {"value": 2, "source": ".env"}
    assert doc["MEMORY_MAX_HISTORY"] == {"value": 200, "source": "default"}
    assert doc["API_TOKEN"]["value"] == "***"  # never print a secret
    table = invoke(runner, "config").stdout
    assert "MAX_STEPS" in table and ".env" in table
    cells = {line.split()[0]: line.split()[1:] for line in table.splitlines()[2:] if line.split()}
    assert cells["RECALL_LEXICAL_MAX_DF"][0] == "0.2"  # as typed, not a distance's four decimals
    assert cells["LLAMA_CPP_TIMEOUT"][0] == "120"


def test_an_unreadable_dotenv_is_one_line_naming_the_file(runner):
    Path(".env").write_bytes(b"MAX_STEPS=2\nCOMMENT=caf\xe9\n")
    result = invoke(runner, "config")
    assert result.exit_code == 1 and ".env: line 2 is not UTF-8" in result.stderr, result.stderr
    Path(".env").unlink()
    Path(".env").mkdir()
    result = invoke(runner, "config")
    assert result.exit_code == 1 and ".env: cannot read it" in result.stderr, result.stderr


# -- .env follows python-dotenv's rules; a near-miss key is named


def test_a_quoted_value_may_be_followed_by_a_comment(monkeypatch):
    Path(".env").write_text("MEMORY_MAX_HISTORY='300' # the cap\nMAX_STEPS=\"2\"   # steps\n")
    s = load_settings()
    assert s.max_history == 300 and s.max_steps == 2


DOTENV_CORPUS = r"""
# a comment
PLAIN=value
SPACED = value with spaces   
COMMENTED=value # a comment
HASH_INSIDE=value#not-a-comment
EMPTY=
EMPTY_COMMENT= # only a comment
SINGLE='single # kept'
SINGLE_COMMENT='300' # comment
DOUBLE="double # kept"
ESCAPES="tab\there\nnewline \"quoted\""
SINGLE_ESCAPES='it\'s \\ raw \n'
export EXPORTED=yes
'QUOTED_KEY'=ok
MULTI="first
second"
dotted.key=fine
REF=${PLAIN}-and-${MISSING:-default}
SINGLE_REF='${PLAIN}'
BARE_KEY
UNICODE=café ☕
TRAILING_TAB=x	
"""


def test_dotenv_parsing_matches_python_dotenv_on_every_rule(monkeypatch):
    import io

    from dotenv import dotenv_values

    from forge.core.settings import read_dotenv

    monkeypatch.delenv("PLAIN", raising=False)
    monkeypatch.delenv("MISSING", raising=False)
    expected = {k: v for k, v in dotenv_values(stream=io.StringIO(DOTENV_CORPUS)).items()
                if v is not None}
    Path(".env").write_text(DOTENV_CORPUS, encoding="utf-8")
    assert read_dotenv(Path(".env")) == expected
    assert expected["SINGLE_COMMENT"] == "300" and expected["REF"] == "value-and-default"
    assert "BARE_KEY" not in read_dotenv(Path(".env"))  # a bare key does not unset a setting


def test_a_key_close_to_a_setting_is_named_in_a_warning(runner):
    from conftest import invoke

    Path(".env").write_text("MEMORY_MAX_HISTROY=300\nOTHER_APP_TOKEN=x\ncompaction_threshold=30\n")
    result = invoke(runner, "config", "--json")
    assert result.exit_code == 0, result.stderr
    assert (".env: line 1: MEMORY_MAX_HISTROY is not a Forge setting; did you mean "
            "MEMORY_MAX_HISTORY?") in result.stderr
    assert "line 3: compaction_threshold is not a Forge setting; did you mean COMPACTION_THRESHOLD?" \
        in result.stderr
    assert "OTHER_APP_TOKEN" not in result.stderr  # another program's variable: no warning


def test_a_line_that_is_not_a_binding_names_its_line(runner):
    from conftest import invoke

    Path(".env").write_text("MAX_STEPS=2\nMEMORY_MAX_HISTORY 300\n")
    result = invoke(runner, "config")
    assert result.exit_code == 1 and ".env: line 2 is not KEY=VALUE" in result.stderr
