"""Token verifiers for the HTTP server beyond the single shared token (access.py): named tokens
from a tokens file (tokens.py), and :class:`FirstOf`, which lets several kinds be accepted at once.

Every verifier answers in the terms of callers.py: a named token's caller is its name, its
datasets are its scopes. http.py builds one verifier from what is configured.

Beyond the SDK's ``verify_token`` (an AccessToken or None), mcpower's verifiers say why they refuse
(:meth:`check`: a :class:`Refusal`), so the operator's log can tell an expired token from a revoked
one from a guess, and name the caller when the credential is a real one (gate.py logs it; the
attempts limiter counts only guesses). The web pages' sign-in sessions keep the SHA-256 of the
token they were opened with, never the token, and ask :meth:`check_digest` on each request
whether it is still good (revoked, expired, or its datasets changed since).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Protocol, runtime_checkable

from mcp.server.auth.provider import AccessToken, TokenVerifier

from mcpower.errors import McpowerError
from mcpower.server.auth.callers import scopes_for
from mcpower.server.auth.tokens import NamedToken, check_access, read_tokens

logger = logging.getLogger(__name__)

# Digests of named tokens revoked while the server runs, kept so a refusal can say "revoked" and name
# the token rather than "unknown": 32 bytes and a name each, and only ever as many as were revoked.
MAX_REVOKED_REMEMBERED = 1024


@dataclass(frozen=True)
class Refusal:
    """Why a credential was refused: for the operator's log, never for the client, never the secret.

    ``caller`` names who the credential stands for when it is a real one (a named token that
    expired or was revoked, an OAuth token whose signature held). ``recognized``: a real credential
    no longer good, not a guess (the attempts limiter does not count it). ``rank`` chooses between
    several verifiers' reasons: the one that knew the credential best (2: recognized; 1: the
    credential was of the verifier's kind, a JWT; 0: unknown to it).
    """

    reason: str
    caller: str | None = None
    recognized: bool = False
    rank: int = 0
    details: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def known(cls, reason: str, caller: str | None, **details: str) -> Refusal:
        """A real credential that is no longer good (expired, revoked)."""
        return cls(reason, caller, recognized=True, rank=2, details=details)


Verdict = AccessToken | Refusal


@runtime_checkable
class Checker(Protocol):
    """A verifier that says why it refuses (every mcpower verifier)."""

    async def check(self, token: str) -> Verdict: ...


@runtime_checkable
class DigestChecker(Protocol):
    """A verifier that can judge a credential again from its SHA-256 alone (a sign-in session's)."""

    def check_digest(self, offered: bytes) -> Verdict | None: ...


# The claim of a named token's AccessToken that holds its SHA-256 (hex).
DIGEST_CLAIM = "mcpower_sha256"


def token_digest(token: str) -> bytes:
    """The SHA-256 every verifier compares (any text a client sends hashes without error)."""
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()


async def check(verifier: TokenVerifier, token: str) -> Verdict:
    """``verifier``'s answer for ``token``, with the reason when it refuses (a verifier that cannot
    say why, the SDK's kind: ``unknown_token``)."""
    if isinstance(verifier, Checker):
        return await verifier.check(token)
    found = await verifier.verify_token(token)
    return found if found is not None else Refusal("unknown_token")


def judge_again(verifier: TokenVerifier, clock: Callable[[], float], access: AccessToken) -> AccessToken | None:
    """What ``access`` (a request's, kept past it: a subscription) stands for now (``clock``: wall-clock
    seconds), as :func:`standing` judges it from the digest its claims carry; None when it no longer
    stands."""
    digest = (access.claims or {}).get(DIGEST_CLAIM)
    try:
        offered = bytes.fromhex(digest) if isinstance(digest, str) else None
    except ValueError:
        return None
    verdict = standing(verifier, clock(), access, offered)
    return verdict if isinstance(verdict, AccessToken) else None


def standing(verifier: TokenVerifier, now: float, access: AccessToken, digest: bytes | None) -> Verdict:
    """What a token kept past the request that brought it stands for at ``now``, or why it no longer
    does: expired by its ``expires_at`` first; then, with its ``digest``, a named token judged again
    (revoked, expired or edited to other datasets shows at once); without one, any other token
    stands until its expiry (an OAuth access token: only its issuer can revoke it; the single
    ``MCPOWER_TOKEN``, fixed while the server runs). The one rule for subscriptions (judge_again)
    and the web pages' sign-in sessions (logins.py)."""
    caller = access.client_id
    if access.expires_at is not None and access.expires_at <= now:
        return Refusal.known("expired", caller)
    if digest is None:
        return access
    verdict = check_digest(verifier, digest)
    if isinstance(verdict, AccessToken):
        return verdict
    refusal = verdict if verdict is not None else Refusal.known("revoked", caller)
    return Refusal.known(refusal.reason, refusal.caller or caller)


def check_digest(verifier: TokenVerifier, offered: bytes) -> Verdict | None:
    """``verifier``'s answer for a credential known by its digest; None: it cannot judge one that way
    (an OAuth access token: its ``exp`` is all there is to go on)."""
    return verifier.check_digest(offered) if isinstance(verifier, DigestChecker) else None


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
    per change. Secrets are compared in constant time against every token's hash. A token that
    leaves the file is remembered by its hash (at most :data:`MAX_REVOKED_REMEMBERED`), so its next
    use is refused as ``revoked`` under its name.
    """

    def __init__(self, path: Path) -> None:
        self.path = path.expanduser()
        self._stamp = _stamp(self.path)
        self._tokens = _with_digests(load_named_tokens(self.path))  # at startup: an error
        self._invalid = False
        self._revoked: OrderedDict[bytes, str] = OrderedDict()

    def tokens(self) -> tuple[tuple[bytes, NamedToken], ...]:
        """The tokens of the file as it is now, each with its hash as bytes."""
        stamp = _stamp(self.path)
        if stamp != self._stamp:
            self._stamp = stamp  # before reading: a write after this stat is seen next time
            try:
                tokens = _with_digests(load_named_tokens(self.path))
            except McpowerError as e:
                self._tokens, self._invalid = (), True
                logger.error(
                    "http.tokens_file_invalid: %s; every named token is refused until it is fixed",
                    e.message,
                    extra={"event": "http.tokens_file_invalid"},
                )
            else:
                self._remember_revoked(tokens)
                self._tokens, self._invalid = tokens, False
                logger.info(
                    "http.tokens_file_loaded",
                    extra={"event": "http.tokens_file_loaded", "tokens": len(self._tokens)},
                )
        return self._tokens

    def _remember_revoked(self, tokens: tuple[tuple[bytes, NamedToken], ...]) -> None:
        kept = {hashed for hashed, _ in tokens}
        for hashed, named in self._tokens:
            if hashed not in kept:
                self._revoked[hashed] = named.name
                self._revoked.move_to_end(hashed)
        for hashed in kept:
            self._revoked.pop(hashed, None)  # given again: no longer revoked
        while len(self._revoked) > MAX_REVOKED_REMEMBERED:
            self._revoked.popitem(last=False)

    async def verify_token(self, token: str) -> AccessToken | None:
        verdict = self.check_digest(token_digest(token))
        return verdict if isinstance(verdict, AccessToken) else None

    async def check(self, token: str) -> Verdict:
        return self.check_digest(token_digest(token))

    def check_digest(self, offered: bytes) -> Verdict:
        found: NamedToken | None = None
        for hashed, named in self.tokens():  # every one compared: the time says nothing of which matched
            if hmac.compare_digest(offered, hashed):
                found = named
        if found is None:
            if self._invalid:
                return Refusal("tokens_file_invalid")
            name = self._revoked.get(offered)
            return Refusal.known("revoked", name) if name is not None else Refusal("unknown_token")
        if found.expired(datetime.now(timezone.utc)):
            return Refusal.known("expired", found.name)
        return AccessToken(
            token="named",  # the secret stays out of the request's context
            client_id=found.name,
            scopes=scopes_for(found.datasets, found.metrics),
            expires_at=int(found.expires.timestamp()) if found.expires else None,
            # Its digest, as the tokens file holds it (it grants nothing): what outlives the request
            # (a subscription) is judged again from it (judge_again).
            claims={DIGEST_CLAIM: offered.hex()},
        )


def _with_digests(tokens: list[NamedToken]) -> tuple[tuple[bytes, NamedToken], ...]:
    return tuple((bytes.fromhex(t.sha256), t) for t in tokens)


class FirstOf:
    """A TokenVerifier accepting what any of ``verifiers`` accepts (the first that does answers);
    refused, the reason of the verifier that knew the credential best."""

    def __init__(self, verifiers: Sequence[TokenVerifier]) -> None:
        self.verifiers = list(verifiers)

    async def verify_token(self, token: str) -> AccessToken | None:
        verdict = await self.check(token)
        return verdict if isinstance(verdict, AccessToken) else None

    async def check(self, token: str) -> Verdict:
        refusals: list[Refusal] = []
        for verifier in self.verifiers:
            verdict = await check(verifier, token)
            if isinstance(verdict, AccessToken):
                return verdict
            refusals.append(verdict)
        return best(refusals)

    def check_digest(self, offered: bytes) -> Verdict | None:
        refusals: list[Refusal] = []
        for verifier in self.verifiers:
            verdict = check_digest(verifier, offered)
            if isinstance(verdict, AccessToken):
                return verdict
            if verdict is not None:
                refusals.append(verdict)
        return best(refusals) if refusals else None


def best(refusals: Sequence[Refusal]) -> Refusal:
    """The refusal that says the most (highest rank, the first of equals); ``unknown_token`` for none."""
    return max(refusals, key=lambda r: r.rank, default=Refusal("unknown_token"))


def one_verifier(verifiers: Sequence[TokenVerifier]) -> TokenVerifier | None:
    """The verifier for what is configured: None for none, itself for one, else :class:`FirstOf`."""
    if not verifiers:
        return None
    return verifiers[0] if len(verifiers) == 1 else FirstOf(verifiers)
