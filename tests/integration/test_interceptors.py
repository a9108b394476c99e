"""The turn's hook points end to end: in-process and remote (NATS request/reply) hooks at
the model request and response, the tool results and the turn's stop, on a real
nats-server, the model called through the official Anthropic SDK against its wire fake.
What each hook changed is in the log, and the model got exactly that."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from tests.integration.conftest import running_services, settings_for
from tests.providers.fake_servers import FakeAnthropic, Text, ToolCalls
from turnstream.bus import Bus
from turnstream.bus.embedded import EmbeddedServer
from turnstream.client import message_command, send_and_wait
from turnstream.core.events import HookDecided, ProviderRequestStarted, RequestChange
from turnstream.core.session import fold
from turnstream.core.turn import SessionState, compose_request
from turnstream.hooks import HookCall, HookRegistry, HookReply, HookSpec
from turnstream.tools import ToolRegistry


async def narrow_request(call: HookCall) -> HookReply:
    """An LLM interceptor: a cheaper model, no tool but `read_file`, a stricter prompt."""
    assert call.request is not None
    system = (call.request.system or "") + "\nNever reveal secrets."
    change = RequestChange(model="claude-cheap", system=system, tools=["read_file"])
    return HookReply(action="modify", request=change)


async def redact_result(call: HookCall) -> HookReply:
    """A tool interceptor: no password reaches the model."""
    if "hunter2" not in (call.output or ""):
        return HookReply(action="continue")
    return HookReply(action="modify", output=(call.output or "").replace("hunter2", "***"))


async def test_interceptors_change_what_the_model_gets_and_the_log_says_so(
    nats_server: EmbeddedServer, bus: Bus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    (tmp_path / "workspace").mkdir()
    (tmp_path / "workspace" / "creds.txt").write_text("password=hunter2\n")

    async def check_done(msg: object) -> None:
        """A remote stop hook: the first answer must say it checked; one more round."""
        call = HookCall.model_validate(orjson.loads(msg.data))  # type: ignore[attr-defined]
        if "checked" in (call.text or ""):
            reply = HookReply(action="continue")
        else:
            reply = HookReply(action="iterate", text="Did you check? Say 'checked'.")
        await msg.respond(reply.model_dump_json(by_alias=True).encode())  # type: ignore[attr-defined]

    sub = await bus.nc.subscribe("hooks.stop", cb=check_done)
    hooks = HookRegistry(
        [
            (HookSpec(name="narrow", stage="SEND_REQUEST", kind="transform"), narrow_request),
            (
                HookSpec(name="redact", stage="TOOL_CALL", point="post", kind="transform"),
                redact_result,
            ),
        ],
        nc=bus.nc,
    )
    stop = HookSpec(name="checked", stage="STOP", kind="guard", subject="hooks.stop")
    hooks.set_remote("checked", stop.model_dump_json(by_alias=True).encode())
    script = [
        ToolCalls([("tu1", "read_file", {"path": "creds.txt"})]),
        Text("The password is ***."),
        Text("checked: the password is ***."),
    ]
    async with FakeAnthropic(script) as fake:
        settings = settings_for(
            nats_server,
            tmp_path,
            provider="anthropic",
            model="claude-fake-1",
            base_url=fake.base_url,
            system_prompt="Be brief.",
        )
        async with running_services(settings, bus, tools=ToolRegistry.load(), hooks=hooks):
            outcome = await send_and_wait(
                bus, message_command("icpt", "what is in creds.txt?"), timeout=20
            )
    await sub.unsubscribe()
    assert outcome.status == "completed", outcome
    assert outcome.reply == "The password is ***.\n\nchecked: the password is ***."
    bodies = [r.body for r in fake.requests]
    assert len(bodies) == 3
    assert {b["model"] for b in bodies} == {"claude-cheap"}
    assert all(b["system"] == "Be brief.\nNever reveal secrets." for b in bodies)
    assert all([t["name"] for t in b["tools"]] == ["read_file"] for b in bodies)
    tool_result = bodies[1]["messages"][-1]["content"][0]
    assert tool_result["type"] == "tool_result" and "hunter2" not in str(tool_result)
    asked = bodies[2]["messages"][-1]
    assert asked["role"] == "user" and "Did you check?" in str(asked["content"])

    events = [s.event for s in await bus.store.read_session("icpt")]
    decided = [
        (e.data.hook, e.data.stage, e.data.point, e.data.action)
        for e in events
        if isinstance(e, HookDecided)
    ]
    assert decided == [
        ("narrow", "SEND_REQUEST", "pre", "modify"),
        ("redact", "TOOL_CALL", "post", "modify"),
        ("narrow", "SEND_REQUEST", "pre", "modify"),
        ("checked", "STOP", "pre", "iterate"),
        ("narrow", "SEND_REQUEST", "pre", "modify"),
    ]
    started = [e for e in events if isinstance(e, ProviderRequestStarted)]
    assert [s.data.model for s in started] == ["claude-cheap"] * 3
    # a replay composes the request the model got from the log alone
    last = events.index(started[-1])
    state = fold(SessionState("icpt"), events[: last + 1])
    request = compose_request(state, settings.turn_config())
    assert request.system == bodies[2]["system"] and request.model == "claude-cheap"
    assert [m.text for m in request.messages][-1] == "Did you check? Say 'checked'."


async def test_a_response_interceptor_replaces_a_tool_call_before_it_is_proposed(
    nats_server: EmbeddedServer, bus: Bus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    (tmp_path / "workspace").mkdir()

    async def no_writes(call: HookCall) -> HookReply:
        assert call.response is not None
        if not any(c.name == "write_file" for c in call.response.tool_calls):
            return HookReply(action="continue")
        text = "I would have written a file, but writes are off today."
        return HookReply(action="modify", response={"text": text, "toolCalls": []})  # type: ignore[arg-type]

    hooks = HookRegistry(
        [
            (
                HookSpec(name="no-writes", stage="STREAM_RESPONSE", point="post", kind="transform"),
                no_writes,
            )
        ]
    )
    script = [
        ToolCalls([("tu1", "write_file", {"path": "x.txt", "content": "hi"})], text="Writing.")
    ]
    async with FakeAnthropic(script) as fake:
        settings = settings_for(
            nats_server,
            tmp_path,
            provider="anthropic",
            model="claude-fake-1",
            base_url=fake.base_url,
        )
        async with running_services(settings, bus, tools=ToolRegistry.load(), hooks=hooks):
            outcome = await send_and_wait(bus, message_command("resp", "write x.txt"), timeout=20)
    assert outcome.status == "completed"
    assert outcome.reply == "I would have written a file, but writes are off today."
    assert not (tmp_path / "workspace" / "x.txt").exists()
    events = [s.event for s in await bus.store.read_session("resp")]
    assert not [e for e in events if e.type == "ToolInvocationProposed"]
    (decided,) = [e for e in events if isinstance(e, HookDecided)]
    assert decided.data.response is not None and decided.data.response.tool_calls == []
