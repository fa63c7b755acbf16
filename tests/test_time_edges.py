"""A time value at every door (remember --at, recall --since/--until/--as-of, memory ls, POST
/remember's `at`, GET /search and /memory, the MCP tools): one reading, the years 0001 to 9999
written with four digits, stored times that compare as text in time order, and one line naming
the argument for anything else, never a traceback, a 500 or an internal error."""
from __future__ import annotations

import asyncio
import json
import os
import re
import time
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from conftest import invoke, local_zone
from forge.core import when
from forge.core.errors import ForgeError
from forge.core.timestamps import FIRST, LAST, utc_text

STORED = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z")
FAR = "9999-12-31T12:00"      # a "now" with no tomorrow: every past or future day is today's past
PROPERTY = hsettings(max_examples=80, deadline=None, database=None,
                     suppress_health_check=[HealthCheck.too_slow])



@pytest.fixture
def paris():
    with local_zone("Europe/Paris"):
        yield


def outcome(fn, *args, **kwargs):
    """("ok", value) or ("refused", message); any other exception fails the test."""
    try:
        return "ok", fn(*args, **kwargs)
    except ForgeError as e:
        return "refused", str(e)


def one_line(message: str, name: str) -> None:
    assert "\n" not in message and message.startswith(f"{name} "), message
    assert "bug in Forge" not in message and "Traceback" not in message


def arguments(name: str, value: str, prefix: str = "--"):
    """What the CLI, HTTP and MCP doors call with --since/--until/--as-of (timeline.arguments,
    the prefix naming the argument as each door spells it)."""
    from forge.core.settings import load_settings
    from forge.recall import timeline

    return timeline.arguments(load_settings(), **{name: value}, prefix=prefix)


# --------------------------------------------------------------------------- the campaign's cases

EDGES = ["9999-12-31T23:59:59-14:00", "0001-01-01T00:00:00+14:00", "9999-12-31", "0001",
         "9999", "0999", "0998", "0999-06-15"]


@pytest.mark.parametrize("value", EDGES)
@pytest.mark.parametrize("door", ["since", "until", "as_of"])
def test_the_calendars_edges_are_a_window_never_an_error(paris, value, door):
    """Each bound is a stored time with four digits, or open where the calendar ends first."""
    got = arguments(door, value)
    bounds = [got["as_of"]] if door == "as_of" else [got["window"].since, got["window"].until]
    for b in bounds:
        assert b is None or STORED.fullmatch(b), b


@pytest.mark.parametrize("value, expected", [
    # a moment before the first time a store holds: a since from it is open, an until empty
    ("0001-01-01T00:00:00+14:00", {"since": None, "until": FIRST, "as_of": FIRST}),
    # after the last: nothing is since it, everything is until it
    ("9999-12-31T23:59:59-14:00", {"since": LAST, "until": None, "as_of": LAST}),
    # the year 0001 in Paris (local mean time then, +0:09:21) starts before 0001-01-01T00:00Z
    ("0001", {"since": None, "until": "0001-12-31T23:50:39.000000Z"}),
    ("9999", {"since": "9998-12-31T23:00:00.000000Z", "until": "9999-12-31T23:00:00.000000Z"}),
    ("9999-12-31", {"since": "9999-12-30T23:00:00.000000Z",
                    "until": "9999-12-31T23:00:00.000000Z"}),
    ("0999", {"since": "0998-12-31T23:50:39.000000Z", "until": "0999-12-31T23:50:39.000000Z"}),
])
def test_each_edge_names_the_window_it_means(paris, value, expected):
    window = when.period(value)
    for side in ("since", "until"):
        assert getattr(window, side) == expected[side]
    if "as_of" in expected:
        assert when.as_of(value) == expected["as_of"]


