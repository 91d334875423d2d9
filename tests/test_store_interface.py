"""The store interface is enough: ingest, search, lookups and the MCP server over a store written
from it alone (tests/memory_store.py) and over Milvus (milvus-lite, run for real), and the local
store answering the interface's promises. The shared tests run once per store (`catalog` fixture)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import FakeEmbedder
from mcp import Client
from memory_store import MemoryCatalog
from milvus_fixtures import needs_milvus

from mcpower.errors import DatasetLockedError
from mcpower.ingestion import IngestOptions, ingest
from mcpower.registry import Registry
from mcpower.results import SearchFilters
from mcpower.search import get_metadata, get_source, search
from mcpower.server.app import create_server
from mcpower.store import Catalog
from mcpower.store.local import LocalCatalog


@pytest.fixture(params=["memory", pytest.param("milvus", marks=needs_milvus)])
def memory(request: pytest.FixtureRequest, corpus: Path) -> tuple[Catalog, Registry]:
    """The corpus ingested as 'docs' into a store of each kind, and a registry over it."""
    catalog: Catalog = MemoryCatalog() if request.param == "memory" else request.getfixturevalue("milvus_catalog")
    ingest(corpus, catalog, IngestOptions(dataset_id="docs"), embedder=FakeEmbedder())
    return catalog, Registry(catalogs=[catalog], embedder_factory=lambda model: FakeEmbedder())


@pytest.mark.parametrize("mode", ["hybrid", "semantic", "keyword"])
def test_search_and_lookups_over_a_store_written_from_the_interface(
    memory: tuple[Catalog, Registry], mode: str
) -> None:
    _, registry = memory

    response = search(registry, "zephyrine daemon", dataset="docs", mode=mode)

    top = response.results[0]
    assert (top.path, top.dataset) == ("guide/install.md", "docs")
    assert "zephyrine" in get_source(registry, top.result_id, "section").content
    assert get_metadata(registry, top.result_id).chunk_count >= 1


def test_filters_and_incremental_ingest_over_the_memory_store(memory: tuple[Catalog, Registry], corpus: Path) -> None:
    catalog, registry = memory
    fake = FakeEmbedder()

    hits = search(registry, "zephyrine", dataset="docs", filters=SearchFilters(folder="api")).results
    (corpus / "notes.txt").write_text("The harpsichord moved to the zephyrine room.\n")
    report = ingest(corpus, catalog, IngestOptions(dataset_id="docs"), embedder=fake)

    assert all(h.path.startswith("api/") for h in hits)
    assert (report.changed, report.unchanged, report.full_rebuild) == (1, 4, False)
    assert len(fake.embedded) == 1  # only the changed file's chunk
    assert any(r.path == "notes.txt" for r in search(registry, "zephyrine harpsichord", dataset="docs").results)


def test_one_writer_per_dataset_in_any_catalog(memory: tuple[Catalog, Registry], corpus: Path) -> None:
    catalog, _ = memory

    with catalog.lock("docs"), pytest.raises(DatasetLockedError):
        ingest(corpus, catalog, IngestOptions(dataset_id="docs"), embedder=FakeEmbedder())


def test_ids_are_unique_across_catalogs(memory: tuple[Catalog, Registry], corpus: Path, datasets_dir: Path) -> None:
    catalog, _ = memory
    ingest(corpus, datasets_dir, IngestOptions(dataset_id="docs"), embedder=FakeEmbedder())

    registry = Registry(datasets_dir, catalogs=[catalog], embedder_factory=lambda model: FakeEmbedder())

    by_id = {e.id: e for e in registry.entries()}
    assert by_id["docs"].status == "ready" and by_id["docs"].location == "docs"  # the first catalog keeps it
    [clash] = [e for i, e in by_id.items() if i.startswith("docs@")]  # docs@memory:docs, docs@milvus:docs
    assert clash.status == "error" and "already used by docs" in str(clash.error)


@pytest.mark.anyio
async def test_the_mcp_server_serves_a_store_written_from_the_interface(memory: tuple[Catalog, Registry]) -> None:
    _, registry = memory

    async with Client(create_server(registry)) as client:
        listed = await client.call_tool("knowledge_list_datasets", {})
        found = await client.call_tool("knowledge_search", {"query": "marmalade session"})
        resources = await client.list_resources()

    assert [d["id"] for d in listed.structured_content["datasets"]] == ["docs"]
    assert found.structured_content["results"][0]["path"] == "api/reference.md"
    assert len(resources.resources) == 5


def test_the_local_catalog_keeps_unchanged_entries_and_sees_republishes(corpus: Path, datasets_dir: Path) -> None:
    catalog = LocalCatalog(datasets_dir)
    ingest(corpus, catalog, IngestOptions(dataset_id="docs"), embedder=FakeEmbedder())
    [entry] = catalog.scan()

    assert catalog.refresh(entry) is entry
    ingest(corpus, catalog, IngestOptions(dataset_id="docs", description="again"), embedder=FakeEmbedder())
    fresh = catalog.refresh(entry)

    assert fresh is not entry and fresh.info is not None and fresh.info.description == "again"
    assert catalog.location("docs") == str(datasets_dir.resolve() / "docs")
