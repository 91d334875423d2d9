"""A hybrid search with its two sides at once against one after the other (mcpower/meanwhile.py).

    python benchmarks/meanwhile.py DATASETS_DIR DATASET QUESTIONS [--queries 300] [--rounds 1]

QUESTIONS is JSON lines with a ``text`` field (``../shared/bench/scifact/queries.jsonl``,
``benchmarks/data/*_questions.jsonl``). In one process, with no query cache (every
search embeds its question, as a new one does): after ten warm-up searches, each question is
searched both ways, which goes first alternating question by question — "at once" as mcpower
searches (the query embedded and its vector searched on a worker while the keyword side runs),
"in turn" with the two sides run one after the other on the caller, as before. Prints each way's
wall time (p50 / p95) and CPU time of the whole process (p50), their ratios, and the load average.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from suite.questions import question_texts
from suite.report import load_avg, pct

import mcpower.search as search_module
from mcpower import meanwhile
from mcpower.registry import Registry


def in_turn(here: Callable[[], Any], there: Callable[[], Any]) -> tuple[Any, Any]:
    return here(), there()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("datasets_dir", type=Path)
    ap.add_argument("dataset")
    ap.add_argument("questions", type=Path)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()
    questions = question_texts(args.questions)[: args.queries]
    ways = {"at once": meanwhile.both, "in turn": in_turn}
    registry = Registry(args.datasets_dir, query_cache=0)
    for q in questions[:10]:
        search_module.search(registry, q, args.dataset, 10, "hybrid")
    wall: dict[str, list[float]] = {w: [] for w in ways}
    cpu: dict[str, list[float]] = {w: [] for w in ways}
    for r in range(args.rounds):
        for i, q in enumerate(questions):
            for way in list(ways) if (i + r) % 2 else list(ways)[::-1]:
                setattr(search_module, "both", ways[way])  # noqa: B010 (search.py's name for it)
                started, cpu_started = time.perf_counter(), time.process_time()
                search_module.search(registry, q, args.dataset, 10, "hybrid")
                wall[way].append(1000 * (time.perf_counter() - started))
                cpu[way].append(1000 * (time.process_time() - cpu_started))
    setattr(search_module, "both", meanwhile.both)  # noqa: B010
    registry.close()
    for way in ways:
        print(
            f"{way:<8} wall ms p50 {statistics.median(wall[way]):7.2f}  p95 {pct(wall[way], 95):7.2f}"
            f"   CPU ms p50 {statistics.median(cpu[way]):7.2f}  ({len(wall[way])} searches)"
        )
    a, b = wall["at once"], wall["in turn"]
    print(
        f"at once / in turn: wall p50 {statistics.median(a) / statistics.median(b):.3f}  p95 {pct(a, 95) / pct(b, 95):.3f}"
        f"   CPU p50 {statistics.median(cpu['at once']) / statistics.median(cpu['in turn']):.3f}"
        f"   load {load_avg()}"
    )


if __name__ == "__main__":
    main()
