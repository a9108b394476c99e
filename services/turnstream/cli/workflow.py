"""`turnstream workflow validate | attach | status`: workflows from the command line."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from turnstream.cli.common import (
    PLAIN_HELP,
    DataDir,
    NatsUrl,
    command_name,
    console,
    err,
    require_session_id,
    run_on_bus,
    settings_of,
)

if TYPE_CHECKING:  # the rest is imported where used: `turnstream --help` starts without it
    from rich.console import Console

    from turnstream.bus import Bus
    from turnstream.core.events import Event
    from turnstream.core.workflow.state import WorkflowRun

workflow_app = typer.Typer(
    help="Workflows: validate definitions, attach one, watch its stages.",
    rich_markup_mode=PLAIN_HELP,
)


@workflow_app.command("validate")
def validate(
    folder: Annotated[Path, typer.Argument(help="A workflow folder (workflow.yaml + stages).")],
) -> None:
    """Check a workflow definition and report every problem at once."""
    from turnstream.tools.registry import ToolRegistry
    from turnstream.workflows.loader import WorkflowInvalid, load

    try:
        definition = load(folder, ToolRegistry.load().names(), settings_of().mcp.servers)
    except WorkflowInvalid as exc:
        err.print(f"[red]✘ {folder}: {len(exc.problems)} problem(s)[/]")
        for problem in exc.problems:
            err.print(f"  [bold]{problem.file}[/] {problem.field} [dim]({problem.code})[/]")
            err.print(f"      {escape(problem.message)}")
            if problem.fix:
                err.print(f"      [green]fix:[/] {escape(problem.fix)}")
        raise typer.Exit(1) from exc
    steps = " → ".join(
        "(" + " ‖ ".join(s.stages) + ")" + (f" → {s.join}" if s.join else "")
        if s.parallel
        else s.stages[0]
        for s in definition.steps
    )
    console.print(f"[green]✔ {definition.name}[/]: {steps}")


@workflow_app.command("attach")
def attach(
    session: Annotated[str, typer.Argument(help="Session to run the workflow in.")],
    name: Annotated[str, typer.Argument(help="Workflow name (a folder in TURNSTREAM_WORKFLOWS).")],
    ctx: Annotated[str, typer.Option("--ctx", help="The workflow ctx as a JSON object.")] = "{}",
    wait: Annotated[bool, typer.Option(help="Follow the stages until the run ends.")] = True,
    timeout: Annotated[float, typer.Option(help="Seconds to follow the run.")] = 300.0,
    nats_url: NatsUrl = None,
    data_dir: DataDir = None,
) -> None:
    """Attach a workflow to a session and follow its stages (exit 0 when it completed)."""
    import orjson

    from turnstream.client import attach_command, publish_command

    require_session_id(session)
    try:
        context = orjson.loads(ctx)
    except orjson.JSONDecodeError as exc:
        err.print(f'[red]error:[/] --ctx is not JSON ({exc}); e.g. --ctx \'{{"task": "..."}}\'')
        raise typer.Exit(2) from exc
    if not isinstance(context, dict):
        err.print("[red]error:[/] --ctx must be a JSON object")
        raise typer.Exit(2)
    command = attach_command(session, name, context)

    async def work(bus: Bus) -> int:
        if not wait:
            await publish_command(bus, session, command)
            console.print(f"attach {name} → {session}")
            return 0
        return await _attach_and_follow(bus, session, command, name, timeout)

    raise typer.Exit(run_on_bus(settings_of(nats_url, data_dir), work))


async def _attach_and_follow(
    bus: Bus, session: str, command: dict[str, Any], name: str, timeout: float
) -> int:
    """Print the run's stage events as they are appended (subscribed before the command
    goes out, so none is missed), asking its approval prompts inline as `send` does; the
    exit code when the run ends."""
    import asyncio

    from turnstream.cli.prompt import PROMPT_WAITING, Deadline, Prompts, answer_source
    from turnstream.client import publish_command
    from turnstream.core.events import decode

    ended: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    deadline = Deadline()  # paused while a person is asked, as `send`'s
    prompts = Prompts(session, answer_source(quiet=False), on_wait=deadline.paused)

    async def on_log(msg: Any) -> None:
        event = decode(msg.data)
        prompts.see(event, bus)
        code = _show(event, command["idempotencyKey"])
        if code is not None and not ended.done():
            ended.set_result(code)

    sub = await bus.nc.subscribe(bus.subjects.log_session(session), cb=on_log)
    try:
        await publish_command(bus, session, command)
        console.print(f"attach {name} → {session}")
        async with asyncio.timeout(timeout) as deadline.timeout:
            stuck = prompts.stuck()
            either: set[asyncio.Future[Any]] = {ended, stuck}
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
            return ended.result() if ended.done() else PROMPT_WAITING  # said why
    except TimeoutError:
        status = f"{command_name()} workflow status {session}"
        err.print(f"[yellow]still running after {timeout:.0f} s[/]; `{status}` follows it")
        return 3
    finally:
        deadline.timeout = None  # exited: a prompt ending now must not touch it
        await prompts.close()
        await sub.unsubscribe()


def _show(event: Event, key: str) -> int | None:
    from turnstream.cli.summaries import COMPLETION_MEANS
    from turnstream.core.events import (
        InputRejected,
        StageAssertOutcome,
        StageCancelled,
        StageCompletionChecked,
        StageEntered,
        StageExited,
        StageGranted,
        StageInitFailed,
        WorkflowExit,
    )

    match event:
        case InputRejected(data=data) if key in (data.idempotency_key, event.correlation_id):
            err.print(f"[red]✘ rejected ({data.kind}):[/] {escape(data.reason)}")
            for error in data.errors:
                err.print(f"  {escape(error)}")
            return 1
        case StageEntered(data=data):
            extra = f" (recovers {data.recovers})" if data.recovers else ""
            console.print(f"▶ [bold]{data.stage}[/] entered{extra}")
        case StageInitFailed(data=data):
            console.print(f"✘ [bold]{data.stage}[/] init failed: {data.reason}")
        case StageCompletionChecked(data=data) if data.outcome != "accepted":
            means = COMPLETION_MEANS.get(data.outcome, "")
            console.print(f"  {data.stage}: completion {data.outcome} [dim]({means})[/]")
        case StageAssertOutcome(data=data):
            console.print(f"  {data.stage}: assert {data.verdict} (attempt {data.attempt})")
        case StageGranted(data=data):
            console.print(f"  {data.stage}: granted {data.tool}")
        case StageCancelled(data=data):
            console.print(f"⊘ [bold]{data.stage}[/] cancelled: {data.reason}")
        case StageExited(data=data):
            mark = "✔" if data.result.verdict in ("ok", "skip") else "✘"
            console.print(f"{mark} [bold]{data.stage}[/] {data.result.verdict}")
        case WorkflowExit(data=data):
            color = "green" if data.status == "completed" else "red"
            why = f": {data.reason}" if data.reason else ""
            console.print(f"[{color}]workflow {data.workflow} {data.status}{why}[/]")
            return 0 if data.status == "completed" else 1
    return None


@workflow_app.command("status")
def status(
    session: Annotated[str, typer.Argument(help="The session the workflow runs in.")],
    as_json: Annotated[bool, typer.Option("--json", help="Rows as JSON.")] = False,
    nats_url: NatsUrl = None,
    data_dir: DataDir = None,
) -> None:
    """The stage graph of the session's workflow, rebuilt from the log."""
    import orjson

    from turnstream.core.session import SessionState, fold
    from turnstream.core.workflow.view import stage_rows

    async def work(bus: Bus) -> list[Any]:
        return await bus.store.read_session(session)

    stored = run_on_bus(settings_of(nats_url, data_dir), work)
    run = fold(SessionState.of(session), [item.event for item in stored]).workflow
    if run is None:
        err.print(f"[yellow]session {session} has no workflow[/]")
        raise typer.Exit(1)
    if as_json:
        rows = [row.__dict__ for row in stage_rows(run)]
        print(orjson.dumps({"workflow": run.name, "status": run.status, "stages": rows}).decode())
        return
    print_run(console, run)


def print_run(out: Console, run: WorkflowRun) -> None:
    from rich.table import Table

    from turnstream.core.workflow.view import stage_rows

    table = Table(title=f"workflow {run.name} ({run.status})", title_justify="left")
    for column in ("step", "stage", "role", "status", "verdict", "attempts", "duration", "reason"):
        table.add_column(column, no_wrap=column == "stage")  # a stage id is what people grep
    ended = run.status not in ("attached", "running")
    for row in stage_rows(run):
        # a stage an ended run never reached (a recovery nothing needed) will not run
        status = "[dim]not run[/]" if ended and row.status == "pending" else row.status
        table.add_row(
            str(row.step),
            row.stage,
            row.role,
            status,
            row.verdict or "",
            str(row.attempts or ""),
            f"{row.duration_s:.2f} s" if row.duration_s is not None else "",
            (row.reason or "")[:60],
        )
    out.print(table)
