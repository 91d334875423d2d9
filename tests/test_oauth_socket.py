"""`mcpower serve --http --oauth-issuer URL` as a real process: the Python and TypeScript SDK clients
calling with tokens minted by the test issuer (oauth_fixtures.py), and the CLI's refusals.

The server listens on port 0; the URL it then names (its resource, and so the audience tokens must
carry) is the one with the port it got.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from http_fixtures import HttpServer, write_http_launcher
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from oauth_fixtures import Issuer
from server_fixtures import CLIENTS_DIR, copy_datasets, npm_install, run_node, subprocess_env
from typer.testing import CliRunner

from mcpower.cli.app import app as cli


@pytest.fixture(scope="module")
def issuer() -> Iterator[Issuer]:
    made = Issuer()
    made.add_key("rsa", kid="rsa-1")
    yield made
    made.close()


@pytest.fixture(scope="module")
def server(template: Path, tmp_path_factory: pytest.TempPathFactory, issuer: Issuer) -> Iterator[HttpServer]:
    root = tmp_path_factory.mktemp("oauth-server")
    datasets = copy_datasets(template, root)
    srv = HttpServer(write_http_launcher(root), datasets, "--oauth-issuer", issuer.url, token=None)
    yield srv
    srv.stop()


DOWN = "http://127.0.0.1:9"  # port 9: nothing listens


def get(server: HttpServer, path: str, token: str | None = None) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {token}"} if token else {})
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


@pytest.mark.anyio
async def test_python_sdk_client_with_a_minted_token(server: HttpServer, issuer: Issuer) -> None:
    token = issuer.mint(aud=server.url, scope="mcpower:read:recipes")
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as h,
        Client(streamable_http_client(server.url, http_client=h), mode="legacy") as c,
    ):
        result = await c.call_tool("knowledge_search", {"query": "pumpkin soup", "dataset": "recipes"})
        assert result.structured_content["results"][0]["path"] == "soup/pumpkin.md"
        listed = await c.call_tool("knowledge_list_datasets", {})
        assert [d["id"] for d in listed.structured_content["datasets"]] == ["recipes"]
    status, _, _ = get(server, "/healthz", issuer.mint(aud="http://127.0.0.1:1/mcp"))
    assert status == 200
    assert server.wait_event("http.credential_ignored", reason="audience", caller="oauth:alice", path="/healthz")


def test_metadata_and_challenge_name_the_real_port(server: HttpServer, issuer: Issuer) -> None:
    status, _, body = get(server, "/.well-known/oauth-protected-resource/mcp")
    assert status == 200
    metadata = json.loads(body)
    assert metadata["resource"] == server.url  # http://127.0.0.1:<the port it got>/mcp
    assert metadata["authorization_servers"] == [issuer.url]
    assert metadata["scopes_supported"] == ["mcpower:read"] and metadata["bearer_methods_supported"] == ["header"]
    status, headers, _ = get(server, "/mcp")
    assert status == 401
    hint = f'resource_metadata="{server.base}/.well-known/oauth-protected-resource/mcp"'
    assert hint in headers["www-authenticate"]


def test_the_issuer_is_checked_at_start(server: HttpServer, template: Path, tmp_path: Path) -> None:
    """Up: an info line with its key count. Down (nothing listens): a warning naming the issuer and
    why, and the server serves anyway (tokens are refused until the issuer answers)."""
    ready = server.wait_event("oauth.issuer_ready")
    assert ready["keys"] == 1 and ready["level"] == "info"
    down = HttpServer(
        write_http_launcher(tmp_path), copy_datasets(template, tmp_path), "--oauth-issuer", DOWN, token=None
    )
    try:
        said = down.wait_event("oauth.issuer_unavailable")
        assert said["level"] == "warning" and said["issuer"] == DOWN
        assert DOWN in said["message"] and "cannot fetch" in said["reason"] and "--oauth-issuer" in said["message"]
        assert get(down, "/healthz")[0] == 200
        assert get(down, "/mcp", "not-a-token")[0] == 401
    finally:
        down.stop()


@pytest.mark.node
def test_typescript_sdk_client_with_a_minted_token(server: HttpServer, issuer: Issuer) -> None:
    npm_install(CLIENTS_DIR)
    token = issuer.mint(aud=server.url)
    summary = run_node("http.mjs", server.url, env=subprocess_env() | {"MCPOWER_CLIENT_TOKEN": token})
    assert summary["server"]["name"] == "mcpower"
    assert summary["status"] == "ok" and summary["results"][0]["path"] == "notes.txt"
    assert summary["errorCode"] == "DATASET_NOT_FOUND"
    assert summary["wrongToken"] == {"name": "StreamableHTTPError", "code": 401}


# ---------------------------------------------------------------- the CLI


def invoke(*args: str) -> object:
    import logging

    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        return CliRunner().invoke(cli, ["serve", *args])
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--jwks", "keys.json"], "--jwks need --oauth-issuer"),
        (["--oauth-issuer", "http://idp.example"], "must be an https:// URL"),
        (["--oauth-issuer", "https://idp.example/?tenant=x"], "must not carry a query"),
        (["--oauth-issuer", "https://idp.example", "--jwks", "missing.json"], "neither a URL nor a file"),
        (["--oauth-issuer", "https://idp.example", "--jwks", "http://idp.example/k"], "--jwks 'http://idp.example/k'"),
        (["--oauth-issuer", "https://idp.example", "--host", "0.0.0.0"], "give --public-url"),
        (["--oauth-issuer", "https://idp.example", "--public-url", "kb.example.com"], "--public-url 'kb.example.com'"),
    ],
)
def test_bad_oauth_settings_are_refused(tmp_path: Path, args: list[str], message: str) -> None:
    result = invoke("--http", *args, "--datasets-dir", str(tmp_path))
    assert result.exit_code == 1, result.output  # type: ignore[attr-defined]
    assert message in result.stderr and "Traceback" not in result.stderr  # type: ignore[attr-defined]


def test_oauth_flags_need_http() -> None:
    result = invoke("--oauth-issuer", "https://idp.example")
    assert result.exit_code == 2 and "--oauth-issuer applies to --http only" in result.stderr  # type: ignore[attr-defined]
