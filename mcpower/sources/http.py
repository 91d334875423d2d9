"""One bounded HTTP GET for a crawl: the user's headers, conditional validators, redirects followed
only within scope, the body's size bounded as it is decoded, the whole exchange within a deadline.

httpcore2 (the transport under httpx2, which the MCP SDK already needs) is used directly: the
crawl needs its network-backend hook (guard.py checks the address each connection goes to), and
does its own redirects (each hop checked against the scope) and its own decoding (gzip and deflate
inflated a bounded piece at a time, so a bomb costs no more memory than the page limit). Brotli is
not asked for; a server that sends it anyway has that page skipped with the reason.
"""

from __future__ import annotations

import os
import ssl
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit
from urllib.request import getproxies, proxy_bypass

import anyio
import httpcore2

from mcpower import __version__
from mcpower.sources.guard import AddressPolicy, BlockedAddressError, GuardedBackend, resolve
from mcpower.sources.urls import join

USER_AGENT = f"mcpower/{__version__} (local documentation search)"
ROBOTS_AGENT = "mcpower"  # the product token robots.txt groups are matched against
MAX_REDIRECTS = 10  # RFC 9110 suggests detecting cycles; browsers stop at 20, crawlers at 5-10
# Headers a user may not set: they would break the exchange or its framing.
_RESERVED = {"host", "content-length", "transfer-encoding", "connection", "accept-encoding", "te", "upgrade"}
_KEEP = ("content-type", "etag", "last-modified", "location", "retry-after", "content-encoding")


class FetchError(Exception):
    """A page that could not be fetched, with the reason (never a header value)."""


@dataclass
class Fetched:
    url: str  # the final URL, after redirects
    status: int
    headers: dict[str, str] = field(default_factory=dict)  # the few kept (_KEEP), lower-case names
    body: bytes = b""
    truncated: bool = False  # the body was cut at the limit (a get with truncate=True)
    redirected_from: list[str] = field(default_factory=list)


def parse_header(text: str) -> tuple[str, str]:
    """``'Name: value'`` as a header the crawl may send.

    Raises:
        ValueError: not of that form, or a header the crawl sets itself (the message shows the
            name only: the value may be a secret).
    """
    name, sep, value = text.partition(":")
    name, value = name.strip(), value.strip()
    if not sep or not name or any(c in name for c in ' \t()<>@,;:\\"/[]?={}') or not name.isascii():
        raise ValueError("a header must be given as 'Name: value'")
    if any(c in value for c in "\r\n\x00"):
        raise ValueError(f"header {name}: the value holds a line break or NUL")
    if name.lower() in _RESERVED:
        raise ValueError(f"header {name} is set by mcpower itself")
    return name, value


def ssl_context() -> ssl.SSLContext:
    """The system's trust store (truststore), or OpenSSL's defaults when SSL_CERT_FILE/SSL_CERT_DIR
    name a bundle (a corporate CA, a test certificate)."""
    if not (os.environ.get("SSL_CERT_FILE") or os.environ.get("SSL_CERT_DIR")):
        try:
            import truststore

            return truststore.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        except ImportError:
            pass
    return ssl.create_default_context()


