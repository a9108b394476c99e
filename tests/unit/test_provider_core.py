"""Provider pieces without a network: retry policy, error classes, history conversion."""

from __future__ import annotations

from datetime import UTC, datetime

from turnstream.core.events import Usage
from turnstream.core.turn import Message, ProviderFailure, ProviderSuccess, ToolCall, ToolInfo
from turnstream.providers.errors import connection_failure, status_failure
from turnstream.providers.retry import RetryPolicy, with_retries
from turnstream.providers.wire import (
    anthropic_messages,
    anthropic_tools,
    openai_messages,
    openai_tools,
)

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def failure(error_class: str = "overloaded", retryable: bool = True, after: float | None = None):
    return ProviderFailure(error_class, "busy", retryable, NOW, 529, retry_after_s=after)


def ok() -> ProviderSuccess:
    return ProviderSuccess("hi", "end_turn", Usage(), NOW, NOW)


POLICY = RetryPolicy(max_retries=3, base_delay_s=0.5, max_delay_s=4)


async def run(outcomes, policy: RetryPolicy = POLICY):
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    queue = list(outcomes)

    async def attempt():
        return queue.pop(0)

    return await with_retries(attempt, policy, sleep=sleep), slept


async def test_retryable_failures_are_retried_with_growing_delays_then_succeed() -> None:
    outcome, slept = await run([failure(), failure(), ok()])
    assert isinstance(outcome, ProviderSuccess)
    assert slept == [0.5, 1.0]
    assert [(r.attempt, r.delay_ms, r.error_class) for r in outcome.retries] == [
        (1, 500, "overloaded"),
        (2, 1000, "overloaded"),
    ]


async def test_retries_are_bounded_and_the_last_failure_comes_back_with_them() -> None:
    outcome, slept = await run([failure()] * 10)
    assert isinstance(outcome, ProviderFailure) and outcome.error_class == "overloaded"
    assert len(outcome.retries) == 3 and slept == [0.5, 1.0, 2.0]


async def test_retry_after_is_honoured_within_the_cap() -> None:
    _, slept = await run([failure(after=3.0), failure(after=60.0), ok()])
    assert slept == [3.0, 4.0]


async def test_a_final_failure_is_not_retried() -> None:
    outcome, slept = await run([failure("bad_request", retryable=False), ok()])
    assert isinstance(outcome, ProviderFailure) and slept == [] and outcome.retries == ()


def test_status_codes_map_to_failure_classes() -> None:
    cases = {
        (429, "slow down", None): ("rate_limit", True),
        (529, "overloaded", None): ("overloaded", True),
        (503, "unavailable", None): ("server_error", True),
        (400, "prompt is too long: 210000 tokens > 200000 maximum", None): (
            "prompt_too_long",
            False,
        ),
        (400, "too many tokens", "context_length_exceeded"): ("prompt_too_long", False),
        (401, "invalid x-api-key", None): ("auth", False),
        (400, "messages: field required", None): ("bad_request", False),
    }
    for (status, message, code), expected in cases.items():
        got = status_failure(status, message, {"retry-after": "2"}, code)
        assert (got.error_class, got.retryable) == expected, (status, message)
        assert got.retry_after_s == 2.0 and got.status_code == status
    assert connection_failure(ConnectionResetError("peer")).retryable


HISTORY = (
    Message("user", "read two files"),
    Message(
        "assistant",
        "Reading.",
        tool_calls=(ToolCall("t1", "read_file", {"path": "a"}), ToolCall("t2", "read_file", {})),
    ),
    Message("tool", "A", tool_call_id="t1"),
    Message("tool", "no such file", tool_call_id="t2", is_error=True),
    Message("assistant", "Done."),
    Message("user", "thanks"),
)
TOOLS = (ToolInfo("read_file", "reads", {"type": "object"}, True, True, 5.0),)


def test_anthropic_history_pairs_tool_results_in_one_user_turn() -> None:
    messages = anthropic_messages(HISTORY)
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant", "user"]
    assistant = messages[1]["content"]
    assert assistant[0] == {"type": "text", "text": "Reading."}
    assert [b["id"] for b in assistant[1:]] == ["t1", "t2"]
    results = messages[2]["content"]
    assert [(b["tool_use_id"], b["is_error"]) for b in results] == [("t1", False), ("t2", True)]
    assert anthropic_tools(TOOLS)[0]["input_schema"] == {"type": "object"}


def test_openai_history_pairs_tool_messages_by_call_id() -> None:
    messages = openai_messages("be brief", HISTORY)
    assert [m["role"] for m in messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
        "user",
    ]
    calls = messages[2]["tool_calls"]
    assert [c["id"] for c in calls] == ["t1", "t2"]
    assert calls[0]["function"] == {"name": "read_file", "arguments": '{"path":"a"}'}
    assert [m["tool_call_id"] for m in messages[3:5]] == ["t1", "t2"]
    assert openai_tools(TOOLS)[0]["function"]["name"] == "read_file"
