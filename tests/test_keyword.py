"""Keyword postings: the same BM25 as FTS5's bm25(), for any query, with filters, and for older databases."""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import numpy as np
import pytest
from conftest import match_query, valid_manifest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcpower.errors import IndexMismatchError
from mcpower.manifest import Manifest
from mcpower.results import SearchFilters
from mcpower.store import ChunkRow, DocumentRow, chunk_id
from mcpower.store.local import blockmax, keyword, postings
from mcpower.store.local.build import write_metadata
from mcpower.store.local.fts import query_phrases
from mcpower.store.local.keyword import COLUMN_WEIGHTS, KeywordHits, _varints, chunk_ids, row_sizes
from mcpower.store.local.schema import POSTINGS, has_postings
from mcpower.store.local.store import LocalStore

# Stems that collide (run/running/runs), diacritics, digits, a word in more than half the chunks
# (its idf is clamped), CJK characters, and FTS5 operators as plain words.
VOCAB = [
    "run",
    "running",
    "runs",
    "runner",
    "café",
    "cafe",
    "naïve",
    "naive",
    "widget",
    "widgets",
    "gadget",
    "42",
    "x2",
    "common",
    "common",
    "common",
    "common",
    "common",
    "near",
    "and",
    "or",
    "not",
    "安",
    "装",
    "指",
    "南",
    "設",
    "定",
]
FOLDERS = ("guide", "api", "notes")


def _corpus(seed: int) -> tuple[list[DocumentRow], list[ChunkRow]]:
    rng = random.Random(seed)
    docs, chunks = [], []
    for d in range(1, 31):
        path = f"{FOLDERS[d % 3]}/doc{d}.{'md' if d % 2 else 'txt'}"
        title = " ".join(rng.choices(VOCAB, k=rng.randint(0, 3)))
        docs.append(DocumentRow(d, path, title, "." + path.rsplit(".", 1)[1], 1, 0.0, "h", "t", ""))
        for o in range(rng.randint(0, 4)):
            text = "".join(w if w in "安装指南設定" else f" {w} " for w in rng.choices(VOCAB, k=rng.randint(1, 40)))
            heading = " > ".join(rng.choices(VOCAB, k=rng.randint(0, 2)))
            chunks.append(ChunkRow(chunk_id(path, text, o), d, o, heading, 1, 2, text))
    return docs, chunks


@pytest.fixture(scope="module")
def corpus_db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[sqlite3.Connection]:
    path = tmp_path_factory.mktemp("keyword") / "meta.sqlite"
    write_metadata(path, *_corpus(seed=7), analysed=False)  # FTS5 Porter: datasets before analysis
    with closing(sqlite3.connect(path, check_same_thread=False)) as db:
        yield db


def make_store(db: sqlite3.Connection, postings: bool = True) -> LocalStore:
    return LocalStore(Manifest.model_validate(valid_manifest()), Path("."), None, db, chunk_ids(db), postings)


def fts5_scores(db: sqlite3.Connection, query: str) -> dict[int, float]:
    """What FTS5 itself says: -bm25() with the column weights, for every match of the OR query."""
    match = match_query(query)
    if match is None:
        return {}
    rows = db.execute(
        "SELECT rowid, -bm25(chunks_fts, ?, ?, ?) FROM chunks_fts WHERE chunks_fts MATCH ?", (*COLUMN_WEIGHTS, match)
    ).fetchall()
    return dict(rows)


def as_dict(hits: KeywordHits) -> dict[int, float]:
    return dict(zip(hits.ids.tolist(), hits.scores.tolist()))


queries = st.lists(
    st.sampled_from([*VOCAB, "安装", "指南設定", "unknownword", "the", "Café", "RUNNING"]), max_size=8
).map(" ".join) | st.text(max_size=40)


@settings(max_examples=150, deadline=None)
@given(query=queries)
def test_postings_score_exactly_as_fts5_bm25(corpus_db: sqlite3.Connection, query: str) -> None:
    expected = fts5_scores(corpus_db, query)

    got = as_dict(make_store(corpus_db).keyword(query))

    assert got.keys() == expected.keys()
    for i, score in expected.items():
        assert got[i] == pytest.approx(score, rel=1e-5, abs=1e-6)


@settings(max_examples=60, deadline=None)
@given(query=queries)
def test_a_database_without_postings_is_scored_by_fts5_alone(corpus_db: sqlite3.Connection, query: str) -> None:
    with_postings = as_dict(make_store(corpus_db).keyword(query))

    without = as_dict(make_store(corpus_db, postings=False).keyword(query))

    assert without.keys() == with_postings.keys()
    for i, score in with_postings.items():
        assert without[i] == pytest.approx(score, rel=1e-5, abs=1e-6)


def test_cjk_runs_are_phrases_and_single_words_come_from_postings(corpus_db: sqlite3.Connection) -> None:
    phrases = query_phrases("running 安装指南 café")

    assert [p.tokens for p in phrases] == [("run",), ("安", "装", "指", "南"), ("cafe",)]
    assert as_dict(make_store(corpus_db).keyword("安装指南")) == pytest.approx(fts5_scores(corpus_db, "安装指南"))


@pytest.mark.parametrize(
    "filters",
    [SearchFilters(folder="guide"), SearchFilters(file_type="txt"), SearchFilters(path="api/doc1.md")],
)
def test_filters_keep_only_allowed_chunks_with_unchanged_scores(
    corpus_db: sqlite3.Connection, filters: SearchFilters
) -> None:
    store = make_store(corpus_db)
    allowed = {
        i
        for i, path, file_type in corpus_db.execute(
            "SELECT c.id, d.path, d.file_type FROM chunks c JOIN documents d ON d.id = c.document_id"
        )
        if (filters.folder is None or path.startswith(filters.folder + "/"))
        and (filters.file_type is None or file_type == "." + filters.file_type)
        and (filters.path is None or path == filters.path)
    }

    everything = as_dict(store.keyword("widget run 安装"))
    filtered = as_dict(store.keyword("widget run 安装", filters))

    assert filtered == {i: s for i, s in everything.items() if i in allowed}


