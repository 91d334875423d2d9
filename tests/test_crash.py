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
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from conftest import FakeEmbedder
from republish_fixtures import MARKERS, QUERY, IngestForkServer, IngestRun, version_of, write_versioned_corpus
from server_fixtures import subprocess_env, write_launcher
from typer.testing import CliRunner

import mcpower.layout
import mcpower.store.local.build
from mcpower.cli import app
from mcpower.errors import DatasetLockedError, IngestError
from mcpower.ingestion import IngestOptions, ingest
from mcpower.layout import STAGING_PREFIX, VERSION_PREFIX, dataset_lock
from mcpower.manifest import MANIFEST_NAME
from mcpower.registry import Registry
from mcpower.search import search

DATASET = "crash"
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
        return ["ingest", str(source), "--id", DATASET, "--datasets-dir", str(self.datasets), "--quiet"]

    def ingest(self, source: Path) -> None:
        ingest(source, self.datasets, IngestOptions(dataset_id=DATASET), embedder=FakeEmbedder())

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
        if not run.killed and run.code == 0 and version != "v2":
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
    for fraction in (0.2, 0.5, 0.8):
        run = forks.run(sandbox.argv(sandbox.v2), delay=duration * fraction, signal=signame)
        if run.killed:
            # SIGINT is Ctrl-C (130); SIGTERM unwinds the same way (143) once the command is running.
            allowed = {130} if signame == "SIGINT" else {143, -15}
            assert run.code in allowed, run
            assert sandbox.leftovers() == [], f"{signame} at {fraction:.0%} left {sandbox.leftovers()}"
        check_after_kill(sandbox, run, tally, f"{signame} at {fraction:.0%}")

    assert tally.lost == [], "\n".join(tally.lost)


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
