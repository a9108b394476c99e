"""`turnstream`: run the deployment, send messages, watch and replay the log."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from turnstream.cli.agents import register as register_agents
from turnstream.cli.approvals import register as register_approvals
from turnstream.cli.archive import register as register_archive
from turnstream.cli.audit import register as register_audit
from turnstream.cli.channels import register as register_channels
from turnstream.cli.common import (
    PLAIN_HELP,
    DataDir,
    NatsUrl,
    console,
    err,
    require_known_agent,
    require_session_id,
    run_on_bus,
    settings_of,
    unless_refused,
)
from turnstream.cli.streams import schemas_export, streams
from turnstream.cli.watch import replay, status, tail
from turnstream.cli.workflow import workflow_app

# Each command imports what it uses when it runs: `turnstream --help`, `send --help` and
# `tail --help` start without the bus, the client or the core (bench/cli_start.py).
if TYPE_CHECKING:
    from turnstream.bus import Bus

app = typer.Typer(
    help="turnstream: LLM agent turns as event-sourced services on NATS JetStream.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=PLAIN_HELP,
)
schemas_app = typer.Typer(
    help="JSON Schema of the wire contract.", no_args_is_help=True, rich_markup_mode=PLAIN_HELP
)
app.add_typer(schemas_app, name="schemas")


@app.command()
def up(
    nats_url: NatsUrl = None,
    nats_port: Annotated[
        int | None, typer.Option("--nats-port", help="Port for the embedded server.")
    ] = None,
    data_dir: DataDir = None,
    provider: Annotated[
        str | None, typer.Option(help="scripted | anthropic | openai (TURNSTREAM_PROVIDER)")
    ] = None,
    script: Annotated[Path | None, typer.Option(help="Script for the scripted provider.")] = None,
    secure: Annotated[
        bool,
        typer.Option(
            "--secure",
            help="Load ops/accounts.conf and run each service as its own NATS user "
            "(passwords generated into DATA_DIR/dev-secrets.env).",
        ),
    ] = False,
) -> None:
    """Run an embedded nats-server and all services until Ctrl-C."""
    from turnstream.cli.up import run_up

    settings = settings_of(
        nats_url, data_dir, nats_port=nats_port, provider=provider, script=script
    )
    try:
        run_up(settings, console, secure=secure)
    except (RuntimeError, ValueError) as exc:
        err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc


@app.command()
def http(
    addr: Annotated[
        str | None, typer.Option("--addr", help="host:port to serve (TURNSTREAM_HTTP_ADDR).")
    ] = None,
    keys_file: Annotated[
        Path | None, typer.Option("--keys-file", help="API keys (TURNSTREAM_HTTP_KEYS_FILE).")
    ] = None,
    nats_url: NatsUrl = None,
    data_dir: DataDir = None,
) -> None:
    """Serve the HTTP face (REST + SSE, OpenAPI at /docs) until Ctrl-C."""
    from turnstream.http.app import run

    run(settings_of(nats_url, data_dir, http_addr=addr, http_keys_file=keys_file))


@app.command()
def send(
    session: Annotated[str, typer.Argument(help="Session id: 1-128 of [A-Za-z0-9_:-].")],
    text: Annotated[
        str | None, typer.Argument(help="The message; - reads it from stdin (or use --file).")
    ] = None,
    file: Annotated[
        Path | None, typer.Option("--file", "-f", help="Read the message from this file.")
    ] = None,
    chat: Annotated[str | None, typer.Option(help="Chat id (default: the session id).")] = None,
    sender: Annotated[str, typer.Option(help="Sender as kind:id, e.g. agent:planner.")] = (
        "human:cli"
    ),
    key: Annotated[str | None, typer.Option(help="Idempotency key (default: new).")] = None,
    reply_to: Annotated[str | None, typer.Option(help="Session that wants the reply.")] = None,
    agent: Annotated[
        str | None,
        typer.Option(help="Agent profile the session talks to (`turnstream agents` lists them)."),
    ] = None,
    steer: Annotated[bool, typer.Option(help="Send as a steer command.")] = False,
    attach: Annotated[
        list[Path] | None,
        typer.Option("--attach", "-a", help="Attach a file (image, PDF, text); repeatable."),
    ] = None,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the turn.")] = 120.0,
    quiet: Annotated[
        bool,
        typer.Option(
            "--quiet",
            "-q",
            help="Print only the reply. On a terminal no approval prompt is asked inline "
            "(answer with `turnstream approve`); a piped answer is still read.",
        ),
    ] = False,
    nats_url: NatsUrl = None,
    data_dir: DataDir = None,
) -> None:
    """Send a message, stream its tokens and stages, print the reply.

    Exits 0 when the turn completed, 1 when it failed or was denied, 130 on Ctrl-C (which
    stops watching; the turn goes on); as a NATS user that may send but not read the log
    (`client`), 0 once the command is stored. A refused publish exits 2 and says so.
    Approval prompts are asked inline on a terminal, or answered by the lines of a piped
    stdin (`echo y | turnstream send …`); with no terminal and nothing (more) on stdin, it
    says how to answer (`turnstream approve`) and exits 4 at once, the turn waiting.
    """
    require_session_id(session)
    settings = settings_of(nats_url, data_dir)
    text = message_text(text, file)
    if not text.strip():
        err.print("[red]error:[/] the message is empty (or only spaces); nothing was sent")
        raise typer.Exit(2)
    if agent is not None:
        require_known_agent(agent, settings.agents)
    from turnstream.cli.send import message_of, run_send

    command = message_of(session, text, chat, sender, key, reply_to, steer, agent, attach)
    run_send(settings, command, quiet=quiet, timeout=timeout)


def message_text(text: str | None, file: Path | None) -> str:
    """The message: the argument, stdin (`-`) or a file (`--file`), exactly one of them."""
    if (text is None) == (file is None):
        err.print("[red]error:[/] give the message as an argument, `-` (stdin) or --file PATH")
        raise typer.Exit(2)
    if file is not None:
        try:
            return file.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            err.print(f"[red]error:[/] cannot read --file {file}: {exc}")
            raise typer.Exit(2) from exc
    return sys.stdin.read() if text == "-" else str(text)


app.command()(tail)
app.command()(replay)
schemas_app.command("export")(schemas_export)
app.command()(streams)


@app.command()
def interrupt(
    session: Annotated[str, typer.Argument(help="The session whose turn to stop.")],
    hard: Annotated[
        bool, typer.Option("--hard", help="Stop at once (default: graceful, with a summary).")
    ] = False,
    nats_url: NatsUrl = None,
    data_dir: DataDir = None,
) -> None:
    """Interrupt the running turn of a session."""
    import uuid_utils

    from turnstream.client import publish_command

    require_session_id(session)
    mode = "hard" if hard else "graceful"
    command = {
        "type": "interrupt",
        "sessionId": session,
        "chatId": session,
        "sender": {"kind": "human", "id": "cli"},
        "idempotencyKey": str(uuid_utils.uuid7()),
        "mode": mode,
    }

    async def work(bus: Bus) -> bool:
        # a user that may interrupt but not read the log (a tenant's) sends unchecked
        exists = await unless_refused(bus, bus.store.last_seq(session), otherwise=1) > 0
        if exists:
            await publish_command(bus, session, command)
        return exists

    if not run_on_bus(settings_of(nats_url, data_dir), work, stop_when_refused=False):
        err.print(
            f"[red]no such session:[/] {session} (it has no events; `turnstream sessions` "
            "lists them); nothing was sent"
        )
        raise typer.Exit(1)
    console.print(f"sent a {mode} interrupt to {session}")


app.command()(status)
app.add_typer(workflow_app, name="workflow")
register_approvals(app)
register_audit(app)
register_agents(app)
register_channels(app)
register_archive(app)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
