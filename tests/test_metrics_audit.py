"""/metrics (server/metrics.py) and the audit log (server/audit.py): the counts equal the calls made,
per caller; the audit line's fields; the query's text only with the opt-in; under stdio too."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
from asgi_fixtures import MCP_HEADERS, app_serving, asgi_client
from conftest import FakeEmbedder, join_warm_up
from mcp.server.auth.provider import AccessToken
from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from server_fixtures import StdioServer, add_broken_dataset, write_launcher
from test_ratelimit import CALLERS, NamedTokens, session, tool_call

from mcpower.ingestion import IngestReport
from mcpower.registry import Registry
from mcpower.server.audit import ToolCall, log_to_file
from mcpower.server.auth.ratelimit import RateLimits
from mcpower.server.http import HttpOptions
from mcpower.server.metrics import MAX_CALLER_LABELS, Metrics
from mcpower.watch import WatchEvent

pytestmark = pytest.mark.anyio

QUERY = "harpsichord feature"


@pytest.fixture
def registry(datasets: Path) -> Iterator[Registry]:
    add_broken_dataset(datasets)
    reg = Registry(datasets, embedder_factory=lambda model: FakeEmbedder())
    yield reg
    join_warm_up()
    reg.close()


@asynccontextmanager
async def serving(registry: Registry, **options: Any) -> AsyncIterator[Any]:
    options = {
        "verifier": NamedTokens(),
        "rate_limits": RateLimits(rate=0.001, burst=8, max_searches=0, max_hold=0),
        **options,
    }
    async with app_serving(registry, HttpOptions(**options)) as (_, app):
        yield app


def as_caller(app: Any, name: str | None) -> httpx2.AsyncClient:
    token = None if name is None else next(t for t, n in CALLERS.items() if n == name)
    return asgi_client(app, token, **MCP_HEADERS)


def scrape(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a scrape, by name and labels (the official parser: the text must parse)."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def audit_lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    return [
        {
            k: getattr(r, k, None)
            for k in ("caller", "tool", "dataset", "query_chars", "result_count", "status", "duration_ms", "door")
        }
        | ({"query": r.query} if hasattr(r, "query") else {})
        for r in caplog.records
        if getattr(r, "event", None) == "audit"
    ]


# ---------------------------------------------------------------- /metrics


async def test_metrics_count_the_calls_each_caller_made(registry: Registry) -> None:
    made = {"alice": 3, "bob": 1}
    async with serving(registry) as app:
        for name, n in made.items():
            async with as_caller(app, name) as h:
                headers = await session(h)
                for i in range(n):
                    assert (await h.post("/mcp", json=tool_call(QUERY, i), headers=headers)).status_code == 200
                missing = {"query": "x", "dataset": "nope"}
                call = tool_call("", 99) | {"params": {"name": "knowledge_search", "arguments": missing}}
                assert (await h.post("/mcp", json=call, headers=headers)).json()["result"]["isError"]
        async with as_caller(app, "runaway") as h:  # 8 requests in the burst, then 429s
            statuses = [
                (await h.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"})).status_code
                for _ in range(12)
            ]
            assert statuses.count(429) == 4
        async with as_caller(app, "carol") as h:
            response = await h.get("/metrics")
        async with as_caller(app, None) as anonymous:
            assert (await anonymous.get("/metrics")).status_code == 401  # behind the token
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    samples = scrape(response.text)

    def calls(caller: str, status: str) -> float:
        key = (("caller", caller), ("status", status), ("tool", "knowledge_search"))
        return samples.get(("mcpower_tool_calls_total", key), 0.0)

    assert {name: calls(name, "ok") for name in made} == made
    assert {name: calls(name, "DATASET_NOT_FOUND") for name in made} == {"alice": 1, "bob": 1}
    assert samples[("mcpower_rate_limited_total", (("caller", "runaway"), ("limit", "rate")))] == 4
    assert samples[("mcpower_search_duration_seconds_count", ())] == sum(made.values()) + 2
    assert samples[("mcpower_datasets", (("status", "ready"),))] == 2
    assert samples[("mcpower_datasets", (("status", "error"),))] == 1
    assert samples[("mcpower_sessions", ())] == 2  # alice's and bob's


def test_reindexes_are_counted_from_watch_events(registry: Registry) -> None:
    metrics = Metrics(registry, "knowledge_search")
    metrics.watch_event(WatchEvent("handbook", "reindexed", report=IngestReport("handbook", "x", seconds=2.0)))
    unchanged = IngestReport("handbook", "x", seconds=0.2, published=False)
    metrics.watch_event(WatchEvent("handbook", "reindexed", report=unchanged))
    metrics.watch_event(WatchEvent("recipes", "failed", "the last re-index failed"))
    metrics.watch_event(WatchEvent("recipes", "watching"))
    samples = scrape(metrics.text().decode())
    assert samples[("mcpower_reindex_total", (("dataset", "handbook"), ("result", "published")))] == 1
    assert samples[("mcpower_reindex_total", (("dataset", "handbook"), ("result", "unchanged")))] == 1
    assert samples[("mcpower_reindex_total", (("dataset", "recipes"), ("result", "failed")))] == 1
    assert samples[("mcpower_reindex_duration_seconds_count", ())] == 2
    assert samples[("mcpower_reindex_duration_seconds_sum", ())] == pytest.approx(2.2)


def test_no_created_series_and_the_library_left_as_it_was(registry: Registry) -> None:
    """prometheus-client adds a ``*_created`` series to every counter and histogram: noise on a
    scrape, left out of ours without the library's process-wide switch."""
    metrics = Metrics(registry, "knowledge_search")
    metrics.tool_call(ToolCall("alice", "knowledge_search", "*", 5, 3, "ok", 12.0))
    metrics.refused("alice", "rate")
    text = metrics.text().decode()
    assert "_created" not in text
    samples = scrape(text)
    assert samples[("mcpower_search_duration_seconds_count", ())] == 1
    assert samples[("mcpower_rate_limited_total", (("caller", "alice"), ("limit", "rate")))] == 1
    other = CollectorRegistry()
    Counter("someone_elses", "Another user of the library", registry=other).inc()
    assert "someone_elses_created" in generate_latest(other).decode()


