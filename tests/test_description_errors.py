"""One dataset's description is untrusted: whatever goes wrong while reading it (an out-of-range
date, or a failure no check foresaw) is that dataset's coded error, and every other dataset is
still listed and served, by `mcpower datasets`, a search and `serve --stdio`. (Milvus records:
test_milvus_records.py.)"""

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
from original_fixtures import RECORDS, embed, write_original
from server_fixtures import StdioServer, subprocess_env, write_launcher
from typer.testing import CliRunner

from mcpower.cli.app import app
from mcpower.errors import McpowerError
from mcpower.ingestion import IngestOptions, ingest
from mcpower.registry import Registry
from mcpower.search import search
from mcpower.store import DatasetEntry
from mcpower.store.local import catalog as local_catalog

BAD_DATE = "9999-12-31T23:59:59-23:59"  # a valid ISO 8601 time, after the year 9999 in UTC


def original_with(folder: Path, change: Callable[[dict[str, Any]], None], dimension: int = 384) -> Path:
    """A dataset of the original format with sound files (by default of the packaged model's 384
    dimensions: ready if its metadata were not changed), its metadata.json changed by ``change``."""
    write_original(folder, vectors=embed([r["content"] for r in RECORDS], dimension))
    meta = json.loads((folder / "metadata.json").read_text())
    change(meta)
    (folder / "metadata.json").write_text(json.dumps(meta))
    return folder


@pytest.fixture
def root(tmp_path: Path, corpus: Path) -> Path:
    """`healthy` (mcpower's format, the fake embedder's model) beside `baddate` (the original format,
    createdAt after the year 9999 in UTC)."""
    datasets = tmp_path / "datasets"
    ingest(corpus, datasets, IngestOptions(dataset_id="healthy"), embedder=FakeEmbedder())
    original_with(datasets / "baddate", lambda m: m.update(createdAt=BAD_DATE))
    return datasets


