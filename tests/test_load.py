"""Serving while a dataset is republished: no restart, no torn read, no error.

A reader keeps answering from the version it loaded while a new one is staged and published, and
the next search after the publish answers from the new one. Versions are told apart by a marker
word in every chunk (tests/republish_fixtures.py): an answer mixing them would be a torn read.
Ends with a small run of benchmarks/load.py (concurrent stdio servers while an ingest republishes).
"""

from __future__ import annotations

import importlib.util
import json
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from conftest import FakeEmbedder
from republish_fixtures import MARKERS, QUERY, version_of, write_versioned_corpus
from server_fixtures import StdioServer, write_launcher

import mcpower.layout
import mcpower.store.local.catalog
import mcpower.store.local.store
from mcpower.ingestion import IngestOptions, ingest
from mcpower.manifest import Manifest
from mcpower.registry import Registry
from mcpower.search import search
from mcpower.store.local.store import LocalStore

DATASET = "live"
BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.fixture
def sources(tmp_path: Path) -> dict[str, Path]:
    return {v: write_versioned_corpus(tmp_path / "src" / v, v, files=12) for v in MARKERS}


@pytest.fixture
def datasets(tmp_path: Path, sources: dict[str, Path]) -> Path:
    publish(sources["v1"], tmp_path / "datasets")
    return tmp_path / "datasets"


@pytest.fixture
def registry(datasets: Path) -> Iterator[Registry]:
    reg = Registry(datasets, embedder_factory=lambda model: FakeEmbedder())
    yield reg
    reg.close()


def publish(source: Path, datasets: Path) -> None:
    ingest(
        source, datasets, IngestOptions(dataset_id=DATASET, replace=True), embedder=FakeEmbedder()
    )  # v1/v2: two folders


def answer(registry: Registry) -> str:
    """The version the registry's next search answers from ('mixed' for a torn read)."""
    response = search(registry, QUERY, dataset=DATASET, top_k=10)
    return version_of(r.model_dump() for r in response.results)


