"""Provider events: model calls, their results, retries and compaction."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from turnstream.core.events.base import EventBase, WireModel


class TextBlock(WireModel):
    type: Literal["text"] = "text"
    text: str


class ToolUseBlock(WireModel):
    """A complete tool call from the model."""

    type: Literal["tool_use"] = "tool_use"
    id: str
    name: str
    input: dict[str, Any]


ContentBlock = Annotated[TextBlock | ToolUseBlock, Field(discriminator="type")]


class AssistantMessage(WireModel):
    role: Literal["assistant"] = "assistant"
    content: list[ContentBlock]

    @property
    def text(self) -> str:
        return "".join(block.text for block in self.content if isinstance(block, TextBlock))

    @property
    def tool_calls(self) -> list[ToolUseBlock]:
        return [block for block in self.content if isinstance(block, ToolUseBlock)]


class Usage(WireModel):
    """Tokens of one model call as the provider reported them. The three input counts are
    apart and priced apart: all the input the model read is their sum."""

    input_tokens: int = 0
    """Input read at the full price (not written to or read from the prompt cache)."""
    output_tokens: int = 0
    cache_write_tokens: int = 0
    """Input written to the prompt cache by this call (Anthropic: `cache_creation_input_tokens`)."""
    cache_read_tokens: int = 0
    """Input read from the prompt cache (Anthropic: `cache_read_input_tokens`; OpenAI:
    `prompt_tokens_details.cached_tokens`, which OpenAI counts inside `prompt_tokens`)."""


StopReason = Literal["end_turn", "max_tokens", "stop_sequence", "tool_use"]


class ProviderRequestStartedData(WireModel):
    provider: str
    model: str
    iteration: int
    call_index: int
    """How many provider calls this session made before this one (scripted replies key on it)."""
    message_count: int
    tools_digest: str | None = None
    """sha256 of the tool list this request offers the model (`sha256:<hex>`, computed as
    the executors' tool manifest digest is, over the tools actually offered)."""
    tools: list[str] | None = None
    """The names of the tools offered, in the order the model saw them."""


class ProviderRequestStarted(EventBase):
    type: Literal["ProviderRequestStarted"] = "ProviderRequestStarted"
    data: ProviderRequestStartedData


class ProviderRequestCompletedData(WireModel):
    message: AssistantMessage
    usage: Usage
    stop_reason: StopReason
    iteration: int
    provider: str | None = None
    """Whose model answered (and billed `usage`): the request's, or its fallback's."""
    model: str | None = None


class ProviderRequestCompleted(EventBase):
    type: Literal["ProviderRequestCompleted"] = "ProviderRequestCompleted"
    data: ProviderRequestCompletedData


class ProviderRequestFailedData(WireModel):
    error_class: str
    """e.g. `rate_limit`, `overloaded`, `server_error`, `connection`, `bad_request`."""
    message: str
    retryable: bool
    status_code: int | None = None
    iteration: int


class ProviderRequestFailed(EventBase):
    type: Literal["ProviderRequestFailed"] = "ProviderRequestFailed"
    data: ProviderRequestFailedData


class ProviderRetryData(WireModel):
    attempt: int
    delay_ms: int
    error_class: str
    message: str


class ProviderRetry(EventBase):
    type: Literal["ProviderRetry"] = "ProviderRetry"
    data: ProviderRetryData


class ContextCompactedData(WireModel):
    dropped_messages: int
    tokens_before: int
    tokens_after: int
    summary: str | None = None
    """What a compaction interceptor said the dropped messages were (the running summary
    takes it instead of a line per message)."""


class ContextCompacted(EventBase):
    type: Literal["ContextCompacted"] = "ContextCompacted"
    data: ContextCompactedData
