"""The bytes of the stdio transport (stdio.py): bounded lines in from one descriptor, lines out to another.

:class:`LineReader` reads a pipe or socket on the event loop itself (the loop wakes when bytes
arrive, no thread in between); anything else (a file, a terminal) is read by a worker thread, a
line at a time. A line longer than the limit is dropped in pieces as it arrives and reported by
its first bytes: memory stays bounded by the limit, whatever a client sends.

:class:`LineWriter` hands each line to a thread of its own, which writes and flushes it: the event
loop never waits for the pipe (a client that stops reading cannot stall it, nor Ctrl-C), and
sending takes no round trip through a worker thread. Lines are written in the order they are sent;
past ``MAX_QUEUED_BYTES`` not yet written, senders wait for the client to read.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import queue
import stat
import threading

import anyio

logger = logging.getLogger(__name__)

READ_BYTES = 1 << 16  # what one read of a pipe asks for
HEAD_BYTES = 64  # what is kept of an over-long line, to answer it
# Lines written by the thread at most this far behind the senders (a search answer is under 1 MB).
MAX_QUEUED_BYTES = 4 << 20
# How long the end of a session waits for its last lines to reach a client that does not read.
DRAIN_SECONDS = 5.0


class LineReader:
    """Lines of at most ``limit`` bytes (without their newline) from descriptor ``fd``, which it
    never closes (a reader thread may still block on it)."""

    def __init__(self, fd: int, limit: int) -> None:
        self.fd = fd
        self.limit = limit
        mode = os.fstat(fd).st_mode
        # Windows' event loop (proactor) cannot watch a descriptor: a thread reads there.
        self.on_loop = os.name == "posix" and (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode))
        self._file = None if self.on_loop else os.fdopen(fd, "rb", buffering=READ_BYTES, closefd=False)
        self._lines: list[tuple[bytes, bool]] = []  # complete lines read, not yet taken (reversed)
        self._partial = bytearray()
        self._head: bytes | None = None  # an over-long line's first bytes, while the rest is dropped
        self._eof = False

    async def next(self) -> tuple[bytes, bool]:
        """The next line with its newline (b"" at EOF; a last line without one as it is), and
        whether it was over the limit (then only its first HEAD_BYTES)."""
        if not self.on_loop:
            return await anyio.to_thread.run_sync(self._read_file, abandon_on_cancel=True)
        while not self._lines:
            if self._eof:
                return b"", False
            self._take(await self._read_pipe())
        return self._lines.pop()

    async def _read_pipe(self) -> bytes:
        """The bytes a pipe has (b"" at EOF), read once the event loop says it has some: the read
        itself never blocks, and the descriptor stays as the client made it (blocking)."""
        loop = asyncio.get_running_loop()
        ready = loop.create_future()
        loop.add_reader(self.fd, _resolve, ready)
        try:
            await ready
        finally:
            loop.remove_reader(self.fd)
        return os.read(self.fd, READ_BYTES)

    def _take(self, data: bytes) -> None:
        """Split ``data`` into lines, appending to the partial line and dropping an over-long one."""
        found: list[tuple[bytes, bool]] = []
        if not data:
            self._eof = True
            if self._head is not None:
                found.append((self._head, True))
            elif self._partial:
                found.append((bytes(self._partial), False))
            self._partial.clear()
        start = 0
        while data:
            end = data.find(b"\n", start)
            if end < 0:
                break
            piece = data[start : end + 1]
            start = end + 1
            if self._head is not None:
                found.append((self._head, True))
                self._head = None
            elif len(self._partial) + len(piece) - 1 > self.limit:
                found.append((bytes((self._partial + piece)[:HEAD_BYTES]), True))
                self._partial.clear()
            elif self._partial:
                found.append((bytes(self._partial + piece), False))
                self._partial.clear()
            else:
                found.append((piece, False))
        if data and self._head is None:
            self._partial += data[start:]
            if len(self._partial) > self.limit:
                self._head = bytes(self._partial[:HEAD_BYTES])
                self._partial.clear()
        self._lines[:0] = found[::-1]

    def _read_file(self) -> tuple[bytes, bool]:
        """:meth:`next` for a descriptor the event loop cannot watch, on a worker thread."""
        assert self._file is not None
        line = self._file.readline(self.limit + 1)
        if len(line) <= self.limit or line.endswith(b"\n"):
            return line, False
        rest = line
        while rest and not rest.endswith(b"\n"):
            rest = self._file.readline(READ_BYTES)
        return line[:HEAD_BYTES], True


class LineWriter:
    """Writes lines to descriptor ``fd`` (never closed: its thread may still block on it) from a
    thread of its own, in order. Once a write fails (the client went away), later sends raise
    ``anyio.BrokenResourceError``; after :meth:`close`, ``anyio.ClosedResourceError``."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._queue: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._queued = 0  # bytes sent, not yet written
        self._waiting: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []  # senders waiting for room
        self.error: OSError | None = None
        self.closed = False
        self._thread = threading.Thread(target=self._run, name="mcpower-stdout", daemon=True)
        self._thread.start()

    async def send(self, line: bytes) -> None:
        """Queue ``line`` (with its newline) for writing; waits only while MAX_QUEUED_BYTES are queued."""
        while True:
            if self.closed:
                raise anyio.ClosedResourceError
            if self.error is not None:
                raise anyio.BrokenResourceError from self.error
            with self._lock:
                if self._queued <= MAX_QUEUED_BYTES:
                    self._queued += len(line)
                    self._queue.put(line)
                    return
                room = asyncio.Event()
                self._waiting.append((asyncio.get_running_loop(), room))
            await room.wait()

    def close(self) -> None:
        """No more lines: those queued are still written (see :meth:`drain`)."""
        if not self.closed:
            self.closed = True
            self._queue.put(None)

    async def drain(self, timeout: float = DRAIN_SECONDS) -> bool:
        """Close, and wait up to ``timeout`` seconds for the lines queued to be written; whether they were."""
        self.close()
        await anyio.to_thread.run_sync(self._thread.join, timeout, abandon_on_cancel=True)
        return not self._thread.is_alive()

    def _run(self) -> None:
        while True:
            line = self._queue.get()
            if line is None:
                return
            chunks = [line]
            stop = False
            while not self._queue.empty():  # what queued meanwhile goes out in the same write
                more = self._queue.get()
                if more is None:
                    stop = True
                    break
                chunks.append(more)
            data = b"".join(chunks)
            if self.error is None:
                self._write(data)
            self._written(len(data))
            if stop:
                return

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self.fd, view) :]
        except OSError as e:
            self.error = e
            logger.warning(
                "the client's end of stdout is closed (%s): answers are dropped",
                e.strerror or e,
                extra={"event": "protocol.stdout_closed"},
            )

    def _written(self, size: int) -> None:
        with self._lock:
            self._queued -= size
            waiting: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []
            if self._queued <= MAX_QUEUED_BYTES or self.error is not None:
                waiting, self._waiting = self._waiting, []
        for loop, room in waiting:
            with contextlib.suppress(RuntimeError):  # a loop that has closed: no one waits any more
                loop.call_soon_threadsafe(room.set)

    def __repr__(self) -> str:  # pragma: no cover - for debugging
        return f"LineWriter(fd={self.fd}, queued={self._queued}, error={self.error!r})"


def _resolve(ready: asyncio.Future[None]) -> None:
    if not ready.done():  # the loop may call a reader again before it is removed
        ready.set_result(None)
