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

The one private name used is ``StreamableHTTPSessionManager._server_instances``, the sessions that
are open: the manager has no public view of them. A session is ended as its idle timeout would
end it, by cancelling its transport's ``idle_scope``.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from mcp.server.streamable_http import MCP_SESSION_ID_HEADER, StreamableHTTPServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

logger = logging.getLogger(__name__)


@dataclass
class _Use:
    last: float  # time.monotonic() when its last request ended (opened, for a new one)
    answered: bool = False  # a request carrying its id got a 200 (a result, or a GET stream)
    in_flight: int = 0


def _ending(transport: StreamableHTTPServerTransport) -> bool:
    scope = transport.idle_scope
    return transport.is_terminated or (scope is not None and scope.cancel_called)


class SessionRoom:
    """ASGI middleware before the SDK's Streamable HTTP endpoint at ``path``: tracks each session's
    use and makes room for a new one as the module says. Set the manager's own ``max_sessions``
    above ``max_sessions`` (an ended session leaves the manager a moment after it is ended)."""

    def __init__(self, app: ASGIApp, manager: StreamableHTTPSessionManager, max_sessions: int, path: str) -> None:
        self.app = app
        self.manager = manager
        self.max_sessions = max_sessions
        self.path = path
        self._uses: dict[str, _Use] = {}
        self._opening = 0  # new-session requests being served: each may become a session

    def open_sessions(self) -> int:
        """How many sessions are open now (for metrics)."""
        return sum(1 for t in self.manager._server_instances.values() if not _ending(t))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != self.path:
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        session_id = headers.get(MCP_SESSION_ID_HEADER)
        if session_id is None:
            version = headers.get("mcp-protocol-version")
            if scope["method"] == "POST" and (version is None or version in HANDSHAKE_PROTOCOL_VERSIONS):
                await self._open(scope, receive, send)
            else:  # no session to open (a later protocol's request is served without one)
                await self.app(scope, receive, send)
            return
        use = self._uses.get(session_id)
        if use is None:  # unknown, ended or expired: the SDK answers 404
            await self.app(scope, receive, send)
            return
        use.in_flight += 1
        status: list[int] = []
        try:
            await self.app(scope, receive, _watch(send, status))
        finally:
            use.in_flight -= 1
            if status and status[0] < 400:
                use.last = time.monotonic()
                use.answered = use.answered or status[0] == 200

    async def _open(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self._make_room():
            logger.warning(
                "http.sessions_busy", extra={"event": "http.sessions_busy", "max_sessions": self.max_sessions}
            )
            body = {"jsonrpc": "2.0", "id": None, "error": {"code": -32603, "message": "Too many open sessions"}}
            await JSONResponse(body, status_code=503)(scope, receive, send)
            return
        self._opening += 1
        status: list[int] = []
        session: list[str] = []
        try:
            await self.app(scope, receive, _watch(send, status, session))
        finally:
            self._opening -= 1
            if status and status[0] < 400 and session:
                self._uses[session[0]] = _Use(last=time.monotonic())

    def _make_room(self) -> bool:
        """Whether a new session may open, after ending an idle one if the cap is reached."""
        instances = self.manager._server_instances
        for gone in [s for s in self._uses if s not in instances]:
            del self._uses[gone]
        live = {s: t for s, t in instances.items() if s in self._uses and not _ending(t)}
        if len(live) + self._opening < self.max_sessions:
            return True
        idle = [s for s, t in live.items() if self._uses[s].in_flight == 0 and t.idle_scope is not None]
        if not idle:
            return False
        victim = min(idle, key=lambda s: (self._uses[s].answered, self._uses[s].last))
        use = self._uses.pop(victim)
        scope = live[victim].idle_scope
        assert scope is not None
        scope.cancel()
        logger.info(
            "http.session_ended",
            extra={
                "event": "http.session_ended",
                "reason": "room for a new session",
                "used": use.answered,
                "idle_s": round(time.monotonic() - use.last, 1),
            },
        )
        return True


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
