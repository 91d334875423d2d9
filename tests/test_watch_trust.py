"""Watching what the operator allows, whatever a manifest says (docs/robustness.md, Trust policies).

A manifest is data that whoever can write the datasets folder may have written: its recorded
options can narrow what the watcher reads, never widen it; it cannot point the watcher at another
folder; a FIFO where a document was cannot stall the watcher; and the watcher watches only the
folders discovery walks (never through a symlink). The worker's steps are driven by hand with a
fake clock, as in test_watch.py; the tests at the end watch a real folder (inotify) and wait for
what they expect with a generous timeout.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import FakeEmbedder, write_files
from watch_fixtures import Clock, write_notes

from mcpower.config import Settings
from mcpower.ingestion import IngestOptions, ingest
from mcpower.layout import read_watch
from mcpower.manifest import MANIFEST_NAME, read_manifest
from mcpower.registry import Registry
from mcpower.search import search
from mcpower.watch import Watcher, WatchEvent

SECRET = "# Private\n\nThe vault code is zanzibar.\n"


@pytest.fixture
def source(tmp_path: Path) -> Path:
    return write_notes(tmp_path / "notes").resolve()


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A folder of someone else's, outside every dataset's source folder."""
    return write_files(tmp_path / "victim", {"private.md": SECRET, "diary.md": SECRET}).resolve()


def rewrite_source(datasets_dir: Path, ds: str, **changes: object) -> None:
    """Edit the dataset's manifest in place, as someone able to write it would."""
    path = datasets_dir / ds / MANIFEST_NAME
    data = json.loads(path.read_text())
    data["source"].update(changes)
    path.write_text(json.dumps(data))


def start(watcher: Watcher, clock: Clock) -> None:
    """The worker's first steps: look at the datasets, then the catch-up re-ingest."""
    watcher.recheck(clock.t)
    watcher.run_due(clock.t)


def paths(registry: Registry, ds: str = "notes") -> list[str]:
    return sorted(d.path for d in registry.store(ds).documents())


def found(registry: Registry, word: str) -> list[str]:
    return sorted(r.path for r in search(registry, word, mode="keyword", top_k=20).results)


@pytest.fixture
def watch(
    make_registry: Callable[[], Registry], fake_embedder: FakeEmbedder
) -> Iterator[Callable[..., tuple[Watcher, list[WatchEvent]]]]:
    """Watchers with a fake clock (the worker's steps run by hand), stopped at teardown."""
    made: list[Watcher] = []

    def make(**kwargs: object) -> tuple[Watcher, list[WatchEvent]]:
        events: list[WatchEvent] = []
        clock = Clock()
        watcher = Watcher(make_registry(), quiet=1.0, clock=clock, on_event=events.append, **kwargs)  # type: ignore[arg-type]
        made.append(watcher)
        start(watcher, clock)
        return watcher, events

    yield make
    for watcher in made:
        watcher.stop()


# ---------------------------------------------------------------- recorded options within the operator's limits


def test_a_rewritten_manifest_cannot_widen_what_the_watcher_reads(
    source: Path, victim: Path, datasets_dir: Path, watch: Callable[..., tuple[Watcher, list[WatchEvent]]]
) -> None:
    """Someone who can write a shared dataset's manifest turns on followSymlinks, lifts maxFileBytes
    and includes code, then plants a link to the victim's file, a huge file and a code file in the
    shared folder: the victim's watcher (default limits) indexes none of them."""
    ingest(source, datasets_dir, IngestOptions(dataset_id="notes"), embedder=FakeEmbedder())
    rewrite_source(datasets_dir, "notes", followSymlinks=True, maxFileBytes=1 << 40, include=["*.md", "*.txt", "*.py"])
    (source / "leak.md").symlink_to(victim / "private.md")
    (source / "huge.md").write_text("# Huge\n\n" + "The zanzibar line.\n" * 600_000)  # 11.4 MB, over 10 MB
    (source / "keys.py").write_text('KEY = "zanzibar"\n')

    watcher, events = watch()

    assert paths(watcher.registry) == ["guide.md", "recipes/bread.md", "todo.txt"]
    assert found(watcher.registry, "zanzibar") == []
    assert [e.kind for e in events] == ["watching"]  # nothing new to read: no re-ingest
    assert "symlinks out of its folder are not followed" in events[0].message
    assert "source code is not read" in events[0].message and "files over" in events[0].message
    # The record is kept as written: a watcher allowed more would build the dataset as recorded.
    src = read_manifest(datasets_dir / "notes" / MANIFEST_NAME).source
    assert src is not None and (src.follow_symlinks, src.max_file_bytes) == (True, 1 << 40)


