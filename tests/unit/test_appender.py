"""The appender: one timer for every batch in flight, and its own framing of a batch."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from nats.aio.client import Client

from turnstream.bus import appender
from turnstream.bus.appender import PipelinedAppender, frames


class Silent:
    """A connection whose messages are never acknowledged."""

    is_connected = False  # every message through `publish`

    def __init__(self) -> None:
        self.published: list[str] = []
        self.stats = {"in_msgs": 0, "in_bytes": 0}

    def new_inbox(self) -> str:
        return "_INBOX.t"

    async def subscribe(self, subject: str, cb: Any) -> Any:
        return type("Sub", (), {"_id": 1})()

    async def _process_msg(self, *message: Any) -> None:  # what the acks would come through
        return None

    async def publish(self, subject: str, payload: bytes, reply: str, headers: Any) -> None:
        self.published.append(subject)


async def test_a_batch_nobody_acknowledges_times_out_and_is_forgotten(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(appender, "TICK_S", 0.05)
    pipe = PipelinedAppender(Silent())
    item = ("ts.log.s.X", b"{}", {})
    loop = asyncio.get_running_loop()
    start = loop.time()
    with pytest.raises(TimeoutError):
        await pipe.publish([item], 0.2)
    with pytest.raises(TimeoutError):
        await pipe.publish_batch([item, item], 0.1)
    took = loop.time() - start
    assert 0.3 <= took < 1.0
    assert not pipe.batches and not pipe.fast
    await asyncio.sleep(0.1)
    assert pipe._ticking is None  # nothing in flight: no timer left behind


async def test_a_later_batch_keeps_its_own_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(appender, "TICK_S", 0.05)
    pipe = PipelinedAppender(Silent())
    item = ("ts.log.s.X", b"{}", {})
    short = asyncio.ensure_future(pipe.publish([item], 0.1))
    long = asyncio.ensure_future(pipe.publish([item], 0.6))
    with pytest.raises(TimeoutError):
        await short
    assert not long.done()
    long.cancel()
    with pytest.raises(asyncio.CancelledError):
        await long
    assert not pipe.batches


async def nats_py_bytes(subject: str, reply: str, payload: bytes, headers: Any) -> bytes:
    """What nats-py's `publish` writes for one message."""
    client = Client()
    written: list[bytes] = []

    async def capture(cmd: bytes, priority: bool = False) -> None:
        written.append(cmd)

    client._send_command = capture  # type: ignore[method-assign]
    client._flush_queue = None
    await client._send_publish(subject, reply, payload, len(payload), headers)
    return b"".join(written)


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Nats-Msg-Id": "0199a000-0000-7000-8000-000000000001"},
        {
            "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "Nats-Msg-Id": "e1",
            "Nats-Expected-Last-Subject-Sequence": "42",
            "Nats-Expected-Last-Subject-Sequence-Subject": "ts.log.s1.>",
        },
    ],
)
async def test_the_appenders_frames_are_what_nats_py_writes(headers: dict[str, str]) -> None:
    items = [
        ("ts.log.s1.StagePreFired", b'{"id":"e1"}', headers),
        ("$KV.ts_invocations.i1", b"running", headers),
        ("ts.log.s1.TurnEnded", b"", headers),
    ]
    replies = ["_INBOX.x.1.0", "_INBOX.x.1.1", "_INBOX.x.f2.1000.fail.3.2.$FI"]
    pairs = zip(items, replies, strict=True)
    expected = b"".join([await nats_py_bytes(s, r, p, h or None) for (s, p, h), r in pairs])
    assert frames(items, replies, 1 << 20) == expected


def test_what_needs_nats_pys_checks_is_left_to_it() -> None:
    ok = ("ts.log.s1.X", b"{}", {"Nats-Msg-Id": "e1"})
    assert frames([ok], ["_INBOX.r"], 1 << 20) is not None
    for odd in (
        ("ts.log.s 1.X", b"{}", {}),
        ("", b"{}", {}),
        ("ts.log.s1.X", b"{}", {"Nats-Msg-Id": "e1\r\nPUB evil 0"}),
        ("ts.log.s1.X", b"{}", {"Bad Key": "v"}),
        ("ts.log.s1.X", b"x" * 11, {}),
    ):
        assert frames([ok, odd], ["_INBOX.r", "_INBOX.s"], 10) is None, odd
