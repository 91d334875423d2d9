"""The HTTP app in process: its lifespan (the SDK's session manager) running, reached through
httpx's ASGI transport — what the in-process HTTP tests share (test_http, test_web, test_oauth,
test_ratelimit, test_metrics_audit, test_gate_caller)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx2

from mcpower.registry import Registry
from mcpower.server.app import KnowledgeServer
from mcpower.server.http import HttpOptions, create_http_app

BASE = "http://127.0.0.1:8765"
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}


@asynccontextmanager
async def app_serving(
    registry: Registry, options: HttpOptions, setup: Callable[[KnowledgeServer], object] | None = None
) -> AsyncIterator[tuple[KnowledgeServer, Any]]:
    """The server and the ASGI app ``options`` make of ``registry`` (``setup`` sees the server
    first), served until the block ends."""
    server, app = create_http_app(registry, options)
    if setup is not None:
        setup(server)
    try:
        async with server.session_manager.run():
            yield server, app
    finally:
        server.close()


def asgi_client(app: Any, token: str | None = None, **headers: str) -> httpx2.AsyncClient:
    """A client of ``app`` sending ``headers``, and ``token`` as its bearer token if given."""
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url=BASE, headers=headers)
