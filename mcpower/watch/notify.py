"""The notify thread's loop: watchfiles over the folders being watched, each batch of changes handed on."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable

logger = logging.getLogger(__name__)


def notify(
    roots: Callable[[], tuple[str, ...]],
    deliver: Callable[[set[tuple[int, str]]], None],
    stop: threading.Event,
    wake: threading.Event,
    force_polling: bool | None,
    retry: float,
) -> None:
    """Until ``stop``: watch ``roots()`` and ``deliver`` every batch of (change, path); ``wake`` ends
    the current watch so the next one takes ``roots()`` anew. A root that vanished before the watch
    began delivers an empty batch (the worker looks at the folders then); native notifications that
    fail (the inotify watch limit ...) give way to polling."""
    import watchfiles

    polling = force_polling
    while not stop.is_set():
        wake.clear()
        folders = [r for r in roots() if os.path.isdir(r)]  # the worker reports the others
        if not folders:
            wake.wait()
            continue
        try:
            for changes in watchfiles.watch(
                *folders, stop_event=wake, force_polling=polling, ignore_permission_denied=True
            ):
                deliver({(int(change), path) for change, path in changes})
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
