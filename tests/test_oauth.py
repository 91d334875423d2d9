"""OAuth resource-server mode (server/auth/oauth.py, server/auth/jwks.py): JWT access tokens from a test issuer.

The issuer (oauth_fixtures.py) is real HTTP on loopback with keys made here; the server runs in
process behind an ASGI transport (test_http.py's way). The attack table is docs/robustness.md's:
each case is refused with its status, its WWW-Authenticate challenge, and the reason logged — so a
case refused for another reason than the one it tests fails. Over a real socket with the Python
and TypeScript SDK clients: the end of this file.
"""

from __future__ import annotations

import base64
import json
import logging
import re
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import jwt
import pytest
from asgi_fixtures import BASE, INITIALIZE, MCP_HEADERS, app_serving, asgi_client
from http_fixtures import TOKEN
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from oauth_fixtures import AUDIENCE, Issuer, tampered, unsigned

from mcpower.registry import Registry
from mcpower.server.auth.callers import Caller, caller_of, current_caller
from mcpower.server.auth.jwks import KeyCache
from mcpower.server.auth.oauth import JwtVerifier, OAuthOptions, check_issuer
from mcpower.server.http import HttpOptions

pytestmark = pytest.mark.anyio

METADATA_URL = f"{BASE}/.well-known/oauth-protected-resource/mcp"


@pytest.fixture
def issuer() -> Iterator[Issuer]:
    made = Issuer()
    made.add_key("rsa", kid="rsa-1")
    made.add_key("ec256", kid="ec-1")
    yield made
    made.close()


def oauth_options(issuer: Issuer, **changes: Any) -> OAuthOptions:
    # Refetches at once (no rate limit) and gives up on the issuer fast: tests that need the limits set them.
    return OAuthOptions(issuer=issuer.url, **{"refetch_interval": 0.0, "fetch_timeout": 2.0, **changes})


@asynccontextmanager
async def serving(registry: Registry, oauth: OAuthOptions, token: str | None = None) -> AsyncIterator[Any]:
    """The HTTP app in OAuth mode, with a ``whoami`` tool answering the caller the server sees."""

    def whoami() -> dict[str, Any]:
        caller = current_caller()
        return {"name": caller.name, "patterns": caller.patterns}

    async with app_serving(registry, HttpOptions(token=token, oauth=oauth), lambda s: s.add_tool(whoami)) as (_, app):
        yield app


def http(app: Any, token: str | None = None) -> httpx2.AsyncClient:
    return asgi_client(app, token)


async def initialize(app: Any, token: str | None) -> httpx2.Response:
    async with http(app, token) as h:
        return await h.post("/mcp", json=INITIALIZE, headers=MCP_HEADERS)


def challenge(response: httpx2.Response) -> dict[str, str]:
    """The parameters of a ``WWW-Authenticate: Bearer ...`` header."""
    value = response.headers["www-authenticate"]
    assert value.startswith("Bearer ")
    return dict(re.findall(r'(\w+)="([^"]*)"', value))


def refusals(caplog: pytest.LogCaptureFixture) -> list[Any]:
    """The gate's refusal lines (``http.refused``)."""
    return [r for r in caplog.records if getattr(r, "event", "") == "http.refused"]


