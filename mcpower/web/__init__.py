"""Web pages for people, served by ``serve --http`` beside ``/mcp``: the datasets, a search as an
agent makes it, and a result's passage in its document (docs/web.md).

Imported only when the HTTP app is built (never by ``search``, ``serve --stdio`` or the MCP
handshake). :func:`web_routes` gives the routes to add to the app and the :class:`WebDoor` the
gate consults for the sign-in session; :class:`SecurityHeaders` wraps the whole app so every answer
but ``/mcp``'s carries the pages' headers.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from mcpower.registry import Registry
from mcpower.server.app import KnowledgeServer
from mcpower.server.auth.attempts import FailedAttempts
from mcpower.server.auth.logins import PageSessions
from mcpower.web.login import LOGIN_PATH, LOGOUT_PATH, WebDoor, login_routes
from mcpower.web.pages import Pages
from mcpower.web.render import STATIC_PREFIX, SecurityHeaders, error_page, static, static_paths

if TYPE_CHECKING:
    from mcp.server.auth.provider import TokenVerifier

__all__ = ["OPEN_PATHS", "PAGE_PATHS", "SEARCH_PATH", "SecurityHeaders", "WebDoor", "serve_unrouted", "web_routes"]

SEARCH_PATH = "/search"  # with a query q, a search: counted by the rate limiter's search cap
PAGE_PATHS = ("/", SEARCH_PATH, "/doc")
# Reachable without a token: the login form and the files it uses; signing out (a session that
# has just expired can still be signed out of, and a stale cookie cleared).
OPEN_PATHS = (LOGIN_PATH, LOGOUT_PATH, "/favicon.ico", *static_paths())


def web_routes(
    server: KnowledgeServer,
    registry: Registry,
    verifier: TokenVerifier | None,
    call_timeout: float,
    sessions: PageSessions | None = None,
    attempts: FailedAttempts | None = None,
) -> tuple[list[Route], WebDoor]:
    """The web pages' routes over ``server``, and what the gate needs to know of them; ``sessions``
    the sign-in sessions (with a verifier), ``attempts`` the failed attempts per address."""
    pages = Pages(server, registry, call_timeout)
    handlers: list[tuple[str, Callable[[Request], Awaitable[Response]], list[str]]] = [
        ("/", pages.datasets, ["GET"]),
        (SEARCH_PATH, pages.search, ["GET"]),
        ("/doc", pages.document, ["GET"]),
        *login_routes(verifier, pages.caller_name, sessions, attempts),
    ]
    routes = [Route(path, fn, methods=methods) for path, fn, methods in handlers]
    routes.append(Route(STATIC_PREFIX + "{name}", static, methods=["GET"]))
    routes.append(Route("/favicon.ico", static, methods=["GET"]))  # browsers ask for it whatever the page says
    door = WebDoor(paths=(*PAGE_PATHS, LOGIN_PATH, LOGOUT_PATH), page_paths=PAGE_PATHS, sessions=sessions)
    return routes, door


def serve_unrouted(app: Starlette, door: WebDoor) -> None:
    """Answer a path no route of ``app`` answers with the pages' 404 (the signed-in header and nav
    included, or its JSON twin), accepting the sign-in session there as on the pages."""
    door.routed = frozenset(path for route in app.routes if isinstance(path := getattr(route, "path", None), str))

    async def not_found(request: Request, exc: Exception) -> Response:
        message = "there is no page at this address: the datasets are at /, a search at /search"
        return error_page(request, 404, "NOT_FOUND", message)

    app.add_exception_handler(404, not_found)
