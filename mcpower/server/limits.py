"""What bounds the work of MCP requests: a fixed pool of worker threads, and a time limit per request."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import anyio
from mcp import MCPError
from mcp.types import INTERNAL_ERROR, CallToolResult

from mcpower.server.responses import error_result

logger = logging.getLogger(__name__)

T = TypeVar("T")


class Workers:
    """A fixed pool of threads for the blocking part of requests: embedding, FAISS, SQLite.

    ``anyio.to_thread.run_sync(..., abandon_on_cancel=True)`` frees a cancelled call's slot at once
    while its thread runs on, so clients that disconnect or time out could pile up any number of
    searches running at once. Here a call cancelled while it waits for a thread is dropped, and one
    already running keeps its thread until it ends: never more than ``threads`` run, whatever
    clients do, and the event loop never blocks.
    """

    def __init__(self, threads: int) -> None:
        self.threads = threads
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="mcpower-worker")

    async def run(self, fn: Callable[[], T]) -> T:
        """``fn()`` on a worker thread. Cancelling the caller cancels ``fn`` if it has not started."""
        # Every mcpower transport runs on asyncio; wrap_future cancels the pool's future with ours.
        return await asyncio.wrap_future(self._pool.submit(fn))

    def close(self) -> None:
        """Drop queued calls and let the threads end once their current call returns."""
        self._pool.shutdown(wait=False, cancel_futures=True)


def timeout_result(seconds: float) -> CallToolResult:
    """The isError result of a tool call that ran out of time (code TIMEOUT)."""
    message = (
        f"the call took longer than {seconds:g} s, this server's limit per request; "
        "try a narrower query, or ask its operator to raise MCPOWER_HTTP_CALL_TIMEOUT"
    )
    return error_result("TIMEOUT", message)


class TimeLimit:
    """MCP middleware: a request still running after ``seconds`` is cancelled and answered for.

    A tool call gets an isError result with code TIMEOUT (the model can read it and act on it; a
    JSON-RPC error would fail the call in some clients); any other request a JSON-RPC error. The
    search's thread, if it had started, finishes on its own (:class:`Workers` bounds those).
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    async def __call__(self, ctx: Any, call_next: Any) -> Any:
        if ctx.request_id is None:  # a notification: nothing waits for it
            return await call_next(ctx)
        with anyio.move_on_after(self.seconds):
            return await call_next(ctx)
        logger.warning(
            "request.timeout",
            extra={"event": "request.timeout", "method": ctx.method, "limit_s": self.seconds},
        )
        if ctx.method == "tools/call":
            return timeout_result(self.seconds)
        raise MCPError(code=INTERNAL_ERROR, message=f"the request took longer than {self.seconds:g} s")
