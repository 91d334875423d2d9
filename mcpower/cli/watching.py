"""`mcpower ingest PATH --watch`: after the ingest, re-ingest the folder whenever its files change."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from mcpower.config import Settings

if TYPE_CHECKING:
    from mcpower.ingestion import IngestOptions, IngestReport
    from mcpower.watch import WatchEvent


def watch_dataset(
    dataset_id: str,
    folder: Path,
    options: IngestOptions,
    s: Settings,
    embedder: Any,
    show: Callable[[IngestReport], None],
) -> None:
    """Watch the dataset's source ``folder`` until Ctrl-C or SIGTERM; each re-ingest is shown as it ends.

    The folder is the one the user named, and the re-ingests read no more than ``options`` did
    (the manifest is data: rewritten meanwhile, it cannot point the watcher elsewhere or widen them).

    Raises:
        McpowerError: the dataset cannot be watched (another process watches it ...).
    """
    from mcpower.cli.common import open_registry
    from mcpower.errors import IngestError
    from mcpower.watch import Watcher, WatchLimits

    registry = open_registry(s)
    refused: list[str] = []
    stop = threading.Event()

    def on_event(event: WatchEvent) -> None:
        if event.report is not None:
            show(event.report)
        elif event.kind == "standby":
            refused.append("another mcpower process (a server started with --watch?) already watches it")
            stop.set()
        elif event.kind == "refused":
            refused.append(event.message)
            stop.set()
        else:
            typer.echo(
                f"watch: {event.dataset}: {event.kind.replace('_', ' ')}"
                + (f": {event.message}" if event.message else ""),
                err=True,
            )

    watcher = Watcher(
        registry,
        only=[dataset_id],
        trusted={dataset_id: str(folder.expanduser().resolve())},
        limits=WatchLimits.of_ingest(
            options.include, options.code, options.follow_symlinks, options.max_file_bytes, options.embedding_store_mb
        ),
        quiet=s.watch_debounce,
        embedder_factory=lambda info: embedder,
        on_event=on_event,
    )
    typer.echo(f"watching the folder of {dataset_id} (Ctrl-C stops)", err=True)
    watcher.start()
    try:
        stop.wait()  # Ctrl-C interrupts the wait; SIGTERM raises SystemExit (cli/ingest.py)
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        watcher.stop()
        registry.close()
    if refused:
        raise IngestError(f"cannot watch {dataset_id}: {refused[0]}")
    typer.echo("stopped watching", err=True)
