"""A workflow survives a kill -9 of the turn-runner mid-stage: the new runner rebuilds the
run from the log and continues it; the stage graph from the log equals the live one."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.recovery.harness import Witness, check_invariants, deployment, wait_for
from turnstream.client import attach_command, live_state, publish_command
from turnstream.core.events import WorkflowExit
from turnstream.core.session import SessionState, fold, state_from_json
from turnstream.core.workflow.view import stage_rows

pytestmark = pytest.mark.e2e
SCRIPT = """
replies: [{text: unused}]
stages:
  write:
    - tool_calls: [{name: count_run, arguments: {file: runs.txt}}]
    - tool_calls: [{name: submit_write, arguments: {done: true}}]
      delay_ms: 400
  check:
    - tool_calls: [{name: submit_check, arguments: {done: true}}]
"""


def stage(name: str) -> str:
    return (
        f"---\nid: {name}\nname: {name}\nallowedTools: [count_run]\n"
        f"completionTool: submit_{name}\n"
        "completionSchema: {type: object, required: [done]}\n"
        "retryPolicy: {maxAttempts: 1, backoff: none}\nturnCap: 4\nresolutionPolicy: fail\n"
        f"---\nStage {{{{stage.name}}}} of run {{{{ctx.workflowRunId}}}}.\n"
    )


async def test_a_runner_killed_mid_stage_restarts_and_the_workflow_completes(
    tmp_path: Path,
) -> None:
    flow = tmp_path / "flows" / "two"
    flow.mkdir(parents=True)
    (flow / "workflow.yaml").write_text("name: two\nsteps: [write, check]\n")
    for name in ("write", "check"):
        (flow / f"{name}.md").write_text(stage(name))
    session = "wf-crash"
    env = {
        "TURNSTREAM_WORKFLOWS": str(tmp_path / "flows"),
        "TURNSTREAM_SECURITY_MODE": "deny",  # stage envelopes approve, not the mode
    }
    async with (
        deployment(tmp_path, SCRIPT, **env) as (d, bus),
        Witness(bus, session) as witness,
    ):
        seen: asyncio.Queue[object] = asyncio.Queue()
        subject = bus.subjects.log(session, "ProviderRequestStarted")
        sub = await bus.nc.subscribe(subject, cb=seen.put)
        await publish_command(bus, session, attach_command(session, "two"))
        for _ in range(2):  # the write stage's second model call: the slow completion
            async with asyncio.timeout(20):
                await seen.get()
        await sub.unsubscribe()
        d.kill9("turn_runner")
        await asyncio.sleep(0.5)
        d.start("turn_runner")
        await wait_for(bus, session, "WorkflowExit", timeout=60)
        events = await check_invariants(bus, session, witness)
        assert len(d.runs("runs.txt")) == 1  # the side effect ran once
        reply = await live_state(bus, session)
    [end] = [e for e in events if isinstance(e, WorkflowExit)]
    assert end.data.status == "completed", end.data
    assert len([e for e in events if e.type == "SessionTurnStart"]) == 2
    live = state_from_json(reply).workflow
    rebuilt = fold(SessionState.of(session), events).workflow
    assert live is not None and rebuilt is not None
    assert stage_rows(live) == stage_rows(rebuilt)
    assert [r.verdict for r in stage_rows(rebuilt)] == ["ok", "ok"]
