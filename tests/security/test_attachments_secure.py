"""Attachments under the shipped `ops/accounts.conf`, every service as its own user: a
tenant's inline image is stored by the gateway and its turn runs; the tenant
itself may not write into the object store (where tool results and archives live), so a
sender can neither plant bytes under an attachment's name nor overwrite another object."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import httpx
import pytest

from tests.http.conftest import http_app
from tests.integration.test_attachments import PNG
from tests.security.conftest import SecureServer, apply_as_operator
from tests.security.test_identities import (
    SUBJECTS,
    as_user,
    services_as_themselves,
    settings,
)
from turnstream.bus.objects import put_new_attachment, read_attachment, read_object
from turnstream.client import attachment, message_command, send_and_wait

pytestmark = pytest.mark.integration


@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    (tmp_path / "workspace").mkdir()
    return tmp_path


async def test_a_tenants_inline_image_is_stored_by_the_gateway_and_the_tenant_writes_no_object(
    secure_server: SecureServer, tmp: Path
) -> None:
    async with services_as_themselves(secure_server, tmp):
        tenant = await as_user(secure_server, "client-acme")
        try:
            command = message_command("acme", "read my notes") | {
                "attachments": [attachment("pic.png", "image/png", PNG)]
            }
            outcome = await send_and_wait(tenant, command, timeout=20)
            assert outcome.status == "completed", outcome
            name = "att/" + hashlib.sha256(PNG).hexdigest()
            with pytest.raises(Exception, match=r"(?i)permission|authoriz|timeout|no response"):
                store = await tenant.attachments()
                await store.put(name, b"planted " + base64.b64encode(PNG))
        finally:
            await tenant.close()
    runner = await as_user(secure_server, "turn-runner")  # reads it as a model call does
    try:
        stored = await read_object(runner, name, attachment=True)
        assert stored == PNG  # the gateway's, not the tenant's
    finally:
        await runner.close()


async def test_the_http_face_streams_a_file_into_the_store_and_may_not_purge_or_delete(
    secure_server: SecureServer, tmp: Path
) -> None:
    """A multipart message through the face as the `http` user: the file is written into
    the store by the face (chunks, then its meta `att/<sha256>`) and the turn runs. With the
    same credentials an attacker still may not purge, delete or redefine the store, nor
    read it through a consumer: the new right is writing chunks and meta records."""
    big = PNG + b"\0" * (300 * 1024)  # several chunks
    async with services_as_themselves(secure_server, tmp):
        web = settings(secure_server, "http", tmp)
        async with http_app(web) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
            r = await http.post(
                "/v1/sessions/web-up/messages?wait=true",
                data={"text": "notes"},
                files={"files": ("big.png", big, "image/png")},
            )
            sha = hashlib.sha256(big).hexdigest()
            back = await http.get(f"/v1/sessions/web-up/attachments/{sha}")
    assert r.status_code == 200 and r.json()["data"]["status"] == "completed", r.text
    assert back.status_code == 200 and back.content == big, back.text
    runner = await as_user(secure_server, "turn-runner")
    try:
        name = "att/" + hashlib.sha256(big).hexdigest()
        assert await read_object(runner, name, attachment=True) == big
    finally:
        await runner.close()
    attacker = await as_user(secure_server, "http")
    try:
        for subject, payload in [
            ("$JS.API.STREAM.PURGE.OBJ_ts_attachments", b"{}"),
            ("$JS.API.STREAM.DELETE.OBJ_ts_attachments", b""),
            ("$JS.API.CONSUMER.CREATE.OBJ_ts_attachments", b'{"stream_name": "x"}'),
            ("$JS.API.STREAM.MSG.DELETE.OBJ_ts_attachments", b'{"seq": 1}'),
            ("$JS.API.STREAM.PURGE.OBJ_ts_blobs", b"{}"),
            ("$JS.API.STREAM.DELETE.OBJ_ts_blobs", b""),
            ("$JS.API.STREAM.UPDATE.OBJ_ts_blobs", b'{"name": "OBJ_ts_blobs", "max_msgs": 1}'),
            ("$JS.API.CONSUMER.CREATE.OBJ_ts_blobs", b'{"stream_name": "OBJ_ts_blobs"}'),
            ("$JS.API.STREAM.MSG.DELETE.OBJ_ts_blobs", b'{"seq": 1}'),
            ("$JS.API.STREAM.MSG.GET.KV_ts_leases", b'{"seq": 1}'),
        ]:
            # any answer at all means the server took the request: a refusal has none
            with pytest.raises(Exception, match=r"(?i)permission|authoriz|timeout|no respon"):
                await attacker.nc.request(subject, payload, timeout=1)
    finally:
        await attacker.close()


@pytest.mark.parametrize("door", ["gateway", "http", "channel-telegram", "channel-slack"])
async def test_a_door_that_adds_attachments_cannot_rewrite_an_archive_or_a_tool_result(
    secure_server: SecureServer, door: str
) -> None:
    """The doors may write attachments' meta records, and NATS cannot narrow that right to
    some names: so attachments have their own bucket, and a door writes no record nor
    chunk of `ts_blobs`, where an archive's record pointed at forged chunks would rewrite
    a session's archived history, or a tool result's what the model reads."""
    await apply_as_operator(secure_server)
    operator = await as_user(secure_server, "operator")
    attacker = await as_user(secure_server, door)
    try:
        stream = f"OBJ_{SUBJECTS.blobs_bucket}"
        before = (await operator.js.stream_info(stream)).state.last_seq
        archive = base64.urlsafe_b64encode(b"archive/victim.jsonl").decode()
        for subject in (f"$O.ts_blobs.M.{archive}", "$O.ts_blobs.C.forgedchunks"):
            with pytest.raises(Exception, match=r"(?i)permission|authoriz|timeout|no respon"):
                await attacker.js.publish(subject, b'{"name": "archive/victim.jsonl"}', timeout=1)
        assert (await operator.js.stream_info(stream)).state.last_seq == before
        # and its own right still works where it belongs
        mine = f"{door}'s own file".encode()
        sha = hashlib.sha256(mine).hexdigest()
        if door != "gateway":  # the gateway stores inline files through a command
            assert await put_new_attachment(attacker, f"att/{sha}", mine)
            assert await read_attachment(operator, sha) == mine
    finally:
        await attacker.close()
        await operator.close()
