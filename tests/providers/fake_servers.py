"""Fake Anthropic Messages and OpenAI Chat Completions servers speaking the real wire formats.

Point an official SDK at one through `base_url` and script what it answers:

    async with FakeAnthropic([Text("Hello"), Error(529, "overloaded_error", "Overloaded")]) as s:
        client = anthropic.AsyncAnthropic(api_key="k", base_url=s.base_url, max_retries=0)

Each POST to the provider's endpoint consumes the next `Reply`. Streams are SSE in an HTTP/1.1
chunked body on a keep-alive connection, as the real APIs send them. A request past the end of
the script, to another path, or a non-streaming request for a streamed reply gets a 500 naming
the problem, and leaving the `async with` then raises AssertionError, so an adapter that
retries or swallows errors cannot hide it.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections import deque
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass
from http import HTTPStatus
from types import TracebackType
from typing import Any, ClassVar, Literal, Self

from turnstream.providers.cache_billing import AnthropicCache, Billed, OpenAICache

JSON = dict[str, Any]


@dataclass(frozen=True)
class Recorded:
    """One request as the fake server received it."""

    method: str
    path: str
    headers: dict[str, str]
    """Lower-cased header names."""
    body: Any
    """The parsed JSON body, or None when there was none."""


@dataclass(frozen=True)
class Text:
    """A streamed text answer, split into `chunks` deltas."""

    text: str
    chunks: int = 3
    stop: Literal["end_turn", "max_tokens"] = "end_turn"
    input_tokens: int = 10
    output_tokens: int = 5


@dataclass(frozen=True)
class ToolCalls:
    """Complete tool calls `(id, name, arguments)`, optionally after some text."""

    calls: list[tuple[str, str, dict[str, Any]]]
    text: str = ""
    input_tokens: int = 10
    output_tokens: int = 5

    def __post_init__(self) -> None:
        if not self.calls:
            raise ValueError("ToolCalls needs at least one call; use Text for a plain answer")


@dataclass(frozen=True)
class Error:
    """A non-streamed error body in the provider's own shape, with that HTTP status."""

    status: int
    error_type: str
    """Anthropic `error.type`; OpenAI `error.type`."""
    message: str
    retry_after: float | None = None
    """Sent as the `retry-after` header, in seconds."""
    code: str | None = None
    """OpenAI only: `error.code`, e.g. "rate_limit_exceeded", "context_length_exceeded"."""
    param: str | None = None
    """OpenAI only: `error.param`."""


@dataclass(frozen=True)
class Drop:
    """Start streaming `of`, send `after_chunks` SSE events, then close the connection.

    Events count as on the wire: Anthropic's message_start and ping, OpenAI's role chunk.
    """

    after_chunks: int = 1
    of: Text | ToolCalls = Text("This answer is cut off before it", chunks=4)


@dataclass(frozen=True)
class StreamError:
    """Stream `after_chunks` events of `of`, then an in-band error event (HTTP status 200)."""

    error_type: str
    message: str
    after_chunks: int = 1
    of: Text | ToolCalls = Text("This answer breaks off before it", chunks=4)


Reply = Text | ToolCalls | Error | Drop | StreamError


def _split(text: str, parts: int) -> list[str]:
    """`text` cut into at most `parts` non-empty pieces of near-equal length."""
    parts = max(1, min(parts, len(text)))
    size, extra = divmod(len(text), parts)
    bounds = [i * size + min(i, extra) for i in range(parts + 1)]
    return [text[a:b] for a, b in itertools.pairwise(bounds) if b > a]


