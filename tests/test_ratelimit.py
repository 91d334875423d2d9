"""Rate limits and fairness (server/auth/ratelimit.py): a token bucket and a cap on searches in flight per
caller name; 429 with Retry-After; one caller's exhaustion never touches another's.

The buckets run on an injected clock (no test sleeps). Over HTTP: in process through the ASGI
app with four named callers (a test verifier), and once over a real socket (`serve --http`).
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from asgi_fixtures import BASE, MCP_HEADERS, app_serving, asgi_client
from http_fixtures import TOKEN, HttpServer, write_http_launcher
from mcp.server.auth.provider import AccessToken
from starlette.responses import PlainTextResponse

import mcpower.search
from mcpower.registry import Registry
from mcpower.server.auth.ratelimit import Buckets, InFlight, RateLimit, RateLimits
from mcpower.server.auth.tokens import NamedToken, digest, new_secret, write_tokens
from mcpower.server.http import HttpOptions

pytestmark = pytest.mark.anyio

# Four callers, as named tokens would be: token -> name.
CALLERS = {f"token-of-{name}-0123456789": name for name in ("alice", "bob", "carol", "runaway")}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class NamedTokens:
    """A TokenVerifier for the four test callers, each reading every dataset and /metrics."""

    async def verify_token(self, token: str) -> AccessToken | None:
        name = CALLERS.get(token)
        return AccessToken(token=token, client_id=name, scopes=["mcpower:read", "mcpower:metrics"]) if name else None


# ---------------------------------------------------------------- the bucket and the cap


def test_a_bucket_allows_the_burst_then_the_rate() -> None:
    clock = Clock()
    buckets = Buckets(rate=2.0, burst=5, clock=clock)
    assert [buckets.take("a") for _ in range(5)] == [0.0] * 5
    assert buckets.take("a") == pytest.approx(0.5)  # empty: one token in half a second
    clock.now += 0.5
    assert buckets.take("a") == 0.0
    assert buckets.take("a") > 0
    clock.now += 100  # refills to the burst, never beyond it
    assert [buckets.take("a") for _ in range(6)][-2:] == [0.0, pytest.approx(0.5)]


def test_callers_have_buckets_of_their_own() -> None:
    buckets = Buckets(rate=1.0, burst=2, clock=Clock())
    assert [buckets.take("runaway") for _ in range(3)][-1] > 0
    assert buckets.take("alice") == 0.0


def test_the_table_stays_bounded_and_drops_refilled_buckets_first() -> None:
    clock = Clock()
    buckets = Buckets(rate=10.0, burst=10, clock=clock, max_keys=100)
    for i in range(1000):  # a flood of callers: at most max_keys kept
        buckets.take(f"subject-{i}")
    assert len(buckets) == 100
    clock.now += 1.0  # every bucket is full again: dropped as the next caller comes
    buckets.take("alice")
    assert len(buckets) == 1
    # A drained bucket is not forgotten while it is still refilling.
    for _ in range(10):
        buckets.take("runaway")
    clock.now += 0.5
    buckets.take("bob")
    assert buckets.take("runaway") == 0.0  # half refilled: 5 tokens, not a fresh 10
    assert [buckets.take("runaway") for _ in range(4)] == [0.0] * 4
    assert buckets.take("runaway") > 0


def test_in_flight_counts_per_caller_and_forgets_idle_ones() -> None:
    running = InFlight(2)
    assert running.enter("a") and running.enter("a")
    assert not running.enter("a")
    assert running.enter("b")
    running.leave("a")
    assert running.enter("a")
    for key in ("a", "a", "b"):
        running.leave(key)
    assert len(running) == 0


# ---------------------------------------------------------------- over HTTP, in process


@asynccontextmanager
async def serving(registry: Registry, limits: RateLimits) -> AsyncIterator[Any]:
    async with app_serving(registry, HttpOptions(verifier=NamedTokens(), rate_limits=limits)) as (_, app):
        yield app


def as_caller(app: Any, name: str) -> httpx2.AsyncClient:
    return asgi_client(app, next(t for t, n in CALLERS.items() if n == name), **MCP_HEADERS)


def tool_call(query: str, request_id: int = 1, tool: str = "knowledge_search") -> dict[str, Any]:
    arguments = {"query": query} if tool == "knowledge_search" else {}
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    }


async def session(h: httpx2.AsyncClient) -> dict[str, str]:
    """A handshake; the headers of a request in that session."""
    init = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    response = await h.post("/mcp", json=init)
    assert response.status_code == 200, response.text
    headers = {"mcp-session-id": response.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
    assert (
        await h.post("/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
    ).status_code == 202
    return headers


async def test_over_the_rate_a_caller_gets_429_with_retry_after_and_others_do_not(registry: Registry) -> None:
    limits = RateLimits(rate=0.01, burst=6, max_searches=0, max_hold=0)  # no refill within the test
    async with serving(registry, limits) as app, as_caller(app, "runaway") as runaway, as_caller(app, "alice") as alice:
        headers = await session(runaway)  # 2 requests
        statuses = [(await runaway.post("/mcp", json=tool_call("pumpkin", i), headers=headers)) for i in range(6)]
        assert [r.status_code for r in statuses] == [200] * 4 + [429] * 2
        refused = statuses[-1]
        assert int(refused.headers["retry-after"]) >= 1
        body = refused.json()
        assert body["jsonrpc"] == "2.0" and body["error"]["data"]["limit"] == "rate"
        assert "retry after" in body["error"]["message"]
        # The other callers are untouched; probes and scrapes are not counted against anyone.
        alice_headers = await session(alice)
        ok = await alice.post("/mcp", json=tool_call("pumpkin"), headers=alice_headers)
        assert ok.status_code == 200 and not ok.json()["result"]["isError"]
        assert (await runaway.get("/healthz")).status_code == 200
        assert (await runaway.get("/metrics")).status_code == 200


@pytest.fixture
def blocked_searches(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[list[str], threading.Event]]:
    """Searches record their query, then wait until the event is set (at teardown at the latest)."""
    started: list[str] = []
    release = threading.Event()
    real = mcpower.search.search

    def search(registry: Registry, query: str, **kwargs: Any) -> Any:
        started.append(query)
        release.wait(30)
        return real(registry, query, **kwargs)

    monkeypatch.setattr(mcpower.search, "search", search)
    yield started, release
    release.set()


async def test_searches_in_flight_are_capped_per_caller(
    registry: Registry, blocked_searches: tuple[list[str], threading.Event]
) -> None:
    started, release = blocked_searches
    limits = RateLimits(rate=0, max_searches=2)
    async with serving(registry, limits) as app, as_caller(app, "runaway") as runaway, as_caller(app, "bob") as bob:
        headers = await session(runaway)
        answers: list[httpx2.Response] = []
        ids = {"one": 1, "two": 2, "bob's": 3}

        async def call(h: httpx2.AsyncClient, query: str, headers: dict[str, str]) -> None:
            answers.append(await h.post("/mcp", json=tool_call(query, ids[query]), headers=headers))

        async with anyio.create_task_group() as tg:
            tg.start_soon(call, runaway, "one", headers)
            tg.start_soon(call, runaway, "two", headers)
            with anyio.fail_after(20):
                while len(started) < 2:
                    await anyio.sleep(0.01)
            # Two running: a third search of the same caller is refused at once, without running ...
            third = await runaway.post("/mcp", json=tool_call("three", 9), headers=headers)
            assert third.status_code == 429 and third.headers["retry-after"] == "1"
            assert third.json()["id"] == 9 and third.json()["error"]["data"]["limit"] == "searches"
            # ... other requests of that caller are not searches, and pass ...
            listed = await runaway.post("/mcp", json=tool_call("", 10, "knowledge_list_datasets"), headers=headers)
            assert listed.status_code == 200
            # ... and another caller's search runs.
            tg.start_soon(call, bob, "bob's", await session(bob))
            with anyio.fail_after(20):
                while len(started) < 3:
                    await anyio.sleep(0.01)
            release.set()
        assert sorted(started) == ["bob's", "one", "two"]
        assert [r.status_code for r in answers] == [200, 200, 200]
        # Done: the caller may search again.
        assert (await runaway.post("/mcp", json=tool_call("four"), headers=headers)).status_code == 200


async def test_search_pages_count_among_a_callers_searches_in_flight(
    registry: Registry, blocked_searches: tuple[list[str], threading.Event]
) -> None:
    """The web search page runs the same search: a caller cannot pass the cap through the pages."""
    started, release = blocked_searches
    limits = RateLimits(rate=0, max_searches=2)
    async with serving(registry, limits) as app, as_caller(app, "runaway") as runaway, as_caller(app, "bob") as bob:
        headers = await session(runaway)
        answers: list[httpx2.Response] = []

        async def page(h: httpx2.AsyncClient, query: str) -> None:
            answers.append(await h.get("/search", params={"q": query}))

        async with anyio.create_task_group() as tg:
            tg.start_soon(page, runaway, "one")
            tg.start_soon(page, runaway, "two")
            with anyio.fail_after(20):
                while len(started) < 2:
                    await anyio.sleep(0.01)
            # Two pages searching: a third page, its JSON twin and an MCP search are refused ...
            third = await runaway.get("/search", params={"q": "three"})
            assert third.status_code == 429 and third.headers["retry-after"] == "1"
            assert "too many searches at once" in third.text
            twin = await runaway.get("/search", params={"q": "three", "format": "json"})
            assert twin.status_code == 429 and twin.json()["error"]["data"]["limit"] == "searches"
            mcp = await runaway.post("/mcp", json=tool_call("three", 9), headers=headers)
            assert mcp.status_code == 429 and mcp.json()["error"]["data"]["limit"] == "searches"
            # ... the page without a query is no search, and another caller's page searches.
            assert (await runaway.get("/search", params={"q": " "})).status_code == 200
            tg.start_soon(page, bob, "bob's")
            with anyio.fail_after(20):
                while len(started) < 3:
                    await anyio.sleep(0.01)
            release.set()
        assert sorted(started) == ["bob's", "one", "two"]
        assert [r.status_code for r in answers] == [200, 200, 200]
        assert (await runaway.get("/search", params={"q": "four"})).status_code == 200  # done: again


async def test_limits_off(registry: Registry) -> None:
    async with serving(registry, RateLimits(rate=0, burst=1, max_searches=0)) as app, as_caller(app, "alice") as h:
        headers = await session(h)
        statuses = {
            (await h.post("/mcp", json=tool_call("pumpkin", i), headers=headers)).status_code for i in range(30)
        }
        assert statuses == {200}


async def test_a_browser_over_the_rate_gets_a_readable_page(registry: Registry) -> None:
    """A page a browser GETs over the rate: the error page, 429, Retry-After and the pages' security
    headers; its JSON twin and /mcp keep the JSON-RPC body."""
    limits = RateLimits(rate=0.01, burst=3, max_searches=0, max_hold=0)  # no refill within the test
    async with serving(registry, limits) as app, as_caller(app, "runaway") as h:
        assert [(await h.get("/")).status_code for _ in range(3)] == [200] * 3
        refused = await h.get("/search", params={"q": "pumpkin"}, headers={"Accept": "text/html"})
        assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1
        assert refused.headers["content-type"].startswith("text/html")
        assert "default-src" in refused.headers["content-security-policy"]
        assert refused.headers["x-frame-options"] == "DENY"
        assert "Too many requests" in refused.text and "RATE_LIMITED" in refused.text
        assert "retry after" in refused.text and '"jsonrpc"' not in refused.text
        twin = await h.get("/search", params={"q": "pumpkin", "format": "json"})
        assert twin.status_code == 429 and twin.json()["error"]["data"]["limit"] == "rate"
        mcp = await h.post("/mcp", json=tool_call("pumpkin"))
        assert mcp.status_code == 429 and mcp.json()["jsonrpc"] == "2.0"


async def test_a_refusal_over_the_rate_is_held_until_the_next_request_would_pass() -> None:
    """A loop that ignores Retry-After is slowed to the rate instead of costing the server a refusal
    per round trip: the refusal waits for the caller's next token, at most ``max_hold``."""
    clock, held = Clock(), []

    async def sleep(seconds: float) -> None:
        held.append(seconds)

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await PlainTextResponse("ok")(scope, receive, send)

    limits = RateLimits(rate=4.0, burst=1, max_searches=0, max_hold=0.5)
    limited = RateLimit(app, limits, mcp_path="/mcp", search_tools=[], clock=clock, sleep=sleep)
    async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=limited), base_url=BASE) as h:
        statuses = [(await h.get("/mcp")).status_code for _ in range(2)]
        limits_slow = RateLimits(rate=0.1, burst=1, max_searches=0, max_hold=0.5)
        slow = RateLimit(app, limits_slow, mcp_path="/mcp", search_tools=[], clock=clock, sleep=sleep)
        async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=slow), base_url=BASE) as s:
            slow_statuses = [(await s.get("/mcp")).status_code for _ in range(2)]
    assert statuses == [200, 429] and slow_statuses == [200, 429]
    assert held == [pytest.approx(0.25), 0.5]  # the next token in 1/4 s; in 10 s, held 0.5 s at most


