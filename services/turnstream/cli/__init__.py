"""`turnstream`: run the deployment, send messages, watch and replay the log."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer
import uuid_utils
from rich.markup import escape
from rich.table import Table

from turnstream.bus import Bus
from turnstream.cli.audit import register as register_audit
from turnstream.cli.common import (
    DataDir,
    NatsUrl,
    console,
    err,
    require_session_id,
    run_on_bus,
    settings_of,
)
from turnstream.cli.render import event_line, print_session
from turnstream.cli.workflow import print_run, workflow_app
from turnstream.client import (
    Replayed,
    answer_command,
    live_state,
    message_command,
    pending_prompts,
    publish_command,
    replay_session,
    send_and_wait,
)
from turnstream.core.events import (
    Event,
    FollowUpQueued,
    HookDecided,
    InputRejected,
    InteractionRequested,
    Stage,
    StagePreFired,
    ToolCallDenied,
    ToolInvocationFailed,
    ToolInvocationProposed,
    ToolInvocationSucceeded,
    decode,
)
from turnstream.core.projection import build_view
from turnstream.core.schemas import exported_schemas
from turnstream.settings import Settings

app = typer.Typer(
    help="turnstream: LLM agent turns as event-sourced services on NATS JetStream.",
    no_args_is_help=True,
    add_completion=False,
)
schemas_app = typer.Typer(help="JSON Schema of the wire contract.", no_args_is_help=True)
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
def send(
    session: Annotated[str, typer.Argument(help="Session id: 1-128 of [A-Za-z0-9_:-].")],
    text: Annotated[str, typer.Argument(help="The message.")],
    chat: Annotated[str | None, typer.Option(help="Chat id (default: the session id).")] = None,
    sender: Annotated[str, typer.Option(help="Sender as kind:id, e.g. agent:planner.")] = (
        "human:cli"
    ),
    key: Annotated[str | None, typer.Option(help="Idempotency key (default: new).")] = None,
    reply_to: Annotated[str | None, typer.Option(help="Session that wants the reply.")] = None,
    steer: Annotated[bool, typer.Option(help="Send as a steer command.")] = False,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the turn.")] = 120.0,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print only the reply.")] = False,
    nats_url: NatsUrl = None,
    data_dir: DataDir = None,
) -> None:
    """Send a message, stream its tokens and stages, print the reply.

    Exits 0 when the turn completed, 1 when it failed or was denied.
    """
    require_session_id(session)
    kind, _, sender_id = sender.partition(":")
    command = message_command(
        session,
        text,
        chat_id=chat,
        sender_kind=kind,
        sender_id=sender_id or kind,
        idempotency_key=key,
        reply_to=reply_to,
        kind="steer" if steer else "message",
    )
    streamed: list[str] = []
    shown: set[tuple[str, int]] = set()
    started = time.perf_counter()

    def stage_line(stage: str, iteration: int) -> None:
        if (stage, iteration) in shown:
            return
        shown.add((stage, iteration))
        if streamed:
            console.print()
            streamed.clear()
        suffix = f" (round {iteration})" if iteration > 1 else ""
        console.print(f"[dim]▸ {stage}{suffix}[/]")

    interactive = sys.stdin.isatty() and not quiet

    async def ask(bus: Bus, prompt: InteractionRequested) -> None:
        data = prompt.data
        if not interactive:
            console.print(
                f"[yellow]? approval needed:[/] {escape(data.prompt)} "
                f"— answer with `turnstream approve {data.interaction_id}` (or deny)"
            )
            return
        reply = await asyncio.to_thread(input, f"? {data.prompt} [y/N] ")
        decision = "approve" if reply.strip().lower() in ("y", "yes") else "deny"
        await publish_command(
            bus, session, answer_command(session, data.interaction_id, decision, sender_id="cli")
        )

    def on_event(event: Event, bus: Bus) -> Awaitable[None] | None:
        if isinstance(event, InteractionRequested):
            return ask(bus, event)
        if quiet:
            return None
        if isinstance(event, StagePreFired):
            stage_line(event.data.stage, event.data.iteration)
        elif isinstance(event, ToolInvocationProposed):
            args = ", ".join(f"{k}={v!r}" for k, v in event.data.args.items())
            console.print(f"  [cyan]⚙ {event.data.tool}[/]({escape(args)})")
        elif isinstance(
            event,
            InputRejected
            | FollowUpQueued
            | ToolCallDenied
            | ToolInvocationFailed
            | ToolInvocationSucceeded
            | HookDecided,
        ):
            console.print(event_line(event))
        return None

    def on_delta(delta: str) -> None:
        if quiet:
            return
        rounds = [i for stage, i in shown if stage == Stage.SEND_REQUEST]
        stage_line(Stage.STREAM_RESPONSE, max(rounds, default=1))
        streamed.append(delta)
        console.print(delta, end="", style="bold")

    settings = settings_of(nats_url, data_dir)
    try:
        outcome = run_on_bus(
            settings,
            lambda bus: send_and_wait(
                bus,
                command,
                on_event=lambda event: on_event(event, bus),
                on_delta=on_delta,
                timeout=timeout,
            ),
        )
    except TimeoutError:
        err.print(
            f"\n[yellow]no terminal event within {timeout:g} s[/]; the turn may still be "
            f"running (waiting for an approval?): `turnstream tail {session}` follows it"
        )
        raise typer.Exit(1) from None
    elapsed = (time.perf_counter() - started) * 1000
    if streamed:
        console.print()
    if outcome.completed:
        if quiet:
            console.print(outcome.reply or "")
        else:
            console.print(
                f"[green]✔ completed[/] [dim]turn {outcome.turn_id} · {elapsed:.0f} ms[/]"
            )
        return
    failure = escape(f"[{outcome.failure_class}] {outcome.reason}")
    err.print(f"[red]✘ {outcome.status}[/] {failure}")
    if outcome.next_action:
        err.print(f"[yellow]next:[/] {escape(outcome.next_action)}")
    raise typer.Exit(1)


@app.command()
def tail(
    session: Annotated[str | None, typer.Argument(help="Only this session.")] = None,
    history: Annotated[
        bool, typer.Option("--history", help="Print the stored events first.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Raw events, one per line.")] = False,
    nats_url: NatsUrl = None,
    data_dir: DataDir = None,
) -> None:
    """Follow events as they are appended, one readable line each (Ctrl-C stops)."""

    def show(event: Event) -> None:
        if as_json:
            sys.stdout.write(event.model_dump_json(by_alias=True, exclude_none=True) + "\n")
            sys.stdout.flush()
        else:
            console.print(event_line(event))

    async def follow(bus: Bus) -> None:
        subject = bus.subjects.log_session(session) if session else bus.subjects.log_all

        async def on_msg(msg: Any) -> None:
            show(decode(msg.data))

        sub = await bus.nc.subscribe(subject, cb=on_msg)
        if history:
            stored = await (bus.store.read_session(session) if session else bus.store.read_all())
            for item in stored:
                show(item.event)
        try:
            await asyncio.Event().wait()
        finally:
            await sub.unsubscribe()

    try:
        run_on_bus(settings_of(nats_url, data_dir), follow)
    except KeyboardInterrupt:
        pass


@app.command()
def replay(
    session: Annotated[str, typer.Argument(help="The session to rebuild.")],
    at: Annotated[
        int | None, typer.Option("--at", help="Stop after this log sequence (time travel).")
    ] = None,
    at_time: Annotated[
        datetime | None,
        typer.Option("--at-time", help="Stop at this time (ISO 8601, UTC if no zone)."),
    ] = None,
    verify: Annotated[
        bool,
        typer.Option(
            "--verify", help="Compare with the turn-runner's live state; exit 1 if not equal."
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="The decider state as JSON.")] = False,
    nats_url: NatsUrl = None,
    data_dir: DataDir = None,
) -> None:
    """Rebuild a session from the log (no model or tool is called): its turns with a
    stage timeline and durations, as of now or of a point in the past."""
    from turnstream.core.turn import state_from_json, state_to_json

    cutoff = at_time.replace(tzinfo=at_time.tzinfo or UTC) if at_time else None

    async def work(bus: Bus) -> tuple[Replayed, bytes | None]:
        replayed = await replay_session(bus, session, at_seq=at, at_time=cutoff)
        return replayed, (await live_state(bus, session) if verify else None)

    (state, events, _), live = run_on_bus(settings_of(nats_url, data_dir), work)
    if verify:
        assert live is not None
        if b'"error"' in live[:20]:
            err.print(f"[red]error:[/] the turn-runner could not answer: {live.decode()}")
            raise typer.Exit(2)
        if state_from_json(live) != state:
            err.print("[red]✘ the state rebuilt from the log differs from the live state[/]")
            err.print(f"log:  {state_to_json(state).decode()}")
            err.print(f"live: {live.decode()}")
            raise typer.Exit(1)
        console.print(f"[green]✔ rebuilt state equals the live state[/] ({len(events)} events)")
        return
    if as_json:
        sys.stdout.write(state_to_json(state).decode() + "\n")
        return
    if not events:
        err.print(f"[yellow]session {session} has no events (at that point)[/]")
        raise typer.Exit(1)
    print_session(console, build_view(session, events))
    if state.workflow is not None:
        print_run(console, state.workflow)


@schemas_app.command("export")
def schemas_export(
    out: Annotated[Path, typer.Option(help="Directory to write to.")] = Path("schemas"),
    check: Annotated[
        bool, typer.Option("--check", help="Fail if the files differ instead of writing.")
    ] = False,
) -> None:
    """Write the JSON Schema of inbound commands and log events."""
    stale = []
    for name, content in exported_schemas().items():
        path = out / name
        if check:
            if not path.exists() or path.read_bytes() != content:
                stale.append(str(path))
            continue
        out.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        console.print(f"wrote {path}")
    if stale:
        err.print(f"[red]out of date:[/] {', '.join(stale)}; run `turnstream schemas export`")
        raise typer.Exit(1)


@app.command()
def streams(
    replicas: Annotated[int, typer.Option(help="Stream replicas.")] = 1,
) -> None:
    """Print the stream definitions services create (ops/streams.json is this output)."""
    from turnstream.bus.streams import StreamLimits, describe
    from turnstream.runtime import stream_limits

    limits = stream_limits(settings_of())
    limits = StreamLimits(**{**limits.__dict__, "replicas": replicas})
    options = orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS
    sys.stdout.write(
        orjson.dumps(describe(settings_of().subjects, limits), option=options).decode()
    )
    sys.stdout.write("\n")


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
    run_on_bus(settings_of(nats_url, data_dir), lambda bus: publish_command(bus, session, command))
    console.print(f"sent a {mode} interrupt to {session}")


@app.command()
def approvals(
    session: Annotated[str | None, typer.Argument(help="Only this session.")] = None,
    nats_url: NatsUrl = None,
    data_dir: DataDir = None,
) -> None:
    """List the approval prompts waiting for an answer."""
    pending = run_on_bus(settings_of(nats_url, data_dir), lambda bus: pending_prompts(bus, session))
    if not pending:
        console.print("no pending approvals")
        return
    table = Table("session", "tool", "arguments", "deadline", "interaction (approve/deny ID)")
    for p in pending:
        args = ", ".join(f"{k}={v!r}" for k, v in p["args"].items())
        table.add_row(p["sessionId"], p["tool"], args, p["deadline"][11:19], p["interactionId"])
    table.columns[-1].no_wrap = True
    table.columns[-1].min_width = 36
    console.print(table)


def _answer(interaction_id: str, decision: str, reason: str | None, settings: Settings) -> None:
    async def work(bus: Bus) -> str | None:
        pending = await pending_prompts(bus)
        found = next((p for p in pending if p["interactionId"] == interaction_id), None)
        if found is None:
            return None
        session_id = found["sessionId"]
        command = answer_command(session_id, interaction_id, decision, reason=reason)
        await publish_command(bus, session_id, command)
        return str(found["tool"])

    tool = run_on_bus(settings, work)
    if tool is None:
        err.print(
            f"[red]error:[/] no pending prompt {interaction_id}; `turnstream approvals` lists them"
        )
        raise typer.Exit(1)
    console.print(f"{decision}d {tool} ({interaction_id})")


Reason = Annotated[str | None, typer.Option(help="Why (recorded with the answer).")]


@app.command()
def approve(
    interaction_id: Annotated[str, typer.Argument(help="From `turnstream approvals`.")],
    reason: Reason = None,
    nats_url: NatsUrl = None,
    data_dir: DataDir = None,
) -> None:
    """Allow a pending tool call."""
    _answer(interaction_id, "approve", reason, settings_of(nats_url, data_dir))


@app.command()
def deny(
    interaction_id: Annotated[str, typer.Argument(help="From `turnstream approvals`.")],
    reason: Reason = None,
    nats_url: NatsUrl = None,
    data_dir: DataDir = None,
) -> None:
    """Refuse a pending tool call (the model is told, and may try something else)."""
    _answer(interaction_id, "deny", reason, settings_of(nats_url, data_dir))


@app.command()
def status(
    session: Annotated[str, typer.Argument(help="Session to ask the turn-runner about.")],
    nats_url: NatsUrl = None,
    data_dir: DataDir = None,
) -> None:
    """The turn-runner's live state of a session (JSON)."""

    state = run_on_bus(settings_of(nats_url, data_dir), lambda bus: live_state(bus, session))
    sys.stdout.write(state.decode() + "\n")


app.add_typer(workflow_app, name="workflow")
register_audit(app)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
