"""The local dataset folder: versions, staging, the writer's lock, fsync, publish and prune.

    <root>/<id>/
        manifest.json          the pointer: written last, replaced atomically on each publish
        v-<stamp>/index.faiss  vectors (immutable once published)
        v-<stamp>/meta.sqlite  documents, chunks, full-text index (immutable once published)
        .staging-<pid>-<hex>/  a version being built; renamed to v-<stamp> when complete
        .lock                  held by the one writer (ingest)
        .watch                 held by the one watcher (`--watch`), and what it reports

A new version is built in a hidden staging folder, fsynced, renamed to ``v-<stamp>`` and only then
made current by atomically replacing ``manifest.json``. Until that rename the previous version is
untouched and is what every reader sees; a crash or Ctrl-C at any point leaves it loadable. The
version before the previous one is pruned, so a server still reading the previous one keeps working.
"""

from __future__ import annotations

import errno
import fcntl
import io
import logging
import os
import secrets
import shutil
import stat
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from pydantic import ValidationError

from mcpower.errors import DatasetLockedError, IngestError, InvalidManifestError, McpowerError
from mcpower.manifest import MANIFEST_NAME, MAX_MANIFEST_BYTES, Manifest, now_utc, read_manifest
from mcpower.results import WatchState

logger = logging.getLogger(__name__)

LOCK_NAME = ".lock"
WATCH_NAME = ".watch"
MAX_WATCH_BYTES = 2048  # a WatchState as JSON is a few hundred bytes
STAGING_PREFIX = ".staging-"
VERSION_PREFIX = "v-"

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
# (ino, mtime_ns, size) of a file: a replaced or rewritten manifest gets another stamp.
Stamp = tuple[int, int, int]


def fsync_path(path: Path) -> None:
    """Make a file's bytes, or a rename or new file in a folder, durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_manifest(manifest: Manifest, folder: Path) -> Path:
    """Write ``folder/manifest.json`` atomically and durably (temp file, fsync, rename, fsync dir)."""
    text = manifest.to_json()
    if len(text.encode()) > MAX_MANIFEST_BYTES:  # pragma: no cover - fields are length-capped
        raise InvalidManifestError(f"{manifest.id}: manifest would exceed {MAX_MANIFEST_BYTES} bytes")
    target = folder / MANIFEST_NAME
    # A new file under an unpredictable name, no symlink followed: nothing prepared in the folder
    # can redirect the write.
    tmp = folder / f".{MANIFEST_NAME}.{secrets.token_hex(8)}.tmp"
    fd = -1
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o644)
        os.write(fd, text.encode("utf-8"))
        os.fsync(fd)
        written, fd = fd, -1  # forgotten before it is closed: a Ctrl-C in between leaks it, never closes twice
        os.close(written)
        os.replace(tmp, target)
    except BaseException:
        # A Ctrl-C (often during the fsync), a SIGTERM or a full disk before the rename: remove
        # the temp file now; otherwise it stays until the next ingest of this dataset.
        if fd >= 0:
            os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    fsync_path(folder)
    return target


@contextmanager
def dataset_lock(folder: Path, wait: bool = False) -> Iterator[None]:
    """Hold the dataset's write lock; readers never take it.

    The lock file is never a symlink, and is the one at that name when the lock is granted (a
    writer that gave up removes it: then the lock is taken again).

    Raises:
        DatasetLockedError: another process holds it and ``wait`` is False.
        IngestError: the folder or the lock file cannot be created (read-only or full disk).
    """
    # The lock file, once open, as a file object: closed (releasing the flock) however this ends,
    # even by a Ctrl-C that lands in the cleanup itself, when the object is dropped.
    held: list[io.FileIO] = []
    try:
        while not held:
            _take(folder, wait, held)
        fd = held[0].fileno()
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} since {now_utc().isoformat()}".encode(), 0)
        yield
    finally:
        for lock in held:
            lock.close()


def _take(folder: Path, wait: bool, held: list[io.FileIO]) -> None:
    """Open and flock ``folder/.lock`` into ``held``; leave ``held`` empty if the file was replaced
    while we waited."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        flags = os.O_RDWR | os.O_CREAT | _NOFOLLOW | os.O_NONBLOCK
        held.append(io.FileIO(os.open(folder / LOCK_NAME, flags, 0o644), "r+"))
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise IngestError(
                f"{folder.name}/{LOCK_NAME} is a symlink; mcpower will not write through it (remove it)"
            ) from e
        raise write_error(folder.name, e) from e
    fd = held[0].fileno()
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        raise IngestError(f"{folder.name}/{LOCK_NAME} is not a regular file; remove it")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "unknown process"
        raise DatasetLockedError(
            f"dataset {folder.name!r} is being written by another ingest ({holder}); "
            "wait for it to finish or pass --wait"
        ) from None
    try:
        here = os.stat(folder / LOCK_NAME, follow_symlinks=False)
    except FileNotFoundError:
        here = None
    held_st = os.fstat(fd)
    if here is None or (here.st_dev, here.st_ino) != (held_st.st_dev, held_st.st_ino):
        held.pop().close()  # removed or replaced while we waited: take the lock again


