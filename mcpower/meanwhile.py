"""Two independent parts of one search done at once: a hybrid search's keyword side (SQLite reads
and numpy sums) needs nothing from its query vector, and embedding the query (ONNX Runtime, which
lets go of the GIL while it runs) needs nothing from the keyword side. Run one on a worker thread
while the caller does the other, and the search waits for the longer of the two, not their sum.

A bounded set of workers: when every one is busy (a server answering many searches at once, where
the cores are busy anyway), both parts run on the caller, one after the other, as before.

One part split in pieces (:func:`shared`): the caller works through them, and a worker that comes
free meanwhile (the other part done) takes pieces from the other end; no thread waits for a piece
nobody has begun.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from mcpower.env import cpus

if TYPE_CHECKING:
    from concurrent.futures import Future, ThreadPoolExecutor

A = TypeVar("A")
B = TypeVar("B")

# Parts run beside their callers at most: half the CPUs this process may use (at least one, at
# most four). A search's model already runs on two threads; with more searches than that in flight
# the cores are busy anyway, and another thread each would only add switching between them.
WORKERS = min(max(cpus() // 2, 1), 4)

_free = threading.BoundedSemaphore(WORKERS)
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def both(here: Callable[[], A], there: Callable[[], B]) -> tuple[A, B]:
    """``(here(), there())``, with ``there`` run on a worker thread while ``here`` runs on this one.

    An exception from either is raised here, ``here``'s first; a ``there`` still running when
    ``here`` fails finishes on its own and its result is dropped.
    """
    if not _free.acquire(blocking=False):
        return here(), there()

    def beside() -> B:
        try:
            return there()
        finally:  # before the caller hears the result: its next search finds the worker free
            _free.release()

    try:
        future: Future[B] = _executor().submit(beside)
    except RuntimeError:  # the interpreter is shutting down: no new threads
        _free.release()
        return here(), there()
    first = here()
    return first, future.result()


def shared(piece: Callable[[int], None], pieces: int) -> None:
    """``piece(0)`` to ``piece(pieces - 1)``, each once, in any order and at once where it can be.

    This thread works up from 0; the rest wait in the workers' queue, last first, so a worker that
    comes free (the other part of :func:`both` done, say) works down from the end. A piece still
    queued when this thread reaches it is taken back and done here: it waits only for pieces a
    worker has begun. An exception from any piece is raised here; queued pieces are then dropped.
    """
    if pieces <= 1 or cpus() < 2:
        for i in range(pieces):
            piece(i)
        return
    # Queued pieces reach ``piece`` (and the data it holds) through ``held``, emptied when this call
    # ends: a piece taken back stays in the workers' queue, cancelled, until a worker comes to it.
    held = [piece]

    def queued_piece(i: int) -> None:
        for run in held[:1]:  # none once this call has ended (with an error: the rest are not needed)
            run(i)

    queued: dict[int, Future[None]] = {}
    try:
        for i in range(pieces - 1, 0, -1):
            queued[i] = _executor().submit(queued_piece, i)
    except RuntimeError:  # the interpreter is shutting down: the pieces not queued are done here
        pass
    try:
        piece(0)
        for i in range(1, pieces):
            future = queued.get(i)
            if future is None or future.cancel():
                piece(i)
            else:  # begun by a worker, and so is every piece after it: wait for them all
                for j in range(i, pieces):
                    queued[j].result()
                return
    finally:
        for future in queued.values():
            future.cancel()
        held.clear()


def _forget_the_pool() -> None:
    """In a forked child: the parent's worker threads do not exist there, so start afresh."""
    global _free, _pool, _pool_lock
    _free, _pool, _pool_lock = threading.BoundedSemaphore(WORKERS), None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_the_pool)


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            from concurrent.futures import ThreadPoolExecutor  # on first use: ~3 ms a cold search need not pay early

            _pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="mcpower-meanwhile")
        return _pool
