"""Web pages for people, served by ``serve --http`` beside ``/mcp``: the datasets, a search as an
agent makes it, and a result's passage in its document (docs/web.md).

Imported only when the HTTP app is built (never by ``search``, ``serve --stdio`` or the MCP
handshake). :func:`web_routes` gives the routes to add to the app and the :class:`WebDoor` the
gate consults for the login cookie; :class:`SecurityHeaders` wraps the whole app so every answer
but ``/mcp``'s carries the pages' headers.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from mcpower.registry import Registry
from mcpower.server.app import KnowledgeServer
from mcpower.web.login import LOGIN_PATH, LOGOUT_PATH, Verifier, WebDoor, login_routes
from mcpower.web.pages import Pages
from mcpower.web.render import STATIC_PREFIX, SecurityHeaders, static, static_paths

__all__ = ["OPEN_PATHS", "PAGE_PATHS", "SEARCH_PATH", "SecurityHeaders", "WebDoor", "web_routes"]

SEARCH_PATH = "/search"  # with a query q, a search: counted by the rate limiter's search cap
PAGE_PATHS = ("/", SEARCH_PATH, "/doc")
# Reachable without a token: the login form, and the files it uses.
OPEN_PATHS = (LOGIN_PATH, "/favicon.ico", *static_paths())


def web_routes(
    server: KnowledgeServer, registry: Registry, verifier: Verifier | None, call_timeout: float
) -> tuple[list[Route], WebDoor]:
    """The web pages' routes over ``server``, and what the gate needs to know of them."""
    pages = Pages(server, registry, call_timeout)
    handlers: list[tuple[str, Callable[[Request], Awaitable[Response]], list[str]]] = [
        ("/", pages.datasets, ["GET"]),
        (SEARCH_PATH, pages.search, ["GET"]),
        ("/doc", pages.document, ["GET"]),
        *login_routes(verifier, pages.caller_name),
    ]
    routes = [Route(path, fn, methods=methods) for path, fn, methods in handlers]
    routes.append(Route(STATIC_PREFIX + "{name}", static, methods=["GET"]))
    routes.append(Route("/favicon.ico", static, methods=["GET"]))  # browsers ask for it whatever the page says
    door = WebDoor(paths=(*PAGE_PATHS, LOGIN_PATH, LOGOUT_PATH), page_paths=PAGE_PATHS)
    return routes, door
