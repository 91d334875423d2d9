"""Watching (`--watch`): debouncing, re-ingest, failures, deleted and renamed source folders, claims.

The Watcher's worker steps take the time as an argument: these tests feed them batches of changes
and a clock of their own, without threads and without waiting. Two tests at the end watch a real
folder, waiting on events with a generous timeout.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import FakeEmbedder, write_files
from server_fixtures import subprocess_env, write_launcher
from watch_fixtures import ADDED, MODIFIED, QUIET, Clock, published, settle, watched_notes, write_notes

from mcpower.errors import EmbeddingModelError
from mcpower.ingestion import IngestOptions, ingest
from mcpower.layout import WATCH_NAME, WatchClaim, dataset_lock, read_watch
from mcpower.manifest import MANIFEST_NAME, read_manifest
from mcpower.registry import Registry
from mcpower.results import WatchState
from mcpower.search import search
from mcpower.watch import Debouncer, Watcher, WatchEvent
from mcpower.watch.source import relevant, scrub
from mcpower.watch.watcher import DELETED, LOCK_RETRY


@pytest.fixture
def source(tmp_path: Path) -> Path:
    return write_notes(tmp_path / "notes")


@pytest.fixture
def setup(
    source: Path, datasets_dir: Path, make_registry: Callable[[], Registry], fake_embedder: FakeEmbedder
) -> Iterator[tuple[Watcher, Registry, Clock, list[WatchEvent]]]:
    """Dataset 'notes' ingested from ``source``, and a Watcher over it with a fake clock (not started)."""
    watcher, registry, clock, events = watched_notes(source, datasets_dir, make_registry)
    yield watcher, registry, clock, events
    watcher.stop()


reindexed = published


def start(watcher: Watcher, clock: Clock) -> None:
    """The worker's first steps: look at the datasets, run the catch-up (nothing to do)."""
    watcher.recheck(clock.t)
    watcher.run_due(clock.t)


def found(registry: Registry, word: str) -> list[str]:
    return [r.path for r in search(registry, word, dataset="notes", mode="keyword").results]


# ---------------------------------------------------------------- the debouncer


def test_debouncer_waits_for_quiet_and_caps_the_delay() -> None:
    d = Debouncer(quiet=1.0, max_delay=10.0)
    d.add("a", 0.0)
    d.add("a", 0.5)
    assert d.pop_due(1.4) == []
    assert d.next_due() == 1.5
    assert d.pop_due(1.5) == ["a"]
    assert d.next_due() is None
    fired = []
    for t in np.arange(0.0, 30.0, 0.5):  # never quiet: still due every 10 s
        d.add("b", float(t))
        fired += [float(t) for _ in d.pop_due(float(t))]
    assert fired == [10.0, 20.5]
    assert d.pop_due(29.5 + 1.0) == ["b"]
    d.add("c", 0.0, wait=0.0)
    d.add("d", 0.0, wait=2.0)
    assert d.pop_due(0.0) == ["c"] and d.pop_due(1.9) == [] and d.pop_due(2.0) == ["d"]
    d.add("e", 0.0)
    d.forget("e")
    assert d.pop_due(100.0) == []


@pytest.mark.parametrize(
    ("rel", "expected"),
    [
        ("guide.md", True),
        ("a/b/c.RST", True),
        ("notes.txt", True),
        (".gitignore", True),
        ("sub/.gitignore", True),
        (".hidden.md", False),
        (".git/index", False),
        (".obsidian/x.md", False),
        ("sub/.cache/y.md", False),
    ],
)
def test_which_changes_matter(rel: str, expected: bool, tmp_path: Path) -> None:
    assert relevant(rel, str(tmp_path / rel)) is expected


def test_an_unsupported_file_does_not_matter_but_a_folder_or_a_gone_path_does(tmp_path: Path) -> None:
    (tmp_path / "build.log").write_text("x")
    (tmp_path / "v1.2").mkdir()
    assert relevant("build.log", str(tmp_path / "build.log")) is False
    assert relevant("v1.2", str(tmp_path / "v1.2")) is True
    assert relevant("old.pdf", str(tmp_path / "old.pdf")) is True  # gone: it may have been a folder


