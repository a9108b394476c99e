"""No user but the operator can delete, redefine or make a durable consumer (issue 36), tried
as an attacker against a real nats-server loaded with the shipped ops/accounts.conf.

Before, the `audit` and `http` users' `$JS.API.CONSUMER.DELETE.TS_LOG.<name>` for other
services' durables answered success and the durables were gone; and the bare
`$JS.API.CONSUMER.CREATE.TS_LOG` (where an unnamed consumer's create goes, granted to every
service) lets a request redefine any consumer its body names: nats-server 2.15.1 changed the
turn-runner's durable's filter to what the request said. Each user here tries every way in,
on every durable, and every durable is found as the setup step made it."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from tests.security.conftest import SecureServer
from tests.security.test_identities import SUBJECTS, as_user, streams
from turnstream.bus.durables import placements
from turnstream.bus.ordered import ephemeral_name, ordered_subscribe

pytestmark = pytest.mark.integration
__all__ = ["streams"]  # test_identities' fixture, used here too
USERS = (
    "gateway",
    "turn-runner",
    "approval",
    "tool-executor",
    "audit",
    "http",
    "client",
    "channel-telegram",
    "channel-slack",
)
PUSH_TIMEOUT_S = 10.0  # the default the setup step made a2a-push with


def _attacks(stream: str, name: str, made: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Every request that would delete or redefine durable `name` on `stream`."""
    redefined = {**made, "filter_subjects": [SUBJECTS.log_kind("Nothing")], "name": name}
    redefined.pop("durable_name", None)
    as_durable = {**made, "filter_subjects": [SUBJECTS.log_kind("Nothing")]}
    api = "$JS.API.CONSUMER"
    body = {"stream_name": stream}
    return [
        (f"{api}.DELETE.{stream}.{name}", {}),
        (f"{api}.CREATE.{stream}", {**body, "config": redefined}),
        (f"{api}.CREATE.{stream}", {**body, "config": redefined, "action": "update"}),
        (f"{api}.CREATE.{stream}.{name}", {**body, "config": redefined}),
        (
            f"{api}.CREATE.{stream}.{name}.{SUBJECTS.log_kind('Nothing')}",
            {**body, "config": redefined},
        ),
        (f"{api}.DURABLE.CREATE.{stream}.{name}", {**body, "config": as_durable}),
        # a name of its own in the subject, the durable's in the body: the subject's wins
        (f"{api}.CREATE.{stream}.{ephemeral_name()}", {**body, "config": redefined}),
    ]


def _as_made(info: Any) -> dict[str, Any]:
    config = info.config
    return {
        "durable_name": config.durable_name,
        "filters": sorted(config.filter_subjects or [config.filter_subject]),
        "deliver_subject": config.deliver_subject,
        "ack_policy": config.ack_policy,
        "max_ack_pending": config.max_ack_pending,
    }


@pytest.mark.parametrize("user", USERS)
async def test_no_user_may_delete_or_redefine_a_durable(
    secure_server: SecureServer, streams: None, user: str
) -> None:
    operator = await as_user(secure_server, "operator")
    attacker = await as_user(secure_server, user)
    try:
        durables = [(stream, d.name) for stream, d, _ in placements(SUBJECTS, PUSH_TIMEOUT_S)]
        before = {
            (stream, name): await operator.js.consumer_info(stream, name)
            for stream, name in durables
        }
        requests = [
            (subject, payload)
            for (stream, name), info in before.items()
            for subject, payload in _attacks(stream, name, info.config.as_dict())
        ]

        async def attempt(subject: str, payload: dict[str, Any]) -> str | None:
            """The server's answer if it accepted the request, else None."""
            try:
                reply = await attacker.nc.request(subject, orjson.dumps(payload), timeout=1.0)
            except Exception:  # refused: the server drops it, nothing answers
                return None
            answer = orjson.loads(reply.data) if reply.data else {}
            return None if "error" in answer else reply.data.decode()[:200]

        answers = await asyncio.gather(*(attempt(s, p) for s, p in requests))
        for (stream, name), info in before.items():
            after = await operator.js.consumer_info(stream, name)  # still there
            assert _as_made(after) == _as_made(info), (user, stream, name)
        accepted = [
            (subject, answer)
            for (subject, _), answer in zip(requests, answers, strict=True)
            if answer is not None and ".eph_" not in subject  # its own consumer: harmless
        ]
        assert accepted == [], accepted
        refused = {
            subject for subject, _ in requests if attacker.refusals.denied("publish", subject)
        }
        for subject, _ in requests:
            if ".DELETE." in subject or subject.endswith((".TS_LOG", ".TS_INBOUND")):
                assert subject in refused, (user, subject)  # by the server's permissions
    finally:
        await attacker.close()
        await operator.close()


async def test_a_service_reads_the_log_through_a_consumer_of_its_own(
    secure_server: SecureServer, streams: None
) -> None:
    """What the bare create did for them, they still do: an ordered consumer on the log,
    named in the subject (bus/ordered.py), as the internet-facing `http` user."""
    http = await as_user(secure_server, "http")
    operator = await as_user(secure_server, "operator")
    try:

        async def ignore(_msg: Any) -> None:
            return None

        sub = await ordered_subscribe(
            http.js, SUBJECTS.log_all, stream=SUBJECTS.log_stream, cb=ignore
        )
        name = sub._sub._jsi._ccreq.name
        info = await operator.js.consumer_info(SUBJECTS.log_stream, name)
        assert info.config.durable_name is None and name.startswith("eph_")
        assert http.refusals.latest() is None
        await sub.unsubscribe()
    finally:
        await operator.close()
        await http.close()
