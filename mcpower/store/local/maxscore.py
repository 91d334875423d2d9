"""The top k of keyword matches by MaxScore (Turtle & Flood, 1995), kept beside block-max
(postings.py) to be measured against it (benchmarks/keyword_scale.py); search does not use it.

Exact too: a chunk's BM25 is the sum of its terms' impacts, and a term adds at most its highest
impact. Terms are taken from the highest such bound down; the chunks holding the terms taken so far
are the candidates, scored in full. Once the bounds of the terms not taken add up to less than the
k-th best candidate's score, no other chunk can reach the top k: the answer is exact. The common
terms (low idf, long lists) are never walked, only looked up for the candidates.
"""

from __future__ import annotations

import numpy as np

from mcpower.store.local.postings import RankedMatches, members

# When the terms walked reach this share of the chunks, adding everything up is as cheap.
FULL_SCAN_SHARE = 0.25


class MaxScoreMatches(RankedMatches):
    """:class:`RankedMatches` whose top k MaxScore finds; the same answers, to the bit."""

    def _find(self, k: int) -> list[tuple[int, float]]:
        n = len(self._ids)
        by_bound = sorted(range(len(self._lists)), key=lambda i: -self._lists[i].bound)
        rest = [sum(self._lists[i].bound for i in by_bound[j:]) for j in range(len(by_bound) + 1)]
        candidates = np.zeros(0, dtype=np.int64)  # rows holding a term taken so far (the filter's only)
        scores = np.zeros(0, dtype=np.float64)  # their full BM25, every term counted
        walked_rows = 0
        for taken, i in enumerate(by_bound, start=1):
            postings = self._lists[i]
            walked_rows += len(postings.rows)
            if walked_rows >= FULL_SCAN_SHARE * n and taken < len(by_bound):
                return self._everything().top(k)  # most chunks walked anyway: add everything up
            new = np.setdiff1d(postings.rows.astype(np.int64), candidates, assume_unique=True)
            if self._allowed is not None:
                new = new[members(new, self._allowed)]
            candidates = np.concatenate([candidates, new])
            scores = np.concatenate([scores, self._scores(new)])  # a candidate is scored once, in full
            if len(candidates) >= k:
                kth = np.partition(scores, len(scores) - k)[len(scores) - k]
                if rest[taken] < kth * (1 - 1e-9):  # no chunk outside can reach the k-th score
                    break
        keep = scores > 0
        return self._best(candidates[keep], scores[keep], k)
