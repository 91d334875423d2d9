"""A test authorization server on loopback: RSA, EC and Ed25519 keys made here, their JWK Set and the
issuer's metadata served by http.server in a thread, access tokens minted with PyJWT.

``Issuer.mode`` makes the key set misbehave: ``down`` (503), ``slow`` (no answer until the test
ends or sets ``released``), ``huge`` (2 MB), ``malformed`` (not JSON); ``slow-metadata`` makes
every other path hang instead. ``Issuer.published`` is the set it serves now:
change it and the next fetch sees the change (key rotation).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

AUDIENCE = "http://127.0.0.1:8765/mcp"  # test_http.py's BASE: the in-process server's resource URL

KINDS = {
    "rsa": ("RS256", lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048)),
    "rsa-pss": ("PS256", lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048)),
    "ec256": ("ES256", lambda: ec.generate_private_key(ec.SECP256R1())),
    "ec384": ("ES384", lambda: ec.generate_private_key(ec.SECP384R1())),
    "ed25519": ("EdDSA", ed25519.Ed25519PrivateKey.generate),
}


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class Issuer:
    """Keys, a JWKS and metadata on a loopback port; :meth:`mint` makes tokens. Close it when done."""

    def __init__(self, metadata: str = "oauth") -> None:
        self.private: dict[str, tuple[str, Any]] = {}  # kid -> (alg, private key)
        self.published: list[str] = []  # kids in the served set
        self.mode = "ok"
        self.metadata = metadata  # "oauth": RFC 8414 path; "oidc": only openid-configuration
        self.metadata_issuer: str | None = None  # what the metadata says its issuer is (None: the real one)
        self.requests: list[str] = []
        self.released = threading.Event()
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                issuer.requests.append(self.path)
                status, body = issuer.answer(self.path)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                with contextlib.suppress(OSError):  # the client gave up (slow mode)
                    self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.jwks_url = self.url + "/jwks.json"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def answer(self, path: str) -> tuple[int, bytes]:
        if self.mode == "slow-metadata" and path != "/jwks.json":
            self.released.wait(60)
        meta = {"issuer": self.metadata_issuer or self.url, "jwks_uri": self.jwks_url}
        if path == "/.well-known/oauth-authorization-server" and self.metadata == "oauth":
            return 200, json.dumps(meta).encode()
        if path == "/.well-known/openid-configuration" and self.metadata == "oidc":
            return 200, json.dumps(meta).encode()
        if path != "/jwks.json":
            return 404, b"{}"
        if self.mode == "down":
            return 503, b"{}"
        if self.mode == "slow":
            self.released.wait(60)
        if self.mode == "huge":
            return 200, json.dumps({**self.jwks(), "pad": "x" * (2 << 20)}).encode()
        if self.mode == "malformed":
            return 200, b'{"keys": [{"kty": "RSA", '
        return 200, json.dumps(self.jwks()).encode()

    def jwks(self) -> dict[str, Any]:
        keys = []
        for kid in self.published:
            alg, key = self.private[kid]
            public = json.loads(jwt.get_algorithm_by_name(alg).to_jwk(key.public_key()))
            keys.append({**public, "kid": kid, "use": "sig", "alg": alg})
        return {"keys": keys}

    def add_key(self, kind: str = "rsa", kid: str | None = None, publish: bool = True) -> str:
        alg, make = KINDS[kind]
        kid = kid or f"{kind}-{uuid.uuid4().hex[:8]}"
        self.private[kid] = (alg, make())
        if publish:
            self.published.append(kid)
        return kid

    def claims(self, **overrides: Any) -> dict[str, Any]:
        now = int(time.time())
        claims = {
            "iss": self.url,
            "aud": AUDIENCE,
            "sub": "alice",
            "client_id": "agent-app",
            "iat": now,
            "exp": now + 600,
            "scope": "openid mcpower:read",
        }
        claims.update(overrides)
        return {k: v for k, v in claims.items() if v is not None}

    def mint(
        self, kid: str | None = None, alg: str | None = None, headers: dict[str, Any] | None = None, **claims: Any
    ) -> str:
        """A token signed by the key ``kid`` (default: the first published), with these claim changes
        (None removes a claim)."""
        kid = kid or self.published[0]
        key_alg, key = self.private[kid]
        return jwt.encode(self.claims(**claims), key, algorithm=alg or key_alg, headers={"kid": kid, **(headers or {})})

    def mint_raw(self, claims: dict[str, Any], kid: str | None = None) -> str:
        """A token signed by ``kid`` whose payload is ``claims`` as they are (PyJWT's encode refuses
        some odd claim types; its JWS layer signs any bytes)."""
        kid = kid or self.published[0]
        alg, key = self.private[kid]
        return jwt.PyJWS().encode(json.dumps(claims).encode(), key, alg, headers={"kid": kid})

    def public_pem(self, kid: str) -> bytes:
        return (
            self.private[kid][1]
            .public_key()
            .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        )

    def close(self) -> None:
        self.released.set()
        self.server.shutdown()
        self.server.server_close()


def unsigned(header: dict[str, Any], claims: dict[str, Any], secret: bytes | None = None) -> str:
    """A token made by hand: ``alg: none`` without a signature, or HS256 keyed by ``secret``
    (what PyJWT itself refuses to make with a public key)."""
    signing_input = b64(json.dumps(header).encode()) + "." + b64(json.dumps(claims).encode())
    if secret is None:
        return signing_input + "."
    return signing_input + "." + b64(hmac.new(secret, signing_input.encode(), hashlib.sha256).digest())


def tampered(token: str, **changes: Any) -> str:
    """``token`` with its payload changed and its signature kept."""
    header, payload, signature = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims.update(changes)
    return f"{header}.{b64(json.dumps(claims).encode())}.{signature}"
