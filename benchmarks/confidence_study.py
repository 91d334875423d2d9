"""Calibrate low_confidence: best scores of on-topic vs off-topic queries, per mode.

Usage: python benchmarks/confidence_study.py DATASETS_DIR
On-topic: each bench collection's own queries against its dataset. Off-topic: the other
collection's queries (science claims against aeronautics, and back) and FastAPI questions.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from mcpower.registry import Registry
from mcpower.search import search

BENCH = Path(__file__).resolve().parents[2] / "shared" / "bench"
GENERIC = [
    "how do I bake sourdough bread",
    "best hiking trails in the alps",
    "what is the capital of australia",
    "configure a python web server with dependency injection",
    "who won the football world cup",
]


def queries(name: str, n: int = 150) -> list[str]:
    rows = [json.loads(line) for line in (BENCH / name / "queries.jsonl").read_text().splitlines() if line.strip()]
    return [r["text"] for r in rows[:n]]


def main() -> None:
    reg = Registry(Path(sys.argv[1]))
    pairs = {"scifact": "cranfield", "cranfield": "scifact"}
    for mode in ("hybrid", "semantic", "keyword"):
        on: list[float] = []
        off: list[float] = []
        for ds, other in pairs.items():
            for q in queries(ds):
                r = search(reg, q, dataset=ds, top_k=1, mode=mode)
                on.append(r.results[0].score if r.results else 0.0)
            for q in queries(other) + GENERIC:
                r = search(reg, q, dataset=ds, top_k=1, mode=mode)
                off.append(r.results[0].score if r.results else 0.0)
        on.sort()
        off.sort()
        print(
            f"{mode:<9} on-topic best score p5 {on[len(on) // 20]:.3f} p10 {on[len(on) // 10]:.3f} median {statistics.median(on):.3f}"
            f" | off-topic median {statistics.median(off):.3f} p90 {off[9 * len(off) // 10]:.3f} p95 {off[19 * len(off) // 20]:.3f}"
        )
        for t in (0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5):
            fp = sum(s < t for s in on) / len(on)
            tp = sum(s < t for s in off) / len(off)
            print(f"   threshold {t:.2f}: flags {tp:.0%} of off-topic, {fp:.0%} of on-topic")


if __name__ == "__main__":
    main()
