"""Signing in from a browser: the login form, the cookie it sets, and what the gate asks of the web.

The form's token is checked by the server's verifier, as a bearer header is, and opens a sign-in
session (server/auth/logins.py): the cookie ``__Host-mcpower_session`` holds the session's random
id, never the token (``HttpOnly``: no script reads it; ``SameSite=Strict``: no other site's page
sends it; ``Secure``, ``Path=/``, no ``Domain``: what ``__Host-`` demands). The gate accepts the
session on the web pages only: on their paths it stands in for a missing bearer header, and
``/mcp`` never looks at it. Each request judges the session again (its limits, and the token it
was opened with), so a revoked or expired token signs its sessions out at once; logout ends the
session on the server. Failed sign-ins spend the client address's attempts (attempts.py), as bad
bearer tokens do.

The two forms that change something (login, logout) are POSTs that must come from this server's
own pages: the browser's ``Origin`` must be this server's (a page of another port of the same host
is same-site, so SameSite alone would let it through), or, from a client that is not a browser,
absent along with ``Sec-Fetch-Site``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, quote, urlsplit

from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.types import Scope

from mcpower.server.auth.attempts import FailedAttempts
from mcpower.server.auth.callers import caller_of
from mcpower.server.auth.gate import client_address, refused
from mcpower.server.auth.logins import COOKIE, PageSessions
from mcpower.server.auth.verifiers import Refusal, check
from mcpower.web.render import error_page, page, secure

if TYPE_CHECKING:
    from mcp.server.auth.provider import AccessToken, TokenVerifier

logger = logging.getLogger(__name__)

LEGACY_COOKIE = "mcpower_token"  # earlier versions kept the token itself there: cleared at sign-in and out
LOGIN_PATH = "/login"
LOGOUT_PATH = "/logout"
# A token longer than any real one is refused unread (the form's body is bounded by the gate too).
MAX_TOKEN_CHARS = 4096
# What a person is told of a token the server knows but no longer takes (they hold it: nothing leaks).
_KNOWN = {
    "expired": "That token has expired. Ask the server's operator for a new one.",
    "revoked": "That token was revoked. Ask the server's operator for a new one.",
    "not_yet_valid": "That token is not valid yet. Check this computer's clock, or try again later.",
}
_NOT_ACCEPTED = "That token is not accepted here. Check it and try again."


class WebDoor:
    """What the gate asks of the web pages: the sign-in session in place of a bearer header on
    ``paths`` (and on any path no route answers, so a signed-in browser's 404 page keeps its
    header), and a redirect to the login form for a browser that has neither."""

    def __init__(self, paths: Collection[str], page_paths: Collection[str], sessions: PageSessions | None) -> None:
        self.paths = frozenset(paths)
        self.page_paths = frozenset(page_paths)
        self.sessions = sessions
        # Every path the app routes (set once it is built): the session is never accepted on
        # another door's (/mcp, /healthz, /metrics), only on the pages' and on unrouted ones.
        self.routed: frozenset[str] | None = None

    def covers(self, path: str) -> bool:
        """Whether the sign-in session stands in for a bearer header on ``path``."""
        return path in self.paths or (self.routed is not None and path not in self.routed)

    async def authenticate(self, scope: Scope) -> AccessToken | Refusal | None:
        """The caller the request's session cookie stands for; why not; None without a cookie."""
        session_id = _cookie(Headers(scope=scope).get("cookie", ""))
        if not session_id or self.sessions is None:
            return None
        return self.sessions.find(session_id)

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
        path = scope.get("path")
        # A path no route answers is a page only to a browser (it asks for HTML); a program asking
        # for one (an OAuth client probing metadata) gets the 401 that says what to send.
        unrouted = self.routed is not None and path not in self.routed
        html = "text/html" in Headers(scope=scope).get("accept", "")
        if scope.get("method") not in ("GET", "HEAD") or (path not in self.page_paths and not (unrouted and html)):
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