# ---------------------------------------------------------------- re-ingesting


def test_manifest_records_the_source_and_the_watcher_starts_watching(
    setup: tuple[Watcher, Registry, Clock, list[WatchEvent]], source: Path, datasets_dir: Path
) -> None:
    watcher, registry, clock, events = setup
    manifest = read_manifest(datasets_dir / "notes" / MANIFEST_NAME)
    assert manifest.source is not None and manifest.source.path == str(source.resolve())
    stamp = (datasets_dir / "notes" / MANIFEST_NAME).stat().st_mtime_ns

    start(watcher, clock)

    assert watcher.roots() == (str(source.resolve()),)
    assert [e.kind for e in events] == ["watching"]
    # The catch-up found nothing changed: no ingest, no new version.
    assert (datasets_dir / "notes" / MANIFEST_NAME).stat().st_mtime_ns == stamp
    summary = registry.scan()[0].summary()
    assert (summary.watched, summary.watch_state, summary.watch_message) == (True, "watching", None)


def test_an_edit_is_searchable_after_the_quiet_time(
    setup: tuple[Watcher, Registry, Clock, list[WatchEvent]], source: Path
) -> None:
    watcher, registry, clock, events = setup
    start(watcher, clock)
    (source / "todo.txt").write_text("Tune the ocarina.\n")

    watcher.changed({(MODIFIED, str(source.resolve() / "todo.txt"))}, clock.t)
    watcher.run_due(clock.t + QUIET - 0.01)
    assert reindexed(events) == [] and found(registry, "ocarina") == []  # still quiet: not yet

    settle(watcher, clock)
    (event,) = reindexed(events)
    assert event.report is not None and (event.report.changed, event.report.embedded) == (1, 1)
    assert found(registry, "ocarina") == ["todo.txt"]
    assert found(registry, "harpsichord") == []


def test_a_burst_of_200_changes_is_one_reingest(
    setup: tuple[Watcher, Registry, Clock, list[WatchEvent]], source: Path
) -> None:
    watcher, registry, clock, events = setup
    start(watcher, clock)
    root = source.resolve()
    for n in range(200):  # a checkout: batches arriving 50 ms apart, for 2 s
        write_files(root, {f"new/page{n:03}.md": f"# Page {n}\n\nThe quokka number {n}.\n"})
        if n % 10 == 9:
            watcher.changed({(ADDED, str(root / f"new/page{i:03}.md")) for i in range(n - 9, n + 1)}, clock.t)
            clock.t += 0.1
            watcher.run_due(clock.t)

    settle(watcher, clock)

    (event,) = reindexed(events)
    assert event.report is not None and event.report.added == 200
    assert len(search(registry, "quokka", dataset="notes", mode="keyword", top_k=100).results) == 100


def test_editor_writes_and_renames_in_one_save_are_one_reingest(
    setup: tuple[Watcher, Registry, Clock, list[WatchEvent]], source: Path
) -> None:
    watcher, registry, clock, events = setup
    start(watcher, clock)
    root = source.resolve()
    # An atomic save: write a temporary file, rename it over the document.
    (root / ".guide.md.swp").write_text("x")
    (root / "guide.md~").write_text("# Guide\n\nThe zephyrine daemon starts on boot.\n")
    (root / "guide.md.tmp").write_text("# Guide\n\nThe marmalade daemon starts on boot.\n")
    os.replace(root / "guide.md.tmp", root / "guide.md")
    batch = {
        (ADDED, str(root / ".guide.md.swp")),
        (ADDED, str(root / "guide.md~")),
        (ADDED, str(root / "guide.md.tmp")),
        (DELETED, str(root / "guide.md.tmp")),
        (ADDED, str(root / "guide.md")),
    }
    watcher.changed(batch, clock.t)
    clock.t += 0.2
    watcher.changed({(MODIFIED, str(root / "guide.md"))}, clock.t)
    settle(watcher, clock)

    assert len(reindexed(events)) == 1
    assert found(registry, "marmalade") == ["guide.md"]