@pytest.mark.parametrize(("recorded", "allowed"), [(True, True), (True, False), (False, True)])
def test_a_link_out_of_the_folder_is_followed_only_when_recorded_and_allowed(
    source: Path,
    victim: Path,
    datasets_dir: Path,
    watch: Callable[..., tuple[Watcher, list[WatchEvent]]],
    recorded: bool,
    allowed: bool,
) -> None:
    from mcpower.watch import WatchLimits

    (source / "shared.md").symlink_to(victim / "private.md")
    ingest(source, datasets_dir, IngestOptions(dataset_id="notes", follow_symlinks=recorded), embedder=FakeEmbedder())
    (source / "todo.txt").write_text("Buy a spinet.\n")  # something to re-ingest

    watcher, _ = watch(limits=WatchLimits(follow_symlinks=allowed))

    assert found(watcher.registry, "spinet") == ["todo.txt"]
    assert ("shared.md" in paths(watcher.registry)) == (recorded and allowed)


def test_the_smaller_file_size_limit_wins(
    source: Path, datasets_dir: Path, watch: Callable[..., tuple[Watcher, list[WatchEvent]]]
) -> None:
    from mcpower.watch import WatchLimits

    (source / "long.md").write_text("# Long\n\n" + "The ocarina line.\n" * 300)  # 5.4 KB
    ingest(source, datasets_dir, IngestOptions(dataset_id="notes", max_file_bytes=1 << 20), embedder=FakeEmbedder())
    assert "long.md" in paths(Registry(datasets_dir, allowed_models=[FakeEmbedder.model_name]))

    watcher, events = watch(limits=WatchLimits(max_file_bytes=4096))  # the operator's limit, under the record's

    assert "long.md" not in paths(watcher.registry) and "files over 0.004096 MB" in events[0].message


def test_serve_watch_takes_its_limits_from_flags_or_the_environment(
    monkeypatch: pytest.MonkeyPatch, make_registry: Callable[[], Registry]
) -> None:
    from mcpower.cli.serve import start_watcher
    from mcpower.watch import WatchLimits

    s = Settings.load()
    # code in the dataset's own folder is read as built (issue 19: --watch must not drop --code);
    # links out of the folder only when the operator says so
    assert (s.watch_follow_symlinks, s.watch_code) == (False, True)
    monkeypatch.setenv("MCPOWER_WATCH_FOLLOW_SYMLINKS", "1")
    monkeypatch.setenv("MCPOWER_WATCH_CODE", "true")
    monkeypatch.setenv("MCPOWER_MAX_FILE_MB", "2")
    s = Settings.load()
    assert (s.watch_follow_symlinks, s.watch_code) == (True, True)
    assert Settings.load(watch_code=False).watch_code is False  # the flag wins
    watcher = start_watcher(make_registry(), Settings.load(watch=True, watch_code=False))
    assert watcher is not None
    try:
        assert watcher.limits == WatchLimits(follow_symlinks=True, max_file_bytes=2 << 20, code=False)
    finally:
        watcher.stop()


# ---------------------------------------------------------------- a manifest cannot choose the folder


def test_ingest_watch_trusts_only_the_folder_the_user_named(
    source: Path, victim: Path, datasets_dir: Path, watch: Callable[..., tuple[Watcher, list[WatchEvent]]]
) -> None:
    """`ingest PATH --watch` skips the checks for PATH, not for a folder the manifest names later."""
    ingest(source, datasets_dir, IngestOptions(dataset_id="notes"), embedder=FakeEmbedder())
    rewrite_source(datasets_dir, "notes", path=str(victim))

    watcher, events = watch(only=["notes"], trusted={"notes": str(source)})

    assert [e.kind for e in events] == ["refused"] and watcher.roots() == ()
    assert found(watcher.registry, "zanzibar") == []


def test_an_empty_document_does_not_tie_a_dataset_to_another_folder(
    tmp_path: Path,
    source: Path,
    victim: Path,
    datasets_dir: Path,
    watch: Callable[..., tuple[Watcher, list[WatchEvent]]],
) -> None:
    """Anyone knows the content of an empty file: one cannot show that a folder is the dataset's."""
    (source / "blank.md").write_text("")
    ingest(source, datasets_dir, IngestOptions(dataset_id="notes"), embedder=FakeEmbedder())
    (victim / "blank.md").write_text("")
    rewrite_source(datasets_dir, "notes", path=str(victim))

    watcher, events = watch()

    assert [e.kind for e in events] == ["refused"] and watcher.roots() == ()
    assert found(watcher.registry, "zanzibar") == []


@pytest.mark.skipif(not hasattr(os, "geteuid"), reason="POSIX owners")
@pytest.mark.parametrize("how", ["writable-by-others", "another-owner"])
def test_a_manifest_others_can_write_is_not_watched(
    source: Path, datasets_dir: Path, watch: Callable[..., tuple[Watcher, list[WatchEvent]]], how: str
) -> None:
    ingest(source, datasets_dir, IngestOptions(dataset_id="notes"), embedder=FakeEmbedder())
    manifest = datasets_dir / "notes" / MANIFEST_NAME
    if how == "writable-by-others":
        manifest.chmod(0o664)
    elif os.geteuid() == 0:
        os.chown(manifest, 65534, 65534)
    else:
        pytest.skip("giving a file to another user needs root")

    watcher, events = watch()

    assert [e.kind for e in events] == ["refused"] and watcher.roots() == ()
    assert "only its owner" in events[0].message
    assert read_watch(datasets_dir / "notes") is None  # not claimed: its owner's server may watch it


