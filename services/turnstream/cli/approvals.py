"""`turnstream approvals | approve | deny`: the approval prompts waiting for a person."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from turnstream.cli.common import DataDir, NatsUrl, console, err, run_on_bus, settings_of

if TYPE_CHECKING:
    from turnstream.bus import Bus
    from turnstream.settings import Settings


def register(app: typer.Typer) -> None:
    for command in (approvals, approve, deny):
        app.command()(command)


def approvals(
    session: Annotated[str | None, typer.Argument(help="Only this session.")] = None,
    nats_url: NatsUrl = None,
    data_dir: DataDir = None,
) -> None:
    """List the approval prompts waiting for an answer."""
    from turnstream.cli.render import print_prompt
    from turnstream.client import pending_prompts

    pending = run_on_bus(
        settings_of(nats_url, data_dir),
        lambda bus: pending_prompts(bus, session, by_subject=True),
    )
    if not pending:
        console.print("no pending approvals")
        return
    for p in pending:
        print_prompt(console, p)
    console.print(
        "[dim]answer with[/] turnstream approve <interaction> [dim]or[/] turnstream deny "
        "<interaction>"
    )


def _answer(
    interaction_id: str,
    decision: str,
    reason: str | None,
    session: str | None,
    settings: Settings,
) -> None:
    from turnstream.client import answer_command, pending_prompts, publish_command
    from turnstream.core.subjects import ANSWER_DOOR

    async def work(bus: Bus) -> str | None:
        pending = await pending_prompts(bus, session, by_subject=True)
        found = next((p for p in pending if p["interactionId"] == interaction_id), None)
        if found is None:
            return None
        session_id = found["sessionId"]
        command = answer_command(session_id, interaction_id, decision, reason=reason)
        # the answers' own door: an approver may publish there and on no other inbound subject
        await publish_command(bus, session_id, command, door=ANSWER_DOOR)
        return str(found["tool"])

    tool = run_on_bus(settings, work)
    if tool is None:
        where = f" in session {session}" if session else ""
        err.print(
            f"[red]error:[/] no pending prompt {interaction_id}{where}; "
            "`turnstream approvals` lists them"
        )
        raise typer.Exit(1)
    done = {"approve": "approved", "deny": "denied"}[decision]
    console.print(f"{done} {tool} ({interaction_id})")


Reason = Annotated[str | None, typer.Option(help="Why (recorded with the answer).")]
Session = Annotated[
    str | None,
    typer.Option(
        "--session",
        help="The prompt's session: asks only its prompts (an approver granted some "
        "sessions by name may ask no others).",
    ),
]


def approve(
    interaction_id: Annotated[str, typer.Argument(help="From `turnstream approvals`.")],
    reason: Reason = None,
    session: Session = None,
    nats_url: NatsUrl = None,
    data_dir: DataDir = None,
) -> None:
    """Allow a pending tool call."""
    _answer(interaction_id, "approve", reason, session, settings_of(nats_url, data_dir))


def deny(
    interaction_id: Annotated[str, typer.Argument(help="From `turnstream approvals`.")],
    reason: Reason = None,
    session: Session = None,
    nats_url: NatsUrl = None,
    data_dir: DataDir = None,
) -> None:
    """Refuse a pending tool call (the model is told, and may try something else)."""
    _answer(interaction_id, "deny", reason, session, settings_of(nats_url, data_dir))
