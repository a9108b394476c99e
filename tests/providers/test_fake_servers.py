"""The fakes are faithful: the official SDKs, pointed at them, parse them as the real APIs."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx
import httpx2
import openai
import pytest

from tests.providers.fake_servers import (
    Drop,
    Error,
    FakeAnthropic,
    FakeOpenAI,
    Recorded,
    Reply,
    StreamError,
    Text,
    ToolCalls,
)

CLAUDE = "claude-fake-1"  # not a real model name, so the SDK never warns it is deprecated
GPT = "gpt-fake-1"
HELLO = [{"role": "user", "content": "Hello"}]
WEATHER = ("get_weather", {"city": "Paris", "units": "celsius", "days": [1, 2]})


def _anthropic(server: FakeAnthropic, max_retries: int = 0) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(
        api_key="test-key", base_url=server.base_url, max_retries=max_retries
    )


def _openai(server: FakeOpenAI) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(api_key="test-key", base_url=server.base_url + "/v1", max_retries=0)


def _api_key(request: Recorded) -> str | None:
    """anthropic 2.x sends the key as a Bearer token; older SDKs used `x-api-key`."""
    bearer = request.headers.get("authorization", "").removeprefix("Bearer ")
    return request.headers.get("x-api-key") or bearer or None


async def _claude(script: list[Reply]) -> tuple[list[str], Any, FakeAnthropic]:
    """Stream one message through `messages.stream`: the text deltas and the final message."""
    async with FakeAnthropic(script) as server, _anthropic(server) as client:
        async with client.messages.stream(model=CLAUDE, max_tokens=64, messages=HELLO) as stream:
            deltas = [text async for text in stream.text_stream]
            final = await stream.get_final_message()
    return deltas, final, server


async def _gpt(script: list[Reply], **options: Any) -> tuple[list[Any], FakeOpenAI]:
    """Stream one chat completion: every chunk the SDK yields."""
    options.setdefault("stream_options", {"include_usage": True})
    async with FakeOpenAI(script) as server, _openai(server) as client:
        stream = await client.chat.completions.create(
            model=GPT, messages=HELLO, stream=True, **options
        )
        async with stream:
            chunks = [chunk async for chunk in stream]
    return chunks, server


async def _raw_sse(server_type: type[FakeAnthropic | FakeOpenAI], path: str, body: Any) -> str:
    """The response body exactly as it went over the wire."""
    async with server_type([Text("Hi there", chunks=2)]) as server:
        async with httpx.AsyncClient(base_url=server.base_url) as client:
            response = await client.post(path, json=body)
    assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert response.headers["transfer-encoding"] == "chunked"
    return response.text


# Anthropic Messages API


async def test_anthropic_text_accumulates_and_the_request_is_recorded() -> None:
    deltas, final, server = await _claude([Text("Hello there, world", chunks=3)])

    assert deltas == ["Hello ", "there,", " world"]
    assert [block.type for block in final.content] == ["text"]
    assert final.content[0].text == "Hello there, world"
    assert (final.model, final.role, final.stop_reason) == (CLAUDE, "assistant", "end_turn")
    assert (final.usage.input_tokens, final.usage.output_tokens) == (10, 5)
    [request] = server.requests
    assert (request.method, request.path) == ("POST", "/v1/messages")
    assert _api_key(request) == "test-key"
    assert "anthropic-version" in request.headers
    assert request.body["model"] == CLAUDE
    assert request.body["stream"] is True
    assert request.body["messages"] == HELLO


async def test_anthropic_max_tokens_stop_reason() -> None:
    _, final, _ = await _claude([Text("cut", stop="max_tokens", output_tokens=64)])

    assert final.stop_reason == "max_tokens"
    assert final.usage.output_tokens == 64


async def test_anthropic_wire_framing_is_event_then_data() -> None:
    body = {"model": CLAUDE, "max_tokens": 8, "messages": HELLO, "stream": True}
    raw = await _raw_sse(FakeAnthropic, "/v1/messages", body)

    assert raw.endswith("\n\n")
    events = []
    for block in raw.removesuffix("\n\n").split("\n\n"):
        event_line, data_line = block.split("\n")
        name = event_line.removeprefix("event: ")
        data = json.loads(data_line.removeprefix("data: "))
        assert data["type"] == name
        events.append(data)
    assert [e["type"] for e in events] == [
        "message_start",
        "content_block_start",
        "ping",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    message = events[0]["message"]
    assert message["content"] == [] and message["stop_reason"] is None
    assert {"id", "type", "role", "model", "usage"} <= message.keys()
    assert events[1]["content_block"] == {"type": "text", "text": ""}
    assert events[3]["delta"] == {"type": "text_delta", "text": "Hi t"}
    assert events[6]["delta"]["stop_reason"] == "end_turn"
    assert events[6]["usage"] == {"output_tokens": 5}


async def test_anthropic_parallel_tool_calls_reassemble() -> None:
    calls = [("toolu_01", *WEATHER), ("toolu_02", "list_files", {})]
    script: list[Reply] = [ToolCalls(calls, text="Let me check.")]
    async with FakeAnthropic(script) as server, _anthropic(server) as client:
        stream = await client.messages.create(
            model=CLAUDE, max_tokens=64, messages=HELLO, stream=True
        )
        events = [event async for event in stream]
    fragments: dict[int, list[str]] = {}
    for event in events:
        if event.type == "content_block_delta" and event.delta.type == "input_json_delta":
            fragments.setdefault(event.index, []).append(event.delta.partial_json)
    assert set(fragments) == {1, 2}
    for index, (_, _, arguments) in enumerate(calls, start=1):
        assert len([f for f in fragments[index] if f]) >= 2
        assert json.loads("".join(fragments[index])) == arguments

    _, final, _ = await _claude(script)
    assert [block.type for block in final.content] == ["text", "tool_use", "tool_use"]
    assert final.content[0].text == "Let me check."
    assert [(b.id, b.name, b.input) for b in final.content[1:]] == calls
    assert final.stop_reason == "tool_use"


@pytest.mark.parametrize(
    ("error", "exc_type"),
    [
        (Error(529, "overloaded_error", "Overloaded"), anthropic.OverloadedError),
        (Error(429, "rate_limit_error", "Rate limited", retry_after=7), anthropic.RateLimitError),
        (Error(500, "api_error", "Internal server error"), anthropic.InternalServerError),
        (
            Error(
                400, "invalid_request_error", "prompt is too long: 208310 tokens > 200000 maximum"
            ),
            anthropic.BadRequestError,
        ),
    ],
)
async def test_anthropic_errors_raise_the_sdk_classes(
    error: Error, exc_type: type[anthropic.APIStatusError]
) -> None:
    with pytest.raises(exc_type) as caught:
        await _claude([error])

    exc = caught.value
    assert isinstance(exc, anthropic.APIStatusError)
    assert exc.status_code == error.status
    assert exc.type == error.error_type
    assert exc.api_message == error.message
    assert exc.request_id is not None and exc.request_id.startswith("req_")
    assert exc.response.headers.get("retry-after") == (
        None if error.retry_after is None else f"{error.retry_after:g}"
    )


async def test_anthropic_overloaded_is_an_internal_server_error() -> None:
    with pytest.raises(anthropic.InternalServerError) as caught:
        await _claude([Error(529, "overloaded_error", "Overloaded")])
    assert caught.value.status_code == 529


async def test_anthropic_sdk_retry_honours_retry_after() -> None:
    script: list[Reply] = [Error(529, "overloaded_error", "Overloaded", 0.01), Text("ok")]
    async with FakeAnthropic(script) as server, _anthropic(server, max_retries=1) as client:
        async with client.messages.stream(model=CLAUDE, max_tokens=8, messages=HELLO) as stream:
            assert await stream.get_final_text() == "ok"

    assert [r.headers["x-stainless-retry-count"] for r in server.requests] == ["0", "1"]


async def test_anthropic_drop_raises_httpx2_remote_protocol_error() -> None:
    seen: list[str] = []
    script: list[Reply] = [Drop(after_chunks=4), Text("still serving")]
    async with FakeAnthropic(script) as server, _anthropic(server) as client:
        with pytest.raises(httpx2.RemoteProtocolError, match="incomplete chunked read"):
            async with client.messages.stream(model=CLAUDE, max_tokens=8, messages=HELLO) as s:
                async for text in s.text_stream:
                    seen.append(text)
        async with client.messages.stream(model=CLAUDE, max_tokens=8, messages=HELLO) as s:
            assert await s.get_final_text() == "still serving"

    # message_start, content_block_start, ping, then one text delta
    assert seen == ["This ans"]


async def test_anthropic_in_band_error_event_raises_status_200() -> None:
    with pytest.raises(anthropic.APIStatusError) as caught:
        await _claude([StreamError("overloaded_error", "Overloaded", after_chunks=4)])

    exc = caught.value
    assert (exc.status_code, exc.type, exc.api_message) == (200, "overloaded_error", "Overloaded")
    assert not isinstance(exc, anthropic.InternalServerError)


# OpenAI Chat Completions API


def _text(chunks: list[Any]) -> str:
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def _finish(chunks: list[Any]) -> str | None:
    return next(
        (c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason),
        None,
    )


async def test_openai_text_accumulates_with_usage_and_the_request_is_recorded() -> None:
    chunks, server = await _gpt([Text("Hello there, world", chunks=3, input_tokens=7)])

    assert _text(chunks) == "Hello there, world"
    assert [c.choices[0].delta.content for c in chunks[1:4]] == ["Hello ", "there,", " world"]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert _finish(chunks) == "stop"
    assert {c.id for c in chunks} == {chunks[0].id}
    assert {(c.object, c.model) for c in chunks} == {("chat.completion.chunk", GPT)}
    usage = chunks[-1].usage
    assert chunks[-1].choices == []
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (7, 5, 12)
    assert all(c.usage is None for c in chunks[:-1])
    [request] = server.requests
    assert (request.method, request.path) == ("POST", "/v1/chat/completions")
    assert request.headers["authorization"] == "Bearer test-key"
    assert request.body["model"] == GPT
    assert request.body["stream"] is True
    assert request.body["stream_options"] == {"include_usage": True}


async def test_openai_max_tokens_finishes_with_length() -> None:
    chunks, _ = await _gpt([Text("cut", stop="max_tokens")])

    assert _finish(chunks) == "length"


async def test_openai_without_include_usage_sends_no_usage_chunk() -> None:
    chunks, _ = await _gpt([Text("Hi")], stream_options=openai.omit)

    assert all(c.choices for c in chunks)
    assert _finish(chunks) == "stop"


async def test_openai_wire_framing_is_data_lines_ending_with_done() -> None:
    body = {"model": GPT, "messages": HELLO, "stream": True}
    raw = await _raw_sse(FakeOpenAI, "/v1/chat/completions", body)

    blocks = raw.removesuffix("\n\n").split("\n\n")
    assert blocks[-1] == "data: [DONE]"
    chunks = [json.loads(block.removeprefix("data: ")) for block in blocks[:-1]]
    assert all(block.startswith("data: {") for block in blocks[:-1])
    assert all("usage" not in chunk for chunk in chunks)
    assert [c["choices"][0]["delta"] for c in chunks] == [
        {"role": "assistant", "content": "", "refusal": None},
        {"content": "Hi t"},
        {"content": "here"},
        {},
    ]
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None, None, None, "stop"]


async def test_openai_parallel_tool_calls_reassemble_by_index() -> None:
    calls = [("call_01", *WEATHER), ("call_02", "list_files", {})]
    chunks, _ = await _gpt([ToolCalls(calls)])

    merged: dict[int, dict[str, Any]] = {}
    fragments: dict[int, int] = {}
    for chunk in chunks:
        for call in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            slot = merged.setdefault(call.index, {"id": None, "name": None, "arguments": ""})
            slot["id"] = call.id or slot["id"]
            slot["name"] = call.function.name or slot["name"]
            slot["arguments"] += call.function.arguments or ""
            fragments[call.index] = fragments.get(call.index, 0) + bool(call.function.arguments)
    assert [(m["id"], m["name"], json.loads(m["arguments"])) for m in merged.values()] == calls
    assert all(count >= 2 for count in fragments.values())
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[0].choices[0].delta.content is None
    assert _finish(chunks) == "tool_calls"


@pytest.mark.parametrize(
    ("error", "exc_type"),
    [
        (
            Error(429, "tokens", "Rate limit reached", retry_after=2, code="rate_limit_exceeded"),
            openai.RateLimitError,
        ),
        (
            Error(429, "insufficient_quota", "You exceeded your quota", code="insufficient_quota"),
            openai.RateLimitError,
        ),
        (Error(500, "server_error", "The server had an error"), openai.InternalServerError),
        (
            Error(
                400,
                "invalid_request_error",
                "This model's maximum context length is 128000 tokens.",
                code="context_length_exceeded",
                param="messages",
            ),
            openai.BadRequestError,
        ),
    ],
)
async def test_openai_errors_raise_the_sdk_classes(
    error: Error, exc_type: type[openai.APIStatusError]
) -> None:
    with pytest.raises(exc_type) as caught:
        await _gpt([error])

    exc = caught.value
    assert exc.status_code == error.status
    assert (exc.type, exc.code, exc.param) == (error.error_type, error.code, error.param)
    assert isinstance(exc.body, dict) and exc.body["message"] == error.message
    assert exc.request_id is not None and exc.request_id.startswith("req_")
    assert exc.response.headers.get("retry-after") == (
        None if error.retry_after is None else f"{error.retry_after:g}"
    )


async def test_openai_drop_raises_api_connection_error() -> None:
    seen: list[str] = []
    script: list[Reply] = [Drop(after_chunks=2), Text("still serving")]
    async with FakeOpenAI(script) as server, _openai(server) as client:
        with pytest.raises(openai.APIConnectionError) as caught:
            stream = await client.chat.completions.create(model=GPT, messages=HELLO, stream=True)
            async for chunk in stream:
                seen.append(chunk.choices[0].delta.content or "")
        stream = await client.chat.completions.create(model=GPT, messages=HELLO, stream=True)
        async with stream:
            assert _text([chunk async for chunk in stream]) == "still serving"

    assert seen == ["", "This ans"]
    assert not isinstance(caught.value, openai.APITimeoutError)
    assert isinstance(caught.value.__cause__, httpx2.RemoteProtocolError)


async def test_openai_in_band_error_raises_plain_api_error() -> None:
    with pytest.raises(openai.APIError) as caught:
        await _gpt([StreamError("server_error", "The server had an error", after_chunks=2)])

    assert not isinstance(caught.value, openai.APIStatusError | openai.APIConnectionError)
    assert (caught.value.message, caught.value.type) == ("The server had an error", "server_error")


# The script itself


async def test_a_request_beyond_the_script_is_a_500_and_fails_on_exit() -> None:
    with pytest.raises(AssertionError, match="beyond the end of the script"):
        async with FakeOpenAI([]) as server, _openai(server) as client:
            with pytest.raises(openai.InternalServerError, match="beyond the end of the script"):
                await client.chat.completions.create(model=GPT, messages=HELLO, stream=True)


async def test_a_non_streaming_request_is_refused() -> None:
    with pytest.raises(AssertionError, match="stream=true"):
        async with FakeAnthropic([Text("hi")]) as server, _anthropic(server) as client:
            with pytest.raises(anthropic.InternalServerError, match="stream=true"):
                await client.messages.create(model=CLAUDE, max_tokens=8, messages=HELLO)


async def test_replies_are_consumed_in_order() -> None:
    script: list[Reply] = [Text("one"), Text("two"), Text("three")]
    async with FakeAnthropic(script) as server, _anthropic(server) as client:
        for expected in ("one", "two"):
            async with client.messages.stream(model=CLAUDE, max_tokens=8, messages=HELLO) as s:
                assert await s.get_final_text() == expected
        assert server.remaining == 1
