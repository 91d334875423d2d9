"""Who may use the HTTP server: a bearer token, and Host and Origin checks against DNS rebinding.

Loopback by default. A token is required when one is configured (``MCPOWER_TOKEN`` or
``--token-file``) and always when the server listens on an address other hosts can reach. It is
compared in constant time (both sides hashed first, so not even its length shows), and a missing or
wrong one gets the SDK's 401 with ``WWW-Authenticate: Bearer``. The Host and Origin headers are
checked before anything else (421 for a Host, 403 for an Origin not allowed), matched exactly as
host and numeric port (:class:`HostCheck`): a web page the user visits cannot reach a server on
their machine by pointing a DNS name at 127.0.0.1, nor call it from the page's own origin. The
SDK's ``TransportSecuritySettings`` check the same lists again inside, by prefix.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import os
import re
from pathlib import Path

from mcp.server.auth.provider import AccessToken
from mcp.server.transport_security import TransportSecuritySettings

from mcpower.errors import McpowerError
from mcpower.server.auth.callers import METRICS_SCOPE, OPERATOR, READ_SCOPE
from mcpower.server.auth.verifiers import Refusal, Verdict, token_digest

logger = logging.getLogger(__name__)

LOOPBACK_HOSTS = ["127.0.0.1:*", "localhost:*", "[::1]:*"]
LOOPBACK_ORIGINS = ["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"]
WILDCARD_ADDRESSES = ("0.0.0.0", "::")
# 16 characters of a random token are ~96 bits; anything shorter is likely a password typed by hand.
MIN_TOKEN_CHARS = 16
TOKEN_HINT = 'make one with: python3 -c "import secrets; print(secrets.token_urlsafe(32))"'
_HEADER_SAFE = re.compile(r"[\x21-\x7e]+")  # what an HTTP header carries unmangled: visible ASCII


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address, IPv6 with or without brackets) is this machine only."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def peer_key(host: str) -> str:
    """The address a per-address limit counts (failed sign-ins, the connection share): an IPv4
    address as it is; an IPv6 one by its /64, the block one host or one site is given (a host can
    take any address of it at will); an IPv4-mapped IPv6 address as IPv4. Anything else as given."""
    try:
        ip = ipaddress.ip_address(host.strip("[]").partition("%")[0])
    except ValueError:
        return host
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ip) if ip.is_loopback else str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def trusted_networks(values: list[str]) -> list[Network]:
    """The reverse proxies ``MCPOWER_HTTP_TRUSTED_PROXIES`` names, as networks (an address is a /32 or /128).

    Raises:
        McpowerError: a value that is neither an address nor a network.
    """
    networks = []
    for value in values:
        try:
            networks.append(ipaddress.ip_network(value.strip("[]"), strict=False))
        except ValueError:
            raise McpowerError(
                f"MCPOWER_HTTP_TRUSTED_PROXIES: {value[:80]!r} is not an address or a network; "
                "give your reverse proxies' addresses, e.g. 127.0.0.1 or 10.0.0.0/8"
            ) from None
    return networks


def in_networks(host: str, networks: list[Network]) -> bool:
    """Whether ``host`` (an address) is in one of ``networks``."""
    try:
        ip = ipaddress.ip_address(host.strip("[]").partition("%")[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return any(ip in network for network in networks)


def host_name(value: str) -> str | None:
    """The host of a ``Host`` header value without its port (``kb.lan:8765`` -> ``kb.lan``), if it is one."""
    address = _parse_address(value)
    return address[0] if address is not None else None


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
            _warn_if_shared(token_file.expanduser())
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


def _warn_if_shared(path: Path) -> None:
    """Warn when others can read or write the token file, or it is not this user's (POSIX): a token
    others can read is a token others hold."""
    if os.name != "posix":
        return
    st = path.stat()
    if st.st_mode & 0o077 or st.st_uid != os.getuid():
        logger.warning(
            "the token file %s can be read or changed by other users (mode %04o%s): anyone who reads it can "
            "call this server; make it yours alone with: chmod 600 %s",
            path,
            st.st_mode & 0o777,
            "" if st.st_uid == os.getuid() else ", owned by another user",
            path,
            extra={"event": "http.token_file_shared"},
        )


def check_exposure(host: str, token: str | None, tokens_file: Path | None = None) -> None:
    """Refuse to serve an address other machines can reach without a token (the single one, or
    named tokens).

    Raises:
        McpowerError: ``host`` is not loopback and there is no token.
    """
    if token is None and tokens_file is None and not is_loopback(host):
        raise McpowerError(
            f"--host {host} can be reached from other machines, so clients must send a bearer token: "
            f"set MCPOWER_TOKEN, pass --token-file PATH ({TOKEN_HINT}), or give named tokens with "
            "--tokens-file PATH (`mcpower token add`); or serve on 127.0.0.1"
        )


class StaticTokenVerifier:
    """The SDK's TokenVerifier for one shared secret, compared in constant time. Its caller is
    ``token``, the operator: every dataset, and ``/metrics``."""

    def __init__(self, token: str) -> None:
        self._digest = token_digest(token)

    async def verify_token(self, token: str) -> AccessToken | None:
        verdict = self.check_digest(token_digest(token))
        return verdict if isinstance(verdict, AccessToken) else None

    async def check(self, token: str) -> Verdict:
        return self.check_digest(token_digest(token))

    def check_digest(self, offered: bytes) -> Verdict:
        # Digests have one length, so compare_digest's time says nothing about the token's length either.
        if hmac.compare_digest(offered, self._digest):
            return AccessToken(token="bearer", client_id=OPERATOR, scopes=[READ_SCOPE, METRICS_SCOPE])
        return Refusal("unknown_token")


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
        if _parse_address(name, port_pattern=True) is None:
            raise McpowerError(
                f"--allow-host {name!r} is not a host name; give a name or address, optionally with a port, "
                "e.g. kb.lan or kb.lan:8765"
            )
        has_port = re.search(r":(\d+|\*)$", name) is not None and not name.endswith("]")
        hosts += [name] if has_port else [name, f"{name}:*"]
    origins = list(LOOPBACK_ORIGINS)
    for origin in allow_origins:
        if not re.fullmatch(r"https?://[^/\s]+/?", origin) or _parse_origin(origin.rstrip("/"), True) is None:
            raise McpowerError(
                f"--allow-origin {origin!r} is not an origin; give scheme, host and port, e.g. https://app.example.com"
            )
        origins.append(origin.rstrip("/"))
    return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins)


# host[:port] as RFC 9110 has it, without what no client of this server sends: user info, a path,
# percent-escapes, IPv6 zone ids. A name's letters are compared lower-cased, an IPv6 address in
# its compressed form; a port is at most 5 digits (and at most 65535).
_ADDRESS = re.compile(r"(?:\[(?P<ip6>[0-9a-fA-F:.]+)\]|(?P<name>[A-Za-z0-9._-]+))(?::(?P<port>\d{1,5}|\*))?")
_ORIGIN = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<address>.+)")
Address = tuple[str, int | str | None]  # (host, port): None is no port; "*" (patterns only) any port


def _parse_address(value: str, port_pattern: bool = False) -> Address | None:
    match = _ADDRESS.fullmatch(value)
    if match is None:
        return None
    port: int | str | None = match["port"]
    if port == "*":
        if not port_pattern:
            return None
    elif port is not None:
        port = int(port)
        if port > 65535:
            return None
    if match["ip6"] is None:
        return match["name"].lower(), port
    try:
        return f"[{ipaddress.IPv6Address(match['ip6']).compressed}]", port
    except ValueError:
        return None


def _parse_origin(value: str, port_pattern: bool = False) -> tuple[str, Address] | None:
    match = _ORIGIN.fullmatch(value)
    address = _parse_address(match["address"], port_pattern) if match else None
    return None if match is None or address is None else (match["scheme"].lower(), address)


def _port_matches(pattern: int | str | None, port: int | str | None) -> bool:
    return port is not None if pattern == "*" else pattern == port


class HostCheck:
    """Whether a request's ``Host`` and ``Origin`` headers are among the allowed ones, matched exactly.

    The allowed values are the SDK's patterns (:func:`transport_security`): ``name``, ``name:port``
    or ``name:*`` (any numeric port, but a port), ``[v6]:*``, ``scheme://name:*``. Both sides are
    parsed as host and port first, so ``127.0.0.1:1@evil.example`` or ``localhost:80/x`` match
    nothing, where the SDK's prefix test lets them through.
    """

    def __init__(self, settings: TransportSecuritySettings) -> None:
        self._hosts = [a for a in (_parse_address(h, port_pattern=True) for h in settings.allowed_hosts) if a]
        self._origins = [o for o in (_parse_origin(v, port_pattern=True) for v in settings.allowed_origins) if o]

    def host_allowed(self, value: str | None) -> bool:
        """Whether ``value`` (a ``Host`` header; None: there was none) names this server."""
        address = _parse_address(value) if value is not None else None
        if address is None:
            return False
        host, port = address
        return any(host == h and _port_matches(p, port) for h, p in self._hosts)

    def origin_allowed(self, value: str | None) -> bool:
        """Whether ``value`` (an ``Origin`` header) may call; no ``Origin`` (not a browser) may."""
        if value is None:
            return True
        origin = _parse_origin(value)
        if origin is None:
            return False
        scheme, (host, port) = origin
        return any(scheme == s and host == h and _port_matches(p, port) for s, (h, p) in self._origins)
