"""Crawl speed: `mcpower`'s crawler against a plain sequential fetch of the same pages, same run.

    python benchmarks/crawl_speed.py                      # Debian's python3.11-doc library pages
    python benchmarks/crawl_speed.py --latency 0.05 --runs 5 --in-flight 4

Serves a documentation folder on 127.0.0.1 (tests/site_server.py: ETags, a robots.txt) with a
per-response delay (--latency, default 30 ms: a nearby server's round trip; loopback has none, which
would make any crawler look like the sequential loop) and, alternating, runs:

- crawl:      mcpower.sources.crawl.run_crawl into a fresh mirror (robots.txt, link extraction,
              scope, mirror writes: everything a first `mcpower ingest URL` fetches, no ingest);
- sequential: one urllib GET after the other of exactly the pages that crawl stored (no parsing).

Each pair is run --runs times, interleaved; the medians' pages/s and their ratio are printed (the
ratio is what carries over to another machine). Also the most requests the server saw in flight.
Writes JSON to benchmarks/results/crawl_speed.json. Quote the load average with the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR.parent / "tests"))

from site_server import Site, serve  # noqa: E402

from mcpower.sources.crawl import CrawlOptions, run_crawl  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=Path, default=Path("/usr/share/doc/python3.11/html"))
    parser.add_argument("--prefix", default="/library/")
    parser.add_argument("--latency", type=float, default=0.03)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--in-flight", type=int, default=4)
    args = parser.parse_args()
    if not (args.docs / args.prefix.strip("/")).is_dir():
        sys.exit(f"{args.docs}{args.prefix}: not found (apt-get install python3.11-doc)")
    site = Site(folder=args.docs, pages={"/robots.txt": "User-agent: *\nAllow: /\n"})
    original = site.body_of

    def slow_body(path: str) -> bytes | None:
        time.sleep(args.latency)
        return original(path)

    site.body_of = slow_body  # type: ignore[method-assign]
    crawl_rates, plain_rates, pages = [], [], 0
    with serve(site):
        for _ in range(args.runs):
            with tempfile.TemporaryDirectory() as tmp:
                started = time.perf_counter()
                report = run_crawl(site.base + args.prefix, Path(tmp), CrawlOptions(in_flight=args.in_flight))
                crawl_seconds = time.perf_counter() - started
                urls = [
                    json.loads((Path(tmp) / "state.json").read_text())["pages"][rel]["url"]
                    for rel in sorted(json.loads((Path(tmp) / "state.json").read_text())["pages"])
                ]
            pages = report.pages
            crawl_rates.append(pages / crawl_seconds)
            started = time.perf_counter()
            for url in urls:
                with urllib.request.urlopen(url, timeout=30) as response:
                    response.read()
            plain_rates.append(len(urls) / (time.perf_counter() - started))
    crawl, plain = statistics.median(crawl_rates), statistics.median(plain_rates)
    result: dict[str, Any] = {
        "pages": pages,
        "latency_s": args.latency,
        "in_flight": args.in_flight,
        "runs": args.runs,
        "crawl_pages_per_s": [round(r, 1) for r in crawl_rates],
        "sequential_pages_per_s": [round(r, 1) for r in plain_rates],
        "median_crawl": round(crawl, 1),
        "median_sequential": round(plain, 1),
        "ratio": round(crawl / plain, 2),
        "max_in_flight_seen": site.max_in_flight,
        "load_average": os.getloadavg(),
    }
    print(f"pages {pages}, latency {args.latency * 1000:.0f} ms, {args.in_flight} in flight, {args.runs} runs")
    print(f"crawl       {crawl:7.1f} pages/s  (runs: {', '.join(f'{r:.1f}' for r in crawl_rates)})")
    print(f"sequential  {plain:7.1f} pages/s  (runs: {', '.join(f'{r:.1f}' for r in plain_rates)})")
    print(f"ratio {crawl / plain:.2f}; most requests in flight at the server: {site.max_in_flight}")
    print(f"load average {os.getloadavg()}")
    out = BENCH_DIR / "results" / "crawl_speed.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
