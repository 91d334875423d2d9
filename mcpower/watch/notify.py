"""The notify thread's loop: watchfiles over the folders being watched, each batch of changes handed on.

Each folder is watched on its own, not recursively: a recursive watch follows symlinks to folders
(inotify watches everything under ``docs/usr-link -> /usr``; a link to ``/`` would take all of the
user's inotify watches), which discovery never walks into. So the folders watched are the ones
discovery walks (not through a symlink, not into a hidden folder or a datasets folder), and a folder
that appears or goes starts a new watch over them.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
from collections.abc import Callable, Sequence

logger = logging.getLogger(__name__)

ADDED, DELETED = 1, 3  # watchfiles.Change.added, .deleted


def folders(roots: Sequence[str], skip: Sequence[str]) -> list[str]:
    """Every folder under ``roots`` that discovery may walk, the roots included: not through a
    symlink, not into a hidden folder, not into the datasets folders ``skip``."""
    skipped = set(skip)
    found: list[str] = []
    for root in roots:
        for dirpath, dirnames, _ in os.walk(root, followlinks=False):  # a symlink is listed, never entered
            found.append(dirpath)
            dirnames[:] = [d for d in dirnames if not d.startswith(".") and os.path.join(dirpath, d) not in skipped]
    return found


def _moves_folders(changes: set[tuple[int, str]], watched: set[str]) -> bool:
    """Whether ``changes`` add a folder to watch, or take away one being watched."""
    for change, path in changes:
        if change == DELETED and path in watched:
            return True
        if change == ADDED and not os.path.basename(path).startswith("."):
            try:
                if stat.S_ISDIR(os.lstat(path).st_mode):
                    return True
            except OSError:
                pass
    return False


def notify(
    roots: Callable[[], tuple[str, ...]],
    skip: Sequence[str],
    deliver: Callable[[set[tuple[int, str]]], None],
    stop: threading.Event,
    wake: threading.Event,
    force_polling: bool | None,
    retry: float,
) -> None:
    """Until ``stop``: watch the :func:`folders` of ``roots()`` and ``deliver`` every batch of
    (change, path); ``wake`` ends the current watch so the next one takes ``roots()`` anew, as does
    a batch that adds or removes a folder. A root that vanished before the watch began delivers an
    empty batch (the worker looks at the folders then); native notifications that fail (the
    inotify watch limit ...) give way to polling."""
    import watchfiles

    polling = force_polling
    while not stop.is_set():
        wake.clear()
        watched = folders([r for r in roots() if os.path.isdir(r)], skip)  # the worker reports the others
        if not watched:
            wake.wait()
            continue
        watching = set(watched)
        try:
            for changes in watchfiles.watch(
                *watched, stop_event=wake, force_polling=polling, ignore_permission_denied=True, recursive=False
            ):
                batch = {(int(change), path) for change, path in changes}
                deliver(batch)
                if _moves_folders(batch, watching):
                    break  # watch the folders as they are now
        except FileNotFoundError:
            deliver(set())
            wake.wait(1.0)
        except Exception as e:  # e.g. the inotify watch limit: polling always works
            if polling:
                logger.error("watching failed: %s", e, extra={"event": "watch.error"})
                wake.wait(retry)
            else:
                logger.warning("native file watching failed (%s); polling instead", e, extra={"event": "watch.polling"})
                polling = True
