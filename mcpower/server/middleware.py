"""Middleware around every MCP request: the warm-up after the handshake, the capabilities this
server really has, and a bound on resource URIs."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from typing import Any

from mcp.server.mcpserver.tools import Tool
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS

from mcpower.registry import Registry
from mcpower.server.tool_schemas import build

logger = logging.getLogger(__name__)

# A document URI is mcpower://<dataset id>/<path>: ids are 64 characters, paths rarely 300.
MAX_RESOURCE_URI_CHARS = 4096


class WarmUpAfterHandshake:
    """Starts building the tools' argument models (tool_schemas.py) and loading stores and the query
    model once the handshake is done, off the initialize path (stdio, and an HTTP server's first MCP
    request); ``serve --http`` also calls :meth:`start` once it listens, so a web page's first search
    does not pay the model load either."""

    def __init__(self, registry: Registry, tools: Iterable[Tool] = ()) -> None:
        self.registry = registry
        self.tools = list(tools)
        self.started = False
        self._lock = threading.Lock()

    async def __call__(self, ctx: Any, call_next: Any) -> Any:
        result = await call_next(ctx)
        if not self.started and ctx.method != "initialize":
            self.start()
        return result

    def start(self) -> threading.Thread | None:
        """Start the warm-up in a background thread, once (later calls do nothing and return None).
        It never blocks the caller; a dataset or model that fails is logged and left for its first
        search to report, as without the warm-up."""
        with self._lock:
            if self.started:
                return None
            self.started = True
        thread = threading.Thread(target=self._warm, name="mcpower-warm-up", daemon=True)
        thread.start()
        return thread

    def _warm(self) -> None:
        started = time.perf_counter()
        build(self.tools)  # first: a tool's first call needs its model, not the query model
        import mcpower.search  # noqa: F401  the tools' core, deferred past initialize (tools.py)

        self.registry.warm_up()
        logger.info(
            "server.warm",
            extra={"event": "server.warm", "duration_ms": round((time.perf_counter() - started) * 1000, 1)},
        )


class NoPromptsAdvertised:
    """The SDK registers a prompts handler on every MCPServer, so it advertises prompts; this server
    has none, and says so when a client asks what it can do."""

    async def __call__(self, ctx: Any, call_next: Any) -> Any:
        result = await call_next(ctx)
        if ctx.method not in ("initialize", "server/discover"):  # the handshake, and its 2026-07-28 successor
            return result
        if isinstance(result, dict) and isinstance(result.get("capabilities"), dict):  # the wire form
            result["capabilities"].pop("prompts", None)
        elif getattr(getattr(result, "capabilities", None), "prompts", None) is not None:
            result = result.model_copy(
                update={"capabilities": result.capabilities.model_copy(update={"prompts": None})}
            )
        return result


class ListChangedAdvertised:
    """A 2025-revision client is sent ``notifications/resources/list_changed`` when a dataset is
    republished (changes.py); the SDK advertises ``resources.listChanged`` only when told through the
    transport's initialization options, so the handshake says it here, on every transport alike.
    (At 2026-07-28 the SDK derives it from the ``subscriptions/listen`` it serves.)"""

    async def __call__(self, ctx: Any, call_next: Any) -> Any:
        result = await call_next(ctx)
        if ctx.method != "initialize":
            return result
        if isinstance(result, dict) and isinstance(result.get("capabilities"), dict):  # the wire form
            resources = result["capabilities"].get("resources")
            if isinstance(resources, dict):
                resources["listChanged"] = True
        elif getattr(getattr(result, "capabilities", None), "resources", None) is not None:
            capabilities = result.capabilities
            resources = capabilities.resources.model_copy(update={"list_changed": True})
            result = result.model_copy(
                update={"capabilities": capabilities.model_copy(update={"resources": resources})}
            )
        return result


class ResourceUriLimit:
    """Refuses an over-long resource URI before the SDK reads it, whose errors echo the URI (twice)."""

    async def __call__(self, ctx: Any, call_next: Any) -> Any:
        if ctx.method == "resources/read" and isinstance(ctx.params, dict):
            uri = ctx.params.get("uri")
            if isinstance(uri, str) and len(uri) > MAX_RESOURCE_URI_CHARS:
                raise MCPError(
                    code=INVALID_PARAMS,
                    message=f"resource URI of {len(uri)} characters; document URIs are at most {MAX_RESOURCE_URI_CHARS}",
                )
        return await call_next(ctx)