def test_caller_labels_are_bounded(registry: Registry) -> None:
    metrics = Metrics(registry, "knowledge_search")
    for i in range(MAX_CALLER_LABELS + 50):
        metrics.tool_call(ToolCall(f"subject-{i}" + "x" * 200, "knowledge_list_datasets", "*", None, 1, "ok", 1.0))
    samples = scrape(metrics.text().decode())
    callers = {dict(k[1])["caller"] for k in samples if k[0] == "mcpower_tool_calls_total"}
    assert len(callers) == MAX_CALLER_LABELS + 1 and "other" in callers
    assert max(len(c) for c in callers) <= 64
    assert sum(v for k, v in samples.items() if k[0] == "mcpower_tool_calls_total") == MAX_CALLER_LABELS + 50


async def test_metrics_can_be_turned_off(registry: Registry) -> None:
    async with serving(registry, metrics=False) as app, as_caller(app, "alice") as h:
        assert (await h.get("/metrics")).status_code == 404


# ---------------------------------------------------------------- the audit log


async def test_one_audit_line_per_tool_call_without_the_query(
    registry: Registry, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="mcpower")
    async with serving(registry) as app, as_caller(app, "alice") as h:
        headers = await session(h)
        answer = (await h.post("/mcp", json=tool_call(QUERY, 1), headers=headers)).json()["result"]
        rid = answer["structuredContent"]["results"][0]["result_id"]
        calls = [
            ("knowledge_get_source", {"result_id": rid}),
            ("knowledge_list_datasets", {}),
            ("knowledge_search", {"query": "x" * 5000}),  # refused by the schema: logged with its length only
            ("no_such_tool", {"dataset": "../../etc"}),
        ]
        for i, (name, arguments) in enumerate(calls, 2):
            call = {"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": name, "arguments": arguments}}
            assert (await h.post("/mcp", json=call, headers=headers)).status_code == 200
    lines = audit_lines(caplog)
    assert [(line["tool"], line["status"]) for line in lines] == [
        ("knowledge_search", "ok"),
        ("knowledge_get_source", "ok"),
        ("knowledge_list_datasets", "ok"),
        ("knowledge_search", "INVALID_QUERY"),
        ("(unknown)", "UNKNOWN_TOOL"),
    ]
    search = lines[0]
    assert search["caller"] == "alice" and search["dataset"] == "*"
    assert (
        search["query_chars"] == len(QUERY) and search["result_count"] == answer["structuredContent"]["meta"]["count"]
    )
    assert isinstance(search["duration_ms"], float) and search["duration_ms"] >= 0
    assert lines[1]["dataset"] == rid.split(":")[0] and lines[1]["result_count"] == 1
    assert lines[2]["result_count"] == 3 and lines[2]["query_chars"] is None
    assert lines[3]["query_chars"] == 5000 and lines[3]["result_count"] is None
    assert lines[4]["dataset"] is None  # not a dataset id: not logged
    assert all("query" not in line and line["door"] == "mcp" for line in lines)
    assert QUERY not in caplog.text and "etc" not in caplog.text


