"""`serve --http` in process: the SDK's Streamable HTTP client through an ASGI transport, and raw requests.

Same tools as stdio; /healthz; the bearer token, Host and Origin checks, the body limit, the
session cap, the time limit per request and the worker threads' bound. The CLI's refusals
(no token on a public address, conflicting flags) and the --print-config HTTP forms are here too.
Over a real socket and with the Node clients: test_http_socket.py.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from asgi_fixtures import BASE, INITIALIZE, MCP_HEADERS, app_serving, asgi_client
from http_fixtures import TOKEN
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import ResourceTemplateReference
from server_fixtures import add_broken_dataset
from typer.testing import CliRunner

import mcpower.search
from mcpower import __version__
from mcpower.cli.app import app as cli
from mcpower.registry import Registry
from mcpower.server.app import KnowledgeServer, create_server
from mcpower.server.auth.access import HostCheck, transport_security
from mcpower.server.http import HttpOptions
from mcpower.server.limits import Workers

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def serving(registry: Registry, **options: Any) -> AsyncIterator[tuple[KnowledgeServer, Any]]:
    """The HTTP app (token required unless ``token=None``) with its lifespan running."""
    async with app_serving(registry, HttpOptions(**{"token": TOKEN, **options})) as served:
        yield served


def http(app: Any, token: str | None = TOKEN, **headers: str) -> httpx2.AsyncClient:
    return asgi_client(app, token, **headers)


@asynccontextmanager
async def mcp_client(app: Any, mode: str = "legacy") -> AsyncIterator[Client]:
    async with http(app) as h, Client(streamable_http_client(f"{BASE}/mcp", http_client=h), mode=mode) as c:
        yield c


def schemas(tools: Any) -> dict[str, Any]:
    return {t.name: (t.input_schema, t.output_schema, t.annotations, t.description) for t in tools.tools}


# ---------------------------------------------------------------- the same server as stdio


async def test_same_tools_and_answers_as_in_memory(registry: Registry) -> None:
    async with Client(create_server(registry)) as direct:
        want_tools = schemas(await direct.list_tools())
        want = await direct.call_tool("knowledge_search", {"query": "harpsichord feature", "top_k": 3})
    async with serving(registry) as (_, app), mcp_client(app) as c:
        assert schemas(await c.list_tools()) == want_tools
        got = await c.call_tool("knowledge_search", {"query": "harpsichord feature", "top_k": 3})
        assert [r["result_id"] for r in got.structured_content["results"]] == [
            r["result_id"] for r in want.structured_content["results"]
        ]
        assert [c.model_dump() for c in got.content[1:]] == [c.model_dump() for c in want.content[1:]]  # its links
        assert got.content[1].type == "resource_link"
        rid = got.structured_content["results"][0]["result_id"]
        source = await c.call_tool("knowledge_get_source", {"result_id": rid, "scope": "chunk"})
        assert "harpsichord" in source.structured_content["content"]
        read = await c.read_resource("mcpower://recipes/bread.md")
        assert "Sourdough" in read.contents[0].text
        missing = await c.call_tool("knowledge_search", {"query": "x", "dataset": "nope"})
        assert missing.is_error and missing.structured_content["error"]["code"] == "DATASET_NOT_FOUND"
        unknown = await c.call_tool("knowledge_search", {"query": "harpsichord", "k": 2})  # a misspelt top_k
        assert unknown.is_error and unknown.structured_content["error"]["code"] == "UNKNOWN_ARGUMENT"
        assert "'k'" in unknown.structured_content["error"]["message"]
        template = ResourceTemplateReference(uri="mcpower://{dataset}/{+path}")
        ids = await c.complete(template, {"name": "dataset", "value": "re"})
        assert ids.completion.values == ["recipes"]
        paths = await c.complete(template, {"name": "path", "value": "so"}, {"dataset": "recipes"})
        assert paths.completion.values == ["soup/pumpkin.md"]


async def test_modern_protocol_too(registry: Registry) -> None:
    async with serving(registry) as (_, app), mcp_client(app, mode="auto") as c:
        result = await c.call_tool("knowledge_search", {"query": "pumpkin", "dataset": "recipes"})
        assert result.structured_content["results"][0]["path"] == "soup/pumpkin.md"


# ---------------------------------------------------------------- /healthz


DETAILED_HEALTH = {
    "status": "ok",
    "version": __version__,
    "datasets": [
        {"id": "broken", "status": "error"},
        {"id": "handbook", "status": "ready"},
        {"id": "recipes", "status": "ready"},
    ],
}


async def test_healthz_lists_statuses_without_paths_or_contents(registry: Registry, datasets: Path) -> None:
    add_broken_dataset(datasets)
    registry.scan()
    async with serving(registry) as (_, app), http(app) as h:
        response = await h.get("/healthz")
        assert response.status_code == 200
        assert response.json() == DETAILED_HEALTH
        assert str(datasets.parent) not in response.text
        assert (await h.get("/healthz", headers={"Host": "evil.example:8765"})).status_code == 421


async def test_healthz_without_the_token_says_only_that_the_server_is_up(registry: Registry, datasets: Path) -> None:
    add_broken_dataset(datasets)
    registry.scan()
    async with serving(registry) as (_, app):
        for token in (None, "wrong-token-0123456789"):
            async with http(app, token=token) as h:
                response = await h.get("/healthz")
                assert response.status_code == 200
                assert response.json() == {"status": "ok"}
    async with serving(registry, token=None) as (_, app), http(app, token=None) as h:
        assert (await h.get("/healthz")).json() == DETAILED_HEALTH  # no token configured: nothing to withhold


# ---------------------------------------------------------------- access control


async def test_missing_or_wrong_token_gets_401_with_www_authenticate(registry: Registry) -> None:
    async with serving(registry) as (_, app):
        for token in (None, "wrong-token-0123456789", TOKEN + "x", TOKEN[:-1]):
            async with http(app, token=token) as h:
                response = await h.post("/mcp", json=INITIALIZE, headers=MCP_HEADERS)
                assert response.status_code == 401, token
                assert response.headers["www-authenticate"].startswith("Bearer ")
                assert "invalid_token" in response.headers["www-authenticate"]
        async with http(app) as h:
            response = await h.post("/mcp", json=INITIALIZE, headers=MCP_HEADERS)
            assert response.status_code == 200
            assert response.json()["result"]["serverInfo"]["name"] == "mcpower"


async def test_no_token_configured_on_loopback_needs_none(registry: Registry) -> None:
    async with serving(registry, token=None) as (_, app), http(app, token=None) as h:
        assert (await h.post("/mcp", json=INITIALIZE, headers=MCP_HEADERS)).status_code == 200


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({"Host": "evil.example:8765"}, 421),  # DNS rebinding: a foreign name pointed at 127.0.0.1
        ({"Host": "localhost"}, 421),  # loopback names need a port
        ({"Origin": "http://evil.example"}, 403),
        ({"Origin": "https://localhost:3000"}, 403),  # https is not the loopback origins' scheme
        ({"Origin": "http://localhost:3000"}, 200),
        ({"Origin": "https://app.example.com"}, 200),  # allowed below
        ({"Host": "box.lan:8765"}, 200),  # allowed below
    ],
)
async def test_host_and_origin_checks(registry: Registry, headers: dict[str, str], status: int) -> None:
    options = {"allow_origins": ["https://app.example.com"], "allow_hosts": ["box.lan"]}
    async with serving(registry, **options) as (_, app), http(app) as h:
        response = await h.post("/mcp", json=INITIALIZE, headers={**MCP_HEADERS, **headers})
        assert response.status_code == status, response.text


HOSTS = [
    ("127.0.0.1:8765", True),
    ("127.0.0.1:1", True),  # loopback names with any port: a tunnel or proxy may renumber it
    ("LocalHost:8765", True),
    ("[::1]:8765", True),
    ("[0:0:0:0:0:0:0:1]:8765", True),  # the same address, spelled out
    ("box.lan", True),  # --allow-host without a port: with or without one
    ("box.lan:80", True),
    ("kb.lan:9000", True),  # --allow-host with a port: that port only
    ("127.0.0.1:1@evil.example", False),  # user info: the SDK's prefix test let this through
    ("127.0.0.1:8765.evil.example", False),
    ("localhost:8765/x", False),
    ("localhost:8765 ", False),
    ("localhost:+80", False),
    ("localhost:99999", False),
    ("localhost:", False),
    ("localhost", False),  # loopback names need a port
    ("127.0.0.1", False),
    ("[::1]", False),
    ("::1:8765", False),
    ("[::1%25eth0]:8765", False),
    ("[::1]:8765x", False),
    ("kb.lan:9001", False),
    ("kb.lan", False),
    ("box.lan.evil.example", False),
    ("evil.example:8765", False),
    ("", False),
]


@pytest.mark.parametrize(("host", "allowed"), HOSTS)
def test_host_header_table(host: str, allowed: bool) -> None:
    check = HostCheck(transport_security("127.0.0.1", ["box.lan", "kb.lan:9000"], []))
    assert check.host_allowed(host) is allowed


@pytest.mark.parametrize(
    ("origin", "allowed"),
    [
        (None, True),  # not a browser
        ("http://localhost:3000", True),
        ("http://[::1]:3000", True),
        ("https://app.example.com", True),
        ("http://localhost:3000@evil.example", False),
        ("http://localhost:3000.evil.example", False),
        ("https://app.example.com:8443", False),
        ("https://app.example.com.evil.example", False),
        ("http://localhost", False),
        ("null", False),
    ],
)
def test_origin_header_table(origin: str | None, allowed: bool) -> None:
    check = HostCheck(transport_security("127.0.0.1", [], ["https://app.example.com"]))
    assert check.origin_allowed(origin) is allowed


async def test_a_host_with_user_info_is_refused_on_every_route(registry: Registry) -> None:
    async with serving(registry) as (_, app), http(app) as h:
        headers = {**MCP_HEADERS, "Host": "127.0.0.1:1@evil.example"}
        assert (await h.post("/mcp", json=INITIALIZE, headers=headers)).status_code == 421
        assert (await h.get("/healthz", headers=headers)).status_code == 421


async def test_oversized_bodies_get_413(registry: Registry) -> None:
    limit = 64 * 1024
    big = json.dumps({**INITIALIZE, "params": {**INITIALIZE["params"], "pad": "x" * limit}}).encode()

    async def chunks() -> AsyncIterator[bytes]:
        for i in range(0, len(big), 8192):
            yield big[i : i + 8192]

    async with serving(registry, max_body_bytes=limit) as (_, app), http(app) as h:
        sized = await h.post("/mcp", content=big, headers=MCP_HEADERS)
        assert sized.status_code == 413
        chunked = await h.post("/mcp", content=chunks(), headers=MCP_HEADERS)
        assert chunked.status_code == 413
        assert (await h.post("/mcp", json=INITIALIZE, headers=MCP_HEADERS)).status_code == 200


# ---------------------------------------------------------------- the session cap


def in_session(session_id: str) -> dict[str, str]:
    return {**MCP_HEADERS, "mcp-session-id": session_id, "mcp-protocol-version": "2025-11-25"}


async def open_session(h: httpx2.AsyncClient) -> str:
    """A handshake (initialize, then the initialized notification) and nothing else; the session id."""
    response = await h.post("/mcp", json=INITIALIZE, headers=MCP_HEADERS)
    assert response.status_code == 200, response.text
    session_id = response.headers["mcp-session-id"]
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert (await h.post("/mcp", json=initialized, headers=in_session(session_id))).status_code == 202
    return session_id


async def ping(h: httpx2.AsyncClient, session_id: str) -> int:
    request = {"jsonrpc": "2.0", "id": 7, "method": "ping"}
    return (await h.post("/mcp", json=request, headers=in_session(session_id))).status_code


async def test_idle_sessions_make_room_for_new_ones(registry: Registry) -> None:
    async with serving(registry, max_sessions=3, session_idle=123.0) as (server, app), http(app) as h:
        assert server.session_manager.session_idle_timeout == 123.0
        a, b, c = [await open_session(h) for _ in range(3)]
        assert await ping(h, b) == 200  # b is used; a and c only shook hands
        d = await open_session(h)  # the cap is full: the oldest bare handshake, a, makes way
        assert await ping(h, a) == 404
        e = await open_session(h)  # then c, although b was used before c was opened
        assert await ping(h, c) == 404
        assert [await ping(h, s) for s in (b, d, e)] == [200, 200, 200]
        assert await ping(h, b) == 200  # of sessions all used, the one idle longest makes way: d
        await open_session(h)
        assert [await ping(h, s) for s in (b, d, e)] == [200, 404, 200]


async def test_a_session_in_use_is_never_ended_for_a_new_one(
    registry: Registry, blocked_searches: tuple[list[str], threading.Event]
) -> None:
    started, release = blocked_searches
    call = {"jsonrpc": "2.0", "id": 3, "method": "tools/call"}
    call["params"] = {"name": "knowledge_search", "arguments": {"query": "harpsichord"}}
    async with serving(registry, max_sessions=2) as (_, app), http(app) as h:
        busy = await open_session(h)  # the oldest, and never answered yet: first in line, but for its call
        idle = await open_session(h)
        assert await ping(h, idle) == 200
        answers: list[httpx2.Response] = []

        async def search(session_id: str) -> None:
            answers.append(await h.post("/mcp", json=call, headers=in_session(session_id)))

        async def wait_for_searches(n: int) -> None:
            with anyio.fail_after(30):
                while len(started) < n:
                    await anyio.sleep(0.01)

        async with anyio.create_task_group() as tg:
            tg.start_soon(search, busy)
            await wait_for_searches(1)
            newer = await open_session(h)  # ends idle, not busy
            assert await ping(h, idle) == 404
            tg.start_soon(search, newer)
            await wait_for_searches(2)
            refused = await h.post("/mcp", json=INITIALIZE, headers=MCP_HEADERS)  # every session is busy
            assert refused.status_code == 503
            assert refused.json()["error"]["message"] == "Too many open sessions"
            release.set()
        assert [r.status_code for r in answers] == [200, 200]
        assert not any(r.json()["result"]["isError"] for r in answers)
        await open_session(h)  # both idle again: room is made


# ---------------------------------------------------------------- time limit and worker threads


@pytest.fixture
def blocked_searches(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[list[str], threading.Event]]:
    """Searches record their query, then wait until the event is set (at teardown at the latest)."""
    started: list[str] = []
    release = threading.Event()
    real = mcpower.search.search

    def search(registry: Registry, query: str, **kwargs: Any) -> Any:
        started.append(query)
        release.wait(30)
        return real(registry, query, **kwargs)

    monkeypatch.setattr(mcpower.search, "search", search)
    yield started, release
    release.set()


async def test_a_call_over_the_time_limit_gets_timeout(
    registry: Registry, blocked_searches: tuple[list[str], threading.Event]
) -> None:
    started, release = blocked_searches
    async with serving(registry, call_timeout=0.2) as (_, app), mcp_client(app) as c:
        result = await c.call_tool("knowledge_search", {"query": "harpsichord"})
        assert result.is_error
        assert result.structured_content["error"]["code"] == "TIMEOUT"
        assert "MCPOWER_HTTP_CALL_TIMEOUT" in result.structured_content["error"]["message"]
        release.set()
        listed = await c.call_tool("knowledge_list_datasets", {})
        assert not listed.is_error
        assert started == ["harpsichord"]


async def test_cancelled_calls_waiting_for_a_thread_never_run() -> None:
    """At most ``threads`` run at once; a call cancelled before it got a thread is dropped."""
    workers = Workers(2)
    started: list[int] = []
    two_running, gate = threading.Event(), threading.Event()

    def work(i: int) -> int:
        started.append(i)
        if len(started) == 2:
            two_running.set()
        gate.wait(30)
        return i

    try:
        async with anyio.create_task_group() as tg:
            for i in range(5):
                tg.start_soon(workers.run, lambda i=i: work(i))
            assert await anyio.to_thread.run_sync(two_running.wait, 30)
            tg.cancel_scope.cancel()  # as clients that went away: 2 running, 3 waiting
        gate.set()
        assert await workers.run(lambda: "after") == "after"  # the queue has drained
        assert sorted(started) == [0, 1]
    finally:
        gate.set()
        workers.close()


# ---------------------------------------------------------------- the CLI


def invoke(*args: str, env: dict[str, str] | None = None) -> Any:
    """`mcpower serve ARGS`; the root logger's handlers are put back after (a refused start may have
    pointed them at CliRunner's stderr, closed once it returns)."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        return CliRunner().invoke(cli, ["serve", *args], env=env)
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


