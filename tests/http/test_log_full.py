"""The HTTP face when the inbound stream or the log is full (docs/operations.md, "The log
full"): a command refused for want of storage is a 503 problem naming it, with
`failureClass: storage_full` and `Retry-After`, and `/readyz` says which stream is full;
once there is room, the same command is accepted."""

from __future__ import annotations

import asyncio

import httpx
from nats.js import api

from turnstream.bus import Bus
from turnstream.bus.full import ALARM
from turnstream.http.storage import FRESH_S


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
    # its turn ends before the next test fills the log (a turn in flight would be
    # appended between that test's read of the log and its limit)
    r = await client.post("/v1/sessions/full-1/messages?wait=true", json=body)
    assert r.status_code == 200 and r.json()["data"]["status"] == "completed", r.text
    assert "ts.in" not in ALARM.runs  # taken again: the alarm is over


async def test_the_log_full_is_said_by_readyz_and_a_new_message_is_a_503(
    client: httpx.AsyncClient, bus: Bus
) -> None:
    """TS_LOG at its limit (the inbound stream has room: a publish would be stored and wait
    unanswered): `/readyz` says the log is full and which stream, as `turnstream status`
    does, and a message is refused at once, 503 `storage-full`, nothing stored."""
    r = await client.get("/readyz")
    assert r.status_code == 200 and r.json()["storage"]["full"] is False, r.text
    stream = bus.subjects.log_stream
    info = await bus.js.stream_info(stream)
    config = info.config
    before = config.max_bytes, config.discard
    config.max_bytes, config.discard = max(info.state.bytes, 1), api.DiscardPolicy.NEW
    await bus.js.update_stream(config)
    try:
        await asyncio.sleep(FRESH_S + 0.1)  # past the face's last read of the streams
        r = await client.get("/readyz")
        assert r.status_code == 200, r.text  # reads are still served
        storage = r.json()["storage"]
        assert storage["full"] is True and storage["atLimit"] == [stream], storage
        [log] = [s for s in storage["streams"] if s["stream"] == stream]
        assert log["maxBytes"] == config.max_bytes and log["bytes"] == info.state.bytes
        inbound = (await bus.js.stream_info(bus.subjects.inbound_stream)).state.last_seq

        body = {"text": "hello", "idempotencyKey": "log-full-1"}
        r = await client.post("/v1/sessions/log-full-1/messages", json=body)
        assert r.status_code == 503, r.text
        problem = r.json()
        assert problem["type"].endswith("storage-full") and problem["title"] == "The log is full"
        assert problem["failureClass"] == "storage_full"
        assert problem["idempotencyKey"] == "log-full-1"
        assert f"{stream} at its storage limit" in problem["detail"], problem
        assert "nothing was stored" in problem["detail"], problem
        assert r.headers["retry-after"] == "30"
        assert (await bus.js.stream_info(bus.subjects.inbound_stream)).state.last_seq == inbound
    finally:
        config.max_bytes, config.discard = before
        await bus.js.update_stream(config)
    async with asyncio.timeout(40):  # the in-process services' refused work goes through
        while True:
            if not (await client.get("/readyz")).json()["storage"]["full"]:
                break
            await asyncio.sleep(0.5)
    r = await client.post("/v1/sessions/log-full-1/messages?wait=true", json=body)
    assert r.status_code == 200 and r.json()["data"]["status"] == "completed", r.text


async def test_a_command_stored_before_the_log_filled_is_a_503_naming_its_seq(
    client: httpx.AsyncClient, bus: Bus
) -> None:
    """The face read the streams a moment before the log filled: the command is stored and
    the gateway cannot record a verdict. The answer is a 503 `storage-full` naming its
    inbound seq (it runs once space is freed), not a 504 that blames the gateway; and it
    does run then."""
    stream = bus.subjects.log_stream
    info = await bus.js.stream_info(stream)
    config = info.config
    before = config.max_bytes, config.discard
    r = await client.get("/readyz")  # the face's read: not full
    assert r.json()["storage"]["full"] is False, r.text
    config.max_bytes, config.discard = max(info.state.bytes, 1), api.DiscardPolicy.NEW
    await bus.js.update_stream(config)
    try:
        body = {"text": "hello", "idempotencyKey": "held-1"}
        r = await client.post("/v1/sessions/held-1/messages", json=body)
        assert r.status_code == 503, r.text
        problem = r.json()
        assert problem["failureClass"] == "storage_full" and problem["idempotencyKey"] == "held-1"
        assert "the command is stored (inbound seq" in problem["detail"], problem
        assert stream in problem["detail"] and problem["inboundSeq"] > 0, problem
    finally:
        config.max_bytes, config.discard = before
        await bus.js.update_stream(config)
    await asyncio.sleep(FRESH_S + 0.1)  # the face's read of the full log is a second old
    r = await client.post("/v1/sessions/held-1/messages?wait=true", json=body)  # a retry
    assert r.status_code == 200, r.text
    assert r.json()["data"]["status"] == "completed", r.text
