"""Failed attempts to authenticate, limited per client address: guessing a token costs time.

Every request that offers a credential the server does not know (a bearer token, the web sign-in
form) spends one of its address's attempts: :data:`MAX_FAILURES` at once, one more every
:data:`REFILL_S` seconds (ten a minute). An address with none left is answered ``429`` with
``Retry-After`` before its credential is even looked at, whatever it offers — a correct token
included, or the answer would tell a guess that hit from one that missed. Other addresses are not
touched. A credential the server recognizes but no longer accepts (a named token that expired or
was revoked, an OAuth token whose signature holds) is no guess and spends nothing, so a forgotten
agent retrying with its old token does not lock out its address; nor does a request without a
token, or with an empty one.

A hand-typed ``MCPOWER_TOKEN`` may be as short as 16 characters: at ten guesses a minute, even a
weak one of that length takes years. Addresses are counted as :func:`access.peer_key` says (IPv6
by its /64), behind a reverse proxy by the client address it forwards (``MCPOWER_HTTP_TRUSTED_PROXIES``).
The table is bounded: an address whose attempts have refilled is forgotten, and at most
:data:`MAX_ADDRESSES` are kept (the least recently used go first).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable

from mcpower.server.auth.access import peer_key
from mcpower.server.auth.ratelimit import Buckets

logger = logging.getLogger(__name__)

# Ten mistyped tokens in a row is already more than a person makes; a script guessing gets ten a minute.
MAX_FAILURES = 10
REFILL_S = 6.0
MAX_ADDRESSES = 10_000  # ~2 MB at most


class FailedAttempts:
    """The attempts each client address has left (module docstring)."""

    def __init__(
        self,
        burst: int = MAX_FAILURES,
        refill_s: float = REFILL_S,
        clock: Callable[[], float] = time.time,
        max_addresses: int = MAX_ADDRESSES,
    ) -> None:
        self.burst = burst
        self.refill_s = refill_s
        self._buckets = Buckets(1.0 / refill_s, burst, clock, max_addresses)

    def __len__(self) -> int:
        return len(self._buckets)

    def retry_after(self, address: str) -> int:
        """Whole seconds before ``address`` may try again; 0: it may now."""
        wait = self._buckets.peek(peer_key(address))
        return max(1, math.ceil(wait)) if wait > 0 else 0

    def failed(self, address: str) -> None:
        """Count a failed attempt of ``address``; the one that spends its last is logged (warning)."""
        key = peer_key(address)
        self._buckets.take(key)
        if self._buckets.peek(key) > 0:
            logger.warning(
                "http.attempts_exhausted: %s made %d failed attempts to authenticate; it gets 429 until "
                "one more is allowed every %g s",
                key,
                self.burst,
                self.refill_s,
                extra={"event": "http.attempts_exhausted", "client": key, "failures": self.burst},
            )
