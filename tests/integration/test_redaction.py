"""Secret values never reach the log or the object store in a tool's result (issue 19,
item 5): a result, a full result kept as a blob, and a tool's error are redacted before
they are appended."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from tests.integration.conftest import running_services, settings_for
from tests.integration.test_tools_path import events_of, script
from turnstream.bus import Bus
from turnstream.bus.embedded import EmbeddedServer
from turnstream.client import message_command, send_and_wait
from turnstream.core.events import ToolInvocationFailed, ToolInvocationSucceeded
from turnstream.tools import ToolContext, ToolRegistry, ToolSpec

LISTED, FILED = "hunter2-listed-token", "sk-live-from-the-secrets-file"


class Leaky:
    """Returns (or fails with) text holding both secrets."""

    def __init__(self, name: str, *, fail: bool = False, size: int = 0) -> None:
        self.fail, self.size = fail, size
        self.spec = ToolSpec(
            name=name,
            description="leaks secrets",
            parameters={"type": "object", "properties": {}, "additionalProperties": False},
            read_only=True,
            idempotent=True,
        )

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        text = f"key={FILED} token={LISTED}"
        if self.fail:
            raise RuntimeError(text)
        return text + "." * self.size + text


async def test_secrets_are_redacted_from_results_blobs_and_errors(
    nats_server: EmbeddedServer, bus: Bus, tmp_path: Path
) -> None:
    (tmp_path / "workspace").mkdir()
    secrets = tmp_path / "secrets.env"
    secrets.write_text(f"PROVIDER_KEY={FILED}\n")
    calls = "{tool_calls: [{name: leak}, {name: leak_big}, {name: leak_fail}]}"
    settings = settings_for(
        nats_server,
        tmp_path,
        script=script(tmp_path, calls, '{text: "got {last_tool_result}"}'),
        secrets_file=secrets,
        redact=[LISTED],
        tool_result_budget=256,
    )
    tools = ToolRegistry.load(
        extra=[Leaky("leak"), Leaky("leak_big", size=1000), Leaky("leak_fail", fail=True)]
    )
    async with running_services(settings, bus, tools=tools):
        outcome = await send_and_wait(bus, message_command("redact", "go"), timeout=20)
    assert outcome.status == "completed", outcome
    events = await events_of(bus, "redact")
    succeeded = [e for e in events if isinstance(e, ToolInvocationSucceeded)]
    failed = [e for e in events if isinstance(e, ToolInvocationFailed)]
    assert len(succeeded) == 2 and len(failed) == 1
    assert all("[redacted]" in e.data.output for e in succeeded)
    assert "[redacted]" in failed[0].data.error.detail
    log = b"".join(orjson.dumps(e.model_dump(mode="json")) for e in events)
    assert FILED.encode() not in log and LISTED.encode() not in log
    [big] = [e for e in succeeded if e.data.blob]
    blobs = await bus.js.object_store(bus.subjects.blobs_bucket)
    kept = (await blobs.get(big.data.blob)).data
    assert b"[redacted]" in kept and FILED.encode() not in kept and LISTED.encode() not in kept
