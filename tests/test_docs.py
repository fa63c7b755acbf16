"""The documentation keeps up with the code: the site in docs/ holds every setting, route and
command, its examples are real runs, its figures are files the benchmarks wrote; the README is
a short front door that links every page."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import click

from forge.cli.main import cli
from forge.core.settings import SPECS

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
sys.path.insert(0, str(DOCS / "_ext"))

import forge_docs  # noqa: E402

README = (ROOT / "README.md").read_text(encoding="utf-8")


def pages() -> list[Path]:
    return sorted(p for p in DOCS.rglob("*.md") if not {"_build", "bench"} & set(p.parts))


def site_text() -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in pages())


# --- generated references -------------------------------------------------------------------

def test_the_settings_page_generates_its_table_from_the_code():
    assert "```{forge-settings}" in (DOCS / "settings.md").read_text(encoding="utf-8")
    table = forge_docs.settings_table()
    missing = [s.name for s in SPECS if f"| `{s.name}` |" not in table]
    assert not missing
    helpless = [s.name for s in SPECS if not s.help.strip()]
    assert not helpless, f"settings with no help text for the table: {helpless}"


def test_the_serve_page_generates_its_route_table_from_the_application():
    from starlette.routing import Route

    from forge.serve.app import ROUTES

    assert "```{forge-routes}" in (DOCS / "serve.md").read_text(encoding="utf-8")
    table = forge_docs.route_table()
    wanted = [(m, r.path) for r in ROUTES if isinstance(r, Route) and r.include_in_schema
              for m in sorted(r.methods - {"HEAD"})]
    missing = [f"{m} {p}" for m, p in wanted if f"`{m} {p}`" not in table]
    assert wanted and not missing, missing
    assert all(text for _, _, text, _ in forge_docs.route_rows()), "a route with no summary"


def test_the_cli_reference_is_generated_from_the_click_application():
    text = (DOCS / "reference" / "cli.md").read_text(encoding="utf-8")
    assert "```{click} forge.cli.main:cli" in text and ":nested: full" in text


def test_every_command_has_an_example_in_the_docs():
    text = site_text()
    ctx = click.Context(cli)
    missing = []
    for name in cli.list_commands(ctx):
        cmd = cli.get_command(ctx, name)
        subs = cmd.list_commands(ctx) if isinstance(cmd, click.Group) else []
        for words in ([[name]] if not subs else [[name, sub] for sub in subs]):
            if f"forge {' '.join(words)}" not in text:
                missing.append(" ".join(words))
    assert not missing, f"commands with no example in docs/: {missing}"


def test_every_setting_is_in_the_env_example():
    example = (ROOT / "deploy" / ".env.example").read_text(encoding="utf-8")
    missing = [s.name for s in SPECS if f"# {s.name}=" not in example]
    assert not missing


def test_the_env_example_as_a_dotenv_gives_the_defaults(tmp_path, monkeypatch):
    """Uncommenting every line of deploy/.env.example must change nothing."""
    from forge.core.settings import load_settings

    text = (ROOT / "deploy" / ".env.example").read_text(encoding="utf-8")
    lines = [line[2:] for line in text.splitlines() if line.startswith("# ") and "=" in line
             and line[2:].split("=", 1)[0].isupper() and " " not in line[2:].split("=", 1)[0]]
    (tmp_path / ".env").write_text("\n".join(lines) + "\n")
    for spec in SPECS:
        monkeypatch.delenv(spec.name, raising=False)
    from_example = load_settings(cwd=tmp_path)
    defaults = load_settings(cwd=tmp_path / "empty")
    assert all(from_example.sources[s.name] == ".env" for s in SPECS)
    # FORGE_WORKSPACE defaults to the working directory, which differs between the two loads.
    pairs = lambda st: [(r["setting"], r["value"]) for r in st.rows() if r["setting"] != "FORGE_WORKSPACE"]
    assert pairs(from_example) == pairs(defaults)


# --- examples -------------------------------------------------------------------------------

def test_the_examples_are_what_forge_prints_today(tmp_path):
    """The marked console blocks of the README and the site are real runs
    (tools/readme_examples.py); times, run ids, decimals and column widths aside, they must
    match a run of today's code."""
    env = {k: v for k, v in os.environ.items() if k != "FORGE_DATA_DIR"}
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "readme_examples.py"), "--check",
                           str(ROOT / "README.md"), str(DOCS)], capture_output=True, text=True,
                          env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr
    assert site_text().count("\n<!-- example: ") >= 6
    assert "<!-- example: " in README


