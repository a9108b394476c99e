"""A provider that replays a YAML/JSON script (DESIGN §2): tests and the no-key demo.

Reply `i` of the script answers the session's `i`-th provider call (the call count is a
fact in the log, so a replay picks the same reply); past the end the script wraps round.
Placeholders: `{input}` (the latest user message), `{input:N}` (its first N characters),
`{last_tool_result}` / `{last_tool_result:N}` (the latest tool result), `{call}` (the call
index). A reply with `tool_calls` asks for those tools (its `text`, if any, comes first).
`stages: {<stage id>: [replies]}` answers the turns of a workflow stage, counted per stage;
`agents: {<agent>: [replies]}` answers the sessions of an agent (DESIGN §11), counted per
session like `replies`.
"""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

import orjson
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from turnstream.core.events import StopReason, Usage
from turnstream.core.turn import (
    ProviderFailure,
    ProviderOutcome,
    ProviderRequest,
    ProviderSuccess,
    ToolCall,
)
from turnstream.providers.base import DeltaSink, ToolCallSink
from turnstream.providers.retry import RetryPolicy, with_retries
from turnstream.providers.scripted_usage import ScriptedBilling
from turnstream.providers.wire import PromptCache

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][\w.]*)(?::(\d+))?\}")
_KNOWN = {"input", "call", "last_tool_result"}


class ScriptError(BaseModel):
    model_config = ConfigDict(extra="forbid")
    error_class: str = "server_error"
    message: str = "scripted failure"
    retryable: bool = False
    """Retried like a real provider's overload (each retry a `ProviderRetry`)."""
    status_code: int | None = 500
    times: Annotated[int, Field(ge=1)] | None = None
    """Fail this many attempts, then answer with the reply's `text`/`tool_calls` (a
    retryable error that goes away); unset: every attempt fails."""


class ScriptToolCall(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class ScriptReply(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str = ""
    tool_calls: list[ScriptToolCall] = Field(default_factory=list)
    delay_ms: Annotated[int, Field(ge=0)] = 0
    """Pause before each chunk, to watch tokens stream."""
    chunks: Literal["word", "char", "whole"] = "word"
    stop_reason: StopReason | None = None
    """Defaults to `tool_use` for a reply with tool calls, else `end_turn`."""
    error: ScriptError | None = None
    """Fail this call instead of answering."""

    @field_validator("text")
    @classmethod
    def _known_placeholders(cls, text: str) -> str:
        unknown = {m.group(1) for m in _PLACEHOLDER.finditer(text)} - _KNOWN
        if unknown:
            raise ValueError(
                f"unknown placeholder(s) {sorted(unknown)}; use {{input}}, {{input:N}}, "
                "{last_tool_result}, {last_tool_result:N}, {call}"
            )
        return text


class Script(BaseModel):
    model_config = ConfigDict(extra="forbid")
    replies: Annotated[list[ScriptReply], Field(min_length=1)]
    stages: dict[str, Annotated[list[ScriptReply], Field(min_length=1)]] = Field(
        default_factory=dict
    )
    """Replies for the turns of a workflow stage, by stage id (counted per stage turn)."""
    agents: dict[str, Annotated[list[ScriptReply], Field(min_length=1)]] = Field(
        default_factory=dict
    )
    """Replies for the sessions of an agent, by agent name (counted per session)."""

    def reply(self, request: ProviderRequest) -> ScriptReply:
        replies = self.stages.get(request.stage or "") or self.agents.get(
            request.agent or "", self.replies
        )
        return replies[request.call_index % len(replies)]


def load_script(path: Path | None) -> Script:
    """Read a script file (YAML or JSON); the built-in demo when `path` is None."""
    if path is None:
        text = resources.files("turnstream.providers").joinpath("demo.yaml").read_text()
        source = "built-in demo script"
    else:
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise ValueError(f"cannot read script {path}: {exc} (check TURNSTREAM_SCRIPT)") from exc
        source = str(path)
    try:
        return Script.model_validate(yaml.safe_load(text))
    except (yaml.YAMLError, ValidationError) as exc:
        raise ValueError(f"invalid script {source}: {exc}") from exc


def _render(template: str, request: ProviderRequest) -> str:
    def last(role: str) -> str:
        return next((m.text for m in reversed(request.messages) if m.role == role), "")

    def sub(match: re.Match[str]) -> str:
        name = match.group(1)
        if name == "input":
            value = last("user")
        elif name == "last_tool_result":
            value = last("tool")
        else:
            value = str(request.call_index)
        limit = match.group(2)
        return value[: int(limit)] if limit else value

    return _PLACEHOLDER.sub(sub, template)


def _chunks(text: str, mode: str) -> list[str]:
    if mode == "whole" or not text:
        return [text] if text else []
    if mode == "char":
        return list(text)
    return re.findall(r"\S+\s*|\s+", text)


class ScriptedProvider:
    name = "scripted"

    def __init__(
        self,
        script: Script,
        model: str = "demo",
        retry: RetryPolicy | None = None,
        cache: PromptCache = "5m",
    ) -> None:
        self.script = script
        self.model = model
        self.retry = retry
        """Retries of a `retryable` scripted error (the deployment's policy); None: none."""
        self.billing = ScriptedBilling(cache)
        """Usage is billed as the Messages API would bill the request it would be sent."""

    async def close(self) -> None:
        """Nothing to release."""

    async def complete(
        self,
        request: ProviderRequest,
        on_delta: DeltaSink,
        on_tool_call: ToolCallSink | None = None,
    ) -> ProviderOutcome:
        reply = self.script.reply(request)
        attempts = [0]

        async def attempt() -> ProviderOutcome:
            attempts[0] += 1
            return await self._attempt(reply, attempts[0], request, on_delta)

        if self.retry is None:
            return await attempt()
        return await with_retries(attempt, self.retry)

    def _usage(self, request: ProviderRequest, text: str, calls: list[ScriptToolCall]) -> Usage:
        said = text + "".join(call.name + orjson.dumps(call.arguments).decode() for call in calls)
        return self.billing.usage(request, said)

    async def _attempt(
        self, reply: ScriptReply, attempt: int, request: ProviderRequest, on_delta: DeltaSink
    ) -> ProviderOutcome:
        if reply.delay_ms:
            await asyncio.sleep(reply.delay_ms / 1000)
        if reply.error is not None and (reply.error.times is None or attempt <= reply.error.times):
            err = reply.error
            return ProviderFailure(
                error_class=err.error_class,
                message=err.message,
                retryable=err.retryable,
                status_code=err.status_code,
                failed_at=datetime.now(UTC),
            )
        text = _render(reply.text, request)
        first_byte_at = datetime.now(UTC)
        pieces = _chunks(text, reply.chunks)
        for i, piece in enumerate(pieces):
            if reply.delay_ms and i:
                await asyncio.sleep(reply.delay_ms / 1000)
            await on_delta(piece)
        calls = tuple(
            ToolCall(f"call_{request.call_index}_{i}", call.name, call.arguments)
            for i, call in enumerate(reply.tool_calls)
        )
        return ProviderSuccess(
            text=text,
            tool_calls=calls,
            stop_reason=reply.stop_reason or ("tool_use" if calls else "end_turn"),
            usage=self._usage(request, text, reply.tool_calls),
            first_byte_at=first_byte_at,
            finished_at=datetime.now(UTC),
        )
