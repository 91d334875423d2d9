"""Property-based fuzzing with hypothesis: manifest reading, search arguments, FTS5 query building.

Each property is "a valid answer or one of our errors, never another exception": the fuzzers
look for the inputs that reach code nobody wrote an error path for.
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import FakeEmbedder, match_query, valid_manifest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from server_fixtures import build_datasets

from mcpower.errors import InvalidManifestError, McpowerError
from mcpower.manifest import MANIFEST_NAME, Manifest, read_manifest
from mcpower.registry import Registry
from mcpower.results import MODES, SearchFilters, SearchResponse
from mcpower.search import search
from mcpower.store.local.fts import FTS_TOKENIZER

# Modest budgets: the whole file runs in a few seconds on a loaded two-core machine.
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

VALID = valid_manifest()

# Any text, lone surrogates included (what argv bytes that are not UTF-8 become in Python).
ANY_TEXT = st.text(st.characters(exclude_categories=()), max_size=60)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True) | ANY_TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(ANY_TEXT, inner, max_size=4),
    max_leaves=8,
)


@pytest.fixture(scope="module")
def manifest_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("fuzz") / "docs"
    folder.mkdir()
    return folder


def check_read(folder: Path, data: bytes) -> None:
    """read_manifest gives a Manifest or InvalidManifestError; anything else fails the test."""
    (folder / MANIFEST_NAME).write_bytes(data)
    try:
        manifest = read_manifest(folder / MANIFEST_NAME)
    except InvalidManifestError as e:
        assert e.message.startswith("docs/manifest.json: ")
        return
    assert isinstance(manifest, Manifest)
    manifest.to_json()  # whatever was accepted can be written back


def test_valid_manifest_reads(manifest_dir: Path) -> None:
    check_read(manifest_dir, json.dumps(VALID).encode())
    assert read_manifest(manifest_dir / MANIFEST_NAME).id == "docs"


@FUZZ
@given(data=st.binary(max_size=2048))
def test_read_manifest_on_arbitrary_bytes(manifest_dir: Path, data: bytes) -> None:
    check_read(manifest_dir, data)


def _paths(obj: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every key path in a JSON object, containers included."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield (*prefix, k)
            yield from _paths(v, (*prefix, k))


@st.composite
def mutated_manifests(draw: st.DrawFn) -> bytes:
    """The valid manifest with a few fields replaced, removed or added, then serialized (NaN allowed)."""
    m = json.loads(json.dumps(VALID))
    paths = list(_paths(m))
    for _ in range(draw(st.integers(1, 4))):
        path = draw(st.sampled_from(paths))
        parent = m
        for key in path[:-1]:
            parent = parent.get(key) if isinstance(parent, dict) else None
        if not isinstance(parent, dict):
            continue
        action = draw(st.sampled_from(["replace", "delete", "add", "numeric-edge"]))
        if action == "replace":
            parent[path[-1]] = draw(JSON_VALUES)
        elif action == "delete":
            parent.pop(path[-1], None)
        elif action == "add":
            parent[draw(ANY_TEXT)] = draw(JSON_VALUES)
        else:
            parent[path[-1]] = draw(
                st.sampled_from([0, -1, 2**63, -(2**63) - 1, 10**400, 1e308, -0.0, math.nan, math.inf, True, "5", ""])
            )
    return json.dumps(m, allow_nan=True).encode("utf-8", "surrogatepass")


@FUZZ
@given(data=mutated_manifests())
def test_read_manifest_on_mutated_manifests(manifest_dir: Path, data: bytes) -> None:
    check_read(manifest_dir, data)


# ---------------------------------------------------------------- search


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    datasets = build_datasets(tmp_path_factory.mktemp("fuzz-search"))
    reg = Registry(datasets, embedder_factory=lambda model: FakeEmbedder())
    yield reg
    reg.close()


WORDS = st.sampled_from(["zephyrine", "toolkit", "marmalade", "bread", "NEAR", "AND", '"', "*", "-", "(", "日本語"])
QUERIES = st.one_of(ANY_TEXT, st.lists(WORDS | ANY_TEXT, max_size=8).map(" ".join), st.text(max_size=1100))
OPTIONAL_TEXT = st.none() | ANY_TEXT | st.sampled_from(["guide", "guide/install.md", ".md", "md", "../..", "/", "\\"])


@FUZZ
@given(
    query=QUERIES,
    dataset=st.none() | st.sampled_from(["handbook", "recipes", "nope", "", "../handbook"]) | ANY_TEXT,
    top_k=st.none() | st.integers() | st.floats(allow_nan=True) | st.booleans(),
    mode=st.sampled_from(MODES) | ANY_TEXT,
    path=OPTIONAL_TEXT,
    folder=OPTIONAL_TEXT,
    file_type=OPTIONAL_TEXT,
    min_score=st.floats(allow_nan=True, allow_infinity=True),
)
def test_search_gives_a_response_or_our_error(
    registry: Registry,
    query: str,
    dataset: str | None,
    top_k: Any,
    mode: str,
    path: str | None,
    folder: str | None,
    file_type: str | None,
    min_score: float,
) -> None:
    try:
        response = search(
            registry,
            query,
            dataset=dataset,
            top_k=top_k,
            mode=mode,
            filters=SearchFilters(path=path, folder=folder, file_type=file_type),
            min_score=min_score,
        )
    except McpowerError as e:
        assert e.code and e.message
        return
    assert isinstance(response, SearchResponse)
    assert response.meta.count == len(response.results) <= (top_k or 100)
    assert all(0.0 <= r.score <= 1.0 and r.score >= min_score for r in response.results)
    json.loads(response.model_dump_json())  # serializable: nothing unencodable reached the answer


# ---------------------------------------------------------------- FTS5 queries


@pytest.fixture(scope="module")
def fts() -> Iterator[sqlite3.Connection]:
    db = sqlite3.connect(":memory:")
    db.execute(f"CREATE VIRTUAL TABLE t USING fts5(text, tokenize='{FTS_TOKENIZER}')")
    db.executemany("INSERT INTO t VALUES (?)", [("zephyrine daemon",), ("日本語のテキスト",), ("near and or not",)])
    yield db
    db.close()


@FUZZ
@given(text=QUERIES)
def test_match_query_always_parses_in_fts5(fts: sqlite3.Connection, text: str) -> None:
    match = match_query(text)
    if match is None:
        return
    fts.execute("SELECT rowid, bm25(t) FROM t WHERE t MATCH ? ORDER BY rank", (match,)).fetchall()


@pytest.mark.parametrize("word", ["zephyrine", "DAEMON", "日本", "テキスト", "near", "NOT"])
def test_match_query_finds_what_was_indexed(fts: sqlite3.Connection, word: str) -> None:
    from mcpower.store.local.fts import segment

    fts.execute("INSERT INTO t VALUES (?)", (segment(f"prefix {word} suffix"),))
    match = match_query(word)
    assert match is not None
    assert fts.execute("SELECT count(*) FROM t WHERE t MATCH ?", (match,)).fetchone()[0] >= 1
