"""Fairness between callers: a request rate and a number of searches in flight, per caller name.

Each caller (``callers.Caller.name``: a named token's name, ``oauth:<subject>``, ``token``, ``local``
without authentication) has a token bucket: ``rate`` requests a second on average, ``burst`` at
once. It also has at most ``max_searches`` search calls in flight. A request over either limit is
answered with ``429 Too Many Requests``, a ``Retry-After`` in whole seconds and a JSON-RPC error
body, before it reaches the MCP session: a loop that ignores the answer costs the server the checks
here, never a search. A refusal over the rate is held (at most ``max_hold``) until the caller's next
request would pass, so such a loop cannot make the refusals themselves the load. One caller's
limits never touch another's.

Checked at the HTTP layer, after Gate (gate.py has read the whole body and named the caller):
only there can the answer be a 429 with ``Retry-After``, which HTTP clients and proxies understand;
an MCP middleware could only answer a tool error with a 200. Whether a request is a search is read
from the body Gate holds, looked at only when it names the search tool; a web search page's query
(``/search?q=...``) is a search too, so the pages are no way around the cap.

The tables are bounded: a bucket left alone long enough to have refilled is dropped (it would start
full anyway), and past ``max_callers`` the callers idle longest are dropped first; a caller's
in-flight count lives only while it has searches running.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass

import anyio
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from starlette.datastructures import QueryParams
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from mcpower.server.auth.callers import caller_from_scope
from mcpower.server.auth.gate import replay

logger = logging.getLogger(__name__)

# Callers whose buckets are kept at once: named tokens are few, but OAuth subjects (or a flood of
# them) are not; 10,000 buckets are ~2 MB.
MAX_CALLERS = 10_000
# How long a caller over its search cap is told to wait: a search takes milliseconds to seconds.
BUSY_RETRY_S = 1
# JSON-RPC's "server error" range; the HTTP status (429) is what clients act on.
RATE_LIMITED_CODE = -32029


@dataclass(frozen=True)
class RateLimits:
    """Per-caller limits; ``rate`` 0 turns the request rate off, ``max_searches`` 0 the search cap."""

    rate: float = 20.0
    burst: int = 100
    max_searches: int = 16
    # A refusal over the rate is held until the caller's next request would pass, at most this long:
    # a loop that ignores Retry-After then makes a few requests a second per connection instead of
    # thousands, whose refusals would cost the server more CPU than the searches it is protected from.
    max_hold: float = 0.5

    @property
    def enabled(self) -> bool:
        return self.rate > 0 or self.max_searches > 0


@dataclass
class _Bucket:
    tokens: float
    at: float


class Buckets:
    """A token bucket per key: ``rate`` tokens a second, at most ``burst`` of them."""

    def __init__(
        self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic, max_keys: int = MAX_CALLERS
    ) -> None:
        self.rate = rate
        self.burst = max(1, burst)
        self.clock = clock
        self.max_keys = max_keys
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()  # least recently used first

    def __len__(self) -> int:
        return len(self._buckets)

    def take(self, key: str) -> float:
        """Take one token for ``key``: 0.0 if there was one, else the seconds until there is."""
        now = self.clock()
        self._drop_refilled(now)
        bucket = self._buckets.pop(key, None)
        if bucket is None:
            bucket = _Bucket(float(self.burst), now)
        else:
            bucket.tokens = min(float(self.burst), bucket.tokens + max(0.0, now - bucket.at) * self.rate)
            bucket.at = now
        self._buckets[key] = bucket  # now the most recently used
        while len(self._buckets) > self.max_keys:
            self._buckets.popitem(last=False)
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
            return 0.0
        return (1.0 - bucket.tokens) / self.rate

    def peek(self, key: str) -> float:
        """The seconds until ``key`` has a token (0.0: it has one now), taking none."""
        bucket = self._buckets.get(key)
        if bucket is None:
            return 0.0
        tokens = min(float(self.burst), bucket.tokens + max(0.0, self.clock() - bucket.at) * self.rate)
        return 0.0 if tokens >= 1.0 else (1.0 - tokens) / self.rate

    def _drop_refilled(self, now: float) -> None:
        """Forget the least recently used buckets that are full again: they would start full anyway."""
        full_after = self.burst / self.rate
        while self._buckets:
            key, oldest = next(iter(self._buckets.items()))
            if now - oldest.at < full_after:
                return
            del self._buckets[key]


class InFlight:
    """How many searches each key has running; keys with none are not kept."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._running: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._running)

    def enter(self, key: str) -> bool:
        """Count one more search for ``key``, unless it has ``limit`` running already."""
        running = self._running.get(key, 0)
        if running >= self.limit:
            return False
        self._running[key] = running + 1
        return True

    def leave(self, key: str) -> None:
        running = self._running.get(key, 0) - 1
        if running > 0:
            self._running[key] = running
        else:
            self._running.pop(key, None)


Refused = Callable[[str, str], None]  # (caller name, "rate" or "searches"): metrics count refusals
# Another room's own answer to a refused request (the web pages: a readable page for a browser), given
# the scope and the refusal in plain words; None: the JSON-RPC body. Retry-After is added here.
PageRefusal = Callable[[Scope, str], Response | None]


