"""A workflow survives a kill -9 of the turn-runner mid-stage: the new runner rebuilds the
run from the log and continues it; the stage graph from the log equals the live one."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest

from tests.recovery.test_kill_runner import SERVICES, Deployment, wait_for
from turnstream.bus import Bus, connect
from turnstream.bus.embedded import EmbeddedServer
from turnstream.bus.streams import StreamLimits
from turnstream.client import attach_command, publish_command
from turnstream.core.events import Event, TurnEnded, WorkflowExit
from turnstream.core.subjects import Subjects
from turnstream.core.turn import SessionState, fold, state_from_json
from turnstream.core.workflow.view import stage_rows

pytestmark = pytest.mark.e2e
SCRIPT = """
replies: [{text: unused}]
stages:
  write:
    - tool_calls: [{name: write_file, arguments: {path: runs.txt, content: "ran\\n", append: true}}]
    - tool_calls: [{name: submit_write, arguments: {done: true}}]
      delay_ms: 400
  check:
    - tool_calls: [{name: submit_check, arguments: {done: true}}]
"""


def stage(name: str) -> str:
    return (
        f"---\nid: {name}\nname: {name}\nallowedTools: [write_file]\n"
        f"completionTool: submit_{name}\n"
        "completionSchema: {type: object, required: [done]}\n"
        "retryPolicy: {maxAttempts: 1, backoff: none}\nturnCap: 4\nresolutionPolicy: fail\n"
        f"---\nStage {{{{stage.name}}}} of run {{{{ctx.workflowRunId}}}}.\n"
    )


@pytest.fixture
async def deployment(tmp_path: Path) -> AsyncIterator[tuple[Deployment, Bus]]:
    flow = tmp_path / "flows" / "two"
    flow.mkdir(parents=True)
    (flow / "workflow.yaml").write_text("name: two\nsteps: [write, check]\n")
    for name in ("write", "check"):
        (flow / f"{name}.md").write_text(stage(name))
    with EmbeddedServer(tmp_path / "nats") as server:
        bus = await connect(server.url, Subjects("ts"), ensure=StreamLimits())
        d = Deployment(tmp_path, server.url)
        (tmp_path / "script.yaml").write_text(SCRIPT)
        d.env["TURNSTREAM_WORKFLOWS"] = str(tmp_path / "flows")
        d.env["TURNSTREAM_SECURITY_MODE"] = "deny"  # stage envelopes approve, not the mode
        for name in SERVICES:
            d.start(name)
        await asyncio.sleep(2.0)
        try:
            yield d, bus
        finally:
            d.stop_all()
            await bus.close()


async def events_of(bus: Bus, session: str) -> list[Event]:
    return [s.event for s in await bus.store.read_session(session)]


async def test_a_runner_killed_mid_stage_restarts_and_the_workflow_completes(
    deployment: tuple[Deployment, Bus],
) -> None:
    d, bus = deployment
    session = "wf-crash"
    seen: asyncio.Queue[object] = asyncio.Queue()
    sub = await bus.nc.subscribe(bus.subjects.log(session, "ProviderRequestStarted"), cb=seen.put)
    await publish_command(bus, session, attach_command(session, "two"))
    for _ in range(2):  # the write stage's second model call: the slow completion in flight
        async with asyncio.timeout(20):
            await seen.get()
    await sub.unsubscribe()
    d.kill9("turn_runner")
    await asyncio.sleep(0.5)
    d.start("turn_runner")
    await wait_for(bus, session, "WorkflowExit", timeout=30)
    await asyncio.sleep(1.0)  # anything appended twice would be there by now
    events = await events_of(bus, session)
    [end] = [e for e in events if isinstance(e, WorkflowExit)]
    assert end.data.status == "completed", end.data
    ended = Counter(e.turn_id for e in events if isinstance(e, TurnEnded))
    started = [e.turn_id for e in events if e.type == "SessionTurnStart"]
    assert len(started) == 2 and all(ended[t] == 1 for t in started), ended
    assert (d.root / "workspace" / "runs.txt").read_text().splitlines() == ["ran"]
    rebuilt = fold(SessionState(session), events)
    subject = bus.subjects.api("turn-runner", "session")
    reply = await bus.nc.request(subject, orjson.dumps({"sessionId": session}), timeout=5)
    live = state_from_json(reply.data)
    assert live == rebuilt
    assert rebuilt.workflow is not None and live.workflow is not None
    assert stage_rows(live.workflow) == stage_rows(rebuilt.workflow)
    assert [r.verdict for r in stage_rows(rebuilt.workflow)] == ["ok", "ok"]
