"""Freshness: when a result's document was indexed, and whether its file has changed since."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import pytest
from conftest import FakeEmbedder

from mcpower.freshness import FRESHNESS_TTL, Freshness
from mcpower.ingestion import IngestOptions, ingest
from mcpower.manifest import MANIFEST_NAME, SourceInfo
from mcpower.registry import Registry
from mcpower.search import get_metadata, get_source, search


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def fresh(ingested: tuple[Path, Registry]) -> tuple[Registry, Clock]:
    """The corpus dataset 'docs', its registry checking freshness on a clock of the test's."""
    registry = ingested[1]
    clock = Clock()
    registry.freshness = Freshness(clock=clock)
    return registry, clock


def harpsichord(registry: Registry) -> tuple[bool, str, str]:
    (r,) = search(registry, "harpsichord", dataset="docs", mode="keyword").results
    return r.stale, r.indexed_at, r.result_id


def test_results_say_when_they_were_indexed_and_are_fresh(fresh: tuple[Registry, Clock]) -> None:
    registry, _ = fresh
    stale, indexed_at, rid = harpsichord(registry)
    assert stale is False
    assert datetime.fromisoformat(indexed_at).tzinfo is not None
    assert get_source(registry, rid).stale is False
    assert get_metadata(registry, rid).stale is False


@pytest.mark.parametrize("change", ["edit", "delete", "touch"])
def test_a_changed_or_vanished_file_is_stale_once_checked_again(
    fresh: tuple[Registry, Clock], corpus: Path, change: str
) -> None:
    registry, clock = fresh
    assert harpsichord(registry)[0] is False
    notes = corpus / "notes.txt"
    if change == "edit":
        notes.write_text(notes.read_text() + "More notes.\n")
    elif change == "delete":
        notes.unlink()
    else:
        st = notes.stat()
        os.utime(notes, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))

    assert harpsichord(registry)[0] is False  # checked less than FRESHNESS_TTL ago: the answer is reused
    clock.t += FRESHNESS_TTL
    stale, _, rid = harpsichord(registry)
    assert stale is True
    assert get_source(registry, rid).stale is True
    assert get_metadata(registry, rid).stale is True


def test_reingesting_makes_results_fresh_again(fresh: tuple[Registry, Clock], corpus: Path, datasets_dir: Path) -> None:
    registry, clock = fresh
    (corpus / "notes.txt").write_text("We agreed to ship the harpsichord feature.\n")
    clock.t += FRESHNESS_TTL
    assert harpsichord(registry)[0] is True
    ingest(corpus, datasets_dir, IngestOptions(dataset_id="docs"), embedder=FakeEmbedder())
    assert harpsichord(registry)[0] is False  # another version of the document: checked anew


def test_a_dataset_without_a_recorded_source_is_never_stale(
    corpus: Path, datasets_dir: Path, make_registry: Callable[[], Registry]
) -> None:
    ingest(corpus, datasets_dir, IngestOptions(dataset_id="docs"), embedder=FakeEmbedder())
    path = datasets_dir / "docs" / MANIFEST_NAME
    data = json.loads(path.read_text())
    del data["source"]  # as manifests were written before the field existed
    path.write_text(json.dumps(data))
    (corpus / "notes.txt").unlink()
    registry = make_registry()
    assert registry.store("docs").info.source is None
    assert harpsichord(registry)[0] is False


def test_paths_outside_the_folder_are_never_looked_at(tmp_path: Path) -> None:
    (tmp_path / "outside.md").write_text("x")
    source = SourceInfo(path=str(tmp_path / "src"), max_file_bytes=10)
    freshness = Freshness()
    for rel in ("../outside.md", "/etc/passwd", "", "a/\x00b"):
        assert freshness.stale(source, rel, 1, 0.0) is False
    assert freshness.stale(source, "missing.md", 1, 0.0) is True
    assert freshness.stale(None, "missing.md", 1, 0.0) is False


def test_memory_stays_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("mcpower.freshness.MAX_REMEMBERED", 10)
    freshness = Freshness()
    source = SourceInfo(path=str(tmp_path), max_file_bytes=10)
    for n in range(25):
        freshness.stale(source, f"f{n}.md", 1, 0.0)
    assert len(freshness._seen) <= 10


@pytest.mark.parametrize(
    ("change", "why", "said"),
    [
        ("edit", "changed", "the file changed since it was indexed"),
        ("delete", "deleted", "the file was deleted since it was indexed"),
        ("move-folder", "folder gone", "the source folder was moved or deleted since it was indexed"),
    ],
)
def test_a_stale_result_says_why(
    fresh: tuple[Registry, Clock], corpus: Path, tmp_path: Path, change: str, why: str, said: str
) -> None:
    registry, clock = fresh
    if change == "edit":
        (corpus / "notes.txt").write_text("We agreed to ship the harpsichord feature, later.\n")
    elif change == "delete":
        (corpus / "notes.txt").unlink()
    else:
        corpus.rename(tmp_path / "moved-away")
    clock.t += FRESHNESS_TTL
    (r,) = search(registry, "harpsichord", dataset="docs", mode="keyword").results
    assert (r.stale, r.stale_reason) == (True, why)
    assert r.model_dump()["stale_reason"] == why
    fresh_result = search(registry, "harpsichord", dataset="docs", mode="keyword")
    assert "stale_reason" in fresh_result.model_dump_json()

    from mcpower.cli import search as search_command

    assert search_command._STALE[why].startswith(said)


def test_a_fresh_result_has_no_stale_reason(fresh: tuple[Registry, Clock]) -> None:
    (r,) = search(fresh[0], "harpsichord", dataset="docs", mode="keyword").results
    assert r.stale_reason is None and "stale_reason" not in r.model_dump_json()
