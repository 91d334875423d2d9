"""The authorization table, over real HTTP: named tokens (each limited to some datasets) against every
entry point that reaches a dataset, on `mcpower serve --http --tokens-file` in a subprocess.

Callers: the single MCPOWER_TOKEN and a named token for every dataset ("*"), a pattern ("eng-*"),
an exact id ("hr-policies"), a pattern no dataset matches ("sales-*"), an expired token and a
revoked one. Datasets: eng-docs, eng-api, hr-policies and a broken one, hr-broken. For each
(caller, dataset, entry point) a permitted dataset answers, and any other answers byte for byte as
an id that does not exist (after writing either id as ID). docs/robustness.md#authorization holds
the same table in words.
"""

from __future__ import annotations

import http.client
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from asgi_fixtures import MCP_HEADERS
from conftest import FakeEmbedder, write_files
from http_fixtures import TOKEN, HttpServer, write_http_launcher
from server_fixtures import REPO_ROOT, StdioServer, subprocess_env, write_launcher

from mcpower.ingestion import IngestOptions, ingest
from mcpower.server.auth.tokens import NamedToken, digest, new_secret, read_tokens, write_tokens

DATASETS = {
    "eng-docs": {"guide.md": "# Engineering guide\n\nDeploy the quokka service with the shared pipeline.\n"},
    "eng-api": {"api.md": "# API\n\nThe quokka endpoint returns shared widgets as JSON.\n"},
    "hr-policies": {"leave.md": "# Leave\n\nEvery quokka keeper gets shared holidays and parental leave.\n"},
}
BROKEN = "hr-broken"
ALL = [*sorted(DATASETS), BROKEN]
READY = sorted(DATASETS)
MISSING = "zz-nowhere"  # no such dataset: what a hidden one must look like
CALLERS: dict[str, set[str]] = {  # caller -> the datasets it may read
    "single": set(ALL),  # MCPOWER_TOKEN
    "everything": set(ALL),  # named, "*"
    "eng": {"eng-docs", "eng-api"},  # named, "eng-*"
    "hr": {"hr-policies"},  # named, "hr-policies": not hr-broken, which the pattern "hr-*" would be
    "sales": set(),  # named, "sales-*": matches nothing
}
PATTERNS = {"everything": ["*"], "eng": ["eng-*"], "hr": ["hr-policies"], "sales": ["sales-*"]}
REFUSED = ["expired", "revoked"]


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[HttpServer, dict[str, str], Path]]:
    root = tmp_path_factory.mktemp("authz")
    datasets = root / "datasets"
    for name, files in DATASETS.items():
        ingest(
            write_files(root / "src" / name, files), datasets, IngestOptions(dataset_id=name), embedder=FakeEmbedder()
        )
    (datasets / BROKEN).mkdir()
    (datasets / BROKEN / "manifest.json").write_text('{"id": "hr-broken", "name": ', encoding="utf-8")
    secrets = {"single": TOKEN}
    now = datetime.now(timezone.utc)
    tokens = []
    for name in [*PATTERNS, *REFUSED]:
        secrets[name] = new_secret()
        expires = now - timedelta(minutes=1) if name == "expired" else None
        tokens.append(NamedToken(name, digest(secrets[name]), ("*",), now - timedelta(days=1), expires))
        if name in PATTERNS:
            tokens[-1] = NamedToken(name, digest(secrets[name]), tuple(PATTERNS[name]), now)
    secrets["prom"] = new_secret()  # a scraper's (token add prom --metrics): /metrics, no dataset
    tokens.append(NamedToken("prom", digest(secrets["prom"]), (), now, metrics=True))
    tokens_file = root / "tokens.json"
    write_tokens(tokens_file, tokens)
    srv = HttpServer(write_http_launcher(root), datasets, "--tokens-file", str(tokens_file))
    try:
        mcpower("token", "revoke", "revoked", "--tokens-file", str(tokens_file))  # while it runs
        yield srv, secrets, tokens_file
    finally:
        srv.stop()


