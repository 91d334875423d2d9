"""`mcpower serve --http` as a real process on an ephemeral port: Python, TypeScript and Inspector clients.

One server (fake embedder, token required) serves the module's tests: a whole session with the
Python SDK's Streamable HTTP client, raw requests for the refusals (401, 403, 421, 413 at the
4 MB default), 32 concurrent clients, a client that disconnects mid-call. SIGTERM during a call
gets a server of its own. Calls are held in flight with the launcher's blocking query
(http_fixtures.py), so nothing here depends on timing.
"""

from __future__ import annotations

import http.client
import json
import signal
import subprocess
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from asgi_fixtures import MCP_HEADERS
from http_fixtures import TOKEN, HttpServer, write_http_launcher
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from server_fixtures import CLIENTS_DIR, HANDBOOK, RECIPES, copy_datasets, npm_install, run_node, subprocess_env

TOOLS = {"knowledge_search", "knowledge_list_datasets", "knowledge_get_source", "knowledge_get_metadata"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}},
}


@pytest.fixture(scope="module")
def server(template: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpServer]:
    root = tmp_path_factory.mktemp("http-server")
    datasets = copy_datasets(template, root)
    # 32 clients of one token at full speed pass the default rate limit: off here (test_ratelimit.py tests it).
    limits_off = ("--rate-limit", "0", "--max-searches", "0")
    srv = HttpServer(write_http_launcher(root), datasets, "--allow-origin", "https://app.example.com", *limits_off)
    yield srv
    srv.stop()


@asynccontextmanager
async def session(url: str, token: str = TOKEN) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=60)) as h,
        Client(streamable_http_client(url, http_client=h), mode="legacy") as c,
    ):
        yield c


