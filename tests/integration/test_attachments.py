"""Files in a turn, end to end: a message carries an image inline and a PDF already put
into the object store; the gateway checks each against its bytes, stores the inline one and
records references only; the runner hands the bytes to the model through the official SDK,
as an image block and a document block (checked in the body the fake server received), and
a CSV the model cannot read as a note naming it. Every refusal names the attachment and
why; a replay rebuilds the session from references alone."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.integration.conftest import (
    anthropic_settings,
    events_of,
    only,
    running_services,
    settings_for,
)
from tests.providers.fake_servers import FakeAnthropic, FakeOpenAI, Text
from turnstream.bus import Bus
from turnstream.bus.embedded import EmbeddedServer
from turnstream.client import (
    attachment,
    message_command,
    publish_command,
    send_and_wait,
    store_attachment,
)
from turnstream.core.events import InputAccepted, InputRejected
from turnstream.core.session import SessionState, fold

pytestmark = pytest.mark.integration
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)
PDF = b"%PDF-1.4\n1 0 obj<<>>endobj\ntrailer<<>>\n%%EOF\n" * 40
CSV = b"sku,qty\nA-1,12\nB-2,0\n"


async def test_an_image_and_a_pdf_reach_the_model_as_blocks_and_a_csv_as_a_note(
    nats_server: EmbeddedServer, bus: Bus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "workspace").mkdir()
    monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
    pdf = await store_attachment(bus, "spec.pdf", "application/pdf", PDF)  # by reference
    command = message_command("files", "what is in these?") | {
        "attachments": [
            attachment("shot.png", "image/png", PNG),
            pdf,
            attachment("stock.csv", "text/csv", CSV),
        ]
    }
    async with FakeAnthropic([Text("a red dot, a spec and a table")]) as fake:
        settings = anthropic_settings(nats_server, tmp_path, fake.base_url)
        async with running_services(settings, bus):
            outcome = await send_and_wait(bus, command, timeout=20)
    assert outcome.status == "completed", outcome
    (message,) = fake.requests[0].body["messages"]
    text, image, document, note = message["content"]
    assert text == {"type": "text", "text": "what is in these?"}
    assert image["type"] == "image" and image["source"]["media_type"] == "image/png"
    assert base64.b64decode(image["source"]["data"]) == PNG
    assert document["type"] == "document"
    assert base64.b64decode(document["source"]["data"]) == PDF
    assert note["type"] == "text" and "'stock.csv': text/csv, 21 bytes" in note["text"]
    # the log holds what was received, never the bytes; the inline one is in the store now
    events = await events_of(bus, "files")
    (accepted,) = only(events, InputAccepted)
    names = [(a.name, a.object) for a in accepted.data.attachments or []]
    assert names == [
        ("shot.png", "att/" + hashlib.sha256(PNG).hexdigest()),
        ("spec.pdf", "att/" + hashlib.sha256(PDF).hexdigest()),
        ("stock.csv", "att/" + hashlib.sha256(CSV).hexdigest()),
    ]
    raw = b"".join(orjson.dumps(e.model_dump(mode="json", by_alias=True)) for e in events)
    assert base64.b64encode(PNG) not in raw and b"sku,qty" not in raw
    store = await bus.attachments()  # their own bucket, never the services' ts_blobs
    assert (await store.get("att/" + hashlib.sha256(PNG).hexdigest())).data == PNG
    # a replay rebuilds the history from references alone (no object store, no provider)
    replayed = fold(SessionState.of("files"), events)
    assert [a.name for a in replayed.chat.history[0].attachments] == [n for n, _ in names]


async def test_openai_gets_an_image_url_and_a_file_part(
    nats_server: EmbeddedServer, bus: Bus, tmp_path: Path
) -> None:
    (tmp_path / "workspace").mkdir()
    command = message_command("files-oa", "look") | {
        "attachments": [
            attachment("shot.png", "image/png", PNG),
            attachment("a.pdf", "application/pdf", PDF),
        ]
    }
    async with FakeOpenAI([Text("seen")]) as fake:
        settings = settings_for(
            nats_server,
            tmp_path,
            provider="openai",
            model="gpt-fake",
            base_url=fake.base_url + "/v1",
        )
        async with running_services(settings, bus):
            outcome = await send_and_wait(bus, command, timeout=20)
    assert outcome.status == "completed", outcome
    user = fake.requests[0].body["messages"][-1]
    _, image, file = user["content"]
    assert image["image_url"]["url"] == "data:image/png;base64," + base64.b64encode(PNG).decode()
    assert file["type"] == "file" and file["file"]["filename"] == "a.pdf"


def _bad(item: dict[str, Any], **change: Any) -> dict[str, Any]:
    return item | change


@pytest.mark.parametrize(
    ("item", "why"),
    [
        (
            _bad(attachment("x.exe", "application/x-msdownload", b"MZ")),
            "media type application/x-msdownload is not taken",
        ),
        (
            _bad(attachment("a.png", "image/png", PNG), sha256="0" * 64),
            "SHA-256 of data does not match",
        ),
        (_bad(attachment("a.png", "image/png", PNG), size=3), "size says 3"),
        (_bad(attachment("a.png", "image/png", PNG), data="%%%"), "not valid base64"),
        (
            attachment("gone.pdf", "application/pdf", b"never stored", inline=False),
            "no object att/",
        ),
        (_bad(attachment("big.png", "image/png", PNG), size=30 * 1024 * 1024), "over the limit"),
    ],
)
async def test_a_refused_attachment_is_named_with_its_reason_and_nothing_is_lost(
    nats_server: EmbeddedServer, bus: Bus, tmp_path: Path, item: dict[str, Any], why: str
) -> None:
    (tmp_path / "workspace").mkdir(exist_ok=True)
    session = "refused-" + hashlib.sha256(orjson.dumps(item)).hexdigest()[:8]
    command = message_command(session, "see this") | {"attachments": [item]}
    async with running_services(settings_for(nats_server, tmp_path), bus):
        seq = await publish_command(bus, session, command)
        from tests.integration.conftest import wait_for

        events = await wait_for(bus, session, lambda es: only(es, InputRejected))
    (rejected,) = only(events, InputRejected)
    assert rejected.data.kind == "attachment" and why in rejected.data.reason, rejected.data.reason
    assert rejected.data.inbound_seq == seq  # the raw command stays: nothing is lost
    assert not only(events, InputAccepted)


async def test_the_model_reads_a_csv_with_read_attachment_and_only_its_sessions(
    nats_server: EmbeddedServer, bus: Bus, tmp_path: Path
) -> None:
    from tests.integration.test_tools_path import script
    from turnstream.core.events import ToolInvocationFailed, ToolInvocationSucceeded

    (tmp_path / "workspace").mkdir()
    replies = script(
        tmp_path,
        "{tool_calls: [{name: read_attachment, arguments: {name: stock.csv}}]}",
        '{text: "read: {last_tool_result}"}',
    )
    settings = settings_for(nats_server, tmp_path, script=replies)
    command = message_command("csv-1", "how many A-1?") | {
        "attachments": [attachment("stock.csv", "text/csv", CSV)]
    }
    async with running_services(settings, bus):
        outcome = await send_and_wait(bus, command, timeout=20)
        assert outcome.status == "completed", outcome
        assert outcome.reply == "read: " + CSV.decode()
        # another session names the same file: it was not sent there, so it is not found
        other = await send_and_wait(bus, message_command("csv-2", "and here?"), timeout=20)
    assert other.status == "completed"
    (done,) = only(await events_of(bus, "csv-1"), ToolInvocationSucceeded)
    (refused,) = only(await events_of(bus, "csv-2"), ToolInvocationFailed)
    assert refused.data.error.kind == "not_found" and done.data.invocation_id
