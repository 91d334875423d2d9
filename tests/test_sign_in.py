"""Signing in and failing to (issue 26 items 1 and 10): the web pages' sessions (server/auth/logins.py,
web/login.py) end with their token, their limits and logout; failed attempts to authenticate are
limited per client address (server/auth/attempts.py), over bearer headers and the sign-in form alike.

In process, over the ASGI app; a test clock moves time (HttpOptions.clock), so nothing sleeps.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import httpx2
import pytest
from asgi_fixtures import BASE, INITIALIZE, MCP_HEADERS, app_serving
from http_fixtures import TOKEN
from mcp.server.auth.provider import AccessToken

from mcpower.registry import Registry
from mcpower.server.auth.attempts import MAX_FAILURES, REFILL_S, FailedAttempts
from mcpower.server.auth.logins import ABSOLUTE_S, IDLE_S, PageSessions
from mcpower.server.auth.tokens import NamedToken, digest, read_tokens, write_tokens
from mcpower.server.auth.verifiers import Refusal
from mcpower.server.http import HttpOptions

pytestmark = pytest.mark.anyio

ALICE = "mcpw_alice-secret-0123456789abcdefghijklmnop"
COOK = "mcpw_cook-secret-0123456789abcdefghijklmnopq"
HERE, THERE = "10.0.0.7", "10.0.0.8"  # two client addresses


class Clock:
    def __init__(self) -> None:
        self.now = 1_900_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def tokens_file(tmp_path: Path) -> Path:
    path = tmp_path / "tokens.json"
    now = datetime.now(timezone.utc)
    write_tokens(
        path,
        [NamedToken("alice", digest(ALICE), ("*",), now), NamedToken("cook", digest(COOK), ("recipes",), now)],
    )
    return path


@asynccontextmanager
async def serving(registry: Registry, clock: Clock, **options: Any) -> AsyncIterator[Any]:
    async with app_serving(registry, HttpOptions(**{"token": TOKEN, "clock": clock, **options})) as (_, app):
        yield app


def client(app: Any, address: str = HERE, token: str | None = None) -> httpx2.AsyncClient:
    """A client of ``app`` from ``address``."""
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    transport = httpx2.ASGITransport(app=app, client=(address, 40000))
    return httpx2.AsyncClient(transport=transport, base_url=BASE, headers=headers)


async def sign_in(h: httpx2.AsyncClient, token: str) -> dict[str, str]:
    """The cookie header of a new session."""
    r = await h.post("/login", data={"token": token, "next": "/"}, headers={"Origin": BASE})
    assert r.status_code == 303, r.text
    return {"Cookie": r.headers.get_list("set-cookie")[0].split(";")[0]}


def refusals(caplog: pytest.LogCaptureFixture) -> list[Any]:
    return [r for r in caplog.records if getattr(r, "event", "") == "http.refused"]


# ---------------------------------------------------------------- page sessions (26.1)


async def test_a_session_ends_when_its_named_token_is_revoked_expires_or_changes(
    registry: Registry, tokens_file: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="mcpower")
    async with serving(registry, Clock(), token=None, tokens_file=tokens_file) as app, client(app) as h:
        alice, cook = await sign_in(h, ALICE), await sign_in(h, COOK)
        assert (await h.get("/", headers=alice)).status_code == 200
        listed = (await h.get("/?format=json", headers=cook)).json()["datasets"]
        assert [d["id"] for d in listed] == ["recipes"]
        tokens = {t.name: t for t in read_tokens(tokens_file)}
        # cook's datasets edited: the session reads what the file says now
        write_tokens(tokens_file, [tokens["alice"], replace(tokens["cook"], datasets=("handbook",))])
        listed = (await h.get("/?format=json", headers=cook)).json()["datasets"]
        assert [d["id"] for d in listed] == ["handbook"]
        # alice revoked, cook expired, while their sessions are open: the next page is the sign-in form
        past = datetime.now(timezone.utc) - timedelta(minutes=1)
        write_tokens(tokens_file, [replace(tokens["cook"], datasets=("handbook",), expires=past)])
        for jar, reason, name in [(alice, "revoked", "alice"), (cook, "expired", "cook")]:
            page = await h.get("/", headers=jar)
            assert page.status_code == 303 and page.headers["location"].startswith("/login")
            line = refusals(caplog)[-1]
            assert (line.status, line.reason, line.caller, line.client, line.path) == (401, reason, name, HERE, "/")
            assert (await h.get("/?format=json", headers=jar)).status_code == 401
    assert ALICE not in caplog.text and COOK not in caplog.text


async def test_a_session_ends_when_idle_and_after_its_absolute_limit(registry: Registry) -> None:
    clock = Clock()
    async with serving(registry, clock) as app, client(app) as h:
        used, left = await sign_in(h, TOKEN), await sign_in(h, TOKEN)
        for _ in range(3):  # used every few hours: kept, until a day after sign-in
            clock.now += IDLE_S - 60
            assert (await h.get("/", headers=used)).status_code == 200
        assert (await h.get("/", headers=left)).status_code == 303  # idle past IDLE_S
        clock.now += ABSOLUTE_S - 3 * (IDLE_S - 60)
        assert (await h.get("/", headers=used)).status_code == 303  # ABSOLUTE_S after sign-in


async def test_an_oauth_sign_in_ends_at_the_tokens_exp() -> None:
    """A JWT cannot be judged again from its hash (only its issuer could revoke it): its ``exp``
    ends the session."""
    clock = Clock()

    class Jwts:  # a verifier of the OAuth kind: no check_digest
        async def verify_token(self, token: str) -> AccessToken | None:
            return None

    sessions = PageSessions(Jwts(), clock=clock)
    access = AccessToken(token="jwt", client_id="oauth:alice", scopes=["mcpower:read"], expires_at=int(clock.now) + 600)
    session = sessions.open(access, "header.payload.signature")
    assert sessions.find(session) == access
    clock.now += 601
    found = sessions.find(session)
    assert isinstance(found, Refusal) and (found.reason, found.caller) == ("expired", "oauth:alice")
    assert len(sessions) == 0


def test_sessions_are_bounded_per_caller_and_in_all() -> None:
    clock = Clock()

    class Nobody:
        async def verify_token(self, token: str) -> AccessToken | None:
            return None

    sessions = PageSessions(Nobody(), per_caller=2, max_sessions=3, clock=clock)

    def open_for(name: str) -> str:
        clock.now += 1
        return sessions.open(AccessToken(token="jwt", client_id=name, scopes=["mcpower:read"]), "t")

    a1, a2, a3 = open_for("alice"), open_for("alice"), open_for("alice")
    assert isinstance(sessions.find(a1), Refusal)  # alice's third made her first make way
    assert not isinstance(sessions.find(a2), Refusal) and not isinstance(sessions.find(a3), Refusal)
    b1 = open_for("bob")
    assert len(sessions) == 3
    open_for("carol")  # the cap in all: the least recently used anywhere (a2) goes
    assert [isinstance(sessions.find(s), Refusal) for s in (a2, a3, b1)] == [True, False, False]
    assert len(sessions) == 3


# ---------------------------------------------------------------- failed attempts (26.10)


async def test_bad_bearer_tokens_are_limited_per_address(registry: Registry, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="mcpower")
    clock = Clock()
    async with serving(registry, clock) as app, client(app, HERE) as here, client(app, THERE) as there:

        async def initialize(h: httpx2.AsyncClient, token: str) -> httpx2.Response:
            return await h.post("/mcp", json=INITIALIZE, headers={**MCP_HEADERS, "Authorization": f"Bearer {token}"})

        guesses = [(await initialize(here, f"guess-{i:02d}-0123456789")).status_code for i in range(MAX_FAILURES)]
        assert guesses == [401] * MAX_FAILURES
        locked = await initialize(here, "guess-last-0123456789")
        assert locked.status_code == 429 and int(locked.headers["retry-after"]) >= 1
        assert "too many failed attempts" in locked.json()["error_description"]
        assert (await initialize(here, TOKEN)).status_code == 429  # a right guess now would tell nothing apart
        assert (await initialize(there, TOKEN)).status_code == 200  # another address: untouched
        assert (await initialize(there, "wrong-0123456789abcd")).status_code == 401
        assert (await here.get("/healthz")).status_code == 200  # no credential: nothing to limit
        clock.now += int(locked.headers["retry-after"])
        assert (await initialize(here, TOKEN)).status_code == 200  # after the wait, the right token works
    lines = refusals(caplog)
    assert [line.reason for line in lines[:MAX_FAILURES]] == ["unknown_token"] * MAX_FAILURES
    assert {line.client for line in lines[: MAX_FAILURES + 2]} == {HERE}
    assert [(line.status, line.reason) for line in lines[MAX_FAILURES : MAX_FAILURES + 2]] == [(429, "attempts")] * 2
    exhausted = [r for r in caplog.records if getattr(r, "event", "") == "http.attempts_exhausted"]
    assert len(exhausted) == 1 and exhausted[0].client == HERE and exhausted[0].levelno == logging.WARNING
    assert "guess-" not in caplog.text and TOKEN not in caplog.text


async def test_failed_sign_ins_are_limited_per_address(registry: Registry) -> None:
    clock = Clock()
    async with serving(registry, clock) as app, client(app, HERE) as here, client(app, THERE) as there:
        for i in range(MAX_FAILURES):
            wrong = await here.post("/login", data={"token": f"typo-{i}", "next": "/"})
            assert wrong.status_code == 401 and 'data-testid="login-error"' in wrong.text
        locked = await here.post("/login", data={"token": TOKEN, "next": "/"})
        assert locked.status_code == 429 and "set-cookie" not in locked.headers
        assert int(locked.headers["retry-after"]) >= 1 and "Too many failed sign-ins" in locked.text
        bearer = await here.get("/?format=json", headers={"Authorization": "Bearer another-guess-0123456789"})
        assert bearer.status_code == 429  # one count per address, whichever door
        assert (await sign_in(there, TOKEN))["Cookie"]
        clock.now += REFILL_S
        assert (await sign_in(here, TOKEN))["Cookie"]


async def test_a_known_token_that_stopped_working_spends_no_attempts(registry: Registry, tokens_file: Path) -> None:
    """An agent left running with a revoked or expired token is no guesser: its address keeps its attempts."""
    tokens = read_tokens(tokens_file)
    async with serving(registry, Clock(), tokens_file=tokens_file) as app, client(app, token=ALICE) as h:
        assert (await h.get("/healthz")).json()["status"] == "ok"  # the server read the file with alice in it
        past = datetime.now(timezone.utc) - timedelta(minutes=1)
        write_tokens(tokens_file, [replace(tokens[1], expires=past)])  # alice revoked, cook expired
        for token in [ALICE, COOK] * MAX_FAILURES:
            r = await h.post("/mcp", json=INITIALIZE, headers={**MCP_HEADERS, "Authorization": f"Bearer {token}"})
            assert r.status_code == 401
        assert (await h.get("/", headers={"Authorization": f"Bearer {TOKEN}"})).status_code == 200


def test_the_attempts_table_is_bounded_and_counts_ipv6_by_its_64() -> None:
    clock = Clock()
    attempts = FailedAttempts(burst=2, refill_s=10.0, clock=clock, max_addresses=100)
    for i in range(1000):
        attempts.failed(f"192.0.2.{i % 250}" if i < 250 else f"2001:db8:{i:x}::1")
    assert len(attempts) <= 100
    attempts.failed("2001:db8:1:2::1")
    attempts.failed("2001:db8:1:2:ffff::9")  # the same /64: one host may take any address of it
    assert attempts.retry_after("2001:db8:1:2::77") == 10 and attempts.retry_after("2001:db8:1:3::1") == 0
    clock.now += 10
    assert attempts.retry_after("2001:db8:1:2::1") == 0
    clock.now += 1000  # refilled entries are forgotten as others come
    attempts.failed("198.51.100.1")
    assert len(attempts) == 1


async def test_a_proxys_basic_header_leaves_the_session_in_charge_and_a_metrics_token_cannot_sign_in(
    registry: Registry, tmp_path: Path
) -> None:
    prom = "mcpw_prom-secret-0123456789abcdefghijklmnopq"
    tokens_file = tmp_path / "tokens.json"
    write_tokens(tokens_file, [NamedToken("prom", digest(prom), (), datetime.now(timezone.utc), metrics=True)])
    async with serving(registry, Clock(), tokens_file=tokens_file) as app, client(app) as h:
        jar = await sign_in(h, TOKEN)
        basic = {**jar, "Authorization": "Basic dXNlcjpwYXNzd29yZA=="}  # a proxy's own sign-in, passed on
        assert (await h.get("/", headers=basic)).status_code == 200
        refused = await h.post("/login", data={"token": prom, "next": "/"}, headers={"Origin": BASE})
        assert refused.status_code == 403 and "set-cookie" not in refused.headers
        assert "reads no dataset" in refused.text
