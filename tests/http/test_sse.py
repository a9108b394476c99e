"""`GET /v1/sessions/{id}/stream`: replay then live, resume, tokens, pings, the seam under
load, and how many NATS consumers many streams cost."""

from __future__ import annotations

import asyncio
import random
from datetime import UTC, datetime

import httpx
import pytest
import uuid_utils

from tests.http.sse_client import Sse, read_sse
from tests.integration.partitioned import log_partitions_1_and_4  # noqa: F401 (fixture)
from turnstream.bus import Bus
from turnstream.core.events import Stage, StagePreFired, StagePreFiredData
from turnstream.http.context import Options

pytestmark = pytest.mark.integration


def marker(session: str, n: int) -> StagePreFired:
    """A small event nobody reacts to, to fill a session's log fast."""
    return StagePreFired(
        id=str(uuid_utils.uuid7()),
        time=datetime.now(UTC),
        session_id=session,
        chat_id=session,
        turn_id=f"t-{session}",
        trace_id="trace",
        correlation_id="corr",
        source="test/1",
        data=StagePreFiredData(stage=Stage.COMPOSE_REQUEST, iteration=n + 1),
    )


async def collect(
    client: httpx.AsyncClient,
    session: str,
    until: object,
    *,
    headers: dict[str, str] | None = None,
    params: dict[str, str] | None = None,
    timeout: float = 15,
    opened: asyncio.Event | None = None,
) -> list[Sse]:
    """Events of the stream until `until(event)` is true (comments kept too); `opened` is
    set once the stream is live."""
    out: list[Sse] = []
    async with asyncio.timeout(timeout):
        async with client.stream(
            "GET", f"/v1/sessions/{session}/stream", headers=headers, params=params
        ) as response:
            assert response.status_code == 200, await response.aread()
            assert response.headers["content-type"].startswith("text/event-stream")
            async for sse in read_sse(response, opened):
                out.append(sse)
                if until(sse):  # type: ignore[operator]
                    break
    return out


def ids(events: list[Sse]) -> list[int]:
    return [int(e.id) for e in events if e.id is not None]


async def test_replay_then_live_with_log_sequences_as_ids(client: httpx.AsyncClient) -> None:
    await client.post("/v1/sessions/sse-1/messages?wait=true", json={"text": "first"})

    async def second() -> None:
        await asyncio.sleep(0.3)
        await client.post("/v1/sessions/sse-1/messages", json={"text": "second"})

    task = asyncio.create_task(second())
    # the 2nd turn (live) asks to write a file: its prompt is the last event for now
    got = await collect(client, "sse-1", lambda e: e.event == "InteractionRequested")
    await task
    log = (await client.get("/v1/sessions/sse-1/events?limit=1000")).json()["items"]
    stored = [(i["seq"], i["event"]["type"]) for i in log]
    streamed = [(int(e.id), e.event) for e in got if e.id is not None]
    assert streamed == stored[: len(streamed)]
    turn_ends = [e for e in got if e.event == "TurnEnded"]
    assert [e.json["data"]["reply"] for e in turn_ends] == ["echo: first"]
    assert [e.json["data"]["text"] for e in got if e.event == "InputAccepted"] == [
        "first",
        "second",
    ]
    first = next(e for e in got if e.id is not None)
    assert first.json["type"] == first.event and first.json["sessionId"] == "sse-1"


async def test_resume_after_last_event_id_or_after(client: httpx.AsyncClient) -> None:
    await client.post("/v1/sessions/sse-2/messages?wait=true", json={"text": "hi"})
    everything = ids(await collect(client, "sse-2", lambda e: e.event == "SessionTurnEnd"))
    assert len(everything) > 5
    cut = everything[2]
    by_header = await collect(
        client, "sse-2", lambda e: e.event == "SessionTurnEnd", headers={"Last-Event-ID": str(cut)}
    )
    by_query = await collect(
        client, "sse-2", lambda e: e.event == "SessionTurnEnd", params={"after": str(cut)}
    )
    assert ids(by_header) == ids(by_query) == everything[3:]
    # Last-Event-ID (a reconnecting EventSource) wins over the URL's ?after=
    both = await collect(
        client,
        "sse-2",
        lambda e: e.event == "SessionTurnEnd",
        headers={"Last-Event-ID": str(everything[4])},
        params={"after": "0"},
    )
    assert ids(both) == everything[5:]
    bad = await client.get("/v1/sessions/sse-2/stream", headers={"Last-Event-ID": "abc"})
    assert bad.status_code == 422


