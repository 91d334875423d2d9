"""Remembered file hashes (mcpower.checksums): reused only for bytes that cannot have changed, and
only from a cache folder that is ours alone."""

from __future__ import annotations

import hashlib
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from mcpower import checksums
from mcpower.checksums import HASHES_FILE, FileHashes


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the blocks FileHashes reads from files (a remembered hash reads none)."""
    count: list[int] = []
    real: Callable[[int, int, int], bytes] = os.pread

    def pread(fd: int, n: int, offset: int) -> bytes:
        count.append(fd)
        return real(fd, n, offset)

    monkeypatch.setattr(checksums.os, "pread", pread)
    return count


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_hash_is_remembered_for_the_same_file(tmp_path: Path, reads: list[int]) -> None:
    f = tmp_path / "index.faiss"
    f.write_bytes(b"vectors" * 1000)
    hashes = FileHashes(tmp_path / "cache")
    assert hashes.sha256_path(f) == sha(f)
    first = len(reads)
    assert first > 0
    assert FileHashes(tmp_path / "cache").sha256_path(f) == sha(f)  # another process, the same memory
    assert len(reads) == first


def test_bytes_rewritten_in_place_with_the_old_mtime_are_hashed_again(tmp_path: Path, reads: list[int]) -> None:
    f = tmp_path / "index.faiss"
    f.write_bytes(b"a" * 4096)
    before = os.stat(f)
    hashes = FileHashes(tmp_path / "cache")
    old = hashes.sha256_path(f)
    with open(f, "r+b") as out:  # same inode, same size ...
        out.write(b"b" * 4096)
    os.utime(f, ns=(before.st_atime_ns, before.st_mtime_ns))  # ... and the modification time set back
    assert os.stat(f).st_size == before.st_size and os.stat(f).st_mtime_ns == before.st_mtime_ns
    new = hashes.sha256_path(f)
    assert new == sha(f) != old  # the change time moved: another identity, hashed afresh


def test_a_file_replaced_by_another_is_hashed_again(tmp_path: Path) -> None:
    f = tmp_path / "meta.sqlite"
    f.write_bytes(b"one" * 100)
    hashes = FileHashes(tmp_path / "cache")
    hashes.sha256_path(f)
    other = tmp_path / "other"
    other.write_bytes(b"two" * 100)
    os.replace(other, f)
    assert hashes.sha256_path(f) == sha(f)


@pytest.mark.parametrize("problem", ["writable by others", "a symlink"])
def test_a_cache_folder_that_is_not_ours_alone_remembers_nothing(
    tmp_path: Path, reads: list[int], problem: str, caplog: pytest.LogCaptureFixture
) -> None:
    cache = tmp_path / "cache"
    if problem == "a symlink":
        real = tmp_path / "elsewhere"
        real.mkdir(mode=0o700)
        cache.symlink_to(real)
    else:
        cache.mkdir()
        cache.chmod(0o777)
    f = tmp_path / "index.faiss"
    f.write_bytes(b"x" * 5000)
    hashes = FileHashes(cache)
    assert "not remembering file hashes" in caplog.text
    assert hashes.sha256_path(f) == sha(f)
    first = len(reads)
    assert hashes.sha256_path(f) == sha(f)
    assert len(reads) == 2 * first  # hashed again: nothing was remembered
    assert not (cache / HASHES_FILE).exists()


def test_a_damaged_or_forged_memory_is_not_believed(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    f = tmp_path / "index.faiss"
    f.write_bytes(b"y" * 3000)
    FileHashes(cache).sha256_path(f)
    db = sqlite3.connect(cache / HASHES_FILE)
    with db:
        db.execute("UPDATE hashes SET sha256 = 'not a hash'")
    db.close()
    assert FileHashes(cache).sha256_path(f) == sha(f)  # a malformed entry is ignored
    (cache / HASHES_FILE).write_bytes(b"\x00garbage" * 100)
    assert FileHashes(cache).sha256_path(f) == sha(f)  # an unreadable memory is no memory


def test_the_cache_folder_is_created_private(tmp_path: Path) -> None:
    cache = tmp_path / "new" / "cache"
    f = tmp_path / "index.faiss"
    f.write_bytes(b"z")
    FileHashes(cache).sha256_path(f)
    assert cache.stat().st_mode & 0o777 == 0o700
    assert (cache / HASHES_FILE).stat().st_mode & 0o077 == 0
