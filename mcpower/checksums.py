"""sha256 of files, hashed once per file identity and remembered in mcpower's private cache folder.

Dataset files are verified against their manifest's checksums, and model weights are fingerprinted
by content, every time they are loaded. Hashing a 90 MB model or a large index on every cold
search costs more than the search, so a file's hash is remembered under its identity — device,
inode, size, modification time and change time, read with ``fstat`` from the very descriptor that
is hashed. Any write, truncation, rename over it or metadata change gives the file another
identity (the change time cannot be set back by a user), so a remembered hash is only ever
reused for bytes that have not changed since they were hashed.

The memory is a SQLite file in the cache folder, which is created private (0700) and must belong
to this user: a folder that another user can write is not trusted, and then every file is hashed.
"""

from __future__ import annotations

import hashlib
import logging
import os
import sqlite3
import stat
import threading
from contextlib import closing
from pathlib import Path

logger = logging.getLogger(__name__)

HASHES_FILE = "file-hashes.sqlite"
_BLOCK = 1 << 20


def private_folder(folder: Path) -> Path:
    """``folder``, created 0700 if missing; raises OSError (EPERM) if it is not a real folder owned by
    this user that no one else can write."""
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    st = os.stat(folder, follow_symlinks=False)
    if not stat.S_ISDIR(st.st_mode):
        raise PermissionError(1, "not a folder (a symlink?)", str(folder))
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        raise PermissionError(1, "owned by another user", str(folder))
    if st.st_mode & 0o022:
        raise PermissionError(1, "writable by other users", str(folder))
    return folder


def identity(st: os.stat_result) -> str:
    """What a file's bytes are remembered under; any change to the file changes it."""
    return f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"


class FileHashes:
    """sha256 of open files, remembered per identity in ``<folder>/file-hashes.sqlite``.

    ``folder`` None, or one that cannot be used safely, means nothing is remembered: every call
    hashes. Thread-safe; several processes may share the folder.
    """

    def __init__(self, folder: Path | None) -> None:
        self._path: Path | None = None
        self._lock = threading.Lock()
        if folder is not None:
            try:
                self._path = private_folder(folder) / HASHES_FILE
            except OSError as e:
                logger.warning("not remembering file hashes: cache folder unusable (%s)", e.strerror or e)

    def sha256_fd(self, fd: int) -> str:
        """sha256 of the whole file open at ``fd`` (read with pread: the file offset is not moved)."""
        key = identity(os.fstat(fd))
        known = self._recall(key)
        if known is not None:
            return known
        h = hashlib.sha256()
        offset = 0
        while block := os.pread(fd, _BLOCK, offset):
            h.update(block)
            offset += len(block)
        digest = h.hexdigest()
        if identity(os.fstat(fd)) == key:  # unchanged while we read: worth remembering
            self._remember(key, digest)
        return digest

    def sha256_path(self, path: Path) -> str:
        """sha256 of the file at ``path`` (symlinks followed: model folders use them)."""
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OSError(f"{path.name} is not a regular file")
            return self.sha256_fd(fd)
        finally:
            os.close(fd)

    def _connect(self) -> sqlite3.Connection | None:
        if self._path is None:
            return None
        fd = os.open(self._path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
        os.close(fd)  # created private, and not through a symlink; SQLite reopens it by name
        db = sqlite3.connect(self._path, timeout=5)
        db.execute("CREATE TABLE IF NOT EXISTS hashes (identity TEXT PRIMARY KEY, sha256 TEXT NOT NULL)")
        return db

    def _recall(self, key: str) -> str | None:
        try:
            with self._lock:
                db = self._connect()
                if db is None:
                    return None
                with closing(db):
                    row = db.execute("SELECT sha256 FROM hashes WHERE identity = ?", (key,)).fetchone()
        except (OSError, sqlite3.Error) as e:
            logger.debug("file hash cache unreadable: %s", e)
            return None
        return row[0] if row and isinstance(row[0], str) and len(row[0]) == 64 else None

    def _remember(self, key: str, digest: str) -> None:
        try:
            with self._lock:
                db = self._connect()
                if db is None:
                    return
                with closing(db), db:
                    db.execute("INSERT OR REPLACE INTO hashes VALUES (?, ?)", (key, digest))
        except (OSError, sqlite3.Error) as e:
            logger.debug("file hash cache not written: %s", e)
