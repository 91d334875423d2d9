"""Load: concurrent MCP clients searching one dataset while an ingest keeps republishing it.

    python benchmarks/load.py                      # 10 clients x 1,000 searches, fake embedder
    python benchmarks/load.py --clients 3 --searches 50 --min-republishes 2
    python benchmarks/load.py --real-model         # the packaged model, for ingest and queries

Each client is its own `mcpower serve --stdio` process over the same datasets folder, driven by a
stdlib JSON-lines client in a thread of this process. Meanwhile the dataset is re-ingested in a
loop, alternating between two versions of a corpus: every chunk of v1 holds the word
"alphaversion", every chunk of v2 "betaversion" (tests/republish_fixtures.py). Every search must
succeed and come wholly from one version.

Reported: searches, errors (JSON-RPC errors, isError results, timeouts), wrong results (a result
from neither version, a response mixing both, or an empty one), stale reads (a version older than
the last completed republish while no republish was running), latency of the tools/call round trip
(p50 / p95 / p99, nearest rank), and republishes. By default the fake embedder (words hashed into
a vector) runs inside the real CLI through the tests' launcher, so the numbers measure mcpower and
the MCP stack, not a model. Prints a table; writes JSON to benchmarks/results/load.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import select
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
TESTS_DIR = BENCH_DIR.parent / "tests"
sys.path.insert(0, str(TESTS_DIR))

from republish_fixtures import MARKERS, QUERY, version_of, write_versioned_corpus  # noqa: E402
from server_fixtures import PROTOCOL_VERSION, write_launcher  # noqa: E402

DATASET = "load"
REQUEST_TIMEOUT = 60.0  # seconds; a search slower than this counts as an error


class Client:
    """One `mcpower serve --stdio` process and a blocking JSON-lines client for it."""

    def __init__(self, command: list[str], env: dict[str, str], log: Path) -> None:
        self._log = open(log, "wb")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, env=env)
        self._buffer = b""
        self._id = 0

    def request(self, method: str, params: dict[str, Any], timeout: float = REQUEST_TIMEOUT) -> dict[str, Any]:
        """The response to one request (notifications in between are skipped)."""
        assert self.proc.stdin is not None
        self._id += 1
        message = {"jsonrpc": "2.0", "id": self._id, "method": method, "params": params}
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()
        deadline = time.monotonic() + timeout
        while True:
            response = json.loads(self._line(deadline))
            if response.get("id") == self._id:
                return response  # type: ignore[no-any-return]

    def notify(self, method: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"jsonrpc": "2.0", "method": method}).encode() + b"\n")
        self.proc.stdin.flush()

    def _line(self, deadline: float) -> bytes:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError("no response in time")
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise EOFError("the server closed stdout")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line

    def initialize(self) -> None:
        params = {
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "mcpower-load", "version": "1"},
        }
        response = self.request("initialize", params, timeout=120)
        assert "result" in response, response
        self.notify("notifications/initialized")

    def search(self) -> dict[str, Any]:
        arguments = {"query": QUERY, "dataset": DATASET, "top_k": 10}
        return self.request("tools/call", {"name": "knowledge_search", "arguments": arguments})

    def close(self) -> int:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.close()
            code = self.proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            code = self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._log.close()
        return code


@dataclass
class Search:
    sent: float
    received: float
    outcome: str  # "v1", "v2", "error", or a wrong answer: "mixed", "none", "empty"
    detail: str = ""


@dataclass
class Republish:
    version: str
    started: float
    finished: float
    ok: bool


@dataclass
class LoadReport:
    clients: int
    searches_per_client: int
    model: str
    chunks_per_version: int
    searches: int = 0
    errors: int = 0
    wrong: int = 0
    wrong_kinds: dict[str, int] = field(default_factory=dict)
    stale: int = 0
    versions_seen: dict[str, int] = field(default_factory=dict)
    republishes: int = 0
    republish_failures: int = 0
    republish_seconds_mean: float = 0.0
    latency_ms: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    searches_per_second: float = 0.0
    server_exit_codes: list[int] = field(default_factory=list)
    error_samples: list[str] = field(default_factory=list)


def classify(response: dict[str, Any]) -> tuple[str, str]:
    if "error" in response:
        return "error", json.dumps(response["error"])[:300]
    result = response.get("result") or {}
    if result.get("isError"):
        return "error", json.dumps(result.get("content"))[:300]
    hits = (result.get("structuredContent") or {}).get("results", [])
    outcome = version_of(hits)
    return outcome, "" if outcome in MARKERS else json.dumps(hits)[:300]


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile of ``values`` (sorted here)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)] if ordered else float("nan")


def run_load(
    clients: int = 10,
    searches: int = 1000,
    republish_every: float = 2.0,
    min_republishes: int = 3,
    real_model: bool = False,
    files: int = 40,
    workdir: Path | None = None,
    log: Any = None,
) -> LoadReport:
    """Run the load and return its report; ``min_republishes`` keeps clients searching until that many happened."""
    with tempfile.TemporaryDirectory(prefix="mcpower-load-") as tmp:
        root = workdir or Path(tmp)
        return _run(root, clients, searches, republish_every, min_republishes, real_model, files, log)


def _say(log: Any, text: str) -> None:
    if log is not None:
        print(text, file=log, flush=True)


def _run(
    root: Path,
    n_clients: int,
    searches: int,
    republish_every: float,
    min_republishes: int,
    real_model: bool,
    files: int,
    log: Any,
) -> LoadReport:
    root.mkdir(parents=True, exist_ok=True)
    sources = {v: write_versioned_corpus(root / "src" / v, v, files=files) for v in ("v1", "v2")}
    datasets = root / "datasets"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCPOWER_")}
    env.pop("PYTHONPATH", None)
    env["HF_HUB_OFFLINE"] = "1"
    if not real_model:
        env["MCPOWER_ALLOWED_MODELS"] = "fake-hash-embedder"  # the launcher's fake stands in for the model
    mcpower = [sys.executable, "-m", "mcpower"] if real_model else [sys.executable, str(write_launcher(root))]

    def ingest(version: str) -> bool:
        command = [*mcpower, "ingest", str(sources[version]), "--id", DATASET, "--name", "Load test"]
        done = subprocess.run(
            # v1 and v2 are two folders: --replace rebuilds the one dataset from each in turn
            [*command, "--datasets-dir", str(datasets), "--quiet", "--wait", "--replace"],
            capture_output=True,
            env=env,
            check=False,
        )
        if done.returncode != 0:
            _say(log, f"ingest of {version} failed: {done.stderr.decode(errors='replace')[-500:]}")
        return done.returncode == 0

    if not ingest("v1"):
        raise SystemExit("the first ingest failed")
    chunks = json.loads((datasets / DATASET / "manifest.json").read_text())["counts"]["chunks"]
    report = LoadReport(n_clients, searches, "all-MiniLM-L6-v2 (onnx)" if real_model else "fake", chunks)
    _say(log, f"starting {n_clients} servers ...")
    servers = [
        Client([*mcpower, "serve", "--stdio", "--datasets-dir", str(datasets)], env, root / f"server-{i}.log")
        for i in range(n_clients)
    ]
    try:
        for server in servers:
            server.initialize()
        for server in servers:  # loads the store and the query model; not measured
            outcome, detail = classify(server.search())
            if outcome != "v1":
                raise SystemExit(f"warm-up search answered {outcome}: {detail}")
        _say(log, f"{n_clients} servers ready; searching while republishing every {republish_every:g} s")

        published: list[Republish] = [Republish("v1", 0.0, 0.0, True)]
        stop = threading.Event()
        enough = threading.Event()  # min_republishes reached
        if min_republishes <= 0:
            enough.set()

        def republisher() -> None:
            n = failures = 0
            while not (stop.is_set() and enough.is_set()):
                if stop.wait(republish_every) and enough.is_set():
                    break
                version = "v2" if n % 2 == 0 else "v1"
                started = time.perf_counter()
                ok = ingest(version)
                published.append(Republish(version, started, time.perf_counter(), ok))
                n, failures = n + ok, failures + (not ok)
                if n >= min_republishes or failures >= 3:  # three failures: give up, the report shows them
                    enough.set()
                _say(log, f"republish {n}: {version} in {time.perf_counter() - started:.1f} s")

        results: list[list[Search]] = [[] for _ in servers]

        def client(i: int) -> None:
            done = 0
            while done < searches or not enough.is_set():
                sent = time.perf_counter()
                try:
                    outcome, detail = classify(servers[i].search())
                except (TimeoutError, EOFError, ValueError, OSError) as e:
                    outcome, detail = "error", f"{type(e).__name__}: {e}"
                results[i].append(Search(sent, time.perf_counter(), outcome, detail))
                done += 1
                if outcome == "error" and isinstance(detail, str) and detail.startswith(("EOFError", "OSError")):
                    break  # the server is gone

        started = time.perf_counter()
        publisher = threading.Thread(target=republisher, name="republisher")
        threads = [threading.Thread(target=client, args=(i,), name=f"client-{i}") for i in range(n_clients)]
        publisher.start()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        report.seconds = time.perf_counter() - started
        stop.set()
        publisher.join()
    finally:
        report.server_exit_codes = [server.close() for server in servers]

    all_searches = [s for per_client in results for s in per_client]
    done_publishes = [p for p in published[1:] if p.ok]
    report.searches = len(all_searches)
    report.republishes = len(done_publishes)
    report.republish_failures = sum(1 for p in published if not p.ok)
    if done_publishes:
        report.republish_seconds_mean = round(
            sum(p.finished - p.started for p in done_publishes) / len(done_publishes), 2
        )
    for s in all_searches:
        if s.outcome == "error":
            report.errors += 1
        elif s.outcome not in MARKERS:
            report.wrong += 1
            report.wrong_kinds[s.outcome] = report.wrong_kinds.get(s.outcome, 0) + 1
        else:
            report.versions_seen[s.outcome] = report.versions_seen.get(s.outcome, 0) + 1
            report.stale += _is_stale(s, published)
        if s.detail and len(report.error_samples) < 5:
            report.error_samples.append(f"{s.outcome}: {s.detail}")
    latencies = [(s.received - s.sent) * 1000 for s in all_searches]
    report.latency_ms = {
        "p50": round(percentile(latencies, 50), 2),
        "p95": round(percentile(latencies, 95), 2),
        "p99": round(percentile(latencies, 99), 2),
        "max": round(max(latencies, default=float("nan")), 2),
    }
    report.searches_per_second = round(report.searches / report.seconds, 1) if report.seconds else 0.0
    return report


def _is_stale(search: Search, published: list[Republish]) -> bool:
    """An answer older than the last republish completed before the search, with none running during it."""
    ok = [p for p in published if p.ok]
    running = any(p.started < search.received and p.finished > search.sent for p in ok[1:])
    if running:
        return False
    latest = max((p for p in ok if p.finished <= search.sent), key=lambda p: p.finished)
    return search.outcome != latest.version


def render(report: LoadReport, republish_every: float) -> str:
    lat = report.latency_ms
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(report.wrong_kinds.items())) or "none"
    seen = ", ".join(f"{k} {v}" for k, v in sorted(report.versions_seen.items()))
    rows = [
        ("clients x searches", f"{report.clients} x {report.searches_per_client} ({report.model} embedder)"),
        ("dataset", f"{report.chunks_per_version} chunks per version"),
        ("searches", f"{report.searches} in {report.seconds:.1f} s ({report.searches_per_second:g}/s)"),
        ("errors", str(report.errors)),
        ("wrong results", f"{report.wrong} ({kinds})"),
        ("stale reads", str(report.stale)),
        ("versions seen", seen),
        ("latency ms", f"p50 {lat['p50']}  p95 {lat['p95']}  p99 {lat['p99']}  max {lat['max']}"),
        (
            "republishes",
            f"{report.republishes} (every {republish_every:g} s, {report.republish_seconds_mean} s each, "
            f"{report.republish_failures} failed)",
        ),
        ("server exits", ", ".join(str(c) for c in sorted(set(report.server_exit_codes)))),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=10, help="MCP clients, one server process each")
    parser.add_argument("--searches", type=int, default=1000, help="searches per client")
    parser.add_argument("--republish-every", type=float, default=2.0, help="seconds between republishes")
    parser.add_argument("--min-republishes", type=int, default=3, help="keep searching until this many happened")
    parser.add_argument("--files", type=int, default=40, help="documents per corpus version (4 chunks each)")
    parser.add_argument("--real-model", action="store_true", help="use the packaged model instead of the fake")
    parser.add_argument("--workdir", type=Path, help="keep sources, datasets and server logs here")
    parser.add_argument("--json-out", type=Path, default=BENCH_DIR / "results" / "load.json")
    args = parser.parse_args()
    report = run_load(
        args.clients,
        args.searches,
        args.republish_every,
        args.min_republishes,
        args.real_model,
        args.files,
        args.workdir,
        log=sys.stderr,
    )
    print(render(report, args.republish_every))
    args.json_out.parent.mkdir(parents=True, exist_ok=True)
    args.json_out.write_text(json.dumps({"republish_every": args.republish_every, **asdict(report)}, indent=2) + "\n")
    print(f"wrote {args.json_out}", file=sys.stderr)
    if report.errors or report.wrong or report.stale or report.republish_failures:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