@pytest.mark.parametrize("value, message", [
    ("9999-12-31T23:59:59-14:00", "is after today"),
    ("9999-12-31", "is after today"),
    ("0001-01-01T00:00:00+14:00", f"is before {FIRST}, the first time Forge stores"),
    ("0001", "names a year, not a day"),
    ("2024-03", "names a month, not a day"),
    ("20240305", "write the date with dashes (2024-03-05)"),
    ("٢٠٢٤-٠٣-٠٥", "write its digits 0-9"),
    ("２０２４-０３-０５", "write its digits 0-9"),
    ("999-06-15", "a year has four digits: 0999, not 999 (years 0001 to 9999)"),
    ("10000-01-01", "a year has four digits (years 0001 to 9999"),
    ("0000-06-15", "year 0 is out of range"),
    ("2024-02-30", "day is out of range for month"),
])
def test_at_refuses_in_one_line_what_it_cannot_store(paris, value, message):
    kind, said = outcome(when.to_stored, value, what="--at")
    assert kind == "refused" and message in said, said
    one_line(said, "--at")


def test_at_reads_a_date_as_noon_local_and_an_old_year_with_four_digits(paris):
    assert when.to_stored("0999-06-15") == "0999-06-15T11:50:39.000000Z"
    assert when.to_stored("2024-03-05") == "2024-03-05T11:00:00.000000Z"
    assert when.to_stored("0001-01-01") == "0001-01-01T11:50:39.000000Z"
    # today is accepted whatever its hour (noon, or a time later today), tomorrow is not
    today = datetime.now().date()
    assert when.to_stored(today.isoformat())
    assert when.to_stored(f"{today.isoformat()}T23:59")
    kind, said = outcome(when.to_stored, (today + timedelta(days=1)).isoformat(), what="--at")
    assert kind == "refused" and "after today" in said


@pytest.mark.parametrize("value, reason", [
    ("٢٠٢٤-٠٣-٠٥", "write its digits 0-9"), ("٢٠٢٤", "write its digits 0-9"),
    ("20240305", "write the date with dashes"), ("999", "a year has four digits"),
    ("10000", "a year has four digits"), ("0000", "year 0 is out of range"),
    ("2024-13", "month must be in 1..12"),
])
@pytest.mark.parametrize("door", ["since", "until", "as_of"])
def test_the_window_doors_refuse_what_at_refuses_and_say_why(paris, value, reason, door):
    name = {"as_of": "--as-of"}.get(door, f"--{door}")
    with pytest.raises(ForgeError) as refused:
        arguments(door, value)
    assert reason in str(refused.value)
    one_line(str(refused.value), name)


def test_stored_times_and_windows_are_written_with_four_digit_years():
    assert utc_text(datetime(999, 6, 15, 11, 50, 39)) == "0999-06-15T11:50:39.000000Z"
    assert utc_text(datetime(1, 1, 1)) == FIRST and utc_text(datetime.max) == LAST
    from forge.core import checks

    assert checks.epoch_time(-40000000000, "t") == "0702-06-15T00:53:20.000000Z"
    assert checks.iso_time("0999-06-15T10:00:00Z", "t") == "0999-06-15T10:00:00.000000Z"
    from forge.recall import timeline

    assert timeline.told(when.Window("0999-06-15T00:00:00.000000Z", None)).since == \
        "0999-06-01T00:00:00.000000Z"
    assert timeline.told(when.Window("0001-01-03T00:00:00.000000Z", None)) is None


# --------------------------------------------------------------------------- properties

def iso_text(moment: datetime, form: str, offset: timedelta | None, sep: str = "T") -> str:
    date = f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d}"
    if form == "date":
        return date
    clock = f"{moment.hour:02d}:{moment.minute:02d}"
    if form in ("seconds", "micro"):
        clock += f":{moment.second:02d}"
    if form == "micro":
        clock += f".{moment.microsecond:06d}"
    text = f"{date}{sep}{clock}"
    if offset is None:
        return text
    if offset == timedelta(0):
        return text + "Z"
    sign, size = ("-", -offset) if offset < timedelta(0) else ("+", offset)
    minutes = size // timedelta(minutes=1)
    return f"{text}{sign}{minutes // 60:02d}:{minutes % 60:02d}"