def _fragments(arguments: dict[str, Any]) -> list[str]:
    """The arguments JSON in 2 to 4 pieces: the real APIs never send a call's input whole."""
    encoded = json.dumps(arguments)
    return _split(encoded, max(2, min(4, len(encoded) // 8)))


def _answer_text(reply: Text | ToolCalls) -> list[str] | None:
    """The text deltas, or None when the reply has no text block at all."""
    if isinstance(reply, Text):
        return _split(reply.text, reply.chunks)
    return _split(reply.text, 3) if reply.text else None


def anthropic_events(
    reply: Text | ToolCalls, *, model: str, message_id: str, billed: Billed | None = None
) -> list[JSON]:
    """The Messages API stream events for `reply`, each with its `type` (the SSE event name);
    the input usage is `billed`'s when given (a prompt-cache model), else the reply's."""
    calls = reply.calls if isinstance(reply, ToolCalls) else []
    blocks: list[tuple[JSON, list[JSON]]] = []
    if (text := _answer_text(reply)) is not None:
        deltas = [{"type": "text_delta", "text": piece} for piece in text]
        blocks.append(({"type": "text", "text": ""}, deltas))
    for call_id, name, arguments in calls:
        start = {"type": "tool_use", "id": call_id, "name": name, "input": {}}
        # The real stream opens every tool_use block with an empty partial_json.
        pieces = ["", *_fragments(arguments)]
        blocks.append((start, [{"type": "input_json_delta", "partial_json": p} for p in pieces]))
    billed = billed or Billed(reply.input_tokens)
    usage = {
        "input_tokens": billed.input_tokens,
        "cache_creation_input_tokens": billed.cache_write_tokens,
        "cache_read_input_tokens": billed.cache_read_tokens,
        "output_tokens": 1,
    }
    message = {"id": message_id, "type": "message", "role": "assistant", "model": model}
    message |= {"content": [], "stop_reason": None, "stop_sequence": None, "usage": usage}
    events: list[JSON] = [{"type": "message_start", "message": message}]
    for index, (start, deltas) in enumerate(blocks):
        events.append({"type": "content_block_start", "index": index, "content_block": start})
        if index == 0:
            events.append({"type": "ping"})
        events += [{"type": "content_block_delta", "index": index, "delta": d} for d in deltas]
        events.append({"type": "content_block_stop", "index": index})
    stop = reply.stop if isinstance(reply, Text) else "tool_use"
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop, "stop_sequence": None},
            "usage": {"output_tokens": reply.output_tokens},
        }
    )
    events.append({"type": "message_stop"})
    return events


_OPENAI_FINISH = {"end_turn": "stop", "max_tokens": "length"}


def openai_chunks(
    reply: Text | ToolCalls,
    *,
    model: str,
    completion_id: str,
    include_usage: bool,
    prompt: tuple[int, int] | None = None,
) -> list[JSON]:
    """The `chat.completion.chunk` objects for `reply`, the usage chunk last when asked for;
    `prompt` is `(prompt_tokens, cached_tokens)` from a prompt-cache model, else the reply's."""
    calls = reply.calls if isinstance(reply, ToolCalls) else []
    deltas: list[JSON] = []
    if (text := _answer_text(reply)) is not None:
        deltas.append({"role": "assistant", "content": "", "refusal": None})
        deltas += [{"content": piece} for piece in text]
    for index, (call_id, name, arguments) in enumerate(calls):
        function = {"name": name, "arguments": ""}
        head = {"index": index, "id": call_id, "type": "function", "function": function}
        deltas.append({"tool_calls": [head]})
        deltas += [
            {"tool_calls": [{"index": index, "function": {"arguments": piece}}]}
            for piece in _fragments(arguments)
        ]
    if text is None:
        deltas[0] = {"role": "assistant", "content": None, **deltas[0], "refusal": None}
    stop = _OPENAI_FINISH[reply.stop] if isinstance(reply, Text) else "tool_calls"
    envelope = {"id": completion_id, "object": "chat.completion.chunk", "created": int(time.time())}
    envelope |= {"model": model, "service_tier": "default", "system_fingerprint": "fp_fake"}
    if include_usage:
        envelope["usage"] = None

    def chunk(delta: JSON, finish_reason: str | None = None) -> JSON:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return {**envelope, "choices": [choice]}

    chunks = [chunk(delta) for delta in deltas] + [chunk({}, stop)]
    if include_usage:
        prompt_tokens, cached = prompt or (reply.input_tokens, 0)
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": reply.output_tokens,
            "total_tokens": prompt_tokens + reply.output_tokens,
            "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": 0,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        }
        chunks.append({**envelope, "choices": [], "usage": usage})
    return chunks


def _compact(data: JSON) -> str:
    return json.dumps(data, separators=(",", ":"))


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Overloaded" if status == 529 else "Error"


