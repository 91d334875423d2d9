"""Queries are never logged unless the operator asks (`--audit-queries`), at every log level
(issue 26, item 8): `--log-level debug` wrote ``query text: '...'`` for each search.

A real `mcpower serve --http --log-level debug` answers searches through every door that takes a
query — an MCP tools/call, one refused as too long, the web search page and its JSON twin — and
then every line it wrote is searched for the query's text."""

from __future__ import annotations

import http.client
import json
from pathlib import Path
from urllib.parse import quote

import pytest
from asgi_fixtures import INITIALIZE, MCP_HEADERS
from http_fixtures import TOKEN, HttpServer, write_http_launcher
from server_fixtures import copy_datasets

SECRET = "harpsichord layoffs"  # a query that finds something (notes.txt)
LONG = "confidential reorganisation " * 40  # over 1,024 characters: refused, and its start quoted to the client


def request(
    server: HttpServer, method: str, path: str, body: bytes | None = None, **headers: str
) -> tuple[dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    try:
        conn.request(method, path, body=body, headers={"Authorization": f"Bearer {TOKEN}", **headers})
        response = conn.getresponse()
        data = response.read()
        assert response.status in (200, 202), data[:500]
        return {k.lower(): v for k, v in response.getheaders()}, data
    finally:
        conn.close()


INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def tool_call(query: str, n: int) -> bytes:
    call = {"name": "knowledge_search", "arguments": {"query": query, "top_k": 2}}
    return json.dumps({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": call}).encode()


@pytest.mark.slow  # a real HTTP server; test_stdio.py::test_debug_level_never_logs_the_query runs by default
def test_debug_logs_never_carry_the_query_text(template: Path, tmp_path: Path) -> None:
    server = HttpServer(write_http_launcher(tmp_path), copy_datasets(template, tmp_path), "--log-level", "debug")
    try:
        headers, answer = request(server, "POST", "/mcp", json.dumps(INITIALIZE).encode(), **MCP_HEADERS)
        assert b"serverInfo" in answer
        in_session = {**MCP_HEADERS, "mcp-session-id": headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
        request(server, "POST", "/mcp", json.dumps(INITIALIZED).encode(), **in_session)
        _, found = request(server, "POST", "/mcp", tool_call(SECRET, 2), **in_session)
        assert b"notes.txt" in found  # the query was read and answered
        _, refused = request(server, "POST", "/mcp", tool_call(LONG, 3), **in_session)
        assert b"INVALID_QUERY" in refused and b"confidential" in refused  # the client is told what it sent
        _, page = request(server, "GET", f"/search?q={quote(SECRET)}", Accept="text/html")
        _, twin = request(server, "GET", f"/search?q={quote(SECRET)}&format=json")
        assert b"notes.txt" in page and b"notes.txt" in twin
        server.wait_event("audit", door="web", query_chars=len(SECRET))
    finally:
        server.stop()

    log = server.stderr()
    audits = [r for r in server.records if r.get("event") == "audit"]
    assert len(audits) == 4 and {r["query_chars"] for r in audits} == {len(SECRET), len(LONG)}
    assert all(set(r) - {"query"} == set(r) for r in audits)
    for text in (SECRET, *SECRET.split(), "confidential", "reorganisation"):
        assert text not in log, [line for line in log.splitlines() if text in line]
