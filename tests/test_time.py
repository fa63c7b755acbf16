"""Forge knows when: an entry's time is when it happened, a time window narrows every channel
inside its query, time in a question is read (and leaves the word channel), the newer of two
facts comes first, and dates show where people and models read.

Every "now" here is fixed (the `now` argument, or FORGE_NOW for the CLI), and the time zone is
named (Europe/Paris, daylight saving time included), so nothing depends on the wall clock.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from conftest import invoke
from forge.core import when
from forge.core.errors import ForgeError

PARIS = ZoneInfo("Europe/Paris")
NOW = "2026-03-18T15:00:00"          # a Wednesday, before daylight saving time (UTC+1)


def z(text: str) -> str:
    """A stored time from its short form: "2026-03-08T23:00" -> "2026-03-08T23:00:00.000000Z"."""
    return text + ":00.000000Z"


@pytest.fixture
def tz_paris(monkeypatch):
    """The process's local zone is Europe/Paris (TZ honoured, as for a user's shell)."""
    monkeypatch.setenv("TZ", "Europe/Paris")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


# --------------------------------------------------------------------------- the parser

# (expression, since, until) read at NOW in Paris; None = open on that side
EXPRESSIONS = [
    ("yesterday", "2026-03-16T23:00", "2026-03-17T23:00"),
    ("hier", "2026-03-16T23:00", "2026-03-17T23:00"),
    ("today", "2026-03-17T23:00", "2026-03-18T23:00"),
    ("last week", "2026-03-08T23:00", "2026-03-15T23:00"),           # Monday 9 to Sunday 15
    ("la semaine dernière", "2026-03-08T23:00", "2026-03-15T23:00"),
    ("last month", "2026-01-31T23:00", "2026-02-28T23:00"),           # February
    ("le mois dernier", "2026-01-31T23:00", "2026-02-28T23:00"),
    ("last year", "2024-12-31T23:00", "2025-12-31T23:00"),
    ("l'année dernière", "2024-12-31T23:00", "2025-12-31T23:00"),
    ("two years ago", "2023-12-31T23:00", "2024-12-31T23:00"),        # the calendar year 2024
    ("il y a deux ans", "2023-12-31T23:00", "2024-12-31T23:00"),
    ("3 days ago", "2026-03-14T23:00", "2026-03-15T23:00"),           # that day
    ("il y a 3 jours", "2026-03-14T23:00", "2026-03-15T23:00"),
    ("in March 2024", "2024-02-29T23:00", "2024-03-31T22:00"),        # DST began on the 31st
    ("en mars 2024", "2024-02-29T23:00", "2024-03-31T22:00"),
    ("2024", "2023-12-31T23:00", "2024-12-31T23:00"),
    ("2024-03", "2024-02-29T23:00", "2024-03-31T22:00"),
    ("2024-03-05", "2024-03-04T23:00", "2024-03-05T23:00"),
    ("depuis juin", "2025-05-31T22:00", None),     # June 2026 is still ahead: last year's
    ("since June", "2025-05-31T22:00", None),
    ("depuis mars", "2026-02-28T23:00", None),     # this month: this year's
    ("between March and May 2024", "2024-02-29T23:00", "2024-05-31T22:00"),
    ("entre mars et mai 2024", "2024-02-29T23:00", "2024-05-31T22:00"),
    ("from 2023 to 2024", "2022-12-31T23:00", "2024-12-31T23:00"),
    ("between November and February 2024", "2023-10-31T23:00", "2024-02-29T23:00"),
    ("du 3 au 5 mars 2024", "2024-03-02T23:00", "2024-03-05T23:00"),
    ("before 2024", None, "2023-12-31T23:00"),
    ("après mars 2024", "2024-03-31T22:00", None),
]


@pytest.mark.parametrize("text, since, until", EXPRESSIONS, ids=[e[0] for e in EXPRESSIONS])
def test_each_expression_names_its_calendar_period(text, since, until):
    window = when.period(text, now=NOW, tz=PARIS)
    assert (window.since, window.until) == (since and z(since), until and z(until))


@pytest.mark.parametrize("now, text, since, until", [
    # just after midnight on a Monday: "last week" is the week that ended an hour ago
    ("2026-03-16T00:30", "last week", "2026-03-08T23:00", "2026-03-15T23:00"),
    ("2026-03-16T00:30", "yesterday", "2026-03-14T23:00", "2026-03-15T23:00"),
    # a Sunday evening: "last week" is not the week still running
    ("2026-03-15T23:59", "last week", "2026-03-01T23:00", "2026-03-08T23:00"),
    # "last month" on April 1st after the change to summer time: March, UTC+1 then UTC+2
    ("2026-04-01T00:10", "last month", "2026-02-28T23:00", "2026-03-31T22:00"),
    # New Year's Day: "last year" is the year that just ended
    ("2027-01-01T00:05", "last year", "2025-12-31T23:00", "2026-12-31T23:00"),
])
def test_windows_around_midnight_week_and_year_boundaries(now, text, since, until):
    window = when.period(text, now=now, tz=PARIS)
    assert (window.since, window.until) == (z(since), z(until))


def test_the_local_zone_is_the_systems_and_TZ_is_honoured(tz_paris):
    window = when.period("2024-07-14")           # summer: UTC+2
    assert (window.since, window.until) == (z("2024-07-13T22:00"), z("2024-07-14T22:00"))
    assert when.local_date("2024-07-13T22:30:00.000000Z") == "2024-07-14"


@pytest.mark.parametrize("question, said, rest", [
    ("what did I decide last week about the garden?", "last week",
     "what did I decide about the garden?"),
    ("Qu'ai-je commandé en mai 2023 ?", "en mai 2023", "Qu'ai-je commandé ?"),
    ("Qu'est-ce que j'ai fait hier ?", "hier", "Qu'est-ce que j'ai fait ?"),
    ("what did I do between March and May 2024?", "between March and May 2024",
     "what did I do ?"),
    ("Quels livres depuis juin ?", "depuis juin", "Quels livres ?"),
])
def test_a_question_s_time_expression_is_found_read_and_taken_out(question, said, rest):
    found = when.find(question, now=NOW, tz=PARIS)
    assert found is not None and found.text == said and found.rest == rest
    assert found.window.from_query == said and (found.window.since or found.window.until)


@pytest.mark.parametrize("question", [
    "which phone plan do I have now?", "Combien de RAM a le NiPoGi AM06PRO ?",
    "May I ask what the plan is?", "la mission sur Mars", "Quel GPU, la RTX 2080 ?",
    "What port does the server use, 8080?",
])
def test_questions_without_a_time_expression_have_no_window(question):
    assert when.find(question, now=NOW, tz=PARIS) is None


@pytest.mark.parametrize("args, message", [
    ({"since": "someday"}, "--since 'someday' is not a date or a time expression"),
    ({"until": "2024-13-45"}, "--until '2024-13-45' is not a date"),
    ({"since": "2025", "until": "2024"}, "--until '2024' ends before --since '2025' starts"),
])
def test_a_when_that_cannot_be_read_is_one_line_naming_the_option(args, message):
    with pytest.raises(ForgeError) as e:
        when.options(**args, now=NOW, tz=PARIS)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_stored_times_from_iso_text(tz_paris):
    assert when.to_stored("2024-03-05") == z("2024-03-05T11:00")   # a date: noon, local
    assert when.to_stored("2024-03-05T14:30") == z("2024-03-05T13:30")
    assert when.to_stored("2024-03-05T14:30:00+05:00") == z("2024-03-05T09:30")
    assert when.to_stored("2024-03-05T14:30:00Z") == z("2024-03-05T14:30")
    with pytest.raises(ForgeError, match="--at 'last tuesday' is not an ISO 8601"):
        when.to_stored("last tuesday", what="--at")


def _imports(code: str) -> set[str]:
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", code],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return {line.rsplit("|", 1)[1].strip().split(".")[0] for line in proc.stderr.splitlines()
            if line.startswith("import time:") and "|" in line}


def test_dateparser_is_imported_only_for_a_question_that_names_a_time():
    """The grammar's cheap first look (a set of words) keeps dateparser (~45 ms to import, more
    for its first reading) off a question with no time expression."""
    read = ("from forge.core import when; "
            "print(when.find({!r}, now='2026-03-18T15:00'))")
    assert "dateparser" not in _imports(read.format("Combien de RAM a le NiPoGi ?"))
    assert "dateparser" in _imports(read.format("Qu'ai-je fait hier ?"))   # the probe works
    assert "dateparser" not in _imports("from forge.core import when; "
                                        "print(when.period('2024-03-05'))")   # ISO: stdlib


def test_forge_help_and_a_recall_with_no_time_never_import_dateparser(runner):
    from test_cli import _filled_stores, imported_modules

    assert "dateparser" not in imported_modules("--help")
    _filled_stores(runner)
    assert "dateparser" not in imported_modules("recall", "combien de RAM a le NAS ?")
    assert "dateparser" in imported_modules("recall", "combien de RAM en mai 2023 ?")


# --------------------------------------------------------------------------- the store

DIM = 8


def _unit(seed: int):
    import numpy as np

    v = np.random.default_rng(seed).normal(size=DIM).astype(np.float32)
    return v / np.linalg.norm(v)


def _filled_backend(backend_name, settings):
    """40 entries near the query vector, created in 2025 (ids 1-40), and 15 far from it
    created in March 2024 (ids 41-55): a window on March 2024 holds only far entries."""
    import numpy as np

    from forge.store import postgres, sqlite
    from forge.store.common import NewEntry

    opened = (postgres.open_backend(settings, mode="write") if backend_name == "postgres"
              else sqlite.open_backend(settings, mode="write"))
    query = _unit(0)
    with opened.transaction():
        opened.ensure_vectors(DIM)
        for i in range(40):
            near = query + 0.05 * _unit(100 + i)
            opened.insert_entry(NewEntry("fact", f"nas disk note {i}", None, "remember", None,
                                         f"2025-0{1 + i % 9}-10T10:00:00.000000Z"),
                                f"k{i}", (near / np.linalg.norm(near)).astype(np.float32),
                                "2026-01-01T00:00:00.000000Z")
        for i in range(15):
            far = -query + 0.05 * _unit(200 + i)
            opened.insert_entry(NewEntry("fact", f"garden nas note {i}", None, "remember", None,
                                         f"2024-03-{10 + i}T10:00:00.000000Z"),
                                f"f{i}", (far / np.linalg.norm(far)).astype(np.float32),
                                "2026-01-01T00:00:00.000000Z")
        for i in range(55):
            opened.write_sparse(i + 1, [(7, 1.0 + i / 100), (9, 0.5)])
    return opened, query


@pytest.mark.parametrize("backend_name", ["sqlite", pytest.param("postgres",
                                                                 marks=pytest.mark.postgres)])
def test_the_window_is_inside_each_channels_query_on_both_backends(backend_name, settings,
                                                                   request, monkeypatch):
    """k rows of the window come back though all 40 nearest entries lie outside it: the
    filter is part of the KNN, the word query and the latent-term query (a cut afterwards of
    the 30 best would leave none)."""
    if backend_name == "postgres":
        monkeypatch.setenv("FORGE_DATABASE_URL", request.getfixturevalue("postgres_url"))
        from forge.core.settings import load_settings
        settings = load_settings()
    b, query = _filled_backend(backend_name, settings)
    try:
        march = {"since": z("2024-02-29T23:00"), "until": z("2024-03-31T22:00")}
        inside = set(range(41, 56))
        for rows in (b.search_vector(query, k=10, **march),
                     b.search_vector(query, k=10, project=None, kind="fact", **march),
                     b.search_words(["nas"], k=10, **march),
                     b.search_sparse([(7, 1.0)], k=10, **march)):
            assert len(rows) == 10 and {i for i, _ in rows} <= inside, rows
        assert not {i for i, _ in b.search_vector(query, k=10)} & inside   # the probe: far
        assert b.search_vector(query, k=10, since=z("2027-01-01T00:00")) == []
        entries, total = b.list_page(since=march["since"], until=march["until"], limit=100)
        assert total == 15 and {e.id for e in entries} == inside
        assert b.counts_by_kind(**march) == {"fact": 15}
    finally:
        b.close()


def test_the_vector_copy_of_a_large_store_filters_inside_its_scan_too(settings, monkeypatch):
    """From RECALL_SCAN_MIN_ENTRIES entries the vector channel scans the memory-mapped copy:
    the window's ids are kept before the top k, as the project filter is."""
    from forge.core.settings import load_settings

    monkeypatch.setenv("RECALL_SCAN_MIN_ENTRIES", "10")
    b, query = _filled_backend("sqlite", load_settings())
    try:
        from forge.store import vector_scan

        march = {"since": z("2024-02-29T23:00"), "until": z("2024-03-31T22:00")}
        scanned = b.search_vector(query, k=10, **march)
        assert vector_scan.sidecar_path(b.path).exists()   # the copy answered
        assert len(scanned) == 10 and {i for i, _ in scanned} <= set(range(41, 56))
        monkeypatch.setattr(vector_scan, "knn", lambda *a, **k: None)   # vec0's answer
        assert [i for i, _ in b.search_vector(query, k=10, **march)] == [i for i, _ in scanned]
    finally:
        b.close()
