"""A shared server under a runaway client: do the other callers keep their pace? (issue 22, rate limits)

    python benchmarks/team_load.py                 # 10 s phases, limited and unlimited servers
    python benchmarks/team_load.py --quick         # 5 s phases: well under 2 minutes
    python benchmarks/team_load.py --phase 8 --think 1.0 --no-unlimited   # calmer agents, limited server only

32 MCP sessions across 4 callers (4 tokens, 8 sessions each) against `serve --http` over the
FastAPI docs (`docs-fastapi/corpus`, packaged model; ingested on first use):

- alice, bob, carol: agents. Each session calls `knowledge_search`, then thinks for ``--think``
  seconds (0.5 by default, jittered), as an LLM agent does between tool calls (a busy one: ~2 calls a second).
- runaway: a loop. Its 8 sessions call back to back, never pause, and ignore 429 and Retry-After.
  It runs in a process of its own (as it would on another machine), so its client work does not
  slow the agents' clients.

Phases, in one run, on the same server: agents alone (A), agents with the runaway (B), agents alone
again (A'). Reported: the agents' calls/s and p95 latency per phase, the ratio B / mean(A, A')
(target >= 0.9), the runaway's calls and 429s, other errors (target 0), and `/metrics` against
the calls the clients made (tool calls by caller; 429s of the runaway). Then the same A and B on a
server without limits (`--rate-limit 0 --max-searches 0`), to show what the limits buy.

The server is `mcpower serve --http --tokens-file FILE` with the 4 callers' named tokens (made with
`mcpower token add NAME --datasets '*'`) and the default limits. Writes JSON to
benchmarks/results/team_load.json; the servers' logs and the tokens file beside it.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from suite.datasets import ensure_dataset
from suite.http_clients import DATASET, Client, Server
from suite.report import REPO, environment, load_avg, note, pct, table
from suite.server import MCP_QUERIES, mcpower_argv

CALLERS = ("alice", "bob", "carol", "runaway")
AGENTS = ("alice", "bob", "carol")
TOKENS: dict[str, str] = {}  # caller -> secret, from `mcpower token add` (the runaway's process: its environment)
SESSIONS_PER_CALLER = 8


# ---------------------------------------------------------------- clients


class Session(Client):
    """One MCP session of a caller over one keep-alive connection; its calls' outcomes by kind."""

    def __init__(self, port: int, caller: str) -> None:
        self.port, self.caller = port, caller
        super().__init__(port, TOKENS[caller], name="team")

    def search(self, query: str) -> str:
        """``ok``, ``tool_error`` (an isError result), ``429``, or what else went wrong."""
        self.next_id += 1
        arguments = {"query": query, "dataset": DATASET}
        message = {"jsonrpc": "2.0", "id": self.next_id, "method": "tools/call"}
        try:
            status, _, body = self._post({**message, "params": {"name": "knowledge_search", "arguments": arguments}})
        except (OSError, http.client.HTTPException) as e:
            self.conn.close()
            return f"{type(e).__name__}: {e}"
        if status == 429:
            return "429"
        if status != 200:
            return f"HTTP {status}: {body[:120]}"
        result = json.loads(body).get("result")
        return "tool_error" if result is None or result.get("isError") else "ok"

    def close(self) -> int | None:  # type: ignore[override]
        """End the session (DELETE); its HTTP status (a runaway's may be a 429 too)."""
        status = None
        try:
            self.conn.request("DELETE", "/mcp", headers=self.headers)
            response = self.conn.getresponse()
            response.read()
            status = response.status
        except (OSError, http.client.HTTPException):
            pass
        self.conn.close()
        return status


