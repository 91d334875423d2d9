"""Fusion and score properties, and snippets."""

from __future__ import annotations

import math
import re
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcpower.ranking import (
    KEYWORD_HALF,
    LOW_CONFIDENCE,
    SEMANTIC_WEIGHT,
    best_snippet,
    fuse,
    is_low_confidence,
    keyword_score,
    semantic_score,
)

cosines = st.dictionaries(st.integers(0, 50), st.floats(-1.0, 1.0), max_size=30)
bm25s = st.dictionaries(st.integers(0, 50), st.floats(0.0, 200.0), max_size=30)


@pytest.mark.parametrize("mode", ["hybrid", "semantic", "keyword"])
@given(c=cosines, b=bm25s)
def test_fused_scores_are_in_range_sorted_and_deterministic(
    mode: str, c: dict[int, float], b: dict[int, float]
) -> None:
    ranked = fuse(mode, c, b)  # type: ignore[arg-type]

    scores = [s for _, s in ranked]
    assert all(0.0 <= s <= 1.0 for s in scores)
    assert scores == sorted(scores, reverse=True)
    assert ranked == fuse(mode, dict(reversed(c.items())), dict(reversed(b.items())))  # type: ignore[arg-type]


def test_ties_are_broken_by_chunk_id() -> None:
    assert [i for i, _ in fuse("semantic", {7: 0.5, 3: 0.5, 5: 0.5}, {})] == [3, 5, 7]


def test_hybrid_is_the_weighted_blend_of_both_scores() -> None:
    ((_, score),) = fuse("hybrid", {1: 0.8}, {1: KEYWORD_HALF})

    assert score == pytest.approx(SEMANTIC_WEIGHT * 0.8 + (1 - SEMANTIC_WEIGHT) * 0.5)


def test_a_candidate_missing_from_one_list_scores_zero_there() -> None:
    ranked = dict(fuse("hybrid", {1: 0.6}, {2: 3 * KEYWORD_HALF}))

    assert ranked[1] == pytest.approx(SEMANTIC_WEIGHT * 0.6)
    assert ranked[2] == pytest.approx((1 - SEMANTIC_WEIGHT) * 0.75)


@given(a=st.floats(0, 1e6), b=st.floats(0, 1e6))
def test_keyword_score_is_monotone_and_bounded(a: float, b: float) -> None:
    lo, hi = sorted((a, b))
    assert 0.0 <= keyword_score(lo) <= keyword_score(hi) < 1.0


@given(a=st.floats(-1, 1), b=st.floats(-1, 1))
def test_semantic_score_is_monotone_and_clipped(a: float, b: float) -> None:
    lo, hi = sorted((a, b))
    assert 0.0 <= semantic_score(lo) <= semantic_score(hi) <= 1.0


def test_keyword_half_means_half() -> None:
    assert keyword_score(KEYWORD_HALF) == 0.5
    assert keyword_score(0.0) == 0.0


@pytest.mark.parametrize("mode", ["hybrid", "semantic", "keyword"])
def test_low_confidence_below_the_threshold_and_for_no_results(mode: str) -> None:
    t = LOW_CONFIDENCE[mode]

    assert is_low_confidence(mode, None)  # type: ignore[arg-type]
    assert is_low_confidence(mode, t - 0.01)  # type: ignore[arg-type]
    assert not is_low_confidence(mode, t + 0.01)  # type: ignore[arg-type]


def test_snippet_of_a_short_chunk_is_the_chunk() -> None:
    assert best_snippet("  One sentence.  ", ["sentence"], 100) == "One sentence."


def test_snippet_of_a_long_chunk_is_the_part_with_the_query_terms() -> None:
    filler = "Nothing to see in this sentence. " * 40
    text = filler + "The quokka lives on Rottnest Island. " + filler

    snippet = best_snippet(text, ["quokka", "rottnest"], 200)

    assert "quokka" in snippet
    assert len(snippet) <= 200
    assert snippet.startswith("…") and snippet.endswith("…")


def test_snippet_never_exceeds_the_limit() -> None:
    text = "x" * 5000
    assert len(best_snippet(text, ["y"], 2048)) <= 2048
    assert not math.isnan(len(best_snippet(text, [], 10)))


def _snippet_window(text: str, terms: list[str], max_chars: int) -> tuple[int, int]:
    """The window best_snippet chose before it slid: every window measured from scratch."""
    text = text.strip()
    lower = text.lower()
    segments = [
        (m.start(), m.end(), sum(1 for t in set(terms) if t in lower[m.start() : m.end()]))
        for m in re.finditer(r"[^\n.!?。！？]*(?:[.!?。！？]+|\n|$)", text)
        if m.end() > m.start()
    ]
    room = max(max_chars - 2, 1)
    best = (-1, 0, room)
    for i, (seg_start, seg_end, seg_hits) in enumerate(segments):
        hits, j = 0, i
        while j < len(segments) and segments[j][1] - seg_start <= room:
            hits += segments[j][2]
            j += 1
        if j > i:
            start, end = seg_start, segments[j - 1][1]
        else:
            hits = seg_hits
            at = min(
                (lower.find(t, seg_start, seg_end) for t in set(terms) if t in lower[seg_start:seg_end]),
                default=seg_start,
            )
            start = max(seg_start, min(at - room // 3, seg_end - room))
            end = start + room
        if hits > best[0]:
            best = (hits, start, end)
    return best[1], best[2]


@given(
    sentences=st.lists(
        st.sampled_from(["A quokka.", "Rottnest isle!", "Nothing here.", "x" * 90, "\n", "ok?", "中文。"]), max_size=60
    ),
    max_chars=st.integers(3, 120),
)
def test_the_snippet_window_is_the_best_one(sentences: list[str], max_chars: int) -> None:
    text = " ".join(sentences)
    start, end = _snippet_window(text, ["quokka", "rottnest"], max_chars)
    stripped = text.strip()
    if len(stripped) > max_chars:
        expected = (("…" if start > 0 else "") + stripped[start:end].strip() + ("…" if end < len(stripped) else ""))[
            :max_chars
        ]
        assert best_snippet(text, ["quokka", "rottnest"], max_chars) == expected


def test_the_snippet_window_slides_in_one_pass() -> None:
    # Each window was summed from scratch: a chunk of 160,000 short lines (lines the tokenizer
    # reads as nothing make such chunks) took 2 s a snippet, in proportion to the snippet's size.
    text = "word " * 50 + "\u200b\n" * 40_000 + " end"

    def cpu(max_chars: int) -> float:
        start = time.thread_time()
        best_snippet(text, ["end"], max_chars)
        return time.thread_time() - start

    for _attempt in range(2):
        narrow, wide = min(cpu(100) for _ in range(3)), min(cpu(2_000) for _ in range(3))
        if wide <= 3 * narrow + 0.005:
            return
    pytest.fail(f"{narrow:.3f} s with 100 characters, {wide:.3f} s with 2,000")
