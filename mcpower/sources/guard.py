"""Which addresses a crawl may connect to, checked on the address it connects to.

A crawl that starts on a public address never connects to a private, loopback, link-local or
otherwise special one: not through a redirect, not through a link, and not through DNS answering
one address when the host is checked and another when it is connected to (DNS rebinding), because
the check is made here, in the network backend, on the very addresses the socket is then opened
to. A crawl the user starts on a private or loopback address (their own intranet docs, a local
server) may connect to addresses of that same class, and to public ones. Unspecified, multicast
and reserved addresses are never connected to.

Through a proxy (``HTTPS_PROXY`` ...), the proxy resolves and connects: the host is resolved here
too and checked the same way before the request is sent, but the proxy may resolve it otherwise
(docs/fetching.md).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from typing import Any

import anyio
import httpcore2

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class BlockedAddressError(httpcore2.ConnectError):
    """Every address of a host is one this crawl may not connect to."""


def address_class(ip: Address) -> str:
    """'public', 'private', 'loopback', 'link-local', or 'forbidden' (unspecified, multicast, reserved)."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_unspecified:
        return "forbidden"
    if ip.is_loopback:
        return "loopback"
    if ip.is_link_local:
        return "link-local"
    if ip.is_multicast or ip.is_reserved:
        return "forbidden"
    if ip.is_global:
        return "public"
    return "private"  # RFC 1918, unique local, shared address space, documentation ranges ...


class AddressPolicy:
    """The classes of address a crawl may connect to: public ones, and the class its first
    connection went to (set by :meth:`pin`, or by the first connection)."""

    def __init__(self, start_class: str | None = None) -> None:
        self.start_class = start_class

    def allows(self, ip: Address) -> bool:
        kind = address_class(ip)
        if kind == "forbidden":
            return False
        if self.start_class is None:
            self.start_class = kind
        return kind == "public" or kind == self.start_class

    def why_not(self, host: str, addresses: Iterable[Address]) -> str:
        kinds = sorted({address_class(a) for a in addresses})
        return (
            f"{host} resolves to a {'/'.join(kinds) or 'unknown'} address, and this crawl started on a "
            f"{self.start_class} one: not connected to (a public site must not lead to private addresses)"
        )


async def resolve(host: str, port: int) -> list[Address]:
    """The addresses ``host`` resolves to (an IP literal: itself)."""
    try:
        return [ipaddress.ip_address(host.strip("[]"))]
    except ValueError:
        pass
    infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    out: list[Address] = []
    for *_, sockaddr in infos:
        ip = ipaddress.ip_address(str(sockaddr[0]).split("%")[0])
        if ip not in out:
            out.append(ip)
    return out


class GuardedBackend(httpcore2.AsyncNetworkBackend):
    """An httpcore network backend that resolves each host itself, keeps the addresses the
    policy allows, and connects to one of those addresses (never to the name again)."""

    def __init__(self, policy: AddressPolicy, inner: httpcore2.AsyncNetworkBackend | None = None) -> None:
        self.policy = policy
        self.inner = inner or httpcore2.AnyIOBackend()
        self.connected: list[str] = []  # the addresses connected to, for tests and the report

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        try:
            with anyio.fail_after(timeout):
                addresses = await resolve(host, port)
        except (OSError, TimeoutError) as e:
            raise httpcore2.ConnectError(f"cannot resolve {host}: {getattr(e, 'strerror', None) or e}") from None
        allowed = [a for a in addresses if self.policy.allows(a)]
        if not allowed:
            raise BlockedAddressError(self.policy.why_not(host, addresses))
        last: Exception | None = None
        for ip in allowed:
            try:
                stream = await self.inner.connect_tcp(
                    str(ip), port, timeout=timeout, local_address=local_address, socket_options=socket_options
                )
            except httpcore2.ConnectError as e:
                last = e
                continue
            self.connected.append(str(ip))
            return stream
        assert last is not None
        raise last

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore2.AsyncNetworkStream:
        raise httpcore2.ConnectError("a crawl connects to network addresses only")

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)
