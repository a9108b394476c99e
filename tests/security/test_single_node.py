"""`ops/nats-single.conf` as shipped (issue 23 item 5): it includes ops/accounts.conf, so an
anonymous client is refused and a user of the file connects; its monitoring port is on
loopback. The test changes only what a deployment provides: the ports and the store."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from turnstream.bus import connect
from turnstream.bus.embedded import free_port, port_is_free, server_binary
from turnstream.cli import secure
from turnstream.core.subjects import Subjects

pytestmark = pytest.mark.integration
SHIPPED = secure.ACCOUNTS.parent / "nats-single.conf"


async def test_the_single_node_config_requires_a_user(tmp_path: Path) -> None:
    shipped = SHIPPED.read_text()
    assert 'http: "127.0.0.1:8222"' in shipped and "include ./accounts.conf" in shipped
    port = free_port()
    config = tmp_path / "nats-single.conf"
    config.write_text(
        shipped.replace('"0.0.0.0:4222"', f'"127.0.0.1:{port}"')
        .replace('"127.0.0.1:8222"', f'"127.0.0.1:{free_port()}"')
        .replace('"/data/jetstream"', f'"{tmp_path / "js"}"')
    )
    (tmp_path / "accounts.conf").symlink_to(secure.ACCOUNTS)  # the shipped one
    passwords = secure.dev_secrets(tmp_path / "secrets.env")
    env = {secure.password_variable(user): pw for user, pw in passwords.items()}
    server = await asyncio.create_subprocess_exec(
        server_binary(), "-c", str(config), env=env, stderr=asyncio.subprocess.DEVNULL
    )
    try:
        for _ in range(200):  # until it listens (10 s)
            if not port_is_free(port):
                break
            await asyncio.sleep(0.05)
        subjects = Subjects("ts")
        with pytest.raises(ConnectionError) as refused:
            await connect(f"nats://127.0.0.1:{port}", subjects, connect_timeout=5)
        assert "authoriz" in str(refused.value).lower(), refused.value
        url = f"nats://client:{passwords['client']}@127.0.0.1:{port}"
        bus = await connect(url, subjects, connect_timeout=5)
        await bus.close()
    finally:
        server.terminate()
        await server.wait()