async def test_the_query_text_is_logged_with_the_opt_in(registry: Registry, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="mcpower")
    async with serving(registry, audit_queries=True) as app, as_caller(app, "bob") as h:
        headers = await session(h)
        search = {"query": QUERY, "dataset": "recipes"}
        call = tool_call("", 1) | {"params": {"name": "knowledge_search", "arguments": search}}
        assert (await h.post("/mcp", json=call, headers=headers)).status_code == 200
    (line,) = audit_lines(caplog)
    assert line["query"] == QUERY and line["caller"] == "bob" and line["dataset"] == "recipes"


async def test_a_web_page_search_is_audited_as_the_caller_and_counted(
    registry: Registry, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="mcpower")
    async with serving(registry) as app, as_caller(app, "carol") as h:
        page = await h.get("/search", params={"q": QUERY, "dataset": "recipes"}, headers={"Accept": "text/html"})
        assert page.status_code == 200
        scraped = scrape((await h.get("/metrics")).text)
    (line,) = audit_lines(caplog)
    assert line["caller"] == "carol" and line["tool"] == "knowledge_search" and line["dataset"] == "recipes"
    assert line["door"] == "web" and line["status"] == "ok" and line["query_chars"] == len(QUERY)
    key = (("caller", "carol"), ("status", "ok"), ("tool", "knowledge_search"))
    assert scraped[("mcpower_tool_calls_total", key)] == 1


def test_audit_lines_under_stdio_name_the_local_caller_and_go_to_the_file(datasets: Path, tmp_path: Path) -> None:
    audit_file = tmp_path / "audit.jsonl"
    launcher = write_launcher(tmp_path)
    server = StdioServer(
        [
            sys.executable,
            str(launcher),
            "serve",
            "--stdio",
            "--datasets-dir",
            str(datasets),
            "--audit-log",
            str(audit_file),
        ]
    )
    try:
        server.initialize()
        server.call_tool("knowledge_search", {"query": QUERY, "top_k": 2})
        server.close_stdin()
        assert server.wait_exit(30) == 0
    finally:
        server.stop()
    (line,) = [r for r in server.log_records() if r.get("event") == "audit"]
    assert line["caller"] == "local" and line["tool"] == "knowledge_search" and line["result_count"] == 2
    assert "query" not in line and QUERY not in server.stderr()
    (filed,) = [json.loads(x) for x in audit_file.read_text().splitlines()]
    assert {k: filed[k] for k in ("caller", "tool", "status")} == {
        "caller": "local",
        "tool": "knowledge_search",
        "status": "ok",
    }
    assert audit_file.stat().st_mode & 0o077 == 0


