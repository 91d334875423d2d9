"""The store interface is enough: ingest, search, lookups and the MCP server over a store written
from it alone (tests/memory_store.py) and over Milvus (milvus-lite, run for real), and the local
store answering the interface's promises. The shared tests run once per store (`catalog` fixture)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import FakeEmbedder, write_files
from mcp import Client
from memory_store import MemoryCatalog, MemoryStore
from milvus_fixtures import needs_milvus

from mcpower.errors import DatasetLockedError
from mcpower.ingestion import IngestOptions, ingest
from mcpower.registry import Registry
from mcpower.results import SearchFilters
from mcpower.search import get_metadata, get_source, search
from mcpower.server.app import create_server
from mcpower.store import Catalog, DocumentSummary, Store
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


# ---------------------------------------------------------------- listing documents costs what is shown


@pytest.fixture(params=["local", "memory", pytest.param("milvus", marks=needs_milvus)])
def any_store(request: pytest.FixtureRequest, corpus: Path, datasets_dir: Path) -> Store:
    """The corpus ingested as 'docs' into a store of each kind (local too), loaded."""
    catalog: Catalog = {"local": lambda: LocalCatalog(datasets_dir), "memory": MemoryCatalog}.get(
        request.param, lambda: request.getfixturevalue("milvus_catalog")
    )()
    ingest(corpus, catalog, IngestOptions(dataset_id="docs"), embedder=FakeEmbedder())
    return Registry(catalogs=[catalog], embedder_factory=lambda model: FakeEmbedder()).store("docs")


def test_documents_given_a_limit_are_the_first_ingested_listed_by_path(any_store: Store) -> None:
    by_id = [d.path for d, _ in any_store.iter_documents()]  # in ingest order
    every = any_store.documents()

    assert [d.path for d in every] == sorted(by_id)
    assert [d.path for d in any_store.documents(limit=2)] == sorted(by_id[:2])
    assert any_store.documents(limit=100) == every
    assert any_store.documents(limit=0) == []


@needs_milvus
def test_milvus_reads_only_the_rows_a_limited_listing_shows(milvus_catalog: Any, corpus: Path) -> None:
    ingest(corpus, milvus_catalog, IngestOptions(dataset_id="docs"), embedder=FakeEmbedder())
    store = Registry(catalogs=[milvus_catalog], embedder_factory=lambda model: FakeEmbedder()).store("docs")
    client = milvus_catalog.client()
    read: list[int] = []
    query_iterator = client.query_iterator

    def counting(*args: Any, **kwargs: Any) -> Any:
        it = query_iterator(*args, **kwargs)
        next_page = it.next

        def counted() -> Any:
            page = next_page()
            read.append(len(page))
            return page

        it.next = counted
        return it

    client.query_iterator = counting
    try:
        store.documents(limit=2)
    finally:
        del client.query_iterator
    assert sum(read) <= 2


def test_the_local_store_reads_only_the_rows_a_limited_listing_shows(tmp_path: Path, datasets_dir: Path) -> None:
    """Counted in SQLite virtual machine steps (deterministic): a listing of 3 of 300 documents
    takes a small fraction of the steps of all 300."""
    write_files(tmp_path / "many", {f"d{n:03}/note.txt": f"note {n}\n" for n in range(300)})
    ingest(tmp_path / "many", datasets_dir, IngestOptions(dataset_id="many"), embedder=FakeEmbedder())
    store = Registry(datasets_dir, embedder_factory=lambda model: FakeEmbedder()).store("many")

    def steps(limit: int | None) -> int:
        count = [0]
        with store._db.connection() as db:  # the pool's one idle connection: the listing borrows it next
            db.set_progress_handler(lambda: count.__setitem__(0, count[0] + 1) or 0, 1)
        try:
            assert len(store.documents(limit)) == (300 if limit is None else limit)
        finally:
            with store._db.connection() as db:
                db.set_progress_handler(None, 1)
        return count[0]

    assert steps(3) * 20 < steps(None)


@pytest.mark.anyio
async def test_resources_list_asks_each_store_only_for_what_it_still_shows(
    monkeypatch: pytest.MonkeyPatch, corpus: Path
) -> None:
    from mcpower.server import documents as resources

    catalog = MemoryCatalog()
    for ds in ("aaa", "bbb"):
        ingest(corpus, catalog, IngestOptions(dataset_id=ds), embedder=FakeEmbedder())
    asked: list[tuple[str, int | None, int]] = []
    documents = MemoryStore.documents

    def spy(self: MemoryStore, limit: int | None = None) -> list[DocumentSummary]:
        rows = documents(self, limit)
        asked.append((self.info.id, limit, len(rows)))
        return rows

    monkeypatch.setattr(MemoryStore, "documents", spy)
    monkeypatch.setattr(resources, "MAX_LISTED_RESOURCES", 7)  # the 5 documents of aaa, then 2 of bbb's 5
    registry = Registry(catalogs=[catalog], embedder_factory=lambda model: FakeEmbedder())
    async with Client(create_server(registry)) as client:
        listed = (await client.list_resources()).resources

    assert len(listed) == 7
    assert asked == [("aaa", 7, 5), ("bbb", 2, 2)]
