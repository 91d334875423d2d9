"""Startup benchmark for MCP stdio servers: spawn -> initialize response.

Four modes:

    python benchmarks/bare_server.py serve
        Run a bare MCPServer (one trivial tool) over stdio. This is the
        baseline: what the SDK + interpreter cost before any project code.

    python benchmarks/bare_server.py serve-result FILE
        Run a bare MCPServer whose one tool, ``result``, answers every call with
        the tools/call result in FILE (JSON, read once at start): the SDK's own
        round trip for an answer of that size, the floor of a warm tool call
        (benchmarks/suite/server.py).

    python benchmarks/bare_server.py measure [--cmd "CMD ..."] [-n 10] [--warmup 1]
        Spawn CMD (default: this file's ``serve`` with the current interpreter)
        N times; for each run send ``initialize`` as one JSON line on stdin and
        time until the matching response line arrives on stdout. Then send
        ``notifications/initialized``, optionally ``tools/list`` (--tools-list),
        close stdin and time the exit. Prints median / p95 / min / max.
        Example: python benchmarks/bare_server.py measure --cmd "mcpower serve --stdio"

    python benchmarks/bare_server.py pairs [--cmd "CMD ..."] [-n 7] [--warmup 1]
        The start-up target (docs/benchmarks.md): spawn -> initialize response of CMD
        (default: `mcpower serve --stdio` next to this interpreter) against this file's
        bare ``serve``, in N interleaved pairs (which of the two starts first alternates);
        prints both medians, the median of the paired differences (CMD - bare) and of
        the paired ratios, and the load average before and after; the same for the CPU
        seconds each process had used when it answered (from /proc: less swayed by load).
        mcpower is byte-compiled first, as `pip install` does.
        Example: python benchmarks/bare_server.py pairs --cmd "mcpower serve --stdio --datasets-dir DIR"

The measuring side imports only the standard library (the mcp import happens
inside ``serve``), so the numbers are the server's, not the client's.
p95 is nearest-rank: with n <= 20 it is the maximum.
"""

from __future__ import annotations

import argparse
import compileall
import importlib.util
import json
import math
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

PROTOCOL_VERSION = "2025-11-25"
Pair = dict[str, tuple[float, float]]  # "init" / "init_cpu" -> (server, bare) seconds


def serve() -> None:
    from mcp.server import MCPServer  # imported here so `measure` stays stdlib-only

    server = MCPServer("bare")

    @server.tool()
    def echo(text: str) -> str:
        """Return the text unchanged."""
        return text

    server.run("stdio")


def serve_result(path: str) -> None:
    from mcp.server import MCPServer
    from mcp.types import CallToolResult

    with open(path, encoding="utf-8") as f:
        answer = CallToolResult.model_validate(json.load(f))
    server = MCPServer("bare")

    def result() -> CallToolResult:
        """Return the recorded result."""
        return answer

    # This module's annotations are strings (its __future__ import) naming a class imported here,
    # not in the module: the SDK reads the real one, which passes the result through as it is.
    result.__annotations__["return"] = CallToolResult
    server.tool()(result)
    server.run("stdio")


def _line(obj: dict[str, object]) -> bytes:
    return (json.dumps(obj, separators=(",", ":")) + "\n").encode()