def mcpower(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mcpower", *args], capture_output=True, text=True, env=subprocess_env(), cwd=REPO_ROOT
    )


class Rpc:
    """A raw MCP session over HTTP with one bearer token: the exact bytes of every answer."""

    def __init__(self, server: HttpServer, secret: str) -> None:
        self.server = server
        self.headers = {**MCP_HEADERS, "Authorization": f"Bearer {secret}"}
        self.next_id = 1
        status, headers, _ = self.post(
            "initialize",
            {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
        )
        self.status = status
        if status == 200:
            self.headers["mcp-session-id"] = headers["mcp-session-id"]
            self.headers["mcp-protocol-version"] = "2025-11-25"
            self.post("notifications/initialized", None)

    def post(self, method: str, params: dict[str, Any] | None) -> tuple[int, dict[str, str], bytes]:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        if not method.startswith("notifications/"):
            message["id"] = self.next_id
            self.next_id += 1
        conn = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=60)
        try:
            conn.request("POST", "/mcp", body=json.dumps(message).encode(), headers=self.headers)
            response = conn.getresponse()
            return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
        finally:
            conn.close()

    def call(self, method: str, params: dict[str, Any]) -> bytes:
        """The answer's bytes, its JSON-RPC id written as 0 (each call has its own)."""
        status, _, body = self.post(method, params)
        assert status == 200, body
        answer = json.loads(body)
        answer["id"] = 0
        return json.dumps(answer, sort_keys=True).encode()

    def tool(self, name: str, **arguments: Any) -> tuple[bool, Any, bytes]:
        """(isError, structured content or error text, the answer's bytes)."""
        raw = self.call("tools/call", {"name": name, "arguments": arguments})
        result = json.loads(raw)["result"]
        return bool(result.get("isError")), result.get("structuredContent") or result["content"][0]["text"], raw


def get(server: HttpServer, path: str, secret: str | None) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {secret}"} if secret else {})
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