moments = st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime.max)
offsets = st.integers(min_value=-14 * 60, max_value=14 * 60).map(lambda m: timedelta(minutes=m))
forms = st.sampled_from(["minutes", "seconds", "micro"])


def oracle(moment: datetime, offset: timedelta) -> str | None:
    """The stored time of `moment` at `offset`, by plain arithmetic (None: outside the years
    0001 to 9999 in UTC)."""
    try:
        return utc_text(moment - offset)
    except OverflowError:
        return None


@PROPERTY
@given(moment=moments, offset=offsets, form=forms, sep=st.sampled_from(["T", " "]))
def test_a_datetime_with_an_offset_is_the_same_time_at_every_door(moment, offset, form, sep):
    text = iso_text(moment, form, offset, sep)
    typed = moment.replace(second=moment.second if form != "minutes" else 0,
                           microsecond=moment.microsecond if form == "micro" else 0)
    expected = oracle(typed, offset)
    kind, stored = outcome(when.to_stored, text, what="--at", now=FAR)
    window = when.period(text, what="--since")
    if expected is not None:
        assert (kind, stored) == ("ok", expected)
        assert window.since == window.until == expected == when.as_of(text)
        # a stored time read back (an export's "created", a store's own check) is itself
        assert when.to_stored(stored, what='"created"', now=FAR) == stored
    else:   # outside the range: refused as a point, the window open or empty on that side
        assert kind == "refused" and ("is before" in stored or "is after today" in stored)
        one_line(stored, "--at")
        before = typed.year < 5000
        assert (window.since, window.until) == ((None, FIRST) if before else (LAST, None))


@PROPERTY
@given(a=moments, b=moments, oa=offsets, ob=offsets)
def test_stored_times_compare_as_text_as_they_do_in_time(a, b, oa, ob):
    sa = when.to_stored(iso_text(a, "micro", oa), now=FAR) if oracle(a, oa) else None
    sb = when.to_stored(iso_text(b, "micro", ob), now=FAR) if oracle(b, ob) else None
    if sa is None or sb is None:
        return
    ta, tb = a - oa, b - ob
    assert (sa < sb, sa == sb) == (ta < tb, ta == tb)
    window = when.options(iso_text(a, "micro", oa), iso_text(b, "micro", ob), now=FAR) \
        if ta < tb else None
    if window is not None:   # [a, b): a is in it, b is not
        assert window.holds(sa) and not window.holds(sb)


ZONES = ["Europe/Paris", "Pacific/Kiritimati", "Pacific/Pago_Pago", "UTC"]


@pytest.mark.parametrize("zone", ZONES)
@PROPERTY
@given(day=st.dates(min_value=datetime(1, 1, 1).date(), max_value=datetime.max.date()),
       grain=st.sampled_from(["day", "month", "year"]))
def test_any_date_month_or_year_is_a_window_holding_that_days_note(zone, day, grain):
    """In any local zone, over the whole calendar: the window of a day, month or year has
    four-digit bounds in order, and the note `--at` writes for a day of it falls inside it
    (a date alone is noon local, which is that day)."""
    text = {"day": day.isoformat(), "month": day.isoformat()[:7], "year": day.isoformat()[:4]}[grain]
    with local_zone(zone):
        window = when.period(text, what="--since")
        for bound in (window.since, window.until):
            assert bound is None or STORED.fullmatch(bound)
        if window.since is not None and window.until is not None:
            assert window.since < window.until
        kind, stored = outcome(when.to_stored, day.isoformat(), what="--at", now=FAR)
        if kind == "refused":   # noon local is outside the years 0001-9999 in UTC
            assert day.year in (1, 9999), stored
            one_line(stored, "--at")
            return
        assert window.holds(stored), (text, window, stored)
        assert when.local_date(stored) == day.isoformat()


def _translated(text: str, zero: str) -> str:
    return "".join(chr(ord(zero) + int(c)) if c.isdigit() else c for c in text)


