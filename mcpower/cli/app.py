"""The typer app: the commands, and the one place a McpowerError becomes `Error: ...` and exit 1.

typer lives in the cli package and nowhere else in mcpower. The console script's entry point,
:func:`mcpower.cli.main`, imports this module only after giving a search's query model its head start.
"""

from __future__ import annotations

import gc
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
# garbage collector (see mcpower.cli.main). Any other command, a new one included, runs with it.
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
