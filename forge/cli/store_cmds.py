"""`forge store`: the deliberate store as a whole (copy it to another backend)."""
from __future__ import annotations

import click

from .main import get_settings
from .output import emit_one, note, output_options


@click.group()
def store() -> None:
    """The deliberate store as a whole: copy it between SQLite and PostgreSQL."""


@store.command("migrate")
@click.option("--to", "to", required=True, metavar="URL",
              help="the target: sqlite:///PATH or postgresql://user:password@host:port/db; it "
                   "must be empty (created when missing)")
@output_options
def store_migrate(to: str, fmt: str) -> None:
    """Copy the configured store (FORGE_DATABASE_URL, else RAG_DB_FILE) to another backend.

    Entries keep their ids, links, refs and times; the vectors, the latent-term index, the
    notes' sentence rows, the event log and the embedding identity come along. One transaction
    on the target, then verified: the counts, a content checksum and the digests of the
    vectors, latent terms and sentence rows of both stores must be equal. The source is not changed. Examples:
    `forge store migrate --to postgresql://forge:PASSWORD@db.lan/forge`, and back:
    `FORGE_DATABASE_URL=postgresql://… forge store migrate --to sqlite:///snapshot.db`.
    """
    from ..store import transfer

    try:
        target = transfer.parse_target(to)
    except transfer.TargetError as e:
        raise click.BadParameter(str(e), param_hint="'--to'") from None
    result = transfer.migrate(get_settings(), target)
    note(f"copied {result.source} -> {result.target} in {result.seconds:.1f} s; "
         f"verified: counts and checksum equal")
    emit_one(result.to_dict(), fmt,
             text=f"{result.entries} entries, {result.vectors} vectors, {result.events} events, "
                  f"{result.message_refs} message refs, {result.latent_terms} latent terms, "
                  f"{result.sentence_rows} sentence rows; "
                  f"checksum {result.checksum[:16]}")