def refusal_reasons(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [getattr(r, "reason", "") for r in refusals(caplog)]


# ---------------------------------------------------------------- accepted tokens


@pytest.mark.parametrize("kind", ["rsa", "rsa-pss", "ec256", "ec384", "ed25519"])
async def test_a_valid_token_searches_as_its_caller(registry: Registry, issuer: Issuer, kind: str) -> None:
    kid = issuer.add_key(kind)
    token = issuer.mint(kid, scope="openid mcpower:read:hand* other:scope")
    async with (
        serving(registry, oauth_options(issuer)) as app,
        http(app, token) as h,
        Client(streamable_http_client(f"{BASE}/mcp", http_client=h), mode="legacy") as c,
    ):
        who = await c.call_tool("whoami", {})
        assert who.structured_content == {"name": "oauth:alice", "patterns": ["hand*"]}
        found = await c.call_tool("knowledge_search", {"query": "harpsichord feature", "top_k": 3})
        assert found.structured_content["status"] == "ok"
        assert found.structured_content["results"][0]["path"] == "notes.txt"
        listed = await c.call_tool("knowledge_list_datasets", {})
        assert [d["id"] for d in listed.structured_content["datasets"]] == ["handbook"]  # scoped as the token says
        hidden = await c.call_tool("knowledge_search", {"query": "pumpkin", "dataset": "recipes"})
        assert hidden.structured_content["error"]["code"] == "DATASET_NOT_FOUND"


async def test_the_caller_mapping(issuer: Issuer) -> None:
    """Name: oauth: and sub, else client_id, else azp (never a named token's name: those hold no
    ':'); datasets: the mcpower scopes of scope and scp, and the datasets claim when one is named;
    /metrics with mcpower:metrics."""
    verifier = JwtVerifier(oauth_options(issuer, datasets_claim="kb_datasets"), AUDIENCE)

    async def caller(**claims: Any) -> Caller:
        found = await verifier.verify_token(issuer.mint(**claims))
        assert found is not None and found.token == "jwt"  # the secret is not kept
        return caller_of(found)

    assert await caller() == Caller("oauth:alice", None)
    assert await caller(sub="token") == Caller("oauth:token", None)  # not the operator's single token
    assert await caller(sub=None) == Caller("oauth:agent-app", None)
    assert await caller(sub=None, client_id=None, azp="web-app") == Caller("oauth:web-app", None)
    assert await caller(scope=None, scp=["mcpower:read:eng-*", "x"]) == Caller("oauth:alice", ("eng-*",))
    assert await caller(scope="mcpower:read:a", kb_datasets=["hr", "ops-*"]) == Caller(
        "oauth:alice", ("a", "hr", "ops-*")
    )
    assert await caller(scope="mcpower:readx mcpower:read:", scp="email") == Caller("oauth:alice", ())
    assert await caller(scope="mcpower:metrics") == Caller("oauth:alice", (), metrics=True)
    assert await caller(scope="mcpower:read:a mcpower:metrics") == Caller("oauth:alice", ("a",), metrics=True)


async def test_the_clock_leeway_is_small(registry: Registry, issuer: Issuer) -> None:
    async with serving(registry, oauth_options(issuer)) as app:
        assert (await initialize(app, issuer.mint(exp=int(time.time()) - 10))).status_code == 200
        assert (await initialize(app, issuer.mint(exp=int(time.time()) - 90))).status_code == 401


async def test_the_static_token_still_works_beside_oauth(registry: Registry, issuer: Issuer) -> None:
    async with serving(registry, oauth_options(issuer), token=TOKEN) as app:
        assert (await initialize(app, TOKEN)).status_code == 200
        assert (await initialize(app, issuer.mint())).status_code == 200
        assert (await initialize(app, TOKEN[:-1])).status_code == 401


# ---------------------------------------------------------------- the attack table


def _attack(issuer: Issuer, case: str) -> str | None:
    now = int(time.time())
    rsa = "rsa-1"
    if case == "no token":
        return None
    if case == "expired":
        return issuer.mint(rsa, exp=now - 300, iat=now - 900)
    if case == "not yet valid":
        return issuer.mint(rsa, nbf=now + 300)
    if case == "no expiry":
        return issuer.mint(rsa, exp=None)
    if case == "wrong audience":
        return issuer.mint(rsa, aud="http://127.0.0.1:8765/other")
    if case == "audience of another server":
        return issuer.mint(rsa, aud=["https://elsewhere.example/mcp"])
    if case == "wrong issuer":
        return issuer.mint(rsa, iss="http://127.0.0.1:1")
    if case == "unknown kid":
        issuer.add_key("rsa", kid="never-published", publish=False)
        return issuer.mint("never-published")
    if case == "signed by another key under a known kid":
        issuer.add_key("rsa", kid="impostor", publish=False)
        token = issuer.mint("impostor")
        return tampered_header(token, kid=rsa)
    if case == "a key of its own in the header (jwk, jku)":
        issuer.add_key("rsa", kid="attacker", publish=False)
        attacker = json.loads(jwt.get_algorithm_by_name("RS256").to_jwk(issuer.private["attacker"][1].public_key()))
        headers = {"jwk": attacker, "jku": "http://127.0.0.1:9/evil.json", "kid": rsa}
        return issuer.mint("attacker", headers=headers)
    if case == "alg none":
        return unsigned({"alg": "none", "typ": "JWT", "kid": rsa}, issuer.claims())
    if case == "HS256 keyed by the public key":
        return unsigned({"alg": "HS256", "typ": "JWT", "kid": rsa}, issuer.claims(), secret=issuer.public_pem(rsa))
    if case == "ES256 header on an RSA key":
        return tampered_header(issuer.mint("ec-1"), kid=rsa)
    if case == "RS384 where the key says RS256":
        return issuer.mint(rsa, alg="RS384")
    if case == "tampered payload":
        return tampered(issuer.mint(rsa, scope="mcpower:read:public"), scope="mcpower:read")
    if case == "garbage":
        return "not-a-jwt-at-all"
    if case == "oversized":
        return issuer.mint(rsa, pad="x" * 9000)
    if case == "no subject":
        return issuer.mint(rsa, sub=None, client_id=None)
    if case == "exp as a numeric string":  # PyJWT reads "1900000000" as the number
        return issuer.mint(rsa, exp=str(now + 300))
    if case == "nbf as a numeric string":
        return issuer.mint(rsa, nbf=str(now - 60))
    if case == "iat as a numeric string":
        return issuer.mint(rsa, iat=str(now - 60))
    raise AssertionError(case)


def tampered_header(token: str, **changes: Any) -> str:
    header, payload, signature = token.split(".")
    fields = json.loads(base64.urlsafe_b64decode(header + "=" * (-len(header) % 4)))
    fields.update(changes)
    encoded = base64.urlsafe_b64encode(json.dumps(fields).encode()).rstrip(b"=").decode()
    return f"{encoded}.{payload}.{signature}"


# case -> the reason logged
ATTACKS = {
    "no token": "no_token",
    "expired": "expired",
    "not yet valid": "not_yet_valid",
    "no expiry": "missing_claim",
    "wrong audience": "audience",
    "audience of another server": "audience",
    "wrong issuer": "issuer",
    "unknown kid": "unknown_key",
    "signed by another key under a known kid": "signature",
    "a key of its own in the header (jwk, jku)": "signature",
    "alg none": "algorithm",
    "HS256 keyed by the public key": "algorithm",
    "ES256 header on an RSA key": "key_type",
    "RS384 where the key says RS256": "key_type",
    "tampered payload": "signature",
    "garbage": "malformed",
    "oversized": "too_large",
    "no subject": "no_subject",
    "exp as a numeric string": "claim_type",
    "nbf as a numeric string": "claim_type",
    "iat as a numeric string": "claim_type",
}
# The reasons given after the signature held: the token is the issuer's, and its caller is named.
RECOGNIZED = {"expired", "not_yet_valid", "audience", "issuer", "missing_claim", "claim_type"}


@pytest.mark.parametrize("case", list(ATTACKS))
async def test_attack_table(registry: Registry, issuer: Issuer, case: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="mcpower")
    token = _attack(issuer, case)
    async with serving(registry, oauth_options(issuer)) as app:
        response = await initialize(app, token)
    assert response.status_code == 401, response.text
    assert challenge(response) == {
        "error": "invalid_token",
        "error_description": "Authentication required",
        "resource_metadata": METADATA_URL,
    }
    assert response.json()["error"] == "invalid_token"
    (line,) = refusals(caplog)
    assert line.reason == ATTACKS[case] and line.status == 401 and line.path == "/mcp"
    assert line.client == "127.0.0.1"  # the ASGI client's address
    assert line.caller == ("oauth:alice" if ATTACKS[case] in RECOGNIZED else None)
    if token is not None:  # the credential is in no log line, whole or in part
        logged = " ".join(f"{r.getMessage()} {vars(r)}" for r in caplog.records)
        middle = len(token) // 2
        assert token not in logged and token[middle : middle + 16] not in logged


async def test_a_good_token_without_mcpower_scope_gets_403_insufficient_scope(
    registry: Registry, issuer: Issuer
) -> None:
    async with serving(registry, oauth_options(issuer)) as app:
        response = await initialize(app, issuer.mint(scope="openid profile"))
        assert response.status_code == 403
        assert challenge(response) == {
            "error": "insufficient_scope",
            "error_description": "Required scope: mcpower:read",
            "scope": "mcpower:read",
            "resource_metadata": METADATA_URL,
        }
        async with http(app, issuer.mint(scope="openid")) as h:  # open paths answer as to no token
            assert (await h.get("/healthz")).json() == {"status": "ok"}


async def test_the_metrics_scope_reads_metrics_and_a_read_scope_does_not(registry: Registry, issuer: Issuer) -> None:
    async with serving(registry, oauth_options(issuer)) as app:
        async with http(app, issuer.mint(scope="mcpower:metrics")) as h:  # a scraper's client: metrics only
            assert (await h.get("/metrics")).status_code == 200
            assert (await h.post("/mcp", json=INITIALIZE, headers=MCP_HEADERS)).status_code == 403
        async with http(app, issuer.mint(scope="mcpower:read")) as h:  # every dataset, but not the metrics
            refused = await h.get("/metrics")
            assert refused.status_code == 403 and challenge(refused)["scope"] == "mcpower:metrics"
            assert (await h.post("/mcp", json=INITIALIZE, headers=MCP_HEADERS)).status_code == 200


# ---------------------------------------------------------------- keys: rotation, limits, failures


async def test_a_rotated_key_works_without_restart_and_a_removed_one_stops(registry: Registry, issuer: Issuer) -> None:
    async with serving(registry, oauth_options(issuer)) as app:
        old = issuer.mint("rsa-1")
        assert (await initialize(app, old)).status_code == 200
        new_kid = issuer.add_key("rsa", kid="rsa-2")
        issuer.published.remove("rsa-1")
        assert (await initialize(app, issuer.mint(new_kid))).status_code == 200  # unknown kid: fetched again
        assert (await initialize(app, old)).status_code == 401  # the set fetched then no longer has it


async def test_unknown_kids_cannot_make_the_server_hammer_the_issuer(issuer: Issuer) -> None:
    now = [1000.0]
    keys = KeyCache(issuer.url, issuer.jwks_url, ttl=300, refetch_interval=30, clock=lambda: now[0])
    assert await keys.key("rsa-1") is not None
    assert keys.fetches == 1
    for i in range(200):  # a flood of made-up kids within the interval: no fetch
        assert await keys.key(f"made-up-{i}") is None
    assert keys.fetches == 1
    new = issuer.add_key("rsa")
    now[0] += 31  # past the interval: one fetch finds the new key
    assert await keys.key(new) is not None and keys.fetches == 2
    issuer.published.remove("rsa-1")
    assert await keys.key("rsa-1") is not None  # still in the set fetched 0 s ago
    now[0] += 301  # past the time to live: fetched again, and the removed key is gone
    assert await keys.key("rsa-1") is None
    assert keys.fetches == 3
    async with anyio.create_task_group() as tg:  # concurrent waiters share one fetch
        now[0] += 400
        for _ in range(20):
            tg.start_soon(keys.key, new)
    assert keys.fetches == 4


async def test_while_one_request_refreshes_the_keys_the_others_use_those_in_hand(issuer: Issuer) -> None:
    now = [1000.0]
    keys = KeyCache(issuer.url, issuer.jwks_url, ttl=300, refetch_interval=30, fetch_timeout=30, clock=lambda: now[0])
    assert await keys.key("rsa-1") is not None
    now[0] += 301
    issuer.mode = "slow"  # the next fetch hangs until released
    refreshed = anyio.Event()

    async def refresh() -> None:
        await keys.key("rsa-1")
        refreshed.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(refresh)
        with anyio.fail_after(20):
            while issuer.requests.count("/jwks.json") < 2:
                await anyio.sleep(0.01)
        assert await keys.key("rsa-1") is not None  # no wait for the issuer
        assert not refreshed.is_set()
        issuer.released.set()
    assert keys.fetches == 2


async def test_discovery_and_key_set_share_one_deadline(issuer: Issuer, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="mcpower")
    issuer.mode = "slow-metadata"
    keys = KeyCache(issuer.url + "/realm", fetch_timeout=2.0)  # three metadata URLs to try, each hanging
    with anyio.fail_after(30):
        assert await keys.key("rsa-1") is None
    # The third was never tried: 2 x 2 s is the whole refresh's deadline. At most two, not exactly two:
    # on a loaded machine a request may not reach the issuer before its share of the deadline ends.
    assert len(issuer.requests) <= 2
    said = [r for r in caplog.records if getattr(r, "event", "") == "oauth.jwks_unavailable"]
    assert said[0].reason == "no key set within 4 s"


@pytest.mark.parametrize("mode", ["down", "slow", "huge", "malformed", "refused"])
async def test_a_failing_key_set_refuses_tokens_and_says_why(
    registry: Registry, issuer: Issuer, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="mcpower")
    issuer.mode = mode
    jwks = "http://127.0.0.1:9/jwks.json" if mode == "refused" else None  # port 9: nothing listens
    options = oauth_options(issuer, fetch_timeout=0.5, **({"jwks": jwks} if jwks else {}))
    async with serving(registry, options) as app:
        with anyio.fail_after(20):  # not a hang: the fetch gives up after fetch_timeout
            response = await initialize(app, issuer.mint())
    assert response.status_code == 401
    assert challenge(response)["resource_metadata"] == METADATA_URL
    said = [r for r in caplog.records if getattr(r, "event", "") == "oauth.jwks_unavailable"]
    assert said and said[0].levelno == logging.WARNING
    assert refusal_reasons(caplog) == ["unknown_key"]


@pytest.mark.parametrize(
    ("case", "said"),
    [
        ("up", "publishes 2 signing key(s)"),
        ("unreachable", "cannot fetch"),
        ("not an issuer", "no usable issuer metadata"),
        ("no keys", "no RSA, EC or OKP signing key"),
    ],
)
async def test_the_issuer_is_checked_once_at_start(
    issuer: Issuer, case: str, said: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The start-up check (oauth.check_issuer) says what is wrong with the issuer, naming it."""
    caplog.set_level(logging.INFO, logger="mcpower")
    url = {"unreachable": "http://127.0.0.1:9", "not an issuer": issuer.url + "/not-the-issuer"}.get(case, issuer.url)
    if case == "no keys":
        issuer.published.clear()
    verifier = JwtVerifier(OAuthOptions(issuer=url, fetch_timeout=2.0), AUDIENCE)
    with anyio.fail_after(20):
        await check_issuer(verifier)
    records = [r for r in caplog.records if getattr(r, "event", "").startswith("oauth.issuer_")]
    assert len(records) == 1 and url in records[0].getMessage() and said in records[0].getMessage()
    assert records[0].levelno == (logging.INFO if case == "up" else logging.WARNING)
    if case == "up":  # the keys are in hand: the first token needs no fetch of its own
        fetches = verifier.keys.fetches
        assert await verifier.verify_token(issuer.mint(aud=AUDIENCE)) is not None
        assert verifier.keys.fetches == fetches == 1


async def test_keys_from_a_file_and_from_oidc_metadata(registry: Registry, issuer: Issuer, tmp_path: Path) -> None:
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps(issuer.jwks()), encoding="utf-8")
    async with serving(registry, oauth_options(issuer, jwks=str(path))) as app:
        assert (await initialize(app, issuer.mint())).status_code == 200
    assert "/jwks.json" not in issuer.requests
    issuer.metadata = "oidc"
    async with serving(registry, oauth_options(issuer)) as app:
        assert (await initialize(app, issuer.mint())).status_code == 200
    assert issuer.requests[-3:] == [
        "/.well-known/oauth-authorization-server",
        "/.well-known/openid-configuration",
        "/jwks.json",
    ]


async def test_metadata_naming_another_issuer_is_not_trusted(registry: Registry, issuer: Issuer) -> None:
    issuer.metadata_issuer = "https://evil.example"
    async with serving(registry, oauth_options(issuer)) as app:
        assert (await initialize(app, issuer.mint())).status_code == 401
    assert "/jwks.json" not in issuer.requests


# ---------------------------------------------------------------- protected resource metadata


async def test_protected_resource_metadata(registry: Registry, issuer: Issuer) -> None:
    async with serving(registry, oauth_options(issuer)) as app, http(app) as h:
        for path in ("/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"):
            response = await h.get(path)  # no token needed
            assert response.status_code == 200, path
            assert response.json() == {
                "resource": AUDIENCE,
                "authorization_servers": [issuer.url],
                "scopes_supported": ["mcpower:read"],
                "bearer_methods_supported": ["header"],
                "resource_name": "mcpower",
            }
        assert (await h.get("/.well-known/oauth-protected-resource/other")).status_code == 401


async def test_a_public_url_is_the_resource_and_the_audience(registry: Registry, issuer: Issuer) -> None:
    public = "https://kb.example.com/team/mcp"
    options = oauth_options(issuer, public_url=public)
    async with serving(registry, options) as app, http(app) as h:
        metadata = await h.get("/.well-known/oauth-protected-resource/team/mcp")
        assert metadata.json()["resource"] == public
        refused = await h.post("/mcp", json=INITIALIZE, headers=MCP_HEADERS)
        assert challenge(refused)["resource_metadata"] == (
            "https://kb.example.com/.well-known/oauth-protected-resource/team/mcp"
        )
        assert (await initialize(app, issuer.mint(aud=public))).status_code == 200
        assert (await initialize(app, issuer.mint())).status_code == 401  # the loopback URL is not the audience
    async with serving(registry, oauth_options(issuer, audience="api://kb")) as app:
        assert (await initialize(app, issuer.mint(aud=["x", "api://kb"]))).status_code == 200


@pytest.mark.parametrize(
    "claims",
    [
        {"exp": "soon"},
        {"exp": True},
        {"exp": 10**30},
        {"nbf": [1]},
        {"iat": "yesterday"},
        {"aud": 123},
        {"aud": [None, {"x": 1}]},
        {"iss": ["x"]},
        {"sub": 123, "client_id": 5, "azp": None},
        {"sub": {"name": "alice"}},
        {"scope": 123, "scp": {"mcpower:read": True}},
        {"scope": ["mcpower:read"]},
        {"jti": 5},
    ],
)
async def test_claims_of_odd_types_are_answered_never_raised(issuer: Issuer, claims: dict[str, Any]) -> None:
    from mcpower.server.auth.oauth import JwtVerifier

    verifier = JwtVerifier(oauth_options(issuer), AUDIENCE)
    found = await verifier.verify_token(issuer.mint_raw(issuer.claims(**claims)))
    assert found is None or isinstance(found.client_id, str)