def test_an_unwritable_audit_file_is_an_oserror(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        log_to_file(tmp_path / "no" / "such" / "folder" / "audit.jsonl")


class Cook:
    """A verifier of one caller, ``cook``, who reads ``recipes`` only."""

    async def verify_token(self, token: str) -> AccessToken | None:
        return (
            AccessToken(token="t", client_id="cook", scopes=["mcpower:read:recipes"]) if token == "cook" * 5 else None
        )


async def test_the_audit_line_tells_a_dataset_outside_the_callers_scope_from_an_unknown_id(
    registry: Registry, caplog: pytest.LogCaptureFixture
) -> None:
    """The client gets the same DATASET_NOT_FOUND either way (no existence leak); the operator's line
    says which it was (28.6), and holds the options the client gave: one line per call."""
    caplog.set_level(logging.INFO, logger="mcpower")
    async with serving(registry) as app, as_caller(app, "alice") as h:  # a result id of handbook, to ask for
        found = await h.post(
            "/mcp",
            json=tool_call("", 1)
            | {"params": {"name": "knowledge_search", "arguments": {"query": QUERY, "dataset": "handbook"}}},
            headers=await session(h),
        )
        rid = found.json()["result"]["structuredContent"]["results"][0]["result_id"]
    caplog.clear()
    async with serving(registry, verifier=Cook()) as app, asgi_client(app, "cook" * 5, **MCP_HEADERS) as h:
        headers = await session(h)
        calls = [
            ("knowledge_search", {"query": QUERY, "dataset": "handbook", "top_k": 2, "mode": "keyword"}),
            ("knowledge_search", {"query": QUERY, "dataset": "nowhere", "top_k": 2, "mode": "keyword"}),
            ("knowledge_get_source", {"result_id": rid, "scope": "chunk"}),
            ("knowledge_get_source", {"result_id": rid.replace("handbook", "nowhere"), "scope": "chunk"}),
            ("knowledge_search", {"query": QUERY, "dataset": "recipes", "group": "none", "mode": "fast"}),
        ]
        answers = []
        for i, (name, arguments) in enumerate(calls, 2):
            call = {"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": name, "arguments": arguments}}
            answers.append((await h.post("/mcp", json=call, headers=headers)).json()["result"]["structuredContent"])
    codes = [a.get("error", {}).get("code") for a in answers]
    assert codes == [
        "DATASET_NOT_FOUND",
        "DATASET_NOT_FOUND",
        "RESULT_NOT_FOUND",
        "RESULT_NOT_FOUND",
        "INVALID_QUERY",
    ]
    assert answers[0]["error"]["message"].replace("handbook", "ID") == answers[1]["error"]["message"].replace(
        "nowhere", "ID"
    )  # the client cannot tell them apart
    lines = [vars(r) for r in caplog.records if getattr(r, "event", None) == "audit"]
    assert [(line["dataset"], line["status"], line["denied"]) for line in lines] == [
        ("handbook", "DATASET_NOT_FOUND", True),
        ("nowhere", "DATASET_NOT_FOUND", False),
        ("handbook", "RESULT_NOT_FOUND", True),
        ("nowhere", "RESULT_NOT_FOUND", False),
        ("recipes", "INVALID_QUERY", False),
    ]
    assert all(line["caller"] == "cook" for line in lines)
    assert (lines[0]["top_k"], lines[0]["mode"], lines[2]["scope"]) == (2, "keyword", "chunk")
    assert lines[4]["group"] == "none" and "mode" not in lines[4]  # a word outside the tool's is not logged
    assert not [r for r in caplog.records if getattr(r, "event", None) == "tool.invocation"]
