"""Files and images sent to the Telegram channel become the turn's attachments (issue 38's
chat door): a photo (its largest size) and a document are fetched the way Telegram serves
them (`getFile`, then the file path), a small one goes inline, a larger one into the object
store by hash; the model gets them as blocks (checked in the body the fake Anthropic API
received). A type or a size that is not taken is a reply naming why, never a turn."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import pytest

from tests.channels.conftest import channel_process, wait_polling
from tests.channels.fake_telegram import FakeTelegram, Posted
from tests.integration.conftest import anthropic_settings, events_of, running_services
from tests.integration.test_attachments import PDF, PNG
from tests.polling import eventually
from tests.providers.fake_servers import FakeAnthropic, Text
from turnstream.bus import Bus
from turnstream.bus.embedded import EmbeddedServer
from turnstream.bus.objects import read_object
from turnstream.core.events import InputAccepted

pytestmark = pytest.mark.integration
BIG_PDF = PDF * 110  # ~200 KB: over the inline bound, put into the object store


async def test_a_photo_and_a_document_reach_the_model_and_a_refused_file_is_told_why(
    nats_server: EmbeddedServer,
    bus: Bus,
    fake: FakeTelegram,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (tmp_path / "workspace").mkdir()
    monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
    async with FakeAnthropic([Text("a red dot"), Text("a spec")]) as model:
        settings = anthropic_settings(nats_server, tmp_path, model.base_url)
        async with running_services(settings):
            with channel_process(
                nats_server,
                fake,
                tmp_path,
                TURNSTREAM_TELEGRAM__DM_POLICY="open",
                TURNSTREAM_ATTACHMENT_MAX_BYTES="300000",
            ):
                await wait_polling(fake)
                await fake.send_file(PNG * 8, caption="what is this?")
                await eventually(lambda: [m for m in fake.sent(42) if m.text == "a red dot"])
                await fake.send_file(BIG_PDF, document=("spec.pdf", "application/pdf"))
                await eventually(lambda: [m for m in fake.sent(42) if m.text == "a spec"])
                await fake.send_file(b"MZ", document=("tool.exe", "application/x-msdownload"))
                await fake.send_file(PDF * 200, document=("huge.pdf", "application/pdf"))
                refusals = await eventually(lambda: len(refused(fake)) == 2 and refused(fake))
    first, second = model.requests[0].body, model.requests[1].body
    text, image = first["messages"][0]["content"]
    assert text == {"type": "text", "text": "what is this?"}
    assert image["type"] == "image" and image["source"]["media_type"] == "image/jpeg"
    assert base64.b64decode(image["source"]["data"]) == PNG * 8
    document = second["messages"][-1]["content"][-1]
    assert document["type"] == "document"
    assert base64.b64decode(document["source"]["data"]) == BIG_PDF
    # the largest photo size was fetched, not the thumbnail; the PDF is in the store by hash
    events = await events_of(bus, "telegram-42")
    accepted = [e for e in events if isinstance(e, InputAccepted)]
    assert len(accepted) == 2, "the refused files started no turn"
    (photo,) = accepted[0].data.attachments or []
    assert photo.sha256 == hashlib.sha256(PNG * 8).hexdigest() and photo.size == len(PNG) * 8
    (pdf,) = accepted[1].data.attachments or []
    assert accepted[1].data.text == "[spec.pdf]"
    assert await read_object(bus, pdf.object, attachment=True) == BIG_PDF
    exe, huge = refusals
    assert "tool.exe" in exe.text and "application/x-msdownload is not taken" in exe.text
    assert "huge.pdf" in huge.text and "over the limit of 300000" in huge.text
    assert len(fake.downloads) == 2, "the largest photo and the PDF; nothing refused was fetched"


def refused(fake: FakeTelegram) -> list[Posted]:
    return [m for m in fake.sent(42) if "can't take" in m.text]
