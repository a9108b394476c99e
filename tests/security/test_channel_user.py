"""The chat channels' NATS users (`channel-telegram`, `channel-slack`) have exactly what a
channel needs, tried against a real nats-server loaded with the shipped ops/accounts.conf:
the Telegram channel, as its own process and user, answers a DM with every service under
its own user; as an attacker, the same user cannot append an event, write another
service's bucket or another channel's, read another durable's deliveries or the log's
subjects, or purge its own bucket. The admin may settle pairing codes, and nothing else of
a channel's records."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from tests.channels.conftest import channel_process, fake, wait_polling
from tests.channels.fake_telegram import FakeTelegram, eventually
from tests.integration.conftest import running_services
from tests.security.conftest import SecureServer, apply_as_operator
from tests.security.test_identities import as_user, settings, streams
from turnstream.bus.permissions import PermissionDenied, answered

pytestmark = pytest.mark.integration
__all__ = ["fake", "streams"]
REPLY = "hello from the agent"


async def test_the_telegram_channel_answers_as_its_own_user(
    secure_server: SecureServer, fake: FakeTelegram, tmp_path: Path
) -> None:
    await apply_as_operator(secure_server)
    (tmp_path / "script.yaml").write_text(f'replies:\n  - text: "{REPLY}"\n')
    scripted = tmp_path / "script.yaml"
    async with running_services(
        lambda user: settings(secure_server, user, tmp_path, script=scripted)
    ):
        with channel_process(
            secure_server,  # type: ignore[arg-type]
            fake,
            tmp_path,
            TURNSTREAM_NATS_URL=secure_server.url("channel-telegram"),
            TURNSTREAM_TELEGRAM__DM_POLICY="open",
        ) as channel:
            await wait_polling(fake)
            await fake.say("hi", chat_id=61)
            await eventually(lambda: [m for m in fake.sent(61) if m.text == REPLY])
            assert channel.stop() == 0
    output = channel.output()
    assert "violation" not in output.lower(), output


FORBIDDEN_PUBLISH = (
    "ts.log.telegram-61.TurnEnded",  # no event is the channel's
    "ts.log.telegram-61.InteractionAnswered",
    "$KV.ts_sessions.telegram-61",  # another service's bucket
    "$KV.ts_leases.session.telegram-61",
    "$KV.ts_channel_slack.turn.x",  # another channel's records
    "$JS.API.STREAM.PURGE.KV_ts_channel_telegram",  # its own bucket, purged
    "$JS.API.STREAM.DELETE.KV_ts_channel_telegram",
    "$JS.API.CONSUMER.DELETE.TS_LOG.channel-telegram",  # its own durable
    "ts.live.telegram-61.t1",  # forged tokens
)
FORBIDDEN_SUBSCRIBE = ("ts.deliver.turn-runner", "ts.deliver.channel-slack", "ts.log.>", "ts.in.>")


@pytest.mark.parametrize("subject", FORBIDDEN_PUBLISH)
async def test_the_channel_user_may_not_publish_beyond_its_own(
    secure_server: SecureServer, streams: None, subject: str
) -> None:
    attacker = await as_user(secure_server, "channel-telegram")
    try:
        with pytest.raises(PermissionDenied):
            await attacker.refusals.publish(attacker.js, subject, b"{}")
    finally:
        await attacker.close()


async def test_the_channel_user_may_not_listen_beyond_its_own(
    secure_server: SecureServer, streams: None
) -> None:
    attacker = await as_user(secure_server, "channel-telegram")
    try:
        for subject in FORBIDDEN_SUBSCRIBE:
            await attacker.nc.subscribe(subject)
        await answered(attacker.nc)
        for subject in FORBIDDEN_SUBSCRIBE:
            assert attacker.refusals.denied("subscription", subject) is not None, subject
        for subject in ("ts.deliver.channel-telegram", "ts.live.>"):  # what it needs
            await attacker.nc.subscribe(subject)
        await answered(attacker.nc)
        assert attacker.refusals.denied("subscription", "ts.live.>") is None
        # its own records, and commands in
        kv = await attacker.js.key_value("ts_channel_telegram")
        await kv.put("turn.x", b"{}")
        ack = await attacker.refusals.publish(
            attacker.js,
            "ts.in.telegram-61",
            orjson.dumps({"type": "message"}),
            headers={"Nats-Msg-Id": "sec-1"},
        )
        assert ack.seq > 0
    finally:
        await attacker.close()


async def test_the_admin_settles_pairing_codes_and_nothing_else_of_a_channel(
    secure_server: SecureServer, streams: None
) -> None:
    admin = await as_user(secure_server, "admin")
    try:
        for subject in ("$KV.ts_channel_telegram.pairing", "$KV.ts_channel_telegram.paired.7"):
            await admin.refusals.publish(admin.js, subject, b"{}")
        for subject in ("$KV.ts_channel_telegram.turn.x", "$KV.ts_channel_telegram.gen.x"):
            with pytest.raises(PermissionDenied):
                await admin.refusals.publish(admin.js, subject, b"{}")
    finally:
        await admin.close()
