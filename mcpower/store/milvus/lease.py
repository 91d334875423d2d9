"""One writer per dataset across machines: a lease record with an expiry in the catalogue collection.

A file lock does not span machines and Milvus has no compare-and-set, so: read the lease; if
another writer holds an unexpired one, refuse (naming it) or wait; else write ours, let a racing
writer's write land (``settle`` seconds), read it back, and hold it only if it is still ours (the
last writer wins, so two racers agree on one winner). A holder renews it every third of its life
and checks it is still its own before publishing; a writer that dies stops renewing, and its lease
expires. A lost race can only waste work: versions are separate collections and the pointer
record names one of them.
"""

from __future__ import annotations

import math
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from mcpower.errors import DatasetLockedError, IngestError

WAIT_POLL = 1.0  # seconds between looks while waiting for another writer (--wait)
# The last expiry a lease record may name (the end of year 9999, in ms): a later one, or one that is
# not a finite number, is no writer's lease, and its time could not even be shown.
MAX_EXPIRY_MS = 253_402_300_799_000


class Lease:
    """The write lease of one dataset, held between :meth:`acquire` and :meth:`release`."""

    def __init__(
        self,
        read: Callable[[str], dict[str, Any] | None],
        write: Callable[[str, dict[str, Any]], None],
        delete: Callable[[str], None],
        dataset_id: str,
        ttl: float,
        settle: float,
    ) -> None:
        self._read, self._write, self._delete = read, write, delete
        self.dataset_id = dataset_id
        self.key = f"lease:{dataset_id}"
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._ttl, self._settle = ttl, settle
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    def acquire(self, wait: bool) -> None:
        """Raises DatasetLockedError (naming the holder) if another writer holds the lease and not ``wait``."""
        while True:
            held = self._holder()
            if held is None:
                self._write(self.key, self._record())
                if self._settle:
                    time.sleep(self._settle)
                held = self._holder()
                if held is None:
                    break
            if not wait:
                until = datetime.fromtimestamp(held["expires_ms"] / 1000, timezone.utc).isoformat(timespec="seconds")
                raise DatasetLockedError(
                    f"dataset {self.dataset_id!r} is being ingested by {held['owner']} (its lease runs until "
                    f"{until} unless renewed); wait for it to finish, or pass --wait"
                )
            time.sleep(WAIT_POLL)
        self._renewer = threading.Thread(target=self._renew, name="mcpower-lease", daemon=True)
        self._renewer.start()

    def check(self) -> None:
        """Raises IngestError if the lease is no longer ours (it expired and another writer took it)."""
        held = self._holder()
        if held is not None:
            raise IngestError(
                f"dataset {self.dataset_id!r}: the write lease was lost to {held['owner']} (this ingest stalled "
                "longer than the lease); nothing was published, run the ingest again"
            )

    def release(self) -> None:
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join(timeout=5)
        current = self._read(self.key)
        if current is not None and current.get("owner") == self.owner:
            self._delete(self.key)

    def _holder(self) -> dict[str, Any] | None:
        """Another writer's unexpired lease record, or None (free, expired, or ours)."""
        current = self._read(self.key)
        if not current or current.get("owner") == self.owner:
            return None
        expires, owner = current.get("expires_ms"), current.get("owner")
        if isinstance(expires, bool) or not isinstance(expires, (int, float)) or not math.isfinite(expires):
            return None  # not a lease any writer wrote: ours replaces it
        if not time.time() * 1000 < expires <= MAX_EXPIRY_MS:
            return None
        return {"owner": owner[:200] if isinstance(owner, str) else "?", "expires_ms": expires}

    def _record(self) -> dict[str, Any]:
        return {"owner": self.owner, "expires_ms": int((time.time() + self._ttl) * 1000)}

    def _renew(self) -> None:
        while not self._stop.wait(self._ttl / 3):
            try:
                if self._holder() is None:
                    self._write(self.key, self._record())
            except Exception:  # the engine hiccuped: the next renewal (or check) tells
                continue
