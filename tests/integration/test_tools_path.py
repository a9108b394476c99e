"""The tool path over a real nats-server: propose, approve, run once, feed back."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.integration.conftest import events_of, only, running_services, settings_for
from turnstream.bus import Bus
from turnstream.bus.embedded import EmbeddedServer
from turnstream.client import message_command, publish_command, send_and_wait
from turnstream.core.events import (
    HookDecided,
    InteractionRequested,
    ToolCallDenied,
    ToolInvocationCancelled,
    ToolInvocationFailed,
    ToolInvocationRequested,
    ToolInvocationStarted,
    ToolInvocationSucceeded,
    TurnEnded,
)
from turnstream.hooks import HookCall, HookRegistry, HookReply, HookSpec
from turnstream.tools import ToolContext, ToolRegistry, ToolSpec


def record_run(path: Path, invocation_id: str) -> None:
    with path.open("a") as runs:
        runs.write(invocation_id + "\n")


class Sleepy:
    """A test tool that sleeps, counts its runs in a file, and says when it ran."""

    def __init__(self, name: str, read_only: bool, timeout_s: float = 5.0) -> None:
        self.spec = ToolSpec(
            name=name,
            description=f"test tool {name}",
            parameters={
                "type": "object",
                "properties": {"ms": {"type": "integer", "minimum": 0}},
                "additionalProperties": False,
            },
            read_only=read_only,
            idempotent=read_only,
            timeout_s=timeout_s,
        )

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        record_run(ctx.workspace / f"{self.spec.name}.runs", ctx.invocation_id)
        await asyncio.sleep(args.get("ms", 0) / 1000)
        return f"{self.spec.name} done"


def registry() -> ToolRegistry:
    return ToolRegistry.load(
        extra=[Sleepy("slow_read", True), Sleepy("slow_write", False), Sleepy("hang", True, 0.3)]
    )


def script(tmp: Path, *replies: str) -> Path:
    path = tmp / "script.yaml"
    path.write_text("replies:\n" + "".join(f"  - {r}\n" for r in replies))
    return path


@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    (tmp_path / "workspace").mkdir()
    (tmp_path / "workspace" / "notes.txt").write_text("the secret word is turnip\n")
    return tmp_path


ROUND_TRIP = (
    "{tool_calls: [{name: read_file, arguments: {path: notes.txt}}]}",
    '{text: "the file says: {last_tool_result:40}"}',
)


async def test_tool_round_trip_completes_with_the_result_in_the_reply(
    nats_server: EmbeddedServer, bus: Bus, tmp: Path
) -> None:
    settings = settings_for(nats_server, tmp, script=script(tmp, *ROUND_TRIP))
    async with running_services(settings, bus, tools=registry()):
        outcome = await send_and_wait(bus, message_command("rt", "read my notes"), timeout=15)
    assert outcome.status == "completed", outcome
    assert "turnip" in (outcome.reply or "")
    events = await events_of(bus, "rt")
    assert len(only(events, TurnEnded)) == 1
    kinds = [e.type for e in events]
    for kind in (
        "ToolInvocationProposed",
        "ToolCallModeInvoked",
        "ToolCallApproved",
        "ToolInvocationRequested",
        "ToolInvocationStarted",
        "ToolInvocationSucceeded",
    ):
        assert kinds.count(kind) == 1, kind
    assert kinds.index("ToolCallApproved") < kinds.index("ToolInvocationRequested")


async def test_read_only_calls_overlap_and_mutating_ones_never_do(
    nats_server: EmbeddedServer, bus: Bus, tmp: Path
) -> None:
    calls = ", ".join(
        f"{{name: {name}, arguments: {{ms: 300}}}}"
        for name in ("slow_read", "slow_read", "slow_write", "slow_write", "slow_read")
    )
    settings = settings_for(
        nats_server, tmp, script=script(tmp, f"{{tool_calls: [{calls}]}}", '{text: "done"}')
    )
    async with running_services(settings, bus, tools=registry()):
        outcome = await send_and_wait(bus, message_command("par", "go"), timeout=20)
    assert outcome.completed
    events = await events_of(bus, "par")
    requested = {e.data.invocation_id: e.data.tool for e in only(events, ToolInvocationRequested)}
    started = {e.data.invocation_id: e.time for e in only(events, ToolInvocationStarted)}
    ended = {e.data.invocation_id: e.time for e in only(events, ToolInvocationSucceeded)}
    order = [e.data.invocation_id for e in only(events, ToolInvocationRequested)]
    spans = [(requested[i], started[i], ended[i]) for i in order]
    (r1, s1, e1), (r2, s2, e2) = spans[0], spans[1]
    assert r1 == r2 == "slow_read"
    assert s2 < e1 and s1 < e2, "the two reads should run at the same time"
    for i, (tool, start, end) in enumerate(spans):
        for j, (other, ostart, oend) in enumerate(spans):
            if i != j and "slow_write" in (tool, other):
                assert end <= ostart or oend <= start, f"{tool} overlapped {other}"
    assert [t for t, _, _ in spans] == [
        "slow_read",
        "slow_read",
        "slow_write",
        "slow_write",
        "slow_read",
    ]


@pytest.mark.parametrize(
    ("args", "kind"),
    [
        ("{path: ../outside.txt}", "path_escape"),
        ("{path: 42}", "invalid_arguments"),
        ("{file: notes.txt}", "invalid_arguments"),
    ],
)
async def test_bad_arguments_come_back_to_the_model_as_typed_errors(
    nats_server: EmbeddedServer, bus: Bus, tmp: Path, args: str, kind: str
) -> None:
    replies = (
        f"{{tool_calls: [{{name: read_file, arguments: {args}}}]}}",
        '{text: "got: {last_tool_result:200}"}',
    )
    settings = settings_for(nats_server, tmp, script=script(tmp, *replies))
    session = f"bad-{kind}-{abs(hash(args)) % 1000}"
    async with running_services(settings, bus, tools=registry()):
        outcome = await send_and_wait(bus, message_command(session, "x"), timeout=15)
    assert outcome.completed  # the model gets the error and answers
    (failed,) = only(await events_of(bus, session), ToolInvocationFailed)
    assert failed.data.error.kind == kind
    assert failed.data.error.error_class == "tool_runtime_error"
    assert kind in (outcome.reply or "")


async def test_a_hanging_tool_times_out(nats_server: EmbeddedServer, bus: Bus, tmp: Path) -> None:
    replies = (
        "{tool_calls: [{name: hang, arguments: {ms: 60000}}]}",
        '{text: "{last_tool_result}"}',
    )
    settings = settings_for(nats_server, tmp, script=script(tmp, *replies))
    async with running_services(settings, bus, tools=registry()):
        outcome = await send_and_wait(bus, message_command("hang", "x"), timeout=15)
    (failed,) = only(await events_of(bus, "hang"), ToolInvocationFailed)
    assert failed.data.error.error_class == "timeout"
    assert "0.3 s" in failed.data.error.detail and "timeout" in (outcome.reply or "")


async def test_a_redelivered_request_runs_once(
    nats_server: EmbeddedServer, bus: Bus, tmp: Path
) -> None:
    replies = ("{tool_calls: [{name: slow_write, arguments: {ms: 1}}]}", '{text: "ok"}')
    settings = settings_for(nats_server, tmp, script=script(tmp, *replies))
    async with running_services(settings, bus, tools=registry()):
        await send_and_wait(bus, message_command("once", "x"), timeout=15)
        (request,) = only(await events_of(bus, "once"), ToolInvocationRequested)
        # the same request again, as a redelivery would bring it
        again = request.model_copy(update={"id": request.id[:-4] + "ffff"})
        await bus.store.append_facts([again])
        await asyncio.sleep(1.0)
    runs = (tmp / "workspace" / "slow_write.runs").read_text().split()
    assert runs == [request.data.invocation_id]
    assert len(only(await events_of(bus, "once"), ToolInvocationSucceeded)) == 1


async def test_deny_mode_returns_policy_denied_to_the_model(
    nats_server: EmbeddedServer, bus: Bus, tmp: Path
) -> None:
    replies = (*ROUND_TRIP[:1], '{text: "tool said: {last_tool_result}"}')
    settings = settings_for(nats_server, tmp, script=script(tmp, *replies), security_mode="deny")
    async with running_services(settings, bus, tools=registry()):
        outcome = await send_and_wait(bus, message_command("denied", "x"), timeout=15)
    assert outcome.completed
    assert "policy_denied" in (outcome.reply or "")
    events = await events_of(bus, "denied")
    assert len(only(events, ToolCallDenied)) == 1 and not only(events, ToolInvocationStarted)


async def answer_prompts(bus: Bus, session: str, decision: str | None, seen: list) -> None:
    """Answer each prompt of `session` as it appears (None: never answer)."""

    async def on_msg(msg: Any) -> None:
        prompt = InteractionRequested.model_validate_json(msg.data)
        seen.append(prompt)
        if decision is None:
            return
        command = {
            "type": "answer",
            "sessionId": session,
            "chatId": session,
            "sender": {"kind": "human", "id": "reviewer"},
            "idempotencyKey": f"answer-{prompt.data.interaction_id}",
            "interactionId": prompt.data.interaction_id,
            "decision": decision,
            "reason": "test says so",
        }
        await publish_command(bus, session, command)

    await bus.nc.subscribe(bus.subjects.log_live(session, "InteractionRequested"), cb=on_msg)


@pytest.mark.parametrize("decision", ["approve", "deny", None])
async def test_ask_mode_prompts_and_follows_the_answer(
    nats_server: EmbeddedServer, bus: Bus, tmp: Path, decision: str | None
) -> None:
    replies = (*ROUND_TRIP[:1], '{text: "tool said: {last_tool_result}"}')
    settings = settings_for(
        nats_server,
        tmp,
        script=script(tmp, *replies),
        security_mode="ask",
        # the no-answer case waits this out; an answer must beat it on a slow machine
        answer_timeout_s=0.6 if decision is None else 30,
    )
    session = f"ask-{decision}"
    seen: list = []
    async with running_services(settings, bus, tools=registry()):
        await answer_prompts(bus, session, decision, seen)
        outcome = await send_and_wait(bus, message_command(session, "x"), timeout=15)
    assert outcome.completed and len(seen) == 1
    events = await events_of(bus, session)
    if decision == "approve":
        assert "turnip" in (outcome.reply or "")
        assert only(events, ToolInvocationSucceeded)
    else:
        (denied,) = only(events, ToolCallDenied)
        assert denied.data.timed_out is (decision is None)
        assert denied.data.authority == "interaction"
        assert "policy_denied" in (outcome.reply or "") and not only(events, ToolInvocationStarted)


def guard(name: str, reply: HookReply | None, timeout_ms: int = 300) -> tuple[HookSpec, Any]:
    async def hook(call: HookCall) -> HookReply:
        if reply is None:
            await asyncio.sleep(10)
        assert reply is not None
        return reply

    spec = HookSpec(name=name, stage="TOOL_CALL", point="pre", kind="guard", timeout_ms=timeout_ms)
    return spec, hook


@pytest.mark.parametrize(
    ("hook", "timed_out"),
    [
        (guard("no-notes", HookReply(action="deny_tool", reason="notes are private")), False),
        (guard("sleepy-guard", None), True),
    ],
)
async def test_a_guard_hook_denies_and_a_silent_guard_denies_on_timeout(
    nats_server: EmbeddedServer, bus: Bus, tmp: Path, hook, timed_out: bool
) -> None:
    replies = (*ROUND_TRIP[:1], '{text: "tool said: {last_tool_result}"}')
    settings = settings_for(nats_server, tmp, script=script(tmp, *replies))
    session = f"guard-{timed_out}"
    hooks = HookRegistry([hook], nc=None)
    async with running_services(settings, bus, tools=registry(), hooks=hooks):
        outcome = await send_and_wait(bus, message_command(session, "x"), timeout=15)
    assert outcome.completed
    events = await events_of(bus, session)
    (decided,) = only(events, HookDecided)
    assert decided.data.action == "deny_tool" and decided.data.timed_out is timed_out
    assert not only(events, ToolInvocationRequested)
    assert "policy_denied (hook" in (outcome.reply or "")


async def test_a_remote_hook_registered_in_kv_that_is_down_counts_as_timed_out(
    nats_server: EmbeddedServer, bus: Bus, tmp: Path
) -> None:
    replies = (*ROUND_TRIP[:1], '{text: "tool said: {last_tool_result}"}')
    settings = settings_for(nats_server, tmp, script=script(tmp, *replies))
    kv = await bus.js.key_value(bus.subjects.hooks_bucket)
    spec = {
        "name": "remote-guard",
        "stage": "TOOL_CALL",
        "point": "pre",
        "kind": "guard",
        "timeoutMs": 200,
        "subject": "hooks.remote-guard",
    }
    await kv.put("remote-guard", orjson.dumps(spec))
    try:
        async with running_services(settings, bus, tools=registry()):
            outcome = await send_and_wait(bus, message_command("remote-down", "x"), timeout=15)
    finally:
        await kv.delete("remote-guard")
    (decided,) = only(await events_of(bus, "remote-down"), HookDecided)
    assert decided.data.hook == "remote-guard" and decided.data.timed_out
    assert outcome.completed and "did not answer" in (outcome.reply or "")


async def test_a_remote_hook_that_answers_can_rewrite_arguments(
    nats_server: EmbeddedServer, bus: Bus, tmp: Path
) -> None:
    (tmp / "workspace" / "public.txt").write_text("nothing to see\n")
    replies = (*ROUND_TRIP[:1], '{text: "tool said: {last_tool_result}"}')
    settings = settings_for(nats_server, tmp, script=script(tmp, *replies))

    async def respond(msg: Any) -> None:
        call = HookCall.model_validate_json(msg.data)
        assert call.tool == "read_file"
        await msg.respond(orjson.dumps({"action": "modify", "args": {"path": "public.txt"}}))

    responder = await bus.nc.subscribe("hooks.redirect", cb=respond)
    kv = await bus.js.key_value(bus.subjects.hooks_bucket)
    spec = {
        "name": "redirect",
        "stage": "TOOL_CALL",
        "kind": "transform",
        "subject": "hooks.redirect",
    }
    await kv.put("redirect", orjson.dumps(spec))
    try:
        async with running_services(settings, bus, tools=registry()):
            outcome = await send_and_wait(bus, message_command("remote-up", "x"), timeout=15)
    finally:
        await kv.delete("redirect")
        await responder.unsubscribe()
    assert "nothing to see" in (outcome.reply or "")
    (decided,) = only(await events_of(bus, "remote-up"), HookDecided)
    assert decided.data.action == "modify" and decided.data.args == {"path": "public.txt"}


async def test_max_iterations_ends_a_tool_loop_with_limit_exceeded(
    nats_server: EmbeddedServer, bus: Bus, tmp: Path
) -> None:
    settings = settings_for(nats_server, tmp, script=script(tmp, ROUND_TRIP[0]), max_iterations=3)
    async with running_services(settings, bus, tools=registry()):
        outcome = await send_and_wait(bus, message_command("loop", "x"), timeout=20)
    assert outcome.status == "failed" and outcome.failure_class == "limit_exceeded"
    assert "maxIterations=3" in (outcome.reason or "")
    assert "may have completed" in (outcome.next_action or "")
    assert len(only(await events_of(bus, "loop"), ToolInvocationSucceeded)) == 3


async def test_a_large_result_is_cut_for_the_model_and_kept_whole_in_the_object_store(
    nats_server: EmbeddedServer, bus: Bus, tmp: Path
) -> None:
    big = "".join(f"line {i:05d}\n" for i in range(3000))  # ~33 KB
    (tmp / "workspace" / "big.txt").write_text(big)
    replies = ("{tool_calls: [{name: read_file, arguments: {path: big.txt}}]}", '{text: "ok"}')
    settings = settings_for(nats_server, tmp, script=script(tmp, *replies), tool_result_budget=1000)
    async with running_services(settings, bus, tools=registry()):
        await send_and_wait(bus, message_command("big", "x"), timeout=15)
    (result,) = only(await events_of(bus, "big"), ToolInvocationSucceeded)
    assert result.data.truncated and result.data.size == len(big)
    assert result.data.output.startswith("line 00000") and len(result.data.output) < 1200
    assert "truncated" in result.data.output and result.data.blob
    store = await bus.js.object_store(bus.subjects.blobs_bucket)
    kept = await store.get(result.data.blob)
    assert kept.data.decode() == big


async def test_a_hard_abort_cancels_the_turns_running_invocations(
    nats_server: EmbeddedServer, bus: Bus, tmp: Path
) -> None:
    replies = ("{tool_calls: [{name: slow_read, arguments: {ms: 5000}}]}", '{text: "ok"}')
    settings = settings_for(nats_server, tmp, script=script(tmp, *replies))
    seen: asyncio.Queue = asyncio.Queue()
    sub = await bus.nc.subscribe(
        bus.subjects.log_live("abort", "ToolInvocationStarted"), cb=seen.put
    )
    async with running_services(settings, bus, tools=registry()):
        waiting = asyncio.create_task(send_and_wait(bus, message_command("abort", "x"), timeout=15))
        started = ToolInvocationStarted.model_validate_json(
            (await asyncio.wait_for(seen.get(), 10)).data
        )
        # what a hard abort appends (interrupts arrive with the recovery work)
        ended = TurnEnded(
            id="01a20000-0000-7000-8000-00000000abcd",
            time=started.time,
            session_id="abort",
            chat_id=started.chat_id,
            turn_id=started.turn_id,
            trace_id=started.trace_id,
            correlation_id="operator",
            source="test/1",
            data={"status": "failed", "failureClass": "interrupted", "reason": "hard abort"},
        )
        await bus.store.append_facts([ended])
        for _ in range(50):
            cancelled = only(await events_of(bus, "abort"), ToolInvocationCancelled)
            if cancelled:
                break
            await asyncio.sleep(0.1)
        waiting.cancel()
    await sub.unsubscribe()
    assert cancelled and cancelled[0].data.invocation_id == started.data.invocation_id
    assert not only(await events_of(bus, "abort"), ToolInvocationSucceeded)


async def test_observer_hooks_see_every_stage_and_change_nothing(
    nats_server: EmbeddedServer, bus: Bus, tmp: Path
) -> None:
    seen: list[tuple[str, str]] = []

    async def observer(call: HookCall) -> HookReply:
        seen.append((call.stage, call.point))
        return HookReply(action="abort_turn")  # ignored: observers cannot change the turn

    spec = HookSpec(name="watch", stage="*", point="pre", kind="observer")
    settings = settings_for(nats_server, tmp, script=script(tmp, *ROUND_TRIP))
    hooks = HookRegistry([(spec, observer)])
    async with running_services(settings, bus, tools=registry(), hooks=hooks):
        outcome = await send_and_wait(bus, message_command("observed", "x"), timeout=15)
        await asyncio.sleep(0.2)
    assert outcome.completed
    stages = [stage for stage, _ in seen]
    for stage in ("RECEIVE_INPUT", "COMPOSE_REQUEST", "SEND_REQUEST", "TOOL_CALL", "RENDER"):
        assert stage in stages
    assert not only(await events_of(bus, "observed"), HookDecided)


async def test_an_approval_deadline_survives_a_restart_of_the_services(
    nats_server: EmbeddedServer, bus: Bus, tmp: Path
) -> None:
    replies = (*ROUND_TRIP[:1], '{text: "tool said: {last_tool_result}"}')
    settings = settings_for(
        nats_server, tmp, script=script(tmp, *replies), security_mode="ask", answer_timeout_s=2
    )
    seen: asyncio.Queue = asyncio.Queue()
    sub = await bus.nc.subscribe(
        bus.subjects.log_live("restart", "InteractionRequested"), cb=seen.put
    )
    async with running_services(settings, bus, tools=registry()):
        await publish_command(bus, "restart", message_command("restart", "x"))
        await asyncio.wait_for(seen.get(), 10)
    await sub.unsubscribe()  # every service is down now, the prompt still open
    async with running_services(settings, bus, tools=registry()):
        for _ in range(60):
            events = await events_of(bus, "restart")
            if only(events, TurnEnded):
                break
            await asyncio.sleep(0.1)
    (denied,) = only(events, ToolCallDenied)
    assert denied.data.timed_out
    (ended,) = only(events, TurnEnded)
    assert ended.data.status == "completed" and "policy_denied" in (ended.data.reply or "")


async def test_text_stage_hooks_rewrite_the_input_and_the_reply(
    nats_server: EmbeddedServer, bus: Bus, tmp: Path
) -> None:
    async def redact(call: HookCall) -> HookReply:
        return HookReply(action="modify", text=(call.text or "").replace("hunter2", "***"))

    async def shout(call: HookCall) -> HookReply:
        return HookReply(action="modify", text=(call.text or "").upper())

    hooks = HookRegistry(
        [
            (HookSpec(name="redact", stage="RECEIVE_INPUT", kind="transform"), redact),
            (HookSpec(name="shout", stage="RENDER", kind="transform"), shout),
        ]
    )
    settings = settings_for(nats_server, tmp, script=script(tmp, '{text: "you said {input}"}'))
    async with running_services(settings, bus, tools=registry(), hooks=hooks):
        outcome = await send_and_wait(bus, message_command("texts", "pw hunter2"), timeout=15)
    assert outcome.reply == "YOU SAID PW ***"
    decided = only(await events_of(bus, "texts"), HookDecided)
    assert [(d.data.stage, d.data.hook) for d in decided] == [
        ("RECEIVE_INPUT", "redact"),
        ("RENDER", "shout"),
    ]


def interrupt_command(session: str, mode: str) -> dict[str, Any]:
    return {
        "type": "interrupt",
        "sessionId": session,
        "chatId": session,
        "sender": {"kind": "human", "id": "ana"},
        "idempotencyKey": f"int-{session}-{mode}",
        "mode": mode,
    }


async def test_a_hard_interrupt_stops_a_streaming_turn(
    nats_server: EmbeddedServer, bus: Bus, tmp: Path
) -> None:
    slow = '{text: "one two three four five six seven eight nine ten", delay_ms: 200}'
    settings = settings_for(nats_server, tmp, script=script(tmp, slow))
    async with running_services(settings, bus, tools=registry()):
        turn = asyncio.create_task(
            send_and_wait(bus, message_command("stop-now", "talk"), timeout=15)
        )
        await asyncio.sleep(0.6)
        await publish_command(bus, "stop-now", interrupt_command("stop-now", "hard"))
        outcome = await turn
    assert outcome.status == "failed" and outcome.failure_class == "interrupted"
    events = await events_of(bus, "stop-now")
    assert len(only(events, TurnEnded)) == 1
    assert not [e for e in events if e.type == "ProviderRequestCompleted"]


async def test_a_graceful_interrupt_lets_the_running_tool_finish_and_summarises(
    nats_server: EmbeddedServer, bus: Bus, tmp: Path
) -> None:
    replies = (
        "{tool_calls: [{name: slow_read, arguments: {ms: 800}}, {name: slow_write}]}",
        '{text: "summary: {last_tool_result}"}',
    )
    settings = settings_for(nats_server, tmp, script=script(tmp, *replies))
    seen: asyncio.Queue = asyncio.Queue()
    sub = await bus.nc.subscribe(
        bus.subjects.log_live("wrap-up", "ToolInvocationStarted"), cb=seen.put
    )
    async with running_services(settings, bus, tools=registry()):
        turn = asyncio.create_task(send_and_wait(bus, message_command("wrap-up", "go"), timeout=15))
        await asyncio.wait_for(seen.get(), 10)
        await publish_command(bus, "wrap-up", interrupt_command("wrap-up", "graceful"))
        outcome = await turn
    await sub.unsubscribe()
    assert outcome.status == "completed"
    events = await events_of(bus, "wrap-up")
    assert [e.data.invocation_id for e in only(events, ToolInvocationSucceeded)]  # read finished
    (cancelled,) = only(events, ToolInvocationCancelled)  # the write never ran
    assert "interrupted" in cancelled.data.reason
    assert not (tmp / "workspace" / "slow_write.runs").exists()
    assert "summary:" in (outcome.reply or "")


def requested(
    event_id: str, session: str, invocation: str, tool: str, *, time: datetime | None = None
) -> ToolInvocationRequested:
    """A runner's request to run `tool` (`slow_read`: read-only and idempotent), as the
    executor gets it from the log."""
    from turnstream.core.events import ToolInvocationRequestedData

    return ToolInvocationRequested(
        id=f"01a20000-0000-7000-8000-{event_id:0>12}",
        time=time or datetime.now(UTC),
        session_id=session,
        chat_id="c",
        turn_id=f"t-{session}",
        trace_id="tr",
        correlation_id="k",
        source="turn-runner/test",
        data=ToolInvocationRequestedData(
            invocation_id=invocation,
            call_id="call-1",
            tool=tool,
            args={"ms": 1},
            read_only=tool == "slow_read",
            idempotent=tool == "slow_read",
            timeout_ms=5000,
            iteration=1,
        ),
    )


@pytest.mark.parametrize("tool", ["slow_write", "slow_read"])
async def test_a_claim_left_running_by_a_dead_executor(
    nats_server: EmbeddedServer, bus: Bus, tmp: Path, tool: str
) -> None:
    """A claim without a result means an executor died mid-run: a tool that is not
    idempotent fails `interrupted, mayHaveRun`; an idempotent one runs again."""
    settings = settings_for(nats_server, tmp, script=script(tmp, '{text: "unused"}'))
    invocation = f"inv-dead-{tool}"
    kv = await bus.js.key_value(bus.subjects.invocations_bucket)
    await kv.put(invocation, b"running")
    request = requested("a1" if tool == "slow_write" else "b2", f"dead-{tool}", invocation, tool)
    async with running_services(settings, bus, tools=registry()):
        await bus.store.append_facts([request])
        for _ in range(100):
            events = await events_of(bus, f"dead-{tool}")
            if only(events, ToolInvocationFailed) or only(events, ToolInvocationSucceeded):
                break
            await asyncio.sleep(0.05)
    if tool == "slow_write":
        (failed,) = only(events, ToolInvocationFailed)
        assert failed.data.error.kind == "interrupted" and failed.data.may_have_run
        assert not (tmp / "workspace" / "slow_write.runs").exists()
    else:
        assert len(only(events, ToolInvocationSucceeded)) == 1
        (started,) = only(events, ToolInvocationStarted)
        assert started.data.attempt == 2
        assert (tmp / "workspace" / "slow_read.runs").read_text().split() == [invocation]
    assert (await kv.get(invocation)).value == b"done"


async def test_a_request_older_than_its_claim_is_kept_is_failed_expired_not_run(
    nats_server: EmbeddedServer, bus: Bus, tmp: Path
) -> None:
    """Claims live `invocation_max_age_days` (1): a request two days old may have lost its
    claim, so whether it ran cannot be told; it is failed `expired, mayHaveRun`, never run,
    and a redelivery of it appends nothing more (its result is in the log)."""
    settings = settings_for(nats_server, tmp, script=script(tmp, '{text: "unused"}'))
    invocation, session = "inv-expired", "expired-1"
    two_days_ago = datetime.now(UTC) - timedelta(days=2)
    request = requested("3e1", session, invocation, "slow_write", time=two_days_ago)
    async with running_services(settings, bus, tools=registry()):
        await bus.store.append_facts([request])
        for _ in range(100):
            if only(await events_of(bus, session), ToolInvocationFailed):
                break
            await asyncio.sleep(0.05)
        await bus.store.append_facts([request.model_copy(update={"id": request.id[:-2] + "e2"})])
        await asyncio.sleep(0.5)  # a second result would be in by now
    events = await events_of(bus, session)
    (failed,) = only(events, ToolInvocationFailed)
    assert failed.data.error.kind == "expired" and failed.data.may_have_run
    assert "TURNSTREAM_INVOCATION_MAX_AGE_DAYS" in failed.data.error.detail
    assert not only(events, ToolInvocationStarted)
    assert not (tmp / "workspace" / "slow_write.runs").exists()
    claims = await bus.js.stream_info(f"KV_{bus.subjects.invocations_bucket}")
    assert claims.config.max_age == 86_400


async def test_streams_apply_bounds_a_claims_bucket_made_before_the_bound(bus: Bus) -> None:
    from nats.js import api

    from turnstream.bus.streams import StreamLimits, ensure_streams
    from turnstream.core.subjects import Subjects

    old = Subjects("oldclaims")  # a deployment of its own on this server
    await bus.js.create_key_value(config=api.KeyValueConfig(bucket=old.invocations_bucket))
    await ensure_streams(bus.js, old, StreamLimits(invocation_max_age_days=0.5))
    claims = await bus.js.stream_info(f"KV_{old.invocations_bucket}")
    assert claims.config.max_age == 43_200


@pytest.mark.parametrize("tool", ["slow_write", "slow_read"])
async def test_a_claim_left_running_after_the_result_was_appended(
    nats_server: EmbeddedServer, bus: Bus, tmp: Path, tool: str
) -> None:
    """An executor that died between appending the result and marking the claim done: the
    redelivered request finds the result in the log, marks the claim done and appends
    nothing (no second result: a `Failed{interrupted}` after the `Succeeded`, or a rerun)."""
    from turnstream.core.events import ToolInvocationSucceededData

    settings = settings_for(nats_server, tmp, script=script(tmp, '{text: "unused"}'))
    invocation, session = f"inv-done-{tool}", f"done-{tool}"
    kv = await bus.js.key_value(bus.subjects.invocations_bucket)
    await kv.put(invocation, b"running")
    suffix = "c3" if tool == "slow_write" else "d4"
    request = requested(f"1{suffix}", session, invocation, tool)
    envelope: dict[str, Any] = {
        key: getattr(request, key)
        for key in ("time", "session_id", "chat_id", "turn_id", "trace_id", "correlation_id")
    }
    succeeded = ToolInvocationSucceeded(
        id=f"01a20000-0000-7000-8000-0000000002{suffix}",
        source="tool-executor/died",
        data=ToolInvocationSucceededData(
            invocation_id=invocation, output="ran", size=3, duration_ms=1.0
        ),
        **envelope,
    )
    await bus.store.append_facts([succeeded])
    async with running_services(settings, bus, tools=registry()):
        await bus.store.append_facts([request])
        for _ in range(100):
            if (await kv.get(invocation)).value == b"done":
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)  # anything it would append after the claim is in by now
    events = await events_of(bus, session)
    assert (await kv.get(invocation)).value == b"done"
    assert [e.type for e in events] == ["ToolInvocationSucceeded", "ToolInvocationRequested"]
    assert not (tmp / "workspace" / f"{tool}.runs").exists()


def T0_NOW():
    from datetime import UTC, datetime

    return datetime.now(UTC)


@pytest.mark.parametrize(("tool", "ms"), [("slow_read", 0), ("slow_read", 600), ("slow_write", 0)])
async def test_started_goes_with_a_quick_read_only_result_and_ahead_of_any_other(
    nats_server: EmbeddedServer,
    bus: Bus,
    tmp: Path,
    tool: str,
    ms: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A read-only call that ends within the grace has `Started` appended with its result,
    in one batch; a slow one's is in the log while it runs; a mutating call's goes out as
    it starts. `Started` always comes first."""
    from turnstream.bus.store import JetStreamEventStore

    batches: list[tuple[str, ...]] = []
    append_facts = JetStreamEventStore.append_facts

    async def recorded(self: JetStreamEventStore, events: Any) -> list[int]:
        batches.append(tuple(e.type for e in events))
        return await append_facts(self, events)

    monkeypatch.setattr(JetStreamEventStore, "append_facts", recorded)
    session = f"started-{tool}-{ms}"
    replies = (f"{{tool_calls: [{{name: {tool}, arguments: {{ms: {ms}}}}}]}}", '{text: "ok"}')
    settings = settings_for(nats_server, tmp, script=script(tmp, *replies))
    async with running_services(settings, bus, tools=registry()):
        outcome = await send_and_wait(bus, message_command(session, "x"), timeout=15)
    assert outcome.status == "completed", outcome
    stored = await bus.store.read_session(session)
    (started,) = [s for s in stored if isinstance(s.event, ToolInvocationStarted)]
    (succeeded,) = [s for s in stored if isinstance(s.event, ToolInvocationSucceeded)]
    assert started.seq < succeeded.seq
    if ms:  # appended while the call ran, well before its result
        stored_at = {
            s.seq: (await bus.js.get_msg(bus.subjects.log_stream, s.seq)).time
            for s in (started, succeeded)
        }
        gap = stored_at[succeeded.seq] - stored_at[started.seq]
        assert gap.total_seconds() > 0.4
    together = ("ToolInvocationStarted", "ToolInvocationSucceeded")
    assert (together in batches) == (tool == "slow_read" and not ms)
