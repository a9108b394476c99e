"""The approver answers prompts and starts no turn (issue 36), tried as an attacker against
a real nats-server loaded with the shipped `ops/accounts.conf`, every service as its own
user:

- as the `approver` user, a `message` and an `interrupt` on the answers' door
  `ts.in.<session>.answer` are stored and rejected by the gateway
  (`InputRejected{not_permitted}` naming the door; no turn starts, the running one is not
  stopped);
- as the `approver` user, a `message` to `ts.in.<session>` is refused by the server and
  nothing is stored;
- the approver's answer on the door is taken: the tool runs once, the turn completes.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest

from tests.integration.conftest import events_of, only, wait_for
from tests.security.conftest import SecureServer
from tests.security.test_identities import SUBJECTS, as_user
from tests.security.test_runner_forgery import (
    WRITE,
    deployment,
    runs,
    turn_ended,
    waiting_for_a_person,
)
from turnstream.bus.permissions import PermissionDenied
from turnstream.client import answer_command, message_command, publish_command
from turnstream.core.events import (
    InputAccepted,
    InputRejected,
    InteractionAnswered,
    InteractionRequested,
    InterruptReceived,
    SessionTurnStart,
    ToolInvocationProposed,
    ToolInvocationSucceeded,
    TurnEnded,
)
from turnstream.core.subjects import ANSWER_DOOR

pytestmark = pytest.mark.integration


@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    (tmp_path / "workspace").mkdir()
    return tmp_path


async def test_the_approver_answers_but_cannot_start_or_stop_a_turn(
    secure_server: SecureServer, tmp: Path
) -> None:
    session = "answer-door-1"
    async with deployment(secure_server, tmp, *WRITE, security_mode="ask") as users:
        events = await waiting_for_a_person(users, session)
        [asked] = only(events, InteractionRequested)
        [proposal] = only(events, ToolInvocationProposed)
        operator = users["operator"]
        approver = await as_user(secure_server, "approver")
        try:
            # on the answers' door: stored, then rejected by the gateway, one by one
            door = SUBJECTS.inbound_answer(session)
            message = message_command(session, "start a turn", idempotency_key="by-approver-1")
            interrupt = {**message, "type": "interrupt", "mode": "hard"}
            interrupt.pop("text")
            interrupt["idempotencyKey"] = "by-approver-2"
            for command in (message, interrupt):
                key = command["idempotencyKey"]
                ack = await approver.js.publish(
                    door, orjson.dumps(command), headers={"Nats-Msg-Id": key}
                )

                def rejected_of(es: list, key: str = key) -> list[InputRejected]:
                    return [e for e in only(es, InputRejected) if e.correlation_id == key]

                events = await wait_for(operator, session, rejected_of)
                [rejected] = rejected_of(events)
                assert rejected.data.kind == "not_permitted"
                assert rejected.data.inbound_seq == ack.seq
                reason = rejected.data.reason
                assert f"'{command['type']}'" in reason and ".answer" in reason, reason
                assert "takes only answer" in reason, reason
                [ended] = [e for e in only(events, TurnEnded) if e.turn_id == rejected.turn_id]
                assert ended.data.status == "failed"
                assert ended.data.failure_class == "invalid_input"

            # on the people's subject: refused by the server, nothing stored
            before = (await operator.js.stream_info("TS_INBOUND")).state.last_seq
            sent = message_command(session, "start a turn", idempotency_key="by-approver-3")
            with pytest.raises(PermissionDenied) as refused:
                await publish_command(approver, session, sent)
            assert refused.value.subject == SUBJECTS.inbound(session)
            assert refused.value.user == "approver"
            await asyncio.sleep(0.2)
            assert (await operator.js.stream_info("TS_INBOUND")).state.last_seq == before

            # nothing the approver sent started or stopped a turn
            events = await events_of(operator, session)
            assert len(only(events, InputAccepted)) == 1
            assert len(only(events, SessionTurnStart)) == 1
            assert not only(events, InterruptReceived)
            assert not only(events, InteractionAnswered) and runs(tmp) == []

            # its answer, through the door, is taken: the tool runs once
            answer = answer_command(session, asked.data.interaction_id, "approve")
            await publish_command(approver, session, answer, door=ANSWER_DOOR)
            events = await wait_for(operator, session, turn_ended(proposal.turn_id), 30)
        finally:
            await approver.close()
    [answered] = only(events, InteractionAnswered)
    assert answered.data.decision == "approve"
    assert runs(tmp) == [proposal.data.invocation_id]
    assert len(only(events, ToolInvocationSucceeded)) == 1
    [ended] = turn_ended(proposal.turn_id)(events)
    assert ended.data.status == "completed", ended.data
