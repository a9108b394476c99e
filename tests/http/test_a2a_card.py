"""The agent card as each protocol version's client reads it (the spec's version
negotiation: the `A2A-Version` header, none meaning v0.3), with its cache headers."""

from __future__ import annotations

import httpx
import pytest
from a2a.compat.v0_3 import types as v03
from a2a.types.a2a_pb2 import AgentCard

from tests.http.test_a2a import a2a, message, send

pytestmark = pytest.mark.integration
CARD = "/.well-known/agent-card.json"
V10_FIELDS = {f.json_name for f in AgentCard.DESCRIPTOR.fields}
V03_FIELDS = {f.alias or name for name, f in v03.AgentCard.model_fields.items()}


async def card(url: str, version: str | None) -> httpx.Response:
    headers = {"A2A-Version": version} if version else {}
    async with httpx.AsyncClient(base_url=url, headers=headers) as http:
        return await http.get(CARD)


@pytest.mark.parametrize("version", ["1.0", "1.0.0", "1"])
async def test_a_v1_0_client_gets_a_v1_0_card_only(url: str, version: str) -> None:
    r = await card(url, version)
    body = r.json()
    assert set(body) <= V10_FIELDS, set(body) - V10_FIELDS
    assert not {"url", "preferredTransport", "protocolVersion"} & set(body)
    versions = {i["protocolVersion"] for i in body["supportedInterfaces"]}
    assert versions == {"1.0", "0.3"}


@pytest.mark.parametrize("version", [None, "0.3", "0.3.0"])
async def test_a_v0_3_client_gets_a_v0_3_card_only(url: str, version: str | None) -> None:
    body = (await card(url, version)).json()
    assert set(body) <= V03_FIELDS, set(body) - V03_FIELDS
    assert "supportedInterfaces" not in body
    assert body["url"] == f"{url}/a2a" and body["preferredTransport"] == "JSONRPC"
    assert body["protocolVersion"].startswith("0.3")
    v03.AgentCard.model_validate(body)  # the v0.3 model takes it


async def test_the_card_has_cache_headers_and_revalidates(url: str) -> None:
    first = await card(url, "1.0")
    assert first.headers["cache-control"] == "public, max-age=300"
    assert first.headers["vary"] == "A2A-Version"
    etag = first.headers["etag"]
    assert etag != (await card(url, None)).headers["etag"]  # two forms, two entities
    async with httpx.AsyncClient(base_url=url, headers={"A2A-Version": "1.0"}) as http:
        again = await http.get(CARD, headers={"If-None-Match": etag})
    assert again.status_code == 304 and again.headers["cache-control"] == "public, max-age=300"


async def test_the_sdk_client_reads_the_v1_0_card_and_sends(url: str) -> None:
    async with a2a(url) as client:
        task = await send(client, message("card ok", context="a2a-card"))
    assert task.context_id == "a2a-card" and task.status.message.parts[0].text == "echo: card ok"
