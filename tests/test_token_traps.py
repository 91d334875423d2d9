"""Team set-up traps (issue 28, items 4 and 5), with the real CLI and a real server.

- A client's token lives in MCPOWER_CLIENT_TOKEN, never in MCPOWER_TOKEN (the server's token for
  every dataset): a caller's secret exported as MCPOWER_TOKEN in the shell that then starts
  `serve --http` is refused, not turned into an all-datasets token.
- `token add typo --datasets dcos` warns that the pattern matches no dataset, naming the datasets
  there are; a caller whose token grants no dataset is told so (not "create one with `mcpower
  ingest`") by knowledge_list_datasets, a search, the error of a dataset it names, and the web page.
"""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from asgi_fixtures import INITIALIZE, MCP_HEADERS, app_serving, asgi_client
from conftest import FakeEmbedder, join_warm_up, write_files
from http_fixtures import HttpServer, write_http_launcher
from server_fixtures import REPO_ROOT, subprocess_env
from typer.testing import CliRunner

from mcpower.cli.app import app
from mcpower.cli.serve_http import http_options
from mcpower.config import Settings
from mcpower.errors import McpowerError
from mcpower.ingestion import IngestOptions, ingest
from mcpower.registry import Registry
from mcpower.server.http import HttpOptions

GRANTS_NONE = "this token grants no dataset on this server (it names 'dcos')"


def token_add(tokens_file: Path, datasets: Path, name: str, *patterns: str) -> tuple[str, str]:
    """`mcpower token add NAME --datasets P...`: the secret (stdout) and what it said (stderr)."""
    args = ["token", "add", name, "--tokens-file", str(tokens_file), "--datasets-dir", str(datasets)]
    result = CliRunner().invoke(app, [*args, *[w for p in patterns for w in ("--datasets", p)]])
    assert result.exit_code == 0, result.output
    return result.stdout.strip(), result.stderr


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("traps")
    for name in ("docs", "eng-api"):
        source = write_files(root / "src" / name, {"guide.md": f"# {name}\n\nThe quokka guide of {name}.\n"})
        ingest(source, root / "datasets", IngestOptions(dataset_id=name), embedder=FakeEmbedder())
    return root