def test_stdio_and_http_are_exclusive() -> None:
    result = invoke("--stdio", "--http")
    assert result.exit_code == 2
    assert "--stdio and --http are mutually exclusive" in result.stderr


def test_http_flags_need_http() -> None:
    result = invoke("--port", "0")
    assert result.exit_code == 2
    assert "--port applies to --http only" in result.stderr


def test_public_address_without_token_is_refused(tmp_path: Path) -> None:
    result = invoke("--http", "--host", "0.0.0.0", "--datasets-dir", str(tmp_path))
    assert result.exit_code == 1
    assert "MCPOWER_TOKEN" in result.stderr and "--token-file" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("content", "message"),
    [(None, "cannot read the token file"), ("short\n", "use at least 16"), ("has space " * 3, "visible ASCII")],
)
def test_bad_token_files_are_refused(tmp_path: Path, content: str | None, message: str) -> None:
    path = tmp_path / "token"
    if content is not None:
        path.write_text(content)
    result = invoke("--http", "--token-file", str(path), "--datasets-dir", str(tmp_path))
    assert result.exit_code == 1
    assert message in result.stderr


def test_the_token_hint_works_where_only_python3_is(tmp_path: Path) -> None:
    result = invoke("--http", "--token-file", str(tmp_path / "missing"), "--datasets-dir", str(tmp_path))
    assert 'python3 -c "import secrets; print(secrets.token_urlsafe(32))"' in result.stderr
    assert " python -c" not in result.stderr


