"""Files over HTTP: `POST /v1/sessions/{id}/messages` as multipart/form-data. Each file is
streamed into the object store and sent as a reference; the model gets an image through
the official SDK as an image block (checked in the body the fake server received). A file
the message cannot carry is refused at once, naming it and why, and nothing is sent."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import httpx
import pytest
import yaml

from tests.http.conftest import http_app
from tests.integration.conftest import (
    anthropic_settings,
    bus,
    events_of,
    nats_server,
    only,
    running_services,
    settings_for,
)
from tests.integration.test_attachments import PDF, PNG
from tests.providers.fake_servers import FakeAnthropic, FakeOpenAI, Text
from turnstream.bus import Bus
from turnstream.bus.embedded import EmbeddedServer
from turnstream.bus.objects import read_object
from turnstream.core.events import InputAccepted
from turnstream.http.auth import hash_key

__all__ = ["bus", "nats_server"]
pytestmark = pytest.mark.integration
PROBLEM = "application/problem+json"


@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    (tmp_path / "workspace").mkdir()
    return tmp_path


async def test_an_image_over_multipart_reaches_anthropic_as_an_image_block(
    nats_server: EmbeddedServer, bus: Bus, tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
    async with FakeAnthropic([Text("a red dot and a spec")]) as fake:
        settings = anthropic_settings(nats_server, tmp, fake.base_url)
        async with (
            running_services(settings, bus),
            http_app(settings) as url,
            httpx.AsyncClient(base_url=url, timeout=30) as http,
        ):
            r = await http.post(
                "/v1/sessions/up-a/messages?wait=true",
                data={"text": "what is on these?"},
                files=[
                    ("files", ("shot.png", PNG, "image/png")),
                    ("files", ("spec.pdf", PDF, "application/octet-stream")),  # by its name
                ],
            )
    assert r.status_code == 200, r.text
    assert r.json()["data"]["reply"] == "a red dot and a spec"
    (message,) = fake.requests[0].body["messages"]
    text, image, document = message["content"]
    assert text == {"type": "text", "text": "what is on these?"}
    assert image["type"] == "image" and image["source"]["media_type"] == "image/png"
    assert base64.b64decode(image["source"]["data"]) == PNG
    assert document["type"] == "document"
    assert base64.b64decode(document["source"]["data"]) == PDF
    (accepted,) = only(await events_of(bus, "up-a"), InputAccepted)
    assert [(a.name, a.media_type, a.size, a.object) for a in accepted.data.attachments or []] == [
        ("shot.png", "image/png", len(PNG), "att/" + hashlib.sha256(PNG).hexdigest()),
        ("spec.pdf", "application/pdf", len(PDF), "att/" + hashlib.sha256(PDF).hexdigest()),
    ]


async def test_an_image_over_multipart_reaches_openai_as_an_image_url(
    nats_server: EmbeddedServer, bus: Bus, tmp: Path
) -> None:
    big = PNG + bytes(range(256)) * (5 * 1024)  # 1.25 MiB: 11 chunks, two reads back
    async with FakeOpenAI([Text("seen")]) as fake:
        settings = settings_for(
            nats_server, tmp, provider="openai", model="gpt-fake", base_url=fake.base_url + "/v1"
        )
        async with (
            running_services(settings, bus),
            http_app(settings) as url,
            httpx.AsyncClient(base_url=url, timeout=30) as http,
        ):
            r = await http.post(
                "/v1/sessions/up-o/messages?wait=true",
                data={"text": "look"},
                files={"files": ("big.png", big, "image/png")},
            )
            back = await http.get(
                f"/v1/sessions/up-o/attachments/{hashlib.sha256(big).hexdigest()}"
            )
    assert r.status_code == 200, r.text
    _, image = fake.requests[0].body["messages"][-1]["content"]
    assert image["image_url"]["url"] == "data:image/png;base64," + base64.b64encode(big).decode()
    assert await read_object(bus, "att/" + hashlib.sha256(big).hexdigest(), attachment=True) == big
    assert back.status_code == 200 and back.content == big


@pytest.mark.parametrize(
    ("files", "status", "why"),
    [
        (
            [("files", (f"{n}.png", PNG, "image/png")) for n in range(11)],
            422,
            "file 10 ('10.png') is refused: a message carries at most 10 files",
        ),
        (
            [("files", ("x.exe", b"MZ", "application/x-msdownload"))],
            422,
            "file 0 ('x.exe') is refused: media type application/x-msdownload is not taken",
        ),
        (
            [("files", ("ok.png", PNG, "image/png")), ("files", ("big.pdf", PDF * 40, None))],
            413,
            "file 1 ('big.pdf') is refused: over the limit of 8192 bytes",
        ),
    ],
)
async def test_a_file_the_message_cannot_carry_is_refused_naming_it_and_nothing_is_sent(
    nats_server: EmbeddedServer,
    bus: Bus,
    tmp: Path,
    files: list[tuple[str, tuple[str, bytes, str | None]]],
    status: int,
    why: str,
) -> None:
    settings = settings_for(nats_server, tmp, attachment_max_bytes=8192)
    session = f"up-refused-{status}-{len(files)}"
    async with (
        running_services(settings, bus),
        http_app(settings) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as http,
    ):
        r = await http.post(f"/v1/sessions/{session}/messages", data={"text": "see"}, files=files)
        assert r.status_code == status and r.headers["content-type"] == PROBLEM, r.text
        problem = r.json()
        assert problem["detail"].startswith(why), problem
        assert problem["rejection"] == "attachment" and problem["errors"][0].startswith(
            "attachments."
        )
        assert await events_of(bus, session) == []  # nothing was sent
        # the same message, fixed, goes through on the same connection
        r = await http.post(
            f"/v1/sessions/{session}/messages",
            data={"text": "see"},
            files={"files": ("ok.png", PNG, "image/png")},
        )
        assert r.status_code == 202, r.text


async def test_multipart_fields_are_checked_as_the_json_bodys(
    nats_server: EmbeddedServer, bus: Bus, tmp: Path
) -> None:
    settings = settings_for(nats_server, tmp)
    async with (
        running_services(settings, bus),
        http_app(settings) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as http,
    ):
        r = await http.post(
            "/v1/sessions/up-f/messages",
            data={"txt": "typo"},
            files={"files": ("a.png", PNG, "image/png")},
        )
        no_text = await http.post(
            "/v1/sessions/up-f/messages", files={"files": ("a.png", PNG, "image/png")}
        )
        spec = (await http.get("/openapi.json")).json()
    assert r.status_code == 422 and "unknown part 'txt'" in r.json()["detail"], r.text
    assert no_text.status_code == 422 and "text" in no_text.json()["detail"], no_text.text
    body = spec["paths"]["/v1/sessions/{id}/messages"]["post"]["requestBody"]["content"]
    assert {"application/json", "multipart/form-data"} <= set(body)
    assert body["multipart/form-data"]["schema"]["properties"]["files"]["maxItems"] == 10


async def test_an_attachment_is_downloaded_by_a_reader_of_its_session_only(
    nats_server: EmbeddedServer, bus: Bus, tmp: Path
) -> None:
    keys = [
        {"name": "alice", "key": hash_key("sk-alice"), "scopes": ["send", "read"],
         "sessions": "dl-a*"},
        {"name": "bob", "key": hash_key("sk-bob"), "scopes": ["send", "read"],
         "sessions": "dl-b*"},
    ]  # fmt: skip
    (tmp / "keys.yaml").write_text(yaml.safe_dump({"keys": keys}))
    settings = settings_for(nats_server, tmp, http_keys_file=tmp / "keys.yaml")
    alice = {"Authorization": "Bearer sk-alice"}
    bob = {"Authorization": "Bearer sk-bob"}
    png, pdf = hashlib.sha256(PNG).hexdigest(), hashlib.sha256(PDF).hexdigest()
    async with (
        running_services(settings, bus),
        http_app(settings) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as http,
    ):
        for session, who, file in [
            ("dl-a", alice, ("dot.png", PNG, "image/png")),
            ("dl-b", bob, ("spec.pdf", PDF, "application/pdf")),
        ]:
            r = await http.post(
                f"/v1/sessions/{session}/messages",
                data={"text": "keep this"},
                files={"files": file},
                headers=who,
            )
            assert r.status_code == 202, r.text
        mine = await http.get(f"/v1/sessions/dl-a/attachments/{png}", headers=alice)
        other_session = await http.get(f"/v1/sessions/dl-b/attachments/{pdf}", headers=alice)
        # the hash of bob's file, asked of alice's own session: it was not sent there
        by_hash = await http.get(f"/v1/sessions/dl-a/attachments/{pdf}", headers=alice)
        no_key = await http.get(f"/v1/sessions/dl-a/attachments/{png}")
        upload_no_key = await http.post(
            "/v1/sessions/dl-a/messages",
            data={"text": "x"},
            files={"files": ("dot.png", PNG, "image/png")},
        )
        upload_elsewhere = await http.post(
            "/v1/sessions/dl-b/messages",
            data={"text": "x"},
            files={"files": ("dot.png", PNG, "image/png")},
            headers=alice,
        )
        bobs = await http.get(f"/v1/sessions/dl-b/attachments/{pdf}", headers=bob)
    assert mine.status_code == 200 and mine.content == PNG
    assert mine.headers["content-type"] == "image/png"
    assert mine.headers["content-disposition"] == "inline; filename*=UTF-8''dot.png"
    assert mine.headers["x-content-type-options"] == "nosniff"
    assert other_session.status_code == 403, other_session.text
    assert by_hash.status_code == 404, by_hash.text
    assert no_key.status_code == 401
    assert upload_no_key.status_code == 401, upload_no_key.text
    assert upload_elsewhere.status_code == 403, upload_elsewhere.text
    assert bobs.status_code == 200 and bobs.content == PDF
    assert bobs.headers["content-disposition"].startswith("attachment;")
