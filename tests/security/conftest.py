"""A real nats-server loaded with the shipped `ops/accounts.conf` (included by path, not
copied): only the listen port, the store directory and the passwords (environment
variables the file names) are supplied by the test."""

from __future__ import annotations

import os
import secrets
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from turnstream.bus.embedded import free_port, server_binary
from turnstream.cli.secure import OTHER_USERS, password_variable
from turnstream.cli.secure import USERS as SERVICE_USERS

pytestmark = pytest.mark.integration

ROOT = Path(__file__).parents[2]
ACCOUNTS = ROOT / "ops" / "accounts.conf"
USERS = (*SERVICE_USERS.values(), *OTHER_USERS)
"""Every user of ops/accounts.conf."""


@dataclass
class SecureServer:
    port: int
    passwords: dict[str, str]
    log: Path
    process: subprocess.Popen[bytes]

    def url(self, user: str, password: str | None = None) -> str:
        return f"nats://{user}:{password or self.passwords[user]}@127.0.0.1:{self.port}"


@pytest.fixture(scope="module")
def secure_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureServer]:
    store = tmp_path_factory.mktemp("nats-secure")
    port = free_port()
    config = store / "server.conf"
    config.write_text(
        f'listen: "127.0.0.1:{port}"\n'
        f'jetstream {{ store_dir: "{store / "js"}", sync_interval: always }}\n'
        "max_payload: 8MB\n"
        # nats-server resolves an include relative to the including file
        f'include "{os.path.relpath(ACCOUNTS, store)}"\n'
    )
    # nats-server parses an environment value as a config value: letters and digits only
    passwords = {user: "pw" + secrets.token_hex(16) for user in USERS}
    env = {**os.environ, **{password_variable(u): p for u, p in passwords.items()}}
    log = store / "server.log"
    with open(log, "ab") as out:
        process = subprocess.Popen(
            [server_binary(), "-c", str(config)], stdout=out, stderr=out, env=env
        )
    server = SecureServer(port, passwords, log, process)
    try:
        deadline = time.monotonic() + 10
        while "Server is ready" not in log.read_text():
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"nats-server did not start:\n{log.read_text()}")
            time.sleep(0.05)
        yield server
    finally:
        process.terminate()
        process.wait(timeout=10)
