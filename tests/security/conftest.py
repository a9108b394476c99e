"""A real nats-server loaded with the shipped `ops/accounts.conf` (included by path, not
copied), started as `turnstream up --secure` starts it (`turnstream.cli.secure`), with
fsync always: only the listen port, the store directory and the generated passwords
(environment variables the file names) are supplied by the test."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from turnstream.bus import connect
from turnstream.bus.streams import StreamLimits
from turnstream.cli import secure
from turnstream.core.subjects import Subjects

pytestmark = pytest.mark.integration


@dataclass
class SecureServer:
    port: int
    passwords: dict[str, str]
    """Every user of ops/accounts.conf: its password."""

    def url(self, user: str, password: str | None = None) -> str:
        return f"nats://{user}:{password or self.passwords[user]}@127.0.0.1:{self.port}"


@contextmanager
def secure_server_in(
    store: Path, accounts: Path = secure.ACCOUNTS, subjects: Subjects | None = None
) -> Iterator[SecureServer]:
    """A server loading `accounts` (the shipped file unless a test changes a right); for
    a partitioned log (`subjects.log_partitions` > 1), that file derived for it
    (`turnstream streams mapping --accounts`: the mappings, the rights per partition)."""
    passwords = secure.dev_secrets(store / "secrets.env")
    server = secure.SecureServer(store / "js", None, passwords, accounts, subjects)
    server.sync_always = True
    with server:
        yield SecureServer(server.port, passwords)


@pytest.fixture(scope="module")
def secure_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureServer]:
    with secure_server_in(tmp_path_factory.mktemp("nats-secure")) as server:
        yield server


async def apply_as_operator(server: SecureServer, subjects: Subjects | None = None) -> None:
    """The setup step (`turnstream streams apply`) as the operator: streams and buckets."""
    bus = await connect(server.url("operator"), subjects or Subjects("ts"), ensure=StreamLimits())
    await bus.close()
