"""The stdio transport: JSON-RPC lines over stdin and stdout, for the SDK's server loop.

The SDK's own ``stdio_server`` (2.3) drops a line that is not a valid message without a word, so a
client that sent it waits for its own timeout; it reads a line of any length whole; it validates
each message on its way in, and writes, then flushes, each answer on a worker thread (two round
trips through a thread per answer). This transport reads lines with a byte limit (a longer one is
dropped in bounded pieces and refused: memory stays bounded), answers a line that is not JSON with
``-32700 Parse error`` and JSON that is not a JSON-RPC message (a batch, an object without
``jsonrpc``, a scalar, a request whose id is null or not a string or integer) with ``-32600
Invalid Request``, as JSON-RPC 2.0 asks, and carries on with the next line. A valid message is
validated once, as the SDK would, and handed to it; answers are written as the SDK writes them.
Pipes are read on the event loop and written by a thread of their own (wire.py).

The one private name used is ``MCPServer._lowlevel_server``: MCPServer has no public accessor for
the low-level server that the transport's streams are run by (the SDK's own client reaches it
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
from anyio.streams.memory import MemoryObjectSendStream
from mcp.shared.message import SessionMessage

from mcpower.server.wire import LineReader, LineWriter

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

logger = logging.getLogger(__name__)

# A query is at most 1,024 characters; 16 MB leaves room for any legitimate message.
MAX_LINE_BYTES = 16 * 1024 * 1024


def parse_line(line: str | None) -> tuple[types.JSONRPCMessage | None, types.JSONRPCError | None]:
    """The message ``line`` holds, as the SDK takes it (validated once, here); or None and the
    JSON-RPC error answering it. ``line`` None stands for a line over MAX_LINE_BYTES (refused unread,
    however valid)."""
    if line is None:
        return None, _error(None, -32600, f"Invalid Request: message over {MAX_LINE_BYTES} bytes")
    try:
        message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    except Exception:
        message = None
    if message is not None and not (isinstance(message, types.JSONRPCNotification) and _has_id(line)):
        return message, None
    return None, _refusal(line)


def _refusal(line: str) -> types.JSONRPCError:
    """The error answering a line that is no message the SDK takes as meant."""
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


class _Outgoing:
    """The SDK's write stream: each message one JSON line, written by the LineWriter's thread."""

    def __init__(self, writer: LineWriter) -> None:
        self._writer = writer

    async def send(self, message: SessionMessage) -> None:
        line = message.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
        await self._writer.send(line.encode("utf-8", errors="replace"))

    async def aclose(self) -> None:
        self._writer.close()

    async def __aenter__(self) -> _Outgoing:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


async def _read_messages(
    reader: LineReader, incoming: MemoryObjectSendStream[SessionMessage | Exception], outgoing: _Outgoing
) -> None:
    """Valid messages from the wire go on to the SDK; a bad line is answered here and skipped."""
    async with incoming:
        while True:
            raw, too_long = await reader.next()
            if not raw:
                return  # EOF: closing ``incoming`` ends the session
            text = raw.decode("utf-8", errors="replace")
            if not too_long and not text.strip():
                continue
            message, error = parse_line(None if too_long else text)
            if message is not None:
                await incoming.send(SessionMessage(message))
                continue
            assert error is not None
            logger.warning(
                "protocol.invalid_message",
                extra={"event": "protocol.invalid_message", "code": error.error.code, "bytes": len(raw)},
            )
            await outgoing.send(SessionMessage(error))


def _private_copy(fd: int) -> int:
    """A close-on-exec duplicate of ``fd`` above the standard descriptors."""
    if fcntl is not None:
        return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    return os.dup(fd)  # pragma: no cover - Windows: not inheritable either


@asynccontextmanager
async def stdio_transport() -> AsyncIterator[tuple[Any, Any]]:
    """Like ``mcp.server.stdio.stdio_server()``: the SDK's streams over stdin and stdout, with the
    line limit and error replies above, each message validated once, and no thread between the
    event loop and a pipe (wire.py). While serving, fd 0 reads /dev/null and fd 1 writes to stderr,
    so stray reads and prints miss the wire; both are restored after."""
    wire_in, wire_out = _private_copy(0), _private_copy(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    try:
        diversion = os.dup(2)
    except OSError:  # no stderr: stray prints go nowhere
        diversion = os.open(os.devnull, os.O_WRONLY)
    os.dup2(diversion, 1)
    os.close(diversion)
    writer = LineWriter(wire_out)
    outgoing = _Outgoing(writer)
    send_incoming, incoming = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_read_messages, LineReader(wire_in, MAX_LINE_BYTES), send_incoming, outgoing)
            yield incoming, outgoing
            tg.cancel_scope.cancel()  # the session is over: the reader has seen EOF, or is not needed
        if not await writer.drain():
            logger.warning("the client did not read the last answers", extra={"event": "protocol.undelivered"})
    finally:
        # The wire descriptors stay open: a thread may still block on one (a read, a write).
        os.dup2(wire_out, 1)
        os.dup2(wire_in, 0)


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
