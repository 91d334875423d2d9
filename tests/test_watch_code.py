"""`--watch` keeps a dataset as it was built (issue 19, item 1): a dataset ingested with `--code`
(or an include naming code) is re-ingested with its code, and an edited source file is picked up —
through the Watcher with a clock of the test's, and end to end through `mcpower ingest --code
--watch` on real files (a page of the FastAPI docs, modules of Starlette)."""

from __future__ import annotations

import json
import queue
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import starlette
from conftest import FakeEmbedder
from server_fixtures import subprocess_env, write_launcher
from watch_fixtures import MODIFIED, QUIET, Clock, published, settle

from mcpower.config import Settings
from mcpower.ingestion import IngestOptions, ingest
from mcpower.manifest import MANIFEST_NAME, read_manifest
from mcpower.registry import Registry
from mcpower.search import search
from mcpower.watch import Watcher, WatchEvent, WatchLimits

STARLETTE = Path(starlette.__file__).parent
FASTAPI = (
    next(
        (p for p in (Path(__file__).resolve().parents[2] / "shared", Path("/work/shared")) if p.is_dir()),
        Path("shared"),
    )
    / "bench/docs-fastapi/corpus"
)


@pytest.fixture
def mixed(tmp_path: Path) -> Path:
    """Real files: a FastAPI docs page and two Starlette modules."""
    if not FASTAPI.is_dir():
        pytest.skip(f"needs the FastAPI docs at {FASTAPI}")
    folder = tmp_path / "mixed"
    folder.mkdir()
    shutil.copy(FASTAPI / "async.md", folder / "async.md")
    for name in ("status.py", "background.py"):
        shutil.copy(STARLETTE / name, folder / name)
    return folder


def serve_limits() -> WatchLimits:
    """What `serve --watch` allows with no options (cli/serving.py: start_watcher)."""
    s = Settings.load()
    return WatchLimits(s.watch_follow_symlinks, int(s.max_file_mb * 1024 * 1024), s.watch_code)


@pytest.fixture
def watcher_of(
    make_registry: Callable[[], Registry], fake_embedder: FakeEmbedder
) -> Iterator[Callable[[WatchLimits], tuple[Watcher, Clock, list[WatchEvent]]]]:
    made: list[Watcher] = []

    def make(limits: WatchLimits) -> tuple[Watcher, Clock, list[WatchEvent]]:
        clock, events = Clock(), []
        watcher = Watcher(make_registry(), quiet=QUIET, clock=clock, on_event=events.append, limits=limits)
        made.append(watcher)
        watcher.recheck(clock.t)  # the first steps: look at the datasets, run the catch-up
        watcher.run_due(clock.t)
        return watcher, clock, events

    yield make
    for w in made:
        w.stop()


def paths(registry: Registry, ds: str) -> list[str]:
    return sorted(d.path for d in registry.store(ds).documents())


@pytest.mark.parametrize(
    "options",
    [{"code": True}, {"include": ("*.py", "*.md")}],
    ids=["--code", "--include *.py *.md"],
)
def test_serve_watch_keeps_the_code_a_dataset_was_built_with_and_reindexes_an_edited_module(
    mixed: Path, datasets_dir: Path, watcher_of: Any, options: dict[str, Any]
) -> None:
    ingest(mixed, datasets_dir, IngestOptions(dataset_id="mixed", **options), embedder=FakeEmbedder())
    built = ["async.md", "background.py", "status.py"]

    watcher, clock, events = watcher_of(serve_limits())

    assert paths(watcher.registry, "mixed") == built  # the catch-up removed nothing
    assert published(events) == [] and [e.kind for e in events] == ["watching"]
    module = mixed / "status.py"
    module.write_text(module.read_text() + "\nHTTP_799_QUOKKA_TEAPOT = 799\n")
    watcher.changed({(MODIFIED, str(module.resolve()))}, clock.t)
    settle(watcher, clock)
    (event,) = published(events)
    assert event.report is not None and (event.report.changed, event.report.removed) == (1, 0)
    hits = search(watcher.registry, "HTTP_799_QUOKKA_TEAPOT", dataset="mixed", mode="keyword").results
    assert [r.path for r in hits][:1] == ["status.py"]
    assert paths(watcher.registry, "mixed") == built


def test_a_code_only_dataset_stays_ready_under_watch(mixed: Path, datasets_dir: Path, watcher_of: Any) -> None:
    (mixed / "async.md").unlink()
    ingest(mixed, datasets_dir, IngestOptions(dataset_id="code", code=True), embedder=FakeEmbedder())

    watcher, _, events = watcher_of(serve_limits())

    assert [e.kind for e in events] == ["watching"]  # not failed: "no documents to ingest"
    assert paths(watcher.registry, "code") == ["background.py", "status.py"]


def test_an_operator_who_forbids_code_is_told_what_is_left_out(
    mixed: Path, datasets_dir: Path, watcher_of: Any
) -> None:
    ingest(mixed, datasets_dir, IngestOptions(dataset_id="mixed", code=True), embedder=FakeEmbedder())
    _, _, events = watcher_of(WatchLimits(code=False))  # serve --watch --no-watch-code
    assert "source code is not read (serve --watch-code allows it)" in (events[0].message or "")


def test_ingest_code_watch_end_to_end_keeps_the_code_and_picks_up_an_edit(
    mixed: Path, datasets_dir: Path, tmp_path: Path
) -> None:
    """`mcpower ingest mixed --code --id mixed2 --watch`, as the user ran it."""
    launcher = write_launcher(tmp_path)
    argv = [sys.executable, str(launcher), "ingest", str(mixed), "--code", "--id", "mixed2", "--watch"]
    argv += ["--datasets-dir", str(datasets_dir), "--watch-debounce", "0.1", "--json"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=subprocess_env(), text=True)
    lines: queue.Queue[str] = queue.Queue()
    assert proc.stdout is not None and proc.stderr is not None
    reader = threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True)  # type: ignore[union-attr]
    reader.start()
    try:
        first = json.loads(lines.get(timeout=120))
        assert (first["documents"], first["added"]) == (3, 3)
        module = mixed / "background.py"
        original = module.read_text()
        report: dict[str, Any] = {}
        for n in range(90):  # until the watch has begun and sees an edit (up to 3 min on a loaded machine)
            module.write_text(original + f"\n# the quokka edit {n}\n")
            try:
                report = json.loads(lines.get(timeout=2))
                break
            except queue.Empty:
                continue
        # the first re-ingest is the edit's: nothing was removed on the way, the code is all there
        assert (report.get("changed"), report.get("removed"), report.get("documents")) == (1, 0, 3), report
        manifest = read_manifest(datasets_dir / "mixed2" / MANIFEST_NAME)
        assert manifest.counts.file_types == {".md": 1, ".py": 2}
        proc.send_signal(signal.SIGINT)
        # An ingest the edits started finishes first (watch/watcher.py): minutes on a loaded machine.
        assert proc.wait(180) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        reader.join(10)
        proc.stdout.close()
        proc.stderr.close()
