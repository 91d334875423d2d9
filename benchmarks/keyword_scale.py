"""The keyword side at a million chunks: MaxScore (store/local/postings.py) against scoring every match.

    python benchmarks/keyword_scale.py [--chunks N] [--queries Q]

Postings made in memory, no SQLite (so the figure is the scoring alone, the part that grows with
the corpus): terms in 0.05% to 45% of N chunks with BM25-like impacts, queries of 3-7 of them. For
each query, interleaved, the time of what search asks of the keyword side — the top 50 and the BM25
of 50 other chunks — with `keyword.combine` (every match scored, as before issue 30) and with
`postings.RankedMatches`; the answers are checked equal. Prints p50 / p95 of both and the ratios.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from suite.report import load_avg

from mcpower.store.local.keyword import combine
from mcpower.store.local.postings import Postings, RankedMatches

SHARES = (0.0005, 0.002, 0.005, 0.01, 0.03, 0.08, 0.15, 0.3, 0.45)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chunks", type=int, default=1_000_000)
    ap.add_argument("--queries", type=int, default=60)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    n = args.chunks
    ids = np.sort(rng.choice(2**40, n, replace=False)).astype(np.int64)
    lists = {}
    for share in SHARES:
        rows = np.flatnonzero(rng.random(n) < share).astype(np.int32)
        idf = max(float(np.log((n - len(rows) + 0.5) / (len(rows) + 0.5))), 1e-6)
        tf = rng.choice([1, 1, 1, 2, 3], len(rows)).astype(np.float64)
        norm = 1.2 * (0.25 + 0.75 * rng.uniform(0.5, 1.5, len(rows)))
        lists[share] = Postings.of(rows, (idf * tf * 2.2 / (tf + norm)).astype(np.float32), n)
    queries = [[lists[s] for s in rng.choice(SHARES, rng.integers(3, 8), replace=False)] for _ in range(args.queries)]
    before, after = [], []
    load = load_avg()
    for q in queries:
        others = rng.choice(ids, 50)
        blobs = [(p.rows.tobytes(), p.impacts.tobytes()) for p in q]
        t = time.perf_counter()
        hits = combine(ids, blobs, [], None)
        old = (hits.top(50), hits.scores_of(others))
        before.append(time.perf_counter() - t)
        t = time.perf_counter()
        matches = RankedMatches(ids, q, None)
        new = (matches.top(50), matches.scores_of(others))
        after.append(time.perf_counter() - t)
        assert old == new

    def pct(xs: list[float], p: float) -> float:
        return sorted(xs)[round(p * (len(xs) - 1))] * 1000

    print(f"{n:,} chunks, {len(queries)} queries, load average {load} -> {load_avg()}")
    for name, p in (("p50", 0.5), ("p95", 0.95)):
        print(
            f"{name}: every match {pct(before, p):.1f} ms, MaxScore {pct(after, p):.1f} ms "
            f"({pct(after, p) / pct(before, p):.2f}x)"
        )


if __name__ == "__main__":
    main()
