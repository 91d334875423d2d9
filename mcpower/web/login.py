"""Signing in from a browser: the login form, the cookie it sets, and what the gate asks of the web.

The cookie holds the bearer token itself (``HttpOnly``: no script reads it; ``SameSite=Strict``:
no other site's page sends it; ``Secure``; ``Path=/``), and every request carrying it is checked by
the same verifier as a bearer header, so a revoked or expired token stops working at once. The
gate accepts the cookie on the web pages only: on their paths it stands in for a missing
``Authorization`` header, and ``/mcp`` never sees it.

The two forms that change something (login, logout) are POSTs that must come from this server's
own pages: the browser's ``Origin`` must be this server's (a page of another port of the same host
is same-site, so SameSite alone would let it through), or, from a client that is not a browser,
absent along with ``Sec-Fetch-Site``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection
from typing import Any, Protocol
from urllib.parse import parse_qs, quote, urlsplit

from starlette.datastructures import Headers, MutableHeaders
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.types import Scope

from mcpower.web.render import error_page, page, secure

logger = logging.getLogger(__name__)

COOKIE = "mcpower_token"
LOGIN_PATH = "/login"
LOGOUT_PATH = "/logout"
# A token longer than any real one is refused unread (the form's body is bounded by the gate too).
MAX_TOKEN_CHARS = 4096


class Verifier(Protocol):
    def verify_token(self, token: str) -> Awaitable[Any]: ...


class WebDoor:
    """What the gate asks of the web pages: the cookie in place of a bearer header on ``paths``,
    and a redirect to the login form for a browser that has neither."""

    def __init__(self, paths: Collection[str], page_paths: Collection[str]) -> None:
        self.paths = frozenset(paths)
        self.page_paths = frozenset(page_paths)

    def admit(self, scope: Scope) -> Scope:
        """``scope`` with the cookie's token as its bearer header, on a web path without one."""
        if scope.get("path") not in self.paths:
            return scope
        headers = Headers(scope=scope)
        if "authorization" in headers:
            return scope
        token = _cookie(headers.get("cookie", ""))
        if not token:
            return scope
        scope = dict(scope)
        MutableHeaders(scope=scope).append("authorization", f"Bearer {token}")
        return scope

    def refusal(self, scope: Scope) -> Response | None:
        """For a page a browser GETs without a valid token: a redirect to the login form (which
        comes back to it); None for anything else (the gate's 401)."""
        if not self._browser_page(scope):
            return None  # a program: the 401 says what to send
        query = scope.get("query_string", b"").decode("latin-1")
        target = scope["path"] + (f"?{query}" if query else "")
        return secure(RedirectResponse(f"{LOGIN_PATH}?next={quote(target, safe='')}", status_code=303))

    def busy(self, scope: Scope, message: str) -> Response | None:
        """For a page a browser GETs over the caller's rate limit: the error page, 429 (a
        ratelimit.PageRefusal); None for anything else (the limiter's JSON-RPC body)."""
        if not self._browser_page(scope):
            return None
        return error_page(Request(scope), 429, "RATE_LIMITED", message)

    def _browser_page(self, scope: Scope) -> bool:
        """Whether ``scope`` is a GET of a page, not of its JSON twin."""
        if scope.get("method") not in ("GET", "HEAD") or scope.get("path") not in self.page_paths:
            return False
        query = scope.get("query_string", b"").decode("latin-1")
        return "format=json" not in query.split("&")


def _cookie(header: str) -> str | None:
    for part in header.split(";"):
        name, _, value = part.strip().partition("=")
        if name == COOKIE and value:
            return value.strip('"')
    return None


def local_target(value: str | None) -> str:
    """``value`` if it is a path of this server (``/search?q=x``), else ``/``: never an open redirect."""
    if not value or not value.startswith("/") or value.startswith("//") or "\\" in value:
        return "/"
    if any(ord(c) < 0x21 or ord(c) == 0x7F for c in value):
        return "/"
    parts = urlsplit(value)
    if parts.scheme or parts.netloc:
        return "/"
    return value


async def _form(request: Request) -> dict[str, str]:
    """The fields of a urlencoded form (the gate has bounded the body); empty for any other body."""
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/x-www-form-urlencoded":
        return {}
    body = (await request.body())[: 4 * MAX_TOKEN_CHARS].decode("utf-8", "replace")
    try:
        return {k: v[0] for k, v in parse_qs(body, max_num_fields=4).items()}
    except ValueError:  # more fields than the form has: not our form
        return {}


def same_origin(request: Request) -> bool:
    """Whether a state-changing request comes from this server's own page (see the module doc)."""
    origin = request.headers.get("origin")
    if origin is None:
        return request.headers.get("sec-fetch-site") in (None, "same-origin", "none")
    host = request.headers.get("host", "")
    return origin in (f"http://{host}", f"https://{host}")


def login_routes(
    verifier: Verifier | None, caller_name: Callable[[Request], str | None]
) -> list[tuple[str, Callable[[Request], Awaitable[Response]], list[str]]]:
    """The handlers of /login (GET: the form, POST: check the token, set the cookie) and /logout."""

    async def login_form(request: Request) -> Response:
        target = local_target(request.query_params.get("next"))
        if verifier is None:
            return secure(RedirectResponse(target, status_code=303))
        data = {"next": target, "error": None, "signed_in": caller_name(request)}
        return page(request, "login.html", data)

    async def login(request: Request) -> Response:
        if not same_origin(request):
            return error_page(request, 403, "CROSS_ORIGIN", "sign in from this server's own login page")
        form = await _form(request)
        target = local_target(form.get("next"))
        token = (form.get("token") or "").strip()
        if verifier is None:
            return secure(RedirectResponse(target, status_code=303))
        valid = 0 < len(token) <= MAX_TOKEN_CHARS and token.isascii() and token.isprintable() and ";" not in token
        if not valid or await verifier.verify_token(token) is None:
            logger.info("web.login_refused", extra={"event": "web.login_refused"})
            data = {
                "next": target,
                "error": "That token is not accepted here. Check it and try again.",
                "signed_in": None,
            }
            return page(request, "login.html", data, status=401)
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(COOKIE, token, path="/", secure=True, httponly=True, samesite="strict")
        return secure(response)

    async def logout(request: Request) -> Response:
        if not same_origin(request):
            return error_page(request, 403, "CROSS_ORIGIN", "sign out from this server's own pages")
        response = RedirectResponse(LOGIN_PATH if verifier is not None else "/", status_code=303)
        response.delete_cookie(COOKIE, path="/", secure=True, httponly=True, samesite="strict")
        return secure(response)

    return [(LOGIN_PATH, login_form, ["GET"]), (LOGIN_PATH, login, ["POST"]), (LOGOUT_PATH, logout, ["POST"])]
