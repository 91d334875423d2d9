"""Crash injection: an ingest killed anywhere leaves a dataset that loads, verifies and searches.

Version v1 of dataset ``crash`` exists; an ingest that would publish v2 (every file changed, one
added, one removed) runs in a forked child of a warm process (tests/republish_fixtures.py) and is
killed with SIGKILL at points spread evenly over an uninterrupted run, just before each of its
file-system steps, and with SIGINT or SIGTERM. After every kill the dataset must load (checksums
verified), answer a search wholly from v1 or wholly from v2, pass `mcpower validate`, and the next
ingest must leave no staging folder behind.

Also: one writer per dataset (the lock), and a full disk in the middle of a publish.
"""

from __future__ import annotations

import errno
import linecache
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from conftest import FakeEmbedder, valid_manifest
from republish_fixtures import MARKERS, QUERY, IngestForkServer, IngestRun, version_of, write_versioned_corpus
from server_fixtures import subprocess_env, write_launcher
from typer.testing import CliRunner

import mcpower.layout
import mcpower.store.local.build
from mcpower.cli.app import app
from mcpower.errors import DatasetLockedError, IngestError
from mcpower.ingestion import IngestOptions, ingest
from mcpower.layout import STAGING_PREFIX, VERSION_PREFIX, dataset_lock, write_manifest
from mcpower.manifest import MANIFEST_NAME, Manifest, read_manifest
from mcpower.registry import Registry
from mcpower.search import search
from mcpower.store import ChunkRow, DocumentRow, chunk_id
from mcpower.store.local.build import write_metadata

DATASET = "crash"
PACKAGE_DIR = str(Path(mcpower.layout.__file__).parent)
TIMED_KILLS = 30  # SIGKILL points in the default run, spread evenly over one ingest
TIMED_KILLS_SLOW = 200


@dataclass
class Sandbox:
    """Both corpora and a datasets folder holding v1 of the dataset."""

    root: Path
    v1: Path
    v2: Path
    datasets: Path

    @property
    def folder(self) -> Path:
        return self.datasets / DATASET

    def argv(self, source: Path) -> list[str]:
        # v1 and v2 are two folders: --replace rebuilds the dataset from the other on purpose
        return ["ingest", str(source), "--id", DATASET, "--datasets-dir", str(self.datasets), "--quiet", "--replace"]

    def ingest(self, source: Path) -> None:
        ingest(source, self.datasets, IngestOptions(dataset_id=DATASET, replace=True), embedder=FakeEmbedder())

    def leftovers(self) -> list[str]:
        return sorted(
            p.name
            for p in self.folder.iterdir()
            if p.name.startswith(STAGING_PREFIX)
            or (p.name.startswith(f".{MANIFEST_NAME}.") and p.name.endswith(".tmp"))
        )


@dataclass
class Tally:
    """What the kills did, for the assertion message and the printed summary."""

    points: int = 0
    lost: list[str] = field(default_factory=list)  # one line per kill point after which the dataset failed
    versions: dict[str, int] = field(default_factory=dict)
    staging_left: int = 0

    def summary(self, what: str) -> str:
        return (
            f"{what}: {self.points} kill points, {len(self.lost)} datasets lost; "
            f"versions after the kill {dict(sorted(self.versions.items()))}; "
            f"staging folder left by {self.staging_left} (removed by the next ingest)"
        )


@pytest.fixture(scope="module")
def forks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IngestForkServer]:
    server = IngestForkServer(tmp_path_factory.mktemp("forks"))
    yield server
    server.close()


@pytest.fixture
def sandbox(tmp_path: Path) -> Sandbox:
    box = Sandbox(
        tmp_path,
        write_versioned_corpus(tmp_path / "src" / "v1", "v1"),
        write_versioned_corpus(tmp_path / "src" / "v2", "v2"),
        tmp_path / "datasets",
    )
    box.ingest(box.v1)
    return box


def current_version(datasets: Path) -> str:
    """Load and verify the dataset, search it, and name the one version the answer came from."""
    registry = Registry(datasets, embedder_factory=lambda model: FakeEmbedder())
    try:
        registry.store(DATASET)  # checksums, counts and dimension against the manifest
        response = search(registry, QUERY, dataset=DATASET, top_k=10)
        return version_of(r.model_dump() for r in response.results)
    finally:
        registry.close()


