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
    "What port does the server use, 8080?", "What present did I buy for May?",
    "What is planned in December 2026?",   # a period that has not begun: a plan, not a window
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


# --------------------------------------------------------------------------- when it happened

def _remember(runner, *args: str) -> int:
    result = invoke(runner, "remember", *args, "--json")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)["id"]


def _entry(runner, entry_id: int) -> dict:
    return json.loads(invoke(runner, "memory", "show", str(entry_id), "--json").stdout)


def test_remember_at_dates_the_entry_and_keeps_the_real_write_time(runner, tz_paris):
    entry_id = _remember(runner, "fact", "J'ai acheté un NAS Synology", "--at", "2024-03-05")
    entry = _entry(runner, entry_id)
    assert entry["created"] == z("2024-03-05T11:00")          # noon, Paris time
    assert entry["updated"] > "2026" and entry["events"][0]["at"] > "2026"   # written now
    assert "created 2024-03-05T11:00:00.000000Z" in invoke(runner, "memory", "show",
                                                            str(entry_id)).stdout
    later = _remember(runner, "fact", "Le NAS est branché", "--at", "2024-03-05T23:30+00:00")
    assert _entry(runner, later)["created"] == z("2024-03-05T23:30")


@pytest.mark.parametrize("args, message", [
    (["--at", "yesterdayish"], "--at 'yesterdayish' is not an ISO 8601 date or datetime"),
    (["--at", "2024-02-30"], "--at '2024-02-30' is not an ISO 8601 date or datetime"),
])
def test_a_bad_at_is_one_line_and_writes_nothing(runner, args, message):
    result = invoke(runner, "remember", "fact", "rien", *args)
    assert result.exit_code == 1 and message in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert invoke(runner, "memory", "ls", "--nl").stdout == ""


def test_export_then_remember_batch_keeps_each_entrys_date(runner, tmp_path, monkeypatch):
    _remember(runner, "decision", "Garder le vieux routeur", "-p", "homelab", "--at",
              "2023-06-01T08:00:00Z")
    _remember(runner, "todo", "Changer le disque 2", "--at", "2024-01-15T09:30:00Z")
    exported = invoke(runner, "memory", "export").stdout
    assert '"created": "2023-06-01T08:00:00.000000Z"' in exported
    monkeypatch.setenv("FORGE_DATA_DIR", str(tmp_path / "other"))
    path = tmp_path / "m.jsonl"
    path.write_text(exported, encoding="utf-8")
    assert invoke(runner, "remember", "--batch", str(path)).exit_code == 0
    copied = json.loads(invoke(runner, "memory", "ls", "--json").stdout)["entries"]
    assert [(e["kind"], e["project"], e["content"], e["created"]) for e in copied] == [
        ("decision", "homelab", "Garder le vieux routeur", z("2023-06-01T08:00")),
        ("todo", None, "Changer le disque 2", z("2024-01-15T09:30"))]
    bad = invoke(runner, "remember", "--batch", "-",
                 input='{"content": "ok"}\n{"content": "x", "created": "mardi"}\n')
    assert bad.exit_code == 1 and "--batch line 2" in bad.stderr and '"created"' in bad.stderr
    assert len(json.loads(invoke(runner, "memory", "ls", "--json").stdout)["entries"]) == 2