# ---------------------------------------------------------------- a FIFO where a document was


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs")
def test_a_fifo_where_an_empty_document_was_does_not_stall_the_watcher(
    tmp_path: Path, source: Path, datasets_dir: Path, make_registry: Callable[[], Registry], fake_embedder: FakeEmbedder
) -> None:
    """A FIFO has the size of an empty document (0): checking the folder must not wait on it, and the
    datasets after it are watched."""
    first = write_files(tmp_path / "first", {"a-empty.md": "", "guide.md": "# Guide\n\nThe quokka.\n"})
    ingest(first, datasets_dir, IngestOptions(dataset_id="aaa"), embedder=FakeEmbedder())
    ingest(source, datasets_dir, IngestOptions(dataset_id="notes"), embedder=FakeEmbedder())
    fifo = first / "a-empty.md"
    fifo.unlink()
    os.mkfifo(fifo)
    events: list[WatchEvent] = []
    clock = Clock()
    watcher = Watcher(make_registry(), clock=clock, on_event=events.append)
    steps = threading.Thread(target=start, args=(watcher, clock), daemon=True)
    try:
        steps.start()
        steps.join(60)  # what it takes is milliseconds; a watcher that opens the FIFO waits forever
        stalled = steps.is_alive()
    finally:
        if steps.is_alive():  # let a stalled watcher go: a writer that opens and closes ends its read
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            steps.join(60)
        watcher.stop()
    assert not stalled
    assert sorted((e.dataset, e.kind) for e in events if e.kind != "reindexed") == [
        ("aaa", "watching"),
        ("notes", "watching"),
    ]
    assert paths(watcher.registry, "aaa") == ["guide.md"]  # the FIFO is not a document


# ---------------------------------------------------------------- the folders watched


def test_the_folders_watched_are_those_discovery_walks(tmp_path: Path, source: Path) -> None:
    from mcpower.watch.notify import folders

    outside = write_files(tmp_path / "outside", {f"d{i}/x.md": "x" for i in range(5)})
    (source / "usr-link").symlink_to(outside, target_is_directory=True)
    write_files(source, {".git/objects/ab/c": "x", "datasets/notes/manifest.json": "{}"})
    assert sorted(folders([str(source)], [str(source / "datasets")])) == [str(source), str(source / "recipes")]


def _inotify_watches(before: set[str]) -> int:
    """The inotify watches of this process's inotify instances not open in ``before``."""
    total = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if fd in before or os.readlink(f"/proc/self/fd/{fd}") != "anon_inode:inotify":
                continue
            with open(f"/proc/self/fdinfo/{fd}") as f:
                total += sum(1 for line in f if line.startswith("inotify wd:"))
        except OSError:
            continue
    return total


def _inotify_fds() -> set[str]:
    fds = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:inotify":
                fds.add(fd)
        except OSError:
            continue
    return fds


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.environ.get("WATCHFILES_FORCE_POLLING"), reason="inotify"
)
def test_a_real_watcher_does_not_watch_through_a_folder_symlink(
    tmp_path: Path, source: Path, datasets_dir: Path, make_registry: Callable[[], Registry], fake_embedder: FakeEmbedder
) -> None:
    """`docs/usr-link -> /usr` gave the server 15,488 inotify watches. Here a link to a tree of 60
    folders: the watcher watches the 2 folders discovery walks; a folder made later is watched too."""
    outside = write_files(tmp_path / "outside", {f"d{i}/e{j}/x.md": "x" for i in range(20) for j in range(2)})
    (source / "usr-link").symlink_to(outside, target_is_directory=True)
    ingest(source, datasets_dir, IngestOptions(dataset_id="notes"), embedder=FakeEmbedder())
    before = _inotify_fds()
    published = threading.Event()

    def on_event(event: WatchEvent) -> None:
        if event.report is not None and event.report.published:
            published.set()

    watcher = Watcher(make_registry(), quiet=0.1, on_event=on_event)
    watcher.start()
    try:

        def edited(path: Path, word: str) -> bool:
            """Edit ``path`` until a re-ingest publishes it (the watch may not have begun yet)."""
            for n in range(30):
                published.clear()
                path.write_text(f"# Note\n\nThe {word} {n}.\n")
                if published.wait(2) and found(watcher.registry, word):
                    return True
            return False

        assert edited(source / "todo.txt", "ocarina")
        assert _inotify_watches(before) == 2  # notes/ and notes/recipes/, nothing behind the link

        (source / "later").mkdir()
        assert edited(source / "later" / "new.md", "bassoon")
        for _ in range(300):  # the new watch begins right after the folder's event
            if _inotify_watches(before) == 3:
                break
            threading.Event().wait(0.1)
        assert _inotify_watches(before) == 3
        assert edited(source / "later" / "new.md", "harpsichord")  # seen inside the folder made later
    finally:
        watcher.stop()
