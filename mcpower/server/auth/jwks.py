"""The keys an OAuth issuer signs access tokens with: found, fetched within bounds, cached, rotated.

The JSON Web Key Set comes from ``--jwks`` (a URL or a file) or from the issuer's own metadata:
RFC 8414 ``/.well-known/oauth-authorization-server`` or OpenID ``/.well-known/openid-configuration``
(the forms the MCP authorization spec lists), whose ``issuer`` must be the configured one and whose
``jwks_uri`` names the set. Everything the issuer answers is untrusted: each fetch is bounded in
time (:data:`FETCH_TIMEOUT_S`, the whole answer; twice that for metadata and set together) and size (:data:`MAX_DOCUMENT_BYTES`, as decoded),
follows no redirect, and only ``https`` is used (plain ``http`` on loopback alone).

:class:`KeyCache` keeps the set for :data:`KEYS_TTL_S`, then fetches it again; a token naming a
``kid`` the set lacks makes it fetch at once (a rotation), but not more often than every
:data:`REFETCH_INTERVAL_S`, so a flood of tokens with made-up kids costs the issuer one request per
interval. Concurrent waiters share one fetch; when the keys in hand are only due for a refresh,
the requests that arrive meanwhile use them rather than wait. When a fetch fails the last good set is kept for
:data:`MAX_STALE_S` past its time (an issuer briefly down does not lock everyone out); with no good
set at all, every token is refused (fail closed), and each failure is logged.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio

from mcpower.errors import McpowerError
from mcpower.server.auth.access import is_loopback

logger = logging.getLogger(__name__)

# An issuer's metadata and key set are a few KB (Google's, Entra's, Okta's: under 10 KB).
MAX_DOCUMENT_BYTES = 256 * 1024
# One fetch, answer included; a request needing the keys waits at most this long.
FETCH_TIMEOUT_S = 5.0
# How long a fetched key set is used before it is fetched again (issuers rotate in days or weeks).
KEYS_TTL_S = 300.0
# The least time between two fetches a token's unknown kid may cause.
REFETCH_INTERVAL_S = 30.0
# How long past KEYS_TTL_S the last good set is kept while the issuer cannot be reached.
MAX_STALE_S = 3600.0
# Keys kept from one set; a real issuer publishes a handful.
MAX_KEYS = 64


class JwksError(Exception):
    """A key set or metadata document could not be had; the message says why (logged, never sent)."""


def check_url(url: str, what: str) -> str:
    """``url`` if it is ``https``, or ``http`` to a loopback address; the key set decides which tokens
    are good, so it must not come over a network anyone on the path can rewrite.

    Raises:
        McpowerError: any other URL (named as ``what``).
    """
    parts = urlsplit(url)
    host = parts.hostname or ""
    if (parts.scheme == "https" and host) or (parts.scheme == "http" and is_loopback(host)):
        if parts.query or parts.fragment or parts.username or parts.password:
            raise McpowerError(f"{what} {url!r} must not carry a query, a fragment or user info")
        return url
    raise McpowerError(f"{what} {url!r} must be an https:// URL (http:// only for 127.0.0.1, localhost or [::1])")


def metadata_urls(issuer: str) -> list[str]:
    """Where an issuer's metadata may be, in the order the MCP authorization spec tries them."""
    parts = urlsplit(issuer)
    origin = f"{parts.scheme}://{parts.netloc}"
    path = parts.path.rstrip("/")
    if not path:
        return [f"{origin}/.well-known/oauth-authorization-server", f"{origin}/.well-known/openid-configuration"]
    return [
        f"{origin}/.well-known/oauth-authorization-server{path}",
        f"{origin}/.well-known/openid-configuration{path}",
        f"{origin}{path}/.well-known/openid-configuration",
    ]


def same_issuer(a: str, b: str) -> bool:
    """Issuers compared as strings, a trailing slash aside (Auth0's end with one, most do not)."""
    return a.rstrip("/") == b.rstrip("/")


async def fetch_json(source: str, timeout: float = FETCH_TIMEOUT_S, max_bytes: int = MAX_DOCUMENT_BYTES) -> Any:
    """The JSON document at ``source`` (a URL, or a file path), within ``timeout`` and ``max_bytes``.

    Raises:
        JwksError: unreachable, slow, too big, not 200, not JSON.
    """
    try:
        with anyio.fail_after(timeout):
            data = await (_get(source, max_bytes) if "://" in source else _read(Path(source), max_bytes))
    except TimeoutError:
        raise JwksError(f"no answer within {timeout:g} s") from None
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        raise JwksError("not JSON") from None


async def _get(url: str, max_bytes: int) -> bytes:
    import httpx2

    try:
        async with (
            httpx2.AsyncClient(follow_redirects=False) as client,
            client.stream("GET", url, headers={"Accept": "application/json"}) as response,
        ):
            if response.status_code != 200:
                raise JwksError(f"HTTP status {response.status_code}")
            body = bytearray()
            async for chunk in response.aiter_bytes():  # decoded: a gzip bomb counts as what it inflates to
                body += chunk
                if len(body) > max_bytes:
                    raise JwksError(f"larger than {max_bytes} bytes")
            return bytes(body)
    except httpx2.HTTPError as e:
        raise JwksError(f"cannot fetch: {type(e).__name__}") from None


async def _read(path: Path, max_bytes: int) -> bytes:
    def read() -> bytes:
        with path.expanduser().open("rb") as f:
            data = f.read(max_bytes + 1)
        if len(data) > max_bytes:
            raise JwksError(f"larger than {max_bytes} bytes")
        return data

    try:
        return await anyio.to_thread.run_sync(read)
    except OSError as e:
        raise JwksError(f"cannot read the file: {e.strerror or e}") from None