def healthz(server: HttpServer, secret: str | None) -> dict[str, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        conn.request("GET", "/healthz", headers={"Authorization": f"Bearer {secret}"} if secret else {})
        response = conn.getresponse()
        assert response.status == 200
        return dict(json.loads(response.read()))
    finally:
        conn.close()


def same_as_missing(hidden: bytes, missing: bytes, dataset: str) -> bool:
    return hidden.replace(dataset.encode(), b"ID") == missing.replace(MISSING.encode(), b"ID")


@pytest.fixture(scope="module")
def result_ids(setup: tuple[HttpServer, dict[str, str], Path]) -> dict[str, str]:
    """A result id of each ready dataset, found with the token that reads everything."""
    server, secrets, _ = setup
    rpc = Rpc(server, secrets["single"])
    ids = {}
    for dataset in READY:
        error, found, _ = rpc.tool("knowledge_search", query="quokka", dataset=dataset, mode="keyword")
        assert not error, found
        ids[dataset] = found["results"][0]["result_id"]
    return ids


@pytest.mark.parametrize("caller", sorted(CALLERS))
def test_list_datasets_search_all_resources_and_healthz_show_only_the_callers_datasets(
    setup: tuple[HttpServer, dict[str, str], Path], caller: str
) -> None:
    server, secrets, _ = setup
    rpc = Rpc(server, secrets[caller])
    assert rpc.status == 200
    permitted = CALLERS[caller]
    error, listing, _ = rpc.tool("knowledge_list_datasets")
    assert not error and {d["id"] for d in listing["datasets"]} == permitted
    error, found, _ = rpc.tool("knowledge_search", query="quokka shared", mode="keyword")
    assert not error, found
    assert set(found["meta"]["datasets"]) == permitted & set(READY)
    assert {r["dataset"] for r in found["results"]} == permitted & set(READY)
    resources = json.loads(rpc.call("resources/list", {}))["result"]["resources"]
    assert {r["uri"].split("/")[2] for r in resources} == permitted & set(READY)
    assert {d["id"] for d in healthz(server, secrets[caller])["datasets"]} == permitted
    # completion/complete offers only the caller's datasets, and paths only in them
    template = {"type": "ref/resource", "uri": "mcpower://{dataset}/{+path}"}

    def complete(name: str, value: str, **context: str) -> list[str]:
        params = {"ref": template, "argument": {"name": name, "value": value}, "context": {"arguments": context}}
        return list(json.loads(rpc.call("completion/complete", params))["result"]["completion"]["values"])

    assert complete("dataset", "") == sorted(permitted & set(READY))
    assert complete("dataset", "eng-") == sorted(permitted & {"eng-docs", "eng-api"})
    for dataset, files in DATASETS.items():
        assert complete("path", "", dataset=dataset) == (sorted(files) if dataset in permitted else [])


@pytest.mark.parametrize("dataset", ALL)
@pytest.mark.parametrize("caller", sorted(CALLERS))
def test_a_dataset_the_caller_may_not_read_answers_as_one_that_does_not_exist(
    setup: tuple[HttpServer, dict[str, str], Path], result_ids: dict[str, str], caller: str, dataset: str
) -> None:
    server, secrets, _ = setup
    rpc = Rpc(server, secrets[caller])
    permitted = dataset in CALLERS[caller]
    doors: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {  # door -> (method, params for it, for MISSING)
        "knowledge_search": (
            "tools/call",
            {"name": "knowledge_search", "arguments": {"query": "quokka", "dataset": dataset, "mode": "keyword"}},
            {"name": "knowledge_search", "arguments": {"query": "quokka", "dataset": MISSING, "mode": "keyword"}},
        ),
    }
    if dataset in result_ids:
        rid = result_ids[dataset]
        for tool in ("knowledge_get_source", "knowledge_get_metadata"):
            doors[tool] = (
                "tools/call",
                {"name": tool, "arguments": {"result_id": rid}},
                {"name": tool, "arguments": {"result_id": rid.replace(dataset, MISSING)}},
            )
        name = next(iter(DATASETS[dataset]))
        doors["resources/read"] = (
            "resources/read",
            {"uri": f"mcpower://{dataset}/{name}"},
            {"uri": f"mcpower://{MISSING}/{name}"},
        )
    for door, (method, params, missing_params) in doors.items():
        answer = rpc.call(method, params)
        missing = rpc.call(method, missing_params)
        result = json.loads(answer)
        if permitted and dataset != BROKEN:
            assert "error" not in result and not result["result"].get("isError"), (door, answer)
            assert dataset.encode() in answer
        elif permitted:  # the broken dataset, to a caller who may read it: its own error
            assert not same_as_missing(answer, missing, dataset), (door, answer)
        else:
            assert same_as_missing(answer, missing, dataset), (door, answer, missing)
            for other in set(ALL) - CALLERS[caller]:
                assert other.encode() not in answer.replace(dataset.encode(), b"ID"), (door, other)


@pytest.mark.parametrize("caller", REFUSED)
def test_expired_and_revoked_tokens_are_refused(setup: tuple[HttpServer, dict[str, str], Path], caller: str) -> None:
    server, secrets, tokens_file = setup
    rpc = Rpc(server, secrets[caller])
    assert rpc.status == 401
    # The operator's log says which token and why, from where, for what: never the secret (28.6).
    said = server.wait_event("http.refused", reason=caller, caller=caller)
    assert (said["status"], said["client"], said["path"]) == (401, "127.0.0.1", "/mcp")
    assert Rpc(server, secrets[caller] + "x").status == 401
    assert server.wait_event("http.refused", reason="unknown_token", caller=None)["client"] == "127.0.0.1"
    assert secrets[caller] not in server.stderr()
    for method, params in [
        ("tools/call", {"name": "knowledge_list_datasets", "arguments": {}}),
        ("tools/call", {"name": "knowledge_search", "arguments": {"query": "quokka"}}),
        ("resources/list", {}),
        ("resources/read", {"uri": "mcpower://eng-docs/guide.md"}),
    ]:
        assert rpc.post(method, params)[0] == 401
    assert healthz(server, secrets[caller]) == {"status": "ok"}  # no details without a good token
    kept = {t.name: t for t in read_tokens(tokens_file)}
    assert kept["expired"].expired() if caller == "expired" else caller not in kept  # revoked while it ran


# Who reads /metrics (series name every caller and dataset): the operator's single token and a
# named token made with --metrics; any other good token 403 (insufficient_scope, the scope to ask
# for named), no token or a refused one 401.
METRICS = {"single": 200, "prom": 200, "everything": 403, "eng": 403, "sales": 403, "expired": 401, "none": 401}


@pytest.mark.parametrize("caller", sorted(METRICS))
def test_metrics_only_to_a_metrics_scoped_credential(
    setup: tuple[HttpServer, dict[str, str], Path], caller: str
) -> None:
    server, secrets, _ = setup
    status, headers, body = get(server, "/metrics", secrets.get(caller))
    assert status == METRICS[caller], body
    if status == 200:
        assert b"mcpower_tool_calls_total" in body
    if status == 403:
        assert 'scope="mcpower:metrics"' in headers["www-authenticate"] and b"mcpower_" not in body
    if caller == "prom":  # the scraper's token reads no dataset
        assert Rpc(server, secrets["prom"]).status == 403
        assert healthz(server, secrets["prom"]) == {"status": "ok"}
        assert get(server, "/?format=json", secrets["prom"])[0] == 403


def test_only_hashes_are_on_disk(setup: tuple[HttpServer, dict[str, str], Path]) -> None:
    _, secrets, tokens_file = setup
    text = tokens_file.read_bytes()
    for name in PATTERNS:
        assert secrets[name].encode() not in text
        assert digest(secrets[name]).encode() in text
    assert tokens_file.stat().st_mode & 0o777 == 0o600


def test_revocation_and_additions_take_effect_without_a_restart(tmp_path: Path, template: Path) -> None:
    datasets = tmp_path / "datasets"
    shutil.copytree(template / "datasets", datasets)
    tokens_file = tmp_path / "tokens.json"
    added = mcpower("token", "add", "cook", "--datasets", "recipes", "--tokens-file", str(tokens_file))
    assert added.returncode == 0, added.stderr
    cook = added.stdout.strip()
    assert cook.encode() not in tokens_file.read_bytes()
    server = HttpServer(write_http_launcher(tmp_path), datasets, "--tokens-file", str(tokens_file), token=None)
    try:
        rpc = Rpc(server, cook)
        assert rpc.status == 200
        assert [d["id"] for d in rpc.tool("knowledge_list_datasets")[1]["datasets"]] == ["recipes"]
        assert mcpower("token", "revoke", "cook", "--tokens-file", str(tokens_file)).returncode == 0
        # The next request is refused, in the session it opened before, and in a new one.
        status, _, _ = rpc.post("tools/call", {"name": "knowledge_list_datasets", "arguments": {}})
        assert status == 401
        assert Rpc(server, cook).status == 401
        # A bad edit fails closed: no named token passes until the file is fixed.
        again = mcpower("token", "add", "chef", "--datasets", "*", "--tokens-file", str(tokens_file)).stdout.strip()
        assert Rpc(server, again).status == 200
        good = tokens_file.read_bytes()
        tokens_file.write_bytes(good[:-20])
        assert Rpc(server, again).status == 401
        server.wait_event("http.tokens_file_invalid")
        tokens_file.write_bytes(good)
        assert Rpc(server, again).status == 200
        tokens_file.chmod(0o666)  # others could give themselves a token now
        assert Rpc(server, again).status == 401
    finally:
        server.stop()


def test_a_malformed_or_shared_tokens_file_stops_the_server_at_start(tmp_path: Path) -> None:
    tokens_file = tmp_path / "tokens.json"
    tokens_file.write_text('{"version": 1, "tokens": [{"name": "x"}]}', encoding="utf-8")
    tokens_file.chmod(0o600)
    args = ["serve", "--http", "--port", "0", "--datasets-dir", str(tmp_path), "--tokens-file", str(tokens_file)]
    bad = mcpower(*args)
    assert bad.returncode == 1 and "tokens file" in bad.stderr and "sha256" in bad.stderr, bad.stderr
    assert "Traceback" not in bad.stderr
    write_tokens(tokens_file, [])
    tokens_file.chmod(0o620)
    shared = mcpower(*args)
    assert shared.returncode == 1 and "chmod 600" in shared.stderr, shared.stderr
    missing = mcpower(*args[:-1], str(tmp_path / "nope.json"))
    assert missing.returncode == 1 and "mcpower token add" in missing.stderr, missing.stderr


def test_the_default_tokens_file_is_used_and_stdio_is_unaffected(tmp_path: Path, template: Path) -> None:
    """`mcpower token add` writes DATASETS_DIR/tokens.json; `serve --http` then asks for a token
    even on loopback without MCPOWER_TOKEN; `serve --stdio` (no caller: the user) reads everything."""
    datasets = tmp_path / "datasets"
    shutil.copytree(template / "datasets", datasets)
    cook = mcpower("token", "add", "cook", "-d", "recipes", "--datasets-dir", str(datasets)).stdout.strip()
    server = HttpServer(write_http_launcher(tmp_path), datasets, token=None)
    try:
        assert Rpc(server, "no-such-token-0123456789").status == 401
        assert [d["id"] for d in Rpc(server, cook).tool("knowledge_list_datasets")[1]["datasets"]] == ["recipes"]
    finally:
        server.stop()
    stdio = StdioServer(
        [sys.executable, str(write_launcher(tmp_path)), "serve", "--stdio", "--datasets-dir", str(datasets)]
    )
    try:
        stdio.initialize()
        listed = stdio.call_tool("knowledge_list_datasets", {})["structuredContent"]["datasets"]
        assert [d["id"] for d in listed] == ["handbook", "recipes"]
        found = stdio.call_tool("knowledge_search", {"query": "widget", "dataset": "handbook"})
        assert not found.get("isError"), found
    finally:
        stdio.stop()


def test_the_datasets_page_shows_the_operator_the_real_source_folder_and_others_a_redacted_one(
    setup: tuple[HttpServer, dict[str, str], Path],
) -> None:
    server, secrets, _ = setup
    real = str(server.release_dir.parent / "src" / "eng-docs")

    def source(caller: str) -> str:
        status, _, body = get(server, "/?format=json", secrets[caller])
        assert status == 200, body
        return next(d["source"] for d in json.loads(body)["datasets"] if d["id"] == "eng-docs")

    assert source("single") == real  # the server's own all-datasets token: the operator
    for caller in ("everything", "eng"):  # a named token, even one granted "*", is not the operator
        shown = source(caller)
        assert shown and real not in shown and str(server.release_dir.parent) not in shown, shown


def test_serve_http_says_where_the_pages_are_and_that_a_token_is_required(
    setup: tuple[HttpServer, dict[str, str], Path],
) -> None:
    server, _, tokens_file = setup
    ready = server.wait_event("server.ready")
    base = f"http://127.0.0.1:{server.port}"
    assert ready["web_url"] == base + "/" and ready["mcp_url"] == base + "/mcp"
    assert ready["token_required"] is True and ready["oauth_issuer"] is None
    message = ready["message"]
    assert f"web pages at {base}/ (search: {base}/search)" in message
    assert "a token is required" in message and f"sign in at {base}/login" in message
    assert "MCPOWER_TOKEN" in message and "mcpower token add NAME" in message and str(tokens_file) in message