def test_the_example_checker_catches_a_drifted_output(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("<!-- example: s/one -->\n```console\n$ forge remember 'Un fait'\n"
                      "remembered #7\n```\n<!-- /example -->\n", encoding="utf-8")
    tool = str(ROOT / "tools" / "readme_examples.py")
    stale = subprocess.run([sys.executable, tool, "--check", str(readme)], capture_output=True,
                           text=True, timeout=300)
    assert stale.returncode == 1 and "s/one drifted" in stale.stderr
    assert subprocess.run([sys.executable, tool, "--write", str(readme)], timeout=300).returncode == 0
    assert "remembered #1" in readme.read_text(encoding="utf-8")
    assert subprocess.run([sys.executable, tool, "--check", str(readme)], timeout=300).returncode == 0


def test_example_sessions_are_per_file(tmp_path):
    """The same session name in two files runs in two fresh folders: a page's examples never
    depend on what another page ran."""
    for name in ("a.md", "b.md"):
        (tmp_path / name).write_text("<!-- example: s/one -->\n```console\n"
                                     "$ forge remember 'Un fait'\nremembered #1\n```\n"
                                     "<!-- /example -->\n", encoding="utf-8")
    tool = str(ROOT / "tools" / "readme_examples.py")
    done = subprocess.run([sys.executable, tool, "--check", str(tmp_path)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr


# --- figures --------------------------------------------------------------------------------

INCLUDE = re.compile(r"^```\{literalinclude\}\s+(\S+)\s*$")
MARKER = re.compile(r"^<!-- figure: ([\w-]+) -->$")
BENCH_COMMAND = re.compile(r"^\$ (?:[A-Z_]+=\S+ )*python3? bench/(\w+)\.py\b")


def figure_problems(page: Path) -> list[str]:
    """A figure block is an include of `bench/NAME.txt` (`../bench/NAME.txt` from a folder of
    docs/; the file its benchmark wrote with
    --write-docs) or, until that file lands, a `<!-- figure: NAME -->` marker naming an
    existing bench/NAME.py. What is wrong: an include whose file is missing, a marker naming no
    benchmark, and a `$ python bench/…` command typed into a fenced block with output under it
    (a figure typed by hand)."""
    problems = []
    lines = page.read_text(encoding="utf-8").split("\n")
    fence = None
    for number, line in enumerate(lines, 1):
        where = f"{page.name}:{number}"
        if fence is None:
            if m := INCLUDE.match(line):
                target = (page.parent / m[1]).resolve()
                # a page in a folder of docs/ (docs/benchmarks/) reaches docs/bench/ by ../
                if not re.fullmatch(r"(?:\.\./)*bench/[\w-]+\.txt", m[1]):
                    problems.append(f"{where}: a literalinclude that is not bench/NAME.txt")
                elif not target.is_file():
                    problems.append(f"{where}: {m[1]} does not exist (run its benchmark with "
                                    "--write-docs)")
            elif m := MARKER.match(line):
                if not (ROOT / "bench" / f"{m[1]}.py").is_file():
                    problems.append(f"{where}: figure marker {m[1]} names no bench/{m[1]}.py")
            if line.startswith("```"):
                fence = line[:line.index("`") + 3 + len(line) - len(line.lstrip("`")) - 3]
            continue
        if line.strip() == "```" or (line.startswith("```") and not line.strip("`")):
            fence = None
            continue
        if BENCH_COMMAND.match(line):
            after = lines[number] if number < len(lines) else "```"
            if after.strip() and not after.startswith(("$ ", "```")):
                problems.append(f"{where}: benchmark output typed under `{line[2:60]}`; "
                                "include bench/NAME.txt instead")
    return problems


def test_every_figure_block_has_the_file_its_benchmark_wrote():
    problems = [p for page in pages() + [ROOT / "README.md"] for p in figure_problems(page)]
    assert not problems, "\n".join(problems)
    included = {m[1] for page in pages() for line in page.read_text(encoding="utf-8").split("\n")
                if (m := INCLUDE.match(line))}
    assert len(included) >= 5


def test_the_figure_check_catches_a_missing_file_and_a_typed_figure(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("```{literalinclude} bench/nowhere.txt\n:language: text\n```\n\n"
                    "<!-- figure: no_such_bench -->\n\n"
                    "```console\n$ python bench/startup.py\ncommand   median ms\n```\n\n"
                    "```sh\n$ python bench/startup.py --runs 5\n$ ls\n```\n", encoding="utf-8")
    problems = figure_problems(page)
    assert len(problems) == 3, problems
    assert "bench/nowhere.txt does not exist" in problems[0]
    assert "no_such_bench" in problems[1]
    assert "typed under `python bench/startup.py`" in problems[2]


# A figure file whose script was deleted (an experiment that lost) is kept only while a page
# quotes it, and says so on its first line, with the commit that still holds the code.
RECORD = re.compile(r"^# A record of a deleted experiment: bench/(\w+)\.py, its code at commit "
                    r"([0-9a-f]{7,40}) \(git show \2:bench/\1\.py\)$")


def bench_file_problems(docs: Path, bench: Path, quoted: set[str]) -> list[str]:
    """Each docs/bench/NAME.txt (or NAME-MODE.txt, one mode of a harness with several) names the
    script that writes it: its first line is the command (`$ python bench/NAME.py ...`) and
    bench/NAME.py exists and takes --write-docs. A file whose
    script is gone is a record: its first line names the script and the commit that had it,
    the command follows, and a page still quotes the file (`quoted`: the included names)."""
    problems = []
    for path in sorted((docs / "bench").glob("*.txt")):
        lines = path.read_text(encoding="utf-8").split("\n")
        name = path.stem.split("-", 1)[0]
        script = bench / f"{name}.py"
        record = RECORD.match(lines[0])
        command = BENCH_COMMAND.match(lines[1 if record else 0])
        if not command or command[1] != name or "--write-docs" in command.string:
            problems.append(f"{path.name}: does not start with the command that wrote it "
                            f"($ python bench/{name}.py ...)")
        elif record:
            if record[1] != name or script.exists():
                problems.append(f"{path.name}: a record of bench/{record[1]}.py, which is not "
                                "its deleted script")
            elif f"bench/{path.name}" not in quoted:
                problems.append(f"{path.name}: a record no page quotes (fold it into "
                                "docs/benchmarks.md's row and delete it)")
        elif not script.is_file():
            problems.append(f"{path.name}: bench/{path.stem}.py does not exist (run it with "
                            "--write-docs, or mark the file as a record)")
        else:
            source = script.read_text(encoding="utf-8")
            if "--write-docs" not in source:
                problems.append(f"{path.name}: bench/{path.stem}.py has no --write-docs")
    return problems


def test_every_bench_file_names_the_script_that_writes_it():
    # a page under docs/benchmarks/ includes `../bench/NAME.txt`
    quoted = {m[1].removeprefix("../") for page in pages()
              for line in page.read_text(encoding="utf-8").split("\n")
              if (m := INCLUDE.match(line))}
    assert sorted((DOCS / "bench").glob("*.txt"))
    assert bench_file_problems(DOCS, ROOT / "bench", quoted) == []


def test_the_bench_file_check_catches_a_file_no_script_writes(tmp_path):
    (tmp_path / "docs" / "bench").mkdir(parents=True)
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "kept.py").write_text("p.add_argument('--write-docs')\n")
    (tmp_path / "bench" / "mute.py").write_text("print(1)\n")
    files = {"kept": "$ python bench/kept.py --runs 3\nfigures\n",
             "kept-mode": "$ python bench/kept.py --mode\nfigures\n",
             "wrong-mode": "$ python bench/kept.py --other\nfigures\n",   # not wrong.py
             "mute": "$ python bench/mute.py\nfigures\n",
             "gone": "$ python bench/gone.py\nfigures\n",
             "typed": "figures typed by hand\n",
             "old": "# A record of a deleted experiment: bench/old.py, its code at commit abc1234 "
                    "(git show abc1234:bench/old.py)\n$ python bench/old.py\nfigures\n",
             "stale": "# A record of a deleted experiment: bench/stale.py, its code at commit "
                      "abc1234 (git show abc1234:bench/stale.py)\n$ python bench/stale.py\n"}
    for name, text in files.items():
        (tmp_path / "docs" / "bench" / f"{name}.txt").write_text(text, encoding="utf-8")
    problems = bench_file_problems(tmp_path / "docs", tmp_path / "bench",
                                   {"bench/kept.txt", "bench/old.txt"})
    assert [p.split(":")[0] for p in problems] == ["gone.txt", "mute.txt", "stale.txt",
                                                   "typed.txt", "wrong-mode.txt"]
    assert "does not exist" in problems[0] and "no --write-docs" in problems[1]
    assert "no page quotes" in problems[2] and "does not start with" in problems[3]


def tried_not_shipped(benchmarks: Path) -> set[str]:
    """The deleted scripts docs/benchmarks.md's "Tried, not shipped" table names."""
    text = benchmarks.read_text(encoding="utf-8")
    table = text[text.index("## Tried, not shipped"):]
    return set(re.findall(r"`bench/(\w+)\.py`", table))


def test_a_page_cites_a_bench_script_that_exists_or_a_tried_row():
    """A page may name a deleted experiment's script only when the benchmarks page keeps its row
    (what, the figure, why, the commit that had the code)."""
    rows = tried_not_shipped(DOCS / "benchmarks.md")
    assert not [name for name in rows if (ROOT / "bench" / f"{name}.py").exists()], \
        "a script of bench/ listed as tried, not shipped"
    problems = sorted({f"{page.name}: bench/{name}.py" for page in pages() + [ROOT / "README.md"]
                       for name in re.findall(r"\bbench/([a-z0-9_]+)\.py\b",
                                              page.read_text(encoding="utf-8"))
                       if not (ROOT / "bench" / f"{name}.py").exists() and name not in rows})
    assert not problems, "pages cite a bench script that is gone, with no tried row:\n" + \
        "\n".join(problems)


# --- pages and the README -------------------------------------------------------------------

def uncited_benchmarks(bench: Path, pages: list[Path]) -> list[str]:
    """The scripts of bench/ that nothing asks for: a script that runs (it has a __main__ block)
    must be named as `bench/NAME.py` by a page of the docs; a helper (none) must be imported by
    a script of bench/."""
    cited = "\n".join(p.read_text(encoding="utf-8") for p in pages)
    scripts = {p.stem: p.read_text(encoding="utf-8") for p in bench.glob("*.py")}
    problems = []
    for name, source in sorted(scripts.items()):
        if "__main__" in source:
            if f"bench/{name}.py" not in cited:
                problems.append(f"bench/{name}.py runs but no page of the docs names it")
        elif not any(re.search(rf"^\s*(?:import {name}\b|from {name} import)", other, re.M)
                     for n, other in scripts.items() if n != name):
            problems.append(f"bench/{name}.py is a helper no script imports")
    return problems


def test_bench_holds_what_is_used():
    """Each script of bench/ is a harness or benchmark the docs name, or a helper one
    of them imports; a removed experiment leaves its conclusion and numbers in the docs."""
    assert uncited_benchmarks(ROOT / "bench", pages()) == []


def test_the_bench_check_catches_an_unnamed_script_and_an_unused_helper(tmp_path):
    (tmp_path / "kept.py").write_text("import helper\nif __name__ == '__main__':\n    pass\n")
    (tmp_path / "helper.py").write_text("X = 1\n")
    (tmp_path / "orphan.py").write_text("Y = 2\n")
    (tmp_path / "experiment.py").write_text("if __name__ == '__main__':\n    pass\n")
    page = tmp_path / "page.md"
    page.write_text("`bench/kept.py` measures it.\n", encoding="utf-8")
    assert uncited_benchmarks(tmp_path, [page]) == [
        "bench/experiment.py runs but no page of the docs names it",
        "bench/orphan.py is a helper no script imports"]


def test_the_documented_bounds_are_the_codes():
    """The limits a user or a client meets at the doors, as the pages state them, are the
    constants the code enforces."""
    from forge.core import checks
    from forge.mcp import frames
    from forge.memory import exports

    def text(name: str) -> str:
        return " ".join((DOCS / name).read_text(encoding="utf-8").split())

    wanted = {
        "memory.md": [f"at most **{checks.MAX_FILTER_CHARS} characters** (`checks.MAX_FILTER_CHARS`)",
                      f"1 to {checks.MAX_COUNT:,}", "a whole number from 1 to 2^63-1"],
        "import.md": [f"**Nesting: at most {exports.MAX_DEPTH} levels**",
                      f"nested deeper than {exports.MAX_DEPTH} levels",
                      f"an id is at most {exports.MAX_ID_CHARS} characters",
                      f"cut to {exports.REF_TITLE_CHARS} characters",
                      f"cut to {checks.SHOWN_CHARS} characters"],
        "mcp.md": [f"a filter over {checks.MAX_FILTER_CHARS} characters",
                   f"more than {frames.MAX_INT_DIGITS} digits",
                   f"the frame is over {frames.MAX_FRAME_BYTES} bytes",
                   f"a frame over {frames.MAX_FRAME_BYTES // 2**20} MiB"],
    }
    missing = [(page, phrase) for page, phrases in wanted.items() for phrase in phrases
               if phrase not in text(page)]
    assert not missing, missing


def test_every_page_says_what_it_covers_in_its_first_lines():
    for page in pages():
        lines = [l for l in page.read_text(encoding="utf-8").split("\n")]
        assert lines[0].startswith("# "), page.name
        first = next(l for l in lines[1:] if l.strip())
        assert not first.startswith(("#", "```", "|", "<", "!", "(", "- ", "* ")), (page.name, first)
        assert len(" ".join(lines[1:8]).split()) >= 15, page.name


def test_every_page_is_in_the_table_of_contents():
    index = (DOCS / "index.md").read_text(encoding="utf-8")
    entries = set(re.findall(r"^([\w/-]+)$", "\n".join(
        block for block in re.findall(r"```\{toctree\}\n(.*?)```", index, re.S)), re.M))
    listed = {str(p.relative_to(DOCS).with_suffix("")) for p in pages()} - {"index"}
    assert listed == entries


def github_slug(heading: str) -> str:
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_the_readme_is_a_short_front_door_that_links_every_page():
    assert len(README.split("\n")) <= 300
    links = set(re.findall(r"\]\((docs/[^)#\s]+\.md)(?:#[^)]*)?\)", README))
    missing = [str(p.relative_to(ROOT)) for p in pages() if str(p.relative_to(ROOT)) not in links]
    assert not missing, f"pages the README does not link: {missing}"


def test_the_readme_links_reach_real_anchors():
    for target, anchor in re.findall(r"\]\((docs/[^)#\s]+\.md)#([^)\s]+)\)", README):
        headings = [l.lstrip("#").strip() for l in (ROOT / target).read_text(encoding="utf-8")
                    .split("\n") if re.match(r"#{1,4} ", l)]
        assert anchor in {github_slug(h) for h in headings}, f"{target}#{anchor}"


def test_from_the_readme_one_click_to_the_server_the_settings_and_the_gates():
    """The issue's "done when": how to start the server, what every setting does, what
    `aggregate` refuses, each one link away."""
    assert "(docs/serve.md)" in README and "forge serve" in (DOCS / "serve.md").read_text(encoding="utf-8")
    assert "(docs/settings.md#every-setting)" in README
    assert "(docs/aggregation.md#what-it-refuses-the-gates)" in README
    gates = (DOCS / "aggregation.md").read_text(encoding="utf-8").split("## What it refuses: the gates", 1)[1]
    for gate in ("closure", "repetition", "coverage", "quorum", "budget"):
        assert f"| {gate} |" in gates.split("\n## ", 1)[0]


def test_the_readme_holds_nothing_the_site_does_not():
    """Every example the README shows is on the site too (the tour)."""
    site = site_text()
    for command in re.findall(r"^\$ (forge .+)$", README, re.M):
        assert command in site, command
    for line in re.findall(r"^(forge .+|tools/\S+.*|\*/30 .+)$", README, re.M):
        assert line.split("#")[0].strip() in site, line


# --- recall's channels ---------------------------------------------------------------------

def test_every_channel_a_row_can_carry_is_documented_in_the_manual_and_the_help():
    """Each value of SearchRow.channel is a row of docs/recall.md's table and a word of `forge
    recall --help`, which also says what `fused` ranges over."""
    from click.testing import CliRunner

    from forge.store.search_results import CHANNELS

    page = (DOCS / "recall.md").read_text(encoding="utf-8")
    help_text = " ".join(CliRunner().invoke(cli, ["recall", "--help"]).output.split())
    assert set(CHANNELS) == {"vector", "lexical", "both", "latent", "neighbour", "replacement",
                             "replaced"}
    assert [c for c in CHANNELS if f"| `{c}` |" not in page] == []
    tags = help_text.split("channel says what found it:", 1)[1].split(". ", 1)[0]
    assert [c for c in CHANNELS if not re.search(rf"(?<![-\w]){c}(?![-\w])", tags)] == []
    # four shares by default (the sentence model's on notes), three with RECALL_SENTENCE=off
    assert "[0, 4]" in help_text and "**[0, 4]**" in page and "**[0, 3]**" in page


def test_the_code_tags_rows_only_with_documented_channels():
    """Every tag the fusion gives (each mix of the three channels finding a row) and every tag
    written as a literal where a row is built is one of CHANNELS."""
    from itertools import product

    from forge.recall.rank import Candidate
    from forge.store.search_results import CHANNELS

    tags = set()
    for v, w, s in product((None, 1), (None, 1), (None, 0.5)):
        if v or w or s:
            tags.add(Candidate(1, vector_rank=v, lexical_rank=w, sparse=s).channel)
    assert tags == {"vector", "lexical", "both", "latent"}
    literals = set()
    for path in (ROOT / "forge").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        literals |= set(re.findall(r'SearchRow\([^,()]+(?:\[[^\]]*\])?, "(\w+)"', text))
        literals |= set(re.findall(r'channel = "(\w+)" if .* else "(\w+)"', text)[0]
                        if re.search(r'channel = "(\w+)" if', text) else ())
    assert literals and literals <= set(CHANNELS), literals - set(CHANNELS)


# --- the manual and the code speak of what Forge does ---------------------------------------

# An issue number, a wave, the SPEC or one of its ids (H1-H9, V1-V11, A1-A9, R1-R2, T1-T3,
# C1-C2, K1-K4): a reader of the repository or the site can open none of them (the history is
# in git; design notes may cite a commit). `rrf-K1` names an RRF variant, not an id.
HISTORY = re.compile(r"\b[Ii]ssues? ?#?\d+|\b[Ww]aves? ?\d|\bSPEC\b|(?<![-\w])(?:H[1-9]|V(?:1[01]|[1-9])"
                     r"|A[1-9]|R[12]|T[1-3]|C[12]|K[1-4])(?!\w)")


def test_the_manual_and_the_code_name_no_issue_wave_or_spec_id():
    """docs/ (pages and the figures they include), README, ARCHITECTURE, forge/, bench/ and the
    tests' docstrings and comments say what Forge does and why, never which issue asked for it."""
    files = [ROOT / "README.md", ROOT / "ARCHITECTURE.md"]
    files += [p for p in DOCS.rglob("*") if p.suffix in (".md", ".txt", ".py")
              and "_build" not in p.parts]
    for folder in ("forge", "bench", "tools", "deploy"):
        files += [p for p in (ROOT / folder).rglob("*") if p.is_file() and "__pycache__" not in
                  p.parts and p.suffix in (".py", ".md", ".txt", ".html", ".js", ".css", "")]
    files += [p for p in (ROOT / "tests").rglob("*.py")
              if p.name != "test_docs.py"   # its test data holds each kind of mention
              and "__pycache__" not in p.parts]
    found = []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if HISTORY.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:80]}")
    assert found == []


def test_the_history_pattern_sees_each_kind_of_mention():
    for line in ("Since issue 22 the channel", "(SPEC V6)", "as wave 3 amends it", "V5's rule",
                 "A9; a fold", "Issue 11's rows", "K4: the prefix", "conventions (SPEC §1)"):
        assert HISTORY.search(line), line
    for line in ("rrf-K1", "ThinkPad T14", "Mac mini M2", "IPv4", "the L2 distance", "v5.2"):
        assert not HISTORY.search(line), line


def test_no_manual_page_is_over_400_lines():
    """A page a reader can take in: past 400 lines the reference or the measurement narrative
    belongs on a page of its own (docs/benchmarks/ for the narrative)."""
    long = {page.relative_to(DOCS).as_posix(): n for page in pages()
            if (n := len(page.read_text(encoding="utf-8").splitlines())) > 400}
    assert long == {}