def _head(status: int, headers: dict[str, str]) -> bytes:
    lines = [f"HTTP/1.1 {status} {_reason(status)}", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, str, dict[str, str], bytes]:
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
    request_line, *lines = head.split("\r\n")
    method, target, _ = request_line.split(" ", 2)
    headers: dict[str, str] = {}
    for line in filter(None, lines):
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return method, target.split("?", 1)[0], headers, body


class FakeServer:
    """An HTTP/1.1 server on 127.0.0.1 answering one provider's endpoint from a script."""

    endpoint: ClassVar[str]
    request_id_header: ClassVar[str]
    server_error_type: ClassVar[str]

    def __init__(self, script: Sequence[Reply], *, cache: bool = False) -> None:
        """`cache`: bill each request's input against the API's prompt cache
        (`providers/cache_billing.py`) instead of the scripted reply's token counts."""
        self.cache = cache
        self.requests: list[Recorded] = []
        self.failures: list[str] = []
        self.streamed: list[tuple[float, float]] = []
        """(first byte, last byte) of each stream sent, as `time.perf_counter()` (benchmarks)."""
        self._script = deque(script)
        self._ids = itertools.count(1)
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.StreamWriter] = set()
        self._handlers: set[asyncio.Task[None]] = set()

    @property
    def base_url(self) -> str:
        """`http://127.0.0.1:<port>`, without any `/v1`."""
        assert self._server is not None, "use the server inside `async with`"
        port = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    @property
    def remaining(self) -> int:
        """How many scripted replies have not been asked for yet."""
        return len(self._script)

    async def __aenter__(self) -> Self:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._connections):
            writer.close()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        await self._server.wait_closed()
        if exc_type is None and self.failures:
            raise AssertionError(f"{type(self).__name__}: " + "; ".join(self.failures))

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        self._connections.add(writer)
        try:
            while await self._exchange(await _read_request(reader), writer):
                pass
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the client closed the connection, as it does an idle keep-alive one
        except Exception as exc:
            # Surfaced on exit: asyncio would only log it, and a test could still pass.
            self.failures.append(f"the fake server broke: {exc!r}")
        finally:
            self._connections.discard(writer)
            writer.close()
            with suppress(ConnectionError):
                await writer.wait_closed()
            self._handlers.discard(task)

    async def _exchange(
        self, request: tuple[str, str, dict[str, str], bytes], writer: asyncio.StreamWriter
    ) -> bool:
        """Answer one request; False when the connection must close afterwards."""
        method, path, headers, raw = request
        body = json.loads(raw) if raw else None
        self.requests.append(Recorded(method, path, headers, body))
        match self._next_reply(method, path, body):
            case Error() as error:
                await self._send_error(writer, error)
            case Text() | ToolCalls() as reply:
                await self._send_stream(writer, self._frames(reply, body), end=True)
            case Drop(after_chunks=count, of=of):
                await self._send_stream(writer, self._frames(of, body)[:count], end=False)
                return False
            case StreamError(after_chunks=count, of=of) as error:
                frames = [*self._frames(of, body)[:count], self._error_frame(error)]
                await self._send_stream(writer, frames, end=True)
        return headers.get("connection", "").lower() != "close"

    def _next_reply(self, method: str, path: str, body: Any) -> Reply:
        """The next scripted reply, or a 500 recorded as a failure when there should be none."""
        number = len(self.requests)
        if (method, path) != ("POST", self.endpoint):
            problem = f"request #{number} {method} {path}: only POST {self.endpoint} is served"
        elif not self._script:
            problem = f"request #{number} is beyond the end of the script"
        else:
            reply = self._script.popleft()
            streamed = isinstance(body, dict) and body.get("stream") is True
            if streamed or isinstance(reply, Error):
                return reply
            problem = f"request #{number} did not ask for stream=true; the fake only streams"
        self.failures.append(problem)
        return Error(500, self.server_error_type, f"{type(self).__name__}: {problem}")

    def _request_id(self) -> str:
        return f"req_fake{next(self._ids):06d}"

    async def _send_error(self, writer: asyncio.StreamWriter, error: Error) -> None:
        request_id = self._request_id()
        payload = _compact(self._error_body(error, request_id)).encode()
        headers = {"content-type": "application/json", "content-length": str(len(payload))}
        headers[self.request_id_header] = request_id
        if error.retry_after is not None:
            headers["retry-after"] = f"{error.retry_after:g}"
        writer.write(_head(error.status, headers) + payload)
        await writer.drain()

    async def _send_stream(
        self, writer: asyncio.StreamWriter, frames: list[bytes], *, end: bool
    ) -> None:
        """A chunked SSE body, one event per chunk; without its last chunk unless `end`."""
        headers = {
            "content-type": "text/event-stream; charset=utf-8",
            "transfer-encoding": "chunked",
            "cache-control": "no-cache",
            self.request_id_header: self._request_id(),
        }
        writer.write(_head(200, headers))
        first = time.perf_counter()
        for frame in frames:
            writer.write(_chunk(frame))
            await writer.drain()
        if end:
            writer.write(b"0\r\n\r\n")
            await writer.drain()
        self.streamed.append((first, time.perf_counter()))

    def _frames(self, reply: Text | ToolCalls, body: Any) -> list[bytes]:
        raise NotImplementedError

    def _error_frame(self, error: StreamError) -> bytes:
        raise NotImplementedError

    def _error_body(self, error: Error, request_id: str) -> JSON:
        raise NotImplementedError


