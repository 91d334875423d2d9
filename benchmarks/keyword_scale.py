"""The keyword side at a million chunks: block-max bounds against MaxScore and against scoring every match.

    python benchmarks/keyword_scale.py [--chunks N] [--queries Q] [--terms MIN MAX] [--allowed SHARE ...]

Postings made in memory, no SQLite (so the figure is the scoring alone, the part that grows with
the corpus): a vocabulary of terms in 0.05% to 45% of N chunks (log-uniform), BM25-like impacts, and
queries of MIN to MAX of them (a SciFact claim names 10-30 words, many of them common). For each
query, interleaved in a rotating order, what search asks of the keyword side — the top 50 and the
BM25 of 50 other chunks — three ways: `keyword.combine` (every match scored, as before issue 30),
`MaxScoreMatches` (store/local/maxscore.py: MaxScore, the lists with their dense copies as it had them) and
`RankedMatches()` (block-max bounds, store/local/blockmax.py, the lists as the store now makes them).
The three answers are checked equal. With ``--allowed``, each query again under a filter that
allows that share of the chunks (random rows, as chunk ids fall). Prints p50 / p95 of thread CPU
time and of wall time for each, and the ratios.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from suite.report import load_avg

from mcpower.store.local.keyword import combine
from mcpower.store.local.maxscore import MaxScoreMatches
from mcpower.store.local.postings import Postings, RankedMatches

VOCABULARY = 64  # distinct terms; their shares of the chunks spread log-uniformly over SHARES
SHARES = (0.0005, 0.45)
METHODS = ("every match", "MaxScore", "block-max")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chunks", type=int, default=1_000_000)
    ap.add_argument("--queries", type=int, default=60)
    ap.add_argument("--terms", type=int, nargs=2, default=(3, 16), metavar=("MIN", "MAX"))
    ap.add_argument("--allowed", type=float, nargs="*", default=[], help="filters allowing these shares of chunks")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    n = args.chunks
    ids = np.sort(rng.choice(2**40, n, replace=False)).astype(np.int64)
    lists: list[Postings] = []  # as the store makes them (postings.postings_of); cells kept once computed
    for share in np.geomspace(*SHARES, VOCABULARY):
        rows = np.flatnonzero(rng.random(n) < share).astype(np.int32)
        idf = max(float(np.log((n - len(rows) + 0.5) / (len(rows) + 0.5))), 1e-6)
        tf = rng.choice([1, 1, 1, 2, 3], len(rows)).astype(np.float64)
        norm = 1.2 * (0.25 + 0.75 * rng.uniform(0.5, 1.5, len(rows)))
        impacts = (idf * tf * 2.2 / (tf + norm)).astype(np.float32)
        lists.append(Postings.of(rows, impacts))
    queries = [
        rng.choice(VOCABULARY, rng.integers(args.terms[0], args.terms[1] + 1), replace=False).tolist()
        for _ in range(args.queries)
    ]
    filters: list[tuple[str, Any]] = [("no filter", None)]
    filters += [
        (f"{share:.0%} allowed", np.sort(rng.choice(n, int(share * n), replace=False))) for share in args.allowed
    ]
    load = load_avg()
    for label, allowed in filters:
        cpu: dict[str, list[float]] = {m: [] for m in METHODS}
        wall: dict[str, list[float]] = {m: [] for m in METHODS}
        for i, q in enumerate(queries):
            others = rng.choice(ids, 50)
            mask = None
            if allowed is not None:
                mask = np.zeros(n, dtype=bool)
                mask[allowed] = True

            def every_match(q: list[int] = q, others: Any = others, mask: Any = mask) -> Any:
                hits = combine(ids, [(lists[t].rows.tobytes(), lists[t].impacts.tobytes()) for t in q], [], mask)
                return hits.top(50), hits.scores_of(others)

            def maxscore(q: list[int] = q, others: Any = others, allowed: Any = allowed) -> Any:
                matches = MaxScoreMatches(ids, [lists[t] for t in q], allowed)
                return matches.top(50), matches.scores_of(others)

            def blockmax(q: list[int] = q, others: Any = others, allowed: Any = allowed) -> Any:
                matches = RankedMatches(
                    ids, [lists[t] for t in q], allowed
                )  # the store's path, its size rules included
                return matches.top(50), matches.scores_of(others)

            runs: dict[str, Callable[[], Any]] = dict(zip(METHODS, (every_match, maxscore, blockmax)))
            answers = {}
            for m in METHODS[i % 3 :] + METHODS[: i % 3]:  # rotate, so load drift hits every method alike
                t, c = time.perf_counter(), time.thread_time()
                answers[m] = runs[m]()
                cpu[m].append(time.thread_time() - c)
                wall[m].append(time.perf_counter() - t)
            assert answers["every match"] == answers["MaxScore"] == answers["block-max"], q
        report(label, cpu, wall)
    print(
        f"{n:,} chunks, {len(queries)} queries of {args.terms[0]}-{args.terms[1]} terms, load average {load} -> {load_avg()}"
    )


def report(label: str, cpu: dict[str, list[float]], wall: dict[str, list[float]]) -> None:
    def pct(xs: list[float], p: float) -> float:
        return sorted(xs)[round(p * (len(xs) - 1))] * 1000

    for kind, times in (("CPU", cpu), ("wall", wall)):
        for name, p in (("p50", 0.5), ("p95", 0.95)):
            base, ms, bm = (pct(times[m], p) for m in METHODS)
            print(
                f"{label}, {kind} {name}: every match {base:.1f} ms, MaxScore {ms:.1f} ms ({ms / base:.2f}x), "
                f"block-max {bm:.1f} ms ({bm / base:.2f}x every match, {bm / ms:.2f}x MaxScore)"
            )


if __name__ == "__main__":
    main()
