"""Who may use the HTTP server: a bearer token, and Host and Origin checks against DNS rebinding.

Loopback by default. A token is required when one is configured (``MCPOWER_TOKEN`` or
``--token-file``) and always when the server listens on an address other hosts can reach. It is
compared in constant time (both sides hashed first, so not even its length shows), and a missing or
wrong one gets the SDK's 401 with ``WWW-Authenticate: Bearer``. The Host and Origin headers are
checked by the SDK's ``TransportSecuritySettings`` (421 for a Host, 403 for an Origin not allowed):
a web page the user visits cannot reach a server on their machine by pointing a DNS name at
127.0.0.1, nor call it from the page's own origin.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import re
from pathlib import Path

from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.transport_security import TransportSecuritySettings

from mcpower.errors import McpowerError

LOOPBACK_HOSTS = ["127.0.0.1:*", "localhost:*", "[::1]:*"]
LOOPBACK_ORIGINS = ["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"]
WILDCARD_ADDRESSES = ("0.0.0.0", "::")
# 16 characters of a random token are ~96 bits; anything shorter is likely a password typed by hand.
MIN_TOKEN_CHARS = 16
TOKEN_HINT = 'make one with: python -c "import secrets; print(secrets.token_urlsafe(32))"'
_HEADER_SAFE = re.compile(r"[\x21-\x7e]+")  # what an HTTP header carries unmangled: visible ASCII


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address, IPv6 with or without brackets) is this machine only."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def load_token(token: str | None, token_file: Path | None) -> str | None:
    """The bearer token: the first line of ``token_file`` if given, else ``token`` (MCPOWER_TOKEN).

    Raises:
        McpowerError: the file cannot be read, or the token is too short or not header-safe.
    """
    source = "MCPOWER_TOKEN"
    if token_file is not None:
        source = f"the token file {token_file}"
        try:
            text = token_file.expanduser().read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            reason = e.strerror if isinstance(e, OSError) else "not UTF-8 text"
            raise McpowerError(f"cannot read {source}: {reason}; put the token alone in it ({TOKEN_HINT})") from None
        lines = text.strip().splitlines()
        token = lines[0].strip() if lines else ""
    if token is None:
        return None
    token = token.strip()
    if len(token) < MIN_TOKEN_CHARS:
        raise McpowerError(
            f"the bearer token from {source} has {len(token)} characters; use at least {MIN_TOKEN_CHARS} ({TOKEN_HINT})"
        )
    if not _HEADER_SAFE.fullmatch(token):
        raise McpowerError(f"the bearer token from {source} must be visible ASCII without spaces ({TOKEN_HINT})")
    return token


def check_exposure(host: str, token: str | None) -> None:
    """Refuse to serve an address other machines can reach without a token.

    Raises:
        McpowerError: ``host`` is not loopback and there is no token.
    """
    if token is None and not is_loopback(host):
        raise McpowerError(
            f"--host {host} can be reached from other machines, so clients must send a bearer token: "
            f"set MCPOWER_TOKEN or pass --token-file PATH ({TOKEN_HINT}); or serve on 127.0.0.1"
        )


class StaticTokenVerifier:
    """The SDK's TokenVerifier for one shared secret, compared in constant time."""

    def __init__(self, token: str) -> None:
        self._digest = hashlib.sha256(token.encode()).digest()

    async def verify_token(self, token: str) -> AccessToken | None:
        # Digests have one length, so compare_digest's time says nothing about the token's length either.
        offered = hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()
        if hmac.compare_digest(offered, self._digest):
            return AccessToken(token="bearer", client_id="mcpower-client", scopes=[])
        return None


def auth_settings() -> AuthSettings:
    """The SDK's AuthSettings for a plain bearer token: no OAuth metadata routes are served.

    ``issuer_url`` is a required field the SDK reads only with an OAuth provider or a resource
    server URL, neither of which mcpower has.
    """
    return AuthSettings(issuer_url="http://127.0.0.1", resource_server_url=None)


def transport_security(host: str, allow_hosts: list[str], allow_origins: list[str]) -> TransportSecuritySettings:
    """The Host and Origin headers the server accepts: loopback ones, the address it listens on, and
    the names and origins allowed on the command line.

    Raises:
        McpowerError: an origin that is not ``http(s)://host[:port]``.
    """
    hosts = list(LOOPBACK_HOSTS)
    if not is_loopback(host) and host not in WILDCARD_ADDRESSES:
        hosts.append(f"[{host}]:*" if ":" in host else f"{host}:*")
    for name in allow_hosts:
        has_port = re.search(r":(\d+|\*)$", name) is not None and not name.endswith("]")
        hosts += [name] if has_port else [name, f"{name}:*"]
    origins = list(LOOPBACK_ORIGINS)
    for origin in allow_origins:
        if not re.fullmatch(r"https?://[^/\s]+/?", origin):
            raise McpowerError(
                f"--allow-origin {origin!r} is not an origin; give scheme, host and port, e.g. https://app.example.com"
            )
        origins.append(origin.rstrip("/"))
    return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins)
