"""Token verifiers for the HTTP server beyond the single shared token (access.py): named tokens
from a tokens file (tokens.py), and :class:`FirstOf`, which lets several kinds be accepted at once.

Every verifier answers in the terms of callers.py: a named token's caller is its name, its
datasets are its scopes. http.py builds one verifier from what is configured.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

from mcp.server.auth.provider import AccessToken, TokenVerifier

from mcpower.errors import McpowerError
from mcpower.server.auth.callers import scopes_for
from mcpower.server.auth.tokens import NamedToken, check_access, read_tokens

logger = logging.getLogger(__name__)

# What identifies one version of the file: a rename (a new inode), an edit in place (size, mtime),
# a chmod or chown (mode, owner, ctime) all change it. One stat per request: microseconds.
Stamp = tuple[int, ...]


def _stamp(path: Path) -> Stamp | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode, st.st_uid)


def load_named_tokens(path: Path) -> list[NamedToken]:
    """The tokens of the file at ``path``, which must exist and be the operator's alone to change.

    Raises:
        McpowerError: missing, writable by others, or malformed.
    """
    if not path.is_file():
        raise McpowerError(
            f"there is no tokens file {path}: create it with `mcpower token add NAME --datasets ID "
            f"--tokens-file {path}`, or leave --tokens-file out"
        )
    check_access(path)
    return read_tokens(path)


class NamedTokenVerifier:
    """The SDK's TokenVerifier over a tokens file, re-read whenever it changes, so `mcpower token
    revoke` (or add) takes effect on the next request, without a restart.

    A file that breaks after the server started (a bad edit, a chmod that lets others write it, its
    removal) fails closed: no named token is accepted until it is fixed; the error is logged once
    per change. Secrets are compared in constant time against every token's hash.
    """

    def __init__(self, path: Path) -> None:
        self.path = path.expanduser()
        self._stamp = _stamp(self.path)
        self._tokens = _with_digests(load_named_tokens(self.path))  # at startup: an error

    def tokens(self) -> tuple[tuple[bytes, NamedToken], ...]:
        """The tokens of the file as it is now, each with its hash as bytes."""
        stamp = _stamp(self.path)
        if stamp != self._stamp:
            self._stamp = stamp  # before reading: a write after this stat is seen next time
            try:
                self._tokens = _with_digests(load_named_tokens(self.path))
            except McpowerError as e:
                self._tokens = ()
                logger.error(
                    "http.tokens_file_invalid: %s; every named token is refused until it is fixed",
                    e.message,
                    extra={"event": "http.tokens_file_invalid"},
                )
            else:
                logger.info(
                    "http.tokens_file_loaded",
                    extra={"event": "http.tokens_file_loaded", "tokens": len(self._tokens)},
                )
        return self._tokens

    async def verify_token(self, token: str) -> AccessToken | None:
        offered = hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()
        found: NamedToken | None = None
        for hashed, named in self.tokens():  # every one compared: the time says nothing of which matched
            if hmac.compare_digest(offered, hashed):
                found = named
        if found is None:
            return None
        if found.expired(datetime.now(timezone.utc)):
            logger.info("http.token_expired", extra={"event": "http.token_expired", "caller": found.name})
            return None
        return AccessToken(
            token="named",  # the secret stays out of the request's context
            client_id=found.name,
            scopes=scopes_for(found.datasets),
            expires_at=int(found.expires.timestamp()) if found.expires else None,
        )


def _with_digests(tokens: list[NamedToken]) -> tuple[tuple[bytes, NamedToken], ...]:
    return tuple((bytes.fromhex(t.sha256), t) for t in tokens)


class FirstOf:
    """A TokenVerifier accepting what any of ``verifiers`` accepts (the first that does answers)."""

    def __init__(self, verifiers: Sequence[TokenVerifier]) -> None:
        self.verifiers = list(verifiers)

    async def verify_token(self, token: str) -> AccessToken | None:
        for verifier in self.verifiers:
            answer = await verifier.verify_token(token)
            if answer is not None:
                return answer
        return None


def one_verifier(verifiers: Sequence[TokenVerifier]) -> TokenVerifier | None:
    """The verifier for what is configured: None for none, itself for one, else :class:`FirstOf`."""
    if not verifiers:
        return None
    return verifiers[0] if len(verifiers) == 1 else FirstOf(verifiers)
