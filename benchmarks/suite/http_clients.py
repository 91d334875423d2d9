"""Streamable HTTP load, the moving parts: a bare SDK server, server processes, MCP sessions over
keep-alive `http.client` connections, and the clients' loop (benchmarks/http_load.py runs them)."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from suite.report import pct
from suite.server import MCP_QUERIES

PROTOCOL_VERSION = "2025-11-25"
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
DATASET = "fastapi"


# ---------------------------------------------------------------- the bare server


def serve_bare(port: int) -> None:
    """A bare MCPServer over Streamable HTTP with a tool that does nothing, run as mcpower runs its app."""
    import uvicorn
    from mcp.server import MCPServer

    server = MCPServer(name="bare", log_level="WARNING")

    @server.tool(name="knowledge_search")
    async def knowledge_search(query: str, dataset: str | None = None) -> str:
        return "ok"

    app = server.streamable_http_app(json_response=True, max_sessions=1000)
    config = uvicorn.Config(app, host="127.0.0.1", port=port, lifespan="on", access_log=False, log_level="warning")
    uvicorn.Server(config).run()


# ---------------------------------------------------------------- servers and clients


class Server:
    """A server subprocess listening on 127.0.0.1:``port``; its stderr goes to ``log``."""

    def __init__(self, name: str, argv: list[str], port: int, log: Path) -> None:
        self.name, self.port = name, port
        self._log = open(log, "wb")  # noqa: SIM115 - closed in stop()
        env = {k: v for k, v in os.environ.items() if not k.startswith("MCPOWER_")}
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._log, env=env
        )
        deadline = time.monotonic() + 120
        while True:  # ready when /healthz (mcpower) or any HTTP answer (bare) comes back
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                conn.request("GET", "/healthz")
                conn.getresponse().read()
                conn.close()
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"{name} did not start; see {log}") from None
                time.sleep(0.2)

    def stat(self) -> dict[str, float]:
        """RSS and peak RSS in MB, and CPU seconds so far."""
        status = dict(line.split(":", 1) for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines())
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        return {
            "rss_mb": round(int(status["VmRSS"].split()[0]) / 1024, 1),
            "hwm_mb": round(int(status["VmHWM"].split()[0]) / 1024, 1),
            "cpu_s": (int(fields[11]) + int(fields[12])) / ticks,
        }

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self._log.close()
        return code


class Client:
    """One MCP session over one keep-alive connection (sending ``token`` as its bearer token if given)."""

    def __init__(self, port: int, token: str | None = None, name: str = "load") -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        self.headers = dict(HEADERS) | ({"Authorization": f"Bearer {token}"} if token is not None else {})
        init = {"protocolVersion": PROTOCOL_VERSION, "capabilities": {}, "clientInfo": {"name": name, "version": "1"}}
        status, headers, body = self._post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init})
        if status != 200 or "result" not in body:
            raise RuntimeError(f"initialize failed: {status} {body!r:.200}")
        self.headers |= {"mcp-session-id": headers["mcp-session-id"], "mcp-protocol-version": PROTOCOL_VERSION}
        self._post({"jsonrpc": "2.0", "method": "notifications/initialized"})
        self.next_id = 0

    def _post(self, message: dict[str, Any]) -> tuple[int, dict[str, str], str]:
        self.conn.request("POST", "/mcp", body=json.dumps(message), headers=self.headers)
        response = self.conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read().decode()

    def search(self, query: str) -> str | None:
        """None on success, else what went wrong."""
        self.next_id += 1
        arguments = {"query": query, "dataset": DATASET}
        message = {"jsonrpc": "2.0", "id": self.next_id, "method": "tools/call"}
        status, _, body = self._post({**message, "params": {"name": "knowledge_search", "arguments": arguments}})
        if status != 200:
            return f"HTTP {status}: {body[:200]}"
        result = json.loads(body).get("result")
        if result is None or result.get("isError"):
            return body[:300]
        return None

    def close(self) -> None:
        """End the session (DELETE), so sessions do not pile up towards the server's cap."""
        try:
            self.conn.request("DELETE", "/mcp", headers=self.headers)
            self.conn.getresponse().read()
        except (OSError, http.client.HTTPException):
            pass
        self.conn.close()


def drive(
    port: int,
    clients: int,
    seconds: float = 0.0,
    warmup: float = 0.0,
    calls: int = 0,
    every: int = 0,
    on_progress: Any = None,
) -> dict[str, Any]:
    """``clients`` threads calling for ``warmup`` + ``seconds``, or until ``calls`` calls are made
    (then ``on_progress(done)`` runs after every ``every`` of them)."""
    sessions = [Client(port) for _ in range(clients)]
    latencies: list[list[float]] = [[] for _ in sessions]
    errors: list[str] = []
    start = time.perf_counter()
    measure_from, stop_at = start + warmup, start + warmup + seconds
    counter = {"taken": 0, "done": 0}
    lock = threading.Lock()

    def loop(i: int) -> None:
        n = i
        while True:
            sent = time.perf_counter()
            with lock:
                if (calls and counter["taken"] >= calls) or (not calls and sent >= stop_at):
                    return
                counter["taken"] += 1
            try:
                problem = sessions[i].search(MCP_QUERIES[n % len(MCP_QUERIES)])
            except (OSError, http.client.HTTPException) as e:
                problem = f"{type(e).__name__}: {e}"
            n += 1
            if problem is not None:
                errors.append(problem)
            elif calls or sent >= measure_from:
                latencies[i].append(time.perf_counter() - sent)
            with lock:
                counter["done"] += 1
                report = every and counter["done"] % every == 0
            if report and on_progress is not None:
                on_progress(counter["done"])

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - (start if calls else measure_from)
    for s in sessions:
        s.close()
    ms = [x * 1000 for per in latencies for x in per]
    return {
        "clients": clients,
        "calls": len(ms),
        "seconds": round(elapsed, 2),
        "calls_per_s": round(len(ms) / elapsed, 1),
        "p50_ms": round(pct(ms, 50), 2),
        "p95_ms": round(pct(ms, 95), 2),
        "p99_ms": round(pct(ms, 99), 2),
        "errors": len(errors),
        "error_samples": errors[:3],
    }