def _read_response(proc: subprocess.Popen[bytes], want_id: int, deadline: float) -> tuple[dict[str, object], int]:
    """Read stdout lines until the JSON-RPC response with id ``want_id``; count non-JSON lines."""
    assert proc.stdout is not None
    junk = 0
    while True:
        if time.monotonic() > deadline:
            raise TimeoutError(f"no response to id {want_id}")
        raw = proc.stdout.readline()
        if not raw:
            raise EOFError(f"server closed stdout before answering id {want_id} (rc={proc.poll()})")
        try:
            msg = json.loads(raw)
        except ValueError:
            junk += 1  # a stray print on stdout: a protocol violation worth reporting
            continue
        if isinstance(msg, dict) and msg.get("id") == want_id:
            return msg, junk


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds the process has used so far, all threads (Linux; NaN elsewhere)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return math.nan
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def _one_run(argv: list[str], timeout: float, tools_list: bool) -> dict[str, float | int]:
    with tempfile.TemporaryFile() as errf:
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errf)
        assert proc.stdin is not None
        deadline = time.monotonic() + timeout
        try:
            # Written before the server is up: the pipe buffers it, as a real client's would.
            proc.stdin.write(
                _line(
                    {
                        "jsonrpc": "2.0",
                        "id": 1,
                        "method": "initialize",
                        "params": {
                            "protocolVersion": PROTOCOL_VERSION,
                            "capabilities": {},
                            "clientInfo": {"name": "bare-bench", "version": "0"},
                        },
                    }
                )
            )
            proc.stdin.flush()
            resp, junk = _read_response(proc, 1, deadline)
            t_init = time.perf_counter() - t0
            cpu_init = _cpu_seconds(proc.pid)
            if "result" not in resp:
                raise RuntimeError(f"initialize failed: {resp}")
            proc.stdin.write(_line({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            result: dict[str, float | int] = {"init": t_init, "init_cpu": cpu_init, "junk": junk}
            if tools_list:
                proc.stdin.write(_line({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))
                proc.stdin.flush()
                resp, junk2 = _read_response(proc, 2, deadline)
                result["tools_list"] = time.perf_counter() - t0
                result["junk"] = junk + junk2
            proc.stdin.flush()
            t_close = time.perf_counter()
            proc.stdin.close()
            try:
                proc.wait(timeout=max(1.0, deadline - time.monotonic()))
                result["exit"] = time.perf_counter() - t_close
                result["rc"] = proc.returncode
            except subprocess.TimeoutExpired:
                result["exit"] = math.nan
                result["rc"] = -999
            return result
        except BaseException:
            errf.seek(0)
            sys.stderr.write(errf.read().decode(errors="replace")[-2000:])
            raise
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def _stats(values: list[float]) -> str:
    vals = sorted(v for v in values if not math.isnan(v))
    if not vals:
        return "n/a"
    p95 = vals[max(0, math.ceil(0.95 * len(vals)) - 1)]

    def ms(v: float) -> str:
        return f"{v * 1000:.0f}"

    return (
        f"median {ms(statistics.median(vals))} ms  p95 {ms(p95)} ms  "
        f"min {ms(vals[0])} ms  max {ms(vals[-1])} ms  (n={len(vals)})"
    )


def measure(argv: list[str], runs: int, warmup: int, timeout: float, tools_list: bool) -> int:
    print(f"command: {shlex.join(argv)}")
    for _ in range(warmup):
        _one_run(argv, timeout, tools_list)  # fills the page cache and __pycache__
    results = [_one_run(argv, timeout, tools_list) for _ in range(runs)]
    print(f"spawn -> initialize response: {_stats([r['init'] for r in results])}")
    if tools_list:
        print(f"spawn -> tools/list response: {_stats([r['tools_list'] for r in results])}")
    print(f"stdin EOF -> process exit:    {_stats([r['exit'] for r in results])}")
    rcs = sorted({int(r["rc"]) for r in results})
    junk = sum(int(r["junk"]) for r in results)
    print(f"exit codes: {rcs}; non-JSON stdout lines: {junk}")
    return 0 if rcs == [0] and junk == 0 else 1


def pairs(argv: list[str], bare: list[str], n: int, warmup: int, timeout: float) -> list[Pair]:
    """Spawn -> initialize of ``argv`` and ``bare`` in ``n`` interleaved pairs, after ``warmup``
    discarded pairs; which of the two starts first alternates from pair to pair. Each pair holds
    (server, bare) for the wall seconds ("init") and the CPU seconds used by then ("init_cpu")."""
    runs: list[Pair] = []
    for i in range(warmup + n):
        first, second = (argv, bare) if i % 2 == 0 else (bare, argv)
        a, b = _one_run(first, timeout, False), _one_run(second, timeout, False)
        if i >= warmup:
            server, base = (a, b) if first is argv else (b, a)
            runs.append({k: (float(server[k]), float(base[k])) for k in ("init", "init_cpu")})
    return runs


def paired_summary(runs: list[tuple[float, float]]) -> dict[str, float]:
    """Medians of each side, of the paired differences (server - bare) and of the paired ratios."""
    diffs = [m - b for m, b in runs]
    return {
        "median_s": round(statistics.median(m for m, _ in runs), 4),
        "bare_median_s": round(statistics.median(b for _, b in runs), 4),
        "median_diff_s": round(statistics.median(diffs), 4),
        "min_diff_s": round(min(diffs), 4),
        "max_diff_s": round(max(diffs), 4),
        "median_ratio": round(statistics.median(m / b for m, b in runs), 3),
    }


def _load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def compile_mcpower() -> None:
    """Byte-compile mcpower, as `pip install` does: an editable install under PYTHONDONTWRITEBYTECODE=1
    would compile its modules from source in every process, which the SDK's (installed by pip) never do."""
    spec = importlib.util.find_spec("mcpower")  # finds the package without importing it
    for folder in (spec.submodule_search_locations or []) if spec else []:
        compileall.compile_dir(folder, quiet=1)


def print_pairs(argv: list[str], n: int, warmup: int, timeout: float) -> int:
    bare = [sys.executable, os.path.abspath(__file__), "serve"]
    compile_mcpower()
    print(f"command: {shlex.join(argv)}\nbare:    {shlex.join(bare)}\nload average before: {_load()}")
    runs = pairs(argv, bare, n, warmup, timeout)
    print(f"load average after:  {_load()}")
    for run in runs:
        (m, b), (mc, bc) = run["init"], run["init_cpu"]
        print(
            f"  pair: {m * 1000:.0f} ms vs bare {b * 1000:.0f} ms ({(m - b) * 1000:+.0f} ms); CPU {mc:.2f} vs {bc:.2f} s"
        )
    for key, what in (("init", "spawn -> initialize"), ("init_cpu", "CPU used by initialize")):
        r = paired_summary([run[key] for run in runs])
        print(
            f"{what}, {n} interleaved pairs: median {r['median_s'] * 1000:.0f} ms vs bare "
            f"{r['bare_median_s'] * 1000:.0f} ms; paired difference median {r['median_diff_s'] * 1000:+.0f} ms "
            f"(min {r['min_diff_s'] * 1000:+.0f}, max {r['max_diff_s'] * 1000:+.0f}); "
            f"paired ratio median {r['median_ratio']:.2f}x"
        )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="mode", required=True)
    sub.add_parser("serve", help="run the bare server over stdio")
    r = sub.add_parser("serve-result", help="run a bare server answering every call with a recorded result")
    r.add_argument("file", help="a tools/call result, as JSON")
    m = sub.add_parser("measure", help="time spawn -> initialize response")
    m.add_argument("--cmd", help="server command line (default: this file's `serve`)")
    m.add_argument("-n", "--runs", type=int, default=10)
    m.add_argument("--warmup", type=int, default=1)
    m.add_argument("--timeout", type=float, default=60.0, help="seconds per run")
    m.add_argument("--tools-list", action="store_true", help="also time the first tools/list")
    p = sub.add_parser("pairs", help="spawn -> initialize of CMD against the bare server, interleaved pairs")
    p.add_argument("--cmd", help="server command line (default: `mcpower serve --stdio` next to this interpreter)")
    p.add_argument("-n", "--pairs", type=int, default=7)
    p.add_argument("--warmup", type=int, default=1, help="discarded pairs first (page cache, __pycache__)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per run")
    args = parser.parse_args()
    if args.mode == "serve":
        serve()
        return 0
    if args.mode == "serve-result":
        serve_result(args.file)
        return 0
    if args.mode == "pairs":
        mcpower = os.path.join(os.path.dirname(sys.executable), "mcpower")
        argv = shlex.split(args.cmd) if args.cmd else [mcpower, "serve", "--stdio"]
        return print_pairs(argv, args.pairs, args.warmup, args.timeout)
    argv = shlex.split(args.cmd) if args.cmd else [sys.executable, os.path.abspath(__file__), "serve"]
    return measure(argv, args.runs, args.warmup, args.timeout, args.tools_list)


if __name__ == "__main__":
    sys.exit(main())