def test_an_imported_2024_conversation_says_2024_in_show_recall_and_the_chats_lines(
        runner, tmp_path, tz_paris):
    """Done-when row: the archive entry of an imported exchange is dated by its first
    message, not by the day `--compact` ran."""
    from forge.chat.graphs.recall import synthesis_messages
    from forge.core.settings import load_settings
    from forge.recall import rank
    from forge.recall.hot_memory import HotBlock
    from forge.store import rag

    records = [{"role": "user", "content": "J'ai acheté un NAS Synology DS224+ aujourd'hui.",
                "ts": "2024-05-12T18:02:00Z"},
               {"role": "assistant", "content": "Noté : un DS224+.", "ts": "2024-05-12T18:03:00Z"}]
    records += [{"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i}",
                 "ts": f"2024-06-{1 + i // 2:02d}T10:00:00Z"} for i in range(44)]
    path = tmp_path / "h.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in records), encoding="utf-8")
    assert invoke(runner, "history", "import", str(path), "--compact").exit_code == 0
    rows = json.loads(invoke(runner, "recall", "NAS Synology", "--json").stdout)["rows"]
    nas = next(r for r in rows if "DS224" in r["content"])
    assert nas["kind"] == "archive" and nas["created"] == z("2024-05-12T18:02")
    assert "created 2024-05-12T18:02:00.000000Z" in invoke(runner, "memory", "show",
                                                            str(nas["id"])).stdout
    table = invoke(runner, "recall", "NAS Synology").stdout
    assert any(line.startswith(f"{nas['id']} ") and "2024-05-12" in line
               for line in table.splitlines()), table
    with rag.open_store(load_settings(), mode="read") as store:
        found = rank.recall(store, "NAS Synology", limit=3)
    prompt = synthesis_messages(HotBlock(""), "Quel NAS ?", found.rows, today="2026-03-18")
    assert f"[archive, 2024-05-12] user: J'ai acheté un NAS" in prompt[1]["content"]


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_store_migrate_keeps_every_date(runner, tmp_path, backend, request):
    _remember(runner, "fact", "Le serveur a 8 Go de RAM", "--at", "2024-05-02T10:00:00Z")
    _remember(runner, "fact", "Le serveur a 24 Go de RAM")
    to = (request.getfixturevalue("postgres_url") if backend == "postgres"
          else f"sqlite:///{tmp_path / 'copy.db'}")
    assert invoke(runner, "store", "migrate", "--to", to).exit_code == 0
    before = json.loads(invoke(runner, "memory", "ls", "--json").stdout)["entries"]
    env = ({"FORGE_DATABASE_URL": to} if backend == "postgres"
           else {"RAG_DB_FILE": str(tmp_path / "copy.db")})
    after = json.loads(invoke(runner, "memory", "ls", "--json", env=env).stdout)["entries"]
    assert [(e["id"], e["created"], e["updated"]) for e in after] == \
        [(e["id"], e["created"], e["updated"]) for e in before]
    assert after[0]["created"] == z("2024-05-02T10:00")


# --------------------------------------------------------------------------- time in a recall

@pytest.fixture
def dated(runner, monkeypatch, tz_paris):
    """A store written the way people fill one: facts from several years, ids not in date
    order, two facts that changed; "now" is NOW (FORGE_NOW) in Paris."""
    monkeypatch.setenv("FORGE_NOW", NOW)
    ids = {}
    for key, kind, text, at in [
        ("ram_new", "fact", "Le serveur a maintenant 24 Go de RAM", "2025-02-10"),
        ("garden", "decision", "Planter les tomates au fond du jardin", "2026-03-11"),
        ("ram_old", "fact", "Le serveur a 8 Go de RAM", "2024-05-02"),
        ("plan_new", "fact", "mon forfait mobile est maintenant chez Sosh", "2025-09-01"),
        ("mower", "decision", "Garden: buy a robot mower for the lawn", "2025-06-20"),
        ("plan_old", "fact", "mon forfait mobile est chez Bouygues", "2023-01-05"),
        ("order", "fact", "J'ai commandé un onduleur Eaton pour le NAS", "2023-05-14"),
        ("shed", "decision", "Repaint the garden shed green", "2024-09-03"),
    ]:
        ids[key] = _remember(runner, kind, text, "--at", at)
    return ids


def _recall(runner, *args: str) -> dict:
    result = invoke(runner, "recall", *args, "--json")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_a_time_in_the_question_sets_the_window_and_leaves_the_word_channel(runner, dated):
    doc = _recall(runner, "what did I decide last week about the garden?")
    assert doc["time"]["from_query"] == "last week"
    assert (doc["time"]["since"], doc["time"]["until"]) == (z("2026-03-08T23:00"),
                                                            z("2026-03-15T23:00"))
    assert [r["id"] for r in doc["rows"]] == [dated["garden"]]
    assert "week" not in doc["admitted_words"] and "last" not in doc["admitted_words"]
    french = _recall(runner, "Qu'ai-je commandé en mai 2023 ?")
    assert french["time"]["from_query"] == "en mai 2023"
    # what may tell of May 2023: said in it first, then what was said after it or in the
    # fortnight before it; nothing said long before (January's phone plan)
    assert french["time"]["searched"] == {"since": z("2023-04-16T22:00"), "until": None}
    ids = [r["id"] for r in french["rows"]]
    assert ids[0] == dated["order"] and dated["plan_old"] not in ids
    assert set(ids) == set(dated.values()) - {dated["plan_old"]}