def remove_if_unpublished(folder: Path) -> None:
    """Remove a dataset folder that holds nothing but its lock (a first ingest that failed); the
    caller holds the lock."""
    if (folder / MANIFEST_NAME).exists():
        return
    try:
        if {c.name for c in folder.iterdir()} <= {LOCK_NAME}:
            (folder / LOCK_NAME).unlink(missing_ok=True)
            folder.rmdir()
    except OSError as e:
        logger.debug("could not remove the empty dataset folder %s: %s", folder.name, e)


def publish(folder: Path, write: Callable[[Path, str], Manifest]) -> Manifest:
    """Build a new version with ``write(staging, version)`` and make it current; the caller holds the lock.

    ``write`` fills the staging folder and returns the manifest that names the files by
    ``<version>/<file>``. Returns that manifest once it is durable and current.

    Raises:
        IngestError: the disk is full or not writable; the previous version is untouched.
    """
    clean_leftovers(folder)
    previous = _versions_in_use(folder)
    staging = folder / f"{STAGING_PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
    version = f"{VERSION_PREFIX}{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{secrets.token_hex(3)}"
    try:
        staging.mkdir()  # inside: a full disk can refuse the folder itself
        manifest = write(staging, version)
        fsync_path(staging)
        os.rename(staging, folder / version)
        fsync_path(folder)
        write_manifest(manifest, folder)  # the commit point: readers switch to the new version here
        prune_versions(folder, keep={version, *previous})
    except BaseException as e:
        # One handler for every step, so no exception (a Ctrl-C included) can fall between two:
        # before the commit the build is undone, wherever it is; after it, the old versions go.
        shutil.rmtree(staging, ignore_errors=True)
        if version in _versions_in_use(folder):
            prune_versions(folder, keep={version, *previous})
        else:
            shutil.rmtree(folder / version, ignore_errors=True)
        if isinstance(e, OSError):
            raise write_error(folder.name, e) from e
        raise
    return manifest


def write_error(dataset_id: str, e: BaseException) -> IngestError:
    """The IngestError for a failed write of a dataset (disk full, read-only, I/O error)."""
    full = (isinstance(e, OSError) and e.errno == errno.ENOSPC) or "full" in str(e)
    what = "disk full" if full else f"cannot write ({getattr(e, 'strerror', None) or e})"
    return IngestError(f"{what} while writing dataset {dataset_id!r}; the previous version is untouched")


def _versions_in_use(folder: Path) -> set[str]:
    """The version folders the current manifest names (none if it is missing or unreadable)."""
    try:
        manifest = read_manifest(folder / MANIFEST_NAME)
    except McpowerError:
        return set()
    files = [manifest.index, manifest.metadata, *([manifest.vectors] if manifest.vectors else [])]
    return {Path(f).parts[0] for f in files}


def prune_versions(folder: Path, keep: set[str]) -> None:
    """Drop the version folders not in ``keep``."""
    for child in folder.iterdir():
        if child.is_dir() and child.name.startswith(VERSION_PREFIX) and child.name not in keep:
            shutil.rmtree(child, ignore_errors=True)