def test_irrelevant_changes_start_no_ingest(
    setup: tuple[Watcher, Registry, Clock, list[WatchEvent]], source: Path, fake_embedder: FakeEmbedder
) -> None:
    watcher, _, clock, events = setup
    start(watcher, clock)
    root = source.resolve()
    (root / "build.log").write_text("noise")
    watcher.changed({(MODIFIED, str(root / "build.log")), (ADDED, str(root / ".git" / "index"))}, clock.t)
    assert watcher.debouncer.next_due() is None

    # A change event for a document whose file is as ingested (size and mtime): nothing to do.
    watcher.changed({(MODIFIED, str(root / "guide.md"))}, clock.t)
    settle(watcher, clock)
    assert reindexed(events) == [] and fake_embedder.embedded == []


def test_changes_to_the_datasets_folder_inside_the_source_are_ignored(
    tmp_path: Path, fake_embedder: FakeEmbedder
) -> None:
    source = write_files(tmp_path / "proj", {"readme.md": "# Readme\n\nHello.\n"})
    datasets = source / "datasets"
    ingest(source, datasets, IngestOptions(dataset_id="proj"), embedder=FakeEmbedder())
    registry = Registry(datasets)
    clock, events = Clock(), []
    watcher = Watcher(registry, clock=clock, on_event=events.append)
    try:
        start(watcher, clock)
        written = datasets.resolve() / "proj" / "v-new" / "notes.md"
        watcher.changed({(ADDED, str(written)), (ADDED, str(datasets.resolve() / "proj"))}, clock.t)
        assert watcher.debouncer.next_due() is None
    finally:
        watcher.stop()
        registry.close()


def test_searches_answer_from_the_previous_version_until_the_new_one_is_published(
    setup: tuple[Watcher, Registry, Clock, list[WatchEvent]], source: Path
) -> None:
    watcher, registry, clock, _ = setup
    seen_during: list[list[str]] = []

    class Spying(FakeEmbedder):
        def embed_documents(self, texts: Any, progress: Any = None) -> np.ndarray:
            seen_during.append(found(registry, "harpsichord") + found(registry, "ocarina"))
            return super().embed_documents(texts, progress)

    watcher._factory = lambda info: Spying()
    start(watcher, clock)
    (source / "todo.txt").write_text("Tune the ocarina.\n")
    watcher.changed({(MODIFIED, str(source.resolve() / "todo.txt"))}, clock.t)
    settle(watcher, clock)

    assert seen_during == [["todo.txt"]]  # mid-ingest: the old text, and only it
    assert found(registry, "ocarina") == ["todo.txt"] and found(registry, "harpsichord") == []


# ---------------------------------------------------------------- failures


def test_a_failed_reingest_keeps_the_previous_version_and_is_reported(
    setup: tuple[Watcher, Registry, Clock, list[WatchEvent]], source: Path, datasets_dir: Path, tmp_path: Path
) -> None:
    watcher, registry, clock, events = setup
    start(watcher, clock)

    def broken(info: object) -> FakeEmbedder:
        raise EmbeddingModelError(f"cannot load the model from {tmp_path}/models/x: damaged")

    watcher._factory = broken
    (source / "todo.txt").write_text("Tune the ocarina.\n")
    watcher.changed({(MODIFIED, str(source.resolve() / "todo.txt"))}, clock.t)
    settle(watcher, clock)

    assert found(registry, "harpsichord") == ["todo.txt"]  # the previous version serves
    (failed,) = [e for e in events if e.kind == "failed"]
    assert "previous version keeps serving" in failed.message and "damaged" in failed.message
    summary = registry.scan()[0].summary()
    assert summary.watch_state == "failed" and summary.watch_message == failed.message
    assert str(tmp_path) not in failed.message  # shown to MCP clients: no absolute paths

    watcher._factory = lambda info: FakeEmbedder()  # fixed: the next change goes through
    (source / "todo.txt").write_text("Tune the ocarina twice.\n")
    watcher.changed({(MODIFIED, str(source.resolve() / "todo.txt"))}, clock.t)
    settle(watcher, clock)
    assert found(registry, "ocarina") == ["todo.txt"]
    assert registry.scan()[0].summary().watch_state == "watching"


