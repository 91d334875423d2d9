"""What a connection may cost before it has sent a request: a cap on open connections, and deadlines
on the parts of a request uvicorn waits for without one.

uvicorn (0.54, its h11 protocol, the one used without httptools) closes a connection idle between
requests after ``timeout_keep_alive``, but sets no clock while a request's headers arrive: a client
sending a header byte every few seconds, or nothing at all after connecting, holds its connection
and descriptor for as long as it likes. Nor does it bound the rest of a body the app did not read
(a refused request): each byte that arrives restarts nothing and is discarded, for ever. Its
``limit_concurrency`` answers ``503`` only once a request's headers are in, so it bounds neither.

:class:`GuardedH11Protocol` is uvicorn's h11 protocol with one watchdog per connection, re-armed
whenever what the connection is waiting for changes (h11's state says which):

- headers: a request's line and headers must be complete within ``header_timeout`` of the moment
  the connection could send one (it opened, or the previous response ended);
- the rest of a body nobody reads: within ``drain_timeout`` of the response that refused it.

Past either, the connection is closed. A connection beyond ``max_connections`` open at once is
closed as soon as it is accepted, before anything is read from it, and so is one beyond
``max_per_address`` open from its client's address (``access.peer_key``: IPv6 by its /64; loopback
too): one address holding idle connections, reopened as the header deadline closes them, cannot
take the room every other client needs. Behind a reverse proxy every connection comes from the
proxy: its addresses (``trusted``, ``MCPOWER_HTTP_TRUSTED_PROXIES``) have no share of their own,
only the cap. The body a request handler does read has its own deadline in auth/gate.py,
answered with 408.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, ClassVar, Literal

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from mcpower.defaults import DEFAULT_HTTP_MAX_CONNECTIONS
from mcpower.server.auth.access import Network, in_networks, peer_key

logger = logging.getLogger(__name__)

# Request line and headers (a few hundred bytes from any real client) within 10 s.
HEADER_TIMEOUT_S = 10.0
# The unread rest of a refused body: as long as an idle keep-alive connection is kept.
DRAIN_TIMEOUT_S = 5.0
MAX_CONNECTIONS = DEFAULT_HTTP_MAX_CONNECTIONS

Phase = Literal["headers", "body"]


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a connection cap and deadlines on headers and unread bodies.

    Configure a subclass with :meth:`configured` (uvicorn builds protocols from a class).
    """

    header_timeout: ClassVar[float] = HEADER_TIMEOUT_S
    drain_timeout: ClassVar[float] = DRAIN_TIMEOUT_S
    max_connections: ClassVar[int] = MAX_CONNECTIONS
    max_per_address: ClassVar[int] = MAX_CONNECTIONS
    trusted: ClassVar[list[Network]] = []

    @classmethod
    def configured(
        cls,
        header_timeout: float,
        drain_timeout: float,
        max_connections: int,
        max_per_address: int | None = None,
        trusted: list[Network] | None = None,
    ) -> type[GuardedH11Protocol]:
        attributes = {
            "header_timeout": header_timeout,
            "drain_timeout": drain_timeout,
            "max_connections": max_connections,
            "max_per_address": max_per_address or max_connections,
            "trusted": list(trusted or []),
        }
        return type(cls.__name__, (cls,), attributes)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._phase: Phase | None = None
        self._watchdog: asyncio.TimerHandle | None = None
        self.peer: str | None = None  # the address this connection counts against (None: a trusted proxy)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        host = str(self.client[0]) if self.client else "unknown"
        self.peer = None if in_networks(host, self.trusted) else peer_key(host)
        # Those already closed (refused ones among them) leave the set a moment later: not counted.
        others = [c for c in self.connections if c is not self and not c.transport.is_closing()]
        reason, open_now = None, len(others)
        if len(others) >= self.max_connections:
            reason = "cap"
        elif self.peer is not None:
            open_now = sum(1 for c in others if isinstance(c, GuardedH11Protocol) and c.peer == self.peer)
            if open_now >= self.max_per_address:
                reason = "per_address"
        if reason is not None:
            logger.warning(
                "http.connection_refused: %s",
                reason,
                extra={"event": "http.connection_refused", "reason": reason, "client": self.peer, "open": open_now},
            )
            transport.close()  # nothing read, nothing answered: connection_lost forgets it
            return
        self._watch()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._watch()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._watch()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_watchdog()
        super().connection_lost(exc)

    def _waiting_for(self) -> Phase | None:
        theirs, ours = self.conn.their_state, self.conn.our_state
        if theirs is h11.IDLE:
            return "headers"
        if theirs is h11.SEND_BODY and ours in (h11.DONE, h11.MUST_CLOSE):
            return "body"  # answered already: what still comes is discarded
        return None  # a request being read by the app, or answered: bounded elsewhere

    def _watch(self) -> None:
        phase = None if self.transport.is_closing() else self._waiting_for()
        if phase == self._phase:
            return  # the deadline runs from when the wait began, whatever arrives meanwhile
        self._stop_watchdog()
        self._phase = phase
        if phase is not None:
            limit = self.header_timeout if phase == "headers" else self.drain_timeout
            self._watchdog = self.loop.call_later(limit, self._expire, phase, limit)

    def _expire(self, phase: Phase, limit: float) -> None:
        self._watchdog = None
        if self._phase != phase or self.transport.is_closing():
            return
        logger.info("http.timeout", extra={"event": "http.timeout", "waiting_for": phase, "limit_s": limit})
        self.transport.close()

    def _stop_watchdog(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