class Client:
    """Makes a crawl's requests: at most ``in_flight`` at once, each within ``timeout`` seconds."""

    def __init__(
        self,
        headers: Sequence[tuple[str, str]] = (),
        *,
        policy: AddressPolicy | None = None,
        in_flight: int = 4,
        timeout: float = 30.0,
        on_request: Callable[[str], None] | None = None,
    ) -> None:
        self.user_headers = list(headers)
        self.policy = policy or AddressPolicy()
        self.timeout = timeout
        self.on_request = on_request
        self.requests = 0
        self.limiter = anyio.CapacityLimiter(in_flight)
        self.backend = GuardedBackend(self.policy)
        context = ssl_context()
        self._direct = httpcore2.AsyncConnectionPool(
            ssl_context=context, max_connections=in_flight, network_backend=self.backend
        )
        self._proxies: dict[str, httpcore2.AsyncHTTPProxy] = {}
        self._context = context
        self._env_proxies = {k.lower(): v for k, v in getproxies().items()}

    async def aclose(self) -> None:
        await self._direct.aclose()
        for pool in self._proxies.values():
            await pool.aclose()

    async def get(
        self,
        url: str,
        *,
        in_scope: Callable[[str], bool],
        max_bytes: int | Callable[[str, str], int],
        validators: Mapping[str, str] | None = None,
        accept: str = "*/*",
        user_headers: bool = True,
        truncate: bool = False,
    ) -> Fetched:
        """GET ``url``, following redirects while ``in_scope`` holds for them; the body (status 200
        only) decoded and at most ``max_bytes`` (or what it answers for the response's
        Content-Type and URL) (with ``truncate``, a longer one is cut there and
        marked ``truncated`` instead of failing).

        Raises:
            FetchError: time out, too big, a redirect out of scope or in a loop, a connection
                refused or blocked, an encoding it cannot decode.
        """
        seen: list[str] = []
        try:
            with anyio.fail_after(self.timeout):
                while True:
                    async with self.limiter:
                        fetched = await self._once(url, max_bytes, validators, accept, user_headers, truncate)
                    if fetched.status not in (301, 302, 303, 307, 308) or "location" not in fetched.headers:
                        fetched.redirected_from = seen
                        return fetched
                    seen.append(url)
                    target = join(url, fetched.headers["location"])
                    if target is None:
                        raise FetchError("redirects to an address that is not an http(s) URL")
                    if not in_scope(target):
                        raise FetchError(f"redirects out of scope, to {target[:200]}")
                    if target in seen:
                        raise FetchError(f"a redirect loop ({len(seen)} redirects)")
                    if len(seen) >= MAX_REDIRECTS:
                        raise FetchError(f"more than {MAX_REDIRECTS} redirects")
                    url = target
        except TimeoutError:
            raise FetchError(f"no complete answer within {self.timeout:g} s") from None

    async def _once(
        self,
        url: str,
        max_bytes: int | Callable[[str, str], int],
        validators: Mapping[str, str] | None,
        accept: str,
        user_headers: bool,
        truncate: bool,
    ) -> Fetched:
        headers = [("User-Agent", USER_AGENT), ("Accept", accept), ("Accept-Encoding", "gzip, deflate")]
        headers += list((validators or {}).items())
        if user_headers:
            headers += self.user_headers
        pool = await self._pool_for(url)
        self.requests += 1
        if self.on_request is not None:
            self.on_request(url)
        try:
            async with pool.stream("GET", url, headers=headers) as response:
                kept = {
                    k.decode("latin-1").lower(): v.decode("latin-1")
                    for k, v in response.headers
                    if k.decode("latin-1").lower() in _KEEP
                }
                fetched = Fetched(url, response.status, kept)
                if response.status == 200:
                    limit = max_bytes(kept.get("content-type", ""), url) if callable(max_bytes) else max_bytes
                    decoder = _Decoder(kept.get("content-encoding", ""), limit, truncate)
                    parts = []
                    async for piece in response.aiter_stream():
                        parts.append(decoder.feed(piece))
                        if decoder.truncated:
                            break
                    if not decoder.truncated:
                        parts.append(decoder.flush())
                    fetched.body, fetched.truncated = b"".join(parts), decoder.truncated
                return fetched
        except BlockedAddressError as e:
            raise FetchError(str(e)) from None
        except httpcore2.TimeoutException:
            raise FetchError("timed out") from None
        except (httpcore2.NetworkError, httpcore2.ProtocolError, httpcore2.UnsupportedProtocol, ssl.SSLError) as e:
            raise FetchError(f"{type(e).__name__}: {_short(e)}") from None

    async def _pool_for(self, url: str) -> httpcore2.AsyncConnectionPool:
        parts = urlsplit(url)
        proxy = self._env_proxies.get(parts.scheme)
        host = parts.hostname or ""
        if not proxy or proxy_bypass(host):
            return self._direct
        # The proxy connects: check the name here too, as well as can be (guard.py).
        addresses = await resolve(host, parts.port or (443 if parts.scheme == "https" else 80))
        if not any(self.policy.allows(a) for a in addresses):
            raise FetchError(self.policy.why_not(host, addresses))
        pool = self._proxies.get(proxy)
        if pool is None:
            p = urlsplit(proxy)
            pool = self._proxies[proxy] = httpcore2.AsyncHTTPProxy(
                proxy_url=httpcore2.URL(
                    scheme=p.scheme.encode(), host=(p.hostname or "").encode(), port=p.port, target=b"/"
                ),
                ssl_context=self._context,
                max_connections=self.limiter.total_tokens,  # type: ignore[arg-type]
            )
        return pool


class _Decoder:
    """Content-Encoding undone a bounded piece at a time: never more than ``limit`` bytes out."""

    def __init__(self, encoding: str, limit: int, truncate: bool = False) -> None:
        self.limit = limit
        self.size = 0
        self.truncate = truncate
        self.truncated = False
        coding = encoding.strip().lower()
        if coding in ("", "identity"):
            self.inflater = None
        elif coding in ("gzip", "x-gzip"):
            self.inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif coding == "deflate":
            self.inflater = zlib.decompressobj(zlib.MAX_WBITS | 32)  # zlib or gzip header; raw below
            self._raw_fallback = True
        else:
            raise FetchError(f"content encoding {coding[:40]!r} is not read")
        self._first = True

    def feed(self, data: bytes) -> bytes:
        if self.inflater is None:
            return self._count(data)
        out = []
        while data and not self.truncated:
            try:
                piece = self.inflater.decompress(data, self.limit - self.size + 1)
            except zlib.error:
                if self._first and getattr(self, "_raw_fallback", False):
                    self.inflater, self._first = zlib.decompressobj(-zlib.MAX_WBITS), False
                    continue
                raise FetchError("the compressed body is damaged") from None
            self._first = False
            out.append(self._count(piece))
            data = self.inflater.unconsumed_tail
        return b"".join(out)

    def flush(self) -> bytes:
        return self._count(self.inflater.flush()) if self.inflater is not None else b""

    def _count(self, piece: bytes) -> bytes:
        if self.truncated:
            return b""
        self.size += len(piece)
        if self.size > self.limit and self.truncate:
            self.truncated = True
            return piece[: len(piece) - (self.size - self.limit)]
        if self.size > self.limit:
            raise FetchError(f"larger than the {self.limit / 2**20:g} MB limit for a page (as decoded)")
        return piece


def _short(e: BaseException) -> str:
    return " ".join(str(e).split())[:160] or "no detail"
