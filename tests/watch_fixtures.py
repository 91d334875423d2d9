"""What the watch tests share: a clock they move by hand, the source folder 'notes', a Watcher
over it, and the watchfiles change codes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from conftest import FakeEmbedder, write_files

from mcpower.ingestion import IngestOptions, ingest
from mcpower.registry import Registry
from mcpower.watch import Watcher, WatchEvent

ADDED, MODIFIED = 1, 2  # watchfiles.Change values, without importing watchfiles
QUIET = 1.0  # the debounce the tests' watchers use, in fake seconds

NOTES = {
    "guide.md": "# Guide\n\nThe zephyrine daemon starts on boot.\n",
    "recipes/bread.md": "# Bread\n\nFeed the rye starter twice a day.\n",
    "todo.txt": "Buy a harpsichord.\n",
}


class Clock:
    """The watcher's clock: stands still until a test moves ``t``."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def write_notes(folder: Path, names: tuple[str, ...] = tuple(NOTES)) -> Path:
    return write_files(folder, {name: NOTES[name] for name in names})


def watched_notes(
    source: Path, datasets_dir: Path, make_registry: Callable[[], Registry]
) -> tuple[Watcher, Registry, Clock, list[WatchEvent]]:
    """Dataset 'notes' ingested from ``source``, and a Watcher over it with a fake clock (not started)."""
    ingest(source, datasets_dir, IngestOptions(dataset_id="notes"), embedder=FakeEmbedder())
    registry = make_registry()
    clock, events = Clock(), []
    watcher = Watcher(registry, quiet=QUIET, clock=clock, on_event=events.append)
    return watcher, registry, clock, events


def settle(watcher: Watcher, clock: Clock, seconds: float = QUIET) -> None:
    """Let the fake clock run past the quiet time and run what is due."""
    clock.t += seconds
    watcher.run_due(clock.t)


def published(events: list[WatchEvent]) -> list[WatchEvent]:
    """The events of re-ingests that published a new version."""
    return [e for e in events if e.kind == "reindexed" and e.report is not None and e.report.published]
