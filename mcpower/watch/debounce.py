"""Debouncing: one re-ingest for a burst of changes, however long the burst."""

from __future__ import annotations

from mcpower.defaults import DEFAULT_WATCH_DEBOUNCE

DEFAULT_QUIET = DEFAULT_WATCH_DEBOUNCE
# A folder that never stops changing (a build writing into it) is still re-ingested this often.
MAX_DELAY = 10.0


class Debouncer:
    """When each key is due: ``quiet`` seconds after its last change, at most ``max_delay`` after its first."""

    def __init__(self, quiet: float = DEFAULT_QUIET, max_delay: float = MAX_DELAY) -> None:
        self.quiet, self.max_delay = quiet, max_delay
        self._first: dict[str, float] = {}
        self._due: dict[str, float] = {}

    def add(self, key: str, now: float, wait: float | None = None) -> None:
        """A change to ``key`` at ``now``; ``wait`` (default ``quiet``) is how long to stay quiet."""
        wait = self.quiet if wait is None else wait
        first = self._first.setdefault(key, now)
        self._due[key] = min(now + wait, first + max(self.max_delay, wait))

    def pop_due(self, now: float) -> list[str]:
        """The keys due at ``now`` (forgotten once returned), in order."""
        due = sorted(k for k, t in self._due.items() if t <= now)
        for k in due:
            del self._due[k], self._first[k]
        return due

    def next_due(self) -> float | None:
        return min(self._due.values(), default=None)

    def forget(self, key: str) -> None:
        self._due.pop(key, None)
        self._first.pop(key, None)
