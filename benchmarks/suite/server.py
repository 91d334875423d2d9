"""Section mcp: the server over real stdio (round trip, start-up against a bare MCPServer, memory) and a cold CLI search.

The client is stdlib-only (JSON lines on the child's stdin/stdout), so the figures are the server's.
The warm round trip has a floor measured in the same run: a bare MCPServer answering each call
with a result mcpower gave (the SDK's own round trip for an answer of that size), called in turn
with mcpower, plus the search itself (``meta.duration_ms``), call by call.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from suite.datasets import ensure_dataset
from suite.report import REPO, lat_stats, load_avg, table

PROTOCOL_VERSION = "2025-11-25"
MCP_QUERIES = [
    "how do I declare a path parameter with a type",
    "query parameters with default values",
    "request body with a Pydantic model",
    "dependency injection with yield",
    "OAuth2 password flow with JWT tokens",
    "CORS middleware configuration",
    "background tasks after returning a response",
    "upload files with UploadFile",
    "custom exception handlers",
    "response_model to filter output data",
    "run the app with uvicorn in production",
    "testing with TestClient",
    "websockets endpoint",
    "SQL databases with SQLModel",
    "settings and environment variables",
    "async def vs def path operations",
    "status codes in responses",
    "header parameters and cookies",
    "bigger applications with APIRouter",
    "OpenAPI metadata and docs URLs",
    "form data fields",
    "validation errors 422",
    "deploy with Docker",
    "lifespan events startup shutdown",
    "streaming responses",
]


class StdioClient:
    """A stdlib MCP client over a subprocess's stdin/stdout, one JSON line per message."""

    def __init__(self, argv: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> None:
        self.errfile = tempfile.TemporaryFile()  # noqa: SIM115 - closed in close()
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.errfile, env=env, cwd=cwd
        )
        self.next_id = 0

    def send(self, method: str, params: dict[str, Any] | None = None, notify: bool = False) -> int:
        msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        if not notify:
            self.next_id += 1
            msg["id"] = self.next_id
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(msg, separators=(",", ":")) + "\n").encode())
        self.proc.stdin.flush()
        return self.next_id

    def receive(self, want_id: int, timeout: float = 120.0) -> dict[str, Any]:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            raw = self.proc.stdout.readline()
            if not raw:
                raise EOFError(f"server closed stdout (rc={self.proc.poll()}): {self.stderr_tail()}")
            msg = json.loads(raw)  # a non-JSON line on stdout is a protocol violation: let it fail
            if isinstance(msg, dict) and msg.get("id") == want_id:
                return msg
        raise TimeoutError(f"no response to request {want_id}")

    def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        resp = self.receive(self.send(method, params))
        if "result" not in resp:
            raise RuntimeError(f"{method} failed: {resp}")
        return dict(resp["result"])

    def initialize(self) -> float:
        """Send initialize (the pipe buffers it while the server starts); seconds from spawn to the response."""
        self.request(
            "initialize",
            {
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "mcpower-bench", "version": "0"},
            },
        )
        elapsed = time.perf_counter() - self.started
        self.send("notifications/initialized", notify=True)
        return elapsed

    def call_tool(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        result = self.request("tools/call", {"name": name, "arguments": arguments})
        if result.get("isError"):
            raise RuntimeError(f"{name} returned an error: {result.get('content')}")
        return result

    def memory(self) -> dict[str, float]:
        """VmRSS and VmHWM of the server process, in MB."""
        out: dict[str, Any] = {}
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = round(int(value.split()[0]) / 1024, 1)
        return out

    def stderr_tail(self) -> str:
        self.errfile.seek(0)
        return self.errfile.read().decode(errors="replace")[-2000:]

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.errfile.close()


@contextmanager
def answering(result: dict[str, Any]) -> Iterator[StdioClient]:
    """A bare MCPServer (bare_server.py) that answers its one tool, ``result``, with ``result``;
    initialized and warmed up, closed after the block."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", encoding="utf-8") as f:
        json.dump(result, f)
        f.flush()
        client = StdioClient([sys.executable, str(REPO / "benchmarks" / "bare_server.py"), "serve-result", f.name])
        try:
            client.initialize()
            for _ in range(len(MCP_QUERIES) * 2):  # as many warm-up calls as mcpower had
                client.call_tool("result", {})
            yield client
        finally:
            client.close()


def mcpower_argv() -> list[str]:
    """The installed `mcpower` console script next to this interpreter, else `python -m mcpower`."""
    script = Path(sys.executable).parent / "mcpower"
    return [str(script)] if script.exists() else [sys.executable, "-m", "mcpower"]


def startup(argv: list[str], tool: str, arguments: dict[str, Any]) -> dict[str, float]:
    """Seconds from spawn to the initialize response (and the CPU the server had used by then) and
    to the first tools/call result."""
    client = StdioClient(argv)
    try:
        init = client.initialize()
        cpu = cpu_seconds(client.proc.pid)
        client.call_tool(tool, arguments)
        return {"initialize": init, "initialize_cpu": cpu, "first_call": time.perf_counter() - client.started}
    finally:
        client.close()


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process has used so far, all threads (from /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def run(args: argparse.Namespace) -> dict[str, Any]:
    import mcpower

    root = args.datasets_dir / "mcp"
    corpus = args.corpora / "docs-fastapi" / "corpus"
    dataset = ensure_dataset(corpus, root, "fastapi")
    calls = 50 if args.quick else 200
    runs = 2 if args.quick else 7
    serve = [*mcpower_argv(), "serve", "--stdio", "--datasets-dir", str(root)]
    bare = [sys.executable, str(REPO / "benchmarks" / "bare_server.py"), "serve"]
    search_args = {"query": MCP_QUERIES[0], "dataset": "fastapi"}
    # As `pip install` does: under PYTHONDONTWRITEBYTECODE=1 an editable mcpower would be compiled
    # from source in every process, which the SDK's modules (installed by pip) never are.
    compileall.compile_dir(Path(mcpower.__file__).parent, quiet=1)

    # Start-up: interleaved pairs, which server starts first alternating, so both see the same
    # machine; one discarded pair first. The target is the median of the paired differences.
    starts: dict[str, list[dict[str, float]]] = {"mcpower": [], "bare": []}
    for i in range(runs + 1):
        order = [("mcpower", serve, "knowledge_search", search_args), ("bare", bare, "echo", {"text": "hello"})]
        for name, argv, tool, arguments in order if i % 2 == 0 else order[::-1]:
            result = startup(argv, tool, arguments)
            if i:
                starts[name].append(result)
    keys = ("initialize", "initialize_cpu", "first_call")
    start = {name: {k: round(statistics.median(r[k] for r in rs), 3) for k in keys} for name, rs in starts.items()}
    pairs = list(zip(starts["mcpower"], starts["bare"]))
    paired = {k: round(statistics.median(m[k] - b[k] for m, b in pairs), 3) for k in keys}
    ratio = {k: round(statistics.median(m[k] / b[k] for m, b in pairs), 3) for k in ("initialize", "initialize_cpu")}

    # The warm round trip, and the server's memory.
    client = StdioClient(serve)
    try:
        client.initialize()
        for q in MCP_QUERIES * 2:  # warm-up: the stores and the model load after the handshake
            client.call_tool("knowledge_search", {"query": q, "dataset": "fastapi"})
        mem_warm = client.memory()
        rtt: list[float] = []
        core: list[float] = []
        bare_rtt: list[float] = []
        found: list[int] = []
        with answering(client.call_tool("knowledge_search", search_args)) as bare_client:

            def ask_mcpower(i: int) -> None:
                t = time.perf_counter()
                r = client.call_tool(
                    "knowledge_search", {"query": MCP_QUERIES[i % len(MCP_QUERIES)], "dataset": "fastapi"}
                )
                rtt.append(time.perf_counter() - t)
                core.append(r["structuredContent"]["meta"]["duration_ms"] / 1000)  # Registry.search, in the server
                found.append(len(r["structuredContent"]["results"]))

            def ask_bare(i: int) -> None:
                t = time.perf_counter()
                bare_client.call_tool("result", {})
                bare_rtt.append(time.perf_counter() - t)

            for i in range(calls):
                # In turn with the bare server, which of the two first alternating: both see the same machine.
                for ask in (ask_mcpower, ask_bare) if i % 2 == 0 else (ask_bare, ask_mcpower):
                    ask(i)
        results = sum(found)
        mem_after = client.memory()
        rtt_all = []  # without `dataset`: every call rescans the datasets folder and searches all datasets
        for i in range(min(calls, 50)):
            t = time.perf_counter()
            client.call_tool("knowledge_search", {"query": MCP_QUERIES[i % len(MCP_QUERIES)]})
            rtt_all.append(time.perf_counter() - t)
    finally:
        client.close()

    cold = cold_search(root, runs)
    floor = [b + c for b, c in zip(bare_rtt, core, strict=True)]  # call by call: the SDK's round trip + the search
    tool_call, floor_stats = lat_stats(rtt), lat_stats(floor)
    out: dict[str, Any] = {
        "dataset": dataset,
        "calls": calls,
        "tool_call": tool_call,
        "core_search_in_server": lat_stats(core),
        "bare_round_trip": lat_stats(bare_rtt),
        "floor": floor_stats,
        "tool_call_vs_floor": {p: round(tool_call[f"{p}_ms"] / floor_stats[f"{p}_ms"], 3) for p in ("p50", "p95")},
        # What mcpower's server adds to the SDK's round trip and the search, call by call (median, ms).
        "layer_ms": round(statistics.median(t - f for t, f in zip(rtt, floor, strict=True)) * 1000, 3),
        "tool_call_all_datasets": lat_stats(rtt_all),
        "mean_results": round(results / calls, 1),
        "startup_pairs": runs,
        "startup_s": start,
        "startup_delta_s": paired,  # medians of the paired differences, mcpower - bare
        "startup_ratio": ratio,  # medians of the paired ratios
        "rss_mb": {"after_warm_up": mem_warm, f"after_{calls}_calls": mem_after},
        "cold_search": cold,
        "load_average": load_avg(),
    }
    rows = [
        ["tools/call knowledge_search (dataset given)", out["tool_call"]["p50_ms"], out["tool_call"]["p95_ms"]],
        [
            "  of which Registry.search (meta.duration_ms)",
            out["core_search_in_server"]["p50_ms"],
            out["core_search_in_server"]["p95_ms"],
        ],
        [
            "  a bare MCPServer's round trip, same result",
            out["bare_round_trip"]["p50_ms"],
            out["bare_round_trip"]["p95_ms"],
        ],
        ["  floor: that round trip + the search, call by call", floor_stats["p50_ms"], floor_stats["p95_ms"]],
        ["  tools/call x floor", out["tool_call_vs_floor"]["p50"], out["tool_call_vs_floor"]["p95"]],
        ["  mcpower's layer (median of tools/call - floor)", out["layer_ms"], None],
        [
            "tools/call knowledge_search (all datasets)",
            out["tool_call_all_datasets"]["p50_ms"],
            out["tool_call_all_datasets"]["p95_ms"],
        ],
    ]
    table(f"mcp: warm round trip over stdio, {calls} calls, ms", ["call", "p50", "p95"], rows)
    table(
        f"mcp: start-up, {runs} interleaved pairs, medians (s)",
        ["server", "spawn->initialize", "CPU by initialize", "spawn->first result"],
        [[k, v["initialize"], v["initialize_cpu"], v["first_call"]] for k, v in start.items()]
        + [["mcpower - bare (paired)", *(paired[k] for k in keys)]]
        + [["mcpower / bare (paired)", ratio["initialize"], ratio["initialize_cpu"], None]],
    )
    table(
        "mcp: server memory (MB)",
        ["when", "VmRSS", "VmHWM"],
        [[k, v.get("VmRSS"), v.get("VmHWM")] for k, v in out["rss_mb"].items()],
    )
    print(
        f"cold `mcpower search fastapi ...`: median {cold['median_s']:.2f} s of {runs} "
        f"(min {cold['min_s']:.2f}); torch imported: {cold['torch_imported']}; "
        f"heaviest imports: {', '.join(f'{n} {s:.2f}s' for n, s in cold['top_imports'][:5])}"
    )
    return out


def cold_search(root: Path, runs: int) -> dict[str, Any]:
    """Wall time of `mcpower search` in a fresh process, and whether it imported torch."""
    argv = [*mcpower_argv(), "search", "fastapi", "how do I declare a path parameter", "--datasets-dir", str(root)]
    times = []
    for i in range(runs + 1):
        t = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True)
        if i:  # the first run fills the page cache
            times.append(time.perf_counter() - t)
    probe = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "mcpower", *argv[argv.index("search") :]],
        check=True,
        capture_output=True,
        text=True,
    )
    modules: dict[str, float] = {}
    for line in probe.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            _, cumulative, name = line.split("|")
            if cumulative.strip().isdigit():
                modules[name.strip()] = int(cumulative.strip()) / 1e6
    top = sorted(((n, s) for n, s in modules.items() if "." not in n), key=lambda x: -x[1])[:8]
    heavy = ("torch", "sentence_transformers", "transformers")
    return {
        "median_s": round(statistics.median(times), 3),
        "min_s": round(min(times), 3),
        "runs_s": [round(t, 3) for t in times],
        "torch_imported": any(n.split(".")[0] in heavy for n in modules),
        "top_imports": [(n, round(s, 3)) for n, s in top],
    }
