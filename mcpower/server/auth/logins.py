"""The web pages' sign-in sessions: what the login cookie names, kept here — never the token.

``/login`` checks a token as a bearer header would be checked, and opens a session: a random id
(256 bits) the browser keeps in the cookie ``__Host-mcpower_session`` (``Secure``, ``Path=/``, no
``Domain``, ``HttpOnly``, ``SameSite=Strict``; mcpower/web/login.py sets it). The server keeps, by
the id's SHA-256, the caller the session stands for and, for the tokens that can be judged again
that way, the SHA-256 of the token it was opened with. On every page request the session is looked
up and its token judged again from that digest (``verifiers.standing``, the rule subscriptions are
judged by too): a named token revoked or expired, or edited to other datasets, takes its sessions
with it at once; the single ``MCPOWER_TOKEN`` is fixed while the server runs, and a new one means a
restart, which ends every session (they live in memory only). An OAuth access token, which only
its issuer can revoke, ends its sessions at its ``exp``. A session also ends:

- :data:`IDLE_S` (8 hours) after its last request, and :data:`ABSOLUTE_S` (24 hours) after sign-in,
  however it is used — a working day;
- at logout: the id is forgotten, so the same cookie sent again opens nothing;
- when a caller signs in for the :data:`MAX_PER_CALLER` + 1st time (its least recently used one
  makes way), or when :data:`MAX_SESSIONS` are open in all (the least recently used anywhere).

The id is a page session and nothing else: the gate looks for it on the web pages' paths only, and
no verifier knows it, so sent as ``Authorization: Bearer`` to ``/mcp`` it is refused (401) like any
unknown token. The cookie still reaches every port of the host (browsers do not separate them), but
there it is worth the pages only, for at most these limits, and logout ends it.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from mcp.server.auth.provider import AccessToken, TokenVerifier

from mcpower.server.auth.verifiers import Refusal, check_digest, standing, token_digest

logger = logging.getLogger(__name__)

COOKIE = "__Host-mcpower_session"  # __Host-: only from a secure origin, with Secure, Path=/ and no Domain
IDLE_S = 8 * 3600.0
ABSOLUTE_S = 24 * 3600.0
MAX_PER_CALLER = 16  # a person's browsers and devices, with room to spare
MAX_SESSIONS = 10_000  # ~2 MB


@dataclass
class _Session:
    access: AccessToken
    digest: bytes | None  # the token's SHA-256, when the verifier can judge it again from that
    created: float
    last: float


def _key(session_id: str) -> bytes:
    """What a session is kept under: the id's hash (looking up an id tells nothing of another's)."""
    return hashlib.sha256(session_id.encode("utf-8", "surrogateescape")).digest()


class PageSessions:
    """The open sign-in sessions (module docstring: their limits). ``clock``: wall-clock seconds
    (an OAuth ``exp`` is one)."""

    def __init__(
        self,
        verifier: TokenVerifier,
        *,
        idle_s: float = IDLE_S,
        absolute_s: float = ABSOLUTE_S,
        per_caller: int = MAX_PER_CALLER,
        max_sessions: int = MAX_SESSIONS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.verifier = verifier
        self.idle_s = idle_s
        self.absolute_s = absolute_s
        self.per_caller = per_caller
        self.max_sessions = max_sessions
        self.clock = clock
        self._sessions: OrderedDict[bytes, _Session] = OrderedDict()  # least recently used first

    def __len__(self) -> int:
        return len(self._sessions)

    def open(self, access: AccessToken, token: str) -> str:
        """A new session for the caller ``access`` stands for, signed in with ``token`` (which is
        hashed, never kept); its id, for the cookie."""
        now = self.clock()
        self._sweep(now)
        digest = token_digest(token)
        judged = check_digest(self.verifier, digest)
        mine = [k for k, s in self._sessions.items() if s.access.client_id == access.client_id]
        for key in mine[: max(0, len(mine) - self.per_caller + 1)]:
            self._end(key, "sessions_per_caller")
        while len(self._sessions) >= self.max_sessions:
            self._end(next(iter(self._sessions)), "sessions_full")
        session_id = secrets.token_urlsafe(32)
        keep = digest if isinstance(judged, AccessToken) else None
        self._sessions[_key(session_id)] = _Session(access, keep, created=now, last=now)
        return session_id

    def find(self, session_id: str) -> AccessToken | Refusal:
        """The caller a session stands for now, or why it is over (then it is forgotten)."""
        key = _key(session_id)
        session = self._sessions.get(key)
        if session is None:
            return Refusal.known("no_session", None)
        now, caller = self.clock(), session.access.client_id
        reason = None
        if now - session.created >= self.absolute_s:
            reason = "session_expired"
        elif now - session.last >= self.idle_s:
            reason = "session_idle"
        if reason is not None:
            self._end(key, reason)
            return Refusal.known(reason, caller)
        verdict = standing(self.verifier, now, session.access, session.digest)
        if isinstance(verdict, Refusal):
            self._end(key, verdict.reason)
            return verdict
        session.access = verdict  # its datasets as the tokens file says now
        session.last = now
        self._sessions.move_to_end(key)
        return session.access

    def end(self, session_id: str) -> AccessToken | None:
        """Forget a session (logout); the caller it stood for, if it was open."""
        session = self._sessions.get(_key(session_id))
        if session is None:
            return None
        self._end(_key(session_id), "logout")
        return session.access

    def _end(self, key: bytes, reason: str) -> None:
        session = self._sessions.pop(key)
        logger.info(
            "web.session_ended: %s",
            reason,
            extra={"event": "web.session_ended", "caller": session.access.client_id, "reason": reason},
        )

    def _sweep(self, now: float) -> None:
        """Forget the sessions past their limits (the least recently used are the idlest)."""
        for key, session in list(self._sessions.items()):
            if now - session.last < self.idle_s:
                break
            self._end(key, "session_idle")
        for key, session in list(self._sessions.items()):
            if now - session.created >= self.absolute_s:
                self._end(key, "session_expired")
