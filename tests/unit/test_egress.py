"""The outside-call guard (`http.egress`): what a URL says alone is judged without
resolving it; a peer is judged after resolution, at connect, and a private one is refused
before any byte is sent."""

from __future__ import annotations

import httpx
import pytest

from turnstream.http.egress import blocked, literal_blocked, outside_client


@pytest.mark.parametrize(
    ("address", "is_blocked"),
    [
        ("93.184.216.34", False),
        ("2606:2800:220:1:248:1893:25c8:1946", False),
        ("127.0.0.1", True),
        ("10.0.0.1", True),
        ("100.64.0.1", True),
        ("169.254.169.254", True),
        ("::1", True),
        ("::ffff:127.0.0.1", True),
        ("fe80::1%eth0", True),
        ("not-an-address", True),
    ],
)
def test_blocked_addresses(address: str, is_blocked: bool) -> None:
    assert blocked(address) is is_blocked


@pytest.mark.parametrize(
    ("url", "is_blocked"),
    [
        ("https://hooks.example.invalid/x", False),  # a name: judged at connect, not now
        ("https://example.com/hook", False),
        ("http://93.184.216.34/", False),
        ("http://127.0.0.1:9/x", True),
        ("http://[::1]/x", True),
        ("ftp://example.com/x", True),
        ("https:///x", True),
    ],
)
def test_what_a_url_says_alone(url: str, is_blocked: bool) -> None:
    assert literal_blocked(url) is is_blocked


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:1/x",
        "http://localhost:1/x",  # a name that resolves to loopback
        "http://10.1.2.3/x",
        "http://169.254.169.254/latest/meta-data/",
        "http://[::1]:1/x",
    ],
)
async def test_a_private_peer_is_refused_at_connect(url: str) -> None:
    async with outside_client(allow_private=False, timeout=5) as http:
        with pytest.raises(httpx.ConnectError, match=r"refused: .* not a public address"):
            await http.get(url)
