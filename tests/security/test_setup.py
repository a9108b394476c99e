"""No service can rewrite the log (issue 23 item 4): streams and buckets are created by the
operator's setup step; a service only checks they exist and refuses to start without them;
no service user may create, update, purge or delete a stream."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from tests.security.conftest import SecureServer, apply_as_operator, secure_server_in
from tests.security.test_identities import SUBJECTS, as_user, streams
from turnstream.bus import connect
from turnstream.bus.streams import StreamLimits, bucket_configs, checked_streams

pytestmark = pytest.mark.integration
TURNSTREAM = str(Path(sys.executable).parent / "turnstream")
__all__ = ["streams"]  # test_identities' fixture, used here too
SERVICES = ("gateway", "turn-runner", "approval", "tool-executor", "audit", "http")


@pytest.mark.parametrize("user", SERVICES)
async def test_no_service_may_update_purge_or_delete_a_stream(
    secure_server: SecureServer, streams: None, user: str
) -> None:
    operator = await as_user(secure_server, "operator")
    service = await as_user(secure_server, user)
    errors: list[str] = []
    try:
        before = await operator.js.stream_info("TS_LOG")
        assert before.config.max_msgs != 1
        wiped = dataclasses.replace(before.config, max_msgs=1)
        requests = {
            "$JS.API.STREAM.UPDATE.TS_LOG": orjson.dumps(wiped.as_dict()),
            "$JS.API.STREAM.PURGE.TS_LOG": b"{}",
            "$JS.API.STREAM.DELETE.TS_LOG": b"",
            "$JS.API.STREAM.CREATE.TS_EVIL": b'{"name": "TS_EVIL", "subjects": ["ts.log.>"]}',
        }
        for subject, body in requests.items():
            try:
                await service.nc.request(subject, body, timeout=0.5)
            except Exception as exc:  # refused: no answer (the server drops it)
                errors.append(type(exc).__name__)
            else:
                errors.append(f"answered {subject}")
            assert service.refusals.denied("publish", subject) is not None, subject
        after = await operator.js.stream_info("TS_LOG")
        assert after.config.max_msgs == before.config.max_msgs
        assert after.state.messages == before.state.messages
    finally:
        await service.close()
        await operator.close()
    assert not [e for e in errors if e.startswith("answered")], errors


async def test_the_setup_step_is_the_operators(secure_server: SecureServer) -> None:
    """`turnstream streams apply` as operator creates every stream and bucket."""
    await apply_as_operator(secure_server)
    operator = await as_user(secure_server, "operator")
    try:
        names = [*checked_streams(SUBJECTS)]
        names += [f"KV_{c.bucket}" for c in bucket_configs(SUBJECTS, StreamLimits())]
        for name in names:
            await operator.js.stream_info(name)
    finally:
        await operator.close()


def run_as(
    server: SecureServer, user: str, tmp: Path, *command: str
) -> subprocess.CompletedProcess[str]:
    """`command` as NATS user `user`, until it exits."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNSTREAM_")}
    env.update(
        TURNSTREAM_NATS_URL=f"nats://127.0.0.1:{server.port}",
        TURNSTREAM_NATS_USER=user,
        TURNSTREAM_NATS_PASSWORD=server.passwords[user],
        TURNSTREAM_DATA_DIR=str(tmp / "data"),
        TURNSTREAM_WORKSPACE=str(tmp / "workspace"),
        TURNSTREAM_CONFIG=str(tmp / "absent.yaml"),
    )
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)


def start_as(server: SecureServer, service: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    """`python -m turnstream.<service>` as its own user, until it exits."""
    return run_as(
        server, service.replace("_", "-"), tmp, sys.executable, "-m", f"turnstream.{service}"
    )


def test_a_service_refuses_to_start_before_the_setup_step(tmp_path: Path) -> None:
    with secure_server_in(tmp_path) as server:
        started = start_as(server, "approval", tmp_path)
        assert started.returncode == 2, started.stderr
        assert "TS_INBOUND" in started.stderr and "turnstream streams apply" in started.stderr
        # and nothing was created by its attempt
        assert asyncio.run(_streams_of(server)) == []

        def apply_as(user: str) -> subprocess.CompletedProcess[str]:
            return run_as(server, user, tmp_path, TURNSTREAM, "streams", "apply")

        refused = apply_as("gateway")
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert "NATS user 'gateway' may not publish to $JS.API.STREAM." in refused.stderr
        assert "setup operator (`operator`)" in refused.stderr  # the role that may
        assert "permissions violation" not in refused.stderr.lower()  # said once, in words
        assert asyncio.run(_streams_of(server)) == []
        applied = apply_as("operator")
        assert applied.returncode == 0, applied.stdout + applied.stderr
        names = [*checked_streams(SUBJECTS)]
        names += [f"KV_{c.bucket}" for c in bucket_configs(SUBJECTS, StreamLimits())]
        assert sorted(asyncio.run(_streams_of(server))) == sorted(set(names))


@pytest.mark.parametrize("user", ["tool-executor", "audit"])
def test_a_service_refuses_to_start_without_its_durable(tmp_path: Path, user: str) -> None:
    """The setup step makes the durables; a service binds to its own and never makes one:
    without it (here deleted by the operator) it stops at once, naming the step. The
    audit too, whose partition's worker binds it (not a partition handed over for ever)."""
    with secure_server_in(tmp_path) as server:

        async def setup_without_the_durable() -> None:
            await apply_as_operator(server)
            operator = await connect(server.url("operator"), SUBJECTS)
            await operator.js.delete_consumer("TS_LOG", user)
            await operator.close()

        asyncio.run(setup_without_the_durable())
        started = start_as(server, user.replace("-", "_"), tmp_path)
        assert started.returncode == 2, started.stderr
        assert f"consumer {user} on TS_LOG missing" in started.stderr
        assert "turnstream streams apply" in started.stderr
        assert "Traceback" not in started.stderr


async def _streams_of(server: SecureServer) -> list[str]:
    operator = await connect(server.url("operator"), SUBJECTS)
    try:
        return [info.config.name for info in await operator.js.streams_info()]
    finally:
        await operator.close()