def test_a_folder_emptied_of_documents_fails_and_keeps_the_dataset(
    setup: tuple[Watcher, Registry, Clock, list[WatchEvent]], source: Path
) -> None:
    watcher, registry, clock, events = setup
    start(watcher, clock)
    root = source.resolve()
    for p in list(root.rglob("*.*")):
        p.unlink()
    watcher.changed({(DELETED, str(root / "guide.md")), (DELETED, str(root / "todo.txt"))}, clock.t)
    settle(watcher, clock)

    (failed,) = [e for e in events if e.kind == "failed"]
    assert "no documents to ingest" in failed.message and "<source folder>" in failed.message
    assert str(root) not in failed.message
    assert found(registry, "harpsichord") == ["todo.txt"]


def test_unreadable_files_are_skipped_and_the_rest_reingested(
    setup: tuple[Watcher, Registry, Clock, list[WatchEvent]], source: Path
) -> None:
    watcher, registry, clock, events = setup
    start(watcher, clock)
    root = source.resolve()
    (root / "todo.txt").write_text("Tune the ocarina.\n")
    os.symlink(root / "nowhere.md", root / "dangling.md")  # inside the folder, but cannot be read
    watcher.changed({(MODIFIED, str(root / "todo.txt")), (ADDED, str(root / "dangling.md"))}, clock.t)
    settle(watcher, clock)

    (event,) = reindexed(events)
    assert event.report is not None and [p for p, _ in event.report.skipped] == ["dangling.md"]
    assert found(registry, "ocarina") == ["todo.txt"]


def test_another_ingest_holding_the_lock_is_waited_for(
    setup: tuple[Watcher, Registry, Clock, list[WatchEvent]], source: Path, datasets_dir: Path
) -> None:
    watcher, registry, clock, events = setup
    start(watcher, clock)
    (source / "todo.txt").write_text("Tune the ocarina.\n")
    with dataset_lock(datasets_dir / "notes"):
        watcher.changed({(MODIFIED, str(source.resolve() / "todo.txt"))}, clock.t)
        settle(watcher, clock)
        assert reindexed(events) == [] and watcher.debouncer.next_due() == clock.t + LOCK_RETRY
    settle(watcher, clock, LOCK_RETRY)
    assert found(registry, "ocarina") == ["todo.txt"]


# ---------------------------------------------------------------- deleted and renamed folders


@pytest.mark.parametrize("how", ["delete", "rename"])
def test_a_deleted_or_renamed_source_folder_is_reported_and_the_dataset_kept(
    setup: tuple[Watcher, Registry, Clock, list[WatchEvent]], source: Path, datasets_dir: Path, how: str
) -> None:
    watcher, registry, clock, events = setup
    start(watcher, clock)
    root = source.resolve()
    if how == "delete":
        shutil.rmtree(root)
        batch = {(DELETED, str(root / "guide.md")), (DELETED, str(root / "recipes")), (DELETED, str(root))}
    else:
        root.rename(root.with_name("notes-old"))
        batch = {(DELETED, str(root))}

    watcher.changed(batch, clock.t)
    settle(watcher, clock)

    assert [e.kind for e in events][-1] == "source_missing"
    assert watcher.roots() == ()
    assert found(registry, "harpsichord") == ["todo.txt"]  # kept, still searchable
    assert (datasets_dir / "notes" / MANIFEST_NAME).is_file()
    summary = registry.scan()[0].summary()
    assert summary.watch_state == "source_missing" and "deleted or renamed" in (summary.watch_message or "")
    assert str(root) not in (summary.watch_message or "")

    # Back at that path (renamed back, or restored): watched again, and caught up.
    if how == "delete":
        write_files(root, {"todo.txt": "Buy a harpsichord.\n", "guide.md": "# Guide\n\nThe quokka starts.\n"})
    else:
        root.with_name("notes-old").rename(root)
        (root / "guide.md").write_text("# Guide\n\nThe quokka starts.\n")
    clock.t += 5
    watcher.recheck(clock.t)
    watcher.run_due(clock.t)
    assert watcher.roots() == (str(root),)
    assert found(registry, "quokka") == ["guide.md"]
    assert registry.scan()[0].summary().watch_state == "watching"


