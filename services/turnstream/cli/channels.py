"""`turnstream channels pairing list | approve CODE | deny CODE`: the chat channels' pairing
codes (a stranger's direct message gets one; docs/channels.md)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated

import typer

from turnstream.cli.common import DataDir, NatsUrl, console, err, run_on_bus, settings_of

if TYPE_CHECKING:
    from turnstream.bus import Bus
    from turnstream.channels.pairing import Request

channels_app = typer.Typer(help="Chat channels (Telegram, Slack): pairing of new senders.")
pairing_app = typer.Typer(help="Pairing codes given to strangers, approved or denied here.")
channels_app.add_typer(pairing_app, name="pairing")

Platform = Annotated[str, typer.Option("--platform", help="The channel: telegram or slack.")]


def register(app: typer.Typer) -> None:
    app.add_typer(channels_app, name="channels")


def _checked(platform: str) -> str:
    from turnstream.bus.streams import CHANNEL_PLATFORMS

    if platform not in CHANNEL_PLATFORMS:
        err.print(f"[red]error:[/] no channel {platform!r}: one of {', '.join(CHANNEL_PLATFORMS)}")
        raise typer.Exit(2)
    return platform


@pairing_app.command("list")
def pairing_list(
    platform: Platform = "telegram", nats_url: NatsUrl = None, data_dir: DataDir = None
) -> None:
    """List the open pairing codes."""
    from rich.table import Table

    from turnstream.channels.records import Records

    async def work(bus: Bus) -> tuple[Request, ...]:
        book, _ = await (await Records.open(bus, _checked(platform))).book()
        return book.open(time.time())

    requests = run_on_bus(settings_of(nats_url, data_dir), work)
    if not requests:
        console.print(f"no open pairing codes on {platform}")
        return
    table = Table("code", "user", "name", "expires in", box=None, pad_edge=False)
    for r in requests:
        table.add_row(r.code, r.user, r.user_name, f"{int(r.expires - time.time())} s")
    console.print(table)


def _settle(
    platform: str, code: str, approve: bool, nats_url: str | None, data_dir: DataDir
) -> None:
    from turnstream.channels import records

    async def work(bus: Bus) -> Request | None:
        found = await records.Records.open(bus, _checked(platform))
        return await (records.approve if approve else records.deny)(found, code)

    request = run_on_bus(settings_of(nats_url, data_dir), work)
    if request is None:
        err.print(
            f"[red]error:[/] no open pairing code {code} on {platform} (expired, or settled "
            "already); `turnstream channels pairing list` lists them"
        )
        raise typer.Exit(1)
    done = "approved: they may talk to the agent now" if approve else "denied"
    console.print(f"{request.code} of {request.user_name} ({request.user}) {done}")


@pairing_app.command("approve")
def pairing_approve(
    code: Annotated[str, typer.Argument(help="The code the sender was given.")],
    platform: Platform = "telegram",
    nats_url: NatsUrl = None,
    data_dir: DataDir = None,
) -> None:
    """Approve a pairing code: its sender may talk to the agent from now on."""
    _settle(platform, code, True, nats_url, data_dir)


@pairing_app.command("deny")
def pairing_deny(
    code: Annotated[str, typer.Argument(help="The code the sender was given.")],
    platform: Platform = "telegram",
    nats_url: NatsUrl = None,
    data_dir: DataDir = None,
) -> None:
    """Deny a pairing code: it can no longer be approved."""
    _settle(platform, code, False, nats_url, data_dir)
