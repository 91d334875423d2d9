"""An ingest interrupted while it embeds (Ctrl-C, SIGKILL, a crash under --watch) resumes: the next
run embeds only what was left, publishes nothing half-built, and builds the dataset a clean run
builds. The real `mcpower ingest` runs in forked children of a warm process
(tests/republish_fixtures.py); the child signals itself as its embedder is called for the third
time, so the kill lands mid-embedding, after two slices were stored, without any timing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from conftest import FakeEmbedder, write_files
from republish_fixtures import IngestForkServer, write_versioned_corpus
from watch_fixtures import ADDED, Clock, settle, watched_notes, write_notes

from mcpower.defaults import DEFAULT_EMBEDDING_STORE_MB as STORE_MB
from mcpower.errors import EmbeddingModelError
from mcpower.ingestion import IngestOptions, ingest
from mcpower.manifest import MANIFEST_NAME, read_manifest
from mcpower.plan import MEASURE, SLICE
from mcpower.registry import Registry
from mcpower.store.local.store import open_store
from mcpower.watch import Watcher, WatchEvent


@pytest.fixture(scope="module")
def forks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IngestForkServer]:
    server = IngestForkServer(tmp_path_factory.mktemp("forks"))
    yield server
    server.close()


@pytest.fixture(scope="module")
def corpus_and_clean_build(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The corpus (about 250 chunks: four slices and the timed first one), and the dataset a clean
    run builds of it (no embedding store), for the resumed runs to be compared with."""
    root = tmp_path_factory.mktemp("resume")
    source = write_versioned_corpus(root / "docs", "v1", files=48, sections=4)
    clean = root / "clean"
    ingest(source, clean, IngestOptions(dataset_id="docs"), embedder=FakeEmbedder())
    return source, clean


def embedded(log: Path) -> int:
    """Chunks the child's embedder embedded (a line per call)."""
    return sum(int(line) for line in log.read_text().split()) if log.exists() else 0


def dataset(datasets: Path) -> tuple[list[tuple[str, str]], list[tuple[int, str, str]], np.ndarray]:
    """What a dataset holds: documents, chunks (id, heading, text) and their vectors, in id order."""
    folder = datasets / "docs"
    store = open_store(folder, read_manifest(folder / MANIFEST_NAME))
    try:
        docs, chunks = [], []
        for d, cs in store.iter_documents():
            docs.append((d.path, d.content))
            chunks.extend((c.id, c.heading_path, c.text) for c in cs)
        chunks.sort()
        return sorted(docs), chunks, store.vectors([c[0] for c in chunks])
    finally:
        store.close()


def test_an_ingest_killed_while_embedding_resumes_and_builds_what_a_clean_run_builds(
    forks: IngestForkServer, corpus_and_clean_build: tuple[Path, Path], tmp_path: Path
) -> None:
    """Ctrl-C, then SIGKILL of the run that resumed, then a run to the end: each run embeds only
    what the ones before left, and the dataset is the clean build's."""
    source, clean = corpus_and_clean_build
    datasets, env = tmp_path / "datasets", {"MCPOWER_CACHE_DIR": str(tmp_path / "cache")}
    argv = ["ingest", str(source), "--id", "docs", "--datasets-dir", str(datasets)]

    interrupted = forks.run(argv, signal="SIGINT", kill_at_embed=3, embed_log=tmp_path / "first", env=env)

    assert interrupted.code == 130
    assert not (datasets / "docs" / MANIFEST_NAME).exists()  # nothing half-built was published
    first = embedded(tmp_path / "first")
    assert first == MEASURE + SLICE  # the timed first slice and one more: the third was cut
    said = forks.log.read_text()
    assert "interrupted: nothing was published" in said and "run the same command again to resume" in said

    killed = forks.run(argv, signal="SIGKILL", kill_at_embed=3, embed_log=tmp_path / "second", env=env)

    assert killed.code == -9 and not (datasets / "docs" / MANIFEST_NAME).exists()
    second = embedded(tmp_path / "second")
    assert second == MEASURE + SLICE  # none of the first run's chunks embedded again

    finished = forks.run(argv, embed_log=tmp_path / "third", env=env)

    assert finished.code == 0
    total = read_manifest(datasets / "docs" / MANIFEST_NAME).counts.chunks
    assert total > first + second
    assert embedded(tmp_path / "third") == total - first - second  # only what was left
    resumed, fresh = dataset(datasets), dataset(clean)
    assert resumed[0] == fresh[0] and resumed[1] == fresh[1]
    assert np.array_equal(resumed[2], fresh[2])