def test_a_source_folder_missing_at_start_is_reported(
    setup: tuple[Watcher, Registry, Clock, list[WatchEvent]], source: Path
) -> None:
    watcher, registry, clock, events = setup
    shutil.rmtree(source)
    start(watcher, clock)
    assert [e.kind for e in events] == ["source_missing"] and watcher.roots() == ()
    assert registry.scan()[0].summary().watch_state == "source_missing"
    assert found(registry, "harpsichord") == ["todo.txt"]


def test_a_folder_deleted_and_recreated_in_one_batch_is_watched_anew(
    setup: tuple[Watcher, Registry, Clock, list[WatchEvent]], source: Path
) -> None:
    watcher, registry, clock, _ = setup
    start(watcher, clock)
    root = source.resolve()
    shutil.rmtree(root)
    write_files(root, {"todo.txt": "Buy a harpsichord.\n", "guide.md": "# Guide\n\nThe quokka starts.\n"})
    watcher._wake.clear()
    watcher.changed({(DELETED, str(root)), (ADDED, str(root))}, clock.t)
    assert watcher._wake.is_set()  # inotify lost the folder: the notify thread must watch it again
    settle(watcher, clock)
    assert found(registry, "quokka") == ["guide.md"]


# ---------------------------------------------------------------- untrusted manifests and claims


def test_a_manifest_pointing_at_another_folder_is_not_watched(
    setup: tuple[Watcher, Registry, Clock, list[WatchEvent]], datasets_dir: Path, tmp_path: Path
) -> None:
    watcher, registry, clock, events = setup
    private = write_files(tmp_path / "private", {"secrets.md": "# Secrets\n\nThe vault code is 1234.\n"})
    path = datasets_dir / "notes" / MANIFEST_NAME
    data = json.loads(path.read_text())
    data["source"]["path"] = str(private.resolve())
    path.write_text(json.dumps(data))

    start(watcher, clock)

    assert [e.kind for e in events] == ["refused"] and watcher.roots() == ()
    assert found(registry, "vault") == []
    assert read_watch(datasets_dir / "notes") is None  # not claimed either


def test_a_trusted_dataset_is_watched_without_that_check(
    source: Path, datasets_dir: Path, make_registry: Callable[[], Registry], fake_embedder: FakeEmbedder
) -> None:
    ingest(source, datasets_dir, IngestOptions(dataset_id="notes"), embedder=FakeEmbedder())
    for p in source.rglob("*.*"):  # every document edited while nobody watched
        p.write_text(p.read_text() + "\nThe ocarina.\n")
    clock = Clock()
    watcher = Watcher(make_registry(), only=["notes"], trusted={"notes": str(source.resolve())}, clock=clock)
    try:
        start(watcher, clock)
        assert sorted(found(watcher.registry, "ocarina")) == ["guide.md", "recipes/bread.md", "todo.txt"]
    finally:
        watcher.stop()


def test_one_process_watches_a_dataset_and_another_takes_over_when_it_stops(
    setup: tuple[Watcher, Registry, Clock, list[WatchEvent]], make_registry: Callable[[], Registry]
) -> None:
    first, _, clock, _ = setup
    start(first, clock)
    events: list[WatchEvent] = []
    second = Watcher(make_registry(), clock=clock, on_event=events.append)
    try:
        start(second, clock)
        assert [e.kind for e in events] == ["standby"] and second.roots() == ()
        first.stop()
        second.recheck(clock.t)
        assert [e.kind for e in events] == ["standby", "watching"] and second.roots() != ()
    finally:
        second.stop()


def test_a_dataset_ingested_later_is_watched_at_the_next_look(
    setup: tuple[Watcher, Registry, Clock, list[WatchEvent]], datasets_dir: Path, tmp_path: Path
) -> None:
    watcher, _, clock, _ = setup
    start(watcher, clock)
    other = write_files(tmp_path / "other", {"a.md": "# A\n\nText.\n"})
    ingest(other, datasets_dir, IngestOptions(dataset_id="other"), embedder=FakeEmbedder())
    watcher.recheck(clock.t + 5)
    assert set(watcher.roots()) == {str(tmp_path.resolve() / "notes"), str(other.resolve())}


