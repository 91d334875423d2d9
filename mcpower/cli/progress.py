"""An ingest's progress on stderr: bars on a terminal, plain lines anywhere else.

A pipe, a log file or CI gets one line when a phase starts, one every ``PLAIN_EVERY`` seconds
while it runs (done / total, rate, time left) and one when it ends, so a long ingest is never
silent; a terminal gets tqdm bars with their own rate and ETA. ``--quiet`` turns both off.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

# Often enough that a log shows the ingest is alive, rare enough that a 15-minute ingest of a big
# folder writes ~90 lines, not thousands.
PLAIN_EVERY = 10.0
FALLBACK_SIZE = (80, 24)  # columns and lines of a terminal that reports no size

_VERBS = {
    "pages": ("fetching", "fetched", "pages"),
    "files": ("reading", "read", "files"),
    "chunks": ("embedding", "embedded", "chunks"),
}


def plural(n: int, word: str) -> str:
    """'1 document', '2 documents'."""
    return f"{n:,} {word}" if n == 1 else f"{n:,} {word}s"


def duration(seconds: float) -> str:
    """'0.4 s', '17.5 s', '3 min 05 s', '1 h 02 min'."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    return f"{minutes // 60} h {minutes % 60:02d} min"


def rate(n: int, seconds: float, unit: str) -> str:
    """'42 chunks/s', or '0.5 chunks/s' for slow ones, never '(0 chunks/s)'."""
    per = n / seconds if seconds > 0 else 0.0
    return f"{per:.0f} {unit}/s" if per >= 10 else f"{per:.1f} {unit}/s"


class Progress:
    """The ingest's progress callback, ``(phase, done, total)``; a context manager closing its bars.

    Phases: "waiting" (another ingest holds the dataset; ``--wait``), "files", "chunks".
    """

    def __init__(
        self, enabled: bool, stream: TextIO | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.bars_on = enabled and self.stream.isatty()
        self.clock = clock
        self.bars: dict[str, Any] = {}
        self.started: dict[str, float] = {}  # phase -> when its first call came
        self.last_line: dict[str, float] = {}
        self.ended: set[str] = set()
        self.totals: dict[str, int] = {}

    def __enter__(self) -> Progress:
        return self

    def __call__(self, phase: str, done: int, total: int) -> None:
        if not self.enabled:
            return
        if phase == "waiting":
            self.say("waiting for another ingest of this dataset to finish (--wait)…")
            return
        now = self.clock()
        if phase not in self.started:
            for other in list(self.started):  # a phase ends when the next one starts
                self._end(other)
            self.started[phase] = self.last_line[phase] = now
            self.totals[phase] = total
            if not self.bars_on:  # a crawl's total grows as it finds links: it is not announced
                self.say(
                    "crawling…"
                    if phase == "pages"
                    else f"{_VERBS.get(phase, (phase,))[0]} {plural(total, _unit(phase))}…"
                )
        if phase == "pages":
            self.totals[phase] = done  # what the closing line counts: the pages fetched so far
        if self.bars_on:
            self._bar(phase, done, total)
        elif done >= total and phase != "pages":  # a crawl's pages end when reading starts
            self._end(phase)
        elif now - self.last_line[phase] >= PLAIN_EVERY:
            self.last_line[phase] = now
            self.say(self._status(phase, done, total, now))

    def __exit__(self, *exc: object) -> None:
        for phase in list(self.started):
            self._end(phase, finished=not exc[0])

    def _status(self, phase: str, done: int, total: int, now: float) -> str:
        spent = now - self.started[phase]
        line = f"{_VERBS.get(phase, (phase,))[0]}: {done:,}/{total:,} {_unit(phase)}s ({100 * done // max(total, 1)}%)"
        if done and spent > 0:
            line += f", {rate(done, spent, _unit(phase) + 's')}, ~{duration(spent / done * (total - done))} left"
        return line

    def _end(self, phase: str, finished: bool = True) -> None:
        if phase in self.ended:
            return
        self.ended.add(phase)
        bar = self.bars.pop(phase, None)
        if bar is not None:
            bar.close()
        elif finished and not self.bars_on:
            # No time here: the summary's phase times are the one clock (report.phases()).
            verb = _VERBS.get(phase, (phase, phase))[1]
            self.say(f"{verb} {plural(self.totals[phase], _unit(phase))}")

    def _bar(self, phase: str, done: int, total: int) -> None:
        from tqdm import tqdm

        bar = self.bars.get(phase)
        if bar is None:
            columns, lines = terminal_size(self.stream)
            bar = self.bars[phase] = tqdm(
                total=total, desc=phase, unit=_unit(phase), file=self.stream, leave=True, ncols=columns, nrows=lines
            )
        if total != bar.total:  # a crawl finds more pages as it goes
            bar.total = total
        bar.update(done - bar.n)
        if done >= total and phase != "pages":
            self._end(phase)

    def say(self, line: str) -> None:
        """A line of its own (between bars, never inside one)."""
        self.stream.write(line + "\n")
        self.stream.flush()


def terminal_size(stream: TextIO) -> tuple[int, int]:
    """The terminal's (columns, lines), each FALLBACK_SIZE's when it reports none. A pty whose size
    was never set says 0 x 0; tqdm then takes it for -1 lines and draws no bar until it closes."""
    try:
        size = os.get_terminal_size(stream.fileno())
        columns, lines = size.columns, size.lines
    except (OSError, ValueError, AttributeError):
        columns, lines = 0, 0
    return (columns if columns > 0 else FALLBACK_SIZE[0]), (lines if lines > 0 else FALLBACK_SIZE[1])


def _unit(phase: str) -> str:
    return _VERBS[phase][2][:-1] if phase in _VERBS else phase