class CrashingEmbedder(FakeEmbedder):
    """The model dies at its ``at``-th call (a worker killed for memory, a broken install...)."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.at, self.calls = at, 0

    def embed_documents(self, texts: Sequence[str], progress: Callable[[int], None] | None = None) -> np.ndarray:
        self.calls += 1
        if self.calls == self.at:
            raise EmbeddingModelError("the model process died")
        return super().embed_documents(texts, progress)


def test_a_reingest_under_watch_that_fails_midway_is_resumed_by_the_next(
    tmp_path: Path, datasets_dir: Path, make_registry: Callable[[], Registry], fake_embedder: FakeEmbedder
) -> None:
    source = write_notes(tmp_path / "notes")
    watcher, registry, clock, events = watched_notes(source, datasets_dir, make_registry)
    try:
        _reingest_twice(watcher, registry, clock, events, source)
    finally:
        watcher.stop()


def _reingest_twice(watcher: Watcher, registry: Registry, clock: Clock, events: list[WatchEvent], source: Path) -> None:
    watcher.recheck(clock.t)
    watcher.run_due(clock.t)
    sections = "\n".join(f"## Part {i}\n\nThe quokka diagnostics of part {i} are colourful.\n" for i in range(200))
    write_files(source, {"big.md": f"# Big\n\n{sections}"})
    crashing = CrashingEmbedder(at=3)
    watcher._factory = lambda info: crashing
    watcher.changed({(ADDED, str(source.resolve() / "big.md"))}, clock.t)
    settle(watcher, clock)
    assert [e.kind for e in events][-1] == "failed" and "the model process died" in events[-1].message
    stored_before = len(crashing.embedded)
    assert stored_before == MEASURE + SLICE

    counting = FakeEmbedder()
    watcher._factory = lambda info: counting
    (source / "big.md").touch()
    watcher.changed({(ADDED, str(source.resolve() / "big.md"))}, clock.t)
    settle(watcher, clock)

    assert events[-1].kind == "reindexed" and events[-1].report is not None
    report = events[-1].report
    assert report.embedded == len(counting.embedded) and report.plan.from_store == stored_before
    assert len(counting.embedded) + stored_before == report.chunks - report.plan.carried


@pytest.mark.slow  # the packaged model: its export and ~120 chunks
def test_with_the_real_model_a_resumed_build_is_the_clean_build(tmp_path: Path) -> None:
    from mcpower import embedding

    source = write_versioned_corpus(tmp_path / "docs", "v1", files=24, sections=4)
    real = embedding.load_embedder(cache_dir=tmp_path / "cache")

    class CtrlC:
        """The real model, and a Ctrl-C as it is called the third time."""

        def __init__(self) -> None:
            self.calls = 0

        def __getattr__(self, name: str) -> object:
            return getattr(real, name)

        def embed_documents(self, texts: Sequence[str], progress: Callable[[int], None] | None = None) -> np.ndarray:
            self.calls += 1
            if self.calls == 3:
                raise KeyboardInterrupt
            return real.embed_documents(texts, progress)

    options = IngestOptions(dataset_id="docs", cache_dir=tmp_path / "cache", embedding_store_mb=STORE_MB)
    with pytest.raises(KeyboardInterrupt):
        ingest(source, tmp_path / "datasets", options, embedder=CtrlC())  # type: ignore[arg-type]
    assert not (tmp_path / "datasets" / "docs" / MANIFEST_NAME).exists()

    resumed = ingest(source, tmp_path / "datasets", options, embedder=real)
    assert resumed.plan.from_store == MEASURE + SLICE and resumed.embedded == resumed.chunks - MEASURE - SLICE
    clean = replace(options, embedding_store_mb=0)
    ingest(source, tmp_path / "clean", clean, embedder=real)
    a, b = dataset(tmp_path / "datasets"), dataset(tmp_path / "clean")
    assert a[0] == b[0] and a[1] == b[1]
    np.testing.assert_allclose(a[2], b[2], atol=1e-6)  # measured: bit for bit, but batches differ