def test_token_add_warns_of_a_pattern_that_matches_no_dataset(folder: Path, tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.json"
    datasets = folder / "datasets"

    _, said = token_add(tokens, datasets, "typo", "dcos", "eng-*")
    _, fine = token_add(tokens, datasets, "fine", "docs", "eng-?pi")
    _, everything = token_add(tokens, datasets, "admin", "*")

    (warning,) = [line for line in said.splitlines() if line.startswith("warning:")]
    assert warning.startswith(f"warning: --datasets 'dcos' matches no dataset under {datasets.resolve()}")
    assert "(there are: docs, eng-api)" in warning and "typo" in warning
    assert "warning" not in fine + everything
    assert "MCPOWER_CLIENT_TOKEN" in said  # where the printed snippets read the secret from
    listed = CliRunner().invoke(app, ["token", "list", "--tokens-file", str(tokens), "--json"])
    assert [t["name"] for t in json.loads(listed.stdout)["tokens"]] == ["typo", "fine", "admin"]  # added all the same


class Session:
    """A raw MCP session over HTTP with one bearer token."""

    def __init__(self, server: HttpServer, secret: str) -> None:
        self.server, self.auth = server, {"Authorization": f"Bearer {secret}"}
        status, headers, _ = self.request("POST", "/mcp", INITIALIZE, MCP_HEADERS)
        assert status == 200
        self.headers = {
            **MCP_HEADERS,
            "mcp-session-id": headers["mcp-session-id"],
            "mcp-protocol-version": "2025-11-25",
        }
        self.request("POST", "/mcp", {"jsonrpc": "2.0", "method": "notifications/initialized"}, self.headers)

    def request(
        self, method: str, path: str, body: Any = None, headers: Any = None
    ) -> tuple[int, dict[str, str], bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=60)
        try:
            data = json.dumps(body).encode() if body is not None else None
            conn.request(method, path, body=data, headers={**self.auth, **(headers or {})})
            response = conn.getresponse()
            return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
        finally:
            conn.close()

    def tool(self, name: str, **arguments: Any) -> dict[str, Any]:
        call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": name, "arguments": arguments}}
        status, _, body = self.request("POST", "/mcp", call, self.headers)
        assert status == 200, body
        result: dict[str, Any] = json.loads(body)["result"]
        return result


@pytest.fixture(scope="module")
def typo_server(folder: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[HttpServer, str]]:
    root = tmp_path_factory.mktemp("typo-server")
    tokens = root / "tokens.json"
    secret, _ = token_add(tokens, folder / "datasets", "typo", "dcos")
    server = HttpServer(write_http_launcher(root), folder / "datasets", "--tokens-file", str(tokens), token=None)
    yield server, secret
    server.stop()


def assert_told_none(listed: Any, searched: Any, named: Any, page: str, twin: Any) -> None:
    """Every door says the token grants no dataset here: no other dataset, no advice to ingest."""
    assert listed["datasets"] == [] and listed["note"].startswith(GRANTS_NONE)
    assert searched["results"] == [] and any(n.startswith(GRANTS_NONE) for n in searched["meta"]["notes"])
    error = named["structuredContent"]["error"]
    assert named["isError"] and error["code"] == "DATASET_NOT_FOUND"
    assert error["message"] == f"unknown dataset 'docs'; available datasets: none ({listed['note']})"
    assert "This token grants no dataset on this server (it names &#39;dcos&#39;)" in page
    assert twin["datasets"] == [] and twin["none_here"] == listed["note"]
    for answer in (json.dumps(listed), json.dumps(searched), json.dumps(named), page, json.dumps(twin)):
        assert "mcpower ingest" not in answer and "eng-api" not in answer


@pytest.mark.anyio
async def test_a_caller_whose_token_grants_no_dataset_is_told_so_by_every_door(folder: Path, tmp_path: Path) -> None:
    """The HTTP app in process (the real server: the slow test below)."""
    tokens = tmp_path / "tokens.json"
    secret, _ = token_add(tokens, folder / "datasets", "typo", "dcos")
    registry = Registry(folder / "datasets", embedder_factory=lambda model: FakeEmbedder())
    try:
        async with (
            app_serving(registry, HttpOptions(token=None, tokens_file=tokens)) as (_, app),
            asgi_client(app, secret, **MCP_HEADERS) as h,
        ):
            opened = await h.post("/mcp", json=INITIALIZE)
            session = {"mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
            await h.post("/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session)

            async def tool(name: str, **arguments: Any) -> dict[str, Any]:
                call = {
                    "jsonrpc": "2.0",
                    "id": 7,
                    "method": "tools/call",
                    "params": {"name": name, "arguments": arguments},
                }
                response = await h.post("/mcp", json=call, headers=session)
                assert response.status_code == 200, response.text
                result: dict[str, Any] = response.json()["result"]
                return result

            listed = (await tool("knowledge_list_datasets"))["structuredContent"]
            searched = (await tool("knowledge_search", query="quokka guide"))["structuredContent"]
            named = await tool("knowledge_search", query="quokka guide", dataset="docs")
            page = (await h.get("/", headers={"Accept": "text/html"})).text
            twin = (await h.get("/?format=json")).json()
    finally:
        join_warm_up()
        registry.close()

    assert_told_none(listed, searched, named, page, twin)


@pytest.mark.slow  # the same through a real `serve --http`
def test_a_real_server_tells_a_caller_whose_token_grants_no_dataset_so(typo_server: tuple[HttpServer, str]) -> None:
    server, secret = typo_server
    session = Session(server, secret)

    listed = session.tool("knowledge_list_datasets")["structuredContent"]
    searched = session.tool("knowledge_search", query="quokka guide")["structuredContent"]
    named = session.tool("knowledge_search", query="quokka guide", dataset="docs")
    page = session.request("GET", "/", headers={"Accept": "text/html"})[2].decode()
    twin = json.loads(session.request("GET", "/?format=json")[2])

    assert_told_none(listed, searched, named, page, twin)


def test_http_settings_with_an_mcpower_token_that_is_a_named_tokens_secret_are_refused(
    folder: Path, tmp_path: Path
) -> None:
    """What `serve --http` checks before it listens (the real command: the slow test below)."""
    tokens = tmp_path / "tokens.json"
    secret, _ = token_add(tokens, folder / "datasets", "alice", "docs")
    other, _ = token_add(tokens, folder / "datasets", "bob", "docs")
    token_file = tmp_path / "token"
    token_file.write_text(secret + "\n")
    token_file.chmod(0o600)
    base = {"datasets_dir": folder / "datasets", "tokens_file": tokens}

    with pytest.raises(McpowerError) as by_variable:
        http_options(Settings(**base, token=secret))
    with pytest.raises(McpowerError) as by_file:
        http_options(Settings(**base, token_file=token_file))
    http_options(Settings(**base, token="the-servers-own-secret-not-a-callers-0123"))  # accepted

    said = by_variable.value.message
    assert said.startswith(f"MCPOWER_TOKEN holds the secret of the named token 'alice' in {tokens}")
    assert "would read every dataset, not only docs" in said and "MCPOWER_CLIENT_TOKEN" in said
    assert by_file.value.message.startswith(f"the token file {token_file} holds the secret of the named token 'alice'")
    assert secret not in said + by_file.value.message and other not in said


@pytest.mark.slow  # two interpreters; the check itself runs by default just above
def test_serve_refuses_an_mcpower_token_that_is_a_named_tokens_secret(folder: Path, tmp_path: Path) -> None:
    """The trap: a client's secret exported as MCPOWER_TOKEN (as the old snippets had it), then
    `serve --http` in the same shell: alice's docs-only secret would have read every dataset."""
    tokens = tmp_path / "tokens.json"
    secret, _ = token_add(tokens, folder / "datasets", "alice", "docs")
    token_file = tmp_path / "token"
    token_file.write_text(secret + "\n")
    token_file.chmod(0o600)
    # The real command (the refusal comes before any model would load), both at once.
    serve = [sys.executable, "-m", "mcpower", "serve", "--http", "--port", "0"]
    serve += ["--datasets-dir", str(folder / "datasets"), "--tokens-file", str(tokens)]
    started = [
        subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO_ROOT)
        for args, env in [
            (serve, {**subprocess_env(), "MCPOWER_TOKEN": secret}),
            ([*serve, "--token-file", str(token_file)], subprocess_env()),
        ]
    ]
    try:
        by_variable, by_file = [
            subprocess.CompletedProcess(p.args, p.wait(120), *p.communicate(timeout=120)) for p in started
        ]
    finally:  # a server that started (the old code did) is not left running
        for p in started:
            if p.poll() is None:
                p.kill()
                p.communicate()

    assert by_variable.returncode == by_file.returncode == 1
    said = by_variable.stderr.strip().splitlines()[-1]
    assert said.startswith(f"Error: MCPOWER_TOKEN holds the secret of the named token 'alice' in {tokens}")
    assert "would read every dataset, not only docs" in said and "MCPOWER_CLIENT_TOKEN" in said
    assert f"Error: the token file {token_file} holds the secret of the named token 'alice'" in by_file.stderr
    assert secret not in by_variable.stderr + by_file.stderr
    assert "server.listening" not in by_variable.stderr + by_file.stderr
