"""A served synthetic dataset (issue 30): resident memory and warm tool calls of `mcpower serve --stdio`.

    python benchmarks/served_scale.py [--dataset synthetic-1m] [--calls 120]

Serves the synthetic datasets that ``run.py --only search --scale ...`` built (under
``~/.cache/mcpower/bench/synthetic``), asks one warm-up question, then ``--calls`` SciFact questions
through ``knowledge_search``; prints the time from spawn to the first answer, the tool calls' p50 / p95
(wall, so quote them with the load printed beside them) and the server's VmRSS / VmHWM.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import DEFAULT_CORPORA, DEFAULT_DATASETS
from suite.server import StdioClient, mcpower_argv


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default="synthetic-1m")
    ap.add_argument("--calls", type=int, default=120)
    ap.add_argument("--datasets-dir", type=Path, default=DEFAULT_DATASETS / "synthetic")
    args = ap.parse_args()
    if not (args.datasets_dir / args.dataset).is_dir():
        raise SystemExit(f"no {args.dataset} in {args.datasets_dir}: build it with run.py --only search --scale")
    lines = (DEFAULT_CORPORA / "scifact" / "queries.jsonl").read_text(encoding="utf-8").splitlines()
    questions = [json.loads(line)["text"] for line in lines][: args.calls]
    client = StdioClient([*mcpower_argv(), "serve", "--stdio", "--datasets-dir", str(args.datasets_dir)])
    try:
        client.initialize()
        client.call_tool("knowledge_search", {"query": "warm up", "dataset": args.dataset})
        first = time.perf_counter() - client.started
        warm = client.memory()
        times = []
        for q in questions:
            t = time.perf_counter()
            client.call_tool("knowledge_search", {"query": q, "dataset": args.dataset, "top_k": 10})
            times.append((time.perf_counter() - t) * 1000)
        times.sort()
        load = Path("/proc/loadavg").read_text().split()[:3]
        print(f"{args.dataset}: first answer {first:.2f} s after spawn; memory after warm-up {warm}")
        print(
            f"{len(times)} calls: p50 {statistics.median(times):.1f} ms, p95 {times[int(0.95 * len(times))]:.1f} ms; "
            f"memory {client.memory()}; load {' '.join(load)}"
        )
    finally:
        client.close()


if __name__ == "__main__":
    main()
