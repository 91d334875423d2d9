"""Listening for HTTP: the socket ``serve --http`` binds, and the uvicorn server that serves on it —
its configuration, readiness logged as a JSON event (then ``on_started``, for what starts once the
server listens: the warm-up, the start message), and a graceful stop that exits 0."""

from __future__ import annotations

import contextlib
import logging
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from ipaddress import IPv4Network, IPv6Network
from types import FrameType
from typing import Any

import uvicorn
from starlette.types import ASGIApp

from mcpower.errors import McpowerError

logger = logging.getLogger("mcpower.server.http")  # the transport's events, under its name as before

MCP_PATH = "/mcp"
# The bound on a graceful stop; a request still running then is cancelled (the client gets a 500).
SHUTDOWN_GRACE_S = 5
# An idle keep-alive connection is closed after this long (uvicorn's default too).
KEEP_ALIVE_S = 5


def mcp_url(host: str, port: int) -> str:
    """The URL of the MCP endpoint on ``host``:``port`` (IPv6 addresses in brackets)."""
    return f"http://{f'[{host}]' if ':' in host else host}:{port}{MCP_PATH}"


def bind(host: str, port: int) -> socket.socket:
    """A socket listening on ``host``:``port`` (port 0: a free one).

    Raises:
        McpowerError: the address cannot be used (taken, not this machine's, not resolvable).
    """
    address = host.strip("[]")
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on connections whose socket says TCP, and
    # without it a response written in two parts waits for the client's delayed ACK (40 ms).
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((address, port))
    except OSError as e:
        sock.close()
        raise McpowerError(
            f"cannot listen on {host} port {port}: {e.strerror or e}; "
            "choose another --port, or an address of this machine for --host"
        ) from None
    return sock


class ListeningServer(uvicorn.Server):
    """uvicorn, logging readiness as a JSON event (then calling ``on_started(host, port)``), and
    exiting 0 after a graceful stop.

    (uvicorn re-raises a caught SIGTERM once it has shut down, so the process would end by the
    signal after all.)
    """

    def __init__(self, config: uvicorn.Config, on_started: Callable[[str, int], object] | None = None) -> None:
        super().__init__(config)
        self.on_started = on_started

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():  # tests serve from a thread
            yield
            return
        handled = (signal.SIGINT, signal.SIGTERM)
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in handled}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if not self.should_exit:
            name = signal.Signals(sig).name
            logger.info("server.shutdown", extra={"event": "server.shutdown", "signal": name})
        super().handle_exit(sig, frame)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started and sockets:
            host, port = sockets[0].getsockname()[:2]
            logger.info(
                "server.listening",
                extra={"event": "server.listening", "host": host, "port": port, "url": mcp_url(host, port)},
            )
            if self.on_started is not None:
                self.on_started(host, port)


def uvicorn_config(
    app: ASGIApp, protocol: Any, max_connections: int, trusted: list[IPv4Network | IPv6Network]
) -> uvicorn.Config:
    """uvicorn's configuration for ``app`` over the guarded ``protocol`` (connections.py)."""
    return uvicorn.Config(
        app,
        http=protocol,
        # X-Forwarded-For names the client only when a trusted proxy sends it (uvicorn would trust any
        # loopback client's, or FORWARDED_ALLOW_IPS from the environment): a client could pick its address.
        proxy_headers=bool(trusted),
        forwarded_allow_ips=[str(n) for n in trusted] or [],
        ws="none",  # no WebSocket routes; an upgrade would leave the guarded protocol
        lifespan="on",
        # uvicorn's own bound, on connections or requests at once (503 past it): one above the
        # guard's, so every connection it keeps is served, and requests whose clients left still count.
        limit_concurrency=max_connections + 1,
        timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
        timeout_keep_alive=KEEP_ALIVE_S,
        access_log=False,
        log_config=None,  # our handlers (logging.py): JSON on stderr
        server_header=False,
    )