@pytest.mark.parametrize(("mode", "warned"), [(0o600, False), (0o640, True), (0o644, True)])
def test_a_token_file_others_can_read_is_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, mode: int, warned: bool
) -> None:
    from mcpower.server.auth.access import load_token

    path = tmp_path / "token"
    path.write_text("t" * 32 + "\n")
    path.chmod(mode)
    with caplog.at_level(logging.WARNING, logger="mcpower"):
        assert load_token(None, path) == "t" * 32  # still served: a warning, not a refusal
    said = [r.getMessage() for r in caplog.records if "token file" in r.getMessage()]
    assert bool(said) is warned
    if warned:
        assert f"mode {mode:04o}" in said[0] and f"chmod 600 {path}" in said[0]


def test_bad_origin_and_taken_port_are_refused(tmp_path: Path) -> None:
    result = invoke("--http", "--allow-origin", "evil.example/path", "--datasets-dir", str(tmp_path))
    assert result.exit_code == 1 and "is not an origin" in result.stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        result = invoke("--http", "--port", port, "--datasets-dir", str(tmp_path))
    assert result.exit_code == 1
    assert f"cannot listen on 127.0.0.1 port {port}" in result.stderr
    proxies = {"MCPOWER_HTTP_TRUSTED_PROXIES": "10.0.0.0/8, proxy.lan"}
    result = invoke("--http", "--datasets-dir", str(tmp_path), env=proxies)
    assert result.exit_code == 1 and "'proxy.lan' is not an address or a network" in result.stderr