outside = st.one_of(
    # a year not written with four digits
    st.builds(lambda y, m, d: f"{y}-{m:02d}-{d:02d}", st.integers(1, 999), st.integers(1, 12),
              st.integers(1, 28)),
    st.builds(lambda y, m, d: f"{y}-{m:02d}-{d:02d}", st.integers(10000, 10 ** 7),
              st.integers(1, 12), st.integers(1, 28)),
    st.builds(lambda y: f"{y}", st.integers(10000, 10 ** 9)),
    # a year 0, a month, a day or an hour that does not exist
    st.builds(lambda m, d: f"0000-{m:02d}-{d:02d}", st.integers(1, 12), st.integers(1, 28)),
    st.builds(lambda y, m: f"{y:04d}-{m:02d}", st.integers(1, 9999),
              st.one_of(st.just(0), st.integers(13, 99))),
    st.builds(lambda y, d: f"{y:04d}-02-{d:02d}", st.integers(1, 9999), st.integers(30, 99)),
    st.builds(lambda y, h: f"{y:04d}-01-01T{h:02d}:00", st.integers(1, 9999), st.integers(24, 99)),
    # an offset of a day or more
    st.builds(lambda y, h: f"{y:04d}-06-01T12:00+{h:02d}:00", st.integers(1, 9999),
              st.integers(24, 99)),
    # digits of another script, the basic format
    st.builds(_translated, st.dates().map(lambda d: d.isoformat()),
              st.sampled_from(["٠", "۰", "०", "０", "๐"])),
    st.dates().map(lambda d: d.strftime("%Y%m%d") if d.year >= 1000 else f"{d.year:04d}0101"),
)


@PROPERTY
@given(text=outside)
def test_anything_outside_the_range_is_one_line_at_every_door(text):
    kind, said = outcome(when.to_stored, text, what="--at", now=FAR)
    assert kind == "refused", (text, said)
    one_line(said, "--at")
    for door, name in (("since", "--since"), ("until", "--until"), ("as_of", "--as-of")):
        kind, said = outcome(arguments, door, text)
        assert kind == "refused", (text, door, said)
        one_line(said, name)


@PROPERTY
@given(text=st.one_of(outside, st.text(max_size=30),
                      st.builds(iso_text, moments, forms, st.one_of(st.none(), offsets))))
def test_the_three_doors_agree_on_every_value(text):
    """The CLI (--since), HTTP and MCP (since) read a value alike: the same window, or the same
    refusal naming the argument as each spells it; --at and `at` alike."""
    for door in ("since", "until", "as_of"):
        cli = outcome(arguments, door, text, "--")
        http_mcp = outcome(arguments, door, text, "")
        assert cli[0] == http_mcp[0], (text, cli, http_mcp)
        if cli[0] == "ok":
            assert repr(cli[1]) == repr(http_mcp[1])
        else:
            spelled = {"as_of": "--as-of"}.get(door, f"--{door}")   # the CLI's; HTTP, MCP: door
            assert cli[1] == spelled + http_mcp[1].removeprefix(door)
            one_line(cli[1], spelled)
            one_line(http_mcp[1], door)
    at_cli = outcome(when.to_stored, text, what="--at", now=FAR)
    at_api = outcome(when.to_stored, text, what="at", now=FAR)
    assert at_cli[0] == at_api[0] and (at_cli[0] == "refused" or at_cli == at_api)


# --------------------------------------------------------------------------- the real doors

def _remember(runner, text: str, at: str) -> int:
    result = invoke(runner, "remember", "fact", text, "--at", at, "--json")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)["id"]


def _recalled(runner, *args: str) -> set[int]:
    result = invoke(runner, "recall", "lanterne", *args, "--json")
    assert result.exit_code == 0, result.stderr
    return {r["id"] for r in json.loads(result.stdout)["rows"]}


def _listed(runner, *args: str) -> set[int]:
    result = invoke(runner, "memory", "ls", *args, "--json")
    assert result.exit_code == 0, result.stderr
    return {e["id"] for e in json.loads(result.stdout)["entries"]}


