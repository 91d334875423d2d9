"""Freshness: whether the file behind a result has changed since it was indexed.

Checked cheaply — one ``stat`` of the source file, compared with the size and modification time
recorded at ingest — and at most once per document every :data:`FRESHNESS_TTL` seconds; in
between, the last answer is reused. A dataset that recorded no source folder (ingested before
mcpower recorded it) is never reported stale: there is nothing to compare with.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import PurePosixPath

from mcpower.manifest import SourceInfo

# A client paging through results, or a busy server, stats each document at most this often.
FRESHNESS_TTL = 3.0
# Answers remembered; beyond this the memory is emptied (a stat is cheap, memory must stay bounded).
MAX_REMEMBERED = 20_000


class Freshness:
    """Remembers, per document version, whether its source file still matches (thread-safe)."""

    def __init__(self, ttl: float = FRESHNESS_TTL, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl = ttl
        self.clock = clock
        self._seen: dict[tuple[str, str, int, float], tuple[float, str]] = {}
        self._lock = threading.Lock()

    def stale(self, source: SourceInfo | None, path: str, size: int, mtime: float) -> bool:
        """Whether ``path`` (relative to the dataset's source folder) has another size or modification
        time than ``size`` and ``mtime``, or is gone."""
        return bool(self.why(source, path, size, mtime))

    def why(self, source: SourceInfo | None, path: str, size: int, mtime: float) -> str:
        """Why the result is stale: "" (it is not), "changed" (another size or modification time),
        "deleted" (the file is gone, its folder is there) or "folder gone" (the whole source folder
        was moved or deleted: re-ingest it from its new place)."""
        if source is None or size < 0 or source.origin is not None:
            return ""  # a fetched source is as fresh as its last fetch (its origin's fetched_at)
        key = (source.path, path, size, mtime)
        now = self.clock()
        with self._lock:
            seen = self._seen.get(key)
        if seen is not None and now - seen[0] < self.ttl:
            return seen[1]
        answer = _changed(source.path, path, size, mtime)
        with self._lock:
            if len(self._seen) >= MAX_REMEMBERED:
                self._seen.clear()
            self._seen[key] = (now, answer)
        return answer


def _changed(root: str, rel: str, size: int, mtime: float) -> str:
    parts = PurePosixPath(rel).parts
    if not parts or PurePosixPath(rel).is_absolute() or ".." in parts or "\x00" in rel:
        return ""  # not a path ingest writes: the database is damaged or forged; never stat outside
    try:
        st = os.stat(os.path.join(root, rel))
    except (OSError, ValueError):  # vanished, or no longer readable
        return "deleted" if os.path.isdir(root) else "folder gone"
    return "changed" if st.st_size != size or st.st_mtime != mtime else ""
