"""Discovery against a folder someone else can change (issue 18): what is read is what was checked,
and no file discovery reads can hang it. docs/robustness.md ("Trust policies") has the policy."""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path

import pytest
from conftest import write_files

from mcpower.discover import SourceFile, discover

Found = tuple[list[SourceFile], list[tuple[str, str]]]


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
