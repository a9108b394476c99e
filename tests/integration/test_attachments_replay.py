"""A session with attachments replays with the object store gone: the log holds references,
never bytes, so `turnstream replay` (and `replay_session`, what it and the HTTP face's
replay route use) rebuilds the same state without reading a single object. Its own
nats-server: the object store is deleted here."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import orjson
import pytest
from typer.testing import CliRunner

from tests.http.conftest import http_app
from tests.integration.conftest import bus, nats_server, running_services, settings_for
from tests.integration.test_attachments import CSV, PDF, PNG
from turnstream.bus import Bus
from turnstream.bus.embedded import EmbeddedServer
from turnstream.bus.objects import read_object
from turnstream.cli import app
from turnstream.client import (
    attachment,
    message_command,
    replay_session,
    send_and_wait,
    store_attachment,
)
from turnstream.core.session import state_to_json

__all__ = ["bus", "nats_server"]
pytestmark = pytest.mark.integration


async def test_a_replay_with_the_object_store_gone_rebuilds_the_session(
    nats_server: EmbeddedServer, bus: Bus, tmp_path: Path
) -> None:
    (tmp_path / "workspace").mkdir()
    pdf = await store_attachment(bus, "spec.pdf", "application/pdf", PDF)
    command = message_command("gone-store", "what is in these?") | {
        "attachments": [
            attachment("shot.png", "image/png", PNG),
            pdf,
            attachment("stock.csv", "text/csv", CSV),
        ]
    }
    async with running_services(settings_for(nats_server, tmp_path), bus):
        outcome = await send_and_wait(bus, command, timeout=20)
    assert outcome.status == "completed", outcome
    before = await replay_session(bus, "gone-store")
    assert await read_object(bus, "att/" + pdf["sha256"], attachment=True) == PDF

    for bucket in (bus.subjects.attachments_bucket, bus.subjects.blobs_bucket):
        await bus.js.delete_stream(f"OBJ_{bucket}")  # the stores are gone
    bus._attachments = bus._blobs = None  # the handles it had (a new process has none)
    with pytest.raises(Exception):  # noqa: B017 (any failure: the point is that it fails)
        await (await bus.attachments()).get_info("att/" + pdf["sha256"])

    after = await replay_session(bus, "gone-store")
    assert after.state == before.state
    assert [e.id for e in after.events] == [e.id for e in before.events]
    history = after.state.chat.history[0]
    assert [(a.name, a.size) for a in history.attachments] == [
        ("shot.png", len(PNG)),
        ("spec.pdf", len(PDF)),
        ("stock.csv", len(CSV)),
    ]
    # and the CLI, a process of its own that never opened the store
    result = await asyncio.to_thread(
        CliRunner().invoke,
        app,
        ["replay", "gone-store", "--json", "--nats-url", nats_server.url],
    )
    assert result.exit_code == 0, result.output
    assert orjson.loads(result.output) == orjson.loads(state_to_json(before.state))
    # a file sent now is refused as the store's, saying nothing was sent
    settings = settings_for(nats_server, tmp_path)
    async with http_app(settings) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
        r = await http.post(
            "/v1/sessions/gone-store/messages",
            data={"text": "another"},
            files={"files": ("dot.png", PNG, "image/png")},
        )
    assert r.status_code == 503, r.text
    assert "nothing was sent" in r.json()["detail"]
    assert [e.id for e in (await replay_session(bus, "gone-store")).events] == [
        e.id for e in before.events
    ]