def post(server: HttpServer, body: bytes, **headers: str) -> tuple[int, dict[str, str], bytes]:
    """One raw POST to /mcp with the token unless headers say otherwise; status, headers, body."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        conn.request("POST", "/mcp", body=body, headers={**MCP_HEADERS, "Authorization": f"Bearer {TOKEN}", **headers})
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


def assert_healthy(server: HttpServer) -> None:
    assert server.proc.poll() is None, server.stderr()
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    conn.request("GET", "/healthz")
    assert conn.getresponse().status == 200
    conn.close()
    assert not [r for r in server.records if "exception" in r or r.get("event") == "non-json"], server.stderr()


# ---------------------------------------------------------------- Python SDK client


@pytest.mark.anyio
async def test_python_client_session(server: HttpServer) -> None:
    async with session(server.url) as c:
        assert {t.name for t in (await c.list_tools()).tools} == TOOLS
        result = await c.call_tool("knowledge_search", {"query": "harpsichord feature", "top_k": 3})
        data = result.structured_content
        assert data["status"] == "ok" and data["results"][0]["path"] == "notes.txt"
        resources = await c.list_resources()
        assert len(resources.resources) == len(HANDBOOK) + len(RECIPES)
        listed = await c.call_tool("knowledge_list_datasets", {})
        assert [d["id"] for d in listed.structured_content["datasets"]] == ["handbook", "recipes"]
    # Nothing about where the datasets live reaches a client.
    assert str(server.release_dir.parent) not in json.dumps(listed.structured_content)
    assert_healthy(server)


def test_refusals_over_the_wire(server: HttpServer) -> None:
    body = json.dumps(INITIALIZE).encode()
    status, headers, _ = post(server, body, Authorization="")
    assert status == 401 and headers["www-authenticate"].startswith("Bearer error=")
    assert post(server, body, Authorization="Bearer nope-nope-nope-nope")[0] == 401
    assert post(server, body, Host=f"evil.example:{server.port}")[0] == 421
    assert post(server, body, Origin="http://evil.example")[0] == 403
    assert post(server, body, Origin="https://app.example.com")[0] == 200  # --allow-origin
    big = json.dumps({**INITIALIZE, "params": {**INITIALIZE["params"], "pad": "x" * (5 << 20)}}).encode()
    assert post(server, big)[0] == 413  # the 4 MB default
    assert_healthy(server)


@pytest.mark.anyio
async def test_32_concurrent_clients(server: HttpServer) -> None:
    queries = ["harpsichord feature", "pumpkin soup", "marmalade session", "zephyrine package"]
    async with session(server.url) as c:
        expected = {
            q: [
                r["result_id"]
                for r in (await c.call_tool("knowledge_search", {"query": q})).structured_content["results"]
            ]
            for q in queries
        }
    answers: list[tuple[str, list[str]]] = []

    async def one_client(i: int) -> None:
        async with session(server.url) as c:
            for k in range(3):
                q = queries[(i + k) % len(queries)]
                result = await c.call_tool("knowledge_search", {"query": q})
                assert not result.is_error, result.content
                answers.append((q, [r["result_id"] for r in result.structured_content["results"]]))

    async with anyio.create_task_group() as tg:
        for i in range(32):
            tg.start_soon(one_client, i)
    assert len(answers) == 96
    assert all(ids == expected[q] for q, ids in answers)
    assert_healthy(server)


def test_client_disconnecting_mid_call(server: HttpServer) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    auth = {**MCP_HEADERS, "Authorization": f"Bearer {TOKEN}"}
    conn.request("POST", "/mcp", body=json.dumps(INITIALIZE), headers=auth)
    response = conn.getresponse()
    response.read()
    sid = response.getheader("mcp-session-id")
    assert sid
    auth |= {"mcp-session-id": sid, "mcp-protocol-version": "2025-11-25"}
    call = {"name": "knowledge_search", "arguments": {"query": "blockme-departedclient"}}
    conn.request(
        "POST",
        "/mcp",
        body=json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call}),
        headers=auth,
    )
    server.wait_event("test.search_blocked", key="departedclient")
    conn.sock.shutdown(2)  # type: ignore[union-attr]
    conn.close()  # the client is gone while its search runs

    async def meanwhile() -> None:  # another client is served while the departed one's search still runs
        async with session(server.url) as c:
            result = await c.call_tool("knowledge_search", {"query": "pumpkin soup"})
            assert result.structured_content["results"][0]["path"] == "soup/pumpkin.md"

    anyio.run(meanwhile)
    server.release("departedclient")
    done = server.wait_event("audit", query_chars=len("blockme-departedclient"))
    assert done["status"] == "ok"  # the search finished in its thread; nobody was there to answer
    assert_healthy(server)


# ---------------------------------------------------------------- graceful shutdown


def test_sigterm_finishes_the_call_in_flight_and_exits_0(template: Path, tmp_path: Path) -> None:
    datasets = copy_datasets(template, tmp_path / "root")
    srv = HttpServer(write_http_launcher(tmp_path), datasets)
    outcome: dict[str, Any] = {}
    try:

        async def call() -> None:
            async with session(srv.url) as c:
                await c.list_tools()  # so call_tool needs no tools/list of its own during the drain
                outcome["result"] = await c.call_tool("knowledge_search", {"query": "blockme-term harpsichord"})

        async def main() -> None:
            async with anyio.create_task_group() as tg:
                tg.start_soon(call)
                await anyio.to_thread.run_sync(lambda: srv.wait_event("test.search_blocked", key="term"))
                srv.proc.send_signal(signal.SIGTERM)
                await anyio.to_thread.run_sync(lambda: srv.wait_event("server.shutdown", signal="SIGTERM"))
                srv.release("term")

        anyio.run(main)
        assert srv.wait_exit(30) == 0
    finally:
        srv.stop()
    result = outcome["result"]
    assert not result.is_error and result.structured_content["status"] == "ok"
    assert srv.wait_event("server.stopped")


# ---------------------------------------------------------------- Node clients


@pytest.mark.node
def test_typescript_sdk_client(server: HttpServer) -> None:
    npm_install(CLIENTS_DIR)
    summary = run_node("http.mjs", server.url, env=subprocess_env() | {"MCPOWER_CLIENT_TOKEN": TOKEN})
    assert summary["server"]["name"] == "mcpower"
    assert summary["session"] and summary["protocolVersion"] == "2025-11-25"
    assert set(summary["tools"]) == TOOLS
    assert summary["status"] == "ok" and summary["results"][0]["path"] == "notes.txt"
    assert summary["textMatchesStructured"] is True
    assert summary["resources"] == len(HANDBOOK) + len(RECIPES)
    assert summary["errorCode"] == "DATASET_NOT_FOUND"
    assert summary["wrongToken"] == {"name": "StreamableHTTPError", "code": 401}


@pytest.mark.node
def test_inspector_cli(server: HttpServer, tmp_path: Path) -> None:
    folder = CLIENTS_DIR / "inspector"
    npm_install(folder)
    inspector = folder / "node_modules" / ".bin" / "mcp-inspector"
    args = [str(inspector), "--cli", server.url, "--transport", "http", "--method", "tools/call"]
    args += ["--tool-name", "knowledge_search", "--tool-arg", 'query="pumpkin soup"', "--tool-arg", "top_k=2"]

    def run(token: str) -> subprocess.CompletedProcess[str]:
        # The working directory's parent must hold no package.json (a bug in inspector 0.22's CLI).
        return subprocess.run(
            [*args, "--header", f"Authorization: Bearer {token}"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=90,
            env=subprocess_env(),
            check=False,
        )

    done = run(TOKEN)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["isError"] is False
    assert result["structuredContent"]["results"][0]["path"] == "soup/pumpkin.md"
    refused = run("wrong-token-0123456789")
    assert refused.returncode != 0
    assert "401" in refused.stdout + refused.stderr or "invalid_token" in refused.stdout + refused.stderr
