"""A TCP proxy between NATS clients and a real nats-server that can make NATS hiccup.

It reads the protocol both ways (`PUB`/`HPUB` from the client, `MSG`/`HMSG` from the
server) only to tell which of the server's messages answer which request, and forwards
everything else byte for byte. Faults, switched on and off while the clients run:

    drop_replies(*prefixes)   the replies to requests sent meanwhile on subjects starting
                              with one of `prefixes` (e.g. `$JS.API.CONSUMER.INFO.`) are
                              not passed on: the client's request times out
    delay_s                   everything the server sends reaches the client this late
    refusing                  new connections are closed at once (NATS away)
    cut()                     every connection is closed (a dropped connection)

The switches are plain attributes read by the proxy's own thread as traffic passes.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import deque

REQUEST_OPS = (b"PUB", b"HPUB")
MESSAGE_OPS = (b"MSG", b"HMSG")
KNOWN_REQUESTS = 100_000
"""Requests whose reply subject is remembered per connection (the oldest forgotten)."""


class Frames:
    """Splits a NATS protocol byte stream into whole operations: a control line, with its
    payload for the ops that carry one (the last number of the line is its size)."""

    def __init__(self, with_payload: tuple[bytes, ...]) -> None:
        self.buffer = bytearray()
        self.with_payload = with_payload

    def feed(self, data: bytes) -> list[tuple[bytes, list[bytes]]]:
        """The operations `data` completes: (its bytes, the words of its control line)."""
        self.buffer += data
        out = []
        while True:
            end = self.buffer.find(b"\r\n")
            if end < 0:
                return out
            words = bytes(self.buffer[:end]).split()
            size = end + 2
            if words and words[0].upper() in self.with_payload:
                size += int(words[-1]) + 2
            if len(self.buffer) < size:
                return out
            out.append((bytes(self.buffer[:size]), words))
            del self.buffer[:size]


class NatsProxy:
    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.dropping: tuple[str, ...] = ()
        self.delay_s = 0.0
        self.refusing = False
        self.dropped = 0
        """Replies not passed on so far."""
        self.refused = 0
        """Connections closed at once so far (`refusing`)."""
        self.server: asyncio.Server | None = None
        self.links: set[_Link] = set()
        self.loop = asyncio.new_event_loop()
        self.thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        host, port = self.server.sockets[0].getsockname()[:2]
        return f"nats://{host}:{port}"

    def start(self) -> NatsProxy:
        """Serve on a loopback port, on a thread of its own: a test that blocks its own
        loop (waiting for a process to exit) must not stall every service's NATS."""
        started = threading.Event()

        def serve() -> None:
            asyncio.set_event_loop(self.loop)
            self.server = self.loop.run_until_complete(
                asyncio.start_server(self._accept, "127.0.0.1", 0)
            )
            started.set()
            self.loop.run_forever()

        self.thread = threading.Thread(target=serve, name="nats-proxy", daemon=True)
        self.thread.start()
        started.wait(10)
        return self

    def drop_replies(self, *prefixes: str) -> None:
        """Drop the replies to requests on subjects with these prefixes (none: stop)."""
        self.dropping = prefixes

    def cut(self) -> None:
        """Close every connection now (the clients reconnect, unless `refusing`)."""
        done = threading.Event()

        def close_all() -> None:
            for link in list(self.links):
                link.close()
            done.set()

        self.loop.call_soon_threadsafe(close_all)
        done.wait(10)

    def stop(self) -> None:
        self.cut()

        async def closed() -> None:
            if self.server is not None:
                self.server.close()
                await self.server.wait_closed()

        asyncio.run_coroutine_threadsafe(closed(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.refusing:
            self.refused += 1
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.close()
            return
        link = _Link(self, writer, up_writer)
        self.links.add(link)
        try:
            await link.run(reader, up_reader)
        finally:
            self.links.discard(link)
            link.close()


class _Link:
    """One client's connection and the proxy's own to the server."""

    def __init__(
        self, proxy: NatsProxy, client: asyncio.StreamWriter, server: asyncio.StreamWriter
    ) -> None:
        self.proxy = proxy
        self.client, self.server = client, server
        self.doomed: set[bytes] = set()
        """The reply subjects of requests whose replies are dropped."""
        self.order: deque[bytes] = deque()
        self.outbox: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def run(self, client: asyncio.StreamReader, server: asyncio.StreamReader) -> None:
        pumps = [
            asyncio.ensure_future(self._from_client(client)),
            asyncio.ensure_future(self._from_server(server)),
            asyncio.ensure_future(self._to_client()),
        ]
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pump in pumps:
                pump.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)

    def close(self) -> None:
        for writer in (self.client, self.server):
            with contextlib.suppress(Exception):
                writer.close()

    async def _from_client(self, reader: asyncio.StreamReader) -> None:
        frames = Frames(REQUEST_OPS)
        while data := await reader.read(65536):
            for _frame, words in frames.feed(data):
                if words and words[0].upper() in REQUEST_OPS:
                    self._remember(words)
            self.server.write(data)
            await self.server.drain()

    def _remember(self, words: list[bytes]) -> None:
        """A request sent while its subject's replies are dropped: every reply to it is."""
        # PUB <subject> [reply] <size>, HPUB <subject> [reply] <header size> <size>
        counts = 2 if words[0].upper() == b"HPUB" else 1
        if len(words) < 3 + counts or not self.proxy.dropping:
            return  # no reply subject (not a request), or nothing dropped now
        if not words[1].decode().startswith(self.proxy.dropping):
            return
        self.doomed.add(words[2])
        self.order.append(words[2])
        if len(self.order) > KNOWN_REQUESTS:
            self.doomed.discard(self.order.popleft())

    async def _from_server(self, reader: asyncio.StreamReader) -> None:
        frames = Frames(MESSAGE_OPS)
        while data := await reader.read(65536):
            kept = bytearray()
            for frame, words in frames.feed(data):
                if words and words[0].upper() in MESSAGE_OPS and self._dropped(words[1]):
                    continue
                kept += frame
            if kept:
                due = asyncio.get_running_loop().time() + self.proxy.delay_s
                self.outbox.put_nowait((due, bytes(kept)))

    def _dropped(self, subject: bytes) -> bool:
        if subject in self.doomed:
            self.proxy.dropped += 1
            return True
        return False

    async def _to_client(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            due, data = await self.outbox.get()
            if (wait := due - loop.time()) > 0:
                await asyncio.sleep(wait)
            self.client.write(data)
            await self.client.drain()
