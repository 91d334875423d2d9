"""The `mcpower` command: parse, call the core, render; errors become one line and an exit code.

Exit codes: 0 success, 1 a McpowerError or failed validation, 2 usage, 130 Ctrl-C.
Results go to stdout; progress and diagnostics to stderr. One module per group of commands:
ingest.py, importing.py, datasets.py (validate, datasets), search.py (search, eval), serve.py. typer lives here
and nowhere else in mcpower.
"""

from __future__ import annotations

import gc
import os

# pydantic reads the entry points of every installed distribution, looking for plugins, when it
# builds its first model: 0.06 s of CPU in every cold command (0.2 s on a loaded machine). The
# command uses no pydantic plugin; set PYDANTIC_DISABLE_PLUGINS yourself (empty) to load them.
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from mcpower import __version__
from mcpower.cli import datasets, importing, ingest, search, serve
from mcpower.errors import McpowerError


class _Group(TyperGroup):
    """Translates McpowerError into `Error: ...` on stderr and exit 1 — the one place that does."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except McpowerError as e:
            typer.echo(f"Error: {e.message}", err=True)
            raise typer.Exit(1) from None


app = typer.Typer(
    cls=_Group,
    help="Local knowledge search for MCP clients: ingest documents, search them, serve them over MCP.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
    rich_markup_mode=None,
)


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"mcpower {__version__}")
        raise typer.Exit()


# Commands that end soon after they start, whatever the datasets: they run without the cyclic
# garbage collector (see main). Any other command, a new one included, runs with it.
SHORT_COMMANDS = frozenset({"search", "validate", "datasets"})


def _collect_garbage() -> None:
    """Turn the collector back on if main() turned it off; what is loaded so far is frozen first,
    so collections walk only what the command allocates from here on."""
    if not gc.isenabled():
        gc.freeze()
        gc.enable()


@app.callback()
def _main(
    ctx: typer.Context,
    version: Annotated[
        bool, typer.Option("--version", is_eager=True, callback=_show_version, help="Show the version and exit.")
    ] = False,
) -> None:
    """Local knowledge search for MCP clients: ingest documents, search them, serve them over MCP."""
    if ctx.invoked_subcommand not in SHORT_COMMANDS:
        _collect_garbage()


app.command()(ingest.ingest)
app.command("import")(importing.import_)
app.command()(datasets.validate)
app.command()(datasets.datasets)
app.command()(search.search)
app.command()(serve.serve)
app.command("eval")(search.eval_)


def main() -> None:
    """Console-script entry point.

    A command starts by importing a few hundred thousand objects (typer, pydantic, numpy, faiss,
    onnxruntime), none of them garbage, and a short one such as `search` ends soon after. The cyclic
    garbage collector would walk them again and again while they load, and once more at exit:
    ~0.14 s of a 0.9 s cold search (benchmarks/suite/cold.py). So it starts off, the short commands
    (:data:`SHORT_COMMANDS`) run without it, and every other command turns it back on first
    (:func:`_collect_garbage`).
    """
    gc.disable()
    try:
        app()
    finally:
        gc.freeze()