class Agents:
    """The agents' sessions, calling and thinking in threads until stopped; calls are stamped."""

    def __init__(self, port: int, think: float) -> None:
        self.think = think
        self.sessions = [Session(port, caller) for caller in AGENTS for _ in range(SESSIONS_PER_CALLER)]
        self.calls: list[tuple[float, float, str, str]] = []  # (sent, seconds, caller, outcome)
        self.stop = threading.Event()
        self._lock = threading.Lock()
        self.threads = [threading.Thread(target=self._loop, args=(s, i)) for i, s in enumerate(self.sessions)]

    def _loop(self, session: Session, i: int) -> None:
        rng = random.Random(i)
        self.stop.wait(rng.uniform(0, self.think))  # spread the sessions' first calls
        n = i
        while not self.stop.is_set():
            sent = time.perf_counter()
            outcome = session.search(MCP_QUERIES[n % len(MCP_QUERIES)])
            with self._lock:
                self.calls.append((sent, time.perf_counter() - sent, session.caller, outcome))
            n += 1
            self.stop.wait(self.think * rng.uniform(0.8, 1.2))

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def finish(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join()
        for s in self.sessions:
            s.close()

    def window(self, start: float, end: float) -> dict[str, Any]:
        """The agents' calls sent in [start, end)."""
        inside = [c for c in self.calls if start <= c[0] < end]
        ok = [c[1] * 1000 for c in inside if c[3] == "ok"]
        return {
            "calls": len(inside),
            "calls_per_s": round(len(ok) / (end - start), 2),
            "p50_ms": round(pct(ok, 50), 1),
            "p95_ms": round(pct(ok, 95), 1),
            "errors": len(inside) - len(ok),
        }


def runaway(port: int, seconds: float, token: str) -> None:
    """The runaway caller's sessions calling back to back for ``seconds`` (run in its own process);
    prints its outcomes as JSON."""
    TOKENS["runaway"] = token
    sessions = [Session(port, "runaway") for _ in range(SESSIONS_PER_CALLER)]
    outcomes: dict[str, int] = {}
    lock = threading.Lock()
    stop_at = time.perf_counter() + seconds

    def loop(s: Session, n: int) -> None:
        while time.perf_counter() < stop_at:
            outcome = s.search(MCP_QUERIES[n % len(MCP_QUERIES)])
            n += 1
            with lock:
                outcomes[outcome] = outcomes.get(outcome, 0) + 1

    threads = [threading.Thread(target=loop, args=(s, i)) for i, s in enumerate(sessions)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for s in sessions:
        if s.close() == 429:
            outcomes["429_close"] = outcomes.get("429_close", 0) + 1
    print(json.dumps(outcomes))


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    from prometheus_client.parser import text_string_to_metric_families

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", "/metrics", headers={"Authorization": f"Bearer {TOKENS['prom']}"})  # the scraper's own
    text = conn.getresponse().read().decode()
    conn.close()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }


# ---------------------------------------------------------------- a run


def phases(port: int, args: argparse.Namespace, with_return: bool) -> dict[str, Any]:
    """A, B (with the runaway), and A' on the server at ``port``; the agents call throughout."""
    warm = Session(port, "alice")
    warm_outcome = warm.search("warm up the model")  # loads the model and the dataset
    warm.close()
    agents = Agents(port, args.think)
    agents.start()
    time.sleep(args.think * 1.5)  # every session has made its first call
    marks = {"A": [time.perf_counter()]}
    time.sleep(args.phase)
    marks["A"].append(time.perf_counter())
    loop = subprocess.Popen(
        [sys.executable, __file__, "--runaway", str(port), "--seconds", str(args.phase + 1.0)],
        env={**os.environ, "TEAM_LOAD_TOKEN": TOKENS["runaway"]},  # not in argv, where `ps` shows it
        stdout=subprocess.PIPE,
        text=True,
    )
    time.sleep(0.5)  # its sessions are open and calling
    marks["B"] = [time.perf_counter()]
    time.sleep(args.phase)
    marks["B"].append(time.perf_counter())
    out, _ = loop.communicate(timeout=120)
    if with_return:
        time.sleep(1.0)
        marks["A2"] = [time.perf_counter()]
        time.sleep(args.phase)
        marks["A2"].append(time.perf_counter())
    agents.finish()
    result = {name: agents.window(*span) for name, span in marks.items()}
    alone = [result[p]["calls_per_s"] for p in ("A", "A2") if p in result]
    result["ratio"] = round(result["B"]["calls_per_s"] / statistics.fmean(alone), 3)
    result["runaway"] = json.loads(out)
    made: dict[str, dict[str, int]] = {"alice": {warm_outcome: 1}}
    for _, _, caller, outcome in agents.calls:
        made.setdefault(caller, {}).setdefault(outcome, 0)
        made[caller][outcome] += 1
    made["runaway"] = result["runaway"]
    result["made"] = made
    return result


def check_metrics(samples: dict[Any, float], made: dict[str, dict[str, int]]) -> dict[str, Any]:
    """/metrics against the calls the clients made: tool calls by caller, the runaway's 429s."""
    rows = {}
    for caller, outcomes in made.items():
        counted = sum(
            v
            for (name, labels), v in samples.items()
            if name == "mcpower_tool_calls_total" and ("caller", caller) in labels
        )
        refused = samples.get(("mcpower_rate_limited_total", (("caller", caller), ("limit", "rate"))), 0.0)
        refused += samples.get(("mcpower_rate_limited_total", (("caller", caller), ("limit", "searches"))), 0.0)
        calls = outcomes.get("ok", 0) + outcomes.get("tool_error", 0)
        seen = outcomes.get("429", 0) + outcomes.get("429_close", 0)  # tool calls, and the sessions' DELETEs
        rows[caller] = {
            "tool_calls_made": calls,
            "tool_calls_counted": int(counted),
            "429_seen": seen,
            "429_counted": int(refused),
            "equal": calls == int(counted) and seen == int(refused),
        }
    return rows


def run(args: argparse.Namespace) -> dict[str, Any]:
    env = environment()
    root = args.datasets_dir / "http"
    dataset = ensure_dataset(args.corpora / "docs-fastapi" / "corpus", root, DATASET)
    logs = args.out.parent
    logs.mkdir(parents=True, exist_ok=True)
    out: dict[str, Any] = {"environment": env, "dataset": dataset, "load_before": load_avg(), "settings": vars(args)}
    out["settings"] = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    tokens_file = logs / "team_load-tokens.json"
    tokens_file.unlink(missing_ok=True)
    for caller in CALLERS:  # named tokens, as an operator makes them: the secret is printed once
        made = subprocess.run(
            [*mcpower_argv(), "token", "add", caller, "--datasets", "*", "--tokens-file", str(tokens_file)],
            capture_output=True,
            text=True,
            check=True,
        )
        TOKENS[caller] = made.stdout.split()[0]
    scraper = [*mcpower_argv(), "token", "add", "prom", "--metrics", "--tokens-file", str(tokens_file)]
    TOKENS["prom"] = subprocess.run(scraper, capture_output=True, text=True, check=True).stdout.split()[0]
    servers = [("limited", True)] + ([("unlimited", False)] if args.unlimited else [])
    for i, (name, limited) in enumerate(servers):
        port = args.port + i
        argv = [*mcpower_argv(), "serve", "--http", "--port", str(port), "--datasets-dir", str(root)]
        argv += ["--tokens-file", str(tokens_file)] + ([] if limited else ["--rate-limit", "0", "--max-searches", "0"])
        server = Server(name, argv, port, logs / f"team_load-{name}.log")
        try:
            note(f"{name}: phases of {args.phase:g} s ...")
            result = phases(port, args, with_return=limited)
            if limited:
                result["metrics"] = check_metrics(scrape(port), result["made"])
            out[name] = result
        finally:
            server.stop()
    out["load_after"] = load_avg()
    return out


def show(out: dict[str, Any]) -> None:
    rows = []
    for name in ("limited", "unlimited"):
        if name not in out:
            continue
        r = out[name]
        for phase in ("A", "B", "A2"):
            if phase in r:
                p = r[phase]
                rows.append([f"{name} {phase}", p["calls_per_s"], p["p50_ms"], p["p95_ms"], p["errors"]])
        ran = r["runaway"]
        other = sum(v for k, v in ran.items() if k not in ("ok", "429", "429_close"))
        calls = sum(v for k, v in ran.items() if k != "429_close")
        rows.append(
            [f"{name} runaway", calls, "", "", f"429: {ran.get('429', 0)}, ok: {ran.get('ok', 0)}, other: {other}"]
        )
        rows.append([f"{name} ratio B/A", r["ratio"], "", "", ""])
    table("agents (24 sessions, 3 callers) calls/s by phase", ["phase", "calls/s", "p50 ms", "p95 ms", "errors"], rows)
    if "limited" in out:
        m = out["limited"]["metrics"]
        table(
            "/metrics against the calls made (limited server)",
            ["caller", "calls made", "counted", "429 seen", "429 counted", "equal"],
            [
                [c, v["tool_calls_made"], v["tool_calls_counted"], v["429_seen"], v["429_counted"], v["equal"]]
                for c, v in m.items()
            ],
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets-dir", type=Path, default=Path.home() / ".cache" / "mcpower" / "bench")
    parser.add_argument(
        "--corpora", type=Path, default=Path(os.environ.get("MCPOWER_BENCH_CORPORA", "/work/shared/bench"))
    )
    parser.add_argument("--phase", type=float, default=10.0, help="seconds per phase")
    parser.add_argument("--think", type=float, default=0.5, help="an agent's seconds between calls")
    parser.add_argument("--port", type=int, default=8795)
    parser.add_argument("--quick", action="store_true", help="5 s phases")
    parser.add_argument("--no-unlimited", dest="unlimited", action="store_false", help="skip the server without limits")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "team_load.json")
    parser.add_argument("--runaway", type=int, metavar="PORT", help=argparse.SUPPRESS)
    parser.add_argument("--seconds", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.runaway is not None:
        runaway(args.runaway, args.seconds, os.environ["TEAM_LOAD_TOKEN"])
        return
    if args.quick:
        args.phase = 5.0
    out = run(args)
    show(out)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    note(f"wrote {args.out}")


if __name__ == "__main__":
    main()