def test_a_question_period_searches_what_tells_of_it_said_in_it_first(runner, dated):
    """An event is told during its period or later (and announced shortly before it): a
    question's period does not hide a later note that tells of it, and what was said in the
    period still comes first."""
    told = _remember(runner, "fact", "Ce que j'ai commandé pour le NAS est arrivé", "--at",
                     "2023-06-20")
    question = "Qu'est-ce que j'ai commandé pour le NAS en mai 2023 ?"
    doc = _recall(runner, question)
    ids = [r["id"] for r in doc["rows"]]
    assert ids[:2] == [dated["order"], told], ids
    assert _recall(runner, question, "--no-time")["rows"][0]["id"] == told
    assert all(r["created"] >= doc["time"]["searched"]["since"] for r in doc["rows"])
    # "before August 3" bounds nothing it searches; the rows said before the date come first
    doc = _recall(runner, "what did I decide before 2024-10-01 about the shed?")
    assert doc["time"]["searched"] is None and doc["rows"][0]["id"] == dated["shed"]


def test_no_time_reads_the_words_as_words(runner, dated):
    doc = _recall(runner, "what did I decide last week about the garden?", "--no-time")
    assert doc["time"] is None and len(doc["rows"]) == 8


def test_an_empty_window_answers_no_row_and_says_how_many_it_left_out(runner, dated):
    later = {"FORGE_NOW": "2026-06-18T15:00:00"}   # three months after the last entry
    result = invoke(runner, "recall", "Qu'ai-je fait hier au jardin ?", env=later)
    assert result.exit_code == 0 and result.stdout == ""
    assert ('time "hier": 2026-06-17 to 2026-06-18 (until excluded); rows said in it first, '
            'then others said from 2026-06-03 on') in result.stderr
    assert "no entry in this window; 8 row(s) outside it match" in result.stderr
    doc = json.loads(invoke(runner, "recall", "Qu'ai-je fait hier au jardin ?", "--json",
                            env=later).stdout)
    assert doc["rows"] == [] and doc["time"]["excluded"] == 8
    strict = invoke(runner, "recall", "jardin", "--since", "hier")
    assert strict.stdout == "" and 'time window 2026-03-17 to now' in strict.stderr
    assert "no entry in this window; 8 row(s) outside it match" in strict.stderr


def test_since_and_until_options_and_memory_ls(runner, dated):
    doc = _recall(runner, "serveur RAM", "--since", "2024", "--until", "2024")
    assert [r["id"] for r in doc["rows"]][:1] == [dated["ram_old"]]
    assert {r["created"][:4] for r in doc["rows"]} == {"2024"}
    assert doc["time"]["from_query"] is None
    listed = json.loads(invoke(runner, "memory", "ls", "--since", "last year", "--json").stdout)
    assert {e["id"] for e in listed["entries"]} == {dated["ram_new"], dated["plan_new"],
                                                    dated["mower"], dated["garden"]}
    assert listed["total"] == 4 and listed["by_kind"] == {"decision": 2, "fact": 2}
    bad = invoke(runner, "recall", "x", "--since", "someday")
    assert bad.exit_code == 1 and "--since 'someday' is not a date" in bad.stderr


def test_the_newer_of_two_facts_comes_first_and_the_older_says_so(runner, dated):
    for question, new, old in [("combien de RAM a le serveur ?", "ram_new", "ram_old"),
                               ("chez quel opérateur est mon forfait mobile ?", "plan_new",
                                "plan_old")]:
        doc = _recall(runner, question)
        ids = [r["id"] for r in doc["rows"]]
        assert ids.index(dated[new]) < ids.index(dated[old]), ids
        older = next(r for r in doc["rows"] if r["id"] == dated[old])
        assert older["newer"] == dated[new] and doc["time"] is None
        assert "newer" not in next(r for r in doc["rows"] if r["id"] == dated[new])
        table = invoke(runner, "recall", question).stdout
        assert f"(older: #{dated[new]} is newer)" in table
    # the hot block and the chat's lines carry each entry's date
    hot = invoke(runner, "memory", "hot").stdout
    assert "- [fact, 2024-05-02] Le serveur a 8 Go de RAM" in hot


@pytest.mark.parametrize("question", [
    "combien de RAM avait le serveur avant ?", "quelle était l'ancienne RAM du serveur ?",
    "How much RAM did the server have before?", "what RAM did the server use to have?",
    "la RAM précédente du serveur ?", "what was my old server's RAM?"])