async def test_token_deltas_come_without_ids(client: httpx.AsyncClient) -> None:
    opened = asyncio.Event()

    async def send() -> None:
        await opened.wait()  # tokens are not in the log: a stream not yet live misses them
        await client.post("/v1/sessions/sse-tok/messages", json={"text": "stream me"})

    task = asyncio.create_task(send())
    got = await collect(client, "sse-tok", lambda e: e.event == "TurnEnded", opened=opened)
    await task
    tokens = [e for e in got if e.event == "token"]
    assert tokens and all(e.id is None for e in tokens)
    assert "".join(t.json["delta"] for t in tokens) == "echo: stream me"
    no_tokens = await collect(
        client, "sse-tok", lambda e: e.event == "TurnEnded", params={"tokens": "false"}
    )
    assert not [e for e in no_tokens if e.event == "token"]


async def test_an_idle_stream_is_pinged(client: httpx.AsyncClient) -> None:
    got = await collect(client, "sse-idle", lambda e: "ping" in e.comments, timeout=5)
    assert got[-1].comments == ["ping"] and got[-1].id is None


async def test_each_stream_asks_for_its_own_reconnection_delay(
    client: httpx.AsyncClient,
) -> None:
    """The first frame is `retry:`, drawn per stream within `Options.retry_ms`: when a
    restart closes every stream, their clients come back spread out, not all at once."""
    low, high = Options().retry_ms
    delays = set()
    for _ in range(8):
        async with client.stream("GET", "/v1/sessions/sse-retry/stream") as response:
            first = await anext(response.aiter_lines())
        name, _, value = first.partition(": ")
        assert name == "retry" and low <= int(value) <= high, first
        delays.add(int(value))
    assert len(delays) > 1


async def test_no_gap_and_no_duplicate_at_the_seam_under_load(
    client: httpx.AsyncClient, bus: Bus
) -> None:
    session, total, readers = "seam", 1500, 24
    done = asyncio.Event()
    final: list[int] = []

    async def writer() -> None:
        for start in range(0, total, 10):
            seqs = await bus.store.append_facts(
                [marker(session, n) for n in range(start, start + 10)]
            )
            final[:] = [seqs[-1]]
            await asyncio.sleep(0.002)
        done.set()

    async def reader(delay: float) -> tuple[int, list[int]]:
        await asyncio.sleep(delay)
        after = random.choice([0, final[0] if final else 0, max(0, (final or [0])[0] - 50)])
        got: list[int] = []

        def finished(sse: Sse) -> bool:
            if sse.id is not None:
                got.append(int(sse.id))
            # a reader that joined after the last write, at its seq, is owed nothing: the
            # stream's first frame (or a ping) ends it (it waited for ever before)
            seen = got[-1] if got else after
            return done.is_set() and seen >= final[0]

        await collect(client, session, finished, params={"after": str(after)}, timeout=60)
        return after, got

    rng = random.Random(7)
    tasks = [asyncio.create_task(reader(rng.uniform(0, 1.2))) for _ in range(readers)]
    await writer()
    results = await asyncio.gather(*tasks)
    log = [s.seq for s in await bus.store.read_session(session)]
    for after, got in results:
        expected = [s for s in log if s > after]
        assert got[: len(expected)] == expected, f"after {after}: gap or duplicate"
    print(f"\nseam: {readers} streams joined mid-write of {total} events; none lost or repeated")


async def test_many_streams_share_the_hub_not_one_consumer_each(
    client: httpx.AsyncClient, url: str, bus: Bus
) -> None:
    n = 100
    await bus.store.append_facts([marker("many-0", 0)])

    async def consumers() -> int:
        infos = [await bus.js.stream_info(stream) for stream in bus.subjects.log_streams]
        return sum(int(info.state.consumer_count) for info in infos)

    before, ready_before = await consumers(), (await client.get("/readyz")).json()
    opened, measured = asyncio.Event(), asyncio.Event()
    pinged_streams: set[int] = set()

    async def one(i: int) -> None:
        def pinged(sse: Sse) -> bool:
            if "ping" not in sse.comments:
                return False
            if measured.is_set():
                return True
            pinged_streams.add(i)
            if len(pinged_streams) >= n:
                opened.set()
            return False

        await collect(streams, f"many-{i % 10}", pinged, timeout=30)

    limits = httpx.Limits(max_connections=None, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=url, timeout=30, limits=limits) as streams:
        tasks = [asyncio.create_task(one(i)) for i in range(n)]
        try:
            await asyncio.wait_for(opened.wait(), 30)
            during, ready = await consumers(), (await client.get("/readyz")).json()
        finally:
            measured.set()
            await asyncio.gather(*tasks)
    print(
        f"\n{n} open streams: TS_LOG consumers {before} → {during}; "
        f"app NATS subscriptions {ready_before['natsSubscriptions']} → "
        f"{ready['natsSubscriptions']}; hub feeds {ready['feeds']}"
    )
    assert ready["feeds"] >= n
    # the hub's log consumer and live subscription, and the shared direct-get inbox
    assert ready["natsSubscriptions"] <= ready_before["natsSubscriptions"] + 3
    # replays read by direct get: no consumer per stream (other clients' ephemeral
    # consumers, from earlier tests, may expire meanwhile: not more, rather than equal)
    assert during <= before
