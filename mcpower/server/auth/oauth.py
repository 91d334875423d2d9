"""OAuth resource-server mode: JWT access tokens from an issuer, checked here, mapped to callers.

``serve --http --oauth-issuer URL`` accepts access tokens that issuer signs (the MCP authorization
spec: mcpower is a resource server; clients get tokens from the authorization server, which they
find through the protected resource metadata served here, RFC 9728). A token is accepted when:

- its header's ``alg`` is one of :data:`ALGORITHMS` (asymmetric only: never ``none``, never HMAC),
  and the key its ``kid`` names in the issuer's key set (jwks.py) is of that algorithm's type (and
  curve), and has that ``alg`` if it names one;
- its signature verifies with that key;
- ``iss`` is the issuer, ``aud`` is (or lists) the audience: this server's resource URL unless
  ``--audience`` says otherwise; ``exp`` is present and, like ``nbf`` and ``iat``, holds within
  :data:`LEEWAY_S`;
- ``exp``, ``nbf`` and ``iat``, where present, are JSON numbers (PyJWT would take the text
  ``"1900000000"`` for one: refused here, ``claim_type``);
- it names a subject (``sub``, else ``client_id`` or ``azp``), and is at most :data:`MAX_TOKEN_CHARS`.

The caller (callers.py) is named ``oauth:<sub>`` — the person or, for a client-credentials token,
the client — so logs, metrics and rate limits count people, not the app they use, and no OAuth
subject can take a named token's name or budget. Its datasets are its scopes: the ``scope`` claim
(space-separated) and ``scp`` (a list or string), of which only ``mcpower:read`` (every dataset)
and ``mcpower:read:<pattern>`` count; with ``--datasets-claim NAME`` the patterns listed in that
claim count too; ``mcpower:metrics`` lets it read ``/metrics``. A good token with no dataset is
refused with ``403 insufficient_scope`` (gate.py), so an OAuth client can ask for the scope and try
again. A refused token is answered ``401`` and logged by the gate with the reason (:meth:`JwtVerifier.check`).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import jwt
from mcp.server.auth.handlers.metadata import ProtectedResourceMetadataHandler
from mcp.server.auth.provider import AccessToken
from mcp.shared.auth import ProtectedResourceMetadata
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from mcpower.errors import McpowerError
from mcpower.server.auth.callers import METRICS_SCOPE, READ_SCOPE, oauth_caller
from mcpower.server.auth.jwks import FETCH_TIMEOUT_S, KEYS_TTL_S, REFETCH_INTERVAL_S, JwksError, KeyCache, check_url
from mcpower.server.auth.verifiers import Refusal, Verdict

logger = logging.getLogger(__name__)

# Asymmetric algorithms only: a server holding only public keys can never be made to accept a token
# "signed" with one (HS256 keyed by the public key) or with nothing (none).
ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA")
# The key type (and curve) each algorithm needs.
_KEY_TYPES: dict[str, tuple[str, tuple[str, ...] | None]] = {
    **{alg: ("RSA", None) for alg in ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512")},
    "ES256": ("EC", ("P-256",)),
    "ES384": ("EC", ("P-384",)),
    "EdDSA": ("OKP", ("Ed25519", "Ed448")),
}
# Clocks of the issuer and this server may disagree by this much.
LEEWAY_S = 30
# Access tokens are under 2 KB; 8 KB leaves room for many scopes, and bounds the work a bad one costs.
MAX_TOKEN_CHARS = 8192
METADATA_PATH = "/.well-known/oauth-protected-resource"
_READ_PREFIX = READ_SCOPE + ":"


@dataclass(frozen=True)
class OAuthOptions:
    """``--oauth-issuer`` and its companions (docs/configuration.md)."""

    issuer: str
    jwks: str | None = None  # the key set's URL or file; None: from the issuer's metadata
    audience: str | None = None  # None: the resource URL
    public_url: str | None = None  # the URL clients reach /mcp at; None: http://host:port/mcp
    datasets_claim: str | None = None
    # Not settings; tests shorten them.
    keys_ttl: float = KEYS_TTL_S
    refetch_interval: float = REFETCH_INTERVAL_S
    fetch_timeout: float = FETCH_TIMEOUT_S
    clock: Callable[[], float] = time.monotonic

    def checked(self) -> OAuthOptions:
        """These options, if usable.

        Raises:
            McpowerError: a URL that is not https (http on loopback aside), a missing key set file,
                a bad public URL.
        """
        check_url(self.issuer, "--oauth-issuer")
        if self.jwks is not None and "://" in self.jwks:
            check_url(self.jwks, "--jwks")
        elif self.jwks is not None and not Path(self.jwks).expanduser().is_file():
            raise McpowerError(f"--jwks {self.jwks!r} is neither a URL nor a file; give the issuer's JWK Set")
        if self.public_url is not None:
            parts = urlsplit(self.public_url)
            if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
                raise McpowerError(
                    f"--public-url {self.public_url!r} is not the URL of this server's MCP endpoint; "
                    "give scheme, host and path, e.g. https://kb.example.com/mcp"
                )
        return self


def resource_url(options: OAuthOptions, default: str) -> str:
    """This server's resource identifier: the public URL of its MCP endpoint (``default``: the one
    it listens at); a bare origin gets ``/mcp``."""
    url = (options.public_url or default).rstrip("/")
    return url if urlsplit(url).path else url + "/mcp"


def metadata_url(resource: str) -> str:
    """Where the resource's metadata is (RFC 9728 §3.1: the well-known path before the resource's path)."""
    parts = urlsplit(resource)
    return f"{parts.scheme}://{parts.netloc}{METADATA_PATH}{parts.path.rstrip('/')}"


def metadata_paths(resource: str) -> list[str]:
    """The paths the metadata is served at: the RFC 9728 one, the bare well-known path (clients of
    earlier spec revisions), and the one for ``/mcp`` when a proxy serves it under another path."""
    paths = [METADATA_PATH, urlsplit(metadata_url(resource)).path, METADATA_PATH + "/mcp"]
    return list(dict.fromkeys(paths))


def metadata_endpoint(options: OAuthOptions, resource: str) -> Callable[[Request], Any]:
    """The handler answering GET with the protected resource metadata (the SDK's own)."""
    # Validated from strings, so the model keeps a path-less URL as written (no slash added): clients
    # compare the issuer with the authorization server's own metadata as strings.
    metadata = ProtectedResourceMetadata.model_validate(
        {
            "resource": resource,
            "authorization_servers": [options.issuer],
            "scopes_supported": [READ_SCOPE],  # not metrics: clients ask for every scope listed here
            "resource_name": "mcpower",
            "bearer_methods_supported": ["header"],
        }
    )
    handler = ProtectedResourceMetadataHandler(metadata)

    async def endpoint(request: Request) -> Response:
        return await handler.handle(request)

    return endpoint


def has_read_scope(scopes: list[str]) -> bool:
    """Whether ``scopes`` grant any dataset at all."""
    return any(s == READ_SCOPE or (s.startswith(_READ_PREFIX) and len(s) > len(_READ_PREFIX)) for s in scopes)


class JwtVerifier:
    """The SDK's TokenVerifier for JWT access tokens from one issuer (module docstring: the rules)."""

    def __init__(self, options: OAuthOptions, resource: str) -> None:
        self.options = options
        self.resource = resource
        self.audience = options.audience or resource
        issuer = options.issuer.rstrip("/")
        self.issuers = [issuer, issuer + "/"]
        audience = self.audience.rstrip("/")
        self.audiences = [audience, audience + "/"] if "://" in audience else [self.audience]
        self.keys = KeyCache(
            options.issuer,
            options.jwks,
            ttl=options.keys_ttl,
            refetch_interval=options.refetch_interval,
            fetch_timeout=options.fetch_timeout,
            clock=options.clock,
        )

    async def verify_token(self, token: str) -> AccessToken | None:
        verdict = await self.check(token)
        return verdict if isinstance(verdict, AccessToken) else None

    async def check(self, token: str) -> Verdict:
        """The caller ``token`` stands for, or why it is refused (module docstring: the rules)."""
        if len(token) > MAX_TOKEN_CHARS:
            return Refusal("too_large")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError:
            return Refusal("malformed")
        alg, kid = header.get("alg"), header.get("kid")
        if alg not in ALGORITHMS:
            return Refusal("algorithm", rank=1, details={"alg": str(alg)[:20]})
        if kid is not None and not isinstance(kid, str):
            return Refusal("malformed", rank=1)
        jwk = await self.keys.key(kid)
        if jwk is None:
            return Refusal("unknown_key", rank=1, details={"kid": str(kid)[:64]})
        key = _key_for(jwk, alg)
        if key is None:
            return Refusal("key_type", rank=1, details={"alg": alg, "kid": str(kid)[:64]})
        try:
            claims = jwt.decode(
                token,
                key,
                algorithms=[alg],
                audience=self.audiences,
                issuer=self.issuers,
                leeway=LEEWAY_S,
                options={"require": ["exp", "iss", "aud"]},
            )
        except jwt.InvalidTokenError as e:
            reason = _REASONS.get(type(e), "invalid")
            if reason in _AFTER_SIGNATURE:  # PyJWT checks the claims only once the signature holds
                return Refusal.known(reason, _subject_of(token))
            return Refusal(reason, rank=1)
        name = _name_in(claims)
        if name is None:
            return Refusal.known("no_subject", None)
        odd = [c for c in ("exp", "nbf", "iat") if c in claims and not _is_time(claims[c])]
        if odd:  # PyJWT takes "1900000000" for a number; RFC 7519 says a NumericDate is a JSON number
            return Refusal.known("claim_type", oauth_caller(name[:200]), claims=",".join(odd))
        client = next((v for c in ("client_id", "azp") if isinstance(v := claims.get(c), str)), None)
        return AccessToken(
            token="jwt",  # the secret itself is kept nowhere
            client_id=oauth_caller(name[:200]),
            scopes=self._scopes(claims),
            expires_at=int(claims["exp"]) + LEEWAY_S,
            resource=self.resource,
            subject=claims.get("sub") if isinstance(claims.get("sub"), str) else None,
            claims={"iss": claims["iss"], **({"client_id": client} if client else {})},
        )

    def _scopes(self, claims: dict[str, Any]) -> list[str]:
        """The mcpower scopes the token carries (module docstring: which claims)."""
        found = _words(claims.get("scope")) + _words(claims.get("scp"))
        scopes = [s for s in found if s == READ_SCOPE or s.startswith(_READ_PREFIX)]
        if self.options.datasets_claim:
            scopes += [_READ_PREFIX + p for p in _words(claims.get(self.options.datasets_claim))]
        granted = [s for s in scopes if has_read_scope([s])]
        return list(dict.fromkeys([*granted, *([METRICS_SCOPE] if METRICS_SCOPE in found else [])]))


class IssuerCheck:
    """ASGI middleware: when the server starts (its lifespan), fetch the issuer's keys once in the
    background and say whether they could be had, so a mistyped ``--oauth-issuer`` shows in the log
    at once rather than when the first token is refused. The server serves either way (the issuer
    may come up later; until then every token is refused, as always)."""

    def __init__(self, app: ASGIApp, verifier: JwtVerifier) -> None:
        self.app = app
        self.verifier = verifier

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "lifespan":
            await self.app(scope, receive, send)
            return
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(check_issuer, self.verifier)
            await self.app(scope, receive, send)
            tasks.cancel_scope.cancel()  # stopping: a check still waiting for the issuer is moot


async def check_issuer(verifier: JwtVerifier) -> None:
    """Fetch ``verifier``'s keys now; log a warning naming the issuer and what failed, or how many keys."""
    issuer, jwks = verifier.options.issuer, verifier.options.jwks
    try:
        count = await verifier.keys.prefetch()
    except JwksError as e:
        logger.warning(
            "oauth.issuer_unavailable: cannot get the signing keys of the issuer %s%s (%s); every token is "
            "refused until it answers: check --oauth-issuer%s",
            issuer,
            f" from {jwks}" if jwks else "",
            e,
            " and --jwks" if jwks else " (the server is up; it tries again at the next token)",
            extra={"event": "oauth.issuer_unavailable", "issuer": issuer, "reason": str(e)},
        )
        return
    logger.info(
        "oauth.issuer_ready: the issuer %s publishes %d signing key(s)",
        issuer,
        count,
        extra={"event": "oauth.issuer_ready", "issuer": issuer, "keys": count},
    )


def _words(value: object) -> list[str]:
    """A claim as a list of strings: a space-separated string, or a list of strings."""
    if isinstance(value, str):
        return value.split()
    if isinstance(value, list):
        return [v for v in value if isinstance(v, str) and v and not any(c.isspace() for c in v)]
    return []


def _key_for(jwk: dict[str, Any], alg: str) -> jwt.PyJWK | None:
    """The public key of ``jwk`` for ``alg``, if the key is of that algorithm's type, curve and alg."""
    kty, curves = _KEY_TYPES[alg]
    if jwk.get("kty") != kty or (curves is not None and jwk.get("crv") not in curves):
        return None
    if jwk.get("alg", alg) != alg:
        return None
    try:
        return jwt.PyJWK(jwk, alg)
    except (jwt.PyJWKError, jwt.InvalidKeyError, ValueError, TypeError):
        return None


_REASONS: dict[type[Exception], str] = {
    jwt.ExpiredSignatureError: "expired",
    jwt.ImmatureSignatureError: "not_yet_valid",
    jwt.InvalidAudienceError: "audience",
    jwt.InvalidIssuerError: "issuer",
    jwt.InvalidSignatureError: "signature",
    jwt.MissingRequiredClaimError: "missing_claim",
    jwt.DecodeError: "malformed",
}
# Refusals PyJWT makes after the signature held: the token is the issuer's, its subject is real.
_AFTER_SIGNATURE = frozenset({"expired", "not_yet_valid", "audience", "issuer", "missing_claim"})


def _name_in(claims: dict[str, Any]) -> str | None:
    """Who the token is for: ``sub``, else ``client_id`` or ``azp``."""
    return next((v for c in ("sub", "client_id", "azp") if isinstance(v := claims.get(c), str) and v), None)


def _subject_of(token: str) -> str | None:
    """The caller a token names, read without checking it again (its signature has held)."""
    try:
        name = _name_in(jwt.decode(token, options={"verify_signature": False}))
    except (jwt.InvalidTokenError, ValueError, TypeError):
        return None
    return oauth_caller(name[:200]) if name is not None else None


def _is_time(value: object) -> bool:
    """Whether a claim is a NumericDate: a JSON number (not text, not a boolean), finite."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