def test_a_question_about_the_past_gets_the_older_of_two_facts_first(runner, dated, question):
    """A past word in the question (before, used to, avant, ancien, précédent…): the older
    value first, still marked as the older, and the JSON says the order was the past's."""
    doc = _recall(runner, question)
    ids = [r["id"] for r in doc["rows"]]
    assert ids.index(dated["ram_old"]) < ids.index(dated["ram_new"]), (question, ids)
    older = next(r for r in doc["rows"] if r["id"] == dated["ram_old"])
    assert older["newer"] == dated["ram_new"] and doc["order"] == "past"


def test_a_question_without_a_past_word_keeps_the_newer_first(runner, dated):
    for question in ("combien de RAM a le serveur ?", "What RAM does the server have first thing?"
                     .replace(" first thing", ""), "how old is the server's RAM?"):
        doc = _recall(runner, question)
        ids = [r["id"] for r in doc["rows"]]
        assert ids.index(dated["ram_new"]) < ids.index(dated["ram_old"]), (question, ids)
        assert "order" not in doc


def test_as_of_answers_as_the_store_stood_then(runner, dated):
    doc = _recall(runner, "combien de RAM a le serveur ?", "--as-of", "2024-12")
    ids = [r["id"] for r in doc["rows"]]
    assert dated["ram_old"] in ids and dated["ram_new"] not in ids
    assert all(r["created"] < z("2024-11-30T23:00") for r in doc["rows"])
    assert doc["time"]["as_of"] == z("2024-12-31T23:00")
    # a replacement made later does not hide the entry as it stood then
    invoke(runner, "memory", "supersede", str(dated["ram_old"]), "--by", str(dated["ram_new"]))
    now_ids = [r["id"] for r in _recall(runner, "combien de RAM a le serveur ?")["rows"]]
    assert dated["ram_old"] not in now_ids
    then = _recall(runner, "combien de RAM a le serveur ?", "--as-of", "2024")["rows"]
    assert dated["ram_old"] in [r["id"] for r in then]


@pytest.mark.parametrize("older, newer, changed", [
    # one value changed, said so: names included
    ("mon forfait mobile est chez Bouygues", "mon forfait mobile est maintenant chez Sosh", True),
    ("Ma voiture est une Renault Clio 4", "Ma voiture est maintenant une Peugeot 208", True),
    ("My gym membership is at Basic-Fit", "My gym membership is now at Fitness Park", True),
    ("The home server's IP address is 192.168.1.10",
     "The home server's IP address is now 192.168.1.20", True),
    ("Opérateur : Bouygues", "Opérateur : Sosh maintenant", True),
    # what `forge memory conflicts` lists: a negation, two values for the same thing
    ("Le serveur a 8 Go de RAM", "Le serveur a maintenant 24 Go de RAM", True),
    ("I drink coffee every morning", "I no longer drink coffee every morning", True),
    ("Laptop: ThinkPad T14, 16 GB RAM, Debian", "ThinkPad T14: 32 GB RAM after the upgrade", True),
    ("Home server: Proxmox, 128 GB RAM", "Serveur maison : Proxmox, 64 Go de RAM", True),
    # not the same thing, or not a change
    ("The NAS is in the garage", "The car is in the garage", False),
    ("The NAS is in the garage", "The car is now in the garage", False),   # another subject
    ("I like coffee", "I like tea", False),
    ("My internet provider is Free", "My internet provider is Orange", False),   # both may be
    ("Decided to repaint the garden shed green", "Planted the tomatoes near the shed", False),
    ("Le NAS a 32 Go de RAM", "Le NAS a 32 Go de RAM et un SSD", False),
    ("Camera #2 covers the garden", "Camera #3 covers the garden", False),        # numbering
    ("Le serveur numéro 3 est dans la baie", "Le serveur numéro 4 est maintenant dans la baie",
     False),
    ("Desktop: Ryzen tower, 64 GB RAM, Fedora", "Desktop: Mac mini M2, 16 GB RAM, macOS", False),
    ("Le Raspberry Pi a 8 Go de RAM", "Mac mini, never 8 GB RAM", False),        # two names
    ("Laptop: ThinkPad T14, 16 GB RAM", "Laptop: now ThinkPad X13, 16 GB RAM", False),   # head
    ("RAM : 8 Go", "Le serveur a 64 Go de RAM", False),            # which machine's RAM?
    ("The laptop has 16 GB RAM", "The desktop has 64 GB RAM", False),
])
def test_which_two_rows_state_a_changed_fact(older, newer, changed):
    """Recall's newer-first and `forge memory conflicts` read one definition of the same thing
    (core/facts.py); newer-first adds one value said to have changed."""
    from forge.core import facts
    from forge.store.common import Entry

    a = Entry(1, "fact", None, older, "remember", {}, z("2024-01-01T10:00"), "", None)
    b = Entry(2, "fact", None, newer, "remember", {}, z("2025-01-01T10:00"), "", None)
    seen = facts.evidence([older, newer])
    assert facts.changed_fact(facts.read_side(a, seen), facts.read_side(b, seen)) is changed
    # newer_first reads in full only the pairs this cheap reading lets through
    assert facts.held(older).may_change(facts.held(newer)) or not changed


