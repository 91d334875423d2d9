"""`mcpower serve --http`'s start message: where it serves MCP and the web pages, and what a
caller needs to get in (a token, and how to get one; OAuth when it is on). Logged on stderr once
the server listens (stdout stays free), as one readable line with the same facts as fields."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mcpower.server.http import HttpOptions

logger = logging.getLogger("mcpower")


def start_message(options: HttpOptions, host: str, port: int) -> tuple[str, dict[str, object]]:
    """The start message for a server listening on ``host``:``port`` with ``options``, and its fields."""
    from mcpower.server.clients import http_url

    mcp = http_url(host, port, options.allow_hosts)
    base = mcp.removesuffix("/mcp")
    parts = [f"mcpower serves MCP at {mcp}"]
    if options.web:
        parts.append(f"web pages at {base}/ (search: {base}/search)")
    else:
        parts.append("no web pages (--no-web)")
    ways = []
    if options.token is not None:
        ways.append("the operator's all-datasets token (MCPOWER_TOKEN / --token-file)")
    if options.tokens_file is not None:
        ways.append(f"a named token from {options.tokens_file} (add one: mcpower token add NAME --datasets ID)")
    if options.oauth is not None:
        ways.append(f"an OAuth access token from {options.oauth.issuer}")
    if ways:
        how = (
            f"sign in at {base}/login, or send it as Authorization: Bearer"
            if options.web
            else "send it as Authorization: Bearer"
        )
        needs = f"a token is required: {'; or '.join(ways)}; {how}"
    else:
        needs = (
            "no token needed: anyone who can reach this address on this machine may read every dataset "
            "(to require one: mcpower token add NAME --datasets ID, or set MCPOWER_TOKEN)"
        )
    parts.append(needs)
    fields: dict[str, object] = {
        "event": "server.ready",
        "mcp_url": mcp,
        "web_url": f"{base}/" if options.web else None,
        "token_required": bool(ways),
        "oauth_issuer": options.oauth.issuer if options.oauth is not None else None,
    }
    return "; ".join(parts), fields


def announcer(options: HttpOptions) -> Callable[[str, int], None]:
    """What ``run_http`` calls once it listens: logs :func:`start_message` (stderr)."""

    def announce(host: str, port: int) -> None:
        message, fields = start_message(options, host, port)
        logger.info(message, extra=fields)

    return announce
