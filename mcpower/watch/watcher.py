"""Watching: keep datasets current while the files of their source folders change (``--watch``).

    notify thread   watchfiles (inotify, FSEvents ...; polling where those do not work) over the
                    recorded source folders; hands every batch of changes to the worker
    worker thread   debounces per dataset (:class:`Debouncer`) and re-ingests with the ordinary
                    incremental ingest, which publishes atomically: searches answer from the
                    previous version until the new one is current, then pick it up by themselves

Nothing here knows about a transport: ``mcpower serve`` starts one Watcher whatever it serves over,
and ``mcpower ingest --watch`` starts one for its dataset. The worker's steps (:meth:`Watcher.changed`,
:meth:`Watcher.recheck`, :meth:`Watcher.run_due`) take the time as an argument, so tests drive them
with batches and a clock of their own, without threads.

A dataset is watched by one process at a time (:class:`~mcpower.layout.WatchClaim`); a watcher
that finds it claimed retries every ``recheck`` seconds. A source folder that is deleted or renamed
is reported (``source_missing``) and its dataset kept; when a folder is back at that path it is
watched again. A re-ingest that fails leaves the previous version serving and is reported.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from mcpower.errors import DatasetLockedError, McpowerError
from mcpower.ingestion import IngestReport, ingest
from mcpower.layout import WatchClaim
from mcpower.manifest import DatasetInfo, now_utc
from mcpower.registry import Registry
from mcpower.results import WatchState
from mcpower.store import Catalog
from mcpower.store.local import LocalCatalog
from mcpower.watch.debounce import DEFAULT_QUIET, MAX_DELAY, Debouncer
from mcpower.watch.limits import WatchLimits, narrowed
from mcpower.watch.notify import notify
from mcpower.watch.source import Embedders, bound, foreign, ingest_options, ingest_target, relevant, scrub, unchanged

logger = logging.getLogger(__name__)

# How often missing source folders, datasets claimed by another process and new datasets are looked at.
RECHECK = 5.0
# A dataset being written by another ingest is tried again after this long.
LOCK_RETRY = 2.0
DELETED = 3  # watchfiles.Change.deleted (the logic takes plain ints, so tests need no watchfiles)

Kind = Literal["watching", "reindexed", "failed", "source_missing", "standby", "refused", "stopped"]
EmbedderFactory = Callable[[DatasetInfo], Any]  # DatasetInfo -> mcpower.embedding.Embedder


@dataclass(frozen=True)
class WatchEvent:
    """Something a watcher did or found, for whoever started it (the CLI prints these)."""

    dataset: str
    kind: Kind
    message: str = ""
    report: IngestReport | None = None


@dataclass
class _Watched:
    id: str
    root: str
    catalog: Catalog
    claim: WatchClaim | None
    info: DatasetInfo
    state: Literal["watching", "indexing", "source_missing", "failed"] = "watching"
    message: str | None = None
    since: str = field(default_factory=lambda: now_utc().isoformat())
    last: dict[str, Any] = field(default_factory=dict)  # the last published re-index: last_update, last_counts


class Watcher:
    """Re-ingests the datasets of ``registry`` whose source folders change (those in ``only``, if given),
    reading no more than ``limits`` allow whatever their manifests record (watch/limits.py).

    A dataset is watched only if its manifest is this user's alone to write and its recorded folder
    holds one of its documents (source.py: a manifest is data, and must not point the watcher at
    another folder). ``trusted`` maps datasets to the folder the user named (``ingest PATH
    --watch``): while the manifest records that folder, neither is checked.
    """

    def __init__(
        self,
        registry: Registry,
        *,
        only: Sequence[str] | None = None,
        trusted: Mapping[str, str] | None = None,
        limits: WatchLimits | None = None,
        quiet: float = DEFAULT_QUIET,
        max_delay: float = MAX_DELAY,
        recheck: float = RECHECK,
        clock: Callable[[], float] = time.monotonic,
        embedder_factory: EmbedderFactory | None = None,
        on_event: Callable[[WatchEvent], None] | None = None,
        force_polling: bool | None = None,
    ) -> None:
        self.registry = registry
        self.only = set(only) if only is not None else None
        self.trusted = dict(trusted or {})
        self.limits = limits or WatchLimits()
        self.debouncer = Debouncer(quiet, max_delay)
        self.recheck_every = recheck
        self.clock = clock
        self.on_event = on_event
        self.force_polling = force_polling
        self._factory = embedder_factory or Embedders(registry)
        self.watched: dict[str, _Watched] = {}
        self._waiting: dict[str, str] = {}  # dataset -> why it is not watched yet (standby, refused)
        self._refused: dict[str, DatasetInfo] = {}  # not retried until their manifest changes
        self._ignore = [str(c.root.expanduser().resolve()) for c in registry.catalogs if isinstance(c, LocalCatalog)]
        self._lock = threading.Lock()  # guards the roots the notify thread reads
        self._roots: tuple[str, ...] = ()
        self._queue: queue.Queue[object] = queue.Queue()
        self._stop = threading.Event()
        self._wake = threading.Event()  # stops the current watchfiles generator (stop, or new roots)
        self._threads: list[threading.Thread] = []

    # ------------------------------------------------------------ running

    def start(self) -> None:
        """Watch in two daemon threads until :meth:`stop`; returns at once (the worker looks at the
        datasets first, so a server's start-up does not wait for their stores to load)."""
        self._threads = [
            threading.Thread(target=self._notify, name="mcpower-watch-notify", daemon=True),
            threading.Thread(target=self._work, name="mcpower-watch-worker", daemon=True),
        ]
        for t in self._threads:
            t.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop both threads (an ingest under way finishes first) and give the claims up."""
        self._stop.set()
        self._wake.set()
        self._queue.put(None)
        for t in self._threads:
            t.join(timeout)
        if any(t.is_alive() for t in self._threads):
            return  # an ingest still running: its claims go when the process does
        for w in self.watched.values():
            if w.claim is not None:
                w.claim.release()
        self.watched.clear()

    def roots(self) -> tuple[str, ...]:
        """The folders being watched now."""
        with self._lock:
            return self._roots

    def _notify(self) -> None:
        notify(
            self.roots, self._ignore, self._queue.put, self._stop, self._wake, self.force_polling, self.recheck_every
        )

    def _work(self) -> None:
        next_check = self.clock()
        while not self._stop.is_set():
            due = min(t for t in (self.debouncer.next_due(), next_check) if t is not None)
            try:
                item = self._queue.get(timeout=max(due - self.clock(), 0.0))
            except queue.Empty:
                item = None
            if self._stop.is_set():
                break
            now = self.clock()
            try:
                if isinstance(item, set):
                    self.changed(item, now)
                if now >= next_check:
                    self.recheck(now)
                    next_check = now + self.recheck_every
                self.run_due(self.clock())
            except Exception:  # a bug must not end watching silently: log it and carry on
                logger.exception("watcher step failed", extra={"event": "watch.error"})

    # ------------------------------------------------------------ the worker's steps

    def changed(self, changes: Iterable[tuple[int, str]], now: float) -> None:
        """A batch of (change, absolute path) from the file watcher, seen at ``now``."""
        gone: set[str] = set()
        for change, path in changes:
            if any(path == i or path.startswith(i + os.sep) for i in self._ignore):
                continue  # our own datasets being written
            for w in self.watched.values():
                if w.state == "source_missing":
                    continue
                if path == w.root:
                    if change == DELETED:
                        gone.add(w.id)
                elif path.startswith(w.root + os.sep) and relevant(path[len(w.root) + 1 :], path):
                    self.debouncer.add(w.id, now)
        for ds in gone:
            # inotify stops watching a deleted or renamed folder, even when another takes its place:
            # watch the roots again either way.
            w = self.watched[ds]
            if os.path.isdir(w.root):
                self.debouncer.add(ds, now)
            else:
                self._source_missing(w)
        if gone:
            self._update_roots(restart=True)

    def recheck(self, now: float) -> None:
        """Look for missing folders come back, claims freed, datasets new or changed."""
        self.registry.scan()
        entries = {e.id: e for e in self.registry.entries() if e.info is not None and e.error is None}
        for ds, w in list(self.watched.items()):
            entry = entries.get(ds)
            if entry is None or entry.info is None or entry.info.source != w.info.source:
                self._unwatch(ds, "the dataset was removed or re-ingested from another folder")
            elif w.state == "source_missing" and os.path.isdir(w.root):
                self._source_back(w, now)
            elif w.state != "source_missing" and not os.path.isdir(w.root):
                self._source_missing(w)
            else:
                w.info = entry.info
        for ds, entry in sorted(entries.items()):
            info = entry.info
            if ds in self.watched or info is None or info.source is None or info.source.origin is not None:
                continue  # (a fetched site or repository is refreshed, not watched: refresh.py)
            if self.only is not None and ds not in self.only:
                continue
            if self._refused.get(ds) == info:
                continue
            self._activate(ds, info, now)
        self._update_roots()

    def run_due(self, now: float) -> None:
        """Re-ingest every dataset whose changes have settled by ``now``."""
        for ds in self.debouncer.pop_due(now):
            w = self.watched.get(ds)
            if w is not None and w.state != "source_missing":
                self._reindex(w, now)

    # ------------------------------------------------------------ states

    def _activate(self, ds: str, info: DatasetInfo, now: float) -> None:
        assert info.source is not None
        root = info.source.path
        handle = self.registry.entry(ds).handle
        trusted = self.trusted.get(ds) == root
        why = foreign(handle, info.source) if isinstance(handle, Path) and not trusted else None
        if why:  # checked before the claim: the dataset's owner may be watching it
            self._refuse(ds, info, f"{why}; only its owner's `serve --watch` watches it")
            return
        try:  # the claim first: it is cheap, and a dataset another process watches is tried every recheck
            claim = WatchClaim.take(handle) if isinstance(handle, Path) else None
        except OSError as e:
            self._refuse(ds, info, f"cannot claim it for watching ({e.strerror})")
            return
        if claim is None and isinstance(handle, Path):
            if self._waiting.get(ds) != "standby":
                self._waiting[ds] = "standby"
                self._report(WatchEvent(ds, "standby", "another mcpower process watches it; trying again later"))
            return
        present = os.path.isdir(root)
        if present and not trusted and not self._bound(ds, root):
            if claim is not None:
                claim.release()
            self._refuse(
                ds,
                info,
                "the folder recorded as its source holds none of its documents as they were ingested; "
                f"not watching it (`mcpower ingest <folder> --id {ds}` records a folder again)",
            )
            return
        catalog = self.registry.catalog(ds)
        self._waiting.pop(ds, None)
        w = _Watched(ds, root, catalog, claim, info)
        self.watched[ds] = w
        logger.info("watch.start %s", ds, extra={"event": "watch.start", "dataset": ds, "source": root})
        if present:
            self._set(w, "watching")
            beyond = narrowed(info.source, self.limits)
            message = f"within this watcher's limits: {'; '.join(beyond)}" if beyond else ""
            self._report(WatchEvent(ds, "watching", message), logging.WARNING if beyond else logging.INFO)
            self.debouncer.add(ds, now, wait=0.0)  # catch up with changes made while nobody watched
        else:
            self._source_missing(w)

    def _refuse(self, ds: str, info: DatasetInfo, why: str) -> None:
        self._refused[ds] = info  # until its manifest changes
        self._report(WatchEvent(ds, "refused", why), logging.WARNING)

    def _unwatch(self, ds: str, why: str) -> None:
        w = self.watched.pop(ds)
        self.debouncer.forget(ds)
        if w.claim is not None:
            w.claim.release()
        self._report(WatchEvent(ds, "stopped", why))

    def _source_missing(self, w: _Watched) -> None:
        self.debouncer.forget(w.id)
        message = (
            "its source folder was deleted or renamed; the dataset keeps its last version, and is watched "
            "again when a folder is back at that path"
        )
        self._set(w, "source_missing", message)
        self._report(WatchEvent(w.id, "source_missing", message), logging.WARNING)
        self._update_roots()

    def _source_back(self, w: _Watched, now: float) -> None:
        if self.trusted.get(w.id) != w.root and not self._bound(w.id, w.root):
            self._unwatch(w.id, "a folder is back at its source path, but it holds none of its documents")
            self._refused[w.id] = w.info
            return
        self._set(w, "watching")
        self._report(WatchEvent(w.id, "watching", "its source folder is back"))
        self.debouncer.add(w.id, now, wait=0.0)

    def _reindex(self, w: _Watched, now: float) -> None:
        if not os.path.isdir(w.root):
            self._source_missing(w)
            return
        try:
            if unchanged(self.registry.store(w.id), w.root, w.info, self._ignore, self.limits):
                return
        except McpowerError:
            pass  # the current version cannot be loaded: ingest rebuilds it
        try:
            self._set(w, "indexing")
            report = ingest(
                Path(w.root),
                ingest_target(w.catalog),
                ingest_options(w.info, self.limits, self.registry.cache_dir),
                embedder=self._factory(w.info),
            )
        except DatasetLockedError:
            self._set(w, "watching", w.message)
            self.debouncer.add(w.id, now, wait=LOCK_RETRY)
            return
        except McpowerError as e:
            if not os.path.isdir(w.root):  # deleted or renamed during the re-ingest
                self._source_missing(w)
                return
            message = f"the last re-index failed, the previous version keeps serving: {scrub(e.message, w.root)}"
            self._set(w, "failed", message)
            self._report(WatchEvent(w.id, "failed", message), logging.WARNING)
            return
        except Exception as e:  # a bug or an unexpected OSError: report it, keep the previous version
            logger.exception("re-index of %s failed", w.id, extra={"event": "watch.error", "dataset": w.id})
            message = f"the last re-index failed ({type(e).__name__}), the previous version keeps serving"
            self._set(w, "failed", message)
            self._report(WatchEvent(w.id, "failed", message))
            return
        if report.published:
            w.last = {"last_update": now_utc().isoformat(), "last_counts": report.changes()}
        self._set(w, "watching")
        if report.published:
            try:  # load the new version now, so the next search does not wait for it
                w.info = self.registry.store(w.id).info
            except McpowerError as e:
                logger.warning("the new version of %s cannot be loaded: %s", w.id, e.message)
        self._report(WatchEvent(w.id, "reindexed", report=report))

    # ------------------------------------------------------------ helpers

    def _set(
        self,
        w: _Watched,
        state: Literal["watching", "indexing", "source_missing", "failed"],
        message: str | None = None,
    ) -> None:
        w.state, w.message = state, message
        if w.claim is not None:
            w.claim.write(WatchState(state=state, message=message, pid=os.getpid(), since=w.since, **w.last))

    def _update_roots(self, restart: bool = False) -> None:
        """Publish the folders to watch; the notify thread starts a new watch if they changed."""
        roots = tuple(sorted({w.root for w in self.watched.values() if w.state != "source_missing"}))
        with self._lock:
            changed, self._roots = roots != self._roots, roots
        if changed or restart:
            self._wake.set()

    def _report(self, event: WatchEvent, level: int = logging.INFO) -> None:
        extra: dict[str, Any] = {"event": f"watch.{event.kind}", "dataset": event.dataset}
        if event.report is not None:
            r = event.report
            extra.update(
                published=r.published,
                added=r.added,
                changed=r.changed,
                removed=r.removed,
                embedded=r.embedded,
                skipped=len(r.skipped),
                duration_ms=round(r.seconds * 1000, 1),
            )
        logger.log(
            level,
            "watch.%s %s%s",
            event.kind,
            event.dataset,
            f": {event.message}" if event.message else "",
            extra=extra,
        )
        if self.on_event is not None:
            self.on_event(event)

    def _bound(self, ds: str, root: str) -> bool:
        try:
            return bound(self.registry.store(ds), root)
        except McpowerError:
            return False