def test_newer_first_marks_what_memory_conflicts_lists_and_a_value_said_to_change(runner,
                                                                                  monkeypatch):
    """On one store, the rows newer-first marks are the pairs `memory conflicts` lists, and the
    value said to have changed; numbering and two named things are marked by neither."""
    monkeypatch.setenv("FORGE_NOW", NOW)
    ids = {key: _remember(runner, "fact", text, "--at", at) for key, text, at in [
        ("t14_new", "ThinkPad T14: 32 GB RAM after the upgrade", "2025-03-01"),
        ("t14_old", "Laptop: ThinkPad T14, 16 GB RAM, Debian", "2024-02-01"),
        ("cam2", "Camera #2 covers the garden", "2024-04-01"),
        ("cam3", "Camera #3 covers the garden", "2025-04-01"),
        ("ryzen", "Desktop: Ryzen tower, 64 GB RAM, Fedora", "2024-05-01"),
        ("mac", "Desktop: Mac mini M2, 16 GB RAM, macOS", "2025-05-01"),
        ("isp_old", "My internet provider is Free", "2023-01-01"),
        ("isp_new", "My internet provider is now Orange", "2025-01-01"),
    ]}
    listed = json.loads(invoke(runner, "memory", "conflicts", "--json").stdout)["conflicts"]
    assert [c["ids"] for c in listed] == [[ids["t14_old"], ids["t14_new"]]]   # older in time first
    marked = {}
    for question in ("ThinkPad T14 RAM", "camera garden", "desktop RAM", "internet provider"):
        for row in _recall(runner, question, "--limit", "8")["rows"]:
            if row.get("newer"):
                marked[row["id"]] = row["newer"]
    assert marked == {ids["t14_old"]: ids["t14_new"], ids["isp_old"]: ids["isp_new"]}


def test_the_chats_lines_say_which_row_is_newer_and_an_empty_window_is_said():
    from forge.chat.graphs.recall import synthesis_messages
    from forge.recall.hot_memory import HotBlock
    from forge.store.common import Entry
    from forge.store.search_results import SearchRow

    old = Entry(3, "fact", None, "Le serveur a 8 Go de RAM", "remember", {},
                z("2024-05-02T10:00"), "", None)
    row = SearchRow(old, "vector", 0.4, None, newer=7)
    user = synthesis_messages(HotBlock(""), "RAM ?", [row], today="2026-03-18")[1]["content"]
    assert "- [fact, 2024-05-02] Le serveur a 8 Go de RAM (#3; older: #7 is newer)" in user
    new = SearchRow(Entry(9, "fact", None, "Le serveur a 64 Go de RAM", "remember", {},
                          z("2025-02-10T10:00"), "", None), "replacement", None, None,
                    in_place_of=[3])
    user = synthesis_messages(HotBlock(""), "RAM ?", [new], today="2026-03-18")[1]["content"]
    assert "Le serveur a 64 Go de RAM (#9; replaced #3)" in user
    empty = synthesis_messages(HotBlock(""), "hier ?", [], today="2026-03-18",
                               time={"since": z("2026-03-16T23:00"),
                                     "until": z("2026-03-17T23:00")})[1]["content"]
    assert "No entry dated from" in empty and "do not answer from entries of other dates" in empty