def test_old_years_are_found_by_their_window_on_each_backend(runner, paris, backend):
    """Four-digit years compare in time order in SQLite and in PostgreSQL (as text, collate
    "C"): --since 0999 finds 0999 and 2019, --until 0998 neither."""
    first = _remember(runner, "La lanterne de l'an un", "0001-01-01T12:00:00Z")
    old = _remember(runner, "La lanterne du moine", "0999-06-15")
    new = _remember(runner, "La lanterne du jardin", "2019-05-05")
    assert json.loads(invoke(runner, "memory", "show", str(old), "--json").stdout)[
        "created"] == "0999-06-15T11:50:39.000000Z"
    assert _recalled(runner, "--since", "0999") == {old, new}
    assert _recalled(runner, "--until", "0998") == {first}
    assert _recalled(runner, "--since", "0999", "--until", "0999") == {old}
    assert _recalled(runner, "--as-of", "1000-01-01") == {first, old}
    assert _listed(runner, "--since", "0001", "--until", "0001") == {first}
    assert _listed(runner, "--since", "0001-01-01T00:00:00+14:00") == {first, old, new}
    assert _listed(runner, "--until", "0001-01-01T00:00:00+14:00") == set()
    assert _listed(runner, "--since", "9999-12-31T23:59:59-14:00") == set()
    assert _listed(runner, "--until", "9999-12-31T23:59:59-14:00") == {first, old, new}
    assert _recalled(runner, "--as-of", "9999") == {first, old, new}


@pytest.mark.parametrize("value", EDGES + ["٢٠٢٤-٠٣-٠٥", "20240305", "10000", "0000"])
def test_the_cli_http_and_mcp_doors_answer_alike(runner, paris, value):
    """The same value through the real CLI, GET /search and /memory, and the MCP tools (an
    in-process MCP client): all read it, or all refuse it in one line naming the argument."""
    from forge.core.settings import load_settings
    from forge.mcp.server import create_server
    from mcp import Client
    from test_serve import client_for

    http = client_for()

    async def mcp_calls():
        async with Client(create_server(load_settings())) as client:
            return {door: await client.call_tool(tool, {**args, door: value})
                    for tool, args in (("recall", {"query": "lanterne"}),
                                       ("memory_list", {})) for door in ("since", "until")}

    tools = asyncio.run(mcp_calls())
    for door in ("since", "until", "as-of"):
        cli = invoke(runner, "recall", "lanterne", f"--{door}", value)
        field = door.replace("-", "_")
        web = http.get("/search", params={"q": "lanterne", field: value})
        assert web.status_code in (200, 400), web.text
        assert "bug in Forge" not in cli.stderr and "Traceback" not in cli.stderr
        assert (cli.exit_code == 0) == (web.status_code == 200), (cli.stderr, web.text)
        if cli.exit_code:
            assert cli.exit_code == 1 and len(cli.stderr.strip().splitlines()) == 1
            assert cli.stderr.startswith(f"Error: --{door} "), cli.stderr
            assert web.json()["error"].startswith(f"{field} ")
        if door != "as-of":
            listed = http.get("/memory", params={field: value})
            assert listed.status_code == web.status_code, listed.text
            mcp = tools[field]
            assert mcp.is_error == (cli.exit_code != 0), mcp.content[0].text
            if mcp.is_error:
                assert mcp.content[0].text.startswith(f"{field} ") and \
                    "internal error" not in mcp.content[0].text, mcp.content[0].text


