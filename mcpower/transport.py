"""The stdio transport: the SDK's, plus JSON-RPC answers to lines that are not valid messages.

The SDK drops a malformed line silently, so a client that sent it waits for its own timeout. Here
a line that is not JSON gets ``-32700 Parse error`` and JSON that is not a JSON-RPC message
(a batch, an object without ``jsonrpc``, a scalar, a request whose id is null or not a string or
integer) gets ``-32600 Invalid Request``, as JSON-RPC 2.0 asks; the server then carries on with the
next line. Lines over MAX_LINE_BYTES are refused the same way without being parsed.
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
from mcp.server.stdio import _claim_fd, _open_stdin_diversion, _open_stdout_diversion, _UnownedTextWrapper
from mcp.shared._context_streams import create_context_streams
from mcp.shared.message import SessionMessage

logger = logging.getLogger(__name__)

# A query is at most 1,024 characters; 16 MB leaves room for any legitimate message.
MAX_LINE_BYTES = 16 * 1024 * 1024


def _error_for(line: str) -> types.JSONRPCError:
    """The JSON-RPC error answering a line the SDK could not take as a message."""
    if len(line) > MAX_LINE_BYTES:
        return _error(None, -32600, f"Invalid Request: message over {MAX_LINE_BYTES} bytes")
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


@asynccontextmanager
async def stdio_transport() -> AsyncIterator[tuple[Any, Any]]:
    """Like ``mcp.server.stdio.stdio_server`` (fd 0 and 1 diverted while serving), with error replies."""
    stdin_buffer, restore_stdin = _claim_fd(0, sys.stdin, "rb", _open_stdin_diversion)
    stdout_buffer, restore_stdout = _claim_fd(1, sys.stdout, "wb", _open_stdout_diversion)
    stdin = anyio.wrap_file(_UnownedTextWrapper(stdin_buffer, encoding="utf-8", errors="replace"))
    stdout = anyio.wrap_file(_UnownedTextWrapper(stdout_buffer, encoding="utf-8"))
    read_writer, read_stream = create_context_streams[SessionMessage | Exception](0)
    write_stream, write_reader = create_context_streams[SessionMessage](0)
    replies = write_stream.clone()

    async def stdin_reader() -> None:
        async with read_writer, replies:
            async for line in stdin:
                if not line.strip():
                    continue
                try:
                    if len(line) > MAX_LINE_BYTES:
                        raise ValueError("over the size limit")  # refused unparsed, however valid
                    message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                    if isinstance(message, types.JSONRPCNotification) and _has_id(line):
                        raise ValueError("a request whose id is not a string or an integer")
                except Exception:
                    error = _error_for(line)
                    logger.warning(
                        "protocol.invalid_message",
                        extra={"event": "protocol.invalid_message", "code": error.error.code, "bytes": len(line)},
                    )
                    await replies.send(SessionMessage(error))
                    continue
                await read_writer.send(SessionMessage(message))

    async def stdout_writer() -> None:
        async with write_reader:
            async for session_message in write_reader:
                text = session_message.message.model_dump_json(by_alias=True, exclude_unset=True)
                await stdout.write(text + "\n")
                await stdout.flush()

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(stdin_reader)
            tg.start_soon(stdout_writer)
            yield read_stream, write_stream
    finally:
        if restore_stdout is not None:
            restore_stdout()
        if restore_stdin is not None:
            restore_stdin()


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
