"""Watching when things happen at the wrong moment: a save during a re-ingest, a write while a file is
read, the source folder deleted mid-ingest, a dataset locked or watched by another process, broken
files. The Watcher's steps are driven by hand with a fake clock (as in test_watch.py): no threads of
its own, no waiting; other processes are real, and the test waits only for their "ready" line.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import FakeEmbedder, write_files
from server_fixtures import REPO_ROOT, subprocess_env
from watch_fixtures import ADDED, MODIFIED, QUIET, Clock, published, settle, watched_notes, write_notes

import mcpower.chunking.worker
import mcpower.discover
import mcpower.ingestion
from mcpower.errors import IngestError
from mcpower.ingestion import IngestOptions, ingest
from mcpower.layout import read_watch
from mcpower.manifest import MANIFEST_NAME
from mcpower.registry import Registry
from mcpower.search import search
from mcpower.watch import Watcher, WatchEvent
from mcpower.watch.source import unchanged
from mcpower.watch.watcher import DELETED, LOCK_RETRY


@pytest.fixture
def source(tmp_path: Path) -> Path:
    return write_notes(tmp_path / "notes")


@pytest.fixture
def setup(
    source: Path, datasets_dir: Path, make_registry: Callable[[], Registry], fake_embedder: FakeEmbedder
) -> Iterator[tuple[Watcher, Registry, Clock, list[WatchEvent]]]:
    """Dataset 'notes' ingested from ``source``, watched (the first look done) with a fake clock."""
    watcher, registry, clock, events = watched_notes(source, datasets_dir, make_registry)
    watcher.recheck(clock.t)
    watcher.run_due(clock.t)
    assert [e.kind for e in events] == ["watching"]
    yield watcher, registry, clock, events
    watcher.stop()


def found(registry: Registry, word: str) -> list[str]:
    return sorted(r.path for r in search(registry, word, dataset="notes", mode="keyword", top_k=20).results)


def edit(watcher: Watcher, clock: Clock, path: Path, text: str, change: int = MODIFIED) -> None:
    """Write ``path`` and hand the watcher the change, as the notify thread would."""
    path.write_text(text)
    watcher.changed({(change, str(path))}, clock.t)


def documents(registry: Registry) -> list[str]:
    return sorted(d.path for d in registry.store("notes").documents())


# ---------------------------------------------------------------- saves at the wrong moment


def test_a_file_saved_during_a_reingest_is_picked_up_by_the_next_one(
    setup: tuple[Watcher, Registry, Clock, list[WatchEvent]], source: Path
) -> None:
    watcher, registry, clock, events = setup
    root = source.resolve()
    saved_during: list[Any] = []

    class SavesMidIngest(FakeEmbedder):
        def embed_documents(self, texts: Any, progress: Any = None) -> np.ndarray:
            if not saved_during:  # the files are read; the user saves again while vectors are computed
                (root / "todo.txt").write_text("Tune the ocarina, then the bassoon.\n")
                saved_during.append(True)
            return super().embed_documents(texts, progress)

    watcher._factory = lambda info: SavesMidIngest()
    edit(watcher, clock, root / "todo.txt", "Tune the ocarina.\n")
    settle(watcher, clock)

    # The first re-ingest published the text it read; the save it missed is not recorded as indexed.
    assert len(published(events)) == 1 and found(registry, "ocarina") == ["todo.txt"]
    assert found(registry, "bassoon") == []
    assert not unchanged(registry.store("notes"), str(root), registry.store("notes").info, [])
    assert registry.freshness.stale(registry.store("notes").info.source, "todo.txt", *_stamp(registry, "todo.txt"))

    # The save's event was queued meanwhile; the worker hands it over after the ingest.
    watcher.changed({(MODIFIED, str(root / "todo.txt"))}, clock.t)
    settle(watcher, clock)
    assert len(published(events)) == 2 and found(registry, "bassoon") == ["todo.txt"]


def _stamp(registry: Registry, path: str) -> tuple[int, float]:
    doc = next(d for d in registry.store("notes").documents() if d.path == path)
    return doc.size, doc.mtime


def test_a_write_landing_while_a_file_is_read_is_never_recorded_as_read(
    setup: tuple[Watcher, Registry, Clock, list[WatchEvent]], source: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The size and time recorded with a document's text are never newer than the text: a save that
    lands between the read and the stamp must still look like a change afterwards."""
    watcher, registry, clock, events = setup
    root = source.resolve()
    target = os.stat(root / "guide.md").st_ino
    real_read = os.read
    landed: list[bool] = []

    def read(fd: int, n: int) -> bytes:
        data = real_read(fd, n)
        if not data and not landed and os.fstat(fd).st_ino == target:  # at the end of the file, once read
            landed.append(True)
            with open(root / "guide.md", "a", encoding="utf-8") as f:
                f.write("\nThe wombat appendix.\n")
        return data

    monkeypatch.setattr(mcpower.discover.os, "read", read)
    edit(watcher, clock, root / "guide.md", "# Guide\n\nThe marmalade daemon starts on boot.\n")
    settle(watcher, clock)
    monkeypatch.undo()

    assert landed and found(registry, "marmalade") == ["guide.md"] and found(registry, "wombat") == []
    # What was read is older than the file: the next look sees a change, and the next ingest has it.
    assert not unchanged(registry.store("notes"), str(root), registry.store("notes").info, [])
    watcher.changed({(MODIFIED, str(root / "guide.md"))}, clock.t)
    settle(watcher, clock)
    assert found(registry, "wombat") == ["guide.md"] and len(published(events)) == 2