def check_after_kill(box: Sandbox, run: IngestRun, tally: Tally, label: str, expect: str | None = None) -> str:
    """The post-kill checks; a failure is recorded in ``tally.lost``. Restores v1 with a full ingest."""
    tally.points += 1
    version = "?"
    try:
        version = current_version(box.datasets)
        if version not in MARKERS or (expect is not None and version != expect):
            raise AssertionError(f"search answered {version!r}, expected {expect or 'v1 or v2'}")
        if run.code == 0 and version != "v2":  # killed too: a signal that came after the end
            raise AssertionError(f"the ingest finished, yet the search answered {version!r}")
        result = CliRunner().invoke(app, ["validate", "--datasets-dir", str(box.datasets)])
        if result.exit_code != 0:
            raise AssertionError(f"validate failed: {result.stdout} {result.stderr}")
    except Exception as e:
        tally.lost.append(f"{label} (exit {run.code}, {run.seconds:.3f} s): {type(e).__name__}: {e}")
    tally.versions[version] = tally.versions.get(version, 0) + 1
    tally.staging_left += bool(box.leftovers())
    # The next successful ingest clears what the dead writer left, and prunes to two versions.
    box.ingest(box.v1)
    assert box.leftovers() == [], label
    assert len([p for p in box.folder.iterdir() if p.name.startswith(VERSION_PREFIX)]) <= 2, label
    assert current_version(box.datasets) == "v1", label
    return version


def measure(forks: IngestForkServer, box: Sandbox) -> IngestRun:
    """An uninterrupted v1 -> v2 ingest (then v1 restored): its duration and file-system steps."""
    run = forks.run(box.argv(box.v2))
    assert run.code == 0 and not run.killed, (box.root / "forks").as_posix()
    assert current_version(box.datasets) == "v2"
    box.ingest(box.v1)
    return run


def timed_sigkills(forks: IngestForkServer, box: Sandbox, points: int) -> Tally:
    duration = measure(forks, box).seconds
    tally = Tally()
    for i in range(points):
        delay = duration * (i + 0.5) / points
        run = forks.run(box.argv(box.v2), delay=delay)
        check_after_kill(box, run, tally, f"SIGKILL at {delay * 1000:.0f} ms of {duration * 1000:.0f}")
    print("\n" + tally.summary(f"SIGKILL spread over a {duration * 1000:.0f} ms ingest"))
    return tally


def test_sigkill_at_points_spread_over_an_ingest_loses_nothing(forks: IngestForkServer, sandbox: Sandbox) -> None:
    tally = timed_sigkills(forks, sandbox, TIMED_KILLS)

    assert tally.points == TIMED_KILLS
    assert tally.lost == [], "\n".join(tally.lost)


@pytest.mark.slow
def test_sigkill_at_many_points_loses_nothing(forks: IngestForkServer, sandbox: Sandbox) -> None:
    tally = timed_sigkills(forks, sandbox, TIMED_KILLS_SLOW)

    assert tally.lost == [], "\n".join(tally.lost)


def test_sigkill_before_each_file_system_step_loses_nothing(forks: IngestForkServer, sandbox: Sandbox) -> None:
    steps = measure(forks, sandbox).steps
    assert "replace" in steps and "write_vectors" in steps  # the hooks see the publish
    commit = steps.index("replace") + 1  # os.replace of manifest.json: readers switch to v2 after it
    tally = Tally()
    for k in range(1, len(steps) + 1):
        run = forks.run(sandbox.argv(sandbox.v2), kill_at_step=k, embed_delay=0)
        assert run.code == -9, f"step {k} ({steps[k - 1]}) was never reached"
        expect = "v2" if k > commit else "v1"
        check_after_kill(sandbox, run, tally, f"SIGKILL before step {k} ({steps[k - 1]})", expect)
    print("\n" + tally.summary(f"SIGKILL before each of {len(steps)} file-system steps"))

    assert tally.lost == [], "\n".join(tally.lost)
    assert tally.staging_left > 0  # some kills did land mid-publish


@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM"])
def test_sigint_and_sigterm_unwind_and_clean_up(forks: IngestForkServer, sandbox: Sandbox, signame: str) -> None:
    duration = measure(forks, sandbox).seconds
    tally = Tally()
    interrupted = 0
    for fraction in (0.2, 0.5, 0.8):
        run = forks.run(sandbox.argv(sandbox.v2), delay=duration * fraction, signal=signame)
        # Exit 0 although signalled: this run was faster than the measured one and the signal
        # came after its end (even after its exit: a zombie takes a kill); check_after_kill
        # then wants v2.
        if run.killed and run.code != 0:
            # SIGINT is Ctrl-C (130); SIGTERM unwinds the same way (143) once the command is running.
            allowed = {130} if signame == "SIGINT" else {143, -15}
            assert run.code in allowed, run
            assert sandbox.leftovers() == [], f"{signame} at {fraction:.0%} left {sandbox.leftovers()}"
            interrupted += 1
        check_after_kill(sandbox, run, tally, f"{signame} at {fraction:.0%}")

    assert tally.lost == [], "\n".join(tally.lost)
    assert interrupted > 0, f"no {signame} reached a running ingest"


