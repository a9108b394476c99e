"""The HTTP face next to the NATS path, in one run (issue 14's performance figures).

    python bench/http_face.py [--turns 200] [--streams 500]

Starts an embedded nats-server and every service as its own process (as `turnstream up`
does, the HTTP face included), then measures:
  turn      a text turn (scripted provider, zero delay), one at a time, alternating:
            NATS  publish to `ts.in.<s>` → its `TurnEnded` seen on a subscription
            NATS  the same, `TurnEnded` read from the log by an ordered consumer (as the
                  HTTP face reads it)
            HTTP  `POST /v1/sessions/<s>/messages?wait=true` → the 200 with `TurnEnded`
            p50 / p99 of each, their difference and ratio, and the HTTP process's CPU
            per turn of each path (on a NATS turn: the hub following the log)
  streams   N concurrent SSE streams on one HTTP process, each on a session with one event:
            open→first event (replay) when N open at once, and when opened one at a time;
            next to N plain `GET /healthz` at once (the HTTP server's own floor);
            live fan-out: one event appended to every session, append→arrival per stream;
            N streams open, then the HTTP process restarted: each client back after the
            `retry:` its stream sent (3 s without one, a browser's default), resuming with
            `Last-Event-ID` as EventSource does: open→first event;
            the HTTP process's RSS per open stream; TS_LOG consumers and the app's NATS
            subscriptions before and with N streams open
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import orjson
import stack
import uuid_utils
from nats.js.api import ConsumerConfig, DeliverPolicy
from rich.console import Console
from rich.table import Table
from turns import pct

from turnstream.bus import Bus, connect
from turnstream.bus.embedded import EmbeddedServer, free_port
from turnstream.bus.streams import StreamLimits
from turnstream.client import message_command
from turnstream.core.events import Stage, StagePreFired, StagePreFiredData
from turnstream.core.subjects import Subjects

console = Console(highlight=False)
SCRIPT = 'replies:\n  - {text: "ok {input:20}", chunks: whole}\n'


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def marker(session: str) -> StagePreFired:
    return StagePreFired(
        id=str(uuid_utils.uuid7()),
        time=datetime.now(UTC),
        session_id=session,
        chat_id=session,
        turn_id=f"t-{session}",
        trace_id="bench",
        correlation_id="bench",
        source="bench/1",
        data=StagePreFiredData(stage=Stage.COMPOSE_REQUEST, iteration=1),
    )


class TurnWatcher:
    """One subscription to every TurnEnded; resolves the waiter of each correlation id.

    `from_log`: read them from the log with an ordered consumer, as the HTTP face does (a
    plain subscription hears an event as the server routes it; a consumer, once the stream
    has stored it and the consumer delivers it)."""

    def __init__(self, bus: Bus, *, from_log: bool = False) -> None:
        self.bus = bus
        self.from_log = from_log
        self.waiters: dict[str, asyncio.Future[float]] = {}

    async def start(self) -> None:
        subject = self.bus.subjects.log_kind("TurnEnded")
        if self.from_log:
            await self.bus.js.subscribe(
                subject,
                stream=self.bus.subjects.log_stream,
                cb=self.on_msg,
                ordered_consumer=True,
                config=ConsumerConfig(deliver_policy=DeliverPolicy.NEW),
            )
        else:
            await self.bus.nc.subscribe(subject, cb=self.on_msg)

    async def on_msg(self, msg: Any) -> None:
        at = time.perf_counter()
        waiter = self.waiters.pop(orjson.loads(msg.data)["correlationId"], None)
        if waiter and not waiter.done():
            waiter.set_result(at)

    async def turn(self, session: str) -> float:
        command = message_command(session, "hello")
        key = command["idempotencyKey"]
        waiter = asyncio.get_running_loop().create_future()
        self.waiters[key] = waiter
        start = time.perf_counter()
        await self.bus.js.publish(
            self.bus.subjects.inbound(session), orjson.dumps(command), headers={"Nats-Msg-Id": key}
        )
        return (await asyncio.wait_for(waiter, 30) - start) * 1000


async def http_turn(client: httpx.AsyncClient, session: str) -> float:
    start = time.perf_counter()
    r = await client.post(f"/v1/sessions/{session}/messages?wait=true", json={"text": "hello"})
    elapsed = (time.perf_counter() - start) * 1000
    assert r.status_code == 200 and r.json()["data"]["status"] == "completed", r.text
    return elapsed


class RawHttp:
    """HTTP/1.1 keep-alive on a bare asyncio stream: the client's own cost near zero, so
    the difference to NATS is the HTTP face's (httpx alone costs ~1-2 ms a request here)."""

    def __init__(self, url: str) -> None:
        self.host, self.port = url.removeprefix("http://").split(":")
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def healthz(self) -> float:
        """One `GET /healthz` on the same connection: the HTTP round trip alone."""
        await self._connect()
        assert self.reader is not None and self.writer is not None
        start = time.perf_counter()
        self.writer.write(f"GET /healthz HTTP/1.1\r\nHost: {self.host}\r\n\r\n".encode())
        head = await self.reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length")
        )
        await self.reader.readexactly(length)
        return (time.perf_counter() - start) * 1000

    async def _connect(self) -> None:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, int(self.port))
            sock = self.writer.get_extra_info("socket")
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    async def turn(self, session: str) -> float:
        await self._connect()
        assert self.reader is not None and self.writer is not None
        body = b'{"text": "hello"}'
        request = (
            f"POST /v1/sessions/{session}/messages?wait=true HTTP/1.1\r\nHost: {self.host}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode() + body
        start = time.perf_counter()
        self.writer.write(request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length")
        )
        data = await self.reader.readexactly(length)
        elapsed = (time.perf_counter() - start) * 1000
        assert head.startswith(b"HTTP/1.1 200") and b'"completed"' in data, head + data
        return elapsed


def cpu_s(pid: int) -> float:
    """The CPU time of the process's main thread so far, to the nanosecond (`/proc/<pid>/
    stat` counts in 10 ms ticks, too coarse for one turn)."""
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9


NATS, NATS_LOG, RAW, HTTPX, FLOOR = (
    "NATS",
    "NATS, TurnEnded read from the log",
    "HTTP (raw client)",
    "HTTP (httpx)",
    "floor: GET /healthz (raw client)",
)


async def turns(
    bus: Bus, client: httpx.AsyncClient, url: str, n: int, pid: int
) -> tuple[dict[str, list[float]], dict[str, float]]:
    """Each path's latencies, and the HTTP process's CPU per turn of each path."""
    watcher, log_watcher = TurnWatcher(bus), TurnWatcher(bus, from_log=True)
    await watcher.start()
    await log_watcher.start()
    raw = RawHttp(url)
    paths: dict[str, Any] = {
        NATS: watcher.turn,
        NATS_LOG: log_watcher.turn,
        RAW: raw.turn,
        HTTPX: lambda session: http_turn(client, session),
    }
    for i in range(30):  # warm every path (and every process) up
        for name, turn in paths.items():
            await turn(f"warm-{name[:4]}-{i}")
    out: dict[str, list[float]] = {name: [] for name in [*paths, FLOOR]}
    cpu = dict.fromkeys(paths, 0.0)
    for i in range(n):  # interleaved, one at a time: the same load for each
        for name, turn in paths.items():
            before = cpu_s(pid)
            out[name].append(await turn(f"{name[:4]}-{i % 20}"))
            cpu[name] += cpu_s(pid) - before
        out[FLOOR].append(await raw.healthz())
    return out, {name: total / n * 1000 for name, total in cpu.items()}


class Stream:
    """One SSE stream read on a bare asyncio connection (500 httpx streams would measure
    httpx): when its first event came, and when each later one did."""

    def __init__(self, session: str, last_event_id: str | None = None) -> None:
        self.session = session
        self.last_event_id = last_event_id
        self.opened_at = 0.0
        self.first_at = 0.0
        self.first_id = ""
        self.retry_ms = 0
        self.arrivals: list[float] = []
        self.ready = asyncio.Event()
        self.live = asyncio.Event()

    async def run(self, url: str, stop: asyncio.Event) -> None:
        """Read the stream until it ends (or, once `stop` is set, until the next event)."""
        host, port = url.removeprefix("http://").split(":")
        self.opened_at = time.perf_counter()
        reader, writer = await asyncio.open_connection(host, int(port), limit=1 << 20)
        resume = f"Last-Event-ID: {self.last_event_id}\r\n" if self.last_event_id else ""
        writer.write(
            f"GET /v1/sessions/{self.session}/stream HTTP/1.1\r\nHost: {host}\r\n{resume}"
            "\r\n".encode()
        )
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200"), head
            while True:
                line = await reader.readline()
                if not line:
                    return
                if line.startswith(b"retry:"):
                    self.retry_ms = int(line[6:])
                elif line.startswith(b"id:"):
                    self.first_id = self.first_id or line[3:].strip().decode()
                    now = time.perf_counter()
                    if not self.ready.is_set():
                        self.first_at = now
                        self.ready.set()
                    else:
                        self.arrivals.append(now)
                        self.live.set()
                        if stop.is_set():
                            return
        finally:
            writer.close()


async def plain_request(url: str) -> float:
    """Open a connection, GET /healthz, read the status line: the HTTP server's own floor."""
    host, port = url.removeprefix("http://").split(":")
    start = time.perf_counter()
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(f"GET /healthz HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), head
        return (time.perf_counter() - start) * 1000
    finally:
        writer.close()


async def streams(bus: Bus, url: str, pid: int, n: int) -> dict[str, Any]:
    sessions = [f"sse-{i}" for i in range(n)]
    await bus.store.append_facts([marker(s) for s in sessions])
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=0)
    out: dict[str, Any] = {}

    async def consumers() -> int:
        return int((await bus.js.stream_info(bus.subjects.log_stream)).state.consumer_count)

    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as client:
        ready = (await client.get("/readyz")).json()
        out["subs_before"], out["consumers_before"] = ready["natsSubscriptions"], await consumers()
        # one at a time: open→first event with nothing else going on
        alone: list[float] = []
        for i in range(min(100, n)):
            s, stop = Stream(sessions[i]), asyncio.Event()
            stop.set()
            task = asyncio.create_task(s.run(url, stop))
            await s.ready.wait()
            alone.append((s.first_at - s.opened_at) * 1000)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        out["alone"] = alone
        await asyncio.sleep(0.5)
        # the floor: N plain requests at once, no NATS and no stream (uvicorn + FastAPI)
        before = cpu_s(pid)
        out["plain"] = list(await asyncio.gather(*(plain_request(url) for _ in range(n))))
        out["plain_cpu_ms"] = (cpu_s(pid) - before) / n * 1000
        await asyncio.sleep(0.5)
        rss_before = rss_kb(pid)
        stop = asyncio.Event()
        all_streams = [Stream(s) for s in sessions]
        start, before = time.perf_counter(), cpu_s(pid)
        tasks = [asyncio.create_task(s.run(url, stop)) for s in all_streams]
        await asyncio.gather(*(s.ready.wait() for s in all_streams))
        out["burst_s"] = time.perf_counter() - start
        out["burst_cpu_ms"] = (cpu_s(pid) - before) / n * 1000
        out["burst"] = [(s.first_at - s.opened_at) * 1000 for s in all_streams]
        await asyncio.sleep(1.0)
        out["rss_per_stream_kb"] = (rss_kb(pid) - rss_before) / n
        ready = (await client.get("/readyz")).json()
        out["subs_open"], out["consumers_open"] = ready["natsSubscriptions"], await consumers()
        out["feeds"] = ready["feeds"]
        # a client joining while the N are open: what a new browser tab waits for
        joined: list[float] = []
        for i in range(min(100, n)):
            s, idle = Stream(sessions[i]), asyncio.Event()
            task = asyncio.create_task(s.run(url, idle))
            await s.ready.wait()
            joined.append((s.first_at - s.opened_at) * 1000)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        out["joined"] = joined
        stop.set()
        appended = time.perf_counter()
        await bus.store.append_facts([marker(s) for s in sessions])
        await asyncio.wait_for(asyncio.gather(*(s.live.wait() for s in all_streams)), 30)
        out["fanout"] = [(s.arrivals[0] - appended) * 1000 for s in all_streams]
        await asyncio.gather(*tasks, return_exceptions=True)
    out["streams"] = all_streams
    return out


def restart_http(supervisor: Any) -> None:
    """Stop the HTTP process (it ends its open streams) and start it again."""
    child = supervisor.children["http"]
    child.send_signal(signal.SIGTERM)
    child.wait(timeout=30)
    supervisor.start("http")


BROWSER_RETRY_MS = 3000
"""How long a browser's EventSource waits to reconnect when the server sent no `retry:`."""


async def reconnect(url: str, restart: Any, sessions: list[str]) -> list[float]:
    """A stream open on each of `sessions`; the HTTP process restarts, which ends them all;
    each client comes back after the `retry:` its stream asked for (a browser's default
    without one), and again after it while the port refuses, resuming after its first
    event, as EventSource does. Open→first event of each coming back."""
    held = [Stream(session) for session in sessions]
    reading = [asyncio.create_task(s.run(url, asyncio.Event())) for s in held]
    await asyncio.gather(*(s.ready.wait() for s in held))

    async def come_back(old: Stream, ended: asyncio.Task[None]) -> float:
        await asyncio.gather(ended, return_exceptions=True)  # the restart ends the stream
        while True:
            await asyncio.sleep((old.retry_ms or BROWSER_RETRY_MS) / 1000)
            again = Stream(old.session, old.first_id)
            task = asyncio.create_task(again.run(url, asyncio.Event()))
            first = asyncio.create_task(again.ready.wait())
            await asyncio.wait([task, first], return_when=asyncio.FIRST_COMPLETED)
            first.cancel()
            task.cancel()
            await asyncio.gather(task, first, return_exceptions=True)
            if again.ready.is_set():
                return (again.first_at - again.opened_at) * 1000
            # refused (not listening yet) or closed (shutting down): again after the delay

    coming_back = asyncio.gather(*(come_back(s, t) for s, t in zip(held, reading, strict=True)))
    await asyncio.to_thread(restart)
    return list(await coming_back)


async def until_ready(url: str) -> None:
    async with httpx.AsyncClient(base_url=url) as client:
        for _ in range(300):
            try:
                if (await client.get("/readyz")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.1)
    raise RuntimeError("the HTTP face did not come up")


async def measure(
    server: EmbeddedServer, url: str, supervisor: Any, args: argparse.Namespace
) -> None:
    pid = supervisor.children["http"].pid
    bus = await connect(server.url, Subjects("ts"), ensure=StreamLimits())
    try:
        await until_ready(url)
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            measured, cpu = await turns(bus, client, url, args.turns, pid)
        table = Table("path", "turns", "p50 ms", "p99 ms", "HTTP process CPU ms/turn")
        for name, values in measured.items():
            table.add_row(
                name,
                str(len(values)),
                f"{pct(values, 0.5):.2f}",
                f"{pct(values, 0.99):.2f}",
                f"{cpu[name]:.2f}" if name in cpu else "",
            )
        console.print(table)
        nats50, log50 = pct(measured[NATS], 0.5), pct(measured[NATS_LOG], 0.5)
        floor = pct(measured[FLOOR], 0.5)
        console.print(
            f"the HTTP round trip alone (GET /healthz, keep-alive) p50 {floor:.2f} ms: the "
            "part of any HTTP turn's extra that is the HTTP server's, not the face's work"
        )
        console.print(
            f"reading TurnEnded from the log (as the face does) instead of a subscription: "
            f"+{log50 - nats50:.2f} ms"
        )
        console.print(
            f"the face's own CPU per waited POST: {cpu[RAW] - cpu[NATS]:.2f} ms (the HTTP "
            f"process's CPU on an HTTP turn less on a NATS turn, {cpu[NATS]:.2f} ms: the hub "
            "following the log)"
        )
        for name in (RAW, HTTPX):
            http50 = pct(measured[name], 0.5)
            console.print(
                f"[bold]POST ?wait=true[/] {name} text turn p50 {http50:.2f} ms vs NATS "
                f"{nats50:.2f} ms: +{http50 - nats50:.2f} ms (×{http50 / nats50:.2f}); "
                f"target: within 1.5 ms; vs NATS reading the log +{http50 - log50:.2f} ms"
            )
        s = await streams(bus, url, pid, args.streams)
        sessions = [stream.session for stream in s["streams"]]
        s["reconnect"] = await reconnect(url, lambda: restart_http(supervisor), sessions)
        n = args.streams
        table = Table("SSE, one HTTP process", "p50 ms", "p99 ms", "max ms")
        for label, key in [
            ("open→first event, one at a time", "alone"),
            (f"open→first event, {n} opened at once", "burst"),
            (f"floor: open→response, {n} GET /healthz at once", "plain"),
            (f"open→first event, one at a time with {n} open", "joined"),
            (f"live fan-out to {n} streams (append→arrival)", "fanout"),
            (
                f"open→first event, {n} open coming back after a restart (each after its `retry:`)",
                "reconnect",
            ),
        ]:
            v = s[key]
            table.add_row(label, f"{pct(v, 0.5):.1f}", f"{pct(v, 0.99):.1f}", f"{max(v):.1f}")
        console.print(table)
        console.print(
            f"HTTP process CPU per stream opened at once {s['burst_cpu_ms']:.2f} ms, per plain "
            f"request at once {s['plain_cpu_ms']:.2f} ms"
        )
        console.print(
            f"{n} streams opened in {s['burst_s']:.2f} s; HTTP process RSS "
            f"{s['rss_per_stream_kb']:.1f} KB per open stream; TS_LOG consumers (all clients) "
            f"{s['consumers_before']} → {s['consumers_open']}, the app's NATS subscriptions "
            f"{s['subs_before']} → {s['subs_open']} ({s['feeds']} hub feeds)"
        )
    finally:
        await bus.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--streams", type=int, default=500)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, EmbeddedServer(Path(tmp) / "nats") as server:
        root = Path(tmp)
        script = root / "script.yaml"
        script.write_text(SCRIPT)
        port = free_port()
        os.environ["TURNSTREAM_HTTP_ADDR"] = f"127.0.0.1:{port}"
        os.environ["TURNSTREAM_LOG_LEVEL"] = "WARNING"
        stack.workspace(root, "auto")
        with stack.running(server, root, script, console) as supervisor:
            console.print(f"[dim]{os.cpu_count()} cores[/]")
            asyncio.run(measure(server, f"http://127.0.0.1:{port}", supervisor, args))


if __name__ == "__main__":
    main()
