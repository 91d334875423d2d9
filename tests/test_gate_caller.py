"""Gate hands on the caller it authenticated: ``scope["user"]`` and ``scope["auth"]``, as starlette's
AuthenticationMiddleware puts them, so middleware after it (rate limits, metrics, web pages) knows who calls."""

from __future__ import annotations

import logging
from typing import Any

import httpx2
import pytest
from asgi_fixtures import asgi_client
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from starlette.responses import PlainTextResponse
from starlette.types import Receive, Scope, Send

from mcpower.server.auth.access import HostCheck, StaticTokenVerifier, transport_security
from mcpower.server.auth.callers import LOCAL, caller_from_scope
from mcpower.server.auth.gate import Gate

pytestmark = pytest.mark.anyio

TOKEN = "gate-test-token-0123456789"


class Seen:
    """An app that answers with the caller's name and keeps the scopes it was given."""

    def __init__(self) -> None:
        self.scopes: list[Scope] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.scopes.append(scope)
        await PlainTextResponse(caller_from_scope(scope).name)(scope, receive, send)


def gate(app: Any, token: str | None) -> Gate:
    return Gate(
        app,
        hosts=HostCheck(transport_security("127.0.0.1", [], [])),
        verifier=StaticTokenVerifier(token) if token else None,
        max_body_bytes=1000,
        open_paths=["/healthz"],
    )


def client(app: Any, token: str | None = None) -> httpx2.AsyncClient:
    return asgi_client(app, token or None)


async def test_the_authenticated_user_is_in_the_scope() -> None:
    seen = Seen()
    async with client(gate(seen, TOKEN), TOKEN) as h:
        response = await h.post("/mcp", content=b"{}")
    assert response.text == "token"  # the single token's caller name
    user = seen.scopes[0]["user"]
    assert isinstance(user, AuthenticatedUser) and user.access_token.client_id == "token"
    assert seen.scopes[0]["auth"].scopes == ["mcpower:read", "mcpower:metrics"]  # the operator's


async def test_open_paths_carry_the_user_when_a_good_token_is_sent_and_no_user_otherwise() -> None:
    seen = Seen()
    async with client(gate(seen, TOKEN), TOKEN) as good, client(gate(seen, TOKEN), "wrong-token-0123456789") as bad:
        assert (await good.get("/healthz")).text == "token"
        assert (await bad.get("/healthz")).text == LOCAL.name  # answered, but as nobody in particular
        assert (await bad.get("/mcp")).status_code == 401
    assert "user" not in seen.scopes[1]


async def test_without_a_token_configured_the_caller_is_local() -> None:
    seen = Seen()
    async with client(gate(seen, None)) as h:
        assert (await h.post("/mcp", content=b"{}")).text == LOCAL.name


@pytest.mark.parametrize(
    ("authorization", "reason"),
    [
        (None, "no_token"),
        ("Basic dXNlcjpwYXNz", "wrong_scheme"),
        ("Bearer ", "empty_token"),
        ("Bearer not-the-token-0123456789", "unknown_token"),
        ("Bearer " + "x" * 20_000, "too_large"),
    ],
)
async def test_each_refusal_is_logged_with_its_reason_address_and_path(
    authorization: str | None, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="mcpower")
    headers = {"Authorization": authorization} if authorization else {}
    async with client(gate(Seen(), TOKEN)) as h:
        assert (await h.post("/mcp?x=1", content=b"{}", headers=headers)).status_code == 401
    (line,) = [r for r in caplog.records if getattr(r, "event", "") == "http.refused"]
    assert (line.status, line.reason, line.client, line.path, line.caller) == (401, reason, "127.0.0.1", "/mcp", None)
    if authorization:
        assert authorization.split(" ", 1)[1][:12] not in caplog.text or reason == "empty_token"


async def test_a_wrong_host_is_told_what_came_and_how_to_allow_it(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="mcpower")
    async with client(gate(Seen(), TOKEN), TOKEN) as h:
        named = await h.get("/mcp", headers={"Host": "kb.lan:8765"})
        odd = await h.get("/mcp", headers={"Host": "<script>:1"})
    assert named.status_code == 421 and "'kb.lan:8765'" in named.text and "--allow-host kb.lan" in named.text
    assert "MCPOWER_ALLOW_HOSTS" in named.text and named.headers["x-content-type-options"] == "nosniff"
    assert odd.status_code == 421 and "<" not in odd.text and "not a host name" in odd.text
    hosts = [r.host for r in caplog.records if getattr(r, "event", "") == "http.refused"]
    assert hosts == ["kb.lan:8765", "?script?:1"]
