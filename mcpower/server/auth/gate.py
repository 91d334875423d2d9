"""The first thing every HTTP request meets, before a byte of its body is read.

In order: the ``Host`` and ``Origin`` headers (421, 403), the bearer token (401, on every route but
``/healthz`` and the OAuth metadata; 403 ``insufficient_scope`` for a token that grants no dataset), a declared ``Content-Length`` over the limit (413). Only a request that passed all
three has its body read, up to the limit (413) and within a deadline (408), and is handed on with
the body already in hand, and with the user its token stands for in ``scope["user"]`` and
``scope["auth"]`` (as starlette's AuthenticationMiddleware puts them; ``callers.caller_from_scope``
reads them; no user there: no token was configured or, on an open path, none was sent). So a client without the token cannot make the server hold any part of a
body, and one trickling a body holds a connection for the deadline at most.

A refusal leaves the rest of the body unread and the connection open: the connection's guard
(connections.py) discards what still comes for a few seconds, then closes it. Closing at once
would reset a client still sending, which would then see a reset instead of the status.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection
from typing import Protocol

import anyio
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser, BearerAuthBackend
from mcp.server.auth.provider import TokenVerifier
from starlette.datastructures import Headers
from starlette.requests import HTTPConnection
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mcpower.server.auth.access import HostCheck
from mcpower.server.auth.callers import READ_SCOPE, caller_of

logger = logging.getLogger(__name__)

# A whole request body must arrive within this long of its headers: 4 MB in 30 s is 140 KB/s,
# which any client on a working network beats many times over.
BODY_TIMEOUT_S = 30.0


def _refusal(status: int, text: str) -> Response:
    return Response(text, status_code=status, media_type="text/plain")


def _unauthorized(resource_metadata: str | None = None) -> Response:
    """The SDK's own 401 (RequireAuthMiddleware), so clients see one answer whoever refuses them;
    in OAuth mode with the URL of the protected resource metadata (RFC 9728 §5.1)."""
    return _challenge(401, "invalid_token", "Authentication required", resource_metadata)


def _insufficient_scope(resource_metadata: str | None) -> Response:
    """A good token that grants no dataset: 403 and the scope to ask for (RFC 6750 §3.1; the MCP
    authorization spec's scope challenge)."""
    return _challenge(403, "insufficient_scope", "Required scope: " + READ_SCOPE, resource_metadata, READ_SCOPE)


def _challenge(status: int, error: str, text: str, resource_metadata: str | None, scope: str | None = None) -> Response:
    params = [f'error="{error}"', f'error_description="{text}"']
    params += [f'scope="{scope}"'] if scope else []
    params += [f'resource_metadata="{resource_metadata}"'] if resource_metadata else []
    body = {"error": error, "error_description": text}
    return Response(
        json.dumps(body),
        status_code=status,
        media_type="application/json",
        headers={"WWW-Authenticate": "Bearer " + ", ".join(params)},
    )


def _grants_nothing(user: object) -> bool:
    """Whether an authenticated user's token grants no dataset (an OAuth token without mcpower scopes)."""
    return isinstance(user, AuthenticatedUser) and caller_of(user.access_token).patterns == ()


class Door(Protocol):
    """Another door's say in authentication (the web pages, mcpower/web): a login cookie standing
    in for the bearer header on its own paths only, and its own answer to a refused request."""

    def admit(self, scope: Scope) -> Scope: ...

    def refusal(self, scope: Scope) -> Response | None: ...


class Gate:
    """ASGI middleware in front of the whole app: access checks first, then a bounded body read.

    ``verifier`` None: no token is configured (a loopback server), so no 401. ``open_paths`` need
    no token (``/healthz``; it decides itself what to tell a caller without one). ``resource_metadata``:
    the URL 401s and 403s name (OAuth mode).
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        hosts: HostCheck,
        verifier: TokenVerifier | None,
        max_body_bytes: int,
        body_timeout: float = BODY_TIMEOUT_S,
        open_paths: Collection[str] = (),
        resource_metadata: str | None = None,
        door: Door | None = None,
    ) -> None:
        self.app = app
        self.hosts = hosts
        self.auth = BearerAuthBackend(verifier) if verifier is not None else None
        self.max_body_bytes = max_body_bytes
        self.body_timeout = body_timeout
        self.open_paths = frozenset(open_paths)
        self.resource_metadata = resource_metadata
        self.door = door

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.door is not None and self.auth is not None:
            scope = self.door.admit(scope)
        refusal = await self._check(scope)
        if refusal is None:
            body = await self._read_body(receive)
            if body is None:  # the client left
                return
            if isinstance(body, bytes):
                await self.app(scope, replay({"type": "http.request", "body": body, "more_body": False}, receive), send)
                return
            refusal = body
        await refusal(scope, receive, send)

    async def _check(self, scope: Scope) -> Response | None:
        headers = Headers(scope=scope)
        hosts = headers.getlist("host")
        if len(hosts) != 1 or not self.hosts.host_allowed(hosts[0]):
            return self._refused(421, "Invalid Host header", "host")
        origins = headers.getlist("origin")
        if len(origins) > 1 or not self.hosts.origin_allowed(origins[0] if origins else None):
            return self._refused(403, "Invalid Origin header", "origin")
        if self.auth is not None:
            found = await self.auth.authenticate(HTTPConnection(scope))
            if found is not None and _grants_nothing(found[1]):
                if scope["path"] not in self.open_paths:
                    logger.info("http.refused", extra={"event": "http.refused", "status": 403, "reason": "scope"})
                    return _insufficient_scope(self.resource_metadata)
                found = None  # on an open path: as if no token was sent
            if found is not None:  # as starlette's AuthenticationMiddleware: later middleware knows the caller
                scope["auth"], scope["user"] = found
            elif scope["path"] not in self.open_paths:
                logger.info("http.refused", extra={"event": "http.refused", "status": 401, "reason": "token"})
                door = self.door.refusal(scope) if self.door is not None else None
                return door or _unauthorized(self.resource_metadata)
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_body_bytes:
            return self._refused(413, "Request body too large", "body_size")
        return None

    async def _read_body(self, receive: Receive) -> bytes | Response | None:
        """The whole body; a refusal past the limit or the deadline; None if the client left."""
        chunks: list[bytes] = []
        size = 0
        with anyio.move_on_after(self.body_timeout):
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return None
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > self.max_body_bytes:
                    return self._refused(413, "Request body too large", "body_size")
                chunks.append(chunk)
                if not message.get("more_body", False):
                    return b"".join(chunks)
        return self._refused(408, "Request body not received in time", "body_timeout")

    @staticmethod
    def _refused(status: int, text: str, reason: str) -> Response:
        logger.info("http.refused", extra={"event": "http.refused", "status": status, "reason": reason})
        return _refusal(status, text)


def replay(first: Message, receive: Receive) -> Receive:
    """A receive that gives ``first`` (a message already read: the whole body, say), then defers to ``receive``."""
    given = False

    async def replayed() -> Message:
        nonlocal given
        if given:
            return await receive()
        given = True
        return first

    return replayed