async def test_requests_without_a_token_on_a_server_with_tokens_share_no_budget() -> None:
    """Gate lets requests without a token reach its open paths only (probes, the login page, static
    files): on a server with tokens they are not limited, so nobody can spend a budget they would all
    share; without tokens, every client is the one local caller, limited as one."""
    clock, held = Clock(), []

    async def sleep(seconds: float) -> None:
        held.append(seconds)

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await PlainTextResponse("ok")(scope, receive, send)

    limits = RateLimits(rate=0.01, burst=2, max_searches=0)
    statuses = {}
    for limit_anonymous in (False, True):
        limited = RateLimit(
            app, limits, mcp_path="/mcp", search_tools=[], clock=clock, sleep=sleep, limit_anonymous=limit_anonymous
        )
        async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=limited), base_url=BASE) as h:
            statuses[limit_anonymous] = [(await h.get("/login")).status_code for _ in range(5)]
    assert statuses == {False: [200] * 5, True: [200, 200, 429, 429, 429]}


# ---------------------------------------------------------------- over a real socket


def test_429_and_retry_after_over_real_http(datasets: Path, tmp_path: Path) -> None:
    server = HttpServer(write_http_launcher(tmp_path), datasets, "--rate-limit", "0.001", "--rate-burst", "3")
    try:
        with httpx2.Client(base_url=server.base, headers={**MCP_HEADERS, "Authorization": f"Bearer {TOKEN}"}) as h:
            ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
            statuses = [h.post("/mcp", json=ping) for _ in range(4)]
            assert all(r.status_code != 429 for r in statuses[:3])  # the burst
            refused = statuses[3]
            assert refused.status_code == 429
            assert int(refused.headers["retry-after"]) >= 1
            assert refused.json()["error"]["data"] == {
                "limit": "rate",
                "retry_after": int(refused.headers["retry-after"]),
            }
            assert h.get("/healthz").status_code == 200  # not counted
        record = server.wait_event("http.rate_limited")
        assert record["caller"] == "token" and record["limit"] == "rate"
    finally:
        server.stop()


