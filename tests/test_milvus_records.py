"""Records of the Milvus catalogue collection are data anyone who can write to the database may have
written: a hostile pointer record is that dataset's coded error, never an exception that takes down
`mcpower datasets`, a search of another dataset or the server; publishing over it replaces it; a
hostile lease record does not stop an ingest. Records are written here with pymilvus directly."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import FakeEmbedder
from milvus_fixtures import fresh_db, needs_milvus
from server_fixtures import StdioServer, subprocess_env, write_launcher

from mcpower.ingestion import IngestOptions, ingest
from mcpower.registry import Registry
from mcpower.search import search

pytestmark = needs_milvus


def put(catalog: Any, key: str, value: Any, kind: str = "dataset") -> None:
    """A catalogue record as any pymilvus client writes it (``value``: a JSON object, or its raw text)."""
    from mcpower.store.milvus.schema import CATALOG, PAD_DIM

    row = {"key": key, "kind": kind, "value": value, "updated_ms": 0, "pad": [0.0] * PAD_DIM}
    catalog._ensure_catalog()
    catalog.client().upsert(CATALOG, data=[row])


def pointer(dataset_id: str, version: Any, good: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """A pointer record like ``good`` (a real one), for ``version``, naming the collections that
    version would have, so the record passes the collection-name check."""
    from mcpower.store.milvus.schema import collection_names

    chunks, docs = collection_names(dataset_id, version)
    info = {**good["info"], "id": dataset_id}
    return {**good, "version": version, "chunks": chunks, "docs": docs, "info": info, **changes}


def without(key: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    return lambda record: {k: v for k, v in record.items() if k != key}


# (dataset id, the record, the reason its error names)
Record = Callable[[str, dict[str, Any]], Any]
CASES: list[tuple[str, Record, str]] = [
    ("version-text", lambda i, g: pointer(i, "1e5", g), "version is '1e5', not a whole number"),
    ("version-true", lambda i, g: pointer(i, True, g), "version is True, not a whole number"),
    ("version-negative", lambda i, g: pointer(i, -1, g), "version is -1, not a whole number"),
    ("version-float", lambda i, g: pointer(i, 2.0, g), "version is 2.0, not a whole number"),
    ("version-int64", lambda i, g: pointer(i, 2**63 - 1, g), "version is 9223372036854775807"),
    # pymilvus refuses a number past int64; another client can write one (the engine reads it back as a float)
    ("version-2-70", lambda i, g: json.dumps(pointer(i, 2**70, g)), "version is 1.1805916207174113e+21"),
    ("version-list", lambda i, g: pointer(i, [1], g), "version is a list, not a whole number"),
    ("version-huge-text", lambda i, g: pointer(i, "9" * 100_000, g), "version is '999999999999999999999999'"),
    ("schema-true", lambda i, g: pointer(i, 1, g, schema=True), "written by another mcpower version"),
    ("no-info", lambda i, g: without("info")(pointer(i, 1, g)), "lacks 'info'"),
    ("no-version", lambda i, g: without("version")(pointer(i, 1, g)), "lacks 'version'"),
    ("info-list", lambda i, g: pointer(i, 1, g, info=[1, 2]), "info is a list, not an object"),
    ("info-counts-text", lambda i, g: pointer(i, 1, g, info={**g["info"], "id": i, "counts": "x"}), "counts"),
    ("not-an-object", lambda i, g: [1, 2, 3], "not an object"),
]


@pytest.fixture
def served(milvus_catalog: Any, tmp_path: Path, corpus: Path) -> tuple[Registry, dict[str, Any]]:
    """A registry over a local dataset `mine` and the Milvus dataset `shared`; and shared's pointer record."""
    ingest(corpus, milvus_catalog, IngestOptions(dataset_id="shared"), embedder=FakeEmbedder())
    ingest(corpus, tmp_path / "datasets", IngestOptions(dataset_id="mine"), embedder=FakeEmbedder())
    registry = Registry(tmp_path / "datasets", catalogs=[milvus_catalog], embedder_factory=lambda m: FakeEmbedder())
    return registry, milvus_catalog._get("dataset:shared")


