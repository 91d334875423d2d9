"""The `mcpower` command: parse, call the core, render; errors become one line and an exit code.

Exit codes: 0 success, 1 a McpowerError or failed validation, 2 usage, 130 Ctrl-C.
Results go to stdout; progress and diagnostics to stderr. One module per group of commands:
ingest.py, importing.py, datasets.py (validate, datasets), search.py (search, eval), serve.py. typer lives here
and nowhere else in mcpower.
"""

from __future__ import annotations

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


@app.callback()
def _main(
    version: Annotated[
        bool, typer.Option("--version", is_eager=True, callback=_show_version, help="Show the version and exit.")
    ] = False,
) -> None:
    """Local knowledge search for MCP clients: ingest documents, search them, serve them over MCP."""


app.command()(ingest.ingest)
app.command("import")(importing.import_)
app.command()(datasets.validate)
app.command()(datasets.datasets)
app.command()(search.search)
app.command()(serve.serve)
app.command("eval")(search.eval_)


def main() -> None:
    """Console-script entry point."""
    app()