@pytest.mark.parametrize("value, stored", [
    ("0999-06-15", "0999-06-15T11:50:39.000000Z"),
    ("2024-03-05T14:30", "2024-03-05T13:30:00.000000Z"),
    ("9999-12-31", None), ("9999-12-31T23:59:59-14:00", None),
    ("0001-01-01T00:00:00+14:00", None), ("20240305", None), ("٢٠٢٤-٠٣-٠٥", None),
    ("2024", None),
])
def test_remember_at_reads_alike_on_the_cli_post_remember_and_the_mcp_tool(runner, paris,
                                                                           value, stored):
    from forge.core.settings import load_settings
    from forge.mcp.server import create_server
    from mcp import Client
    from test_serve import client_for

    cli = invoke(runner, "remember", "fact", "une note datée", "--at", value, "--json")
    web = client_for().post("/remember", json={"content": "une note datée (web)", "at": value})

    async def mcp_call():
        async with Client(create_server(load_settings())) as client:
            return await client.call_tool("remember", {"content": "une note datée (mcp)",
                                                       "at": value})

    tool = asyncio.run(mcp_call())
    if stored is None:
        assert cli.exit_code == 1 and len(cli.stderr.strip().splitlines()) == 1
        assert cli.stderr.startswith("Error: --at "), cli.stderr
        assert web.status_code == 400 and web.json()["error"].startswith("at "), web.text
        assert tool.is_error and tool.content[0].text.startswith("at "), tool.content[0].text
        assert cli.stderr.split("--at ", 1)[1].strip() == web.json()["error"][3:]
        assert invoke(runner, "memory", "ls", "--nl").stdout == ""    # nothing written
    else:
        assert cli.exit_code == 0 and web.status_code == 200 and not tool.is_error
        assert {e["created"] for e in json.loads(invoke(runner, "memory", "ls", "--json")
                                                 .stdout)["entries"]} == {stored}


@pytest.mark.parametrize("ts, refused", [
    ("0999-06-15T10:00:00Z", None), ("2024-03-05", None),
    ("9999-12-31", "is after today"), ("20240305", "write the date with dashes"),
    ("٢٠٢٤-٠٣-٠٥", "write its digits 0-9"), ("0001-01-01T00:00:00+14:00", "is before"),
])
def test_history_import_reads_a_messages_ts_as_at_does(runner, paris, tmp_path, ts, refused):
    """A message's `ts` dates its exchange when it is archived: the rule of --at, one line per
    record naming `ts`, nothing imported."""
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"role": "user", "content": "bonjour", "ts": ts},
                               ensure_ascii=False) + "\n", encoding="utf-8")
    result = invoke(runner, "history", "import", str(path))
    if refused is None:
        assert result.exit_code == 0, result.stderr
    else:
        assert result.exit_code == 1 and f"line 1: ts {ts!r} " in result.stderr, result.stderr
        assert refused in result.stderr and "nothing was imported" in result.stderr


@pytest.mark.parametrize("value, refused", [
    ("2026-03-18T15:00", None), ("2026-03-18", None), ("9999-12-31T23:59:59-14:00", None),
    ("0001-01-01T00:00:00+14:00", None),
    ("20260318", "FORGE_NOW: '20260318' is not an ISO 8601 date or datetime: write the date "
                 "with dashes"),
    ("2026", "FORGE_NOW: '2026' names a year, not a day"),
    ("٢٠٢٦-٠٣-١٨", "write its digits 0-9"),
])
def test_forge_now_takes_what_at_takes_and_any_now_reads_every_expression(value, refused):
    """FORGE_NOW (the "now" expressions are read against) is read as --at reads a time; at
    the calendar's edges every expression is still a window or one line, never an error."""
    from forge.core.errors import SettingsError
    from forge.core.settings import load_settings

    if refused is not None:
        with pytest.raises(SettingsError) as bad:
            load_settings({"FORGE_NOW": value})
        assert refused in str(bad.value) and "\n" not in str(bad.value)
        return
    now = load_settings({"FORGE_NOW": value}).now
    for text in ("yesterday", "today", "last week", "last month", "last year", "in June",
                 "since June", "il y a 3 jours", "between March and May 2024", "this week"):
        kind, got = outcome(when.period, text, now=now, what="--since")
        assert kind == "ok" or got.startswith("--since "), got
        when.find(f"what did I do {text}", now=now)