@pytest.mark.parametrize("client", ["claude-code", "vscode", "cursor"])
@pytest.mark.parametrize("with_token", [False, True])
def test_print_config_http_forms(client: str, with_token: bool) -> None:
    env = {"MCPOWER_TOKEN": TOKEN} if with_token else None
    result = invoke("--http", "--port", "9123", "--print-config", client, env=env)
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert TOKEN not in out
    assert "http://127.0.0.1:9123/mcp" in out
    assert ("Authorization" in out) == with_token
    if client == "claude-code":
        assert out.startswith("claude mcp add --transport http mcpower http://127.0.0.1:9123/mcp")
        return
    config = json.loads(out)
    if client == "vscode":
        entry = config["servers"]["mcpower"]
        assert entry["type"] == "http"
        if with_token:
            assert entry["headers"]["Authorization"] == "Bearer ${input:mcpower-token}"
            assert config["inputs"][0]["password"] is True
    else:
        entry = config["mcpServers"]["mcpower"]
        assert entry["url"] == "http://127.0.0.1:9123/mcp"
        if with_token:
            assert entry["headers"]["Authorization"] == "Bearer ${env:MCPOWER_CLIENT_TOKEN}"


def test_print_config_http_public_host_always_has_the_token_header() -> None:
    result = invoke("--http", "--host", "0.0.0.0", "--allow-host", "box.lan", "--print-config", "cursor")
    entry = json.loads(result.stdout)["mcpServers"]["mcpower"]
    assert entry["url"] == "http://box.lan:8765/mcp"
    assert entry["headers"]["Authorization"] == "Bearer ${env:MCPOWER_CLIENT_TOKEN}"
    refused = invoke("--http", "--print-config", "claude-desktop")
    assert refused.exit_code == 2 and "stdio servers only" in refused.stderr  # a usage error