def clean_leftovers(folder: Path) -> None:
    """Staging folders, temporary manifests and never-published versions of writers that died (the
    caller holds the lock).

    A version folder newer than the current one that the manifest does not name was renamed into
    place by a writer killed before its commit point: nothing reads it, and an ingest that finds
    nothing to publish must not leave it lying there.
    """
    in_use = _versions_in_use(folder)
    current = max(in_use, default=None)
    for child in folder.iterdir():
        if child.name.startswith(STAGING_PREFIX):
            logger.info("removing leftover staging folder %s", child.name)
            shutil.rmtree(child, ignore_errors=True)
        elif child.name.startswith(f".{MANIFEST_NAME}.") and child.name.endswith(".tmp"):
            child.unlink(missing_ok=True)
        elif (
            current is not None
            and child.name.startswith(VERSION_PREFIX)
            and child.name not in in_use
            and child.name > current  # named by time: later than the current one, never published
            and child.is_dir()
        ):
            logger.info("removing unpublished version %s", child.name)
            shutil.rmtree(child, ignore_errors=True)


def leftover_staging(folder: Path) -> list[str]:
    """Names of staging folders an interrupted writer left (the next publish removes them)."""
    try:
        return sorted(c.name for c in folder.iterdir() if c.name.startswith(STAGING_PREFIX))
    except OSError:
        return []


def find_manifests(root: Path) -> list[Path]:
    """manifest.json files under ``root``, skipping hidden folders (staging builds, locks)."""
    out: list[Path] = []
    if not root.is_dir():
        return out
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        if MANIFEST_NAME in filenames:
            out.append(Path(dirpath) / MANIFEST_NAME)
            dirnames[:] = []  # a dataset folder holds versions, not other datasets
    return out


def stamp_of(path: Path) -> Stamp:
    """The file's stamp, (0, 0, 0) if it cannot be read."""
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return (0, 0, 0)
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def resolve_within(folder: Path, rel: str) -> Path:
    """``folder/rel`` with symlinks resolved, which must stay inside ``folder`` (any kind of file).

    Raises:
        InvalidManifestError: the path escapes the folder, or cannot be resolved (a symlink loop).
    """
    try:
        root = folder.resolve()
        target = (root / rel).resolve()
    except (OSError, RuntimeError) as e:  # RuntimeError: a symlink loop (Python < 3.13)
        raise InvalidManifestError(f"{folder.name}: {rel!r} cannot be resolved (a symlink loop?)") from e
    if not target.is_relative_to(root):
        raise InvalidManifestError(f"{folder.name}: {rel!r} points outside the dataset folder")
    return target


def resolve_inside(folder: Path, rel: str) -> Path:
    """``folder/rel`` as a regular file that, symlinks resolved, stays inside ``folder``.

    Raises:
        InvalidManifestError: the path escapes the folder or is not a regular file.
    """
    target = resolve_within(folder, rel)
    try:
        mode = os.stat(target).st_mode
    except OSError as e:
        raise InvalidManifestError(f"{folder.name}: {rel!r} is missing ({e.strerror})") from e
    if not stat.S_ISREG(mode):
        raise InvalidManifestError(f"{folder.name}: {rel!r} is not a regular file")
    return target


class WatchClaim:
    """One process's claim to watch a dataset: an exclusive flock on ``<folder>/.watch``, held while
    it watches (the kernel drops it when the process dies), the file holding its WatchState as JSON.

    Several servers started with ``--watch`` (every stdio client starts its own) re-index a dataset
    once: the one holding the claim does; the others try again later.
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd

    @staticmethod
    def take(folder: Path) -> WatchClaim | None:
        """The claim, or None when another process (or claim) holds it.

        Raises:
            OSError: the file cannot be created (read-only datasets folder ...).
        """
        fd = os.open(folder / WATCH_NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OSError(errno.EINVAL, "not a regular file")
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        return WatchClaim(fd)

    def write(self, state: WatchState) -> None:
        """Publish ``state`` for readers (best effort: a full disk only loses the report)."""
        data = state.model_dump_json().encode()[:MAX_WATCH_BYTES]
        try:
            os.pwrite(self._fd, data, 0)
            os.ftruncate(self._fd, len(data))
        except OSError as e:
            logger.warning("cannot write the watch state: %s", e.strerror)

    def release(self) -> None:
        """Give the claim up (closing the file releases the flock)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def read_watch(folder: Path) -> WatchState | None:
    """What the live watcher of the dataset in ``folder`` reports; None if no process watches it."""
    try:
        fd = os.open(folder / WATCH_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            pass  # held: a watcher is alive
        else:
            return None  # a file left by a watcher that has exited
        data = os.pread(fd, MAX_WATCH_BYTES + 1, 0)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        return WatchState.model_validate_json(data)
    except ValidationError:  # being rewritten this instant, or not ours: still a live watcher
        return WatchState(state="watching", pid=0)
