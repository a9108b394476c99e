"""`turnstream audit …` and `turnstream sessions`: violations, the audit file, summaries.

Registered on the main app by `register(app)` (the last lines of `cli.py`).
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from turnstream.bus import Bus, StoredEvent
from turnstream.bus.store import LOG_START
from turnstream.cli.common import DataDir, NatsUrl, console, err, run_on_bus, settings_of
from turnstream.core.events import AuditViolation

audit_app = typer.Typer(
    help="Invariant violations found in the log, the hash-chained audit file, rebuilds.",
    invoke_without_command=True,
)

AsJson = Annotated[bool, typer.Option("--json", help="One JSON object per line.")]


def register(app: typer.Typer) -> None:
    app.add_typer(audit_app, name="audit")
    app.command()(sessions)


@audit_app.callback()
def violations(
    ctx: typer.Context,
    session: Annotated[str | None, typer.Option(help="Only this session.")] = None,
    as_json: AsJson = False,
    nats_url: NatsUrl = None,
    data_dir: DataDir = None,
) -> None:
    """The `AuditViolation` events in the log (what the audit service found wrong)."""
    if ctx.invoked_subcommand is not None:
        return

    async def read(bus: Bus) -> list[StoredEvent]:
        return await bus.store.read_kind("AuditViolation", since=LOG_START)

    found = [
        (s.seq, s.event)
        for s in run_on_bus(settings_of(nats_url, data_dir), read)
        if isinstance(s.event, AuditViolation) and session in (None, s.event.session_id)
    ]
    if as_json:
        for _, event in found:
            sys.stdout.write(event.model_dump_json(by_alias=True, exclude_none=True) + "\n")
        return
    if not found:
        console.print("[green]no violations[/]")
        return
    table = Table("seq", "time", "session", "turn", "kind", "detail")
    for seq, event in found:
        turn = (event.turn_id or "-")[-8:]
        time = f"{event.time:%Y-%m-%d %H:%M:%S}"
        table.add_row(
            str(seq), time, event.session_id, turn, event.data.kind, escape(event.data.detail)
        )
    console.print(table)
    console.print(f"[red]{len(found)} violation(s)[/]")


@audit_app.command()
def verify(
    file: Annotated[Path, typer.Argument(help="An audit file (DATA_DIR/audit.jsonl).")],
    head: Annotated[
        str | None,
        typer.Option(
            help="A head printed earlier and kept elsewhere: the file must still hold it."
        ),
    ] = None,
) -> None:
    """Check the audit file's hash chain; exit 1 naming the first bad line."""
    from turnstream.audit.chain import verify as verify_chain

    try:
        with open(file, "rb") as lines:
            verdict = verify_chain(lines, head)
    except OSError as exc:
        err.print(f"[red]error:[/] cannot read {file}: {exc}")
        raise typer.Exit(2) from exc
    if not verdict.ok:
        err.print(f"[red]✘ {file}: line {verdict.bad_line} is bad:[/] {verdict.reason}")
        err.print(f"  the {verdict.records} line(s) before it are intact")
        raise typer.Exit(1)
    if head is not None and verdict.head_line is None:
        err.print(
            f"[red]✘ {file}: no line has the head {head}[/] (lines were cut off the end, "
            "or the head is from another file); the last line's hash is "
            f"{verdict.head}"
        )
        raise typer.Exit(1)
    since = ""
    if verdict.head_line is not None:
        appended = verdict.records - verdict.head_line
        since = f"; the kept head is line {verdict.head_line}, {appended} line(s) appended since"
    console.print(
        f"[green]✔ {file}: {verdict.records} records intact[/], up to log seq "
        f"{verdict.last_seq}; head {verdict.head}{since}"
    )


@audit_app.command()
def rebuild(nats_url: NatsUrl = None, data_dir: DataDir = None) -> None:
    """Rebuild every session summary in the KV bucket from the whole log (no model or
    tool is called); summaries already as new are left as they are."""
    from turnstream.audit.app import check_config
    from turnstream.audit.rebuild import Rebuilt
    from turnstream.audit.rebuild import rebuild as rebuild_all

    settings = settings_of(nats_url, data_dir)

    async def work(bus: Bus) -> Rebuilt:
        return await rebuild_all(bus, check_config(settings), datetime.now(UTC))

    done = run_on_bus(settings, work)
    console.print(
        f"rebuilt {done.sessions} session(s) from {done.events} events (up to seq "
        f"{done.last_seq}) in {done.seconds:.2f} s ({done.rate:,.0f} events/s); "
        f"wrote {done.written}"
    )
    console.print(f"violations in the log: {done.violations_in_log}", end="")
    console.print(f"; found but not yet appended: {done.unreported}" if done.unreported else "")


def sessions(as_json: AsJson = False, nats_url: NatsUrl = None, data_dir: DataDir = None) -> None:
    """The session summaries the audit service keeps in the sessions KV bucket."""
    from turnstream.audit.projections import read_all
    from turnstream.core.summary import SessionSummary

    async def read(bus: Bus) -> list[SessionSummary]:
        return await read_all(await bus.js.key_value(bus.subjects.sessions_bucket))

    summaries = run_on_bus(settings_of(nats_url, data_dir), read)
    if as_json:
        for summary in summaries:
            sys.stdout.write(summary.to_json().decode() + "\n")
        return
    if not summaries:
        console.print("no sessions (is the audit service running? `turnstream audit rebuild`)")
        return
    table = Table("session", "status", "turns", "ok/failed/denied", "tokens in/out", "tools")
    for column in ("open turn", "last reply", "violations", "seq", "updated"):
        table.add_column(column)
    for s in summaries:
        status = f"[{_STYLE.get(s.status, '')}]{s.status}[/]"
        reply = escape(" ".join((s.last_reply or "").split())[:40])
        updated = f"{s.updated_at:%H:%M:%S}" if s.updated_at else "-"
        table.add_row(
            s.session_id,
            status,
            str(s.turns),
            f"{s.completed}/{s.failed}/{s.denied}",
            f"{s.input_tokens}/{s.output_tokens}",
            str(s.tool_calls),
            (s.open_turn or "-")[-8:],
            reply,
            f"[red]{s.violations}[/]" if s.violations else "0",
            str(s.last_seq),
            updated,
        )
    console.print(table)


_STYLE = {"completed": "green", "failed": "red", "denied": "yellow", "active": "cyan"}
