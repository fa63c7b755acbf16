"""`forge aggregate` (the aggregation tier) and `forge resplit` (one archive entry per
exchange)."""
from __future__ import annotations

from typing import Any

import click

from .main import ENTRY_ID, get_settings
from .output import emit, emit_one, note, output_options

SUBJECT_COLUMNS = ("subject", "sources", "outcome", "line")
BLOCK_COLUMNS = ("block", "project", "exchanges", "pieces", "left_out", "status")


def _ids(ids: list[int]) -> str:
    return ",".join(f"#{i}" for i in ids)


def _subject_row(s: Any) -> dict[str, Any]:
    label = f"{s.name} [{s.kind}/{s.project}]" if s.project else f"{s.name} [{s.kind}]"
    if s.outcome == "written":
        outcome = f"written -> #{s.into}" if s.into else "would write"
        line = s.line
    elif s.outcome == "absorbed":
        outcome = f"absorbed into #{s.into}"
        line = f"(#{s.into} as it stands)"
    else:
        outcome = s.reason if s.outcome == "skipped" else f"refused: {s.gate}"
        line = s.line or ""
    if s.kept_active and s.outcome != "refused":
        outcome += f" (coverage keeps {_ids(s.kept_active)} active)"
    return {"subject": label, "sources": _ids(s.sources), "outcome": outcome, "line": line}


@click.command()
@click.option("--project", "-p", help="Only the subjects of this project.")
@click.option("--apply", "apply_", is_flag=True, help="Write the folds (the default is a dry run).")
@click.option("--undo", "undo_id", type=ENTRY_ID, metavar="ID",
              help="Unfold the aggregate (or absorbing entry) ID: its sources become active again.")
@click.option("--db", "db_path", type=click.Path(dir_okay=False), metavar="PATH",
              help="Run on another store file (a snapshot) instead of RAG_DB_FILE.")
@output_options
def aggregate(project: str | None, apply_: bool, undo_id: int | None, db_path: str | None,
              fmt: str) -> None:
    """The aggregation tier: fold overlapping deliberate notes into one line, by arithmetic.

    A dry run by default: for each subject, the entries it groups, the exact line it would
    fold into (or the entry that already says everything and absorbs the others), the gate
    that refuses it (closure, repetition, coverage, quorum, budget), and the hot block's
    entries and tokens before and after. `--apply` writes; sources are linked
    (`superseded_by`), never deleted; `--undo ID` unfolds one aggregate.
    """
    from ..memory import aggregate as tier

    settings = get_settings()
    if undo_id is not None:
        if apply_ or project:
            raise click.UsageError("--undo takes no --apply or --project")
        with tier.open_db(settings, db_path) as store:
            result = tier.undo(store, undo_id)
        text = (f"unfolded #{undo_id}: released {_ids(result['released'])}"
                + ("; forgot the aggregate" if result["forgot"] else "; the absorbing entry stays"))
        emit_one(result, fmt, text=text)
        return
    with tier.open_db(settings, db_path) as store:
        report = tier.run(store, project=project, apply=apply_)
    rows = [_subject_row(s) if fmt == "table" else s.to_dict() for s in report.subjects]
    emit(rows, fmt, columns=SUBJECT_COLUMNS, document=report.to_dict(), wide=("line", "outcome"),
         empty="no subject: no two active notes overlap")
    if fmt != "table":
        return
    for s in report.subjects:
        click.echo(f"{s.name}: {s.reason}")
    b, a = report.block_before, report.block_after
    c = report.counts()
    click.echo(f"\n{len(report.subjects)} subject(s): {c['written']} written, {c['absorbed']} "
               f"absorbed, {c['refused']} refused" + (f", {c['skipped']} skipped" if c["skipped"] else ""))
    def weight(w: Any) -> str:
        return f"{w.entries} entries / {w.tokens} tokens" + (f" ({w.left_out} left out)" if w.left_out else "")

    click.echo(f"hot block: {weight(b)} -> {weight(a)}")
    note(f"{report.entries_scanned} active deliberate entries scanned in {report.seconds:.3f} s"
         + ("" if apply_ else "; dry run, nothing written (--apply writes)"))


@click.command()
@click.option("--apply", "apply_", is_flag=True, help="Write the pieces and delete the blocks.")
@click.option("--backup", type=click.Path(dir_okay=False), metavar="PATH",
              help="Snapshot the store here first (required with --apply; never overwritten).")
@click.option("--db", "db_path", type=click.Path(dir_okay=False), metavar="PATH",
              help="Run on another store file instead of RAG_DB_FILE.")
@output_options
def resplit(apply_: bool, backup: str | None, db_path: str | None, fmt: str) -> None:
    """Re-slice archive entries that hold several exchanges into one entry per exchange.

    A dry run by default: each block, its pieces, the units it would leave out as non-answers,
    and the entries that are a refusal and nothing else (listed, never deleted). `--apply`
    needs `--backup PATH`, inserts every piece before deleting its block, and can be re-run
    after an interruption: pieces already written are skipped.
    """
    from ..memory import aggregate as tier
    from ..memory import resplit as rs
    from .output import progress

    if apply_ and not backup:
        raise click.UsageError("--apply rewrites archive entries and has no undo: give --backup PATH")
    settings = get_settings()
    with tier.open_db(settings, db_path) as store:
        planned = rs.plan(store)
        with progress(range(len(planned.blocks)), length=len(planned.blocks),
                      label="re-slicing") as bar:
            report = rs.resplit(store, apply=apply_, backup=backup,
                                on_progress=bar.update, planned=planned)
    rows = []
    for b in report.blocks:
        status = ("would split" if not report.applied else
                  f"split into {_ids(b.written)}" + (f" ({b.already} already in)" if b.already else ""))
        rows.append({"block": f"#{b.id}", "project": b.project, "exchanges": b.exchanges,
                     "pieces": len(b.pieces), "left_out": len(b.left_out), "status": status})
    emit(rows, fmt, columns=BLOCK_COLUMNS, document=report.to_dict(), wide=("status",),
         empty="no archive entry holds more than one exchange")
    if fmt != "table":
        return
    left = [u for b in report.blocks for u in b.left_out]
    if left:
        click.echo("\nleft out as non-answers:")
        emit([{"block": f"#{u.block}", "piece": u.piece, "reason": u.reason, "exchange": u.preview}
              for u in left], fmt, columns=("block", "piece", "reason", "exchange"), wide=("exchange",))
    if report.refusals:
        click.echo(f"\nentries that are a refusal and nothing else (kept; `forge memory forget ID` "
                   f"removes one): {_ids(report.refusals)}")
    if report.applied:
        note(f"backup: {report.backup}")
    elif report.blocks:
        note("dry run, nothing written (--apply --backup PATH writes)")
