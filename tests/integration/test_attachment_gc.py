"""Attachments follow the log's retention: `turnstream archive` keeps a session's
attachments (its archive names them), and `turnstream attachments prune` deletes those no
event names any more (events the log dropped, files stored for a message never sent),
after a grace period for a message on its way."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.integration.conftest import bus, nats_server, running_services, settings_for
from tests.integration.test_attachments import CSV, PDF, PNG
from turnstream.bus import Bus
from turnstream.bus.archive import archive_sessions
from turnstream.bus.attachment_gc import prune_attachments
from turnstream.bus.embedded import EmbeddedServer
from turnstream.bus.objects import Upload, object_info, read_object
from turnstream.bus.scan import subject_counts
from turnstream.cli import app
from turnstream.client import attachment, message_command, send_and_wait, store_attachment

__all__ = ["bus", "nats_server"]
pytestmark = pytest.mark.integration


async def test_archived_sessions_keep_their_attachments_and_unnamed_ones_go(
    nats_server: EmbeddedServer, bus: Bus, tmp_path: Path
) -> None:
    (tmp_path / "workspace").mkdir()
    kept = message_command("gc-archived", "see") | {
        "attachments": [attachment("dot.png", "image/png", PNG)]
    }
    dropped = message_command("gc-dropped", "see") | {
        "attachments": [attachment("stock.csv", "text/csv", CSV)]
    }
    async with running_services(settings_for(nats_server, tmp_path), bus):
        for command in (kept, dropped):
            assert (await send_and_wait(bus, command, timeout=20)).completed
    never_sent = await store_attachment(bus, "spec.pdf", "application/pdf", PDF)
    abandoned = Upload(bus)  # a client gone mid-file: chunks, no meta record
    await abandoned.write(PDF * 100)
    chunks = f"$O.{bus.subjects.attachments_bucket}.C.{abandoned.nuid}"
    names = {
        k: "att/" + c["attachments"][0]["sha256"] for k, c in [("png", kept), ("csv", dropped)]
    }
    names["pdf"] = "att/" + never_sent["sha256"]

    later = datetime.now(UTC) + timedelta(minutes=1)
    archived = await archive_sessions(bus, later)  # every ended session goes to the archive
    assert {a.session_id for a in archived} == {"gc-archived", "gc-dropped"}
    # the log's retention: one session's archive and events gone for good
    store = await bus.blobs()
    await store.delete("archive/gc-dropped.jsonl")

    assert await prune_attachments(bus, datetime.now(UTC) - timedelta(days=1)) == []  # grace
    listed = await prune_attachments(bus, later, dry_run=True)
    assert sorted(u.name for u in listed) == sorted([names["csv"], names["pdf"], chunks])
    assert all([await object_info(bus, n, attachment=True) for n in names.values()])  # dry run

    result = await asyncio.to_thread(
        CliRunner().invoke,
        app,
        ["attachments", "prune", "--older-than-days", "0", "--nats-url", nats_server.url],
    )
    assert result.exit_code == 0, result.output
    assert "deleted 3 attachment(s)" in result.output
    assert await read_object(bus, names["png"], attachment=True) == PNG  # named by its archive
    stream = f"OBJ_{bus.subjects.attachments_bucket}"
    assert await subject_counts(bus.nc, stream, chunks) == {}
    assert await object_info(bus, names["csv"], attachment=True) is None
    assert await object_info(bus, names["pdf"], attachment=True) is None