def parse_keys(document: Any) -> dict[str, dict[str, Any]]:
    """The signing keys of a JWK Set by ``kid`` (a key without one under ``""``); symmetric keys and
    keys for encryption are left out.

    Raises:
        JwksError: not a key set, or no usable key in it.
    """
    keys = document.get("keys") if isinstance(document, dict) else None
    if not isinstance(keys, list):
        raise JwksError('not a JWK Set (no "keys" list)')
    found: dict[str, dict[str, Any]] = {}
    for key in keys[:MAX_KEYS]:
        if not isinstance(key, dict) or key.get("kty") not in ("RSA", "EC", "OKP"):
            continue
        if key.get("use", "sig") != "sig":
            continue
        kid = key.get("kid", "")
        if isinstance(kid, str):
            found.setdefault(kid, key)
    if not found:
        raise JwksError("no RSA, EC or OKP signing key in the set")
    return found


class KeyCache:
    """The issuer's signing keys, fetched when needed (module docstring: when, how often, how long kept).

    ``jwks`` is the set's URL or file; None: found from the issuer's metadata. ``clock`` is for tests.
    """

    def __init__(
        self,
        issuer: str,
        jwks: str | None = None,
        *,
        ttl: float = KEYS_TTL_S,
        refetch_interval: float = REFETCH_INTERVAL_S,
        max_stale: float = MAX_STALE_S,
        fetch_timeout: float = FETCH_TIMEOUT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.issuer = issuer
        self.jwks = jwks
        self.ttl = ttl
        self.refetch_interval = refetch_interval
        self.max_stale = max_stale
        self.fetch_timeout = fetch_timeout
        self.clock = clock
        self.fetches = 0  # key set fetches attempted (tests count them)
        self._keys: dict[str, dict[str, Any]] = {}
        self._fetched_at: float | None = None  # when the keys in hand were fetched
        self._tried_at: float | None = None  # when the last fetch was attempted
        self._lock = anyio.Lock()

    async def key(self, kid: str | None) -> dict[str, Any] | None:
        """The JWK named ``kid`` (None: the token names none, so the set's only key), or None."""
        expired = self._fetched_at is None or self.clock() - self._fetched_at > self.ttl
        # While another request refreshes, a key in hand will do: only one request waits for the issuer.
        if expired and not (self._lock.locked() and self._lookup(kid) is not None):
            await self._refresh()
        found = self._lookup(kid)
        if found is None and self._tried_at is not None and self.clock() - self._tried_at >= self.refetch_interval:
            await self._refresh()  # a key the issuer may have added since
            found = self._lookup(kid)
        return found

    async def prefetch(self) -> int:
        """Fetch the key set now (at the server's start, so a mistyped issuer shows at once): how
        many keys it holds. A failure changes nothing: the first token tries again.

        Raises:
            JwksError: the set could not be had (the message says why).
        """
        async with self._lock:
            keys = await self._fetch()
            self.fetches += 1
            self._keys, self._fetched_at = keys, self.clock()
            self._tried_at = self._fetched_at
            return len(keys)

    def _lookup(self, kid: str | None) -> dict[str, Any] | None:
        if self._fetched_at is None or self.clock() - self._fetched_at > self.ttl + self.max_stale:
            return None  # none yet, or too old to trust
        if kid is None:
            return next(iter(self._keys.values())) if len(self._keys) == 1 else None
        return self._keys.get(kid)

    async def _refresh(self) -> None:
        tried = self._tried_at
        async with self._lock:
            if self._tried_at != tried:
                return  # another request fetched while this one waited: use its answer
            if self._tried_at is not None and self.clock() - self._tried_at < self.refetch_interval:
                return
            self._tried_at = self.clock()
            self.fetches += 1
            try:
                keys = await self._fetch()
            except JwksError as e:
                logger.warning(
                    "oauth.jwks_unavailable: cannot get the issuer's signing keys (%s); %s",
                    e,
                    "tokens are refused until it works" if not self._keys else "using the keys fetched before",
                    extra={"event": "oauth.jwks_unavailable", "reason": str(e), "source": self.jwks or self.issuer},
                )
                return
            self._keys, self._fetched_at = keys, self.clock()
            logger.info(
                "oauth.jwks", extra={"event": "oauth.jwks", "kids": sorted(k[:64] for k in keys), "source": self.jwks}
            )

    async def _fetch(self) -> dict[str, dict[str, Any]]:
        """The key set, metadata included, within one deadline of two fetches.

        Raises:
            JwksError: it could not be had.
        """
        try:
            with anyio.fail_after(2 * self.fetch_timeout):
                return parse_keys(await fetch_json(await self._jwks_source(), self.fetch_timeout))
        except TimeoutError:
            raise JwksError(f"no key set within {2 * self.fetch_timeout:g} s") from None

    async def _jwks_source(self) -> str:
        """The key set's URL or file: ``--jwks``, else the ``jwks_uri`` of the issuer's metadata."""
        if self.jwks is not None:
            return self.jwks
        reasons = []
        for url in metadata_urls(self.issuer):
            try:
                metadata = await fetch_json(url, self.fetch_timeout)
            except JwksError as e:
                reasons.append(f"{url}: {e}")
                continue
            if not isinstance(metadata, dict) or not same_issuer(str(metadata.get("issuer")), self.issuer):
                reasons.append(f"{url}: its issuer is not {self.issuer}")
                continue
            uri = metadata.get("jwks_uri")
            try:
                self.jwks = check_url(uri if isinstance(uri, str) else "", "the metadata's jwks_uri")
            except McpowerError as e:
                reasons.append(f"{url}: {e.message}")
                continue
            return self.jwks
        raise JwksError("no usable issuer metadata: " + "; ".join(reasons))