def test_the_source_folder_deleted_during_a_reingest_keeps_every_document(
    setup: tuple[Watcher, Registry, Clock, list[WatchEvent]], source: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`rm -rf` while a re-ingest reads the folder: the files not read yet must not vanish from the
    dataset; the folder is reported missing and the previous version keeps serving."""
    watcher, registry, clock, events = setup
    root = source.resolve()
    real = mcpower.assembly.read_document

    def read_then_delete(f: Any, max_bytes: int) -> Any:
        out = real(f, max_bytes)
        if root.exists():
            shutil.rmtree(root)  # after the first file: the others cannot be read any more
        return out

    monkeypatch.setattr(mcpower.assembly, "read_document", read_then_delete)
    edit(watcher, clock, root / "todo.txt", "Tune the ocarina.\n")
    settle(watcher, clock)

    assert published(events) == [] and events[-1].kind == "source_missing"
    assert documents(registry) == ["guide.md", "recipes/bread.md", "todo.txt"]
    assert found(registry, "harpsichord") == ["todo.txt"]
    assert registry.scan()[0].summary().watch_state == "source_missing"
    assert watcher.roots() == ()


def test_ingest_refuses_to_publish_when_its_folder_vanished_while_reading(
    source: Path, datasets_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ingest(source, datasets_dir, IngestOptions(dataset_id="notes"), embedder=FakeEmbedder())
    stamp = (datasets_dir / "notes" / MANIFEST_NAME).read_bytes()
    real = mcpower.assembly.read_document

    def read_then_delete(f: Any, max_bytes: int) -> Any:
        out = real(f, max_bytes)
        shutil.rmtree(source, ignore_errors=True)
        return out

    monkeypatch.setattr(mcpower.assembly, "read_document", read_then_delete)
    with pytest.raises(IngestError, match="vanished while it was read"):
        ingest(source, datasets_dir, IngestOptions(dataset_id="notes"), embedder=FakeEmbedder())
    assert (datasets_dir / "notes" / MANIFEST_NAME).read_bytes() == stamp


# ---------------------------------------------------------------- bursts


def test_a_burst_arriving_during_a_reingest_is_one_more_reingest(
    setup: tuple[Watcher, Registry, Clock, list[WatchEvent]], source: Path
) -> None:
    """A `git checkout` that runs while a re-ingest does: every batch queued meanwhile, and the
    ones after, make one more re-ingest, not one per batch or per file."""
    watcher, registry, clock, events = setup
    root = source.resolve()
    batches: list[set[tuple[int, str]]] = []

    class CheckoutMidIngest(FakeEmbedder):
        def embed_documents(self, texts: Any, progress: Any = None) -> np.ndarray:
            for b in range(len(batches), 30):  # 30 batches of 5 files, while vectors are computed
                names = [f"checkout/p{b:02}-{i}.md" for i in range(5)]
                write_files(root, {n: f"# P\n\nThe capybara page {n}.\n" for n in names})
                batches.append({(ADDED, str(root / n)) for n in names})
            return super().embed_documents(texts, progress)

    watcher._factory = lambda info: CheckoutMidIngest()
    edit(watcher, clock, root / "todo.txt", "Tune the ocarina.\n")
    settle(watcher, clock)
    assert len(published(events)) == 1 and found(registry, "capybara") == []
    for batch in batches:  # the worker drains the queue after the ingest, a batch at a time
        watcher.changed(batch, clock.t)
        clock.t += 0.05
        watcher.run_due(clock.t)
    settle(watcher, clock)

    assert len(published(events)) == 2
    report = published(events)[1].report
    assert report is not None and (report.added, report.changed, report.embedded) == (150, 0, 150)
    assert len(documents(registry)) == 153


# ---------------------------------------------------------------- other processes


def _hold(kind: str, folder: Path) -> subprocess.Popen[str]:
    """Another process holding the dataset's ingest lock ("lock") or its watch claim ("claim"),
    until its stdin closes; returns once it says it holds it."""
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from mcpower.layout import WatchClaim, dataset_lock\n"
        "folder = Path(sys.argv[2])\n"
        "if sys.argv[1] == 'lock':\n"
        "    with dataset_lock(folder):\n"
        "        print('held', flush=True)\n"
        "        sys.stdin.read()\n"
        "else:\n"
        "    claim = WatchClaim.take(folder)\n"
        "    print('held' if claim else 'busy', flush=True)\n"
        "    sys.stdin.read()\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, kind, str(folder)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=subprocess_env(),
        cwd=REPO_ROOT,
    )
    assert proc.stdout is not None and proc.stdout.readline() == "held\n"
    return proc


def _release(proc: subprocess.Popen[str]) -> None:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.close()
    assert proc.wait(60) == 0
    proc.stdout.close()


def test_a_dataset_locked_by_another_process_is_reingested_once_it_is_free(
    setup: tuple[Watcher, Registry, Clock, list[WatchEvent]], source: Path, datasets_dir: Path
) -> None:
    watcher, registry, clock, events = setup
    holder = _hold("lock", datasets_dir / "notes")  # e.g. a `mcpower ingest` of the dataset
    try:
        edit(watcher, clock, source.resolve() / "todo.txt", "Tune the ocarina.\n")
        settle(watcher, clock)
        assert published(events) == [] and [e.kind for e in events] == ["watching"]
        assert watcher.debouncer.next_due() == clock.t + LOCK_RETRY  # tried again later, not dropped
        assert registry.scan()[0].summary().watch_state == "watching"
        settle(watcher, clock, LOCK_RETRY)  # still held: still waiting, still serving
        assert published(events) == [] and found(registry, "harpsichord") == ["todo.txt"]
    finally:
        _release(holder)
    settle(watcher, clock, LOCK_RETRY)
    assert len(published(events)) == 1 and found(registry, "ocarina") == ["todo.txt"]


def test_a_dataset_another_process_watches_is_left_to_it_until_it_exits(
    source: Path, datasets_dir: Path, make_registry: Callable[[], Registry]
) -> None:
    ingest(source, datasets_dir, IngestOptions(dataset_id="notes"), embedder=FakeEmbedder())
    holder = _hold("claim", datasets_dir / "notes")
    clock, events = Clock(), []
    watcher = Watcher(make_registry(), quiet=QUIET, clock=clock, on_event=events.append)
    try:
        watcher.recheck(clock.t)
        watcher.recheck(clock.t + 5)
        assert [e.kind for e in events] == ["standby"] and watcher.roots() == ()
        assert read_watch(datasets_dir / "notes") is not None  # the other process's claim
        _release(holder)
        watcher.recheck(clock.t + 10)
        assert [e.kind for e in events] == ["standby", "watching"] and watcher.roots() == (str(source.resolve()),)
    finally:
        if holder.poll() is None:
            _release(holder)
        watcher.stop()


# ---------------------------------------------------------------- broken files


@pytest.mark.parametrize(
    ("broken", "reason"),
    [
        (b"\xff\xfe\x00garbage\x00" * 50, "binary"),
        (b"# Notes\n\ncaf\xe9 au lait \xff\n", "UTF-8"),
    ],
)
def test_a_broken_file_is_left_out_and_the_rest_reingested(
    setup: tuple[Watcher, Registry, Clock, list[WatchEvent]], source: Path, broken: bytes, reason: str
) -> None:
    watcher, registry, clock, events = setup
    root = source.resolve()
    (root / "notes.md").write_bytes(broken)
    watcher.changed({(ADDED, str(root / "notes.md"))}, clock.t)
    edit(watcher, clock, root / "todo.txt", "Tune the ocarina.\n")
    settle(watcher, clock)

    (event,) = published(events)
    assert event.report is not None and [p for p, _ in event.report.skipped] == ["notes.md"]
    assert reason in event.report.skipped[0][1]
    assert found(registry, "ocarina") == ["todo.txt"] and documents(registry) == [
        "guide.md",
        "recipes/bread.md",
        "todo.txt",
    ]
    assert registry.scan()[0].summary().watch_state == "watching"


def test_a_file_that_breaks_the_chunker_is_left_out_and_the_rest_reingested(
    setup: tuple[Watcher, Registry, Clock, list[WatchEvent]], source: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug one file triggers costs that file, not the re-ingest: otherwise no edit would be
    indexed again until someone removed the file."""
    watcher, registry, clock, events = setup
    root = source.resolve()
    real = mcpower.chunking.worker.build_document

    def chunk(parsed: Any, *args: Any) -> Any:
        if "trigger" in (parsed.text or ""):
            raise RecursionError("maximum recursion depth exceeded")
        return real(parsed, *args)

    monkeypatch.setattr(mcpower.chunking.worker, "build_document", chunk)
    edit(watcher, clock, root / "todo.txt", "Tune the ocarina.\n")
    edit(watcher, clock, root / "guide.md", "# Guide\n\nThis one will trigger the bug.\n")
    settle(watcher, clock)

    (event,) = published(events)
    assert event.report is not None and event.report.skipped == [
        ("guide.md", "cannot be chunked (RecursionError); please report this as a bug")
    ]
    assert found(registry, "ocarina") == ["todo.txt"] and documents(registry) == ["recipes/bread.md", "todo.txt"]
    assert registry.scan()[0].summary().watch_state == "watching"

    edit(watcher, clock, root / "guide.md", "# Guide\n\nFixed, with a quokka.\n")  # back once fixed
    settle(watcher, clock)
    assert found(registry, "quokka") == ["guide.md"]


def test_a_file_grown_over_the_size_limit_is_left_out(
    source: Path, datasets_dir: Path, make_registry: Callable[[], Registry], fake_embedder: FakeEmbedder
) -> None:
    ingest(source, datasets_dir, IngestOptions(dataset_id="notes", max_file_bytes=2000), embedder=FakeEmbedder())
    clock, events = Clock(), []
    registry = make_registry()
    watcher = Watcher(registry, quiet=QUIET, clock=clock, on_event=events.append)
    try:
        watcher.recheck(clock.t)
        root = source.resolve()
        edit(watcher, clock, root / "guide.md", "# Guide\n\n" + "The quokka grows. " * 200)
        edit(watcher, clock, root / "todo.txt", "Tune the ocarina.\n")
        settle(watcher, clock)
        (event,) = published(events)
        assert event.report is not None and [p for p, _ in event.report.skipped] == ["guide.md"]
        assert found(registry, "ocarina") == ["todo.txt"] and found(registry, "quokka") == []
    finally:
        watcher.stop()


def test_a_deleted_file_leaves_the_dataset_and_a_folder_rename_moves_its_files(
    setup: tuple[Watcher, Registry, Clock, list[WatchEvent]], source: Path
) -> None:
    watcher, registry, clock, events = setup
    root = source.resolve()
    (root / "todo.txt").unlink()
    (root / "recipes").rename(root / "kitchen")
    watcher.changed(
        {
            (DELETED, str(root / "todo.txt")),
            (DELETED, str(root / "recipes")),
            (ADDED, str(root / "kitchen")),
        },
        clock.t,
    )
    settle(watcher, clock)
    (event,) = published(events)
    assert event.report is not None and (event.report.added, event.report.removed) == (1, 2)
    assert documents(registry) == ["guide.md", "kitchen/bread.md"]
