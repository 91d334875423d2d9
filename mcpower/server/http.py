"""The Streamable HTTP transport: MCP (spec 2025-11-25) at ``/mcp`` for many clients, and ``GET /healthz``.

The app is the SDK's own (``MCPServer.streamable_http_app``) over the same :func:`create_server` as
stdio, so tools, resources and schemas are the same. uvicorn runs it here rather than through
``MCPServer.run`` so that shutdown is ours: on SIGTERM or SIGINT the server stops accepting
connections, lets the requests in flight finish (up to :data:`SHUTDOWN_GRACE_S`), and exits 0.
Answers are plain JSON (``json_response``): it costs the server half of what an SSE stream per
call does, and SSE responses are cut the moment a signal arrives instead of finishing.

Every request meets auth/gate.py first (Host, Origin, token, then a bounded body read); each connection
is guarded by connections.py (a cap, deadlines on headers and unread bodies); sessions.py keeps the
session cap by ending idle sessions. Who may connect is the auth room's business; the worker threads
and the time limit per request are limits.py's; idle expiry is the SDK's, set from :class:`HttpOptions`.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import uvicorn
from mcp.server.auth.middleware.auth_context import AuthContextMiddleware
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import TokenVerifier
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp

from mcpower import __version__
from mcpower.defaults import DEFAULT_HTTP_HOST, DEFAULT_HTTP_PORT, DEFAULT_WORKER_THREADS
from mcpower.errors import McpowerError
from mcpower.registry import Registry
from mcpower.server.app import TOOL_NAMES, KnowledgeServer, create_server
from mcpower.server.audit import AuditLog
from mcpower.server.auth.access import (
    WILDCARD_ADDRESSES,
    HostCheck,
    StaticTokenVerifier,
    check_exposure,
    transport_security,
    trusted_networks,
)
from mcpower.server.auth.attempts import FailedAttempts
from mcpower.server.auth.callers import LOCAL, METRICS_SCOPE, OPERATOR, caller_from_scope, caller_of, visible
from mcpower.server.auth.gate import BODY_TIMEOUT_S, Admitted, Gate
from mcpower.server.auth.ratelimit import RateLimit, RateLimits
from mcpower.server.auth.verifiers import NamedTokenVerifier, judge_again, one_verifier
from mcpower.server.connections import DRAIN_TIMEOUT_S, HEADER_TIMEOUT_S, MAX_CONNECTIONS, GuardedH11Protocol
from mcpower.server.limits import TimeLimit
from mcpower.server.listening import MCP_PATH, ListeningServer, bind, mcp_url, uvicorn_config
from mcpower.server.sessions import SessionRoom

if TYPE_CHECKING:
    from mcpower.server.auth.oauth import OAuthOptions
    from mcpower.server.metrics import Metrics

logger = logging.getLogger(__name__)

WatchObserver = Callable[[Any], None]  # a Watcher's on_event
HEALTH_PATH = "/healthz"
METRICS_PATH = "/metrics"


@dataclass(frozen=True)
class HttpOptions:
    """Where to listen and the limits; from Settings (docs/configuration.md) in the CLI."""

    host: str = DEFAULT_HTTP_HOST
    port: int = DEFAULT_HTTP_PORT
    token: str | None = None
    tokens_file: Path | None = None  # named tokens (auth/tokens.py), besides or instead of the single token
    allow_hosts: list[str] = field(default_factory=list)
    allow_origins: list[str] = field(default_factory=list)
    oauth: OAuthOptions | None = None  # OAuth resource-server mode (auth/oauth.py)
    max_body_bytes: int = 4 * 1024 * 1024
    call_timeout: float = 60.0
    max_sessions: int = 100
    # Each caller's share of the sessions and of the streams held open (None: a quarter of
    # max_sessions; streams: the session share); local and the operator's token have the whole cap.
    max_sessions_per_caller: int | None = None
    max_streams_per_caller: int | None = None
    session_idle: float = 1800.0
    threads: int = DEFAULT_WORKER_THREADS
    max_connections: int = MAX_CONNECTIONS
    # One client address's share of the connections (None: a quarter of max_connections).
    max_connections_per_address: int | None = None
    # Reverse proxies (addresses, networks): their connections have no share of their own, and the
    # client address their X-Forwarded-For names is the one limits and logs use; none: it is ignored.
    trusted_proxies: list[str] = field(default_factory=list)
    rate_limits: RateLimits = field(default_factory=RateLimits)
    metrics: bool = True
    audit_queries: bool = False
    # One more verifier of callers' tokens, tried first (tests and benchmarks: callers of their own).
    verifier: TokenVerifier | None = None
    # The clock sign-in sessions and failed attempts run on (wall-clock seconds); tests move it.
    clock: Callable[[], float] = time.time
    # Deadlines (connections.py, auth/gate.py); not settings, but tests shorten them.
    header_timeout: float = HEADER_TIMEOUT_S
    body_timeout: float = BODY_TIMEOUT_S
    drain_timeout: float = DRAIN_TIMEOUT_S
    # The web pages for people at / (mcpower/web, docs/web.md); off with --no-web.
    web: bool = True

    @property
    def url(self) -> str:
        return mcp_url(self.host, self.port)

    @property
    def connection_share(self) -> int:
        """The connections one client address may hold open."""
        limit = self.max_connections_per_address or max(1, self.max_connections // 4)
        return min(self.max_connections, limit)

    @property
    def session_share(self) -> int:
        """The sessions one caller may hold open."""
        return min(self.max_sessions, self.max_sessions_per_caller or max(1, self.max_sessions // 4))

    @property
    def stream_share(self) -> int:
        """The streams (GET, subscriptions/listen) one caller may hold open."""
        return self.max_streams_per_caller or self.session_share


def health(registry: Registry, detailed: bool = True) -> dict[str, Any]:
    """What GET /healthz answers: that the server is up; in detail, the version and each dataset's
    id and status, nothing else."""
    if not detailed:
        return {"status": "ok"}
    datasets = [{"id": e.id, "status": e.status} for e in registry.entries()]
    return {"status": "ok", "version": __version__, "datasets": datasets}


def new_metrics(registry: Registry, tool_names: Literal["default", "seed"] = "default") -> Metrics:
    """The metrics a server over ``registry`` serves at ``/metrics`` (prometheus-client loads here)."""
    from mcpower.server.metrics import Metrics

    return Metrics(registry, TOOL_NAMES[tool_names]["search"])


def create_http_app(
    registry: Registry,
    options: HttpOptions,
    tool_names: Literal["default", "seed"] = "default",
    metrics: Metrics | None = None,
) -> tuple[KnowledgeServer, ASGIApp]:
    """The MCP server over ``registry`` and the ASGI app serving it as ``options`` say; with
    ``options.metrics``, ``metrics`` (or new ones) at ``/metrics``.

    The app's lifespan runs the SDK's session manager: serve it with lifespan on (uvicorn does).

    Raises:
        McpowerError: a non-loopback ``host`` without a token, a malformed allowed origin, or a
        tokens file that is missing, malformed or writable by others.
    """
    if options.oauth is None:  # with OAuth every request needs a token
        check_exposure(options.host, options.token, options.tokens_file)
    security = transport_security(options.host, options.allow_hosts, options.allow_origins)
    if options.host in WILDCARD_ADDRESSES and not options.allow_hosts:
        logger.warning(
            "http.hosts: listening on every address, but requests must name this server as 127.0.0.1, "
            "localhost or [::1]; give the names other machines use with --allow-host",
            extra={"event": "http.hosts"},
        )
    verifiers: list[TokenVerifier] = [options.verifier] if options.verifier is not None else []
    if options.token is not None:
        verifiers.append(StaticTokenVerifier(options.token))
    if options.tokens_file is not None:
        verifiers.append(NamedTokenVerifier(options.tokens_file))
    resource_metadata, metadata_paths, metadata, jwt_verifier = None, [], None, None
    if options.oauth is not None:  # OAuth resource server: its verifier, and the metadata at paths open to all
        from mcpower.server.auth import oauth

        resource = oauth.resource_url(options.oauth, options.url)
        jwt_verifier = oauth.JwtVerifier(options.oauth, resource)
        verifiers.append(jwt_verifier)
        resource_metadata = oauth.metadata_url(resource)
        metadata_paths, metadata = oauth.metadata_paths(resource), oauth.metadata_endpoint(options.oauth, resource)
        logger.info(
            "http.oauth: accepting access tokens of %s for the audience %s",
            options.oauth.issuer,
            jwt_verifier.audience,
            extra={"event": "http.oauth", "issuer": options.oauth.issuer, "resource_metadata": resource_metadata},
        )
    verifier = one_verifier(verifiers)
    # The gate is the one check of credentials: the SDK gets no verifier (it would check each /mcp
    # request again, and know nothing of the web pages' sessions); AuthContextMiddleware below hands
    # the gate's caller to the tools.
    attempts = FailedAttempts(clock=options.clock) if verifier is not None else None
    if metrics is None and options.metrics:
        metrics = new_metrics(registry, tool_names)
    audit = AuditLog(options.audit_queries, observer=metrics.tool_call if metrics is not None else None)
    server = create_server(registry, tool_names, threads=options.threads, audit=audit)
    server.middleware.append(TimeLimit(options.call_timeout))
    if verifier is not None and server.changes.updates is not None:  # a revoked token's subscriptions end
        server.changes.updates.judge = partial(judge_again, verifier, options.clock)

    async def healthz(request: Request) -> Response:
        # Liveness for anyone who passed the Host/Origin checks; what is served, with the token only.
        # (A token granting no dataset counts as none.)
        user = request.scope.get("user")
        detailed = verifier is None or (
            isinstance(user, AuthenticatedUser) and caller_of(user.access_token).patterns != ()
        )
        return JSONResponse(health(visible(registry, caller_from_scope(request.scope)), detailed))

    server.custom_route(HEALTH_PATH, methods=["GET"])(healthz)
    for path in metadata_paths:
        server.custom_route(path, methods=["GET"])(metadata)
    door, open_paths, search_pages = None, [HEALTH_PATH, *metadata_paths], []
    if options.web:
        from mcpower.server.auth.logins import PageSessions
        from mcpower.web import OPEN_PATHS, SEARCH_PATH, SecurityHeaders, web_routes  # only here: never for stdio

        search_pages = [SEARCH_PATH]
        sessions = PageSessions(verifier, clock=options.clock) if verifier is not None else None
        routes, door = web_routes(server, registry, verifier, options.call_timeout, sessions, attempts)
        for route in routes:
            server.custom_route(route.path, methods=sorted(route.methods or ()))(route.endpoint)
        open_paths += OPEN_PATHS
    scoped_paths = {}
    if metrics is not None:  # behind a token with the metrics scope (Gate)
        server.custom_route(METRICS_PATH, methods=["GET"])(metrics.endpoint)
        scoped_paths[METRICS_PATH] = METRICS_SCOPE

    app = server.streamable_http_app(
        streamable_http_path=MCP_PATH,
        json_response=True,
        max_request_body_size=options.max_body_bytes,
        session_idle_timeout=options.session_idle,
        # SessionRoom keeps the cap; an ended session leaves the manager a moment later.
        max_sessions=2 * options.max_sessions,
        transport_security=security,
    )
    if door is not None:  # the pages' 404, with the signed-in header, for a path no route answers
        from mcpower.web import serve_unrouted

        serve_unrouted(app, door)
    served: ASGIApp = app
    if verifier is not None:  # the caller the gate named, for the tools (current_caller); no request without one
        served = AuthContextMiddleware(Admitted(app, open_paths))
    if jwt_verifier is not None:  # the issuer's keys fetched once at start: a mistyped issuer shows at once
        from mcpower.server.auth.oauth import IssuerCheck

        served = IssuerCheck(served, jwt_verifier)
    room = SessionRoom(
        served,
        server.session_manager,
        options.max_sessions,
        MCP_PATH,
        per_caller=options.session_share,
        streams_per_caller=options.stream_share,
        unshared=[LOCAL.name, OPERATOR],  # every client of a server without tokens; the operator's token
    )
    if metrics is not None:
        metrics.sessions = room.open_sessions
    limited: ASGIApp = room
    if options.rate_limits.enabled:
        limited = RateLimit(
            room,
            options.rate_limits,
            mcp_path=MCP_PATH,
            search_tools=[TOOL_NAMES[tool_names]["search"]],
            exempt_paths=[HEALTH_PATH, METRICS_PATH],
            on_refused=metrics.refused if metrics is not None else None,
            limit_anonymous=verifier is None,
            page_refusal=door.busy if door is not None else None,
            search_pages=search_pages,
        )
    gate = Gate(
        limited,
        hosts=HostCheck(security),
        verifier=verifier,
        max_body_bytes=options.max_body_bytes,
        body_timeout=options.body_timeout,
        open_paths=open_paths,
        scoped_paths=scoped_paths,
        resource_metadata=resource_metadata,
        door=door,
        attempts=attempts,
    )
    if door is not None:  # every answer but /mcp's carries the pages' security headers (CSP ...)
        return server, SecurityHeaders(gate, MCP_PATH)
    return server, gate


def http_server(
    app: ASGIApp, options: HttpOptions, on_started: Callable[[str, int], object] | None = None
) -> uvicorn.Server:
    """The uvicorn server for ``app`` (from :func:`create_http_app`) with the connection limits of
    ``options``; ``run(sockets=[bind(...)])`` serves it, calling ``on_started(host, port)`` once it listens."""
    trusted = trusted_networks(options.trusted_proxies)
    protocol = GuardedH11Protocol.configured(
        options.header_timeout, options.drain_timeout, options.max_connections, options.connection_share, trusted
    )
    return ListeningServer(uvicorn_config(app, protocol, options.max_connections, trusted), on_started)


def run_http(
    registry: Registry,
    options: HttpOptions,
    tool_names: Literal["default", "seed"] = "default",
    on_listening: Callable[[WatchObserver | None], object] | None = None,
    announce: Callable[[str, int], object] | None = None,
) -> None:
    """Serve over Streamable HTTP until SIGTERM or SIGINT; then drain and exit 0. ``on_listening``
    is called once the address is bound, before the first request is served, with what counts
    re-indexes (a watcher's ``on_event``: clients are told, and the metrics count it, if any).
    Once the server listens, the query model starts warming (:func:`when_listening`) and
    ``announce(host, port)`` says where it is served.

    Raises:
        McpowerError: before serving, when the address or the access settings cannot be used.
    """
    sock = bind(options.host, options.port)
    if options.port == 0:  # the port chosen, so the URL the server names (its OAuth resource) is the real one
        options = replace(options, port=sock.getsockname()[1])
    metrics = new_metrics(registry, tool_names) if options.metrics else None
    try:
        server, app = create_http_app(registry, options, tool_names, metrics)
    except McpowerError:
        sock.close()
        raise
    if on_listening is not None:
        on_listening(server.changes.observer(metrics.watch_event if metrics is not None else None))
    try:
        http_server(app, options, partial(when_listening, server, announce)).run(sockets=[sock])
    finally:
        server.close()
        sock.close()
        logger.info("server.stopped", extra={"event": "server.stopped"})
        sys.stderr.flush()
    # A search a departed client left running would hold the exit until it ends: not worth waiting for.
    os._exit(0)


def when_listening(
    server: KnowledgeServer, announce: Callable[[str, int], object] | None, host: str, port: int
) -> None:
    """What starts once the server listens, never before (``initialize`` must not wait for it): the
    warm-up of the datasets and their query model in the background, so the first search (a web
    page's too, which sends no MCP request) does not pay the model load; then the start message."""
    server.warm.start()
    if announce is not None:
        announce(host, port)