class RateLimit:
    """ASGI middleware after Gate: the per-caller limits above on every path but ``exempt_paths``
    (``/healthz`` and ``/metrics``: a probe or a scrape never spends a caller's budget, and is cheap).
    ``limit_anonymous`` False (a server with tokens): requests no token authenticated, which Gate
    lets through to its open paths only (probes, the login page, static files), are not limited —
    else anyone could use up the one budget they would share and keep people from logging in.

    A search is a POST to ``mcp_path`` whose JSON-RPC body calls one of ``search_tools``, or a GET
    of one of ``search_pages`` (the web search page) with a query ``q``. A refusal
    is a JSON-RPC error body, unless ``page_refusal`` answers the request otherwise.
    """

    def __init__(
        self,
        app: ASGIApp,
        limits: RateLimits,
        *,
        mcp_path: str,
        search_tools: Collection[str],
        exempt_paths: Collection[str] = (),
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
        on_refused: Refused | None = None,
        limit_anonymous: bool = True,
        page_refusal: PageRefusal | None = None,
        search_pages: Collection[str] = (),
    ) -> None:
        self.app = app
        self.limits = limits
        self.buckets = Buckets(limits.rate, limits.burst, clock) if limits.rate > 0 else None
        self.searches = InFlight(limits.max_searches) if limits.max_searches > 0 else None
        self.mcp_path = mcp_path
        self.search_tools = frozenset(search_tools)
        self.exempt_paths = frozenset(exempt_paths)
        self.on_refused = on_refused
        self.sleep = sleep
        self.limit_anonymous = limit_anonymous
        self.page_refusal = page_refusal
        self.search_pages = frozenset(search_pages)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        exempt = scope["type"] != "http" or scope["path"] in self.exempt_paths
        if exempt or (not self.limit_anonymous and not isinstance(scope.get("user"), AuthenticatedUser)):
            await self.app(scope, receive, send)
            return
        name = caller_from_scope(scope).name
        if self.buckets is not None:
            wait = self.buckets.take(name)
            if wait > 0:
                await self.sleep(min(wait, self.limits.max_hold))
                await self._refuse(scope, receive, send, name, "rate", wait, None)
                return
        if self.searches is not None and self._searches_page(scope):
            await self._search(scope, receive, send, name, None)
            return
        if self.searches is None or scope["path"] != self.mcp_path or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        # Gate hands on the whole body as one message: look at it, then give it on unchanged.
        message = await receive()
        request_id, is_search = self._peek(message.get("body", b""))
        again = replay(message, receive)
        if not is_search:
            await self.app(scope, again, send)
            return
        await self._search(scope, again, send, name, request_id)

    async def _search(self, scope: Scope, receive: Receive, send: Send, name: str, request_id: object) -> None:
        """Pass a search on, counted among the caller's searches in flight, or refuse it over the cap."""
        assert self.searches is not None
        if not self.searches.enter(name):
            await self._refuse(scope, receive, send, name, "searches", BUSY_RETRY_S, request_id)
            return
        try:
            await self.app(scope, receive, send)
        finally:
            self.searches.leave(name)

    def _searches_page(self, scope: Scope) -> bool:
        """Whether ``scope`` GETs a search page with a query (read as the page reads it)."""
        if scope["path"] not in self.search_pages or scope["method"] not in ("GET", "HEAD"):
            return False
        return bool(QueryParams(scope.get("query_string", b"")).get("q", "").strip())

    def _peek(self, body: bytes) -> tuple[object, bool]:
        """The JSON-RPC request's id, and whether it calls a search tool (parsed only if it may)."""
        if b"tools/call" not in body or not any(t.encode() in body for t in self.search_tools):
            return None, False
        try:
            data = json.loads(body)
        except (ValueError, RecursionError):
            return None, False
        if not isinstance(data, dict):
            return None, False
        params = data.get("params")
        name = params.get("name") if isinstance(params, dict) else None
        request_id = data.get("id")
        request_id = request_id if isinstance(request_id, str | int) and not isinstance(request_id, bool) else None
        return request_id, data.get("method") == "tools/call" and name in self.search_tools

    async def _refuse(
        self, scope: Scope, receive: Receive, send: Send, name: str, limit: str, wait: float, request_id: object
    ) -> None:
        retry = max(1, math.ceil(wait))
        if limit == "rate":
            message = f"too many requests: this server allows {self.limits.rate:g} a second per caller"
        else:
            message = f"too many searches at once: this server allows {self.limits.max_searches} per caller"
        message += f"; retry after {retry} s (the operator sets the limits: docs/team.md)"
        logger.info(
            "http.rate_limited",
            extra={"event": "http.rate_limited", "caller": name, "limit": limit, "retry_after_s": retry},
        )
        if self.on_refused is not None:
            self.on_refused(name, limit)
        response = self.page_refusal(scope, message) if self.page_refusal is not None else None
        if response is not None:
            response.headers["retry-after"] = str(retry)
            await response(scope, receive, send)
            return
        error = {"code": RATE_LIMITED_CODE, "message": message, "data": {"limit": limit, "retry_after": retry}}
        body = json.dumps({"jsonrpc": "2.0", "id": request_id, "error": error}).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"retry-after", str(retry).encode()),
        ]
        await send({"type": "http.response.start", "status": 429, "headers": headers})
        await send({"type": "http.response.body", "body": body})
