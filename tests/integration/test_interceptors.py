"""The turn's hook points end to end: in-process and remote (NATS request/reply) hooks at
the model request and response, the tool results and the turn's stop, on a real
nats-server, the model called through the official Anthropic SDK against its wire fake.
What each hook changed is in the log, and the model got exactly that."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from nats.js.errors import NoKeysError

from tests.integration.conftest import anthropic_settings, events_of, running_services, settings_for
from tests.providers.fake_servers import FakeAnthropic, Text, ToolCalls
from turnstream.bus import Bus
from turnstream.bus.embedded import EmbeddedServer
from turnstream.client import message_command, send_and_wait
from turnstream.core.events import HookDecided, ProviderRequestStarted, RequestChange
from turnstream.core.session import SessionState, fold
from turnstream.core.turn import compose_request
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
        settings = anthropic_settings(
            nats_server,
            tmp_path,
            fake.base_url,
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
    # the interceptor's system prompt replaces all of it: one block
    assert all(
        [s["text"] for s in b["system"]] == ["Be brief.\nNever reveal secrets."] for b in bodies
    )
    assert all([t["name"] for t in b["tools"]] == ["read_file"] for b in bodies)
    tool_result = bodies[1]["messages"][-1]["content"][0]
    assert tool_result["type"] == "tool_result" and "hunter2" not in str(tool_result)
    asked = bodies[2]["messages"][-1]
    assert asked["role"] == "user" and "Did you check?" in str(asked["content"])

    events = await events_of(bus, "icpt")
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
    state = fold(SessionState.of("icpt"), events[: last + 1])
    request = compose_request(state.chat, settings.turn_config())
    assert request.system == bodies[2]["system"][0]["text"] and request.model == "claude-cheap"
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
        settings = anthropic_settings(
            nats_server,
            tmp_path,
            fake.base_url,
        )
        async with running_services(settings, bus, tools=ToolRegistry.load(), hooks=hooks):
            outcome = await send_and_wait(bus, message_command("resp", "write x.txt"), timeout=20)
    assert outcome.status == "completed"
    assert outcome.reply == "I would have written a file, but writes are off today."
    assert not (tmp_path / "workspace" / "x.txt").exists()
    events = await events_of(bus, "resp")
    assert not [e for e in events if e.type == "ToolInvocationProposed"]
    (decided,) = [e for e in events if isinstance(e, HookDecided)]
    assert decided.data.response is not None and decided.data.response.tool_calls == []


async def test_the_example_hooks_served_from_another_connection_change_a_demo_turn(
    nats_server: EmbeddedServer, bus: Bus, tmp_path: Path
) -> None:
    """`examples/hooks.py` as a user runs it: the hooks answer over NATS from their own
    connection (`serve_hooks`), registered in the hooks bucket, against the demo script."""
    import asyncio
    import importlib.util

    path = Path(__file__).parents[2] / "examples" / "hooks.py"
    loaded = importlib.util.spec_from_file_location("example_hooks", path)
    assert loaded is not None and loaded.loader is not None
    example = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(example)

    from turnstream.bus import connect
    from turnstream.hooks.remote import serve_hooks

    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / ".env").write_text("TOKEN=x\n")
    (workspace / "notes.txt").write_text("hi\n")
    settings = settings_for(nats_server, tmp_path)
    other = await connect(nats_server.url, settings.subjects)
    stop = asyncio.Event()
    served = asyncio.create_task(serve_hooks(other.nc, example.hooks(), stop, settings.subjects))
    try:
        async with running_services(settings, bus, tools=ToolRegistry.load()):
            await asyncio.sleep(0.5)  # the runner's watch of the hooks bucket hands them over
            command = message_command("ex", "my password is hunter2")
            outcome = await send_and_wait(bus, command, timeout=20)
    finally:
        stop.set()
        await served
        await other.close()
    assert outcome.status == "completed", outcome
    assert "my password is ***" in (outcome.reply or "") and "hunter2" not in (outcome.reply or "")
    assert "notes.txt" in (outcome.reply or "") and ".env" not in (outcome.reply or "")
    events = await events_of(bus, "ex")
    decided = {(e.data.hook, e.data.action) for e in events if isinstance(e, HookDecided)}
    assert {
        ("redact-input", "modify"),
        ("read-only-requests", "modify"),
        ("hide-dotfiles", "modify"),
    } <= decided
    started = [e for e in events if isinstance(e, ProviderRequestStarted)]
    assert started and all("write_file" not in s.data.tools for s in started)
    kv = await bus.js.key_value(settings.subjects.hooks_bucket)
    with pytest.raises(NoKeysError):  # every hook unregistered on stop
        await kv.keys()