def test_an_out_of_range_date_is_that_datasets_error_for_the_cli_and_the_server(root: Path, tmp_path: Path) -> None:
    launcher = write_launcher(tmp_path)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, str(launcher), *args, "--datasets-dir", str(root)]
        return subprocess.run(cmd, capture_output=True, text=True, env=subprocess_env(), check=False, timeout=120)

    listed = run("datasets", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = {d["id"]: d for d in json.loads(listed.stdout)["datasets"]}
    assert rows["healthy"]["status"] == "ready" and rows["baddate"]["status"] == "error"
    assert "createdAt '9999-12-31T23:59:59-23:59' is out of range" in rows["baddate"]["error"]
    table = run("datasets")
    assert table.returncode == 0 and "out of range" in table.stdout and "Traceback" not in table.stderr
    found = run("search", "healthy", "zephyrine daemon", "--json")
    assert found.returncode == 0, found.stderr
    assert json.loads(found.stdout)["results"][0]["path"] == "guide/install.md"

    server = StdioServer([sys.executable, str(launcher), "serve", "--stdio", "--datasets-dir", str(root)])
    try:
        server.initialize()
        listed_by_server = server.call_tool("knowledge_list_datasets", {})["structuredContent"]["datasets"]
        hits = server.call_tool("knowledge_search", {"query": "zephyrine daemon", "dataset": "healthy"})
        broken = server.call_tool("knowledge_search", {"query": "zephyrine", "dataset": "baddate"})
        server.close_stdin()
        assert server.wait_exit(30) == 0
    finally:
        server.stop()
    status = {d["id"]: (d["status"], d.get("error") or "") for d in listed_by_server}
    assert status["healthy"] == ("ready", "") and status["baddate"][0] == "error"
    assert "out of range" in status["baddate"][1]
    assert hits["structuredContent"]["results"][0]["path"] == "guide/install.md"
    assert broken["isError"] and broken["structuredContent"]["error"]["code"] == "INDEX_MISMATCH"
    assert str(tmp_path) not in json.dumps([listed_by_server, broken])


@pytest.mark.usefixtures("fake_packaged")
@pytest.mark.parametrize(
    ("field", "change"),
    [
        ("createdAt", lambda m: m.update(createdAt=BAD_DATE)),
        ("createdAt", lambda m: m.update(createdAt="0001-01-01T00:00:00+23:59")),  # before the year 1
        ("stats.indexedAt", lambda m: m["stats"].update(indexedAt=BAD_DATE)),
    ],
    ids=["after-9999", "before-1", "indexed-at"],
)
def test_out_of_range_dates_are_refused_with_their_reason(
    tmp_path: Path, field: str, change: Callable[[dict[str, Any]], None]
) -> None:
    datasets = tmp_path / "datasets"
    write_original(datasets / "good-orig")
    original_with(datasets / "late", change, FakeEmbedder.dimension)
    original_with(datasets / "unreadable-date", lambda m: m.update(createdAt="next tuesday"), FakeEmbedder.dimension)
    registry = Registry(datasets, embedder_factory=lambda m: FakeEmbedder())

    with pytest.raises(McpowerError) as err:
        registry.store("late")
    assert err.value.code == "INDEX_MISMATCH"
    assert f"late: metadata.json: {field} '" in err.value.message and "outside the years 1-9999" in err.value.message
    # A time that does not read at all is ignored, as before: the file's modification time stands in.
    assert registry.entry("unreadable-date").status == "ready"
    assert search(registry, "harpsichord", "good-orig").results[0].path == "notes.txt"
    registry.close()


# ---------------------------------------------------------------- failures no check foresaw

FAILURES = [RuntimeError("a bug"), OverflowError("date value out of range"), RecursionError("too deep")]


def failing(reader: Callable[..., Any], victim: str, error: Exception) -> Callable[..., Any]:
    """``reader`` (whose first argument is the dataset's manifest path or folder), raising ``error`` for ``victim``."""

    def read(where: Path, *args: Any, **kwargs: Any) -> Any:
        if victim in where.parts:
            raise error
        return reader(where, *args, **kwargs)

    return read


@pytest.mark.usefixtures("fake_packaged")
@pytest.mark.parametrize("kind", ["mcpower", "original"])
@pytest.mark.parametrize("error", FAILURES, ids=[type(e).__name__ for e in FAILURES])
def test_any_failure_reading_a_local_description_is_that_datasets_error(
    tmp_path: Path,
    corpus: Path,
    kind: str,
    error: Exception,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    datasets = tmp_path / "datasets"
    ingest(corpus, datasets, IngestOptions(dataset_id="docs"), embedder=FakeEmbedder())
    write_original(datasets / "good-orig")
    if kind == "mcpower":
        ingest(corpus, datasets, IngestOptions(dataset_id="victim"), embedder=FakeEmbedder())
        monkeypatch.setattr(local_catalog, "read_manifest", failing(local_catalog.read_manifest, "victim", error))
    else:
        write_original(datasets / "victim")
        monkeypatch.setattr(local_catalog, "read_info", failing(local_catalog.read_info, "victim", error))

    with caplog.at_level(logging.WARNING, logger="mcpower"):
        registry = Registry(datasets, embedder_factory=lambda m: FakeEmbedder())
        registry.scan()  # again: logged once
    victim = registry.entry("victim")
    assert victim.error is not None and victim.error.code == "INVALID_MANIFEST"
    message = victim.error.message
    assert message.startswith("victim: ") and type(error).__name__ in message and str(tmp_path) not in message
    assert str(error) in message
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and "victim" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].exc_info is not None and warnings[0].exc_info[1] is error
    for dataset, path in [("docs", "notes.txt"), ("good-orig", "notes.txt")]:
        assert search(registry, "harpsichord", dataset).results[0].path == path
    assert set(search(registry, "harpsichord").meta.datasets) == {"docs", "good-orig"}
    with pytest.raises(McpowerError) as err:
        registry.store("victim")
    assert err.value.code == "INVALID_MANIFEST"
    registry.close()

    listed = CliRunner().invoke(app, ["datasets", "--datasets-dir", str(datasets), "--json"])
    assert listed.exit_code == 0, listed.output
    rows = {d["id"]: d["status"] for d in json.loads(listed.stdout)["datasets"]}
    assert rows == {"docs": "ready", "good-orig": "ready", "victim": "error"}


def test_a_failure_re_reading_a_changed_dataset_is_its_error(
    tmp_path: Path, corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dataset listed fine that then fails when re-read (a search notices it changed)."""
    datasets = tmp_path / "datasets"
    for name in ("docs", "victim"):
        ingest(corpus, datasets, IngestOptions(dataset_id=name), embedder=FakeEmbedder())
    registry = Registry(datasets, embedder_factory=lambda m: FakeEmbedder())
    assert search(registry, "harpsichord", "victim").results
    ingest(corpus, datasets, IngestOptions(dataset_id="victim", full=True), embedder=FakeEmbedder())  # republished
    monkeypatch.setattr(local_catalog, "read_manifest", failing(local_catalog.read_manifest, "victim", KeyError("x")))

    with pytest.raises(McpowerError) as err:
        search(registry, "harpsichord", "victim")
    assert err.value.code == "INVALID_MANIFEST" and "KeyError" in err.value.message
    assert search(registry, "harpsichord", "docs").results
    registry.close()


class BrokenCatalog:
    """A catalog whose every look fails, as a bug would make it."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def scan(self) -> list[DatasetEntry]:
        raise self.error

    def refresh(self, entry: DatasetEntry) -> DatasetEntry:
        raise self.error

    def contains(self, dataset_id: str) -> bool:
        return False


def test_a_catalog_that_fails_as_a_whole_leaves_the_others_served(
    tmp_path: Path, corpus: Path, caplog: pytest.LogCaptureFixture
) -> None:
    datasets = tmp_path / "datasets"
    ingest(corpus, datasets, IngestOptions(dataset_id="docs"), embedder=FakeEmbedder())
    with caplog.at_level(logging.WARNING, logger="mcpower"):
        registry = Registry(
            datasets,
            catalogs=[BrokenCatalog(RuntimeError("boom"))],  # type: ignore[list-item]
            embedder_factory=lambda m: FakeEmbedder(),
        )
        assert search(registry, "harpsichord").meta.datasets == ["docs"]  # scans again
    assert [e.id for e in registry.entries()] == ["docs"]
    assert sum("failed to list its datasets (RuntimeError)" in r.getMessage() for r in caplog.records) == 1

    # A catalog whose refresh fails: the dataset's coded error, not the exception.
    entry = DatasetEntry("elsewhere", registry.entry("docs").info, location="elsewhere")
    registry._entries["elsewhere"] = (entry, BrokenCatalog(OverflowError("odd")))  # type: ignore[assignment]
    with pytest.raises(McpowerError) as err:
        registry.store("elsewhere")
    assert err.value.code == "INVALID_MANIFEST" and "OverflowError: odd" in err.value.message
    assert search(registry, "harpsichord", "docs").results
    registry.close()