def assert_the_others_served(registry: Registry, broken: str) -> None:
    for dataset in ("mine", "shared"):
        assert search(registry, "zephyrine daemon", dataset).results[0].path == "guide/install.md"
    everything = search(registry, "zephyrine daemon")
    assert set(everything.meta.datasets) == {"mine", "shared"} and broken not in everything.meta.datasets


@pytest.mark.parametrize(("dataset", "record", "reason"), CASES, ids=[c[0] for c in CASES])
def test_a_hostile_pointer_record_is_that_datasets_error_and_a_publish_replaces_it(
    served: tuple[Registry, dict[str, Any]],
    milvus_catalog: Any,
    corpus: Path,
    dataset: str,
    record: Record,
    reason: str,
) -> None:
    registry, good = served
    put(milvus_catalog, f"dataset:{dataset}", record(dataset, good))

    entries = {e.id: e for e in registry.scan()}
    error = entries[dataset].error
    assert error is not None and error.code == "INVALID_MANIFEST" and reason in error.message, error
    assert error.message.startswith(f"milvus:{dataset}: ") and len(error.message) < 400
    assert {i: e.status for i, e in entries.items() if i != dataset} == {"mine": "ready", "shared": "ready"}
    assert_the_others_served(registry, dataset)

    # The ingest that every such error asks for: the record is replaced by a sound one.
    ingest(corpus, milvus_catalog, IngestOptions(dataset_id=dataset), embedder=FakeEmbedder())
    fresh = milvus_catalog._get(f"dataset:{dataset}")
    assert type(fresh["version"]) is int and 1 <= fresh["version"] <= 10**9
    assert search(registry, "zephyrine daemon", dataset).results[0].path == "guide/install.md"
    assert {e.id: e.status for e in registry.scan()} == {"mine": "ready", "shared": "ready", dataset: "ready"}
    registry.close()


FAILURES = [RuntimeError("a bug"), OverflowError("date value out of range"), RecursionError("too deep")]