def test_readers_see_the_old_version_until_the_manifest_is_replaced(
    registry: Registry, datasets: Path, sources: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert answer(registry) == "v1"
    seen: dict[str, str] = {}
    write_manifest = mcpower.layout.write_manifest

    def commit(manifest: Manifest, folder: Path) -> Path:
        seen["staged"] = answer(registry)  # v2 is complete on disk, not yet current
        path = write_manifest(manifest, folder)
        seen["committed"] = answer(registry)  # the very next search, same registry, no restart
        return path

    monkeypatch.setattr(mcpower.layout, "write_manifest", commit)
    publish(sources["v2"], datasets)

    assert seen == {"staged": "v1", "committed": "v2"}
    assert answer(registry) == "v2"


def test_a_loaded_store_keeps_answering_after_its_version_is_pruned(
    registry: Registry, datasets: Path, sources: dict[str, Path]
) -> None:
    old = registry.store(DATASET)  # as held by a search still running in another thread
    old_version = datasets / DATASET / Path(old.manifest.index).parts[0]
    publish(sources["v2"], datasets)
    publish(sources["v1"], datasets)  # keeps the current and previous versions: prunes the first

    ids = [i for i, _ in old.keyword(QUERY).top(10)]
    hits = old.chunks(ids)

    assert not old_version.exists()
    assert len(hits) == 10
    assert version_of({"title": h.title, "snippet": h.text} for h in hits.values()) == "v1"
    assert answer(registry) == "v1"


def test_concurrent_searches_during_republishes_are_never_torn(
    registry: Registry, datasets: Path, sources: dict[str, Path]
) -> None:
    stop = threading.Event()
    outcomes: list[str] = []

    def searcher() -> None:
        while not stop.is_set():
            try:
                outcomes.append(answer(registry))
            except Exception as e:  # collected, so the main thread's assertion shows it
                outcomes.append(f"error: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=searcher) for _ in range(4)]
    for t in threads:
        t.start()
    after_publish = []
    try:
        for version in ("v2", "v1", "v2", "v1", "v2"):
            publish(sources[version], datasets)
            after_publish.append(answer(registry) == version)
    finally:
        stop.set()
        for t in threads:
            t.join()

    assert all(after_publish)
    assert outcomes
    assert {o for o in outcomes if o not in MARKERS} == set()


def test_a_publish_racing_the_manifest_read_is_not_missed(
    registry: Registry, datasets: Path, sources: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert answer(registry) == "v1"
    publish(sources["v2"], datasets)
    read_manifest = mcpower.store.local.catalog.read_manifest
    raced: list[bool] = []

    def read_then_republish(path: Path) -> Manifest:
        manifest = read_manifest(path)
        if not raced:  # the writer replaces manifest.json right after the reader read it
            raced.append(True)
            publish(sources["v1"], datasets)
        return manifest

    monkeypatch.setattr(mcpower.store.local.catalog, "read_manifest", read_then_republish)

    assert answer(registry) == "v2"  # what manifest.json said when it was read
    assert answer(registry) == "v1"  # and the publish that raced the read is noticed


def test_a_version_pruned_while_it_loads_gives_way_to_the_current_one(
    registry: Registry, datasets: Path, sources: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert answer(registry) == "v1"
    publish(sources["v2"], datasets)
    open_store = mcpower.store.local.store.open_store
    raced: list[bool] = []

    def open_after_two_publishes(folder: Path, manifest: Manifest, **kwargs: Any) -> LocalStore:
        if not raced:  # the version being loaded is pruned under the reader's feet
            raced.append(True)
            publish(sources["v1"], datasets)
            publish(sources["v2"], datasets)
        return open_store(folder, manifest, **kwargs)

    monkeypatch.setattr(mcpower.store.local.store, "open_store", open_after_two_publishes)

    assert answer(registry) == "v2"
    assert raced


def test_stdio_server_switches_versions_without_restart(
    datasets: Path, sources: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = StdioServer([sys.executable, str(write_launcher(tmp_path)), "serve", "--datasets-dir", str(datasets)])
    try:
        server.initialize()

        def served() -> str:
            result = server.call_tool("knowledge_search", {"query": QUERY, "dataset": DATASET, "top_k": 10})
            assert not result.get("isError"), result
            return version_of(result["structuredContent"]["results"])

        seen = [served()]
        write_manifest = mcpower.layout.write_manifest

        def commit(manifest: Manifest, folder: Path) -> Path:
            seen.append(served())  # the new version is staged beside the old: the server answers the old
            return write_manifest(manifest, folder)

        monkeypatch.setattr(mcpower.layout, "write_manifest", commit)
        publish(sources["v2"], datasets)
        seen.append(served())
        publish(sources["v1"], datasets)
        seen.append(served())
        publish(sources["v2"], datasets)
        seen.append(served())
        server.close_stdin()
        assert server.wait_exit(10) == 0
    finally:
        server.stop()

    assert seen == ["v1", "v1", "v2", "v2", "v1", "v1", "v2"]
    for line in server.stdout_lines:  # nothing but JSON-RPC on stdout
        assert json.loads(line)["jsonrpc"] == "2.0"


def load_benchmark() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mcpower_load_benchmark", BENCHMARKS / "load.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_small_load_run_has_no_errors_and_no_wrong_results(tmp_path: Path) -> None:
    load = load_benchmark()

    report = load.run_load(
        clients=3, searches=50, republish_every=0.0, min_republishes=2, files=12, workdir=tmp_path / "load"
    )

    assert report.republishes >= 2 and report.republish_failures == 0
    assert report.searches >= 150
    assert report.errors == 0, report.error_samples
    assert report.wrong == 0, report.error_samples
    assert report.stale == 0
    assert set(report.versions_seen) == {"v1", "v2"}
    assert report.server_exit_codes == [0, 0, 0]
