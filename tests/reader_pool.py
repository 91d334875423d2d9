"""One reader worker for the test process, instead of one per ingest (a plugin of conftest.py).

An ingest reads PDF, Word, HTML and reST in a worker process (mcpower/chunking/worker.py) that it
starts on the first such file and ends when it is done. The tests' corpus has a reST file, so every
test that ingests it started an interpreter and imported docutils: ~0.15 s of CPU and, on a busy
machine, a second or more of waiting, hundreds of times a run. Here a worker a Reader would end is
parked instead, and the next Reader of this process takes it: every file is still read in a worker
process with the same memory limit, under the same deadline, and a worker that timed out, ran out
of memory or died is ended as before (the Reader kills it); one whose last request failed in any
way is ended too: only a worker that answered its last request is parked.

Tests of the worker's own life (how it starts, where, when it ends) get the real thing: the modules
in OWN_WORKER, or a test marked ``own_reader_worker``.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
from collections.abc import Iterator
from multiprocessing.connection import Connection

import pytest

from mcpower.chunking import worker

# Test modules that watch the worker itself: started once per ingest, in which folder, told to stop.
OWN_WORKER = frozenset({"test_mixed_formats", "test_working_folder"})
PARKED_MAX = 2  # ingests running at once in one test (watchers, servers re-indexing) rarely exceed it


class _Pool:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.parked: list[tuple[int, int, subprocess.Popen[bytes], Connection]] = []  # (pid, memory, ...)

    def take(self, memory_bytes: int) -> tuple[subprocess.Popen[bytes], Connection] | None:
        with self.lock:
            for i, (pid, memory, process, conn) in enumerate(self.parked):
                if pid == os.getpid() and memory == memory_bytes:
                    del self.parked[i]
                    if process.poll() is None:
                        return process, conn
                    conn.close()
                    process.wait()
                    return None
        return None

    def park(self, memory_bytes: int, process: subprocess.Popen[bytes], conn: Connection) -> bool:
        with self.lock:
            if len(self.parked) >= PARKED_MAX:
                return False
            self.parked.append((os.getpid(), memory_bytes, process, conn))
            return True

    def close(self) -> None:
        with self.lock:
            parked, self.parked = self.parked, []
        for _, _, process, conn in parked:
            with contextlib.suppress(OSError, ValueError):
                conn.send(None)
            conn.close()
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


_POOL = _Pool()


@pytest.fixture(scope="session")
def _reader_pool() -> Iterator[_Pool]:
    yield _POOL
    _POOL.close()


@pytest.fixture(autouse=True)
def shared_reader_worker(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, _reader_pool: _Pool) -> None:
    """Readers of this test take a parked worker, and park theirs when done (see the module docstring)."""
    module = getattr(request.module, "__name__", "").rpartition(".")[2]
    if module in OWN_WORKER or request.node.get_closest_marker("own_reader_worker"):
        return
    start, close, in_worker = worker.Reader._start, worker.Reader.close, worker.Reader._in_worker  # type: ignore[attr-defined]

    def shared_start(self: worker.Reader) -> None:
        taken = _reader_pool.take(self.memory_bytes)
        if taken is None:
            start(self)
        else:
            self._process, self._conn = taken  # type: ignore[attr-defined]

    def shared_in_worker(self: worker.Reader, *args: object, **kwargs: object) -> object:
        # Until a request is answered, or when it failed in any way, the worker may hold a late
        # answer or a parser's leftovers: such a worker is ended, never parked.
        self._pool_clean = False  # type: ignore[attr-defined]
        parsed = in_worker(self, *args, **kwargs)
        self._pool_clean = True  # type: ignore[attr-defined]
        return parsed

    def shared_close(self: worker.Reader) -> None:
        process, conn = self._process, self._conn  # type: ignore[attr-defined]
        clean = getattr(self, "_pool_clean", False)
        healthy = clean and process is not None and conn is not None and process.poll() is None
        if healthy and _reader_pool.park(self.memory_bytes, process, conn):  # type: ignore[arg-type]
            self._process = self._conn = None  # type: ignore[attr-defined]
            return
        close(self)

    monkeypatch.setattr(worker.Reader, "_start", shared_start)
    monkeypatch.setattr(worker.Reader, "close", shared_close)
    monkeypatch.setattr(worker.Reader, "_in_worker", shared_in_worker)
