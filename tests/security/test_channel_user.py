"""The chat channels' NATS users (`channel-telegram`, `channel-slack`) have exactly what a
channel needs, tried against a real nats-server loaded with the shipped ops/accounts.conf:
the Telegram channel, as its own process and user, answers a DM with every service under
its own user; as an attacker, the same user cannot append an event, write another
service's bucket or another channel's, read another durable's deliveries or the log's
subjects, or purge its own bucket. It adds the files users post to the object store and
can read no object there, purge none, and a meta it rewrites (which subject permissions
cannot stop) is caught by the reader's hash check. The admin may settle pairing codes, and
nothing else of a channel's records."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import orjson
import pytest
from nats.js import api

from tests.channels.conftest import channel_process, fake, wait_polling
from tests.channels.fake_telegram import FakeTelegram
from tests.channels.test_telegram_files import BIG_PDF
from tests.integration.conftest import running_services
from tests.polling import eventually
from tests.security.conftest import SecureServer, apply_as_operator
from tests.security.test_identities import as_user, settings, streams
from turnstream.bus.objects import put_new_attachment, read_attachment
from turnstream.bus.permissions import PermissionDenied, answered
from turnstream.client import store_attachment

pytestmark = pytest.mark.integration
__all__ = ["fake", "streams"]
REPLY = "hello from the agent"


async def test_the_telegram_channel_answers_as_its_own_user(
    secure_server: SecureServer, fake: FakeTelegram, tmp_path: Path
) -> None:
    await apply_as_operator(secure_server)
    (tmp_path / "script.yaml").write_text(
        f'replies:\n  - text: "{REPLY}"\n  - text: "got the file"\n'
    )
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
            # a file over the inline bound: the channel puts it into the object store
            await fake.send_file(BIG_PDF, document=("spec.pdf", "application/pdf"), chat_id=61)
            await eventually(lambda: [m for m in fake.sent(61) if m.text == "got the file"])
            assert channel.stop() == 0
    output = channel.output()
    assert "violation" not in output.lower(), output
    runner = await as_user(secure_server, "turn-runner")
    try:
        assert await read_attachment(runner, hashlib.sha256(BIG_PDF).hexdigest()) == BIG_PDF
    finally:
        await runner.close()


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
    "$JS.API.STREAM.PURGE.OBJ_ts_attachments",  # attachments: it adds, never purges,
    "$JS.API.STREAM.MSG.DELETE.OBJ_ts_attachments",
    "$JS.API.STREAM.MSG.GET.OBJ_ts_attachments",  # nor reads their bytes
    "$JS.API.DIRECT.GET.OBJ_ts_attachments.$O.ts_attachments.C.somechunks",
    "$JS.API.STREAM.DELETE.OBJ_ts_attachments",
    "$O.ts_blobs.M.YXJjaGl2ZS92aWN0aW0uanNvbmw=",  # nor writes tool results or archives
    "$O.ts_blobs.C.forgedchunks",
    "$JS.API.STREAM.PURGE.OBJ_ts_blobs",
    "$JS.API.STREAM.MSG.DELETE.OBJ_ts_blobs",
    "$JS.API.STREAM.MSG.GET.OBJ_ts_blobs",  # nor reads a tool result's or archive's bytes
    "$JS.API.DIRECT.GET.OBJ_ts_blobs",
    "$JS.API.DIRECT.GET.OBJ_ts_blobs.$O.ts_blobs.C.somechunks",
    "$JS.API.STREAM.DELETE.OBJ_ts_blobs",
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


async def test_the_channel_user_adds_attachments_and_one_it_rewrites_is_not_read(
    secure_server: SecureServer, streams: None
) -> None:
    channel = await as_user(secure_server, "channel-telegram")
    runner = await as_user(secure_server, "turn-runner")
    try:
        pdf = await store_attachment(channel, "a.pdf", "application/pdf", BIG_PDF)
        assert not await put_new_attachment(channel, f"att/{pdf['sha256']}", BIG_PDF), "once"
        assert await read_attachment(runner, pdf["sha256"]) == BIG_PDF
        # as an attacker: other chunks under the attachment's meta, their digest "honest"
        forged = b"%PDF- not what the user sent"
        await channel.js.publish("$O.ts_attachments.C.forgednuid", forged)
        digest = base64.urlsafe_b64encode(hashlib.sha256(forged).digest()).decode()
        info = api.ObjectInfo(
            name=f"att/{pdf['sha256']}",
            bucket="ts_attachments",
            nuid="forgednuid",
            size=len(forged),
            chunks=1,
            digest=f"SHA-256={digest}",
        )
        meta = base64.urlsafe_b64encode(info.name.encode()).decode()
        await channel.js.publish(
            f"$O.ts_attachments.M.{meta}",
            orjson.dumps(info.as_dict()),
            headers={"Nats-Rollup": "sub"},
        )
        with pytest.raises(RuntimeError, match="holds other bytes"):
            await read_attachment(runner, pdf["sha256"])
    finally:
        await channel.close()
        await runner.close()
