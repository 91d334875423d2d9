"""Load over Streamable HTTP: N concurrent clients against `mcpower serve --http` and a bare SDK server.

    python benchmarks/http_load.py                         # N = 1, 8, 32; 10 s each; a 20,000-call soak
    python benchmarks/http_load.py --quick                 # 3 s per level, a 2,000-call soak: checks the harness
    python benchmarks/http_load.py --datasets-dir DIR --levels 1,8,32 --duration 10 --soak 20000

The dataset is the FastAPI docs (`docs-fastapi/corpus`, 155 pages), ingested with the packaged
model on first use. Two servers run side by side: `mcpower serve --http` over it, and a bare
`MCPServer` (the SDK's Streamable HTTP app under uvicorn, JSON responses, stateful sessions, as
mcpower runs it) whose `knowledge_search` tool does nothing: the transport's own ceiling on this
machine. The same clients drive both, level by level, alternating, so both see the same machine.

A client is a thread with one keep-alive `http.client` connection (stdlib: the client's own cost
stays small, and the same for both servers): it initializes a session, then calls
`knowledge_search` (a FastAPI question, `dataset` given) in a loop. After a warm-up, each level
is measured for `--duration` seconds. Reported per server and level: calls/s, latency p50 / p95 /
p99 (the tools/call round trip), errors (non-200, JSON-RPC errors, isError results), the server's
RSS and its CPU milliseconds per call. Also: the in-process search time (`mcpower.search.search`,
the same queries, no transport), RSS over a soak of `--soak` calls, and a SIGTERM sent while
clients are calling (exit code, seconds to exit, calls in flight that failed).

Targets (issue 12): 0 errors; calls/s at 32 clients >= 0.9 x 1 / (1 / bare calls/s + search
seconds per call); p95 at 1 client <= 1.5 x (bare p95 + search p95); RSS <= 400 MB and flat over
the soak. Writes JSON to benchmarks/results/http_load.json.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from suite.datasets import ensure_dataset
from suite.http_clients import DATASET, Client, Server, drive, serve_bare
from suite.report import REPO, environment, load_avg, note, pct, table
from suite.server import MCP_QUERIES, mcpower_argv

RSS_LIMIT_MB = 400.0
RSS_FLAT_MB = 20.0  # growth allowed over the soak, after its first tenth (caches filling up)


# ---------------------------------------------------------------- the parts of a run


def measure_search(root: Path, rounds: int) -> dict[str, Any]:
    """``mcpower.search.search`` in this process, as the tool calls it, over the same queries."""
    from mcpower import search
    from mcpower.registry import Registry
    from mcpower.results import SearchFilters
    from mcpower.server.tools import MAX_RESULTS_JSON_BYTES

    registry = Registry(root)

    def one(query: str) -> float:
        started = time.perf_counter()
        search.search(registry, query, dataset=DATASET, filters=SearchFilters(), max_bytes=MAX_RESULTS_JSON_BYTES)
        return time.perf_counter() - started

    for q in MCP_QUERIES:  # loads the store and the model
        one(q)
    cpu = time.process_time()  # every thread of this process: ONNX Runtime's own threads too
    ms = [one(q) * 1000 for _ in range(rounds) for q in MCP_QUERIES]
    cpu = time.process_time() - cpu
    return {
        "calls": len(ms),
        "cpu_ms_per_call": round(1000 * cpu / len(ms), 3),
        "mean_ms": round(statistics.fmean(ms), 3),
        "p50_ms": round(pct(ms, 50), 3),
        "p95_ms": round(pct(ms, 95), 3),
    }


def soak(server: Server, clients: int, calls: int) -> dict[str, Any]:
    """``calls`` searches by ``clients`` clients, with the server's RSS every tenth of the way."""
    samples: list[tuple[int, float]] = [(0, server.stat()["rss_mb"])]
    every = max(1, calls // 10)
    row = drive(
        server.port,
        clients,
        calls=calls,
        every=every,
        on_progress=lambda n: samples.append((n, server.stat()["rss_mb"])),
    )
    after_first_tenth = samples[1][1] if len(samples) > 1 else samples[0][1]
    return {
        **row,
        "rss_samples": samples,
        "rss_growth_mb": round(samples[-1][1] - after_first_tenth, 1),
        "hwm_mb": server.stat()["hwm_mb"],
    }


def sigterm(server: Server, clients: int, busy_seconds: float) -> dict[str, Any]:
    """SIGTERM while ``clients`` call in a loop: exit code, seconds to exit, calls in flight that failed."""
    sessions = [Client(server.port) for _ in range(clients)]
    calls: list[tuple[float, bool]] = []  # (sent, succeeded)
    stop = threading.Event()

    def loop(i: int) -> None:
        n = i
        while not stop.is_set():
            sent = time.perf_counter()
            try:
                ok = sessions[i].search(MCP_QUERIES[n % len(MCP_QUERIES)]) is None
            except (OSError, http.client.HTTPException):
                ok = False
            calls.append((sent, ok))
            n += 1
            if not ok:
                return  # the server has closed this connection: stop, as a client would reconnect elsewhere

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    stop.wait(busy_seconds)
    signalled = time.perf_counter()
    server.proc.send_signal(signal.SIGTERM)
    code = server.proc.wait(timeout=60)
    exited = time.perf_counter()
    stop.set()
    for t in threads:
        t.join()
    for s in sessions:
        s.conn.close()
    before = [ok for sent, ok in calls if sent < signalled]
    return {
        "exit_code": code,
        "seconds_to_exit": round(exited - signalled, 3),
        "calls_sent_before_signal": len(before),
        "of_those_failed": before.count(False),
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    env = environment()  # before anything runs: the commit measured
    root = args.datasets_dir / "http"
    dataset = ensure_dataset(args.corpora / "docs-fastapi" / "corpus", root, DATASET)
    note("timing the search in process ...")
    measured = subprocess.run(
        [sys.executable, __file__, "--measure-search", str(root), "--rounds", str(args.search_rounds)],
        capture_output=True,
        text=True,
        check=True,
    )
    in_process = json.loads(measured.stdout)
    logs = args.out.parent
    logs.mkdir(parents=True, exist_ok=True)
    bare = Server(
        "bare",
        [sys.executable, __file__, "--serve-bare", str(args.port + 1)],
        args.port + 1,
        logs / "http_load-bare.log",
    )
    serve = [*mcpower_argv(), "serve", "--http", "--port", str(args.port), "--datasets-dir", str(root)]
    serve += ["--rate-limit", "0", "--max-searches", "0"]  # one caller at full speed: the transport's ceiling
    mcpower = Server("mcpower", serve, args.port, logs / "http_load-mcpower.log")
    servers = {"bare": bare, "mcpower": mcpower}
    load_before = load_avg()
    try:
        note("warming up (mcpower loads the model and the dataset after the first handshake) ...")
        for srv in servers.values():
            drive(srv.port, 1, calls=2 * len(MCP_QUERIES))
        levels: list[dict[str, Any]] = []
        for i, clients in enumerate(args.levels):
            order = ["bare", "mcpower"] if i % 2 == 0 else ["mcpower", "bare"]
            for name in order:
                srv = servers[name]
                cpu_before = srv.stat()["cpu_s"]
                note(f"{name}: {clients} clients, {args.duration:g} s ...")
                row = drive(srv.port, clients, args.duration, args.warmup)
                stat = srv.stat()
                cpu = stat["cpu_s"] - cpu_before  # the warm-up's calls included: per call, an estimate
                levels.append(
                    {
                        "server": name,
                        **row,
                        "rss_mb": stat["rss_mb"],
                        "cpu_ms_per_call": round(1000 * cpu / max(1, row["calls"]), 2),
                    }
                )
        note(f"soak: {args.soak} calls by {args.soak_clients} clients ...")
        soaked = soak(mcpower, args.soak_clients, args.soak)
        note("SIGTERM while 8 clients call ...")
        stopped = sigterm(mcpower, 8, 2.0)
    finally:
        codes = {name: srv.stop() for name, srv in servers.items()}
    return {
        "environment": env,
        "load_average": {"before": load_before, "after": load_avg()},
        "dataset": dataset,
        "search_in_process": in_process,
        "levels": levels,
        "soak": soaked,
        "sigterm": stopped,
        "exit_codes": codes,
        "targets": targets(levels, in_process, soaked, stopped, args.levels),
    }


def targets(
    levels: list[dict[str, Any]], search: dict[str, Any], soaked: dict[str, Any], stopped: dict[str, Any], n: list[int]
) -> list[dict[str, Any]]:
    def at(server: str, clients: int) -> dict[str, Any]:
        return next(r for r in levels if r["server"] == server and r["clients"] == clients)

    out = [{"target": "0 errors", "value": sum(r["errors"] for r in levels) + soaked["errors"], "limit": 0}]
    out[0]["pass"] = out[0]["value"] == 0
    top, low = max(n), min(n)
    bare_top, ours_top = at("bare", top)["calls_per_s"], at("mcpower", top)["calls_per_s"]
    floor = 0.9 / (1 / bare_top + search["mean_ms"] / 1000)
    out.append(
        {"target": f"calls/s at {top} clients", "value": ours_top, "limit": round(floor, 1), "pass": ours_top >= floor}
    )
    ceiling = 1.5 * (at("bare", low)["p95_ms"] + search["p95_ms"])
    p95 = at("mcpower", low)["p95_ms"]
    out.append({"target": f"p95 ms at {low} client", "value": p95, "limit": round(ceiling, 2), "pass": p95 <= ceiling})
    rss = max([r["rss_mb"] for r in levels if r["server"] == "mcpower"] + [soaked["hwm_mb"]])
    out.append({"target": "peak RSS MB", "value": rss, "limit": RSS_LIMIT_MB, "pass": rss <= RSS_LIMIT_MB})
    growth = soaked["rss_growth_mb"]
    out.append(
        {
            "target": f"RSS growth MB over {soaked['calls']} calls",
            "value": growth,
            "limit": RSS_FLAT_MB,
            "pass": growth <= RSS_FLAT_MB,
        }
    )
    graceful = stopped["exit_code"] == 0 and stopped["of_those_failed"] == 0 and stopped["seconds_to_exit"] <= 5.5
    summary = (
        f"exit {stopped['exit_code']} in {stopped['seconds_to_exit']} s, "
        f"{stopped['of_those_failed']} of {stopped['calls_sent_before_signal']} calls failed"
    )
    out.append({"target": "SIGTERM: exit 0 within 5 s, no call in flight lost", "value": summary, "pass": graceful})
    return out


def render(result: dict[str, Any]) -> None:
    s = result["search_in_process"]
    print(
        f"\nsearch in process ({s['calls']} calls): mean {s['mean_ms']} ms, p50 {s['p50_ms']} ms, "
        f"p95 {s['p95_ms']} ms, CPU {s.get('cpu_ms_per_call')} ms per call"
    )
    headers = ["server", "clients", "calls/s", "p50 ms", "p95 ms", "p99 ms", "errors", "RSS MB", "CPU ms/call"]
    rows = [
        [
            r["server"],
            r["clients"],
            r["calls_per_s"],
            r["p50_ms"],
            r["p95_ms"],
            r["p99_ms"],
            r["errors"],
            r["rss_mb"],
            r["cpu_ms_per_call"],
        ]
        for r in result["levels"]
    ]
    table("Streamable HTTP load (knowledge_search, FastAPI docs)", headers, rows)
    soaked = result["soak"]
    samples = ", ".join(f"{n}: {mb:g}" for n, mb in soaked["rss_samples"])
    print(
        f"\nsoak: {soaked['calls']} calls, {soaked['calls_per_s']} calls/s, {soaked['errors']} errors; RSS MB by calls: {samples}"
    )
    print(f"SIGTERM: {result['sigterm']}")
    print(f"load average before / after: {result['load_average']['before']} / {result['load_average']['after']}")
    table(
        "targets",
        ["target", "value", "limit", ""],
        [
            [t["target"], str(t["value"]), t.get("limit", ""), "pass" if t["pass"] else "FAIL"]
            for t in result["targets"]
        ],
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets-dir", type=Path, default=Path.home() / ".cache" / "mcpower" / "bench")
    parser.add_argument(
        "--corpora", type=Path, default=Path(os.environ.get("MCPOWER_BENCH_CORPORA", "/work/shared/bench"))
    )
    parser.add_argument("--levels", type=lambda v: [int(x) for x in v.split(",")], default=[1, 8, 32])
    parser.add_argument("--duration", type=float, default=10.0, help="measured seconds per server and level")
    parser.add_argument("--warmup", type=float, default=2.0, help="unmeasured seconds before each level")
    parser.add_argument("--soak", type=int, default=20_000, help="calls in the memory soak")
    parser.add_argument("--soak-clients", type=int, default=8)
    parser.add_argument("--search-rounds", type=int, default=8, help="rounds over the queries, in process")
    parser.add_argument("--port", type=int, default=8791, help="mcpower's port; the bare server takes the next")
    parser.add_argument("--quick", action="store_true", help="3 s levels, a 2,000-call soak")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "http_load.json")
    parser.add_argument("--serve-bare", type=int, metavar="PORT", help=argparse.SUPPRESS)
    parser.add_argument("--measure-search", type=Path, metavar="ROOT", help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=8, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_bare is not None:
        serve_bare(args.serve_bare)
        return
    if args.measure_search is not None:
        print(json.dumps(measure_search(args.measure_search, args.rounds)))
        return
    if args.quick:
        args.duration, args.warmup, args.soak, args.search_rounds = 3.0, 1.0, 2000, 2
    result = run(args)
    render(result)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    note(f"wrote {args.out}")
    if not all(t["pass"] for t in result["targets"]):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
