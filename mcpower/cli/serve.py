"""`mcpower serve`: the MCP server, or the snippet an MCP client needs to start it."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Annotated

import typer

from mcpower import __version__
from mcpower.cli.common import DatasetsDir, WatchDebounce, no_datasets, open_registry, settings

if TYPE_CHECKING:
    from mcpower.config import Settings
    from mcpower.registry import Registry
    from mcpower.watch import Watcher

logger = logging.getLogger("mcpower")


def serve(
    stdio: Annotated[bool, typer.Option("--stdio", help="Serve MCP over stdin/stdout (the default).")] = False,
    datasets_dir: DatasetsDir = None,
    watch: Annotated[
        bool | None,
        typer.Option(
            "--watch",
            help="Re-ingest datasets when files in their source folders change [env MCPOWER_WATCH].",
            show_default=False,
        ),
    ] = None,
    watch_debounce: WatchDebounce = None,
    log_level: Annotated[
        str | None, typer.Option(help="debug, info, warning or error [env MCPOWER_LOG_LEVEL; default info].")
    ] = None,
    log_format: Annotated[str | None, typer.Option(help="json or text [env MCPOWER_LOG_FORMAT; default json].")] = None,
    tool_names: Annotated[
        str | None,
        typer.Option(help="default (knowledge_search ...) or seed (the original system's knowledge.search ...)."),
    ] = None,
    print_config: Annotated[
        str | None,
        typer.Option(
            "--print-config",
            help="Print the client config snippet and exit: claude-desktop, claude-code, vscode, cursor.",
        ),
    ] = None,
) -> None:
    """Run the MCP server over stdio (started by MCP clients; logs go to stderr as JSON lines).

    With --watch, datasets whose source folder was recorded at ingest are re-ingested as their
    files change; searches keep answering from the previous version meanwhile.
    """
    s = settings(
        datasets_dir=datasets_dir,
        log_level=log_level,
        log_format=log_format,
        tool_names=tool_names,
        watch=watch,
        watch_debounce=watch_debounce,
    )
    if print_config is not None:
        from mcpower.server.clients import client_config

        typer.echo(client_config(print_config, s.datasets_dir))
        if not any(s.datasets_dir.expanduser().glob("*/manifest.json")):
            typer.echo(f"warning: {no_datasets(s.datasets_dir)}", err=True)
        return
    from mcpower.server.logging import configure_logging

    configure_logging(s.log_level, s.log_format)
    from mcpower.server.app import create_server
    from mcpower.server.stdio import run_stdio

    registry = open_registry(s)
    entries = registry.entries()
    logger.info(
        "server.startup",
        extra={
            "event": "server.startup",
            "version": __version__,
            "transport": "stdio",
            "datasets_dir": str(s.datasets_dir.expanduser().resolve()),
            "datasets": [e.id for e in entries if e.status == "ready"],
            "datasets_with_errors": [e.id for e in entries if e.status == "error"],
            "watch": s.watch,
        },
    )
    if not entries:
        logger.warning(no_datasets(s.datasets_dir), extra={"event": "server.no_datasets"})
    server = create_server(registry, s.tool_names)
    start_watcher(registry, s)
    run_stdio(server)


def start_watcher(registry: Registry, s: Settings) -> Watcher | None:
    """With ``--watch``, a running Watcher over the registry's datasets (for any transport)."""
    if not s.watch:
        return None
    from mcpower.watch import Watcher

    watcher = Watcher(registry, quiet=s.watch_debounce)
    watcher.start()
    return watcher