def _interrupt_at(n: int, within: str = PACKAGE_DIR) -> Callable[[FrameType, str, Any], Any]:
    """A trace function that raises KeyboardInterrupt at the ``n``-th call or line event in mcpower
    code (in the files whose path starts with ``within``).

    Python delivers a signal's exception at such boundaries in Python code, so trying every ``n``
    puts a Ctrl-C at each place one can land, without timing. Raising stops the tracing. Line
    events of a ``with`` line are skipped: one fires again just before ``__exit__``, and raising
    there skips ``__exit__``, which no signal can do (it lands inside the call instead).
    """
    events = 0

    def trace(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal events
        if not frame.f_code.co_filename.startswith(PACKAGE_DIR):
            return None
        if not frame.f_code.co_filename.startswith(within):
            return trace
        line = linecache.getline(frame.f_code.co_filename, frame.f_lineno).lstrip()
        if event == "call" or (event == "line" and not line.startswith("with ")):
            events += 1
            if events == n:
                raise KeyboardInterrupt
        return trace

    return trace


def interrupt_everywhere(step: Callable[[int], None], check: Callable[[int], None], within: str = PACKAGE_DIR) -> int:
    """Run ``step(n)`` with a Ctrl-C at its n-th event, then ``check(n)``, for n = 1, 2, ... until a
    run ends without one; returns how many points were tried. The Ctrl-C must come out as it went in.
    """
    tracer = sys.gettrace()  # coverage's, if any: put back after each run
    n = 0
    while True:
        n += 1
        sys.settrace(_interrupt_at(n, within))
        try:
            step(n)
        except KeyboardInterrupt:
            check(n)
            continue
        except BaseException as e:
            raise AssertionError(f"Ctrl-C at event {n} came out as {type(e).__name__}: {e}") from e
        finally:
            sys.settrace(tracer)
        return n - 1


def test_ctrl_c_anywhere_in_write_metadata_stays_a_keyboard_interrupt(tmp_path: Path) -> None:
    # Two ways a Ctrl-C (or SIGTERM) used to become "cannot write (...)" and exit 1, caught by the
    # SIGINT test above now and then: landing in segment() while SQLite ran it as an SQL function
    # (Python's sqlite3 swaps the exception for "user-defined function raised exception"), or in
    # the postings loop, whose open SELECT made the cleanup's `DROP TABLE temp.chunks_vocab` fail
    # with "database table is locked", an error that replaced the KeyboardInterrupt.
    docs = [DocumentRow(d, f"doc{d}.md", f"Title {d} 设定", ".md", 1, 0.0, "h", "t", "") for d in (1, 2)]
    texts = [(d, o, f"widget {w} toolkit 安装 {d}") for d in (1, 2) for o, w in enumerate(("alpha", "beta"))]
    chunks = [ChunkRow(chunk_id(f"doc{d}.md", t, o), d, o, "Intro > Setup", 1, 2, t) for d, o, t in texts]

    points = interrupt_everywhere(
        lambda n: write_metadata(tmp_path / f"meta-{n}.sqlite", docs, chunks, analysed=True), check=lambda n: None
    )

    assert points > 50  # the trace did reach write_metadata's code


def test_ctrl_c_anywhere_in_write_manifest_leaves_no_temp_file(tmp_path: Path) -> None:
    # A Ctrl-C during the temp file's fsync used to leave .manifest.json.<pid>.tmp behind, which
    # the SIGINT test above reports as a leftover.
    old, new = Manifest.model_validate(valid_manifest()), Manifest.model_validate({**valid_manifest(), "name": "New"})
    folder = tmp_path / "dataset"
    folder.mkdir()
    write_manifest(old, folder)

    def check(n: int) -> None:
        assert [p.name for p in folder.iterdir()] == [MANIFEST_NAME], f"Ctrl-C at event {n}"
        assert read_manifest(folder / MANIFEST_NAME).name in (old.name, new.name)

    points = interrupt_everywhere(lambda n: write_manifest(new, folder), check)

    assert points > 5
    assert read_manifest(folder / MANIFEST_NAME) == new


# A Ctrl-C landing in the lock's own cleanup leaves the lock file to its finalizer, which closes it
# (releasing the lock) with a ResourceWarning: expected here, where every such point is tried.
@pytest.mark.filterwarnings("ignore::ResourceWarning", "ignore::pytest.PytestUnraisableExceptionWarning")
def test_ctrl_c_anywhere_in_a_publish_leaves_the_dataset_whole(corpus: Path, datasets_dir: Path) -> None:
    # After the staging folder was renamed into place, a Ctrl-C used to leave that version folder
    # behind (unused, until the next ingest pruned it): a third version folder beside two.
    folder = datasets_dir / "docs"
    ingest(corpus, datasets_dir, IngestOptions(dataset_id="docs"), embedder=FakeEmbedder())

    def check(n: int) -> None:
        current = Path(read_manifest(folder / MANIFEST_NAME).index).parts[0]
        versions = [p.name for p in folder.iterdir() if p.name.startswith(VERSION_PREFIX)]
        assert current in versions and len(versions) <= 2, f"Ctrl-C at event {n}: {versions}"
        assert not [p.name for p in folder.iterdir() if p.name.startswith((STAGING_PREFIX, ".manifest.json."))]

    again = IngestOptions(dataset_id="docs", skip_unchanged=False)  # publish even though nothing changed
    points = interrupt_everywhere(
        lambda n: ingest(corpus, datasets_dir, again, embedder=FakeEmbedder()), check, within=mcpower.layout.__file__
    )

    assert points > 20


# ---------------------------------------------------------------- one writer at a time


def test_second_ingest_fails_fast_naming_the_lock_holder(sandbox: Sandbox) -> None:
    with dataset_lock(sandbox.folder), pytest.raises(DatasetLockedError) as info:
        sandbox.ingest(sandbox.v2)

    assert f"pid {os.getpid()} since " in info.value.message
    assert "--wait" in info.value.message
    assert current_version(sandbox.datasets) == "v1"


def test_second_ingest_from_the_cli_fails_fast_or_waits(sandbox: Sandbox, tmp_path: Path) -> None:
    launcher = write_launcher(tmp_path)
    command = [sys.executable, str(launcher), *sandbox.argv(sandbox.v2)]
    with dataset_lock(sandbox.folder):
        failed = subprocess.run(command, capture_output=True, text=True, env=subprocess_env(), timeout=60)
        waiting = subprocess.Popen(
            [*command, "--wait"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=subprocess_env()
        )
        blocked = wait_until_blocked_on_lock(waiting)
    _, err = waiting.communicate(timeout=60)  # the lock is released: the waiting ingest runs now

    assert failed.returncode == 1
    assert failed.stderr.startswith(f"Error: dataset 'crash' is being written by another ingest (pid {os.getpid()} ")
    assert blocked, "the --wait ingest never queued on the lock"
    assert waiting.returncode == 0, err
    assert current_version(sandbox.datasets) == "v2"


def wait_until_blocked_on_lock(proc: subprocess.Popen[str], timeout: float = 30.0) -> bool:
    """True once ``proc`` waits in flock(): /proc/locks lists blocked waiters with '->'."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in Path("/proc/locks").read_text().splitlines():
            fields = line.split()
            if "->" in fields and str(proc.pid) in fields:
                return True
        try:
            proc.wait(timeout=0.02)  # a condition poll that also notices an early exit
            return False
        except subprocess.TimeoutExpired:
            pass
    return False


# ---------------------------------------------------------------- a full disk


def _enospc(*args: object, **kwargs: object) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _sqlite_full(*args: object, **kwargs: object) -> None:
    raise sqlite3.OperationalError("database or disk is full")


def _staging_mkdir_full(monkeypatch: pytest.MonkeyPatch) -> None:
    mkdir = Path.mkdir

    def full(self: Path, *args: Any, **kwargs: Any) -> None:
        if self.name.startswith(STAGING_PREFIX):
            _enospc()
        mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", full)


@pytest.mark.parametrize(
    ("target", "failure"),
    [
        ("mkdir", None),  # the staging folder itself
        ("write_metadata", _sqlite_full),
        ("write_vectors", _enospc),
        ("fsync_path", _enospc),
        ("write_manifest", _enospc),
    ],
)
def test_full_disk_keeps_the_previous_version(
    sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch, target: str, failure: object
) -> None:
    if failure is None:
        _staging_mkdir_full(monkeypatch)
    else:
        module = mcpower.layout if target in ("fsync_path", "write_manifest") else mcpower.store.local.build
        monkeypatch.setattr(module, target, failure)

    with pytest.raises(IngestError, match=r"^disk full while writing dataset 'crash'; the previous version"):
        sandbox.ingest(sandbox.v2)

    monkeypatch.undo()
    assert current_version(sandbox.datasets) == "v1"
    assert sandbox.leftovers() == []
    assert len([p for p in sandbox.folder.iterdir() if p.name.startswith(VERSION_PREFIX)]) == 1
    sandbox.ingest(sandbox.v2)  # with space again, the next ingest publishes
    assert current_version(sandbox.datasets) == "v2"


def test_a_dataset_folder_that_cannot_be_created_is_one_clear_error(tmp_path: Path) -> None:
    from mcpower.errors import IngestError
    from mcpower.layout import dataset_lock

    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("x")

    with pytest.raises(IngestError, match="cannot write"), dataset_lock(not_a_folder / "new"):
        pass
