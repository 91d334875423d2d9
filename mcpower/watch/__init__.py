"""Watching: keep datasets current while the files of their source folders change (``--watch``).

    watcher.py    the Watcher: a file-watching thread and a worker that re-ingests (start it from any door)
    notify.py     the notify thread's loop (watchfiles)
    debounce.py   one re-ingest for a burst of changes
    source.py     which changes matter, how a dataset is ingested again, whether its folder is its own
    limits.py     the operator's limits, and a manifest's recorded options within them
    refresh.py    fetched datasets (a site, a repository) fetched again on an interval (--refresh)

watchfiles (the file-watching library) is imported by the Watcher's thread only, never to search.
"""

from __future__ import annotations

from mcpower.watch.debounce import DEFAULT_QUIET, MAX_DELAY, Debouncer
from mcpower.watch.limits import WatchLimits
from mcpower.watch.watcher import RECHECK, Watcher, WatchEvent

__all__ = ["DEFAULT_QUIET", "MAX_DELAY", "RECHECK", "Debouncer", "WatchEvent", "WatchLimits", "Watcher"]
