"""Distinct results: adjacent chunks merged into passages, a cap per document, raw chunks on request,
pages and budgets over the grouped list, and one ranking across datasets."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import FakeEmbedder, write_files

from mcpower.defaults import DEFAULT_PER_DOCUMENT
from mcpower.errors import InvalidQueryError
from mcpower.ingestion import IngestOptions, ingest
from mcpower.passages import (
    GROUP_FACTOR,
    GROUP_GROWTH,
    GROUP_ROUNDS,
    Spread,
    best_passages,
    group_hits,
    validate_grouping,
)
from mcpower.ranking import across_datasets
from mcpower.registry import Registry
from mcpower.results import SearchResult
from mcpower.search import get_source, resolve, search
from mcpower.store import ChunkHit
from mcpower.store.local import places as places_module


def chunk(doc: int, ordinal: int, lines: tuple[int, int], heading: str = "Doc > Part", cid: int = 0) -> ChunkHit:
    return ChunkHit(
        id=cid or doc * 1000 + ordinal,
        ordinal=ordinal,
        heading_path=heading,
        start_line=lines[0],
        end_line=lines[1],
        text=f"text of chunk {ordinal} of document {doc}",
        path=f"doc{doc}.md",
        title=f"Doc {doc}",
        file_type=".md",
        document_id=doc,
    )


# ---------------------------------------------------------------- grouping, on ranked chunks


def test_overlapping_chunks_become_one_passage_named_by_the_best() -> None:
    # The set_cookie case: lines 92-114, 112-132 and 132-135 of one file.
    a, b, c = chunk(1, 4, (92, 114)), chunk(1, 5, (112, 132)), chunk(1, 6, (132, 135))
    other = chunk(2, 0, (1, 9))

    passages = group_hits([(b, 0.9), (a, 0.8), (other, 0.7), (c, 0.6)], "passages", None)

    assert [p.best for p in passages] == [b, other]
    first = passages[0]
    assert (first.score, first.start_line, first.end_line) == (0.9, 92, 135)
    assert first.chunks == [b, a, c]


def test_adjacent_chunks_merge_even_with_a_gap_of_lines_between_them() -> None:
    # Consecutive chunks of one document (a blank line or a heading between them) are one place.
    passages = group_hits([(chunk(1, 2, (10, 20)), 0.9), (chunk(1, 3, (23, 30)), 0.8)], "passages", None)

    assert len(passages) == 1 and (passages[0].start_line, passages[0].end_line) == (10, 30)


def test_distant_chunks_of_a_document_stay_apart() -> None:
    passages = group_hits([(chunk(1, 2, (10, 20)), 0.9), (chunk(1, 7, (80, 90)), 0.8)], "passages", None)

    assert [(p.start_line, p.end_line) for p in passages] == [(10, 20), (80, 90)]


def test_a_chunk_between_two_passages_joins_them_at_the_better_rank() -> None:
    one, three, two = chunk(1, 1, (1, 10)), chunk(1, 3, (21, 30)), chunk(1, 2, (11, 20))
    other = chunk(2, 0, (1, 5))

    passages = group_hits([(one, 0.9), (other, 0.85), (three, 0.8), (two, 0.7)], "passages", 2)

    assert [p.best for p in passages] == [one, other]
    assert (passages[0].start_line, passages[0].end_line, len(passages[0].chunks)) == (1, 30, 3)


def test_chunks_of_different_sections_stay_apart() -> None:
    # Adjacent, but another section: a result's heading path is always the one section it is in.
    a = chunk(1, 0, (1, 10), "Guide > Cookies > set_cookie")
    b = chunk(1, 1, (11, 20), "Guide > Cookies > delete_cookie")
    c = chunk(1, 2, (21, 30), "Guide > Cookies > delete_cookie")

    passages = group_hits([(a, 0.9), (c, 0.8), (b, 0.7)], "passages", None)

    assert [(p.best, len(p.chunks), p.start_line, p.end_line) for p in passages] == [(a, 1, 1, 10), (c, 2, 11, 30)]


def test_a_document_takes_at_most_per_document_passages() -> None:
    ranked = [(chunk(1, n * 5, (n * 100, n * 100 + 9)), 0.9 - n / 100) for n in range(6)]
    ranked += [(chunk(2, 0, (1, 9)), 0.5), (chunk(3, 0, (1, 9)), 0.4)]

    capped = group_hits(ranked, "passages", 2)

    assert [p.best.document_id for p in capped] == [1, 1, 2, 3]
    assert len(group_hits(ranked, "passages", None)) == 8


def test_group_none_keeps_raw_chunks() -> None:
    ranked = [(chunk(1, 4, (92, 114)), 0.9), (chunk(1, 5, (112, 132)), 0.8), (chunk(1, 6, (132, 135)), 0.7)]

    assert [len(p.chunks) for p in group_hits(ranked, "none", None)] == [1, 1, 1]
    assert len(group_hits(ranked, "none", 2)) == 2


def test_grouping_ranks_more_chunks_while_one_document_fills_them() -> None:
    # 200 ranked chunks: the first 150 are distant places of one document, then fifty other documents.
    pool = [(chunk(1, 2 * n, (10 * n, 10 * n + 5)), 1.0 - n / 1000) for n in range(150)]
    pool += [(chunk(10 + n, 0, (1, 5)), 0.5 - n / 100) for n in range(50)]
    calls: list[tuple[int, int | None]] = []

    def rank(k: int, candidates: int | None = None) -> list[tuple[ChunkHit, float]]:
        calls.append((k, candidates))
        return pool[:k]

    passages = best_passages(rank, 5, 50, Spread("passages", 2))

    assert [p.best.document_id for p in passages] == [1, 1, 10, 11, 12]
    # Every one of the usual 50 candidates (two passages of document 1), then 4 times as many candidates.
    assert calls == [(50, 50), (200, 200)]
    assert len(best_passages(rank, 5, 50, Spread("none", None))) == 5 and calls[-1] == (5, None)


def test_growing_is_bounded_and_stops_when_the_candidates_run_out() -> None:
    one_document = [(chunk(1, 2 * n, (10 * n, 10 * n + 5)), 1.0 - n / 10**5) for n in range(10**4)]
    calls: list[int] = []

    def rank(k: int, candidates: int | None = None) -> list[tuple[ChunkHit, float]]:
        calls.append(k)
        return one_document[:k]

    assert len(best_passages(rank, 5, 50, Spread("passages", 2))) == 2
    assert calls == [50, 200, 800]  # GROUP_ROUNDS growths of GROUP_GROWTH: 16 times the candidates
    assert (GROUP_GROWTH, GROUP_ROUNDS, GROUP_FACTOR) == (4, 2, 3)
    calls.clear()
    assert len(best_passages(rank, 20, 50, Spread("passages", 2))) == 2
    assert calls == [200, 800, 3200]  # 60 candidates wanted: the depths are 50 times powers of 4
    del one_document[20:]
    calls.clear()
    assert len(best_passages(rank, 5, 50, Spread("passages", 2))) == 2
    assert calls == [50]  # 20 chunks from 50 candidates a side: there are no more


def test_a_shorter_list_is_the_start_of_a_longer_one() -> None:
    # Chunks 0 and 2 of document 1 rank first; chunk 1, between them, ranks 12th and joins them into one
    # passage. A list of any length (a page, the whole list) must see that, whatever it stops at.
    pool = [(chunk(1, 0, (1, 10)), 0.99), (chunk(1, 2, (21, 30)), 0.98)]
    pool += [(chunk(10 + n, 0, (1, 5)), 0.9 - n / 100) for n in range(9)]
    pool += [(chunk(1, 1, (11, 20)), 0.5)]
    pool += [(chunk(30 + n, 0, (1, 5)), 0.4 - n / 100) for n in range(10)]

    def rank(k: int, candidates: int | None = None) -> list[tuple[ChunkHit, float]]:
        return pool[:k]

    longest = [(p.best, p.start_line, p.end_line) for p in best_passages(rank, 19, 50, Spread("passages", 2))]
    assert longest[0] == (pool[0][0], 1, 30) and len(longest) == 19
    for want in range(1, 19):
        assert [
            (p.best, p.start_line, p.end_line) for p in best_passages(rank, want, 50, Spread("passages", 2))
        ] == longest[:want], want
    # So is the default spread: the first five under the cap, then the rest by rank.
    spread = validate_grouping("passages", None)
    longest = [(p.best, p.start_line, p.end_line) for p in best_passages(rank, 19, 50, spread)]
    assert len(longest) == 19
    for want in range(1, 19):
        assert [(p.best, p.start_line, p.end_line) for p in best_passages(rank, want, 50, spread)] == longest[:want]


def test_a_long_document_spreads_over_the_head_and_its_other_places_follow() -> None:
    # A book's chapter: six distant sections of document 1 rank first, then three short pages.
    ranked = [(chunk(1, n * 5, (n * 100, n * 100 + 9), f"Chapter > {n}"), 0.9 - n / 100) for n in range(6)]
    ranked += [(chunk(d, 0, (1, 9)), 0.5 - d / 100) for d in (2, 3, 4)]

    spread = group_hits(ranked, "passages", 2, head=5)

    # The first five span documents (at most two places of one); the chapter's other places follow
    # by rank instead of being left out, and every place is there once.
    assert [p.best.document_id for p in spread] == [1, 1, 2, 3, 4, 1, 1, 1, 1]
    assert [p.best.ordinal for p in spread if p.best.document_id == 1] == [0, 5, 10, 15, 20, 25]
    # Documents first appear in the ungrouped order (by their best chunk), as `mcpower eval` ranks them.
    assert list(dict.fromkeys(p.best.document_id for p in spread)) == [1, 2, 3, 4]
    # An explicit cap still leaves the other places out; when the passages run out before the head is
    # full, the pushed-down ones fill it.
    assert [p.best.document_id for p in group_hits(ranked, "passages", 2)] == [1, 1, 2, 3, 4]
    assert [p.best for p in group_hits(ranked, "passages", 2, head=50)] == [p.best for p in spread]


def test_a_dataset_of_one_long_document_fills_its_top_k() -> None:
    one_document = [(chunk(1, 2 * n, (10 * n, 10 * n + 5)), 1.0 - n / 10**5) for n in range(300)]

    def rank(k: int, candidates: int | None = None) -> list[tuple[ChunkHit, float]]:
        return one_document[:k]

    assert validate_grouping("passages", None) == Spread("passages", 2, 5)
    assert validate_grouping("passages", 2) == Spread("passages", 2, None)
    passages = best_passages(rank, 10, 50, validate_grouping("passages", None))
    assert [p.best.ordinal for p in passages] == [2 * n for n in range(10)]  # ten places, not two
    assert len(best_passages(rank, 10, 50, validate_grouping("passages", 2))) == 2


@pytest.mark.parametrize(("group", "per_document"), [("chunks", None), ("", 2), ("passages", 0), ("none", True)])
def test_invalid_grouping_is_refused(ingested: tuple[Path, Registry], group: str, per_document: object) -> None:
    with pytest.raises(InvalidQueryError, match=r"group|per_document"):
        search(ingested[1], "toolkit", group=group, per_document=per_document)  # type: ignore[arg-type]


# ---------------------------------------------------------------- through search


LONG_SECTION = "\n\n".join(
    f"The walrus cookie {n} is set by set_cookie with a walrus domain and walrus path, {'then ' * 20}done."
    for n in range(30)
)


@pytest.fixture
def cookies(tmp_path: Path, datasets_dir: Path, make_registry: Callable[[], Registry]) -> Registry:
    """One long section about walrus cookies (many overlapping chunks) and three short ones apart from it in
    the same page, and five short pages that mention them."""
    filler = " ".join(f"Unrelated prose about gardening, item {n}." for n in range(60))
    places = "".join(f"## Other {n}\n\n{filler}\n\n## Walrus {n}\n\n{LONG_SECTION[:400]}\n\n" for n in range(3))
    files: dict[str, str | bytes] = {"cookies.md": f"# Cookies\n\n## set_cookie\n\n{LONG_SECTION}\n\n{places}"}
    files |= {f"page{n}.md": f"# Page {n}\n\nA walrus cookie note number {n}.\n" for n in range(5)}
    ingest(write_files(tmp_path / "src", files), datasets_dir, IngestOptions(dataset_id="web"), embedder=FakeEmbedder())
    return make_registry()


def overlaps(a: SearchResult, b: SearchResult) -> bool:
    return a.path == b.path and a.lines.start <= b.lines.end + 1 and b.lines.start <= a.lines.end + 1


def test_top_results_are_distinct_places(cookies: Registry) -> None:
    raw = search(cookies, "walrus cookie set_cookie", dataset="web", top_k=5, mode="keyword", group="none")
    grouped = search(cookies, "walrus cookie set_cookie", dataset="web", top_k=5, mode="keyword")

    assert [r.path for r in raw.results] == ["cookies.md"] * 5  # the failure: one place, five times
    paths = [r.path for r in grouped.results]
    assert paths.count("cookies.md") <= DEFAULT_PER_DOCUMENT and len(set(paths)) >= 4
    assert not any(overlaps(a, b) for i, a in enumerate(grouped.results) for b in grouped.results[i + 1 :])
    best = grouped.results[0]
    assert best.result_id == raw.results[0].result_id and best.score == raw.results[0].score
    # The passage spans the chunks it merged, and get_source still reads its best chunk.
    _, hit = resolve(cookies, best.result_id)
    assert best.lines.start <= hit.start_line and hit.end_line <= best.lines.end
    assert best.lines.end - best.lines.start > hit.end_line - hit.start_line
    assert get_source(cookies, best.result_id, scope="chunk").content == hit.text


def test_a_long_page_shows_more_places_below_the_first_five(cookies: Registry) -> None:
    query = "walrus cookie set_cookie"
    top5 = search(cookies, query, dataset="web", top_k=5, mode="keyword")
    top10 = search(cookies, query, dataset="web", top_k=10, mode="keyword")
    capped = search(cookies, query, dataset="web", top_k=10, mode="keyword", per_document=DEFAULT_PER_DOCUMENT)

    paths = [r.path for r in top10.results]
    # The first five still span the pages (what a default search returns, as with the cap), ...
    assert paths[:5].count("cookies.md") <= DEFAULT_PER_DOCUMENT
    assert [r.result_id for r in top10.results[:5]] == [r.result_id for r in top5.results]
    assert [r.result_id for r in top5.results] == [r.result_id for r in capped.results[:5]]
    # ... and the long page's other sections follow instead of being left out: distinct places.
    assert paths.count("cookies.md") > DEFAULT_PER_DOCUMENT and len(top10.results) == 10
    assert [r.path for r in capped.results].count("cookies.md") == DEFAULT_PER_DOCUMENT
    assert not any(overlaps(a, b) for i, a in enumerate(top10.results) for b in top10.results[i + 1 :])
    raw = search(cookies, query, dataset="web", top_k=50, mode="keyword", group="none")
    assert list(dict.fromkeys(paths)) == [p for p in dict.fromkeys(r.path for r in raw.results) if p in paths]


def test_per_document_sets_the_cap(cookies: Registry) -> None:
    one = search(cookies, "walrus cookie set_cookie", dataset="web", top_k=6, mode="keyword", per_document=1)
    three = search(cookies, "walrus cookie set_cookie", dataset="web", top_k=6, mode="keyword", per_document=3)

    assert [r.path for r in one.results].count("cookies.md") == 1 and len(one.results) == 6
    assert [r.path for r in three.results].count("cookies.md") == 3


def test_pages_of_the_grouped_list_join_up_to_it(cookies: Registry) -> None:
    query = "walrus cookie set_cookie"
    whole = search(cookies, query, dataset="web", top_k=7, mode="keyword")
    pages, offset = [], 0
    while offset is not None and len(pages) < 10:
        page = search(cookies, query, dataset="web", top_k=2, mode="keyword", offset=offset)
        pages.append(page)
        offset = page.meta.next_offset

    got = [r.result_id for p in pages for r in p.results]
    # The pages start as the whole list does (and go on: cookies.md's other places follow it).
    assert got[:7] == [r.result_id for r in whole.results]
    assert len(got) == len(set(got)) > 7


def test_a_budget_cuts_the_grouped_list_and_the_next_page_goes_on(cookies: Registry) -> None:
    query = "walrus cookie set_cookie"
    whole = search(cookies, query, dataset="web", top_k=5, mode="keyword")
    cut = search(cookies, query, dataset="web", top_k=5, mode="keyword", max_tokens=400)

    assert cut.meta.truncated and 1 <= len(cut.results) < 5
    assert cut.meta.estimated_tokens is not None and cut.meta.estimated_tokens <= 400
    rest = search(cookies, query, dataset="web", top_k=5, mode="keyword", offset=cut.meta.next_offset)
    ids = [r.result_id for r in cut.results] + [r.result_id for r in rest.results]
    assert ids[:5] == [r.result_id for r in whole.results]


# ---------------------------------------------------------------- one ranking across datasets


@pytest.fixture
def small_and_large(tmp_path: Path, datasets_dir: Path, make_registry: Callable[[], Registry]) -> Registry:
    """A small dataset about the question, whose every page says its words (so they weigh little there),
    and a large one where those words are rare (so its weak matches score higher)."""
    small = {
        f"page{n}.md": f"# Page {n}\n\nThe server and its tools: what the server does with tools, {n}.\n"
        for n in range(5)
    }
    small["tools.md"] = "# Tools\n\nWhich tools does the server offer? Three tools: search, fetch and list.\n"
    large = {f"doc{n:03}.md": f"# Doc {n}\n\n" + " ".join(f"word{n}x{i}" for i in range(30)) + "\n" for n in range(150)}
    large |= {f"doc{n:03}.md": f"# Doc {n}\n\nServer offer: a server on offer, word{n} tools.\n" for n in range(12)}
    for name, files in (("small", small), ("large", large)):
        ingest(
            write_files(tmp_path / name, files), datasets_dir, IngestOptions(dataset_id=name), embedder=FakeEmbedder()
        )
    return make_registry()


def test_the_best_answer_of_a_small_dataset_is_not_buried(small_and_large: Registry) -> None:
    query = "which tools does the server offer"
    small = search(small_and_large, query, dataset="small", top_k=5).results
    large = search(small_and_large, query, dataset="large", top_k=20).results
    answer = small[0]
    assert answer.path == "tools.md"
    assert sum(r.score > answer.score for r in large) >= 10  # by score alone it would be 11th or later

    both = search(small_and_large, query, top_k=5)

    assert [(r.dataset, r.path) for r in both.results[:2]] == [("large", large[0].path), ("small", "tools.md")]
    # Each result keeps its own score; each dataset's results keep their order; the flag is unchanged.
    assert both.results[1].score == answer.score
    for name, alone in (("small", small), ("large", large)):
        ours = [r.result_id for r in both.results if r.dataset == name]
        assert ours == [r.result_id for r in alone][: len(ours)]
    assert both.meta.low_confidence is (max(large[0].score, answer.score) < 0.30)


def test_a_dataset_where_nothing_matches_is_not_lifted() -> None:
    line = 0.30  # hybrid's low-confidence line
    # A dataset's weak best (under the line) ranks below another dataset's confident second result.
    assert across_datasets("hybrid", 0.2, 0.2) < across_datasets("hybrid", 0.4, 0.5)
    # Above the line, a dataset's best is lifted to meet the others' bests.
    assert across_datasets("hybrid", 0.35, 0.35) > across_datasets("hybrid", 0.45, 0.6)
    assert across_datasets("hybrid", line, line) == pytest.approx((line + 1) / 2)


@pytest.mark.parametrize("held", [True, False], ids=["places-in-memory", "places-from-sqlite"])
def test_candidates_are_ranked_without_their_text_and_the_results_are_the_same(
    cookies: Registry, monkeypatch: pytest.MonkeyPatch, held: bool
) -> None:
    # A search ranks and groups ~50 candidates by place (issue 30.1): only its results' text is read,
    # and every list (grouped or not, any page) is what reading every candidate's text gave; the same
    # whether the dataset's places are held in memory (a small one) or read from SQLite (a big one).
    if not held:
        monkeypatch.setattr(places_module, "MAX_PLACES_CHUNKS", 0)
    store = cookies.store("web")
    store._places.load()  # type: ignore[attr-defined]  # now, not after a few searches on its own thread
    assert (store._places.table() is not None) == held  # type: ignore[attr-defined]
    real = store.chunks
    read_with_text: list[int] = []
    every_text = False

    def chunks(ids: list[int], text: bool = True) -> dict[int, ChunkHit]:
        if text or every_text:
            read_with_text.extend(ids)
        return real(ids, text=text or every_text)

    monkeypatch.setattr(store, "chunks", chunks)

    def lists() -> list[list[dict[str, object]]]:
        out = []
        for query in ("walrus cookie set_cookie", "gardening item", "walrus note"):
            for mode in ("hybrid", "keyword"):
                for group in ("passages", "none"):
                    for top_k, offset in ((5, None), (3, 2), (10, None)):
                        read_with_text.clear()
                        r = search(cookies, query, dataset="web", top_k=top_k, mode=mode, group=group, offset=offset)
                        out.append([x.model_dump() for x in r.results])
                        if not every_text:
                            assert len(read_with_text) <= len(r.results), (query, mode, group, top_k)
                            assert all(x.snippet for x in r.results)
        return out

    places = lists()
    every_text = True
    assert places == lists() and any(len(x) >= 5 for x in places)


def test_a_republished_dataset_answers_with_its_new_text(
    tmp_path: Path, datasets_dir: Path, make_registry: Callable[[], Registry]
) -> None:
    source = write_files(
        tmp_path / "src", {"a.md": "# A\n\nThe walrus sleeps on the ice.\n", "b.md": "# B\n\nOther.\n"}
    )
    ingest(source, datasets_dir, IngestOptions(dataset_id="web"), embedder=FakeEmbedder())
    registry = make_registry()
    assert "sleeps" in search(registry, "walrus", dataset="web").results[0].snippet

    (source / "a.md").write_text("# A\n\nThe walrus swims under the ice.\n", encoding="utf-8")
    ingest(source, datasets_dir, IngestOptions(dataset_id="web"), embedder=FakeEmbedder())

    first = search(registry, "walrus", dataset="web").results[0]
    assert "swims" in first.snippet and "sleeps" not in first.snippet


def test_a_one_off_search_reads_no_places_and_a_served_dataset_reads_them_once(
    cookies: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The places table costs ~10 ms a thousand chunks: `mcpower search` (one search) must not pay it;
    # a store asked again reads it once, on a thread of its own (run here at once, in this thread).
    started: list[str] = []

    def at_once(work: Callable[[], None]) -> None:
        started.append("places")
        work()

    monkeypatch.setattr(places_module, "in_background", at_once)
    search(cookies, "walrus cookie", dataset="web")
    assert started == []
    for _ in range(places_module.LOAD_AFTER):
        search(cookies, "walrus cookie", dataset="web")
    assert started == ["places"]
    assert cookies.store("web")._places.table() is not None  # type: ignore[attr-defined]