def test_named_callers_have_their_own_budgets_over_real_http(datasets: Path, tmp_path: Path) -> None:
    """`serve --http --tokens-file`: one named caller over its rate gets 429s, another is served."""
    secrets = {name: new_secret() for name in ("runaway", "alice")}
    now = datetime.now(timezone.utc)
    tokens = [NamedToken(name, digest(secret), ("*",), now) for name, secret in secrets.items()]
    tokens_file = tmp_path / "tokens.json"
    write_tokens(tokens_file, tokens)
    limits = ("--rate-limit", "0.001", "--rate-burst", "3", "--tokens-file", str(tokens_file))
    server = HttpServer(write_http_launcher(tmp_path), datasets, *limits, token=None)
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    try:
        with httpx2.Client(base_url=server.base, headers=MCP_HEADERS) as h:

            def status(name: str) -> int:
                return h.post("/mcp", json=ping, headers={"Authorization": f"Bearer {secrets[name]}"}).status_code

            runaway = [status("runaway") for _ in range(6)]
            assert runaway[3:] == [429] * 3 and 429 not in runaway[:3]
            assert 429 not in [status("alice") for _ in range(3)]  # a budget of its own
            assert status("alice") == 429
        server.wait_event("http.rate_limited", caller="alice")  # the last one logged: all are in
        refused = [r["caller"] for r in server.records if r.get("event") == "http.rate_limited"]
        assert refused == ["runaway"] * 3 + ["alice"]
    finally:
        server.stop()
