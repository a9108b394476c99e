"""The HTTP face when the inbound stream is full (docs/operations.md, "The log full"): a
command JetStream refuses for want of storage is a 503 problem naming it, with
`failureClass: storage_full` and `Retry-After`; once there is room, the same command is
accepted."""

from __future__ import annotations

import httpx
from nats.js import api

from turnstream.bus import Bus
from turnstream.bus.full import ALARM


async def test_a_command_refused_for_storage_is_a_503_then_accepted_once_there_is_room(
    client: httpx.AsyncClient, bus: Bus
) -> None:
    stream = bus.subjects.inbound_stream
    info = await bus.js.stream_info(stream)
    config = info.config
    before = config.max_bytes, config.discard
    config.max_bytes, config.discard = max(info.state.bytes, 1), api.DiscardPolicy.NEW
    await bus.js.update_stream(config)
    try:
        body = {"text": "hello", "idempotencyKey": "full-1"}
        r = await client.post("/v1/sessions/full-1/messages", json=body)
        assert r.status_code == 503, r.text
        problem = r.json()
        assert problem["type"].endswith("storage-full") and problem["title"] == "The log is full"
        assert problem["failureClass"] == "storage_full" and problem["idempotencyKey"] == "full-1"
        assert "maximum bytes exceeded" in problem["detail"]
        assert r.headers["retry-after"] == "30"
        assert "ts.in" in ALARM.runs  # the face's alarm (its log line, its metric)
    finally:
        config.max_bytes, config.discard = before
        await bus.js.update_stream(config)
    r = await client.post("/v1/sessions/full-1/messages", json=body)
    assert r.status_code == 202, r.text
    assert "ts.in" not in ALARM.runs  # taken again: the alarm is over
