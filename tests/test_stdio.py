"""`mcpower serve --stdio` as a real subprocess: a stdlib JSON-lines client, signals, bad input, a Node client.

The fast tests run the CLI through a launcher that patches in the fake embedder (see
server_fixtures.write_launcher); the slow one runs the real command with the packaged model.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from server_fixtures import (
    CLIENTS_DIR,
    HANDBOOK,
    RECIPES,
    StdioServer,
    add_broken_dataset,
    initialize_request,
    npm_install,
    run_node,
    subprocess_env,
    write_launcher,
)

from mcpower import __version__

TOOLS = {"knowledge_search", "knowledge_list_datasets", "knowledge_get_source", "knowledge_get_metadata"}
# Seconds from EOF or a signal to the process being gone. The server exits within its 0.5 s grace;
# this bound only tells "exits" from "hangs", so it is generous: a loaded CI machine must not fail it.
EXIT_BUDGET = 30.0


@pytest.fixture
def launcher(tmp_path: Path) -> Path:
    return write_launcher(tmp_path)


@pytest.fixture
def serve(launcher: Path) -> Iterator[Callable[..., StdioServer]]:
    """Starts `mcpower serve --stdio` (fake embedder) subprocesses; kills and reaps them at teardown."""
    started: list[StdioServer] = []

    def start(datasets: Path, *extra: str) -> StdioServer:
        server = StdioServer(
            [sys.executable, str(launcher), "serve", "--stdio", "--datasets-dir", str(datasets), *extra]
        )
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def assert_clean_stdout(server: StdioServer) -> None:
    """Every stdout line is one JSON-RPC 2.0 message."""
    assert server.stdout_lines
    for line in server.stdout_lines:
        assert line.endswith(b"\n")
        msg = json.loads(line)
        assert isinstance(msg, dict) and msg.get("jsonrpc") == "2.0", line


def events(server: StdioServer, name: str) -> list[dict[str, Any]]:
    return [r for r in server.log_records() if r.get("event") == name]


# ---------------------------------------------------------------- a whole session


def test_session_over_stdio(serve: Callable[..., StdioServer], datasets: Path) -> None:
    server = serve(datasets)
    init = server.initialize()
    assert init["serverInfo"]["name"] == "mcpower"
    assert init["serverInfo"]["version"] == __version__
    assert "tools" in init["capabilities"] and "resources" in init["capabilities"]
    assert "prompts" not in init["capabilities"]  # it has none
    assert "untrusted" in init["instructions"]

    tools = {t["name"]: t for t in server.call("tools/list")["tools"]}
    assert set(tools) == TOOLS
    assert all("outputSchema" in t for t in tools.values())

    result = server.call_tool("knowledge_search", {"query": "harpsichord feature", "top_k": 3})
    assert not result.get("isError")
    data = result["structuredContent"]
    assert json.loads(result["content"][0]["text"]) == data
    assert data["status"] == "ok"
    assert data["results"][0]["path"] == "notes.txt"
    links = [c for c in result["content"] if c["type"] == "resource_link"]
    assert links[0]["uri"] == f"mcpower://{data['results'][0]['dataset']}/notes.txt"
    assert links[0]["mimeType"] == "text/plain"
    assert sorted(data["meta"]["datasets"]) == ["handbook", "recipes"]
    assert all(0 <= r["score"] <= 1 for r in data["results"])

    rid = data["results"][0]["result_id"]
    source = server.call_tool("knowledge_get_source", {"result_id": rid, "scope": "chunk"})["structuredContent"]
    assert "harpsichord" in source["content"]

    error = server.call_tool("knowledge_search", {"query": "x", "dataset": "nope"})
    assert error["isError"] is True
    assert error["structuredContent"]["error"]["code"] == "DATASET_NOT_FOUND"
    unknown = server.call_tool("knowledge_search", {"query": "harpsichord", "k": 2})  # a misspelt top_k
    assert unknown["isError"] is True and unknown["structuredContent"]["error"]["code"] == "UNKNOWN_ARGUMENT"
    assert "'k'" in unknown["structuredContent"]["error"]["message"]

    resources = server.call("resources/list")["resources"]
    assert len(resources) == len(HANDBOOK) + len(RECIPES)
    doc = server.call("resources/read", {"uri": "mcpower://recipes/bread.md"})
    assert doc["contents"][0]["text"] == RECIPES["bread.md"]
    assert server.call("ping") == {}

    # stdin EOF: a clean exit, promptly.
    started = time.monotonic()
    server.close_stdin()
    assert server.wait_exit(EXIT_BUDGET) == 0
    assert time.monotonic() - started < EXIT_BUDGET
    server.stop()

    assert_clean_stdout(server)
    # stderr: JSON log lines only.
    (startup,) = events(server, "server.startup")
    assert startup["version"] == __version__
    assert startup["datasets"] == ["handbook", "recipes"]
    assert startup["level"] == "info" and startup["ts"].endswith("Z")
    assert events(server, "tool.invocation") == []  # each call is logged once, as its audit line
    searches = [line for line in events(server, "audit") if line["tool"] == "knowledge_search"]
    assert len(searches) == 3
    assert searches[2]["status"] == "UNKNOWN_ARGUMENT"
    ok = searches[0]
    assert ok["caller"] == "local" and ok["door"] == "mcp"
    assert ok["query_chars"] == len("harpsichord feature")
    assert ok["top_k"] == 3 and "mode" not in ok  # the options the client gave
    assert ok["result_count"] == len(data["results"])
    assert ok["status"] == "ok" and ok["denied"] is False
    assert isinstance(ok["duration_ms"], (int, float)) and ok["duration_ms"] >= 0
    missing = searches[1]
    assert missing["status"] == "DATASET_NOT_FOUND" and missing["result_count"] is None and not missing["denied"]
    # At info level the query text itself is never logged.
    assert "harpsichord" not in server.stderr()
    assert events(server, "server.shutdown")


def test_debug_level_never_logs_the_query(serve: Callable[..., StdioServer], datasets: Path) -> None:
    """Queries are logged only with --audit-queries, at every level (issue 26, item 8): debug wrote
    each one (tests/test_log_privacy.py checks every door of an HTTP server)."""
    server = serve(datasets, "--log-level", "debug")
    server.initialize()
    server.call_tool("knowledge_search", {"query": "harpsichord feature"})
    server.close_stdin()
    assert server.wait_exit(EXIT_BUDGET) == 0
    server.stop()
    assert "harpsichord" not in server.stderr()
    (audit,) = [r for r in server.log_records() if r.get("event") == "audit"]
    assert audit["query_chars"] == len("harpsichord feature") and "query" not in audit


def test_seed_tool_names_over_stdio(serve: Callable[..., StdioServer], datasets: Path) -> None:
    server = serve(datasets, "--tool-names", "seed")
    server.initialize()
    names = {t["name"] for t in server.call("tools/list")["tools"]}
    assert names == {"knowledge.search", "knowledge.listDatasets", "knowledge.getSource", "knowledge.getMetadata"}
    result = server.call_tool("knowledge.search", {"query": "pumpkin", "dataset": "recipes"})
    assert result["structuredContent"]["results"][0]["path"] == "soup/pumpkin.md"


# ---------------------------------------------------------------- shutdown


@pytest.mark.parametrize("after_search", [False, True], ids=["idle", "after-search"])
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_exits_promptly(
    serve: Callable[..., StdioServer], datasets: Path, signum: signal.Signals, after_search: bool
) -> None:
    server = serve(datasets)
    server.initialize()  # the event loop, and with it the signal handler, is running
    if after_search:
        result = server.call_tool("knowledge_search", {"query": "zephyrine"})
        assert result["structuredContent"]["status"] == "ok"
    started = time.monotonic()
    server.proc.send_signal(signum)
    assert server.wait_exit(EXIT_BUDGET) == 0
    assert time.monotonic() - started < EXIT_BUDGET
    server.stop()
    assert_clean_stdout(server)
    (shutdown,) = events(server, "server.shutdown")
    assert shutdown["signal"] == signum.name


def test_a_client_that_stops_reading_does_not_wedge_a_signal(launcher: Path, datasets: Path) -> None:
    """Answers pile up unread (more than the pipe and the writer's queue hold): the event loop still
    takes SIGTERM, and the server exits."""
    proc = subprocess.Popen(
        [sys.executable, str(launcher), "serve", "--stdio", "--datasets-dir", str(datasets)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=subprocess_env(),
    )
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps(initialize_request(0)).encode())
        proc.stdin.write(b'\n{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
        proc.stdin.flush()
        assert json.loads(proc.stdout.readline())["id"] == 0  # serving; from here on nothing is read
        listing = b"".join(
            json.dumps({"jsonrpc": "2.0", "id": i, "method": "tools/list"}).encode() + b"\n" for i in range(1, 601)
        )
        proc.stdin.write(listing)  # ~600 answers of ~6 KB: past the pipe's 64 KB and the 4 MB queue
        proc.stdin.flush()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(EXIT_BUDGET) == 0
    finally:
        proc.kill()
        proc.wait()
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()


def test_eof_before_initialize_exits(serve: Callable[..., StdioServer], datasets: Path) -> None:
    server = serve(datasets)
    server.close_stdin()
    assert server.wait_exit(EXIT_BUDGET) == 0
    server.stop()
    assert server.stdout_lines == []
    assert events(server, "server.startup")


# ---------------------------------------------------------------- robustness


def test_broken_manifest_beside_a_good_dataset(serve: Callable[..., StdioServer], datasets: Path) -> None:
    add_broken_dataset(datasets)
    server = serve(datasets)
    server.initialize()
    listed = server.call_tool("knowledge_list_datasets", {})["structuredContent"]["datasets"]
    status = {d["id"]: d["status"] for d in listed}
    assert status == {"broken": "error", "handbook": "ready", "recipes": "ready"}
    broken = next(d for d in listed if d["id"] == "broken")
    assert "manifest.json" in broken["error"]
    result = server.call_tool("knowledge_search", {"query": "marmalade session", "dataset": "handbook"})
    assert result["structuredContent"]["results"][0]["path"] == "api/reference.md"
    server.close_stdin()
    assert server.wait_exit(EXIT_BUDGET) == 0
    server.stop()
    (startup,) = events(server, "server.startup")
    assert startup["datasets"] == ["handbook", "recipes"]
    assert startup["datasets_with_errors"] == ["broken"]
    assert any(r.get("event") == "dataset.error" for r in server.log_records())


def test_empty_datasets_dir(serve: Callable[..., StdioServer], tmp_path: Path) -> None:
    server = serve(tmp_path / "nothing-here")
    server.initialize()
    assert server.call_tool("knowledge_list_datasets", {})["structuredContent"]["datasets"] == []
    result = server.call_tool("knowledge_search", {"query": "anything", "dataset": "docs"})
    assert result["isError"] is True
    assert "mcpower ingest" in result["structuredContent"]["error"]["message"]
    everything = server.call_tool("knowledge_search", {"query": "anything"})["structuredContent"]
    assert everything["status"] == "empty" and everything["meta"]["datasets"] == []


# A line the SDK cannot take as a message gets a JSON-RPC error (mcpower.transport), and the server carries on.
MALFORMED = [
    (b"this is not json\n", -32700, None),
    (b'{"jsonrpc": "2.0", "id": 900, "method": "ping"\n', -32700, None),  # truncated object
    (
        b'[{"jsonrpc": "2.0", "id": 901, "method": "ping"}, {"jsonrpc": "2.0", "id": 902, "method": "ping"}]\n',
        -32600,
        None,
    ),
    (b'{"hello": 1}\n', -32600, None),
    (b'{"id": 904, "method": "ping"}\n', -32600, 904),  # no "jsonrpc"
    (b"42\n", -32600, None),
    (b"\n", None, None),  # blank lines are skipped
    (b"\xff\xfe\x00garbage\xc3\x28\n", -32700, None),  # invalid UTF-8
    (b'{"jsonrpc": "2.0", "id": 903, "method": "tools/call", "params": {"name": 5}}\n', -32602, 903),
    (b'{"jsonrpc": "2.0", "id": 905, "method": "no/such/method"}\n', -32601, 905),
]


def test_malformed_input_does_not_kill_the_server(serve: Callable[..., StdioServer], datasets: Path) -> None:
    server = serve(datasets)
    server.initialize()
    for line, code, msg_id in MALFORMED:
        seen = len(server.received)
        ping = server.request("ping")
        server.send_raw(line)
        pong = server.request("ping")
        assert server.wait_for(pong)["result"] == {}, line
        replies = [m for m in server.received[seen:] if m.get("id") not in (ping, pong)]
        if code is None:
            assert replies == [], (line, replies)
        else:
            assert [(m["id"], m["error"]["code"]) for m in replies] == [(msg_id, code)], (line, replies)
            assert replies[0]["error"]["message"]
    # Invalid UTF-8 inside a string reaches the tool as replacement characters.
    server.send_raw(
        b'{"jsonrpc": "2.0", "id": 950, "method": "tools/call", "params": {"name": "knowledge_search",'
        b' "arguments": {"query": "zephyrine \xff\xfe package"}}}\n'
    )
    answer = server.wait_for(950)
    assert answer["result"]["structuredContent"]["status"] == "ok"
    assert {t["name"] for t in server.call("tools/list")["tools"]} == TOOLS
    server.close_stdin()
    assert server.wait_exit(EXIT_BUDGET) == 0
    server.stop()
    assert_clean_stdout(server)
    warnings = [r for r in server.log_records() if r.get("event") == "protocol.invalid_message"]
    assert len(warnings) == sum(1 for _, code, _ in MALFORMED if code in (-32700, -32600))


def test_a_message_in_pieces_and_a_large_one(serve: Callable[..., StdioServer], datasets: Path) -> None:
    """Lines are read as they come, however the client's writes cut them (the transport reads the
    pipe on the event loop: wire.py); a 2 MB message crosses whole, and is answered."""
    server = serve(datasets)
    server.initialize()
    line = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 700,
            "method": "tools/call",
            "params": {"name": "knowledge_search", "arguments": {"query": "zephyrine package"}},
        }
    ).encode()
    for piece in (line[:10], line[10:57], line[57:] + b"\n"):
        server.send_raw(piece)
    assert server.wait_for(700)["result"]["structuredContent"]["status"] == "ok"
    big = {"name": "knowledge_search", "arguments": {"query": "q" * 2_000_000}}
    server.send({"jsonrpc": "2.0", "id": 701, "method": "tools/call", "params": big})
    refused = server.wait_for(701)["result"]
    assert refused["isError"] and refused["structuredContent"]["error"]["code"] == "INVALID_QUERY"
    server.close_stdin()
    assert server.wait_exit(EXIT_BUDGET) == 0
    server.stop()
    assert_clean_stdout(server)


def test_stdin_from_a_file(launcher: Path, datasets: Path, tmp_path: Path) -> None:
    """A file (which the event loop cannot watch) is read by a thread; every answer is written
    before the server exits at its end."""
    requests = tmp_path / "requests.jsonl"
    requests.write_bytes(json.dumps(initialize_request(1)).encode() + b"\nnot json\n")
    with requests.open("rb") as stdin:
        done = subprocess.run(
            [sys.executable, str(launcher), "serve", "--stdio", "--datasets-dir", str(datasets)],
            stdin=stdin,
            capture_output=True,
            env=subprocess_env(),
            timeout=120,
        )
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]
    # Answered in either order: a bad line is answered by the transport, initialize by the SDK.
    answers = {message["id"]: message for message in map(json.loads, done.stdout.splitlines())}
    assert answers.keys() == {1, None}
    assert answers[1]["result"]["serverInfo"]["name"] == "mcpower"
    assert answers[None]["error"]["code"] == -32700


# ---------------------------------------------------------------- a non-Python client


@pytest.fixture(scope="session")
def node_client() -> Path:
    """tests/clients with its npm dependencies installed (once per session); skips without node/npm or network."""
    npm_install(CLIENTS_DIR, timeout=90)
    return CLIENTS_DIR


@pytest.mark.node
def test_node_client(node_client: Path, datasets: Path, launcher: Path) -> None:
    env = subprocess_env() | {"MCPOWER_TEST_QUERY": "harpsichord feature"}
    serve = [sys.executable, str(launcher), "serve", "--stdio", "--datasets-dir", str(datasets)]
    summary = run_node("search.mjs", *serve, env=env)
    assert summary["server"]["name"] == "mcpower"
    assert set(summary["tools"]) == TOOLS
    assert summary["isError"] is False
    assert summary["status"] == "ok"
    assert summary["results"][0]["path"] == "notes.txt"
    assert summary["textMatchesStructured"] is True
    assert summary["resources"] == len(HANDBOOK) + len(RECIPES)
    assert summary["errorCode"] == "DATASET_NOT_FOUND"
    assert summary["budgetMeta"]["truncated"] is True and summary["budgetMeta"]["offset"] == 0
    assert summary["stale"] == [False] * len(summary["results"])
    assert summary["watched"] == [False, False]
    assert summary["sourceTruncated"] is True


# ---------------------------------------------------------------- the real model


FASTAPI_CORPUS = Path("/work/shared/bench/docs-fastapi/corpus")
FASTAPI_FILES = [
    "tutorial/background-tasks.md",
    "tutorial/first-steps.md",
    "tutorial/middleware.md",
    "tutorial/handling-errors.md",
    "tutorial/response-status-code.md",
    "tutorial/testing.md",
    "async.md",
]


@pytest.mark.slow
def test_real_model_over_stdio(tmp_path: Path) -> None:
    if not FASTAPI_CORPUS.is_dir():
        pytest.skip(f"{FASTAPI_CORPUS} is not here")
    from mcpower.ingestion import IngestOptions, ingest

    src = tmp_path / "fastapi"
    for rel in FASTAPI_FILES:
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(FASTAPI_CORPUS / rel, src / rel)
    datasets = tmp_path / "datasets"
    ingest(src, datasets, IngestOptions(dataset_id="fastapi", backend="onnx"))

    server = StdioServer(
        [sys.executable, "-m", "mcpower", "serve", "--stdio", "--datasets-dir", str(datasets)],
        env=subprocess_env(),
    )
    try:
        server.initialize(timeout=60)
        result = server.call_tool("knowledge_search", {"query": "run a task after returning a response"}, timeout=120)
        data = result["structuredContent"]
        assert data["status"] == "ok", data
        assert data["results"][0]["path"] == "tutorial/background-tasks.md"
        assert data["meta"]["low_confidence"] is False
        server.close_stdin()
        assert server.wait_exit(EXIT_BUDGET) == 0
    finally:
        server.stop()
    assert_clean_stdout(server)
    assert server.log_records()
