"""Approval and audit restarted at once under the same `TURNSTREAM_INSTANCE_ID` after a
SIGKILL take their leases back at once: the prompts are listed again and the audit's
partitions are held again long before the 30 s lease TTL would have freed them, and
nothing is asked, decided or reported twice. (The turn-runner's: test_runner_restart.)"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from nats.errors import NoRespondersError

from tests.recovery.harness import check_invariants, deployment, wait_for
from tests.recovery.test_two_approvals import ONE_CALL, per_invocation
from tests.recovery.test_two_audits import SCRIPT, bad_turn, violations
from turnstream.bus import Bus
from turnstream.client import answer_command, message_command, pending_prompts, publish_command
from turnstream.core.events import InteractionRequested, TurnEnded

pytestmark = pytest.mark.e2e
SLOW_LEASES = {"TURNSTREAM_LEASE_TTL_S": "30", "TURNSTREAM_LEASE_RENEW_S": "3"}
BACK_WITHIN_S = 15.0
"""Well before the TTL: without the stable name the leases would be free only after it."""


async def listed_prompts(bus: Bus) -> set[str]:
    """The prompts the approval instances list (none while no instance is up)."""
    try:
        return {p["interactionId"] for p in await pending_prompts(bus)}
    except (NoRespondersError, TimeoutError):
        return set()


async def test_approval_restarted_under_its_id_lists_its_prompts_again_at_once(
    tmp_path: Path,
) -> None:
    async with deployment(
        tmp_path,
        ONE_CALL,
        TURNSTREAM_SECURITY_MODE="ask",
        TURNSTREAM_INSTANCE_ID="host-a",
        **SLOW_LEASES,
    ) as (d, bus):
        sessions = [f"ask-{i}" for i in range(4)]
        for s in sessions:
            await publish_command(bus, s, message_command(s, "count"))
        asked: dict[str, InteractionRequested] = {}
        for s in sessions:
            [event] = await wait_for(bus, s, "InteractionRequested")
            assert isinstance(event, InteractionRequested)
            asked[event.data.interaction_id] = event
        assert {p["interactionId"] for p in await pending_prompts(bus)} == set(asked)

        d.kill9("approval")
        d.start("approval")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + BACK_WITHIN_S
        while (listed := await listed_prompts(bus)) != set(asked):
            assert loop.time() < deadline, f"prompts not back: {set(asked) - listed}"
            await asyncio.sleep(0.2)

        for interaction_id, event in asked.items():
            answer = answer_command(event.session_id, interaction_id, "approve")
            await publish_command(bus, event.session_id, answer)
        for s in sessions:
            [ended] = await wait_for(bus, s, "TurnEnded")
            assert isinstance(ended, TurnEnded) and ended.data.status == "completed"
            log = await check_invariants(bus, s)
            assert set(per_invocation(log, "InteractionRequested").values()) == {1}
            assert set(per_invocation(log, "ToolCallApproved").values()) == {1}
        assert len(d.runs("runs.txt")) == len(sessions)


async def audit_holders(bus: Bus) -> list[str | None]:
    kv = await bus.js.key_value(bus.subjects.leases_bucket)
    found: list[str | None] = []
    for k in range(bus.subjects.log_partitions):
        try:
            found.append((await kv.get(f"audit.part.{k}")).value.decode() or None)
        except Exception:
            found.append(None)
    return found


async def test_an_audit_restarted_under_its_id_holds_its_partitions_again_at_once(
    tmp_path: Path,
) -> None:
    async with deployment(
        tmp_path, SCRIPT, log_partitions=4, TURNSTREAM_INSTANCE_ID="host-a", **SLOW_LEASES
    ) as (d, bus):
        d.start("audit")
        async with asyncio.timeout(30):
            while await audit_holders(bus) != ["host-a"] * 4:  # noqa: ASYNC110 (the bucket)
                await asyncio.sleep(0.1)
        await bus.store.append_facts(bad_turn("bad-before"))
        await wait_for(bus, "bad-before", "AuditViolation")

        d.kill9("audit")
        await bus.store.append_facts(bad_turn("bad-while-down"))
        d.start("audit")
        # reported by the restarted audit: it holds that partition again, long before the TTL
        await wait_for(bus, "bad-while-down", "AuditViolation", timeout=BACK_WITHIN_S)
        await bus.store.append_facts(bad_turn("bad-after"))
        await wait_for(bus, "bad-after", "AuditViolation")
        for session in ("bad-before", "bad-while-down", "bad-after"):
            assert len(await violations(bus, session)) == 1
