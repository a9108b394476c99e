"""`channels.files.attach` over the real object store, with an in-test platform: files go
inline while they fit the inline budget together, the rest into the store by hash; a file
found over the limit only once fetched, or one the platform will not give, is refused with
why; a network failure is raised (the platform delivers the message again)."""

from __future__ import annotations

import hashlib

import pytest

from tests.integration.conftest import bus, log_partitions, nats_server
from turnstream.bus import Bus
from turnstream.bus.objects import read_attachment
from turnstream.channels import files
from turnstream.channels.platform import File, PlatformError, TooLarge
from turnstream.core.commands import AttachmentPolicy

__all__ = ["bus", "log_partitions", "nats_server"]
pytestmark = pytest.mark.integration
POLICY = AttachmentPolicy(max_bytes=300_000)


class Files:
    name = "fake"

    def __init__(self, stored: dict[str, bytes | Exception]) -> None:
        self.stored = stored

    async def download(self, file: File, max_bytes: int) -> bytes:
        found = self.stored[file.ref]
        if isinstance(found, Exception):
            raise found
        return found


def pdf(name: str, size: int | None = None) -> File:
    return File(name, "application/pdf", size, name)


async def test_inline_while_they_fit_together_then_stored_by_hash(bus: Bus) -> None:
    a, b = b"%PDF-a" * 15_000, b"%PDF-b" * 15_000  # 90 KB each: together over 128 KiB
    platform = Files({"a.pdf": a, "b.pdf": b})
    got = await files.attach(platform, bus, (pdf("a.pdf"), pdf("b.pdf")), POLICY)  # type: ignore[arg-type]
    assert "data" in got[0] and "data" not in got[1]
    assert got[1]["sha256"] == hashlib.sha256(b).hexdigest()
    assert await read_attachment(bus, got[1]["sha256"]) == b


@pytest.mark.parametrize(
    ("found", "why"),
    [
        (b"x" * 300_001, "300001 bytes is over the limit of 300000"),
        (TooLarge(9_000_000), "9000000 bytes is over the limit"),
        (PlatformError("getFile", "BadRequest", "File is too big"), "would not give it"),
    ],
)
async def test_a_file_over_the_limit_or_not_given_is_refused_with_why(
    bus: Bus, found: bytes | Exception, why: str
) -> None:
    platform = Files({"big.pdf": found})
    with pytest.raises(files.Refused, match=why) as refused:
        await files.attach(platform, bus, (pdf("big.pdf"),), POLICY)  # type: ignore[arg-type]
    assert "big.pdf" in str(refused.value) and "Nothing was sent" in str(refused.value)


async def test_a_network_failure_is_raised_so_the_message_comes_again(bus: Bus) -> None:
    platform = Files({"a.pdf": PlatformError("getFile", "NetworkError", transient=True)})
    with pytest.raises(PlatformError):
        await files.attach(platform, bus, (pdf("a.pdf"),), POLICY)  # type: ignore[arg-type]