@pytest.mark.parametrize("error", FAILURES, ids=[type(e).__name__ for e in FAILURES])
def test_any_failure_reading_a_pointer_record_is_that_datasets_error(
    served: tuple[Registry, dict[str, Any]],
    milvus_catalog: Any,
    error: Exception,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A failure no check foresaw (here: raised by the model that reads the record's info)."""
    from mcpower.manifest import DatasetInfo
    from mcpower.store.milvus import catalog as milvus_module

    registry, good = served
    put(milvus_catalog, "dataset:victim", pointer("victim", 1, good))

    class Exploding:
        @staticmethod
        def model_validate(info: dict[str, Any]) -> DatasetInfo:
            if info.get("id") == "victim":
                raise error
            return DatasetInfo.model_validate(info)

    monkeypatch.setattr(milvus_module, "DatasetInfo", Exploding)
    with caplog.at_level(logging.WARNING, logger="mcpower"):
        entries = {e.id: e for e in registry.scan()}
        registry.scan()  # again: logged once
    victim = entries["victim"].error
    assert victim is not None and victim.code == "INVALID_MANIFEST"
    assert victim.message.startswith("milvus:victim: ") and f"{type(error).__name__}: {error}" in victim.message
    assert sum(r.levelno == logging.WARNING and "milvus:victim" in r.getMessage() for r in caplog.records) == 1
    assert {i: e.status for i, e in entries.items() if i != "victim"} == {"mine": "ready", "shared": "ready"}
    assert_the_others_served(registry, "victim")
    registry.close()


def test_a_pointer_record_under_a_key_that_is_no_dataset_id(
    served: tuple[Registry, dict[str, Any]], milvus_catalog: Any
) -> None:
    registry, good = served
    put(milvus_catalog, "dataset:../Not An\nId", pointer("shared", 1, good))

    [bad] = [e for e in registry.scan() if e.id not in ("mine", "shared")]
    assert bad.id.startswith("invalid-") and bad.error is not None and bad.error.code == "INVALID_MANIFEST"
    assert "'dataset:../Not An\\nId' holds no valid dataset id" in bad.error.message
    assert_the_others_served(registry, bad.id)
    registry.close()


def test_a_publish_numbers_its_version_past_every_collection_of_the_dataset(milvus_catalog: Any, corpus: Path) -> None:
    """A bad record's version is not trusted, but the collections it names are kept: the new
    version is numbered past them, so no collection is ever written twice."""
    import pymilvus

    from mcpower.store.milvus.schema import chunks_schema

    ingest(corpus, milvus_catalog, IngestOptions(dataset_id="docs"), embedder=FakeEmbedder())
    record = pointer("docs", "7", milvus_catalog._get("dataset:docs"))
    milvus_catalog.client().create_collection(record["chunks"], schema=chunks_schema(pymilvus, 8)[0])
    put(milvus_catalog, "dataset:docs", record)

    ingest(corpus, milvus_catalog, IngestOptions(dataset_id="docs", full=True), embedder=FakeEmbedder())
    assert milvus_catalog._get("dataset:docs")["version"] == 8


@pytest.mark.parametrize(
    "lease",
    [
        {"owner": "x", "expires_ms": 1e300},  # no date type holds it
        {"owner": "x", "expires_ms": True},
        {"owner": [[["x"]]], "expires_ms": "soon"},
        "just text",
    ],
    ids=["far-future", "bool", "odd-types", "not-an-object"],
)
def test_a_hostile_lease_record_does_not_stop_an_ingest(milvus_catalog: Any, corpus: Path, lease: Any) -> None:
    put(milvus_catalog, "lease:docs", json.dumps(lease), kind="lease")
    report = ingest(corpus, milvus_catalog, IngestOptions(dataset_id="docs"), embedder=FakeEmbedder())
    assert report.chunks > 0


def test_datasets_a_local_search_and_the_server_survive_hostile_records(tmp_path: Path, corpus: Path) -> None:
    """The issue's processes, as they run: `mcpower datasets`, `mcpower search` of a local dataset
    and `serve --stdio`, over a Milvus file holding hostile pointer records beside a good one."""
    from mcpower.store.milvus import MilvusCatalog

    db = fresh_db(tmp_path)
    catalog = MilvusCatalog(db, refresh_seconds=0, settle_seconds=0)
    ingest(corpus, catalog, IngestOptions(dataset_id="shared"), embedder=FakeEmbedder())
    good = catalog._get("dataset:shared")
    bad = {"version-text": pointer("version-text", "1e5", good), "version-list": pointer("version-list", [1], good)}
    for dataset, value in bad.items():
        put(catalog, f"dataset:{dataset}", value)
    catalog.close()  # a .db file is one process's at a time
    local = tmp_path / "datasets"
    ingest(corpus, local, IngestOptions(dataset_id="mine"), embedder=FakeEmbedder())
    launcher = write_launcher(tmp_path)
    env = {**subprocess_env(), "MCPOWER_MILVUS_URI": db}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, str(launcher), *args, "--datasets-dir", str(local)]
        return subprocess.run(cmd, capture_output=True, text=True, env=env, check=False, timeout=300)

    listed = run("datasets", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = {d["id"]: d["status"] for d in json.loads(listed.stdout)["datasets"]}
    assert rows == {"mine": "ready", "shared": "ready", "version-text": "error", "version-list": "error"}
    found = run("search", "mine", "zephyrine daemon", "--json")
    assert found.returncode == 0, found.stderr
    assert json.loads(found.stdout)["results"][0]["path"] == "guide/install.md"

    server = StdioServer([sys.executable, str(launcher), "serve", "--stdio", "--datasets-dir", str(local)], env=env)
    try:
        server.initialize()
        listed_by_server = server.call_tool("knowledge_list_datasets", {})["structuredContent"]["datasets"]
        hits = server.call_tool("knowledge_search", {"query": "zephyrine daemon"})["structuredContent"]
        broken = server.call_tool("knowledge_search", {"query": "zephyrine", "dataset": "version-text"})
        server.close_stdin()
        assert server.wait_exit(60) == 0
    finally:
        server.stop()
    assert {d["id"]: d["status"] for d in listed_by_server} == rows
    assert sorted(hits["meta"]["datasets"]) == ["mine", "shared"]
    assert broken["isError"] and broken["structuredContent"]["error"]["code"] == "INVALID_MANIFEST"
