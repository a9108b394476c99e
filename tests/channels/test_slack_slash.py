"""Slack's slash commands `/stop` and `/new` (registered in the app's manifest), delivered
as Slack delivers them (a `slash_commands` envelope naming the conversation, not the
thread): they act on the thread the user last wrote to the bot in. `/stop` interrupts the
reply being written; `/new` makes that thread's next message a fresh session."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("slack_bolt")

from tests.channels.fake_slack import FakeSlack
from tests.channels.slack_harness import channel_up, ended, session_of, until
from tests.integration.conftest import events_of
from turnstream.bus import Bus
from turnstream.bus.embedded import EmbeddedServer
from turnstream.core.events import InputAccepted, TurnEnded

pytestmark = pytest.mark.integration
LONG = " ".join(f"word{i}" for i in range(300))
SCRIPT = f"""
replies:
  - text: "{LONG}"
    delay_ms: 40
  - text: "fresh"
"""


def slash(fake: FakeSlack, command: str, channel: str, user: str) -> dict[str, str]:
    return {
        "token": "t",
        "team_id": fake.team_id,
        "channel_id": channel,
        "user_id": user,
        "user_name": user.lower(),
        "command": command,
        "text": "",
        "response_url": f"{fake.api_url}response",
        "trigger_id": f"trig-{command}-{len(fake.socket.sent)}",
        "api_app_id": fake.app_id,
    }


async def test_slash_stop_interrupts_and_slash_new_starts_a_fresh_session(
    nats_server: EmbeddedServer, bus: Bus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with channel_up(nats_server, bus, tmp_path, monkeypatch, script=SCRIPT) as (fake, _):
        _event, root = await fake.user_says("D0DM", "U0ALICE", "write a lot")
        session = session_of("D0DM", root)
        await until(lambda: fake.calls_of("chat.appendStream"))
        stop = await fake.socket.deliver("slash_commands", slash(fake, "/stop", "D0DM", "U0ALICE"))
        await until(lambda: fake.socket.acked(stop))
        events = await ended(bus, session)
        (end,) = [e for e in events if isinstance(e, TurnEnded)]
        assert end.data.failure_class == "interrupted", end
        new = await fake.socket.deliver("slash_commands", slash(fake, "/new", "D0DM", "U0ALICE"))
        await until(lambda: fake.socket.acked(new))
        await until(lambda: [m for m in fake.bot_messages("D0DM") if "new conversation" in m.text])
        await fake.user_says("D0DM", "U0ALICE", "again", thread_ts=root)
        fresh = await ended(bus, f"{session}-g1")
        assert [e.data.text for e in fresh if isinstance(e, InputAccepted)] == ["again"]
        assert len([e for e in await events_of(bus, session) if isinstance(e, TurnEnded)]) == 1
