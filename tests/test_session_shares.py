"""Each caller's share of the HTTP session cap and of the streams held open (issue 26 item 2,
server/sessions.py): one caller opening sessions and holding their streams exhausts its own share,
never another caller's room.

In process: the app is driven directly (a GET stream is a response that never ends, which an
HTTP client library would wait out), each request from the caller its bearer token names.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import anyio
import pytest
from asgi_fixtures import INITIALIZE, MCP_HEADERS, app_serving
from mcp.shared.inbound import CLIENT_CAPABILITIES_META_KEY, MCP_METHOD_HEADER, PROTOCOL_VERSION_META_KEY
from mcp_types.version import LATEST_MODERN_VERSION
from test_ratelimit import CALLERS, NamedTokens

from mcpower.registry import Registry
from mcpower.server.auth.ratelimit import RateLimits
from mcpower.server.http import HttpOptions

pytestmark = pytest.mark.anyio

TOKEN_OF = {name: token for token, name in CALLERS.items()}
WAIT_S = 30.0


@asynccontextmanager
async def serving(registry: Registry, **options: Any) -> AsyncIterator[Any]:
    no_limits = RateLimits(rate=0, max_searches=0)
    async with app_serving(registry, HttpOptions(verifier=NamedTokens(), rate_limits=no_limits, **options)) as (_, app):
        yield app


def scope_of(method: str, caller: str, headers: dict[str, str]) -> dict[str, Any]:
    sent = {**headers, "host": "127.0.0.1:8765", "authorization": f"Bearer {TOKEN_OF[caller]}"}
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": "/mcp",
        "raw_path": b"/mcp",
        "query_string": b"",
        "root_path": "",
        "headers": [(k.lower().encode(), v.encode()) for k, v in sent.items()],
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 8765),
    }


class Streams:
    """Requests held open against the app: each answers its status, then stays open until the end."""

    def __init__(self, app: Any, tasks: anyio.abc.TaskGroup) -> None:
        self.app = app
        self.tasks = tasks
        self.gone = anyio.Event()

    async def request(self, method: str, caller: str, headers: dict[str, str], body: Any = None) -> tuple[int, Any]:
        """The status and headers of a request, once its response has started (a stream stays open)."""
        started = anyio.Event()
        answer: dict[str, Any] = {}
        data = json.dumps(body).encode() if body is not None else b""
        given = False

        async def receive() -> dict[str, Any]:
            nonlocal given
            if not given:
                given = True
                return {"type": "http.request", "body": data, "more_body": False}
            await self.gone.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                answer["status"] = message["status"]
                answer["headers"] = {k.decode(): v.decode() for k, v in message.get("headers", [])}
                started.set()

        self.tasks.start_soon(self.app, scope_of(method, caller, headers), receive, send)
        with anyio.fail_after(WAIT_S):
            await started.wait()
        return answer["status"], answer["headers"]

    async def session(self, caller: str) -> tuple[int, str | None]:
        """An initialize (and the initialized notification): its status and the session id."""
        status, headers = await self.request("POST", caller, MCP_HEADERS, INITIALIZE)
        session_id = headers.get("mcp-session-id")
        if status == 200:
            assert session_id is not None
            note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
            assert (await self.request("POST", caller, in_session(session_id), note))[0] == 202
        return status, session_id

    async def stream(self, caller: str, session_id: str) -> int:
        """The session's GET stream, held open: its status."""
        headers = {**in_session(session_id), "accept": "text/event-stream"}
        return (await self.request("GET", caller, headers))[0]

    async def listen(self, caller: str) -> int:
        """A subscriptions/listen of the stateless revision (no session), held open: its status."""
        headers = {
            "accept": "application/json, text/event-stream",
            "content-type": "application/json",
            "mcp-protocol-version": LATEST_MODERN_VERSION,
            MCP_METHOD_HEADER: "subscriptions/listen",
        }
        meta = {PROTOCOL_VERSION_META_KEY: LATEST_MODERN_VERSION, CLIENT_CAPABILITIES_META_KEY: {}}
        params = {"_meta": meta, "notifications": {"resourcesListChanged": True}}
        body = {"jsonrpc": "2.0", "id": 9, "method": "subscriptions/listen", "params": params}
        return (await self.request("POST", caller, headers, body))[0]


def in_session(session_id: str) -> dict[str, str]:
    return {**MCP_HEADERS, "mcp-session-id": session_id, "mcp-protocol-version": "2025-11-25"}


@asynccontextmanager
async def streams(app: Any) -> AsyncIterator[Streams]:
    async with AsyncExitStack() as stack:
        tasks = await stack.enter_async_context(anyio.create_task_group())
        held = Streams(app, tasks)
        try:
            yield held
        finally:
            held.gone.set()  # every held request's client leaves
            tasks.cancel_scope.cancel()


async def test_a_caller_holding_its_streams_open_cannot_keep_another_from_initializing(registry: Registry) -> None:
    async with serving(registry, max_sessions=8, max_sessions_per_caller=2) as app, streams(app) as s:
        answers = []
        for _ in range(8):  # the runaway tries to take the whole cap, each session's stream held open
            status, session_id = await s.session("runaway")
            answers.append(status)
            if session_id is not None:
                assert await s.stream("runaway", session_id) == 200
        assert answers == [200, 200] + [429] * 6  # its share, no more: both its sessions are busy
        for caller in ("alice", "bob", "carol"):  # the others still open sessions and hold their streams
            status, session_id = await s.session(caller)
            assert status == 200 and session_id is not None
            assert await s.stream(caller, session_id) == 200


async def test_at_the_cap_the_caller_holding_the_most_makes_way(registry: Registry) -> None:
    async with serving(registry, max_sessions=4, max_sessions_per_caller=3) as app, streams(app) as s:
        alice = await s.session("alice")  # the oldest: first to go by age alone
        runaway = [await s.session("runaway") for _ in range(3)]  # idle: no stream
        assert [status for status, _ in [alice, *runaway]] == [200] * 4
        status, _ = await s.session("bob")  # full: one of the runaway's idle sessions ends, not alice's
        assert status == 200
        ping = {"jsonrpc": "2.0", "id": 5, "method": "ping"}
        assert (await s.request("POST", "alice", in_session(str(alice[1])), ping))[0] == 200
        gone = [(await s.request("POST", "runaway", in_session(str(sid)), ping))[0] for _, sid in runaway]
        assert sorted(gone) == [200, 200, 404]


async def test_held_streams_are_shared_per_caller_with_or_without_a_session(registry: Registry) -> None:
    async with serving(registry, max_sessions=8, max_sessions_per_caller=4, max_streams_per_caller=1) as app:
        async with streams(app) as s:
            (_, first), (_, second) = await s.session("runaway"), await s.session("runaway")
            assert first is not None and second is not None
            assert await s.stream("runaway", first) == 200
            assert await s.stream("runaway", second) == 429  # its one stream is held
            assert await s.listen("runaway") == 429  # a stateless listen is a held stream too
            _, bobs = await s.session("bob")
            assert bobs is not None and await s.stream("bob", bobs) == 200
        async with streams(app) as s:  # once the streams have ended, they count no more
            assert await s.listen("runaway") == 200
