"""How a page leaves the server: one template per page rendered from the same data its JSON twin
(``?format=json``) returns, security headers on every answer, and the package's static files.

Templates autoescape everything; dataset text reaches them only through the filters of text.py.
The Content-Security-Policy allows scripts, styles and images from this server only — no inline
script or style of any kind — and no framing; responses are never cached by shared caches.
"""

from __future__ import annotations

import logging
from importlib import resources
from pathlib import PurePosixPath
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mcpower import __version__
from mcpower.server.auth import callers
from mcpower.web.text import excerpt, highlight, plain, readable, visible, web_url

logger = logging.getLogger(__name__)

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    # Not no-referrer: under it a browser sends `Origin: null` with the sign-in form, which the
    # Origin check must then refuse. same-origin sends no referrer to any other site (and no page
    # links to one: document text never becomes a link).
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
    # Pages show what a caller may read: no shared cache may keep them.
    "Cache-Control": "no-store",
}
_STATIC_TYPES = {
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".svg": "image/svg+xml",
    ".txt": "text/plain; charset=utf-8",
}
FAVICON = "favicon.svg"
STATIC_PREFIX = "/static/"


def _environment() -> Environment:
    env = Environment(
        loader=PackageLoader("mcpower.web", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["visible"] = visible
    env.filters["highlight"] = highlight
    env.filters["plain"] = plain
    env.filters["readable"] = readable
    env.filters["excerpt"] = excerpt
    env.filters["web_url"] = web_url
    env.filters["number"] = lambda n: "" if n is None else f"{n:,}"
    env.filters["size"] = human_size
    env.filters["when"] = when
    env.globals["version"] = __version__
    return env


def human_size(n: int | None) -> str:
    """Bytes as a person reads them: 1.2 MB."""
    if n is None:
        return ""
    size = float(n)
    for unit in ("bytes", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{int(size)} {unit}" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TB"  # pragma: no cover - the loop returns at GB


def when(value: str | None) -> str:
    """An ISO 8601 UTC time as 'YYYY-MM-DD HH:MM UTC'."""
    if not value:
        return ""
    return value[:16].replace("T", " ") + " UTC"


def wants_json(request: Request) -> bool:
    return request.query_params.get("format") == "json"


def secure(response: Response) -> Response:
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    return response


class SecurityHeaders:
    """ASGI middleware: every answer outside ``skip`` (``/mcp``) carries :data:`SECURITY_HEADERS`
    — the pages, their redirects and refusals, and any path no route answers."""

    def __init__(self, app: ASGIApp, skip: str) -> None:
        self.app = app
        self.skip = skip
        self._raw = [(k.lower().encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] == self.skip or scope["path"].startswith(self.skip + "/"):
            await self.app(scope, receive, send)
            return

        async def send_secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                present = {k.lower() for k, _ in message.get("headers", [])}
                added = [(k, v) for k, v in self._raw if k not in present]
                message = {**message, "headers": [*message.get("headers", []), *added]}
            await send(message)

        await self.app(scope, receive, send_secured)


def page(request: Request, template: str, data: dict[str, Any], status: int = 200, **extra: Any) -> Response:
    """``data`` as JSON (``?format=json``) or through ``template`` (with ``extra`` for the template only)."""
    if wants_json(request):
        return secure(JSONResponse(data, status_code=status))
    json_url = request.url.include_query_params(format="json")
    if extra.get("caller") is None:  # every page, an error's too, keeps the signed-in header
        extra["caller"] = signed_in(request)
    html = ENV.get_template(template).render(
        data=data, request_path=request.url.path, json_url=f"{json_url.path}?{json_url.query}", **extra
    )
    return secure(HTMLResponse(html, status_code=status))


def signed_in(request: Request) -> str | None:
    """Who the header says is signed in, as the operator knows them: a named token's name, an OAuth
    subject, and ``operator`` for the all-datasets MCPOWER_TOKEN; None when no token is needed."""
    if not getattr(request.scope.get("user"), "is_authenticated", False):
        return None
    name = callers.caller_from_scope(request.scope).name
    return "operator" if name == callers.OPERATOR else name


def error_page(request: Request, status: int, code: str, message: str, caller: Any = None) -> Response:
    """A refusal or failure in plain words, with its code: the error template, or its JSON twin."""
    data = {"status": "error", "error": {"code": code, "message": message}}
    return page(request, "error.html", data, status, caller=caller, title=_TITLES.get(status, "Error"))


_TITLES = {
    400: "Not a valid request",
    403: "Not allowed",
    404: "Not found",
    429: "Too many requests",
    503: "Not available",
    504: "Took too long",
}


def _static_files() -> dict[str, bytes]:
    """The static files shipped in the package, read once (a few KB)."""
    out: dict[str, bytes] = {}
    for item in resources.files("mcpower.web").joinpath("static").iterdir():
        if item.is_file() and PurePosixPath(item.name).suffix in _STATIC_TYPES:
            out[item.name] = item.read_bytes()
    return out


STATIC = _static_files()


def static_paths() -> list[str]:
    """The URL of each static file (they need no token: the login page uses them)."""
    return [STATIC_PREFIX + name for name in sorted(STATIC)]


async def static(request: Request) -> Response:
    name = str(request.path_params.get("name", FAVICON))
    body = STATIC.get(name)
    if body is None:
        return secure(Response("Not found", status_code=404, media_type="text/plain"))
    media = _STATIC_TYPES[PurePosixPath(name).suffix]
    response = Response(body, media_type=media, headers={"Cache-Control": "public, max-age=3600"})
    return secure(response)


ENV = _environment()