class FakeAnthropic(FakeServer):
    """Serves `POST /v1/messages` with `"stream": true` as the Anthropic Messages API does."""

    endpoint = "/v1/messages"
    request_id_header = "request-id"
    server_error_type = "api_error"
    prompt_cache: AnthropicCache

    def __init__(self, script: Sequence[Reply], *, cache: bool = False) -> None:
        super().__init__(script, cache=cache)
        self.prompt_cache = AnthropicCache()

    def _frames(self, reply: Text | ToolCalls, body: Any) -> list[bytes]:
        model = str(body.get("model", "")) if isinstance(body, dict) else ""
        message_id = f"msg_fake{next(self._ids):06d}"
        billed = self.prompt_cache.bill(body) if self.cache else None
        events = anthropic_events(reply, model=model, message_id=message_id, billed=billed)
        return [f"event: {e['type']}\ndata: {_compact(e)}\n\n".encode() for e in events]

    def _error_frame(self, error: StreamError) -> bytes:
        data = {"type": "error", "error": {"type": error.error_type, "message": error.message}}
        return f"event: error\ndata: {_compact(data)}\n\n".encode()

    def _error_body(self, error: Error, request_id: str) -> JSON:
        detail = {"type": error.error_type, "message": error.message}
        return {"type": "error", "error": detail, "request_id": request_id}


class FakeOpenAI(FakeServer):
    """Serves `POST /v1/chat/completions` with `"stream": true` as the OpenAI API does."""

    endpoint = "/v1/chat/completions"
    request_id_header = "x-request-id"
    server_error_type = "server_error"
    prompt_cache: OpenAICache

    def __init__(self, script: Sequence[Reply], *, cache: bool = False) -> None:
        super().__init__(script, cache=cache)
        self.prompt_cache = OpenAICache()

    def _frames(self, reply: Text | ToolCalls, body: Any) -> list[bytes]:
        body = body if isinstance(body, dict) else {}
        options = body.get("stream_options") or {}
        chunks = openai_chunks(
            reply,
            model=str(body.get("model", "")),
            completion_id=f"chatcmpl-fake{next(self._ids):06d}",
            include_usage=bool(options.get("include_usage")),
            prompt=self.prompt_cache.bill(body) if self.cache else None,
        )
        return [f"data: {_compact(c)}\n\n".encode() for c in chunks] + [b"data: [DONE]\n\n"]

    def _error_frame(self, error: StreamError) -> bytes:
        detail = {"message": error.message, "type": error.error_type, "param": None, "code": None}
        return f"data: {_compact({'error': detail})}\n\n".encode()

    def _error_body(self, error: Error, request_id: str) -> JSON:
        detail = {"message": error.message, "type": error.error_type}
        return {"error": detail | {"param": error.param, "code": error.code}}
