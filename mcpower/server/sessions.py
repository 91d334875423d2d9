"""Room for new HTTP sessions: at the cap, an idle session makes way rather than the newcomer.

The SDK refuses a new session with 503 while ``max_sessions`` are open, until one ends or expires
(30 minutes idle by default): ``max_sessions`` bare ``initialize`` calls, which need no token on
loopback, would lock every other client out for that long. :class:`SessionRoom` keeps the same cap
by ending an idle session instead, in this order:

1. sessions that never had a request answered after their handshake (``initialize`` and the
   ``initialized`` notification), oldest first: what a flood of bare handshakes leaves;
2. then the session whose last request ended longest ago.

A session with a request in flight (an open GET stream included) is never ended; only when every
session has one does a newcomer get 503. An ended session's id gets 404, and MCP clients start a
new session on a 404.

Each caller (callers.py: a token's name, ``oauth:<sub>``) has a share of the cap, ``per_caller``
(a quarter of it by default): at its share a caller's new session ends one of its own idle ones,
and with none idle it gets ``429`` — so a caller that opens sessions and holds their streams open
exhausts its own share, never another's room. When the cap itself is reached, the idle session
ended is one of the caller holding the most. Streams held open — ``GET`` streams of sessions, and
``subscriptions/listen`` requests of the stateless protocol revision, which no session bounds —
are counted per caller too (``streams_per_caller``; past it, ``429``). The callers in ``unshared``
have the whole cap: ``local`` (on a server without tokens every client is that one caller) and the
operator's single ``MCPOWER_TOKEN`` (``token``: it may do anything, and a team that shares it is one
caller, as it always was).

The one private name used is ``StreamableHTTPSessionManager._server_instances``, the sessions that
are open: the manager has no public view of them. A session is ended as its idle timeout would
end it, by cancelling its transport's ``idle_scope``.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass
from typing import Literal

from mcp.server.streamable_http import MCP_SESSION_ID_HEADER, StreamableHTTPServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mcpower.server.auth.callers import caller_from_scope
from mcpower.server.auth.gate import replay

logger = logging.getLogger(__name__)

LISTEN = "subscriptions/listen"  # the stateless revision's held stream


@dataclass
class _Use:
    caller: str
    last: float  # time.monotonic() when its last request ended (opened, for a new one)
    answered: bool = False  # a request carrying its id got a 200 (a result, or a GET stream)
    in_flight: int = 0


def _ending(transport: StreamableHTTPServerTransport) -> bool:
    scope = transport.idle_scope
    return transport.is_terminated or (scope is not None and scope.cancel_called)


class SessionRoom:
    """ASGI middleware before the SDK's Streamable HTTP endpoint at ``path``: tracks each session's
    use and makes room for a new one as the module says. Set the manager's own ``max_sessions``
    above ``max_sessions`` (an ended session leaves the manager a moment after it is ended).
    ``per_caller`` and ``streams_per_caller``: each caller's share (None: the whole cap, no bound)."""

    def __init__(
        self,
        app: ASGIApp,
        manager: StreamableHTTPSessionManager,
        max_sessions: int,
        path: str,
        per_caller: int | None = None,
        streams_per_caller: int | None = None,
        unshared: Collection[str] = (),
    ) -> None:
        self.app = app
        self.manager = manager
        self.max_sessions = max_sessions
        self.path = path
        self.per_caller = min(per_caller or max_sessions, max_sessions)
        self.streams_per_caller = streams_per_caller
        self.unshared = frozenset(unshared)
        self._uses: dict[str, _Use] = {}
        self._opening: Counter[str] = Counter()  # new-session requests being served, per caller
        self._streams: Counter[str] = Counter()  # streams held open, per caller

    def open_sessions(self) -> int:
        """How many sessions are open now (for metrics)."""
        return sum(1 for t in self.manager._server_instances.values() if not _ending(t))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != self.path:
            await self.app(scope, receive, send)
            return
        caller = caller_from_scope(scope).name
        headers = Headers(scope=scope)
        session_id = headers.get(MCP_SESSION_ID_HEADER)
        if session_id is None:
            version = headers.get("mcp-protocol-version")
            if scope["method"] == "POST" and (version is None or version in HANDSHAKE_PROTOCOL_VERSIONS):
                await self._open(scope, receive, send, caller)
            elif scope["method"] == "POST":  # a later revision's request, served without a session
                message = await receive()
                again = replay(message, receive)
                if _listens(message.get("body", b"")):
                    await self._held(scope, again, send, caller)
                else:
                    await self.app(scope, again, send)
            else:
                await self.app(scope, receive, send)
            return
        use = self._uses.get(session_id)
        if use is None:  # unknown, ended or expired: the SDK answers 404
            await self.app(scope, receive, send)
            return
        use.in_flight += 1
        status: list[int] = []
        try:
            if scope["method"] == "GET":  # the session's stream, held open
                await self._held(scope, receive, _watch(send, status), caller)
            else:
                await self.app(scope, receive, _watch(send, status))
        finally:
            use.in_flight -= 1
            if status and status[0] < 400:
                use.last = time.monotonic()
                use.answered = use.answered or status[0] == 200

    async def _held(self, scope: Scope, receive: Receive, send: Send, caller: str) -> None:
        """A stream the client holds open, counted among the caller's, or refused past its share."""
        bounded = self.streams_per_caller is not None and caller not in self.unshared
        if bounded and self._streams[caller] >= (self.streams_per_caller or 0):
            logger.warning(
                "http.streams_busy",
                extra={"event": "http.streams_busy", "caller": caller, "max_streams": self.streams_per_caller},
            )
            message = f"too many streams held open: this server allows {self.streams_per_caller} per caller"
            await _refuse(429, message + "; close one first")(scope, receive, send)
            return
        self._streams[caller] += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self._streams[caller] -= 1
            if not self._streams[caller]:
                del self._streams[caller]

    async def _open(self, scope: Scope, receive: Receive, send: Send, caller: str) -> None:
        room = self._make_room(caller)
        if room != "open":
            logger.warning(
                "http.sessions_busy",
                extra={
                    "event": "http.sessions_busy",
                    "caller": caller,
                    "full": room,
                    "max_sessions": self.max_sessions if room == "server" else self.per_caller,
                },
            )
            if room == "caller":
                message = (
                    f"too many open sessions: this server allows {self.per_caller} per caller, and each of yours "
                    "has a request or stream in flight; close one (DELETE) first"
                )
                await _refuse(429, message)(scope, receive, send)
            else:
                await _refuse(503, "Too many open sessions")(scope, receive, send)
            return
        self._opening[caller] += 1
        status: list[int] = []
        session: list[str] = []
        try:
            await self.app(scope, receive, _watch(send, status, session))
        finally:
            self._opening[caller] -= 1
            if not self._opening[caller]:
                del self._opening[caller]
            if status and status[0] < 400 and session:
                self._uses[session[0]] = _Use(caller, last=time.monotonic())

    def _make_room(self, caller: str) -> Literal["open", "caller", "server"]:
        """Whether a session of ``caller`` may open, after ending an idle one if a cap is reached
        ("caller": its share is full of busy sessions; "server": the cap is)."""
        instances = self.manager._server_instances
        for gone in [s for s in self._uses if s not in instances]:
            del self._uses[gone]
        live = {s: t for s, t in instances.items() if s in self._uses and not _ending(t)}
        idle = [s for s, t in live.items() if self._uses[s].in_flight == 0 and t.idle_scope is not None]
        mine = [s for s in live if self._uses[s].caller == caller]
        if caller not in self.unshared and len(mine) + self._opening[caller] >= self.per_caller:
            own_idle = [s for s in idle if self._uses[s].caller == caller]
            if not own_idle:
                return "caller"
            self._end(live, min(own_idle, key=lambda s: (self._uses[s].answered, self._uses[s].last)))
            return "open"
        if len(live) + sum(self._opening.values()) < self.max_sessions:
            return "open"
        if not idle:
            return "server"
        held = Counter(self._uses[s].caller for s in live)  # the caller holding the most gives way first
        self._end(
            live, min(idle, key=lambda s: (-held[self._uses[s].caller], self._uses[s].answered, self._uses[s].last))
        )
        return "open"

    def _end(self, live: dict[str, StreamableHTTPServerTransport], victim: str) -> None:
        use = self._uses.pop(victim)
        scope = live[victim].idle_scope
        assert scope is not None
        scope.cancel()
        logger.info(
            "http.session_ended",
            extra={
                "event": "http.session_ended",
                "reason": "room for a new session",
                "caller": use.caller,
                "used": use.answered,
                "idle_s": round(time.monotonic() - use.last, 1),
            },
        )


def _refuse(status: int, message: str) -> JSONResponse:
    body = {"jsonrpc": "2.0", "id": None, "error": {"code": -32603, "message": message}}
    return JSONResponse(body, status_code=status)


def _listens(body: bytes) -> bool:
    """Whether a request body calls ``subscriptions/listen`` (parsed only if it may)."""
    if LISTEN.encode() not in body:
        return False
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return False
    return isinstance(data, dict) and data.get("method") == LISTEN


def _watch(send: Send, status: list[int], session: list[str] | None = None) -> Send:
    """``send``, noting the response's status (and the session id it gives) on the way."""

    async def watched(message: Message) -> None:
        if message["type"] == "http.response.start":
            status.append(message["status"])
            given = Headers(raw=list(message.get("headers", []))).get(MCP_SESSION_ID_HEADER)
            if session is not None and given:
                session.append(given)
        await send(message)

    return watched
