"""The stdio transport: the SDK's `stdio_server`, fed by a reader that answers bad lines itself.

The SDK (2.3) drops a line that is not a valid message without a word, so a client that sent it
waits for its own timeout, and it reads a line of any length whole. This module gives the SDK's
public ``stdio_server()`` its own stdin: lines are read with a byte limit (a longer one is skipped
in bounded pieces and refused: memory stays bounded), and a line that is not JSON gets
``-32700 Parse error``, JSON that is not a JSON-RPC message (a batch, an object without
``jsonrpc``, a scalar, a request whose id is null or not a string or integer) gets
``-32600 Invalid Request``, as JSON-RPC 2.0 asks. The server then carries on with the next line.
Valid lines go on to the SDK unchanged; the SDK keeps stdout (fd 1 diverted to stderr while serving).

The one private name used is ``MCPServer._lowlevel_server``: MCPServer has no public accessor for
the low-level server that ``stdio_server``'s streams are run by (the SDK's own client reaches it
the same way).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import mcp_types as types
from anyio.abc import ObjectSendStream
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage

logger = logging.getLogger(__name__)

# A query is at most 1,024 characters; 16 MB leaves room for any legitimate message.
MAX_LINE_BYTES = 16 * 1024 * 1024
_SKIP_BYTES = 1 << 20  # the rest of an over-long line is read and dropped in pieces this big


def error_for(line: str | None) -> types.JSONRPCError | None:
    """None if ``line`` is a message the SDK takes as meant; else the JSON-RPC error answering it.

    ``line`` None stands for a line over MAX_LINE_BYTES (refused unread, however valid).
    """
    if line is None:
        return _error(None, -32600, f"Invalid Request: message over {MAX_LINE_BYTES} bytes")
    try:
        message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    except Exception:
        message = None
    if message is not None and not (isinstance(message, types.JSONRPCNotification) and _has_id(line)):
        return None
    try:
        data = json.loads(line)
    except (ValueError, RecursionError):
        return _error(None, -32700, "Parse error: not valid JSON (or nested too deeply)")
    if isinstance(data, list):
        return _error(None, -32600, "Invalid Request: JSON-RPC batches are not supported by MCP")
    msg_id = data.get("id") if isinstance(data, dict) else None
    if isinstance(msg_id, bool) or not isinstance(msg_id, (str, int)):
        msg_id = None
    if isinstance(data, dict) and data.get("jsonrpc") == "2.0" and "id" in data and msg_id is None:
        reason = "the id must be a string or an integer (MCP requests never have a null id)"
    elif isinstance(data, dict) and data.get("jsonrpc") == "2.0":
        reason = "malformed message: check field types, and that strings are valid Unicode (no lone surrogates)"
    else:
        reason = 'not a JSON-RPC 2.0 message (an object with "jsonrpc": "2.0")'
    return _error(msg_id, -32600, f"Invalid Request: {reason}")


def _has_id(line: str) -> bool:
    """Whether a line the SDK took as a notification has an ``id`` (null, a float, an object ...).

    Such a line is a request with an invalid id: answered with -32600 rather than dropped, so its
    sender does not wait for a reply that never comes.
    """
    if '"id"' not in line:
        return False
    try:
        data = json.loads(line)
    except (ValueError, RecursionError):
        return False
    return isinstance(data, dict) and "id" in data


def _error(msg_id: str | int | None, code: int, message: str) -> types.JSONRPCError:
    return types.JSONRPCError(jsonrpc="2.0", id=msg_id, error=types.ErrorData(code=code, message=message))


class _Lines:
    """The valid lines of the wire (an fd), for ``stdio_server``; bad lines are answered through ``replies``."""

    def __init__(self, fd: int, replies: ObjectSendStream[SessionMessage]) -> None:
        self._file = os.fdopen(fd, "rb", buffering=65536, closefd=False)
        self._replies = replies

    def _read(self) -> tuple[bytes, bool]:
        """The next line (b"" at EOF), and whether it was over the limit (then only its first bytes)."""
        line = self._file.readline(MAX_LINE_BYTES + 1)
        if len(line) <= MAX_LINE_BYTES or line.endswith(b"\n"):
            return line, False
        rest = line
        while rest and not rest.endswith(b"\n"):
            rest = self._file.readline(_SKIP_BYTES)
        return line[:64], True

    def __aiter__(self) -> _Lines:
        return self

    async def __anext__(self) -> str:
        while True:
            raw, too_long = await anyio.to_thread.run_sync(self._read, abandon_on_cancel=True)
            if not raw:
                await self._replies.aclose()
                raise StopAsyncIteration
            text = raw.decode("utf-8", errors="replace")
            if not too_long and not text.strip():
                continue
            error = error_for(None if too_long else text)
            if error is None:
                return text
            logger.warning(
                "protocol.invalid_message",
                extra={"event": "protocol.invalid_message", "code": error.error.code, "bytes": len(raw)},
            )
            await self._replies.send(SessionMessage(error))


@asynccontextmanager
async def stdio_transport() -> AsyncIterator[tuple[Any, Any]]:
    """Like ``mcp.server.stdio.stdio_server()``, with the line limit and error replies above."""
    wire = os.dup(0)  # our copy of the wire; fd 0 reads /dev/null meanwhile, as the SDK does it
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    send_error, errors = anyio.create_memory_object_stream[SessionMessage](16)
    try:
        async with stdio_server(stdin=_Lines(wire, send_error)) as (read_stream, write_stream):  # type: ignore[arg-type]
            replies = write_stream.clone()

            async def forward_errors() -> None:
                async with errors, replies:
                    async for message in errors:
                        await replies.send(message)

            async with anyio.create_task_group() as tg:
                tg.start_soon(forward_errors)
                yield read_stream, write_stream
    finally:
        os.dup2(wire, 0)  # `wire` stays open: a reader thread still blocked in readline may hold it


def run_stdio(server: Any, grace: float = 0.5) -> None:
    """Serve ``server`` (an MCPServer) over stdio until EOF, SIGTERM or SIGINT.

    Always exits: within ``grace`` seconds of a signal, and at once after EOF, without joining the
    worker threads of searches a departed client abandoned.
    """
    lowlevel = server._lowlevel_server

    async def serve() -> None:
        async with anyio.create_task_group() as tg:

            async def on_signal() -> None:
                with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                    async for signum in signals:
                        logger.info("server.shutdown", extra={"event": "server.shutdown", "signal": signum.name})
                        # The stdin reader and worker threads cannot be interrupted: bound the wait.
                        threading.Timer(grace, os._exit, (0,)).start()
                        tg.cancel_scope.cancel()
                        return

            tg.start_soon(on_signal)
            async with stdio_transport() as (read_stream, write_stream):
                await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())
            logger.info("server.shutdown", extra={"event": "server.shutdown", "reason": "stdin closed"})
            tg.cancel_scope.cancel()

    try:
        anyio.run(serve)
    finally:
        sys.stderr.flush()
        os._exit(0)
