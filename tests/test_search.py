"""Registry.search: modes, scores, filters, validation, hostile keyword input, result ids."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import pytest
from conftest import FakeEmbedder, match_query, write_files

from mcpower.errors import (
    DatasetNotFoundError,
    IndexMismatchError,
    InvalidQueryError,
    InvalidTopKError,
    ResultNotFoundError,
)
from mcpower.ingestion import IngestOptions, ingest
from mcpower.ranking import MAX_QUERY_CHARS, best_snippet
from mcpower.registry import Registry
from mcpower.results import MAX_SNIPPET_CHARS, SearchFilters, SearchResponse
from mcpower.search import resolve, search
from mcpower.store.local import build as build_module
from mcpower.store.local import catalog as catalog_module
from mcpower.store.local import vectors as vectors_module
from mcpower.store.local.fts import FTS_TOKENIZER, segment
from mcpower.terms import query_terms

MODES = ["semantic", "keyword", "hybrid"]
# A word that occurs in one document of the corpus only, and that document.
DISTINCTIVE = [
    ("zephyrine", "guide/install.md"),
    ("quokka", "guide/usage.md"),
    ("marmalade", "api/reference.md"),
    ("harpsichord", "notes.txt"),
    ("bramblewood", "intro.rst"),
]


def assert_well_formed(response: SearchResponse) -> None:
    scores = [r.score for r in response.results]
    assert all(0.0 <= s <= 1.0 for s in scores)
    assert scores == sorted(scores, reverse=True)
    assert response.meta.count == len(response.results)
    assert response.status == ("ok" if response.results else "empty")
    assert isinstance(response.meta.low_confidence, bool)
    assert len({r.result_id for r in response.results}) == len(response.results)


# ------------------------------------------------------------------ modes and scores


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("word", "path"), DISTINCTIVE)
def test_each_mode_finds_the_document_with_a_distinctive_word(
    ingested: tuple[Path, Registry], mode: str, word: str, path: str
) -> None:
    _, registry = ingested

    response = search(registry, word, dataset="docs", mode=mode)

    assert response.results[0].path == path
    assert response.meta.mode == mode
    assert response.meta.datasets == ["docs"]
    assert_well_formed(response)


def test_an_int8_dataset_is_queried_in_fp32(
    corpus: Path, datasets_dir: Path, fake_embedder: FakeEmbedder, make_registry: Callable[[], Registry]
) -> None:
    int8 = FakeEmbedder()
    int8.backend = "onnx-int8"
    ingest(corpus, datasets_dir, IngestOptions(dataset_id="docs"), embedder=int8)
    registry = make_registry()

    response = search(registry, "zephyrine", dataset="docs", mode="semantic")

    assert registry.store("docs").info.embedding.backend == "onnx-int8"
    assert fake_embedder.load_calls == [(registry.store("docs").info.embedding.model, "onnx")]  # type: ignore[attr-defined]
    assert response.results[0].path == "guide/install.md"


def test_result_fields(ingested: tuple[Path, Registry]) -> None:
    _, registry = ingested

    top = search(registry, "zephyrine daemon", dataset="docs", top_k=1).results[0]

    assert top.dataset == "docs"
    assert top.path == "guide/install.md"
    assert top.title == "Installation"
    assert top.file_type == ".md"
    assert top.heading_path == "Installation > Linux"
    assert (top.lines.start, top.lines.end) == (5, 8)
    assert "zephyrine daemon" in top.snippet
    assert top.result_id.startswith("docs:") and len(top.result_id) == len("docs:") + 16


def test_keyword_only_returns_matching_chunks(ingested: tuple[Path, Registry]) -> None:
    _, registry = ingested

    response = search(registry, "quokka", dataset="docs", mode="keyword")

    assert [r.path for r in response.results] == ["guide/usage.md"]


def test_title_and_heading_words_are_searchable(ingested: tuple[Path, Registry]) -> None:
    _, registry = ingested

    hits = search(registry, "Windows", dataset="docs", mode="keyword").results

    assert hits[0].heading_path == "Installation > Windows"


def test_top_k_and_default_top_k(ingested: tuple[Path, Registry]) -> None:
    _, registry = ingested

    assert len(search(registry, "toolkit", dataset="docs", top_k=2, mode="semantic").results) == 2
    default = search(registry, "toolkit", dataset="docs", mode="semantic")
    assert default.meta.limit == 5
    assert len(default.results) == 5


def test_unrelated_query_is_low_confidence(ingested: tuple[Path, Registry]) -> None:
    _, registry = ingested

    strong = search(registry, "quokka", dataset="docs", mode="semantic")
    unrelated = search(registry, "xylophone", dataset="docs", mode="semantic")

    assert strong.meta.low_confidence is False
    assert unrelated.meta.low_confidence is True
    assert search(registry, "xylophone", dataset="docs", mode="keyword").meta.low_confidence is True


def test_min_score_drops_weak_results(ingested: tuple[Path, Registry]) -> None:
    _, registry = ingested
    everything = search(registry, "toolkit quokka", dataset="docs", mode="semantic", top_k=20)
    threshold = everything.results[1].score

    kept = search(registry, "toolkit quokka", dataset="docs", mode="semantic", top_k=20, min_score=threshold)

    assert 0 < len(kept.results) < len(everything.results)
    assert all(r.score >= threshold for r in kept.results)
    assert kept.meta.min_score == threshold
    none = search(registry, "toolkit quokka", dataset="docs", min_score=1.0)
    assert none.results == [] and none.status == "empty"


def test_query_whitespace_is_trimmed(ingested: tuple[Path, Registry]) -> None:
    _, registry = ingested

    padded = search(registry, "  \n quokka \t", dataset="docs")
    plain = search(registry, "quokka", dataset="docs")

    assert [r.result_id for r in padded.results] == [r.result_id for r in plain.results]


# ------------------------------------------------------------------ filters


@pytest.fixture
def haystack(tmp_path: Path, datasets_dir: Path, make_registry: Callable[[], Registry]) -> Registry:
    """Ten 'noise' documents all about pelicans, and a 'target' folder that mentions them once."""
    files: dict[str, str | bytes] = {
        f"noise/n{i}.md": f"# Pelican {i}\n\nPelican pelican pelican, pelican facts number {i}.\n" for i in range(10)
    }
    files["target/one.md"] = (
        "# Harbour\n\nBoats, nets, gulls, ropes, tides, anchors and one pelican near the harbour wall.\n"
    )
    files["target/two.txt"] = "Plain notes on harbour life: a pelican, gulls, ropes and more ropes.\n"
    files["target/deeper/three.md"] = "# Deep\n\nA pelican rests on the deeper pier among crates and barrels.\n"
    files["targets/other.md"] = "# Other\n\nA pelican in a folder whose name merely starts with target.\n"
    ingest(
        write_files(tmp_path / "haystack", files),
        datasets_dir,
        IngestOptions(dataset_id="hay"),
        embedder=FakeEmbedder(),
    )
    return make_registry()


@pytest.mark.parametrize("mode", MODES)
def test_folder_filter_applies_before_top_k(haystack: Registry, mode: str) -> None:
    unfiltered = search(haystack, "pelican", dataset="hay", top_k=3, mode=mode)
    assert all(r.path.startswith("noise/") for r in unfiltered.results)  # the global top 3

    filtered = search(haystack, "pelican", dataset="hay", top_k=3, mode=mode, filters=SearchFilters(folder="target"))

    assert sorted(r.path for r in filtered.results) == ["target/deeper/three.md", "target/one.md", "target/two.txt"]
    assert_well_formed(filtered)


@pytest.mark.parametrize(
    ("mode", "exact_filter_max", "kind"),
    [(m, x, "hnsw_sq") for m in MODES for x in (0, 8192)] + [("hybrid", x, "hnsw") for x in (0, 8192)],
)
def test_hnsw_index_searches_and_filters(
    tmp_path: Path,
    datasets_dir: Path,
    fake_embedder: FakeEmbedder,
    make_registry: Callable[[], Registry],
    monkeypatch: pytest.MonkeyPatch,
    mode: str,
    exact_filter_max: int,
    kind: str,
) -> None:
    # Big datasets get an HNSW index (hnsw_sq; hnsw as versions built before it); pretend this small
    # one is big. Filtered searches on HNSW scan the allowed vectors exactly up to EXACT_FILTER_MAX
    # of them, and use an id selector above that.
    monkeypatch.setattr(build_module, "HNSW_THRESHOLD", 0)
    if kind == "hnsw":
        monkeypatch.setattr(build_module, "index_kind", lambda n, exact=False: "hnsw")
    monkeypatch.setattr(vectors_module, "EXACT_FILTER_MAX", exact_filter_max)
    files: dict[str, str | bytes] = {
        f"noise/n{i}.md": f"# Pelican {i}\n\nPelican pelican facts {i}.\n" for i in range(10)
    }
    files["target/one.md"] = "# Harbour\n\nBoats, nets, gulls, ropes and one pelican near the wall.\n"
    ingest(write_files(tmp_path / "hay", files), datasets_dir, IngestOptions(dataset_id="hay"), embedder=FakeEmbedder())
    registry = make_registry()

    assert registry.store("hay").manifest.vector_index.kind == kind
    assert registry.store("hay").manifest.vector_index.ef_search == build_module.hnsw_ef_search(11) == 128
    unfiltered = search(registry, "pelican", dataset="hay", top_k=3, mode=mode)
    filtered = search(registry, "pelican", dataset="hay", top_k=3, mode=mode, filters=SearchFilters(folder="target"))

    assert all(r.path.startswith("noise/") for r in unfiltered.results)
    assert [r.path for r in filtered.results] == ["target/one.md"]


def test_hnsw_search_widens_with_size_within_the_manifest_limit() -> None:
    sizes = [50_001, 100_000, 300_000, 1_000_000, 3_000_000, 10**8]
    breadths = [build_module.hnsw_ef_search(n) for n in sizes]

    assert breadths == sorted(breadths)
    assert breadths[:2] == [128, 128]
    assert 768 <= build_module.hnsw_ef_search(1_000_000) <= 1024  # recall@10 0.989-0.994 measured there
    assert breadths[-1] == 4096
    assert all(b % 32 == 0 for b in breadths)


@pytest.mark.parametrize(
    ("filters", "paths"),
    [
        (SearchFilters(folder="target/deeper"), {"target/deeper/three.md"}),
        (SearchFilters(folder="./target/deeper/"), {"target/deeper/three.md"}),
        (SearchFilters(folder="targets"), {"targets/other.md"}),
        (SearchFilters(path="target/one.md"), {"target/one.md"}),
        (SearchFilters(file_type=".txt"), {"target/two.txt"}),
        (SearchFilters(file_type="txt"), {"target/two.txt"}),
        (SearchFilters(file_type=".TXT"), {"target/two.txt"}),
        (SearchFilters(folder="target", file_type=".md"), {"target/one.md", "target/deeper/three.md"}),
        (SearchFilters(folder="target", path="target/one.md"), {"target/one.md"}),
        (SearchFilters(folder="noise", path="target/one.md"), set()),
        (SearchFilters(path="missing.md"), set()),
        (SearchFilters(folder="nowhere"), set()),
    ],
)
@pytest.mark.parametrize("mode", MODES)
def test_filters_combine(haystack: Registry, filters: SearchFilters, paths: set[str], mode: str) -> None:
    response = search(haystack, "pelican", dataset="hay", top_k=10, mode=mode, filters=filters)

    assert {r.path for r in response.results} == paths
    assert response.status == ("ok" if paths else "empty")


# ------------------------------------------------------------------ validation


def test_unknown_dataset_lists_the_available_ones(ingested: tuple[Path, Registry]) -> None:
    _, registry = ingested

    with pytest.raises(DatasetNotFoundError) as info:
        search(registry, "anything", dataset="nope")

    assert info.value.available == ["docs"]
    assert "'nope'" in info.value.message and "docs" in info.value.message
    assert info.value.code == "DATASET_NOT_FOUND"


def test_no_datasets_at_all(datasets_dir: Path, make_registry: Callable[[], Registry]) -> None:
    with pytest.raises(DatasetNotFoundError, match="mcpower ingest"):
        search(make_registry(), "anything", dataset="docs")


@pytest.mark.parametrize("query", ["", "   ", "\n\t", "\x00", "x" * (MAX_QUERY_CHARS + 1)])
def test_invalid_query(ingested: tuple[Path, Registry], query: str) -> None:
    _, registry = ingested

    with pytest.raises(InvalidQueryError) as info:
        search(registry, query, dataset="docs")
    assert info.value.code == "INVALID_QUERY"


def test_query_at_the_length_limit_is_fine(ingested: tuple[Path, Registry]) -> None:
    _, registry = ingested

    response = search(registry, ("quokka " * 200)[:MAX_QUERY_CHARS], dataset="docs")

    assert response.results[0].path == "guide/usage.md"


@pytest.mark.parametrize("top_k", [0, 101, -1, 2.5, True, False, "5"])
def test_invalid_top_k(ingested: tuple[Path, Registry], top_k: object) -> None:
    _, registry = ingested

    with pytest.raises(InvalidTopKError, match="1 to 100"):
        search(registry, "quokka", dataset="docs", top_k=top_k)  # type: ignore[arg-type]


@pytest.mark.parametrize("top_k", [1, 100])
def test_top_k_bounds_are_accepted(ingested: tuple[Path, Registry], top_k: int) -> None:
    _, registry = ingested

    assert search(registry, "quokka", dataset="docs", top_k=top_k).meta.limit == top_k


@pytest.mark.parametrize("mode", ["", "fuzzy", "HYBRID", "bm25"])
def test_invalid_mode(ingested: tuple[Path, Registry], mode: str) -> None:
    _, registry = ingested

    with pytest.raises(InvalidQueryError, match="mode"):
        search(registry, "quokka", dataset="docs", mode=mode)


@pytest.mark.parametrize("min_score", [-0.1, 1.5])
def test_invalid_min_score(ingested: tuple[Path, Registry], min_score: float) -> None:
    _, registry = ingested

    with pytest.raises(InvalidQueryError, match="min_score"):
        search(registry, "quokka", dataset="docs", min_score=min_score)


# ------------------------------------------------------------------ hostile keyword input

HOSTILE = [
    '"',
    '""',
    '"unbalanced',
    "unbalanced'",
    "*",
    "quokka*",
    "-foo",
    "-",
    "a:b",
    "text:quokka",
    "title:",
    "(",
    ")",
    "(quokka",
    "NEAR(a b)",
    "NEAR(quokka marmalade, 2)",
    "AND OR NOT",
    "AND",
    "quokka AND",
    "NOT quokka",
    "^quokka",
    "{text title}: quokka",
    "quokka + marmalade",
    "' OR 1=1 --",
    "\\",
    "💥",
    "...",
    "don't",
    "l’arbre d’été",
    "_",
]


@pytest.mark.parametrize("query", HOSTILE)
@pytest.mark.parametrize("mode", ["keyword", "hybrid"])
def test_hostile_fts_strings_never_raise(ingested: tuple[Path, Registry], query: str, mode: str) -> None:
    _, registry = ingested

    assert_well_formed(search(registry, query, dataset="docs", mode=mode))


@pytest.mark.parametrize("query", ["quokka*", "(quokka", "NOT quokka", "text:quokka", '"quokka'])
def test_operators_are_plain_words(ingested: tuple[Path, Registry], query: str) -> None:
    _, registry = ingested

    hits = search(registry, query, dataset="docs", mode="keyword").results

    assert [h.path for h in hits] == ["guide/usage.md"]


@pytest.mark.parametrize("query", [*HOSTILE, "安装", "AND OR NOT the of"])
def test_match_query_is_always_valid_fts5(query: str) -> None:
    with closing(sqlite3.connect(":memory:")) as db:
        db.execute(f"CREATE VIRTUAL TABLE t USING fts5(text, tokenize='{FTS_TOKENIZER}')")
        db.execute("INSERT INTO t VALUES (?)", (segment("quokka and not near 安装 l'arbre"),))
        match = match_query(query)
        if match is not None:
            db.execute("SELECT rowid FROM t WHERE t MATCH ?", (match,)).fetchall()


def test_match_query_quotes_every_term() -> None:
    assert match_query('NEAR(c b) -foo "x') == '"near" OR "c" OR "b" OR "foo" OR "x"'
    assert match_query("the quokka") == '"quokka"'  # stopwords dropped when there is anything else
    assert match_query("the of") == '"the" OR "of"'
    assert match_query("!!! ...") is None
    assert match_query("安装指南") == '"安 装 指 南"'
    assert query_terms("The Quokka 安装") == ["quokka", "安", "装"]


# ------------------------------------------------------------------ CJK


@pytest.fixture
def cjk_registry(
    corpus: Path, datasets_dir: Path, fake_embedder: FakeEmbedder, make_registry: Callable[[], Registry]
) -> Registry:
    write_files(
        corpus,
        {
            "zh/install.md": "# 安装指南\n\n在 Linux 上使用包管理器安装软件。守护进程在启动时运行。\n",
            "zh/other.md": "# 天气\n\n今天的天气很好，我们去公园散步。\n",
            "ja/guide.md": "# ガイド\n\nこの文書はインストール方法を説明します。\n",
        },
    )
    ingest(corpus, datasets_dir, IngestOptions(dataset_id="docs"), embedder=FakeEmbedder())
    return make_registry()


@pytest.mark.parametrize(
    ("query", "path"),
    [
        ("包管理器", "zh/install.md"),
        ("守护进程", "zh/install.md"),
        ("公园", "zh/other.md"),
        ("インストール", "ja/guide.md"),
    ],
)
def test_cjk_document_found_by_cjk_query(cjk_registry: Registry, query: str, path: str) -> None:
    hits = search(cjk_registry, query, dataset="docs", mode="keyword").results

    assert [h.path for h in hits] == [path]
    assert query in hits[0].snippet


def test_cjk_characters_side_by_side_outrank_the_same_characters_apart(
    tmp_path: Path, datasets_dir: Path, make_registry: Callable[[], Registry]
) -> None:
    # A CJK run is indexed as overlapping pairs plus single characters (docs/search.md, Languages):
    # a query's pair matches only where its characters are adjacent, its characters anywhere.
    folder = write_files(
        tmp_path / "cjk",
        {
            "apart.md": "# 说明\n\n安装软件之前请阅读管理手册。\n",
            "together.md": "# 说明\n\n这里介绍装管的方法。\n",
            **{f"other{i}.md": "# 天气\n\n今天的天气很好，我们去公园散步。\n" for i in range(3)},
        },
    )
    ingest(folder, datasets_dir, IngestOptions(dataset_id="cjk"), embedder=FakeEmbedder())

    hits = search(make_registry(), "装管", dataset="cjk", mode="keyword").results

    assert [h.path for h in hits] == ["together.md", "apart.md"]
    assert hits[0].score > hits[1].score


# ------------------------------------------------------------------ several datasets


@pytest.fixture
def two_datasets(
    corpus: Path, tmp_path: Path, datasets_dir: Path, fake_embedder: FakeEmbedder, make_registry: Callable[[], Registry]
) -> Registry:
    ingest(corpus, datasets_dir, IngestOptions(dataset_id="docs"), embedder=FakeEmbedder())
    other = write_files(tmp_path / "other", {"birds.md": "# Birds\n\nThe toolkit of a quokka watcher.\n"})
    ingest(other, datasets_dir, IngestOptions(dataset_id="other", default_top_k=8), embedder=FakeEmbedder())
    return make_registry()


def test_search_all_datasets_merges(two_datasets: Registry) -> None:
    registry = two_datasets

    response = search(registry, "quokka", top_k=10, mode="keyword")

    assert response.meta.datasets == ["docs", "other"]
    assert {(r.dataset, r.path) for r in response.results} == {("docs", "guide/usage.md"), ("other", "birds.md")}
    assert_well_formed(response)
    for r in response.results:
        assert resolve(registry, r.result_id)[1].path == r.path


def test_search_all_datasets_uses_the_largest_default_top_k(two_datasets: Registry) -> None:
    # Raw chunks: the tiny corpus holds fewer than 8 distinct passages.
    response = search(two_datasets, "toolkit", mode="semantic", group="none")

    assert response.meta.limit == 8
    assert len(response.results) == 8
    assert {r.dataset for r in response.results} == {"docs", "other"}


def test_search_all_datasets_sees_a_dataset_ingested_later(
    ingested: tuple[Path, Registry], tmp_path: Path, datasets_dir: Path
) -> None:
    _, registry = ingested
    other = write_files(tmp_path / "other", {"birds.md": "# Birds\n\nThe toolkit of a quokka watcher.\n"})
    ingest(other, datasets_dir, IngestOptions(dataset_id="other"), embedder=FakeEmbedder())

    assert search(registry, "quokka", mode="keyword").meta.datasets == ["docs", "other"]


def test_search_all_datasets_rereads_only_changed_manifests(
    two_datasets: Registry, corpus: Path, datasets_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = two_datasets
    reads: list[str] = []
    read_manifest = catalog_module.read_manifest
    monkeypatch.setattr(
        catalog_module, "read_manifest", lambda path: reads.append(path.parent.name) or read_manifest(path)
    )

    search(registry, "quokka", mode="keyword")
    assert reads == []
    ingest(corpus, datasets_dir, IngestOptions(dataset_id="docs", description="Republished"), embedder=FakeEmbedder())
    reads.clear()  # the ingest read the version it replaces
    response = search(registry, "quokka", mode="keyword")

    assert reads == ["docs"]
    assert registry.entry("docs").info.description == "Republished"
    assert response.meta.datasets == ["docs", "other"]


def test_search_all_datasets_skips_broken_ones(
    ingested: tuple[Path, Registry], datasets_dir: Path, make_registry: Callable[[], Registry]
) -> None:
    broken = datasets_dir / "broken"
    broken.mkdir()
    (broken / "manifest.json").write_text("{not json")
    registry = make_registry()

    response = search(registry, "quokka")

    assert response.meta.datasets == ["docs"]
    assert response.results[0].path == "guide/usage.md"


def test_a_dataset_found_damaged_during_a_search_of_all_is_left_out(
    ingested: tuple[Path, Registry], tmp_path: Path, datasets_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Damage opening did not reach (store/local/pool.py) is found by the search: that dataset is left
    # out with a note, as at loading, and the others answer; searched alone, it is the error.
    source = write_files(tmp_path / "other", {"quokka.md": "# Quokkas\n\nA quokka lives on an island.\n"})
    ingest(source, datasets_dir, IngestOptions(dataset_id="other"), embedder=FakeEmbedder())
    _, registry = ingested
    damaged = IndexMismatchError(
        "other: v1/meta.sqlite is not a readable SQLite database (database disk image is malformed)"
    )

    def chunks(ids: object, text: bool = True) -> object:
        raise damaged

    monkeypatch.setattr(registry.store("other"), "chunks", chunks)

    response = search(registry, "quokka")

    assert response.meta.datasets == ["docs"] and response.results
    assert {r.dataset for r in response.results} == {"docs"}
    assert any("'other' skipped (INDEX_MISMATCH)" in note for note in response.meta.notes)
    with pytest.raises(IndexMismatchError, match="malformed"):
        search(registry, "quokka", dataset="other")


# ------------------------------------------------------------------ result ids and snippets


def test_result_id_resolves_to_its_chunk(ingested: tuple[Path, Registry]) -> None:
    _, registry = ingested

    for r in search(registry, "toolkit", dataset="docs", top_k=10, group="none").results:
        store, hit = resolve(registry, r.result_id)
        assert store.id == "docs"
        assert (hit.path, hit.heading_path, hit.start_line, hit.end_line) == (
            r.path,
            r.heading_path,
            r.lines.start,
            r.lines.end,
        )
        assert r.snippet.strip("…") in hit.text
    # A passage is named by its best chunk: the chunk lies within the passage, under its headings.
    for r in search(registry, "toolkit", dataset="docs", top_k=10).results:
        store, hit = resolve(registry, r.result_id)
        assert (hit.path, hit.heading_path) == (r.path, r.heading_path)
        assert r.lines.start <= hit.start_line <= hit.end_line <= r.lines.end
        assert r.snippet.strip("…") in hit.text


@pytest.mark.parametrize(
    "result_id",
    [
        "",
        "docs",
        "docs:",
        "docs:zzzzzzzzzzzzzzzz",
        "docs:123",
        "docs:0123456789abcdef0",
        "docs:-123456789abcdef",
        "Docs:0123456789abcdef",
        ":0123456789abcdef",
        "docs:0000000000000000",
        "nope:0123456789abcdef",
        "x" * 500,
    ],
)
def test_unknown_or_malformed_result_ids(ingested: tuple[Path, Registry], result_id: str) -> None:
    _, registry = ingested

    with pytest.raises(ResultNotFoundError) as info:
        resolve(registry, result_id)
    assert info.value.code == "RESULT_NOT_FOUND"
    assert len(info.value.message) < 400


def test_snippets_fit_and_show_the_query_word(
    tmp_path: Path, datasets_dir: Path, fake_embedder: FakeEmbedder, make_registry: Callable[[], Registry]
) -> None:
    filler = " ".join(f"Filler sentence number {i} says nothing much." for i in range(20))
    text = f"# Long\n\n{filler} The walrus appears right here. {filler}\n"
    ingest(
        write_files(tmp_path / "long", {"long.md": text}),
        datasets_dir,
        IngestOptions(dataset_id="long"),
        embedder=FakeEmbedder(),
    )
    registry = make_registry()

    full = search(registry, "walrus", dataset="long", mode="keyword").results[0]
    short = search(registry, "walrus", dataset="long", mode="keyword", snippet_chars=120).results[0]

    assert len(full.snippet) <= MAX_SNIPPET_CHARS
    assert len(short.snippet) <= 120
    assert "walrus" in short.snippet
    assert short.snippet.startswith("…")
    assert len(full.snippet) > len(short.snippet)


@pytest.mark.parametrize("max_chars", [20, 80, 300])
def test_best_snippet_stays_within_the_limit(max_chars: int) -> None:
    text = "\n".join(f"Line {i} has words and a period. Another sentence here!" for i in range(50)) + " walrus."

    snippet = best_snippet(text, ["walrus"], max_chars)

    assert len(snippet) <= max_chars
    assert "walrus" in snippet


def test_best_snippet_returns_short_text_whole() -> None:
    assert best_snippet("  short text  ", ["x"], 100) == "short text"


def test_best_snippet_keeps_a_hit_in_the_last_sentence() -> None:
    text = " ".join(f"Sentence {i} is filler." for i in range(30)) + " Where is the walrus?"

    snippet = best_snippet(text, ["walrus"], 100)

    assert snippet.endswith("Where is the walrus?")
    assert snippet.startswith("…") and len(snippet) <= 100


def test_best_snippet_cuts_a_long_sentence_around_its_hit() -> None:
    text = "Intro. " + " ".join(f"word{i}" for i in range(300)) + " walrus " + " ".join(f"more{i}" for i in range(300))

    snippet = best_snippet(text, ["walrus"], 80)

    assert "walrus" in snippet
    assert len(snippet) <= 80
    assert snippet.startswith("…") and snippet.endswith("…")


def test_best_snippet_prefers_the_window_with_most_terms() -> None:
    text = "Alpha beta. " * 20 + "The walrus met the narwhal. " + "Gamma delta. " * 20

    snippet = best_snippet(text, ["walrus", "narwhal"], 60)

    assert "The walrus met the narwhal." in snippet
