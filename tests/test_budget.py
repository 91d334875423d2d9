"""Answers that fit the client: token budgets, paging, and the token estimate behind them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import FakeEmbedder, write_files

from mcpower.errors import InvalidQueryError
from mcpower.ingestion import IngestOptions, ingest
from mcpower.registry import Registry
from mcpower.results import SearchResponse, clip_json_tokens, estimate_tokens, json_tokens
from mcpower.search import MAX_OFFSET, MIN_SNIPPET_CHARS, get_source, search

# Fields a plain search has always answered with (the budget's are absent unless asked for).
META_FIELDS = {"datasets", "mode", "limit", "count", "duration_ms", "low_confidence", "min_score", "notes"}


@pytest.fixture
def registry(tmp_path: Path, datasets_dir: Path, make_registry: Callable[[], Registry]) -> Registry:
    """40 documents that all mention 'quokka', each with a long paragraph."""
    paragraph = " ".join(f"The quokka number {{n}} eats leaf {i} in the garden." for i in range(40))
    files = {f"doc{n:02}.md": f"# Quokka {n}\n\n{paragraph.format(n=n)}\n" for n in range(40)}
    ingest(write_files(tmp_path / "src", files), datasets_dir, IngestOptions(dataset_id="zoo"), embedder=FakeEmbedder())
    return make_registry()


def run(registry: Registry, **kwargs: object) -> SearchResponse:
    return search(registry, "quokka garden", dataset="zoo", mode="keyword", **kwargs)  # type: ignore[arg-type]


# ---------------------------------------------------------------- the estimate


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("", 0),
        ("abc", 1),
        ("abcdefg", 2),
        ("abcdefgh", 3),
        ("x" * 350, 100),
        ("数据库连接", 5),
        ("🎉", 2),
        ("café", 2),
        ("a🎉b", 3),
    ],
)
def test_token_estimate(text: str, tokens: int) -> None:
    assert estimate_tokens(text) == tokens


def test_clip_json_tokens_keeps_the_longest_prefix_that_fits() -> None:
    text = "word " * 100 + "数据库" * 50
    for budget in (0, 1, 10, 100, 150, 10_000):
        clipped = clip_json_tokens(text, budget)
        assert text.startswith(clipped)
        assert json_tokens(clipped) <= budget or clipped == ""
        if clipped != text:
            assert json_tokens(text[: len(clipped) + 1]) > budget


# ---------------------------------------------------------------- defaults


def test_a_plain_search_answers_as_before(registry: Registry) -> None:
    response = run(registry, top_k=5)
    dumped = response.model_dump(mode="json")
    assert set(dumped["meta"]) == META_FIELDS
    assert response.meta.truncated is None and response.meta.next_offset is None
    assert all(len(r.snippet) > MIN_SNIPPET_CHARS for r in response.results)


def test_a_generous_budget_changes_nothing_but_says_so(registry: Registry) -> None:
    plain = run(registry, top_k=10)
    budgeted = run(registry, top_k=10, max_tokens=1_000_000)
    assert [r.model_dump() for r in budgeted.results] == [r.model_dump() for r in plain.results]
    assert budgeted.meta.truncated is False
    assert budgeted.meta.next_offset == 10 and budgeted.meta.offset == 0
    assert budgeted.meta.estimated_tokens == estimate_tokens(budgeted.model_dump_json())


# ---------------------------------------------------------------- budgets


@pytest.mark.parametrize("max_tokens", [300, 800, 2000, 5000])
def test_the_response_fits_the_budget(registry: Registry, max_tokens: int) -> None:
    plain = run(registry, top_k=20)
    response = run(registry, top_k=20, max_tokens=max_tokens)
    assert response.meta.truncated is True
    assert estimate_tokens(response.model_dump_json()) <= max_tokens
    assert response.meta.estimated_tokens is not None and response.meta.estimated_tokens <= max_tokens
    # The same ranking, cut short: the next page starts after the last result kept.
    assert [r.result_id for r in response.results] == [r.result_id for r in plain.results][: len(response.results)]
    assert response.meta.next_offset == len(response.results) == response.meta.count


def test_snippets_are_shortened_before_results_are_dropped(registry: Registry) -> None:
    response = run(registry, top_k=3, max_tokens=700)
    assert len(response.results) == 3
    assert all(len(r.snippet) < 2048 for r in response.results)
    assert response.meta.truncated is True


def test_a_tiny_budget_still_answers_one_shortened_result(registry: Registry) -> None:
    response = run(registry, top_k=10, max_tokens=1)
    (result,) = response.results
    assert len(result.snippet) <= MIN_SNIPPET_CHARS
    assert response.meta.truncated is True and response.meta.next_offset == 1
    assert response.meta.estimated_tokens is not None and response.meta.estimated_tokens > 1  # says it is over


def test_byte_and_token_budgets_together(registry: Registry) -> None:
    response = run(registry, top_k=20, max_tokens=100_000, max_bytes=3000)
    assert len(response.model_dump_json(include={"results"})) < 3100
    assert response.meta.truncated is True


@pytest.mark.parametrize("max_tokens", [0, -5, True, 2.5, "100"])
def test_bad_budgets_are_refused(registry: Registry, max_tokens: object) -> None:
    with pytest.raises(InvalidQueryError, match="max_tokens"):
        run(registry, max_tokens=max_tokens)


# ---------------------------------------------------------------- pages


@pytest.mark.parametrize("group", ["none", "passages"])
def test_pages_follow_one_ranking_to_the_end(registry: Registry, group: str) -> None:
    everything = [r.result_id for r in run(registry, top_k=100, group=group).results]
    if group == "none":
        assert 40 < len(everything) < 100  # every chunk
    else:
        assert len(everything) == 40  # every document, its chunks one passage
    seen: list[str] = []
    offset: int | None = 0
    pages = 0
    while offset is not None:
        page = run(registry, top_k=7, offset=offset, group=group)
        assert page.meta.offset == offset
        seen += [r.result_id for r in page.results]
        offset = page.meta.next_offset
        pages += 1
    assert seen == everything and pages == -(-len(everything) // 7)


def test_budgeted_pages_lose_nothing(registry: Registry) -> None:
    everything = [r.result_id for r in run(registry, top_k=100).results]
    seen: list[str] = []
    offset: int | None = 0
    while offset is not None:
        page = run(registry, top_k=10, offset=offset, max_tokens=600)
        seen += [r.result_id for r in page.results]
        offset = page.meta.next_offset
    assert seen == everything


def test_a_plain_search_has_no_paging_but_offset_zero_has(registry: Registry) -> None:
    assert run(registry, top_k=5).meta.next_offset is None
    page = run(registry, top_k=5, offset=0)
    assert page.meta.offset == 0 and page.meta.next_offset == 5 and page.meta.truncated is None


def test_an_offset_past_the_end_is_empty(registry: Registry) -> None:
    response = run(registry, top_k=5, offset=500)
    assert response.status == "empty" and response.results == []
    assert response.meta.next_offset is None and response.meta.offset == 500


@pytest.mark.parametrize("offset", [-1, MAX_OFFSET + 1, True, 1.5])
def test_bad_offsets_are_refused(registry: Registry, offset: object) -> None:
    with pytest.raises(InvalidQueryError, match="offset"):
        run(registry, offset=offset)


# ---------------------------------------------------------------- get_source


def test_get_source_budget(registry: Registry) -> None:
    rid = run(registry, top_k=1).results[0].result_id
    full = get_source(registry, rid, "section")
    assert full.truncated is False

    for budget in (100, 200, 400):  # above what the other fields take (~80 tokens), below the text
        cut = get_source(registry, rid, "section", max_tokens=budget)
        assert cut.truncated is True
        assert full.content.startswith(cut.content) and len(cut.content) < len(full.content)
        assert estimate_tokens(cut.model_dump_json()) <= budget + 1
    tiny = get_source(registry, rid, "section", max_tokens=1)
    assert tiny.content == "" and tiny.truncated is True  # the other fields are never cut
    assert get_source(registry, rid, "section", max_tokens=1_000_000).content == full.content
    with pytest.raises(InvalidQueryError, match="max_tokens"):
        get_source(registry, rid, "chunk", max_tokens=0)