def test_get_search_and_memory_take_since_until_and_answer_the_window(runner, dated):
    from test_serve import client_for

    client = client_for()
    doc = client.get("/search", params={"q": "serveur RAM", "since": "2024",
                                        "until": "2024"}).json()
    assert {r["created"][:4] for r in doc["rows"]} == {"2024"} and doc["time"]["since"]
    asked = client.get("/search", params={"q": "Qu'ai-je commandé en mai 2023 ?"}).json()
    assert asked["time"]["from_query"] == "en mai 2023"
    ids = [r["id"] for r in asked["rows"]]
    assert ids[0] == dated["order"] and dated["plan_old"] not in ids
    words = client.get("/search", params={"q": "Qu'ai-je commandé en mai 2023 ?",
                                          "time": "false"}).json()
    assert words["time"] is None and len(words["rows"]) == 8
    bad = client.get("/search", params={"q": "x", "since": "someday"})
    assert bad.status_code == 400 and "since 'someday' is not a date" in bad.json()["error"]
    listed = client.get("/memory", params={"since": "2025-06", "until": "2025"}).json()
    assert {e["id"] for e in listed["entries"]} == {dated["plan_new"], dated["mower"]}


def test_the_mcp_tools_take_since_until(runner, dated):
    from forge.core.settings import load_settings
    from forge.mcp import documents

    settings = load_settings()
    doc = documents.recall(settings, "operateur forfait mobile", since="2025", until="2025")
    assert doc["rows"][0]["id"] == dated["plan_new"]
    assert doc["rows"][0]["created"] == "2025-09-01T10:00:00.000000Z"
    assert {r["created"][:4] for r in doc["rows"]} == {"2025"} and len(doc["rows"]) == 3
    listed = documents.memory_list(settings, since="l'année dernière")   # 2025 on
    assert {e["id"] for e in listed["entries"]} == {dated["ram_new"], dated["plan_new"],
                                                    dated["mower"], dated["garden"]}
    with pytest.raises(ForgeError, match="since 'bientôt' is not a date"):
        documents.recall(settings, "x", since="bientôt")
    # a client's argument is checked as sent (no coercion of true, 2024 or a list into a time)
    for bad in (True, 2024, ["2024"]):
        with pytest.raises(ForgeError, match="is not text") as refused:
            documents.memory_list(settings, until=bad)
        assert "\n" not in str(refused.value)


def _linked_row(entry_id: int, created: str, by: int | None = None):
    from forge.store.common import REPLACE, Entry
    from forge.store.search_results import SearchRow

    entry = Entry(entry_id, "fact", None, f"note {entry_id}", "remember", {}, z(created),
                  z(created), by, REPLACE if by else None)
    return SearchRow(entry, "vector", 0.1, None, newer=by)


def test_a_chain_is_ordered_by_its_links_not_by_the_notes_dates():
    """Along 1 -> 2 -> 3 (#3 true now), "before" asks for what #3 replaced and "first" for
    where the chain starts, whatever the dates say: a replacement written with an earlier
    `--at`, or notes imported at one time, linked against their order."""
    from forge.recall import timeline

    for dates in (("2024-01-01T10:00", "2022-01-01T10:00", "2025-01-01T10:00"),
                  ("2025-05-05T10:00",) * 3):
        rows = [_linked_row(3, dates[2]), _linked_row(2, dates[1], by=3),
                _linked_row(1, dates[0], by=2)]
        timeline.replaced_first(rows)
        assert [r.entry.id for r in rows] == [2, 1, 3]
        timeline.replaced_first(rows, oldest=True)
        assert [r.entry.id for r in rows] == [1, 2, 3]


def test_a_cycle_of_links_ends_the_past_order():
    """The write path refuses a cycle, but a shell UPDATE or an old file can hold one: the
    order of a question about the past still ends, the rows all kept."""
    import threading

    from forge.recall import timeline

    rows = [_linked_row(1, "2024-01-01T10:00", by=2), _linked_row(2, "2024-02-01T10:00", by=1)]
    done = threading.Thread(target=timeline.replaced_first, args=(rows,), daemon=True)
    done.start()
    done.join(5)
    assert not done.is_alive() and sorted(r.entry.id for r in rows) == [1, 2]


def test_a_note_linked_to_itself_keeps_one_row():
    from forge.recall import timeline

    rows = [_linked_row(5, "2024-01-01T10:00", by=6), _linked_row(6, "2024-02-01T10:00", by=6)]
    timeline.replaced_first(rows)
    assert sorted(r.entry.id for r in rows) == [5, 6]
