"""Refreshing fetched datasets: a site re-crawled, a repository fetched, every ``interval`` seconds
(``serve --watch --refresh SECONDS``), with the rules of `mcpower ingest URL`: conditional
requests, only changed pages re-read, nothing embedded for unchanged ones, gone pages removed.

A dataset is refreshed by one process at a time (the same claim as watching a folder,
layout.WatchClaim, so `mcpower datasets` shows its state), when its last fetch (the manifest's
``origin.fetchedAt``) is ``interval`` old: a restarted server does not fetch again what was just
fetched. A manifest is untrusted: it is refreshed only if it is this user's alone to write
(source.foreign) and records the cache folder its own id and address lead to. ``--header``
values are never stored, so a site behind a login is refreshed without them (and then fails, and
says so): re-run `mcpower ingest URL --header ...` for those.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcpower.errors import DatasetLockedError, McpowerError
from mcpower.layout import WatchClaim
from mcpower.manifest import DatasetInfo, now_utc
from mcpower.registry import Registry
from mcpower.results import WatchState
from mcpower.sources.mirror import source_folder
from mcpower.sources.remote import FetchOptions, ingest_source
from mcpower.sources.urls import Scope, URLError
from mcpower.watch.limits import WatchLimits
from mcpower.watch.source import Embedders, foreign, ingest_options, ingest_target

logger = logging.getLogger(__name__)

DEFAULT_REFRESH = 3600.0  # hourly: docs sites change by the day, and a refresh of an unchanged one is cheap
MIN_REFRESH = 60.0
RECHECK = 30.0  # how often new fetched datasets and freed claims are looked for


@dataclass
class _Refreshed:
    id: str
    claim: WatchClaim | None
    due: float
    since: str = field(default_factory=lambda: now_utc().isoformat())
    last: dict[str, Any] = field(default_factory=dict)


def cache_key(info: DatasetInfo) -> str | None:
    """The address a fetched dataset's cache folder is named after (remote.py), or None."""
    origin = info.source.origin if info.source is not None else None
    if origin is None:
        return None
    if origin.kind == "git":
        return origin.url
    try:
        return Scope.of(origin.url).root
    except URLError:
        return None


class Refresher:
    """Re-fetches the registry's fetched datasets every ``interval`` seconds (module docstring)."""

    def __init__(
        self,
        registry: Registry,
        cache_dir: Path,
        *,
        interval: float = DEFAULT_REFRESH,
        limits: WatchLimits | None = None,
        fetch: FetchOptions | None = None,
        embedder_factory: Callable[[DatasetInfo], Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
        on_refresh: Callable[[str, str], None] | None = None,
    ) -> None:
        self.registry = registry
        self.cache_dir = cache_dir
        self.interval = max(interval, MIN_REFRESH)
        self.limits = limits or WatchLimits()
        self.fetch = fetch or FetchOptions()
        self.clock = clock
        self.on_refresh = on_refresh  # (dataset, what happened) for logs and tests
        self._factory = embedder_factory or Embedders(registry)
        self.refreshed: dict[str, _Refreshed] = {}
        self._refused: dict[str, DatasetInfo] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="mcpower-refresh", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        for r in self.refreshed.values():
            if r.claim is not None:
                r.claim.release()
        self.refreshed.clear()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.step(self.clock())
            except Exception:  # a bug must not end refreshing silently
                logger.exception("refresh step failed", extra={"event": "refresh.error"})
            self._stop.wait(min(RECHECK, self.interval))

    def step(self, now: float) -> None:
        """Claim fetched datasets not claimed yet, and refresh those that are due at ``now``."""
        self.registry.scan()
        for entry in self.registry.entries():
            info = entry.info
            if entry.error is not None or info is None or cache_key(info) is None or entry.id in self.refreshed:
                continue
            if self._refused.get(entry.id) == info:
                continue
            self._claim(entry.id, info, entry.handle, now)
        for r in list(self.refreshed.values()):
            if now >= r.due and not self._stop.is_set():
                self._refresh(r, now)

    def _claim(self, ds: str, info: DatasetInfo, handle: object, now: float) -> None:
        assert info.source is not None and info.source.origin is not None
        why = foreign(handle, info.source) if isinstance(handle, Path) else None
        key = cache_key(info)
        folder = source_folder(self.cache_dir, self.registry.catalog(ds).location(ds), ds, key or "")
        if why is None and not Path(info.source.path).is_relative_to(folder):
            why = "its recorded folder is not the cache folder of its id and address"
        if why is not None:
            self._refused[ds] = info
            self._say(ds, f"not refreshed: {why}", logging.WARNING)
            return
        try:
            claim = WatchClaim.take(handle) if isinstance(handle, Path) else None
        except OSError as e:
            self._refused[ds] = info
            self._say(ds, f"not refreshed: cannot claim it ({e.strerror})", logging.WARNING)
            return
        if claim is None and isinstance(handle, Path):
            return  # another process refreshes it; tried again at the next step
        fetched = info.source.origin.fetched_at
        age = (now_utc() - fetched).total_seconds() if fetched is not None else self.interval
        r = _Refreshed(ds, claim, due=now + max(0.0, self.interval - age))
        self.refreshed[ds] = r
        self._write(r, "watching")

    def _refresh(self, r: _Refreshed, now: float) -> None:
        r.due = now + self.interval
        try:
            info = self.registry.store(r.id).info
        except McpowerError as e:
            self._write(r, "failed", f"the dataset cannot be loaded: {e.message}")
            return
        origin = info.source.origin if info.source is not None else None
        if origin is None:
            return
        fetch = FetchOptions(
            crawl=self.fetch.crawl,
            ref=origin.ref,
            subdir=origin.subdir,
            git=origin.kind == "git",
            git_timeout=self.fetch.git_timeout,
            max_repo_bytes=self.fetch.max_repo_bytes,
        )
        self._write(r, "indexing")
        try:
            report = ingest_source(
                origin.url,
                ingest_target(self.registry.catalog(r.id)),
                ingest_options(info, self.limits),
                fetch,
                self.cache_dir,
                embedder=self._factory(info),
            )
        except DatasetLockedError:
            r.due = now + RECHECK  # an ingest of it is running: soon again
            self._write(r, "watching")
            return
        except McpowerError as e:
            message = f"the last refresh failed, the previous version keeps serving: {e.message}"[:480]
            self._write(r, "failed", message)
            self._say(r.id, message, logging.WARNING)
            return
        except Exception as e:  # a bug or an unexpected OSError: keep the previous version
            logger.exception("refresh of %s failed", r.id, extra={"event": "refresh.error", "dataset": r.id})
            self._write(
                r, "failed", f"the last refresh failed ({type(e).__name__}), the previous version keeps serving"
            )
            return
        r.last = {"last_update": now_utc().isoformat(), "last_counts": report.changes()}
        self._write(r, "watching")
        if report.published:
            try:  # load the new version now, so the next search does not wait for it
                self.registry.store(r.id)
            except McpowerError as e:
                logger.warning("the new version of %s cannot be loaded: %s", r.id, e.message)
        self._say(r.id, f"refreshed: {report.added} added, {report.changed} changed, {report.removed} removed")

    def _write(self, r: _Refreshed, state: Any, message: str | None = None) -> None:
        if r.claim is not None:
            r.claim.write(WatchState(state=state, message=message, pid=os.getpid(), since=r.since, **r.last))

    def _say(self, ds: str, message: str, level: int = logging.INFO) -> None:
        logger.log(level, "refresh %s: %s", ds, message, extra={"event": "refresh", "dataset": ds})
        if self.on_refresh is not None:
            self.on_refresh(ds, message)
