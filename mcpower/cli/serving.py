"""What `mcpower serve` does once its settings are known: set up logging, open the registry, and
run the server over stdio or HTTP, with the watcher if asked. No typer here: the `serve --stdio`
fast path (serve_fast.py) and the typer command (serve.py) both end in :func:`run_server`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from mcpower import __version__
from mcpower.cli.opening import missing_milvus_file, no_datasets, open_registry
from mcpower.config import Settings
from mcpower.errors import McpowerError

if TYPE_CHECKING:
    from mcpower.registry import Registry
    from mcpower.watch import Watcher, WatchEvent

logger = logging.getLogger("mcpower")


def run_server(s: Settings, http: bool) -> None:
    """Serve the datasets ``s`` points at, over HTTP if ``http`` else over stdio, until the
    transport ends the process.

    Raises:
        McpowerError: the audit log cannot be written, bad access settings (HTTP), ...
    """
    from mcpower.server.logging import configure_logging

    configure_logging(s.log_level, s.log_format)  # first: what the access checks warn about is logged too
    if s.audit_log is not None:
        audit_to_file(s.audit_log)
    if http:
        from mcpower.cli.serve_http import http_options

        options = http_options(s)  # bad access settings fail here, before anything loads
    else:
        options = None
    from mcpower.server.app import create_server

    missing = missing_milvus_file(s)
    if missing is not None:  # served without it (an error row), and used once an ingest creates it
        logger.warning(
            "the Milvus database %s does not exist; serving the other datasets (`mcpower ingest PATH "
            "--milvus-uri %s` creates it, and this server uses it from then on)",
            missing,
            missing,
            extra={"event": "server.milvus_missing"},
        )
    registry = open_registry(s, missing_ok=True)
    entries = registry.entries()
    logger.info(
        "server.startup",
        extra={
            "event": "server.startup",
            "version": __version__,
            "transport": "http" if http else "stdio",
            "datasets_dir": str(s.datasets_dir.expanduser().resolve()),
            **({"milvus": _display_uri(s.milvus_uri)} if s.milvus_uri else {}),
            "datasets": [e.id for e in entries if e.status == "ready"],
            "datasets_with_errors": [e.id for e in entries if e.status == "error"],
            "watch": s.watch,
        },
    )
    if not entries:
        logger.warning(no_datasets(s.datasets_dir), extra={"event": "server.no_datasets"})
    if options is not None:
        from mcpower.cli.serve_banner import announcer
        from mcpower.server.http import run_http

        # Watching starts once the port is ours: a server that cannot listen must not re-ingest anything.
        watching = lambda count: start_watcher(registry, s, count)  # noqa: E731
        run_http(registry, options, s.tool_names, on_listening=watching, announce=announcer(options))
        return
    from mcpower.server.audit import AuditLog
    from mcpower.server.stdio import run_stdio

    server = create_server(registry, s.tool_names, threads=s.worker_threads, audit=AuditLog(s.audit_queries))
    start_watcher(registry, s, server.changes.observer())  # republished datasets: clients are told
    run_stdio(server)


def audit_to_file(path: Path) -> None:
    """Also write the audit log to ``path``.

    Raises:
        McpowerError: the file cannot be opened for appending.
    """
    from mcpower.server.audit import log_to_file

    try:
        log_to_file(path)
    except OSError as e:
        raise McpowerError(
            f"cannot write the audit log {path}: {e.strerror or e}; give a file in a folder you can write to"
        ) from None


def _display_uri(uri: str) -> str:
    # The Milvus package (numpy with it) loads only for a server given a Milvus URI.
    from mcpower.store.milvus.client import display_uri

    return display_uri(uri)


def start_watcher(
    registry: Registry, s: Settings, on_event: Callable[[WatchEvent], None] | None = None
) -> Watcher | None:
    """With ``--watch``, a running Watcher over the registry's datasets (for any transport), telling
    ``on_event`` (the HTTP server's metrics) what it does.

    It is not stopped: the transports end the process, which ends a re-ingest under way as a crash
    would (crash-safe: the previous version stays) and releases the watch claims with it.
    """
    if not s.watch:
        return None
    from mcpower.watch import Watcher, WatchLimits

    # The operator's limits: what a dataset's manifest records may narrow them, never widen them.
    limits = WatchLimits(s.watch_follow_symlinks, int(s.max_file_mb * 1024 * 1024), s.watch_code, s.embedding_store_mb)
    watcher = Watcher(registry, quiet=s.watch_debounce, limits=limits, on_event=on_event)
    watcher.start()
    if s.refresh > 0:  # sites and repositories: fetched again on an interval (watch/refresh.py)
        from mcpower.watch.refresh import Refresher

        Refresher(registry, s.cache_dir, interval=s.refresh, limits=limits).start()
    return watcher
