"""The first thing every HTTP request meets, before a byte of its body is read.

In order: the ``Host`` and ``Origin`` headers (421, 403), then the credential, on every route but
``/healthz``, the web sign-in page and the OAuth metadata: a bearer header, or on the web pages
their sign-in session (the :class:`Door`); a client address out of attempts (attempts.py) gets 429
before its credential is looked at; a credential refused, 401; a good one that grants no dataset
(or, on ``/metrics``, not the metrics), 403 ``insufficient_scope``; then a declared
``Content-Length`` over the limit (413). Only a request that passed all three has its body read,
up to the limit (413) and within a deadline (408), and is handed on with the body already in hand,
and with the user its credential stands for in ``scope["user"]`` and ``scope["auth"]`` (as
starlette's AuthenticationMiddleware puts them; ``callers.caller_from_scope`` reads them; no user
there: no token was configured or, on an open path, none was sent). So a client without the token
cannot make the server hold any part of a body, and one trickling a body holds a connection for
the deadline at most.

This is the one place credentials are checked: the SDK is given no verifier of its own (it would
check every request again, and know nothing of the pages' sessions). :class:`Admitted`, just before
the app, only makes sure no request got past without a user where one is needed.

Every refusal is logged as ``http.refused``: the status, the precise reason (``no_token``,
``wrong_scheme``, ``empty_token``, ``unknown_token``, ``revoked``, ``expired``, the OAuth reasons,
``insufficient_scope``, ``attempts``, ``host`` ...), the caller when the credential names one, the
client address and the path — never the credential.

A refusal leaves the rest of the body unread and the connection open: the connection's guard
(connections.py) discards what still comes for a few seconds, then closes it. Closing at once
would reset a client still sending, which would then see a reset instead of the status.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import anyio
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken, TokenVerifier
from starlette.authentication import AuthCredentials
from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mcpower.server.auth.access import HostCheck, host_name
from mcpower.server.auth.callers import READ_SCOPE, caller_of
from mcpower.server.auth.verifiers import Refusal, check

if TYPE_CHECKING:
    from mcpower.server.auth.attempts import FailedAttempts

logger = logging.getLogger(__name__)

# A whole request body must arrive within this long of its headers: 4 MB in 30 s is 140 KB/s,
# which any client on a working network beats many times over.
BODY_TIMEOUT_S = 30.0


# What a Host header is shown as in a refusal: the characters a host and port are made of, cut short.
_SHOWN_HOST = re.compile(r"[^A-Za-z0-9.:\[\]-]")
# Bearer credentials longer than this are not any mcpower accepts (OAuth's limit is 8 KB).
MAX_CREDENTIAL_CHARS = 16 * 1024


def _refusal(status: int, text: str) -> Response:
    return Response(text, status_code=status, media_type="text/plain", headers={"X-Content-Type-Options": "nosniff"})


def _unauthorized(resource_metadata: str | None = None) -> Response:
    """The SDK's own 401 (RequireAuthMiddleware), so clients see one answer whoever refuses them;
    in OAuth mode with the URL of the protected resource metadata (RFC 9728 §5.1)."""
    return _challenge(401, "invalid_token", "Authentication required", resource_metadata)


def _insufficient_scope(resource_metadata: str | None, scope: str = READ_SCOPE) -> Response:
    """A good token without the scope a path needs: 403 and the scope to ask for (RFC 6750 §3.1;
    the MCP authorization spec's scope challenge)."""
    return _challenge(403, "insufficient_scope", "Required scope: " + scope, resource_metadata, scope)


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


def _out_of_attempts(retry_after: int) -> Response:
    text = _attempts_message(retry_after)
    body = {"error": "too_many_attempts", "error_description": text, "retry_after": retry_after}
    return Response(
        json.dumps(body), status_code=429, media_type="application/json", headers={"Retry-After": str(retry_after)}
    )


def misdirected(hosts: list[str]) -> Response:
    """421 for a Host header this server does not answer to, naming what came and how to allow it."""
    if not hosts:
        text = "this request has no Host header; send the name or address the server is reached at"
    elif len(hosts) > 1:
        text = "this request has more than one Host header; send one"
    else:
        shown = _SHOWN_HOST.sub("?", hosts[0][:100])
        name = host_name(hosts[0])
        fix = (
            f"if clients reach it by that name, start the server with --allow-host {name} (or add it to MCPOWER_ALLOW_HOSTS)"
            if name is not None
            else "that is not a host name"
        )
        text = f"this server does not answer to the host {shown!r} (the request's Host header); {fix}"
    return _refusal(421, "Invalid Host header: " + text + "\n")


def client_address(scope: Scope) -> str:
    """The client's address (behind a trusted proxy, the one it forwards), or ``unknown``."""
    client = scope.get("client")
    return str(client[0]) if client else "unknown"


def refused(status: int, reason: str, scope: Scope, caller: str | None = None, **details: Any) -> None:
    """Log a refusal for the operator: why, who (when known), from where, for what; never the credential."""
    logger.info(
        "http.refused: %s %s",
        status,
        reason,
        extra={
            "event": "http.refused",
            "status": status,
            "reason": reason,
            "caller": caller,
            "client": client_address(scope),
            "path": str(scope.get("path", ""))[:200],
            **details,
        },
    )


class Door(Protocol):
    """Another door's say in authentication (the web pages, mcpower/web): on the paths it
    ``covers`` a sign-in session stands in for a missing bearer header, and its own answers to
    refused requests."""

    def covers(self, path: str) -> bool: ...

    async def authenticate(self, scope: Scope) -> AccessToken | Refusal | None: ...

    def refusal(self, scope: Scope) -> Response | None: ...

    def busy(self, scope: Scope, message: str) -> Response | None: ...


class Gate:
    """ASGI middleware in front of the whole app: access checks first, then a bounded body read.

    ``verifier`` None: no token is configured (a loopback server), so no 401. ``open_paths`` need
    no token (``/healthz``; it decides itself what to tell a caller without one). ``scoped_paths``
    need a scope of their own instead of a dataset (``/metrics``: ``mcpower:metrics``).
    ``resource_metadata``: the URL 401s and 403s name (OAuth mode). ``attempts``: failed attempts
    per client address (None: not limited).
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
        scoped_paths: Mapping[str, str] | None = None,
        resource_metadata: str | None = None,
        door: Door | None = None,
        attempts: FailedAttempts | None = None,
    ) -> None:
        self.app = app
        self.hosts = hosts
        self.verifier = verifier
        self.max_body_bytes = max_body_bytes
        self.body_timeout = body_timeout
        self.open_paths = frozenset(open_paths)
        self.scoped_paths = dict(scoped_paths or {})
        self.resource_metadata = resource_metadata
        self.door = door
        self.attempts = attempts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = await self._check(scope)
        if refusal is None:
            body = await self._read_body(receive, scope)
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
            refused(421, "host", scope, host=_SHOWN_HOST.sub("?", ",".join(hosts)[:100]))
            return misdirected(hosts)
        origins = headers.getlist("origin")
        if len(origins) > 1 or not self.hosts.origin_allowed(origins[0] if origins else None):
            refused(403, "origin", scope)
            return _refusal(403, "Invalid Origin header")
        if self.verifier is not None:
            answer = await self._authenticate(scope, headers)
            if isinstance(answer, Response):
                return answer
            if answer is not None:  # as starlette's AuthenticationMiddleware: later middleware knows the caller
                scope["auth"], scope["user"] = AuthCredentials(answer.scopes), AuthenticatedUser(answer)
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_body_bytes:
            refused(413, "body_size", scope)
            return _refusal(413, "Request body too large")
        return None

    async def _authenticate(self, scope: Scope, headers: Headers) -> AccessToken | Response | None:
        """The caller a request's credential stands for; None on an open path without a good one;
        a Response refusing it."""
        path = scope["path"]
        verdict: AccessToken | Refusal | None = None
        authorization = headers.get("authorization")
        scheme, _, credential = (authorization or "").strip().partition(" ")
        if scheme.lower() == "bearer":
            judged = await self._bearer(scope, credential.strip())
            if isinstance(judged, Response):
                return judged
            verdict = judged
        elif self.door is not None and self.door.covers(path):  # a proxy's Basic header is not ours
            verdict = await self.door.authenticate(scope)
        if verdict is None:
            verdict = Refusal("wrong_scheme" if authorization is not None else "no_token")
        if isinstance(verdict, AccessToken) and verdict.expires_at and verdict.expires_at < int(time.time()):
            verdict = Refusal.known("expired", verdict.client_id)
        if isinstance(verdict, Refusal):
            if path in self.open_paths:  # answered as to no token; a bad one is still worth a line
                if verdict.reason not in ("no_token", "wrong_scheme"):
                    _ignored(verdict, scope)
                return None
            refused(401, verdict.reason, scope, verdict.caller, **verdict.details)
            page = self.door.refusal(scope) if self.door is not None else None
            return page or _unauthorized(self.resource_metadata)
        caller = caller_of(verdict)
        needed = self.scoped_paths.get(path)
        if needed is not None:  # a path of its own scope (/metrics): that scope, whatever the datasets
            if needed in verdict.scopes:
                return verdict
            refused(403, "insufficient_scope", scope, caller.name, scope_needed=needed)
            return _insufficient_scope(self.resource_metadata, needed)
        if caller.patterns == ():  # a good token that grants no dataset
            if path in self.open_paths:
                return None  # on an open path: as if no token was sent
            refused(403, "insufficient_scope", scope, caller.name, scope_needed=READ_SCOPE)
            return _insufficient_scope(self.resource_metadata)
        return verdict

    async def _bearer(self, scope: Scope, token: str) -> AccessToken | Refusal | Response:
        """A bearer token's verdict, unless its address has no attempts left (429)."""
        assert self.verifier is not None
        if not token:
            return Refusal("empty_token")
        address = client_address(scope)
        if self.attempts is not None:
            retry = self.attempts.retry_after(address)
            if retry:
                refused(429, "attempts", scope, retry_after_s=retry)
                response = self.door.busy(scope, _attempts_message(retry)) if self.door is not None else None
                if response is not None:
                    response.headers["retry-after"] = str(retry)
                    return response
                return _out_of_attempts(retry)
        verdict = Refusal("too_large") if len(token) > MAX_CREDENTIAL_CHARS else await check(self.verifier, token)
        if isinstance(verdict, Refusal) and not verdict.recognized and self.attempts is not None:
            self.attempts.failed(address)
        return verdict

    async def _read_body(self, receive: Receive, scope: Scope) -> bytes | Response | None:
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
                    refused(413, "body_size", scope)
                    return _refusal(413, "Request body too large")
                chunks.append(chunk)
                if not message.get("more_body", False):
                    return b"".join(chunks)
        refused(408, "body_timeout", scope)
        return _refusal(408, "Request body not received in time")


def _ignored(refusal: Refusal, scope: Scope) -> None:
    logger.info(
        "http.credential_ignored: %s",
        refusal.reason,
        extra={
            "event": "http.credential_ignored",
            "reason": refusal.reason,
            "caller": refusal.caller,
            "client": client_address(scope),
            "path": str(scope.get("path", ""))[:200],
        },
    )


def _attempts_message(retry: int) -> str:
    return f"too many failed attempts to authenticate from this address; retry after {retry} s"


class Admitted:
    """ASGI middleware just before the app: a second look that every request on a path needing a
    caller carries the one the gate named (the gate is the only check of credentials; this keeps
    a mistake in how the middleware is stacked from serving anyone)."""

    def __init__(self, app: ASGIApp, open_paths: Collection[str]) -> None:
        self.app = app
        self.open_paths = frozenset(open_paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        needs = scope["type"] == "http" and scope["path"] not in self.open_paths
        if needs and not isinstance(scope.get("user"), AuthenticatedUser):
            await _unauthorized()(scope, receive, send)
            return
        await self.app(scope, receive, send)


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
