"""Our provider adapters through the official SDKs, against servers that speak each
provider's real streaming wire format. No test reaches a real API."""

from __future__ import annotations

from typing import Any

import pytest

from tests.providers.fake_servers import (
    Drop,
    Error,
    FakeAnthropic,
    FakeOpenAI,
    FakeServer,
    StreamError,
    Text,
    ToolCalls,
)
from turnstream.core.turn import (
    Message,
    ProviderFailure,
    ProviderRequest,
    ProviderSuccess,
    ToolCall,
    ToolInfo,
)
from turnstream.providers.anthropic_api import AnthropicProvider
from turnstream.providers.openai_api import OpenAIProvider
from turnstream.providers.retry import RetryPolicy

FAST = RetryPolicy(max_retries=2, base_delay_s=0.01, max_delay_s=0.05)
TOOLS = (
    ToolInfo(
        "read_file",
        "read a file",
        {"type": "object", "properties": {"path": {"type": "string"}}},
        True,
        True,
        5.0,
    ),
)
HISTORY = (
    Message("user", "what is in a.txt?"),
    Message("assistant", "", tool_calls=(ToolCall("toolu_1", "read_file", {"path": "a.txt"}),)),
    Message("tool", "hello", tool_call_id="toolu_1"),
)


def request(messages: tuple[Message, ...] = (Message("user", "hi"),)) -> ProviderRequest:
    return ProviderRequest("s", "t", 1, 0, "be brief", messages, TOOLS)


def provider(kind: str, server: FakeServer):
    if kind == "anthropic":
        return AnthropicProvider(
            "claude-fake-1", base_url=server.base_url, api_key="sk-test", retry=FAST
        )
    return OpenAIProvider(
        "gpt-fake-1", base_url=server.base_url + "/v1", api_key="sk-test", retry=FAST
    )


FAKES = {"anthropic": FakeAnthropic, "openai": FakeOpenAI}


async def run(kind: str, script: list[Any], req: ProviderRequest | None = None):
    deltas: list[str] = []

    async def sink(delta: str) -> None:
        deltas.append(delta)

    async with FAKES[kind](script) as server:
        adapter = provider(kind, server)
        try:
            outcome = await adapter.complete(req or request(), sink)
        finally:
            await adapter.close()
    return outcome, deltas, server


@pytest.fixture(params=["anthropic", "openai"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def test_text_streams_as_deltas_with_usage_and_stop_reason(kind: str) -> None:
    outcome, deltas, server = await run(kind, [Text("Hello there, friend.", chunks=3)])
    assert isinstance(outcome, ProviderSuccess)
    assert outcome.text == "Hello there, friend." and "".join(deltas) == outcome.text
    assert len(deltas) == 3
    assert outcome.stop_reason == "end_turn" and outcome.tool_calls == ()
    assert outcome.usage.input_tokens == 10 and outcome.usage.output_tokens == 5
    body = server.requests[0].body
    assert body["stream"] is True and body["max_tokens"] == 4096


async def test_max_tokens_stop_is_reported(kind: str) -> None:
    outcome, _, _ = await run(kind, [Text("cut", stop="max_tokens")])
    assert isinstance(outcome, ProviderSuccess) and outcome.stop_reason == "max_tokens"


@pytest.mark.parametrize("count", [1, 2])
async def test_tool_calls_are_reassembled_from_fragments(kind: str, count: int) -> None:
    calls = [(f"call_{i}", "read_file", {"path": f"f{i}.txt", "n": [i, i]}) for i in range(count)]
    outcome, _, _ = await run(kind, [ToolCalls(calls, text="Let me look.")])
    assert isinstance(outcome, ProviderSuccess)
    assert [(c.id, c.name, c.arguments) for c in outcome.tool_calls] == calls
    assert outcome.stop_reason == "tool_use" and outcome.text == "Let me look."


async def test_history_and_tools_go_out_in_each_apis_shape(kind: str) -> None:
    _, _, server = await run(kind, [Text("ok")], request(HISTORY))
    body = server.requests[0].body
    if kind == "anthropic":
        assert body["system"][0]["text"] == "be brief"
        assert body["tools"][0]["input_schema"]["type"] == "object"
        result = body["messages"][2]["content"][0]
        assert result["type"] == "tool_result" and result["tool_use_id"] == "toolu_1"
    else:
        assert body["messages"][0] == {"role": "system", "content": "be brief"}
        assert body["tools"][0]["function"]["name"] == "read_file"
        assert body["messages"][-1] == {
            "role": "tool",
            "tool_call_id": "toolu_1",
            "content": "hello",
        }


async def test_the_key_goes_to_the_server_in_a_header(kind: str) -> None:
    _, _, server = await run(kind, [Text("ok")])
    headers = server.requests[0].headers
    assert "sk-test" in headers.get("authorization", "") + headers.get("x-api-key", "")


ERRORS = {
    "anthropic": {
        "rate": Error(429, "rate_limit_error", "slow down", retry_after=0.01),
        "overloaded": Error(529, "overloaded_error", "Overloaded"),
        "too_long": Error(
            400, "invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum"
        ),
        "mid_stream": StreamError("overloaded_error", "Overloaded"),
    },
    "openai": {
        "rate": Error(
            429, "tokens", "Rate limit reached", retry_after=0.01, code="rate_limit_exceeded"
        ),
        "overloaded": Error(503, "server_error", "The server is overloaded"),
        "too_long": Error(
            400,
            "invalid_request_error",
            "This model's maximum context length is 128000 tokens",
            code="context_length_exceeded",
            param="messages",
        ),
        "mid_stream": StreamError("server_error", "The server had an error"),
    },
}


async def test_an_error_then_success_is_retried_and_recorded(kind: str) -> None:
    outcome, _, server = await run(kind, [ERRORS[kind]["rate"], Text("fine")])
    assert isinstance(outcome, ProviderSuccess) and outcome.text == "fine"
    (retry,) = outcome.retries
    assert retry.error_class == "rate_limit" and retry.attempt == 1
    assert retry.delay_ms == 10  # max(backoff 10 ms, retry-after 10 ms)
    assert len(server.requests) == 2


async def test_overload_exhausts_the_retries_then_fails(kind: str) -> None:
    busy = ERRORS[kind]["overloaded"]
    outcome, _, server = await run(kind, [busy, busy, busy])
    assert isinstance(outcome, ProviderFailure)
    assert outcome.error_class in ("overloaded", "server_error") and outcome.retryable
    assert len(outcome.retries) == 2 and len(server.requests) == 3


async def test_prompt_too_long_is_not_retried(kind: str) -> None:
    outcome, _, server = await run(kind, [ERRORS[kind]["too_long"]])
    assert isinstance(outcome, ProviderFailure)
    assert outcome.error_class == "prompt_too_long" and not outcome.retryable
    assert outcome.retries == () and len(server.requests) == 1


async def test_a_dropped_stream_is_retried(kind: str) -> None:
    outcome, _, server = await run(kind, [Drop(after_chunks=2), Text("whole answer")])
    assert isinstance(outcome, ProviderSuccess) and outcome.text == "whole answer"
    assert [r.error_class for r in outcome.retries] == ["connection"]
    assert len(server.requests) == 2


async def test_an_error_inside_the_stream_is_retried(kind: str) -> None:
    outcome, _, _ = await run(kind, [ERRORS[kind]["mid_stream"], Text("recovered")])
    assert isinstance(outcome, ProviderSuccess) and outcome.text == "recovered"
    assert outcome.retries and outcome.retries[0].message.startswith("mid-stream")
