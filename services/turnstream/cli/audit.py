"""`turnstream audit …` and `turnstream sessions`: violations, the audit file, summaries.

Registered on the main app by `register(app)` (the last lines of `cli.py`).
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from turnstream.cli.common import (
    PLAIN_HELP,
    DataDir,
    NatsUrl,
    console,
    err,
    prices_or_exit,
    run_on_bus,
    settings_of,
)

if TYPE_CHECKING:
    from rich.table import Table

    from turnstream.bus import Bus, StoredEvent
    from turnstream.core.costs import PriceTable
    from turnstream.core.summary import SessionSummary
    from turnstream.settings import Settings

audit_app = typer.Typer(
    help="Invariant violations found in the log, the hash-chained audit file, rebuilds.",
    invoke_without_command=True,
    rich_markup_mode=PLAIN_HELP,
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
    from rich.table import Table

    from turnstream.bus import StoredEvent
    from turnstream.core.events import AuditViolation, decode

    async def read(bus: Bus) -> list[StoredEvent]:
        # by direct get (no consumer: a user but the setup operator may create none)
        out: list[StoredEvent] = []
        subject = bus.subjects.log_kind("AuditViolation")
        for stream in bus.subjects.log_streams:
            await bus.store.direct.read(
                stream, subject, lambda seq, _s, data: out.append(StoredEvent(seq, decode(data)))
            )
        return out

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
    file: Annotated[
        Path | None,
        typer.Argument(
            help="An audit file, or a data dir whose audit files are all checked (one per "
            "log partition: audit.jsonl, audit/<k>.jsonl). Default: TURNSTREAM_DATA_DIR."
        ),
    ] = None,
    head: Annotated[
        str | None,
        typer.Option(
            help="A head printed earlier and kept elsewhere: the file must still hold it."
        ),
    ] = None,
    data_dir: DataDir = None,
) -> None:
    """Check the hash chain of an audit file, or of every partition's in a data dir; exit 1
    naming the partition and the first bad line."""
    from turnstream.audit.journal import chains_in

    if file is not None and not file.is_dir():
        if not _verify_chain(file, head, str(file)):
            raise typer.Exit(1)
        return
    folder = file if file is not None else settings_of(None, data_dir).data_dir
    chains = chains_in(folder)
    if not chains:
        err.print(f"[red]error:[/] no audit file in {folder} (audit.jsonl, audit/<k>.jsonl)")
        raise typer.Exit(2)
    if head is not None:
        err.print("[red]error:[/] --head names one file's head: give that file")
        raise typer.Exit(2)
    bad = [k for k, path in chains if not _verify_chain(path, None, _named(k, path))]
    if bad:
        which = ", ".join("the log" if k is None else f"partition {k}" for k in bad)
        err.print(f"[red]{len(bad)} of {len(chains)} audit file(s) bad:[/] {which}")
        raise typer.Exit(1)


def _named(partition: int | None, path: Path) -> str:
    return f"{path}" if partition is None else f"partition {partition} ({path})"


def _verify_chain(file: Path, head: str | None, name: str) -> bool:
    """Check one audit file and say so; False when it is bad."""
    from turnstream.audit.chain import verify as verify_chain

    try:
        with open(file, "rb") as lines:
            verdict = verify_chain(lines, head)
    except OSError as exc:
        err.print(f"[red]error:[/] cannot read {file}: {exc}")
        raise typer.Exit(2) from exc
    if not verdict.ok:
        err.print(f"[red]✘ {name}: line {verdict.bad_line} is bad:[/] {verdict.reason}")
        err.print(f"  the {verdict.records} line(s) before it are intact")
        return False
    if head is not None and verdict.head_line is None:
        err.print(
            f"[red]✘ {name}: no line has the head {head}[/] (lines were cut off the end, "
            "or the head is from another file); the last line's hash is "
            f"{verdict.head}"
        )
        return False
    since = ""
    if verdict.head_line is not None:
        appended = verdict.records - verdict.head_line
        since = f"; the kept head is line {verdict.head_line}, {appended} line(s) appended since"
    console.print(
        f"[green]✔ {name}: {verdict.records} records intact[/], up to log seq "
        f"{verdict.last_seq}; head {verdict.head}{since}"
    )
    return True


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


def sessions(
    as_json: AsJson = False,
    limit: Annotated[int, typer.Option(help="Show the sessions changed last, this many.")] = 20,
    status: Annotated[
        str | None, typer.Option(help="Only sessions in this status (active, idle, …).")
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(help="Only sessions changed since: a duration (30m, 2h, 7d) or a date."),
    ] = None,
    every: Annotated[
        bool, typer.Option("--all", help="Every session, by id (slow for many).")
    ] = False,
    nats_url: NatsUrl = None,
    data_dir: DataDir = None,
) -> None:
    """The session summaries the audit service keeps in the sessions KV bucket: the ones
    changed last (`--limit`), with how many there are in all."""
    after = _since(since)
    read = partial(_summaries, every=every, limit=limit, status=status, after=after)
    settings = settings_of(nats_url, data_dir)
    summaries, total = run_on_bus(settings, read)
    if as_json:
        for summary in summaries:
            sys.stdout.write(summary.to_json().decode() + "\n")
        return
    if not summaries:
        if total:
            console.print(f"no session of the {total} matches (--status, --since)")
            return
        console.print("no sessions (is the audit service running? `turnstream audit rebuild`)")
        _other_mode_note(settings)
        return
    console.print(sessions_table(summaries, console.width, prices_or_exit(settings)))
    if not every and total > len(summaries):
        console.print(
            f"[dim]{len(summaries)} changed last of {total} session(s); "
            "--limit N for more, --all for every one, --status / --since to filter[/]"
        )


async def _summaries(
    bus: Bus, every: bool, limit: int, status: str | None, after: datetime | None
) -> tuple[list[SessionSummary], int]:
    """The summaries `turnstream audit sessions` shows (the `limit` changed last, or
    `every` one by id) of those in `status` changed `after`, and how many there are."""
    from turnstream.bus.kv import current_values, recent_values

    def wanted(summary: SessionSummary | None) -> bool:
        return (
            summary is not None
            and (status is None or summary.status == status)
            and (after is None or (summary.updated_at is not None and summary.updated_at >= after))
        )

    # by message gets, not a KV watch: a watch creates a consumer, which the admin (and
    # any user but the setup operator) may not
    bucket = bus.subjects.sessions_bucket
    if every:
        values = await current_values(bus.nc, bucket)
        found = [_summary_of(key, value) for key, value in values.items()]
        kept = [s for s in found if wanted(s) and s is not None]
        return sorted(kept, key=lambda s: s.session_id), len(values)
    recent, total = await recent_values(
        bus.nc, bucket, lambda key, value: wanted(_summary_of(key, value)), limit
    )
    return [s for _, v in recent if (s := _summary_of("", v)) is not None], total


def _summary_of(key: str, value: bytes) -> SessionSummary | None:
    from turnstream.core.summary import SessionSummary

    try:
        return SessionSummary.from_json(value)
    except (ValueError, TypeError):
        err.print(f"[yellow]skipped an unreadable summary under {key}[/]")
        return None


def _since(text: str | None) -> datetime | None:
    """`--since`: a duration back from now (30m, 2h, 7d) or an ISO date; None if absent."""
    from datetime import timedelta

    if text is None:
        return None
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    if text[-1:] in units and text[:-1].isdigit():
        return datetime.now(UTC) - timedelta(seconds=int(text[:-1]) * units[text[-1]])
    try:
        when = datetime.fromisoformat(text)
    except ValueError as exc:
        raise typer.BadParameter(f"{text!r}: a duration (30m, 2h, 7d) or a date") from exc
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def sessions_table(
    summaries: list[SessionSummary], width: int, prices: PriceTable | None = None
) -> Table:
    """One row per session; on a narrow terminal (< 140 columns) only the columns a person
    scans, so none is squeezed to one word per line; the last reply takes what is left, on
    the row's one line (cut with …)."""
    from turnstream.core.costs import spend

    wide = width >= WIDE
    from rich.table import Table

    table = Table(expand=True)
    table.add_column("session", no_wrap=True, overflow="fold", min_width=8)
    table.add_column("status", no_wrap=True)
    table.add_column("turns\nok/failed/denied", no_wrap=True, justify="right")
    table.add_column("tools", no_wrap=True, justify="right")
    if wide:
        table.add_column("tokens in/out\ncached", no_wrap=True, justify="right")
        table.add_column("cost", no_wrap=True, justify="right")
        table.add_column("open turn", no_wrap=True)
        table.add_column("violations", no_wrap=True, justify="right")
        table.add_column("seq", no_wrap=True, justify="right")
    table.add_column("updated", no_wrap=True)
    table.add_column("last reply", ratio=1, min_width=16, no_wrap=True, overflow="ellipsis")
    for s in summaries:
        style = _STYLE.get(s.status)
        status = f"[{style}]{s.status}[/]" if style else s.status
        if s.violations and not wide:
            status += f" [red]({s.violations} violations)[/]"
        reply = escape(" ".join((s.last_reply or "").split())[: 200 if wide else 120])
        updated = f"{s.updated_at:%H:%M:%S}" if s.updated_at else "-"
        row = [s.session_id, status, f"{s.turns}  {s.completed}/{s.failed}/{s.denied}"]
        row.append(str(s.tool_calls))
        if wide:
            used = spend(s.models, prices or {})
            ratio = used.tokens.cache_hit_ratio
            cached = f"\n{ratio:.0%}" if ratio else ""
            row += [
                f"{used.tokens.all_input:,}/{used.tokens.output:,}{cached}",
                "-" if used.dollars is None else f"${used.dollars:.4f}",
                (s.open_turn or "-")[-8:],
                f"[red]{s.violations}[/]" if s.violations else "0",
                str(s.last_seq),
            ]
        table.add_row(*row, updated, reply)
    return table


WIDE = 140
"""Terminal columns from which `sessions` shows every column."""
_STYLE = {"completed": "green", "failed": "red", "denied": "yellow", "active": "cyan"}


def _other_mode_note(settings: Settings) -> None:
    """When the data dir holds the log of the other `up` mode (open vs --secure), which
    this server cannot see: say so, its sessions are not lost."""
    from turnstream.cli.up import other_mode_log
    from turnstream.settings import SECURE_MARK

    if not settings.url_file.exists() or settings.nats_url:
        return  # not the server an `up` on this data dir runs
    secure = (settings.data_dir / SECURE_MARK).exists()
    other = other_mode_log(settings, secure)
    if other is not None:
        mode = "`turnstream up`" if secure else "`turnstream up --secure`"
        err.print(
            f"[yellow]note:[/] this data dir also holds the log of {mode} ({other}), "
            "with its sessions: this server cannot see them"
        )
