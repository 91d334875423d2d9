"""Discovery against a folder someone else can change (issue 18): what is read is what was checked,
and no file discovery reads can hang it. docs/robustness.md ("Trust policies") has the policy."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import FakeEmbedder, write_files

import mcpower.ingestion
from mcpower import discover as discover_module
from mcpower.discover import SourceFile, discover
from mcpower.ingestion import IngestOptions, IngestReport, ingest
from mcpower.registry import Registry

SECRET = "CREDENTIALSXYZZY password=hunter2"

Found = tuple[list[SourceFile], list[tuple[str, str]]]


@pytest.fixture
def folders(tmp_path: Path) -> tuple[Path, Path]:
    """A document folder and, beside it, a folder with a secret nobody asked to ingest."""
    outside = write_files(tmp_path / "outside", {"creds.txt": SECRET + "\n", "sub/notes.md": SECRET + "\n"})
    docs = write_files(
        tmp_path / "docs",
        {"notes.md": "# Notes\n\nplain notes\n", "sub/notes.md": "# Sub\n\nsub notes\n", "a.md": "# A\n\nalpha\n"},
    )
    return docs, outside


def ingest_swapping(
    monkeypatch: pytest.MonkeyPatch, docs: Path, datasets: Path, swap: Callable[[], None], **options: object
) -> IngestReport:
    """Ingest ``docs``, calling ``swap`` right after discovery (the model loads there: about a second)."""
    real = discover_module.discover

    def then_swap(*args: object, **kwargs: object) -> Found:
        found = real(*args, **kwargs)  # type: ignore[arg-type]
        swap()
        return found

    monkeypatch.setattr(mcpower.ingestion, "discover", then_swap)
    return ingest(docs, datasets, IngestOptions(dataset_id="docs", **options), embedder=FakeEmbedder())  # type: ignore[arg-type]


def stored_text(datasets: Path) -> str:
    registry = Registry(datasets, allowed_models=[FakeEmbedder.model_name])
    try:
        return "\n".join(d.content + "".join(c.text for c in cs) for d, cs in registry.store("docs").iter_documents())
    finally:
        registry.close()


def test_a_file_swapped_for_a_symlink_after_discovery_is_not_read(
    folders: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs, outside = folders

    def swap() -> None:
        (docs / "notes.md").unlink()
        (docs / "notes.md").symlink_to(outside / "creds.txt")

    report = ingest_swapping(monkeypatch, docs, tmp_path / "datasets", swap)

    assert "hunter2" not in stored_text(tmp_path / "datasets")
    assert dict(report.skipped)["notes.md"] == "cannot read: replaced by a symlink since it was found"
    assert report.documents == 2


def test_a_folder_swapped_for_a_symlink_after_discovery_is_not_read(
    folders: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs, outside = folders

    def swap() -> None:
        (docs / "sub").rename(tmp_path / "old-sub")
        (docs / "sub").symlink_to(outside / "sub", target_is_directory=True)

    report = ingest_swapping(monkeypatch, docs, tmp_path / "datasets", swap)

    assert "hunter2" not in stored_text(tmp_path / "datasets")
    assert dict(report.skipped)["sub/notes.md"] == (
        "cannot read: a folder on its path was replaced by a symlink since it was found"
    )


def test_a_folder_swapped_for_another_folder_after_discovery_is_not_read(
    folders: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No link at all: a real folder renamed into place, holding a hard link to the secret."""
    docs, outside = folders

    def swap() -> None:
        (docs / "sub").rename(tmp_path / "old-sub")
        (docs / "sub").mkdir()
        os.link(outside / "creds.txt", docs / "sub" / "notes.md")

    report = ingest_swapping(monkeypatch, docs, tmp_path / "datasets", swap)

    assert "hunter2" not in stored_text(tmp_path / "datasets")
    assert dict(report.skipped)["sub/notes.md"] == "cannot read: replaced since it was found (not the file checked)"


@pytest.mark.parametrize("follow", [False, True])
def test_an_accepted_symlink_is_read_only_while_it_points_at_what_was_checked(
    folders: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, follow: bool
) -> None:
    """A link discovery accepted (inside the folder; outside with --follow-symlinks) is read through
    the link, and what it leads to must be the target that was judged."""
    docs, outside = folders
    write_files(outside, {"public.md": "# Public\n\npublic words\n"})
    # A link to a file discovery would not list itself (a link to a listed one is a duplicate of it).
    write_files(docs, {"inner.dat": "# Inner\n\ninner words\n"})
    (docs / "inner.md").symlink_to(docs / "inner.dat")
    if follow:
        (docs / "outer.md").symlink_to(outside / "public.md")

    kept = ingest_swapping(monkeypatch, docs, tmp_path / "kept", lambda: None, follow_symlinks=follow)
    assert kept.skipped == [] and kept.documents == 4 + follow

    def swap() -> None:
        for name in ["inner.md", "outer.md"] if follow else ["inner.md"]:
            (docs / name).unlink()
            (docs / name).symlink_to(outside / "creds.txt")

    report = ingest_swapping(monkeypatch, docs, tmp_path / "datasets", swap, follow_symlinks=follow)

    assert "hunter2" not in stored_text(tmp_path / "datasets")
    reasons = dict(report.skipped)
    assert reasons["inner.md"] == "cannot read: replaced since it was found (not the file checked)"
    assert not follow or reasons["outer.md"] == reasons["inner.md"]


# ---------------------------------------------------------------- the small files discovery reads


def discover_or_unblock(root: Path, fifos: list[Path]) -> Found:
    """``discover(root)``; if it blocks on one of the FIFOs, unblock them and fail (not hang)."""
    result: list[Found] = []
    worker = threading.Thread(target=lambda: result.append(discover(root)))
    worker.start()
    worker.join(timeout=60)
    if worker.is_alive():  # the bug: blocked opening a FIFO; give each a writer so the test fails instead
        while worker.is_alive():
            for fifo in fifos:
                with contextlib.suppress(OSError):  # ENXIO: nobody is reading it (yet)
                    os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            worker.join(timeout=1)
        pytest.fail("discovery blocked on a FIFO .gitignore")
    return result[0]


def test_a_fifo_named_gitignore_is_reported_not_waited_on(tmp_path: Path) -> None:
    root = write_files(tmp_path / "docs", {"a.md": "# A\n", "sub/b.md": "# B\n", "sub/skip.md": "# S\n"})
    os.mkfifo(root / ".gitignore")  # nobody will ever write to it
    os.mkfifo(root / "sub" / ".gitignore")

    files, skipped = discover_or_unblock(root, [root / ".gitignore", root / "sub" / ".gitignore"])

    assert [f.rel for f in files] == ["a.md", "sub/b.md", "sub/skip.md"]
    reason = "not a regular file: not read, its rules are not applied"
    assert dict(skipped) == {".gitignore": reason, "sub/.gitignore": reason}


def test_a_symlinked_gitignore_is_reported_not_followed(tmp_path: Path) -> None:
    (tmp_path / "rules").write_text("*.md\n")
    root = write_files(tmp_path / "docs", {"a.md": "# A\n"})
    (root / ".gitignore").symlink_to(tmp_path / "rules")

    files, skipped = discover(root)

    assert [f.rel for f in files] == ["a.md"]
    assert skipped == [(".gitignore", "a symlink: not followed, its rules are not applied")]