def _clear_cookies(response: Response) -> Response:
    """``response`` telling the browser to drop the session cookie and the old token cookie."""
    response.delete_cookie(COOKIE, path="/", secure=True, httponly=True, samesite="strict")
    response.delete_cookie(LEGACY_COOKIE, path="/", secure=True, httponly=True, samesite="strict")
    return response


def login_routes(
    verifier: TokenVerifier | None,
    caller_name: Callable[[Request], str | None],
    sessions: PageSessions | None = None,
    attempts: FailedAttempts | None = None,
) -> list[tuple[str, Callable[[Request], Awaitable[Response]], list[str]]]:
    """The handlers of /login (GET: the form, POST: check the token, open a session) and /logout."""

    def form_again(request: Request, target: str, error: str, status: int) -> Response:
        return page(
            request, "login.html", {"next": target, "error": error, "signed_in": None}, status=status, bare=True
        )

    async def login_form(request: Request) -> Response:
        target = local_target(request.query_params.get("next"))
        if verifier is None:
            return secure(RedirectResponse(target, status_code=303))
        data = {"next": target, "error": None, "signed_in": caller_name(request)}
        return page(request, "login.html", data, bare=data["signed_in"] is None)  # no links that lead back here

    async def login(request: Request) -> Response:
        if not same_origin(request):
            return error_page(request, 403, "CROSS_ORIGIN", "sign in from this server's own login page")
        form = await _form(request)
        target = local_target(form.get("next"))
        token = (form.get("token") or "").strip()
        if verifier is None or sessions is None:
            return secure(RedirectResponse(target, status_code=303))
        address = client_address(request.scope)
        retry = attempts.retry_after(address) if attempts is not None else 0
        if retry:
            refused(429, "attempts", request.scope, retry_after_s=retry)
            message = f"Too many failed sign-ins from your address. Try again in {retry} seconds."
            response = form_again(request, target, message, 429)
            response.headers["retry-after"] = str(retry)
            return response
        valid = 0 < len(token) <= MAX_TOKEN_CHARS and token.isascii() and token.isprintable() and ";" not in token
        verdict = await check(verifier, token) if valid else Refusal("malformed" if token else "empty_token")
        if isinstance(verdict, Refusal):
            if attempts is not None and not verdict.recognized and token:
                attempts.failed(address)
            refused(401, verdict.reason, request.scope, verdict.caller, **verdict.details)
            return form_again(request, target, _KNOWN.get(verdict.reason, _NOT_ACCEPTED), 401)
        caller = caller_of(verdict)
        if caller.patterns == ():
            refused(403, "insufficient_scope", request.scope, caller.name)
            message = "That token reads no dataset here (a token for /metrics only?): the pages need one that does."
            return form_again(request, target, message, 403)
        session_id = sessions.open(verdict, token)
        logger.info(
            "web.signed_in",
            extra={"event": "web.signed_in", "caller": caller.name, "client": address, "sessions": len(sessions)},
        )
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(COOKIE, session_id, path="/", secure=True, httponly=True, samesite="strict")
        response.delete_cookie(LEGACY_COOKIE, path="/", secure=True, httponly=True, samesite="strict")
        return secure(response)

    async def logout(request: Request) -> Response:
        if not same_origin(request):
            return error_page(request, 403, "CROSS_ORIGIN", "sign out from this server's own pages")
        session_id = _cookie(request.headers.get("cookie", ""))
        ended = sessions.end(session_id) if sessions is not None and session_id else None
        if ended is not None:
            logger.info("web.signed_out", extra={"event": "web.signed_out", "caller": ended.client_id})
        response = RedirectResponse(LOGIN_PATH if verifier is not None else "/", status_code=303)
        return secure(_clear_cookies(response))

    return [(LOGIN_PATH, login_form, ["GET"]), (LOGIN_PATH, login, ["POST"]), (LOGOUT_PATH, logout, ["POST"])]
