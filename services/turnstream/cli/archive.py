"""`turnstream archive`: move ended sessions older than a cutoff out of the log; and
`turnstream attachments prune`: delete the attachments no event names any more."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from turnstream.bus import Bus
from turnstream.cli.common import DataDir, NatsUrl, console, err, run_on_bus, settings_of


def register(app: typer.Typer) -> None:
    app.command()(archive)
    app.add_typer(attachments_app, name="attachments")


def archive(
    older_than_days: Annotated[
        float,
        typer.Option("--older-than-days", help="Archive sessions idle at least this long."),
    ],
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="List what would be archived; change nothing.")
    ] = False,
    nats_url: NatsUrl = None,
    data_dir: DataDir = None,
) -> None:
    """Move ended sessions (no turn or workflow open) whose last event is older than the
    cutoff from TS_LOG to the object store; `replay` still reads them."""
    from turnstream.bus.archive import Archived, archive_sessions

    if older_than_days < 0:
        err.print("[red]error:[/] --older-than-days must be 0 or more")
        raise typer.Exit(2)
    cutoff = datetime.now(UTC) - timedelta(days=older_than_days)

    async def work(bus: Bus) -> list[Archived]:
        return await archive_sessions(bus, cutoff, dry_run=dry_run)

    done = run_on_bus(settings_of(nats_url, data_dir), work)
    verb = "would archive" if dry_run else "archived"
    for item in done:
        console.print(
            f"{verb} {item.session_id}: {item.events} events, last {item.last_time:%Y-%m-%d %H:%M}"
        )
    console.print(f"{verb} {len(done)} session(s) idle since before {cutoff:%Y-%m-%d %H:%M} UTC")


attachments_app = typer.Typer(help="Attachments in the object store.", no_args_is_help=True)


@attachments_app.command("prune")
def prune(
    older_than_days: Annotated[
        float,
        typer.Option(
            "--older-than-days",
            help="Only objects stored at least this long ago (a message may be on its way).",
        ),
    ] = 1.0,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="List what would be deleted; change nothing.")
    ] = False,
    nats_url: NatsUrl = None,
    data_dir: DataDir = None,
) -> None:
    """Delete the attachments no event names any more (in the log or an archive): those of
    events the log's retention dropped, and of messages refused after their files were
    stored; and the chunks of uploads abandoned before they were named."""
    from turnstream.bus.attachment_gc import Unnamed, prune_attachments

    cutoff = datetime.now(UTC) - timedelta(days=max(older_than_days, 0.0))

    async def work(bus: Bus) -> list[Unnamed]:
        return await prune_attachments(bus, cutoff, dry_run=dry_run)

    gone = run_on_bus(settings_of(nats_url, data_dir), work)
    verb = "would delete" if dry_run else "deleted"
    for item in gone:
        console.print(f"{verb} {item.name}: {item.size} bytes, stored {item.mtime}")
    console.print(f"{verb} {len(gone)} attachment(s) no event names")
