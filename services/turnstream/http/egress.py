"""Calls to addresses an outside client named (A2A push webhooks, A2A file URIs), guarded
where the guard holds: at connect. The transport resolves the name itself and connects
only to a public address among those it resolved, so a name that was public when a config
was set and resolves to 127.0.0.1 or 169.254.169.254 at delivery is refused then, on the
very address it would have connected to (no second lookup an attacker's DNS could answer
differently). TLS still checks the certificate against the name.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import urllib.parse
from typing import Any

import httpcore
import httpx


def blocked(address: str) -> bool:
    """Whether `address` is not a public unicast one: loopback, private, shared
    (100.64/10), link-local (cloud metadata), multicast, reserved, unspecified; an
    IPv4-mapped IPv6 address is judged as the IPv4 one inside it; not an address: blocked."""
    try:
        ip: Any = ipaddress.ip_address(address.split("%", maxsplit=1)[0])
    except ValueError:
        return True
    ip = getattr(ip, "ipv4_mapped", None) or ip
    return bool(
        not ip.is_global
        or ip.is_loopback
        or ip.is_link_local
        or ip.is_multicast
        or ip.is_reserved
        or ip.is_unspecified
    )


def literal_blocked(url: str) -> bool:
    """Whether `url` is not http(s) with a host, or its host is an address literal that is
    `blocked`: what can be known without resolving (a name is checked at connect)."""
    try:
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname
        _ = parts.port
    except ValueError:
        return True
    if parts.scheme not in ("http", "https") or not host:
        return True
    try:
        ipaddress.ip_address(host.split("%", maxsplit=1)[0])
    except ValueError:
        return False  # a name
    return blocked(host)


class PeerRefused(httpcore.ConnectError):
    """The name resolved to no public address (httpx raises it as `httpx.ConnectError`)."""


class PublicPeers(httpcore.AsyncNetworkBackend):
    """TCP connections to public addresses only, checked after resolution."""

    def __init__(self) -> None:
        self.inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (OSError, TimeoutError) as exc:
            raise httpcore.ConnectError(f"{host}: not resolved ({exc})") from exc
        addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
        public = [a for a in addresses if not blocked(a)]
        if not public:
            raise PeerRefused(
                f"refused: {host} resolves to {', '.join(addresses)}, not a public address"
            )
        return await self.inner.connect_tcp(
            public[0],
            port,
            timeout=timeout,
            local_address=local_address,
            socket_options=socket_options,
        )

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Any = None
    ) -> httpcore.AsyncNetworkStream:
        raise PeerRefused("refused: not a TCP address")

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


class PublicTransport(httpx.AsyncHTTPTransport):
    """httpx's transport over `PublicPeers`."""

    def __init__(self) -> None:
        super().__init__()
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=httpx.create_ssl_context(), network_backend=PublicPeers()
        )


def outside_client(*, allow_private: bool, **kwargs: Any) -> httpx.AsyncClient:
    """A client for addresses an outside party named: public peers only unless
    `allow_private`; no proxy from the environment (it would connect for us), no redirect
    followed (its target is another name to judge)."""
    transport = httpx.AsyncHTTPTransport() if allow_private else PublicTransport()
    return httpx.AsyncClient(transport=transport, trust_env=False, follow_redirects=False, **kwargs)
