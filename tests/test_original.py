"""Datasets of the original system's format, served as they are: listed, validated, searched in
every mode, looked up, over the CLI and MCP (small fake-embedded fixtures; the real seed datasets
with the real model are in test_original_seeds.py)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from conftest import FakeEmbedder
from mcp import Client
from original_fixtures import RECORDS, embed, records, write_index, write_original
from typer.testing import CliRunner

from mcpower.cli.app import app
from mcpower.ingestion import IngestOptions, ingest
from mcpower.registry import Registry
from mcpower.results import SearchFilters
from mcpower.search import get_metadata, get_source, search
from mcpower.server.app import create_server
from mcpower.store.original.info import OriginalInfo
from mcpower.store.original.store import open_original

pytestmark = pytest.mark.usefixtures("fake_packaged")


@pytest.fixture
def root(tmp_path: Path, corpus: Path) -> Path:
    """A datasets root with one dataset of each format: `orig` (original) and `docs` (ingested)."""
    datasets = tmp_path / "datasets"
    write_original(datasets / "orig")
    ingest(corpus, datasets, IngestOptions(dataset_id="docs"), embedder=FakeEmbedder())
    return datasets


@pytest.fixture
def registry(root: Path) -> Iterator[Registry]:
    r = Registry(root, embedder_factory=lambda model: FakeEmbedder())
    yield r
    r.close()


def oracle(folder: Path, query: str, k: int) -> list[tuple[str, int, float]]:
    """The original system's own search: inner product over the stored vectors with faiss
    (python/bridge.py), as (path, chunk number, score)."""
    import faiss

    index = faiss.read_index(str(folder / "index" / "docs.index"))
    meta = json.loads((folder / "metadata.json").read_text())
    docs = meta if isinstance(meta, list) else meta["documents"]
    scores, rows = index.search(FakeEmbedder().embed_query(query).reshape(1, -1), k)
    return [(docs[i]["path"], docs[i].get("chunk", 1), float(s)) for s, i in zip(scores[0], rows[0]) if i >= 0]


# ---------------------------------------------------------------- listing and validation


def test_listed_ready_beside_a_native_dataset(registry: Registry) -> None:
    entries = {e.id: e for e in registry.entries()}
    assert {i: e.status for i, e in entries.items()} == {"orig": "ready", "docs": "ready"}
    summary = entries["orig"].summary()
    assert (summary.format, summary.documents, summary.chunks) == ("original", 3, 6)
    assert summary.file_types == {".md": 2, ".txt": 1}  # documents per file type, from the records' paths
    assert summary.model == "all-MiniLM-L6-v2" and summary.updated_at == "2026-11-23T08:24:58+00:00"
    assert entries["docs"].summary().format == "mcpower"
    info = entries["orig"].info
    assert isinstance(info, OriginalInfo) and info.source_model == "sentence-transformers/all-MiniLM-L6-v2"
    assert info.index_file == "index/docs.index"
    assert any("mcpower import" in n and "no checksums" in n for n in entries["orig"].notes)


def test_validate_says_there_are_no_checksums_and_verifies_the_rest(root: Path) -> None:
    result = CliRunner().invoke(app, ["validate", "--datasets-dir", str(root)])
    assert result.exit_code == 0, result.output
    assert "ready  orig: 3 documents, 6 chunks" in result.stdout
    assert "note: orig: in the original system's format" in result.stderr
    assert "no checksums" in result.stderr and "vector count equals the record count" in result.stderr
    assert "`mcpower import <datasets dir>/orig`" in result.stderr and str(root) not in result.output
    assert "note: docs" not in result.stderr


def test_datasets_cli_says_how_to_upgrade(root: Path) -> None:
    result = CliRunner().invoke(app, ["datasets", "--datasets-dir", str(root)])
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("orig "))
    hint = next(line for line in lines[at + 1 :] if "original system's format" in line)
    assert f"`mcpower import {root / 'orig'}` converts it" in hint
    assert not any("original system's format" in line for line in lines[: at + 1])  # not for `docs`
    data = json.loads(CliRunner().invoke(app, ["datasets", "--datasets-dir", str(root), "--json"]).stdout)
    assert {d["id"]: d["format"] for d in data["datasets"]} == {"docs": "mcpower", "orig": "original"}


def test_bare_list_metadata_like_sample_docs(tmp_path: Path, make_registry: Callable[[], Registry]) -> None:
    folder = write_original(tmp_path / "datasets" / "bare", bare=True)
    info = make_registry().entry("bare").info
    assert isinstance(info, OriginalInfo)
    assert info.source_model == "sentence-transformers/all-MiniLM-L6-v2"  # what the original bridge assumes
    assert info.created_at.timestamp() == pytest.approx((folder / "metadata.json").stat().st_mtime, abs=1)


@pytest.mark.parametrize(("index", "expected"), [("index/docs.index", "index/docs.index"), ("ix", "ix/a.faiss")])
def test_index_as_a_file_or_the_first_index_file_of_a_folder(tmp_path: Path, index: str, expected: str) -> None:
    folder = write_original(tmp_path / "datasets" / "orig", manifest={"index": index})
    vectors = embed([r["content"] for r in RECORDS])
    write_index(folder / "ix" / "b.index", vectors[::-1])  # sorts after a.faiss: not the one read
    write_index(folder / "ix" / "a.faiss", vectors)
    registry = Registry(tmp_path / "datasets", embedder_factory=lambda m: FakeEmbedder())
    info = registry.entry("orig").info
    assert isinstance(info, OriginalInfo) and info.index_file == expected
    assert search(registry, "quokka", "orig", mode="semantic").results[0].path == "guide/usage.md"
    registry.close()


# ---------------------------------------------------------------- search


@pytest.mark.parametrize("query", ["quokka diagnostics", "how do I install it on windows", "harpsichord", "zzz"])
def test_semantic_search_is_the_original_systems_search(root: Path, registry: Registry, query: str) -> None:
    got = search(registry, query, "orig", top_k=6, mode="semantic", group="none").results  # chunks, as the original
    want = oracle(root / "orig", query, 6)
    # Chunks sharing no word with the query score 0 in both, in an order of their own: compare the rest.
    matching = [(path, n) for path, n, score in want if score > 1e-6]
    assert len(got) == len(want) == 6
    assert [(r.path, r.lines.start) for r in got][: len(matching)] == matching
    for r, (_, _, score) in zip(got, want):
        assert r.score == pytest.approx(max(score, 0.0), abs=1e-4)


def test_keyword_and_hybrid_search(registry: Registry) -> None:
    kw = search(registry, "harpsichord", "orig", mode="keyword").results
    assert [(r.path, r.lines.start) for r in kw] == [("notes.txt", 1)]
    hy = search(registry, "zephyrine windows installer reboot", "orig", group="none").results  # its chunks
    assert (hy[0].path, hy[0].lines.start, hy[0].title) == ("guide/install.md", 2, "Installation")
    assert all(0.0 <= r.score <= 1.0 for r in hy)
    assert hy[0].heading_path == "" and hy[0].file_type == ".md"
    assert "installer" in hy[0].snippet


def test_search_of_all_datasets_merges_both_formats(registry: Registry) -> None:
    response = search(registry, "zephyrine", mode="keyword", top_k=20)
    assert set(response.meta.datasets) == {"orig", "docs"}
    assert {r.dataset for r in response.results} == {"orig", "docs"}


@pytest.mark.parametrize(
    ("filters", "paths"),
    [
        (SearchFilters(path="notes.txt"), {"notes.txt"}),
        (SearchFilters(folder="guide"), {"guide/install.md", "guide/usage.md"}),
        (SearchFilters(file_type="txt"), {"notes.txt"}),
    ],
)
def test_filters(registry: Registry, filters: SearchFilters, paths: set[str]) -> None:
    for mode in ("hybrid", "semantic", "keyword"):
        got = search(registry, "the zephyrine quokka harpsichord", "orig", top_k=10, mode=mode, filters=filters)
        assert {r.path for r in got.results} == paths, mode


def test_source_and_metadata_by_chunk_number(registry: Registry) -> None:
    hit = search(registry, "daemon port settings file", "orig", mode="keyword").results[0]
    assert (hit.path, hit.lines.start, hit.lines.end) == ("guide/install.md", 3, 3)
    chunk = get_source(registry, hit.result_id, "chunk")
    assert chunk.content == RECORDS[2]["content"] and chunk.chunk_index == 2
    around = get_source(registry, hit.result_id, "neighbors")
    assert around.content.splitlines() == [RECORDS[1]["content"], RECORDS[2]["content"]]
    assert (around.lines.start, around.lines.end) == (2, 3)
    section = get_source(registry, hit.result_id, "section")
    assert section.content.splitlines() == [r["content"] for r in RECORDS[:3]]
    meta = get_metadata(registry, hit.result_id)
    assert (meta.file_name, meta.title, meta.chunk_index, meta.chunk_count) == ("install.md", "Installation", 2, 3)
    assert meta.indexed_at == "2026-11-23T08:24:58+00:00"


def test_multi_line_records_get_line_ranges(tmp_path: Path) -> None:
    recs = [
        {"title": "T", "path": "a.md", "content": "first line\nsecond line"},
        {"title": "T", "path": "a.md", "content": "third\r\nfourth\nfifth"},
    ]
    write_original(tmp_path / "datasets" / "lines", recs)
    registry = Registry(tmp_path / "datasets", embedder_factory=lambda m: FakeEmbedder())
    hit = search(registry, "fourth", "lines", mode="keyword").results[0]
    assert (hit.lines.start, hit.lines.end) == (3, 5)
    assert get_source(registry, hit.result_id, "section").content == "first line\nsecond line\nthird\nfourth\nfifth"
    registry.close()


def test_untitled_records_take_their_file_name(tmp_path: Path) -> None:
    recs = [{"path": "docs/faq.md", "content": "frequently asked zephyrine questions"}]
    write_original(tmp_path / "datasets" / "untitled", recs, bare=True)
    registry = Registry(tmp_path / "datasets", embedder_factory=lambda m: FakeEmbedder())
    assert search(registry, "zephyrine", "untitled").results[0].title == "faq.md"
    registry.close()


# ---------------------------------------------------------------- loading


def test_store_is_built_in_memory_and_writes_nothing(root: Path, registry: Registry) -> None:
    before = sorted(p.relative_to(root) for p in (root / "orig").rglob("*"))
    store = registry.store("orig")
    assert store.info == registry.entry("orig").info
    assert registry.store("orig") is store  # loaded once
    assert sorted(p.relative_to(root) for p in (root / "orig").rglob("*")) == before
    assert len(store.documents()) == 3


def test_a_changed_metadata_file_is_noticed(root: Path, registry: Registry) -> None:
    assert search(registry, "harpsichord", "orig", mode="keyword").results
    recs = records("orig")
    recs[5]["content"] = "We agreed to ship the xylophone feature next month."
    write_original(root / "orig", recs)
    os.utime(root / "orig" / "metadata.json", ns=(1, 1))  # another stamp, even within the clock's tick
    assert not search(registry, "harpsichord", "orig", mode="keyword").results
    assert search(registry, "xylophone", "orig", mode="keyword").results[0].path == "notes.txt"


def test_open_refuses_a_dataset_changed_since_it_was_listed(root: Path, registry: Registry) -> None:
    info = registry.entry("orig").info
    assert isinstance(info, OriginalInfo)
    write_original(root / "orig", records("orig")[:5], embed([r["content"] for r in RECORDS[:5]]))
    with pytest.raises(Exception, match="changed while it was being loaded"):
        open_original(root / "orig", info)


def test_stored_vectors_are_used_as_they_are(root: Path, registry: Registry) -> None:
    store = registry.store("orig")
    hit = search(registry, "harpsichord", "orig", mode="keyword").results[0]
    cid = int(hit.result_id.split(":")[1], 16)
    assert np.allclose(store.vectors([cid])[0], embed([RECORDS[5]["content"]])[0])


# ---------------------------------------------------------------- MCP


@pytest.mark.anyio
async def test_every_mcp_tool_works_on_it(registry: Registry) -> None:
    async with Client(create_server(registry)) as client:
        listed = (await client.call_tool("knowledge_list_datasets", {})).structured_content
        assert listed is not None
        row = next(d for d in listed["datasets"] if d["id"] == "orig")
        assert (row["status"], row["format"], row["chunks"]) == ("ready", "original", 6)
        args = {"query": "quokka", "dataset": "orig", "mode": "semantic", "group": "none"}  # chunks: record numbers
        r = await client.call_tool("knowledge_search", args)
        assert not r.is_error and r.structured_content is not None
        top = r.structured_content["results"][0]
        assert (top["path"], top["lines"], top["title"]) == ("guide/usage.md", {"start": 1, "end": 1}, "Usage notes")
        for tool in ("knowledge_get_source", "knowledge_get_metadata"):
            r = await client.call_tool(tool, {"result_id": top["result_id"]})
            assert not r.is_error and r.structured_content is not None
            assert r.structured_content["source_path"] == "guide/usage.md"
        resources = (await client.list_resources()).resources
        uri = next(str(x.uri) for x in resources if str(x.uri) == "mcpower://orig/notes.txt")
        text = (await client.read_resource(uri)).contents[0]
        assert "harpsichord" in getattr(text, "text", "")
