"""One hook of each kind, served from this process to a running `turnstream up`.

    .venv/bin/turnstream up                                   # terminal 1
    .venv/bin/python examples/hooks.py                        # terminal 2
    .venv/bin/turnstream send demo "my password is hunter2"   # terminal 3

The reply says `my password is ***`, the listing has no dot-files, and
`turnstream tail demo --history` shows each `HookDecided`. Ctrl-C unregisters the hooks.
The same functions work in-process: name `hooks` in a package's `turnstream.hooks` entry
point (without the `subject`s).
"""

from __future__ import annotations

import asyncio
import re
from typing import Literal

from turnstream.core.events import CompactionChange, RequestChange, ResponseChange
from turnstream.hooks import Hook, HookCall, HookReply, HookSpec
from turnstream.hooks.base import HookKind
from turnstream.hooks.remote import serve_hooks

SECRET = re.compile(r"(password( is|=|:)\s*)\S+", re.IGNORECASE)


async def redact_input(call: HookCall) -> HookReply:
    """RECEIVE_INPUT transform: no password reaches the model (the log keeps the input)."""
    text = call.text or ""
    redacted = SECRET.sub(r"\1***", text)
    return HookReply(action="modify", text=redacted) if redacted != text else HookReply()


async def no_deletes(call: HookCall) -> HookReply:
    """TOOL_CALL pre guard: refuse a call whose arguments ask to delete."""
    if "delete" in str(call.args).lower():
        return HookReply(action="deny_tool", reason="deleting is not allowed here")
    return HookReply()


async def read_only_requests(call: HookCall) -> HookReply:
    """LLM interceptor, SEND_REQUEST pre: offer only the read-only tools, keep it short."""
    assert call.request is not None
    tools = [t for t in call.request.tools if t != "write_file"]
    system = (call.request.system or "") + "\nAnswer in at most three sentences."
    return HookReply(action="modify", request=RequestChange(tools=tools, system=system.strip()))


async def no_secrets_out(call: HookCall) -> HookReply:
    """LLM interceptor, STREAM_RESPONSE post: a response that leaks a secret is replaced."""
    if call.response is None or not SECRET.search(call.response.text):
        return HookReply()
    text = SECRET.sub(r"\1***", call.response.text)
    change = ResponseChange(text=text, tool_calls=call.response.tool_calls)
    return HookReply(action="modify", response=change, reason="a secret in the response")


async def hide_dotfiles(call: HookCall) -> HookReply:
    """Tool interceptor, TOOL_CALL post: the model does not see dot-files in a listing."""
    if call.tool != "list_dir" or call.is_error:
        return HookReply()
    lines = (call.output or "").splitlines()
    kept = [line for line in lines if not line.strip().startswith(".")]
    return HookReply(action="modify", output="\n".join(kept)) if kept != lines else HookReply()


async def summarise_dropped(call: HookCall) -> HookReply:
    """Compaction interceptor: keep a one-line summary of what compaction drops."""
    assert call.compaction is not None
    users = [m.text for m in call.compaction.messages if m.role == "user"]
    summary = f"Earlier the user asked: {'; '.join(u[:60] for u in users)}"
    return HookReply(action="modify", compaction=CompactionChange(summary=summary))


async def cite_the_workspace(call: HookCall) -> HookReply:
    """Stop hook: an answer that does not say what it looked at gets one more round."""
    if "workspace" in (call.text or "").lower():
        return HookReply()
    return HookReply(action="iterate", text="Say what you looked at in the workspace.")


def hooks(prefix: str = "hooks.example") -> list[tuple[HookSpec, Hook]]:
    """Every example hook with its spec; `prefix` names their NATS subjects."""

    def spec(
        name: str, stage: str, kind: HookKind, point: Literal["pre", "post"] = "pre"
    ) -> HookSpec:
        subject = f"{prefix}.{name}"
        return HookSpec(
            name=name, stage=stage, point=point, kind=kind, timeout_ms=500, subject=subject
        )

    return [
        (spec("redact-input", "RECEIVE_INPUT", "transform"), redact_input),
        (spec("no-deletes", "TOOL_CALL", "guard"), no_deletes),
        (spec("read-only-requests", "SEND_REQUEST", "transform"), read_only_requests),
        (spec("no-secrets-out", "STREAM_RESPONSE", "transform", "post"), no_secrets_out),
        (spec("hide-dotfiles", "TOOL_CALL", "transform", "post"), hide_dotfiles),
        (spec("summarise-dropped", "COMPACT", "transform"), summarise_dropped),
        (spec("cite-the-workspace", "STOP", "guard"), cite_the_workspace),
    ]


async def main() -> None:
    from turnstream.runtime.connection import connect_service
    from turnstream.settings import Settings

    settings = Settings()
    bus = await connect_service(settings, "hooks-example")
    stop = asyncio.Event()
    print(f"serving {len(hooks())} hooks on {settings.resolved_nats_url()}; Ctrl-C stops")
    try:
        await serve_hooks(bus.nc, hooks(), stop, settings.subjects)
    finally:
        await bus.close()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
