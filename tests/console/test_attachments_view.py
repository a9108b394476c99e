"""A message's attachments on the console's timeline: an image as a thumbnail (its bytes
fetched with the key), every file as a link that downloads it with its name and bytes."""

from __future__ import annotations

import re
import struct
import zlib
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.console.conftest import playwright, script
from tests.integration.conftest import settings_for
from tests.integration.test_attachments import CSV
from turnstream.bus.embedded import EmbeddedServer
from turnstream.settings import Settings

pytestmark = pytest.mark.integration
expect = playwright.expect if playwright else None


def png(width: int, height: int) -> bytes:
    """An RGB PNG of a diagonal gradient (a thumbnail a person can tell from a blank)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    rows = b"".join(
        b"\0" + b"".join(bytes((x * 4 % 256, y * 5 % 256, 160)) for x in range(width))
        for y in range(height)
    )
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


IMAGE = png(64, 48)


@pytest.fixture(scope="module")
def settings(nats_server: EmbeddedServer, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    tmp = tmp_path_factory.mktemp("console-files")
    (tmp / "script.yaml").write_text(script([{"text": "a gradient and a stock table"}]))
    (tmp / "workspace").mkdir()
    return settings_for(nats_server, tmp, script=tmp / "script.yaml")


async def test_an_image_shows_as_a_thumbnail_and_files_download(
    page: Any, http: httpx.AsyncClient, artifacts: Path, tmp_path: Path
) -> None:
    sent = await http.post(
        "/v1/sessions/files-1/messages?wait=true",
        data={"text": "what do you make of these?"},
        files=[
            ("files", ("gradient.png", IMAGE, "image/png")),
            ("files", ("stock.csv", CSV, "text/csv")),
        ],
    )
    assert sent.status_code == 200, sent.text
    await page.goto("/#/s/files-1")
    files = page.locator(".msg.user .files .file")
    await expect(files).to_have_count(2)
    thumb = files.nth(0).locator("img.thumb")
    await expect(thumb).to_have_attribute("src", re.compile(r"^blob:"))
    assert await thumb.evaluate("img => img.complete && img.naturalWidth") == 64
    await expect(files.nth(1).locator("figcaption")).to_contain_text("text/csv · 21 B")
    await page.screenshot(path=artifacts / "timeline-attachments.png", full_page=True)
    async with page.expect_download() as waiting:
        await files.nth(1).locator("a[data-download]").click()
    download = await waiting.value
    assert download.suggested_filename == "stock.csv"
    saved = tmp_path / "stock.csv"
    await download.save_as(saved)
    assert saved.read_bytes() == CSV