@pytest.mark.parametrize("filters", [None, SearchFilters(folder="guide"), SearchFilters(file_type="txt")])
def test_the_stores_top_k_by_cells_is_every_match_scored_also_from_cached_lists(
    corpus_db: sqlite3.Connection, filters: SearchFilters | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(postings, "BLOCKMAX_MIN_CHUNKS", 0)  # block-max however small the dataset
    monkeypatch.setattr(postings, "FULL_COUNT_SHARE", 100.0)
    monkeypatch.setattr(blockmax, "CELL_SHIFT", 1)  # cells of two chunks: most of them skipped
    monkeypatch.setattr(blockmax, "FIRST_CELLS", 1)
    monkeypatch.setattr(postings, "CACHE_MIN_ROWS", 1)  # every list kept once read
    store = make_store(corpus_db)
    for query in ("widget run 安装", "common naive 42 gadget", "running widgets cafe near x2"):
        first = store.keyword(query, filters)
        everything = KeywordHits(first.ids, first.scores)
        assert len(everything) > 0
        for k in (1, 3, 10, 1000):
            assert store.keyword(query, filters).top(k) == everything.top(k)  # the second and later: cached


def test_row_sizes_read_from_fts5_match_its_own_token_count(corpus_db: sqlite3.Connection) -> None:
    corpus_db.execute("CREATE VIRTUAL TABLE temp.chunks_vocab USING fts5vocab(main, chunks_fts, 'instance')")
    try:
        counted = dict(corpus_db.execute("SELECT doc, count(*) FROM temp.chunks_vocab GROUP BY doc"))
        ids = chunk_ids(corpus_db)

        sizes = row_sizes(corpus_db, ids)
        # An id the docsize table lacks: sizes come from counting instead, the same for the others.
        fallback = row_sizes(corpus_db, np.append(ids, ids[-1] + 1))
    finally:
        corpus_db.execute("DROP TABLE temp.chunks_vocab")

    assert sizes.tolist() == [counted.get(i, 0) for i in ids.tolist()]
    assert fallback[:-1].tolist() == sizes.tolist()


def test_varints_decode_sqlite_varints() -> None:
    assert _varints(bytes([0x05, 0x7F, 0x81, 0x00, 0x82, 0x80, 0x01])) == [5, 127, 128, 32769]


def test_top_orders_by_score_then_id_and_keeps_ties_at_the_cut() -> None:
    hits = KeywordHits(np.array([3, 5, 8, 9, 12], dtype=np.int64), np.array([1.0, 2.0, 2.0, 0.5, 2.0]))

    assert hits.top(2) == [(5, 2.0), (8, 2.0)]
    assert hits.top(4) == [(5, 2.0), (8, 2.0), (12, 2.0), (3, 1.0)]
    assert hits.top(10) == [(5, 2.0), (8, 2.0), (12, 2.0), (3, 1.0), (9, 0.5)]
    assert KeywordHits.none().top(5) == []


def test_scores_of_answers_only_matched_ids() -> None:
    hits = KeywordHits(np.array([3, 5, 8], dtype=np.int64), np.array([1.0, 2.0, 3.0]))

    assert hits.scores_of([8, 4, 3, 100, 0]) == {8: 3.0, 3: 1.0}
    assert hits.scores_of([]) == {}


def test_an_empty_dataset_has_postings_and_no_matches(tmp_path: Path) -> None:
    write_metadata(tmp_path / "meta.sqlite", [], [], analysed=True)

    with closing(sqlite3.connect(tmp_path / "meta.sqlite", check_same_thread=False)) as db:
        assert has_postings(db)
        assert len(make_store(db).keyword("widget")) == 0


def test_postings_pointing_past_the_chunk_table_are_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "meta.sqlite"
    write_metadata(path, *_corpus(seed=3), analysed=False)
    with closing(sqlite3.connect(path, check_same_thread=False)) as db:
        db.execute(f"UPDATE {POSTINGS} SET chunk_rows = ? WHERE term = 'widget'", (np.int32(10**6).tobytes(),))
        db.execute(f"UPDATE {POSTINGS} SET impacts = ? WHERE term = 'widget'", (np.float32(1).tobytes(),))

        with pytest.raises(IndexMismatchError, match="re-run `mcpower ingest`"):
            make_store(db).keyword("widget")


@pytest.mark.parametrize("block", [1, 2, 7])
def test_postings_written_a_block_at_a_time_equal_those_written_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block: int
) -> None:
    """Postings are made a block of (term, chunk) rows at a time, so memory stays bounded at a million
    chunks; a term whose rows span blocks is still one postings row with every chunk and the same idf."""
    corpus = _corpus(seed=11)

    def postings(name: str) -> list[tuple[str, bytes, bytes]]:
        path = tmp_path / name
        write_metadata(path, *corpus, analysed=True)
        with closing(sqlite3.connect(path)) as db:
            return db.execute(f"SELECT * FROM {POSTINGS} ORDER BY term").fetchall()

    at_once = postings("once.sqlite")
    monkeypatch.setattr(keyword, "POSTINGS_BLOCK", block)
    assert postings("blocks.sqlite") == at_once
    assert len({term for term, _, _ in at_once}) == len(at_once) > 20
