"""FORGE_DATABASE_URL: which store, and its password shown nowhere (config, doctor, errors, logs,
traces)."""
from __future__ import annotations

import json
import socket

import pytest

from conftest import invoke
from forge.core.errors import SettingsError
from forge.core.settings import load_settings, redact_url, scrub

PASSWORD = "Tr0ub4dor-and-3"


def test_unset_means_the_sqlite_file(settings):
    assert settings.database_url is None
    assert settings.rag_db_file.name == "forge_rag.db"


@pytest.mark.parametrize("url", [
    f"postgresql://forge:{PASSWORD}@db.lan:5432/forge",
    f"postgres://forge:{PASSWORD}@db.lan/forge",
    "postgresql:///forge?host=/run/postgresql",
])
def test_a_postgresql_url_is_accepted(monkeypatch, url):
    monkeypatch.setenv("FORGE_DATABASE_URL", f"  {url} ")
    assert load_settings().database_url == url
    assert PASSWORD not in repr(load_settings())


@pytest.mark.parametrize("value", [f"mysql://forge:{PASSWORD}@db.lan/forge", "sqlite:///x.db",
                                   "db.lan:5432", f"forge:{PASSWORD}@db.lan"])
def test_anything_else_is_one_line_naming_the_setting_without_the_password(runner, monkeypatch, value):
    monkeypatch.setenv("FORGE_DATABASE_URL", value)
    with pytest.raises(SettingsError) as e:
        load_settings()
    assert str(e.value).startswith("FORGE_DATABASE_URL: expected a postgresql:// or postgres:// URL")
    result = invoke(runner, "config")
    assert result.exit_code == 1
    assert result.stderr.count("\n") == 1 and "FORGE_DATABASE_URL" in result.stderr
    assert PASSWORD not in result.stdout + result.stderr


@pytest.mark.parametrize("url, shown", [
    ("postgresql://u:pw@h:5432/db", "postgresql://u:***@h:5432/db"),
    ("postgresql://u@h/db", "postgresql://u@h/db"),
    ("postgresql://h/db", "postgresql://h/db"),
    ("postgresql://u:p/w@x:y@h/db?sslmode=require", "postgresql://u:***@h/db?sslmode=require"),
    ("postgresql:///db?host=/tmp&password=pw&port=5", "postgresql:///db?host=/tmp&password=***&port=5"),
    ("host=h password='a b' dbname=d", "host=h password=*** dbname=d"),
    ("cannot connect to postgres://u:pw@h/db: refused", "cannot connect to postgres://u:***@h/db: refused"),
    ("http://127.0.0.1:8080/v1", "http://127.0.0.1:8080/v1"),
])
def test_redact_url_hides_the_password_wherever_it_sits(url, shown):
    assert redact_url(url) == shown


def test_scrub_hides_a_loaded_password_even_alone(monkeypatch):
    monkeypatch.setenv("FORGE_DATABASE_URL", "postgresql://forge:p%40ss-w0rd@db.lan/forge")
    load_settings()
    assert scrub("bad token 'p@ss-w0rd' or p%40ss-w0rd") == "bad token '***' or ***"


def test_config_shows_the_url_without_its_password(runner, monkeypatch):
    url = f"postgresql://forge:{PASSWORD}@db.lan:5432/forge"
    monkeypatch.setenv("FORGE_DATABASE_URL", url)
    doc = json.loads(invoke(runner, "config", "--json").stdout)
    assert doc["FORGE_DATABASE_URL"] == {"value": "postgresql://forge:***@db.lan:5432/forge",
                                         "source": "environment"}
    for fmt in ((), ("--json",), ("--nl",)):
        result = invoke(runner, "config", *fmt)
        assert result.exit_code == 0 and PASSWORD not in result.stdout + result.stderr


def test_traces_and_log_lines_never_hold_the_password(monkeypatch, settings, tmp_path, caplog):
    import logging

    from forge.store import traces
    from forge.cli.main import _StderrFormatter

    url = f"postgresql://forge:{PASSWORD}@db.lan/forge"
    monkeypatch.setenv("FORGE_DATABASE_URL", url)
    load_settings()
    path = tmp_path / "traces.jsonl"
    traces.append(path, {"run_id": "r1", "ok": False, "error": f"StoreError: {url} is down ({PASSWORD})"})
    text = path.read_text()
    # the secret scanner reads the record first (memory scan counts what it finds), then a
    # password it left is `***`
    assert PASSWORD not in text
    assert "postgresql://forge:[secret: password in URL]@db.lan/forge" in text
    record = logging.LogRecord("forge", logging.WARNING, __file__, 1, "lost %s", (url,), None)
    assert _StderrFormatter().format(record) == "warning: lost postgresql://forge:***@db.lan/forge"


# ---------------------------------------------------------------------------- doctor, for real

def _doctor(runner) -> tuple[dict, str]:
    result = invoke(runner, "doctor", "--json")
    rows = {r["check"]: r for r in json.loads(result.stdout)}
    return rows, result.stdout + result.stderr


def test_doctor_names_a_reachable_server_without_its_password(runner, monkeypatch, postgres_server,
                                                             postgres_url):
    monkeypatch.setenv("FORGE_DATABASE_URL", postgres_url)
    rows, out = _doctor(runner)
    assert rows["database"]["status"] == "ok"
    assert rows["database"]["detail"].startswith("PostgreSQL 18")
    assert redact_url(postgres_url) in rows["database"]["detail"] and "pgvector" in rows["database"]["detail"]
    assert postgres_server.password not in out


def test_doctor_says_a_refused_password_or_a_down_server_without_the_password(
        runner, monkeypatch, postgres_server, postgres_url):
    wrong = postgres_url.replace(postgres_server.password, PASSWORD)
    monkeypatch.setenv("FORGE_DATABASE_URL", wrong)
    rows, out = _doctor(runner)
    assert rows["database"]["status"] == "fail"
    assert rows["database"]["detail"].startswith(f"cannot connect to PostgreSQL at {redact_url(wrong)}: ")
    assert "password authentication failed" in rows["database"]["detail"]
    assert PASSWORD not in out and postgres_server.password not in out

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    down = f"postgresql://forge:{PASSWORD}@127.0.0.1:{closed}/forge"
    monkeypatch.setenv("FORGE_DATABASE_URL", down)
    rows, out = _doctor(runner)
    assert rows["database"]["status"] == "fail"
    assert f"postgresql://forge:***@127.0.0.1:{closed}/forge" in rows["database"]["detail"]
    assert PASSWORD not in out