def test_the_watch_state_is_read_only_while_a_process_holds_the_claim(tmp_path: Path) -> None:
    assert read_watch(tmp_path) is None
    claim = WatchClaim.take(tmp_path)
    assert claim is not None
    assert WatchClaim.take(tmp_path) is None  # held
    claim.write(WatchState(state="source_missing", message="gone", pid=7))
    state = read_watch(tmp_path)
    assert state is not None and (state.state, state.message, state.pid) == ("source_missing", "gone", 7)
    claim.release()
    assert read_watch(tmp_path) is None  # the file stays, but nobody holds it


def test_a_garbled_watch_file_still_reads_as_watched(tmp_path: Path) -> None:
    claim = WatchClaim.take(tmp_path)
    assert claim is not None
    (tmp_path / WATCH_NAME).write_bytes(b"\x00garbage" * 1000)
    try:
        state = read_watch(tmp_path)
        assert state is not None and state.state == "watching" and state.message is None
    finally:
        claim.release()


def test_scrub_removes_absolute_paths() -> None:
    message = "/srv/docs: no documents; cache /home/u/.cache/mcpower/onnx/x failed; see guide/a.md"
    assert scrub(message, "/srv/docs") == "<source folder>: no documents; cache <path> failed; see guide/a.md"


# ---------------------------------------------------------------- real folders (inotify or polling)


def test_watching_a_real_folder_picks_up_an_edit(
    source: Path, datasets_dir: Path, make_registry: Callable[[], Registry], fake_embedder: FakeEmbedder
) -> None:
    ingest(source, datasets_dir, IngestOptions(dataset_id="notes"), embedder=FakeEmbedder())
    registry = make_registry()
    watching, done = threading.Event(), threading.Event()

    def on_event(event: WatchEvent) -> None:
        if event.kind == "watching":
            watching.set()
        elif event.report is not None and event.report.published:
            done.set()

    watcher = Watcher(registry, quiet=0.1, on_event=on_event)
    watcher.start()
    try:
        assert watching.wait(30)
        # The notify thread may not have begun watching yet: edit until the change is seen.
        for _ in range(30):
            (source / "todo.txt").write_text("Tune the ocarina.\n")
            if done.wait(2):
                break
        assert done.is_set()
        assert found(registry, "ocarina") == ["todo.txt"]
    finally:
        watcher.stop()


def test_ingest_watch_command_reingests_and_stops_on_ctrl_c(source: Path, datasets_dir: Path, tmp_path: Path) -> None:
    launcher = write_launcher(tmp_path)
    argv = [sys.executable, str(launcher), "ingest", str(source), "--id", "notes"]
    argv += ["--datasets-dir", str(datasets_dir), "--watch", "--watch-debounce", "0.1", "--json"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=subprocess_env(), text=True)
    lines: queue.Queue[str] = queue.Queue()
    assert proc.stdout is not None and proc.stderr is not None
    reader = threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True)  # type: ignore[union-attr]
    reader.start()
    try:
        first = json.loads(lines.get(timeout=60))
        assert (first["dataset"], first["documents"], first["added"]) == ("notes", 3, 3)
        report: dict[str, Any] = {}
        for n in range(90):  # until the watch has begun and sees an edit (up to 3 min on a loaded machine)
            (source / "todo.txt").write_text(f"Tune the ocarina {n}.\n")
            try:
                report = json.loads(lines.get(timeout=2))
                break
            except queue.Empty:
                continue
        assert (report.get("changed"), report.get("published")) == (1, True), report
        proc.send_signal(signal.SIGINT)
        # An ingest the edits started finishes first (watch/watcher.py): minutes on a loaded machine.
        assert proc.wait(180) == 0
        assert "stopped watching" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        reader.join(10)
        proc.stdout.close()
        proc.stderr.close()
