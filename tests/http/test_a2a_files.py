"""A2A file and data parts as attachments, with the SDK's client against the real app,
services and nats-server: a PDF's bytes, an image at a URI and a data part reach the model
through the official SDK (checked in the body the fake server received); a URI is fetched
only from the allowed hosts, and one that is or resolves to a private address is refused at
connect (the file server never hears of it)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from a2a.types.a2a_pb2 import Part, TaskState

from tests.http.conftest import http_app
from tests.http.test_a2a import ERRORS, a2a, message, send
from tests.integration.conftest import (
    anthropic_settings,
    bus,
    events_of,
    nats_server,
    only,
    running_services,
    settings_for,
)
from tests.integration.test_attachments import PDF, PNG
from tests.providers.fake_servers import FakeAnthropic, Text
from turnstream.bus import Bus
from turnstream.bus.embedded import EmbeddedServer
from turnstream.core.events import InputAccepted

__all__ = ["bus", "nats_server"]
pytestmark = pytest.mark.integration


class FileServer:
    """One file over HTTP on loopback; counts the requests it was sent."""

    def __init__(self, data: bytes, media_type: str) -> None:
        self.data = data
        self.media_type = media_type
        self.requests = 0
        self.port = 0

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.requests += 1
        await reader.readuntil(b"\r\n\r\n")
        head = (
            f"HTTP/1.1 200 OK\r\nContent-Type: {self.media_type}\r\n"
            f"Content-Length: {len(self.data)}\r\nConnection: close\r\n\r\n"
        )
        writer.write(head.encode() + self.data)
        await writer.drain()
        writer.close()

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[FileServer]:
        server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        async with server:
            yield self


@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    (tmp_path / "workspace").mkdir()
    return tmp_path


async def test_a_pdf_an_image_at_a_uri_and_a_data_part_reach_the_model(
    nats_server: EmbeddedServer, bus: Bus, tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
    msg = message("what are these?", context="a2a-files")
    msg.parts.append(Part(raw=PDF, media_type="application/pdf", filename="spec.pdf"))
    async with (
        FileServer(PNG, "image/png").running() as files,
        FakeAnthropic([Text("a spec and a dot")]) as fake,
    ):
        msg.parts.append(Part(url=f"http://127.0.0.1:{files.port}/shots/dot.png"))
        msg.parts.append(Part(data=_struct({"sku": "A-1"})))
        settings = anthropic_settings(
            nats_server,
            tmp,
            fake.base_url,
            a2a_file_hosts=["127.0.0.1"],
            a2a_file_allow_private=True,  # the file server is on loopback, in this test
        )
        async with running_services(settings, bus), http_app(settings) as url, a2a(url) as client:
            task = await send(client, msg)
    assert task.status.state == TaskState.TASK_STATE_COMPLETED, task
    (sent,) = fake.requests[0].body["messages"]
    text, document, image, note = sent["content"]
    assert text == {"type": "text", "text": "what are these?"}
    assert document["type"] == "document"
    assert base64.b64decode(document["source"]["data"]) == PDF
    assert image["type"] == "image" and base64.b64decode(image["source"]["data"]) == PNG
    assert note["type"] == "text" and "'data-2.json': application/json" in note["text"]
    (accepted,) = only(await events_of(bus, "a2a-files"), InputAccepted)
    assert [a.name for a in accepted.data.attachments or []] == [
        "spec.pdf",
        "dot.png",
        "data-2.json",
    ]
    # the task keeps the message without the PDF's bytes
    assert all(not p.raw for p in task.history[0].parts)


@pytest.mark.parametrize(
    ("host", "why"),
    [
        ("127.0.0.1", "refused: 127.0.0.1 resolves to 127.0.0.1, not a public address"),
        ("localhost", "refused: localhost resolves to"),  # a name resolving to loopback
        ("files.example.com", "not a host files are fetched from (TURNSTREAM_A2A_FILE_HOSTS"),
    ],
)
async def test_a_file_uri_to_a_private_peer_is_refused_at_connect(
    nats_server: EmbeddedServer, bus: Bus, tmp: Path, host: str, why: str
) -> None:
    async with FileServer(PNG, "image/png").running() as files:
        settings = settings_for(nats_server, tmp, a2a_file_hosts=["127.0.0.1", "localhost"])
        msg = message("see", context=f"a2a-ssrf-{host.replace('.', '-')}")
        msg.parts.append(Part(url=f"http://{host}:{files.port}/dot.png"))
        async with running_services(settings, bus), http_app(settings) as url, a2a(url) as client:
            with pytest.raises(ERRORS, match=r"not fetched|not a host") as raised:
                await send(client, msg)
    assert why in str(raised.value), raised.value
    assert files.requests == 0  # never connected to
    assert await events_of(bus, msg.context_id) == []  # nothing was sent


def _struct(data: dict[str, str]) -> object:
    from google.protobuf.struct_pb2 import Value

    value = Value()
    value.struct_value.update(data)
    return value
