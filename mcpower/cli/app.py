"""The typer app: the commands, and the one place a McpowerError becomes `Error: ...` and exit 1.

typer lives in the cli package and nowhere else in mcpower. The console script's entry point,
:func:`mcpower.cli.main`, imports this module only after giving a search's query model its head start.
"""

from __future__ import annotations

import gc
from typing import Annotated, Any

import typer
from typer.core import TyperArgument, TyperGroup
from typer.models import CommandInfo

from mcpower import __version__
from mcpower.cli import datasets, importing, ingest, search, serve, tokens
from mcpower.cli.common import error_text
from mcpower.errors import McpowerError

# How --help names the values of options and arguments, Click's way (an upper-case word, or the
# choices in brackets) instead of typer's `<str>` and `{path}`; other names go by type (_by_type).
METAVARS = {
    "path": "PATH",
    "ids": "ID",
    "dataset": "DATASET",
    "query": "QUERY",
    "dataset_id": "ID",
    "name": "TEXT",
    "description": "TEXT",
    "datasets_dir": "DIR",
    "milvus_uri": "URI",
    "model": "MODEL",
    "backend": "[onnx|onnx-int8|torch]",
    "include": "GLOB",
    "exclude": "GLOB",
    "max_file_mb": "MB",
    "watch_debounce": "SECONDS",
    "file_type": "SUFFIX",
    "folder": "FOLDER",
    "queries": "FILE",
    "qrels": "FILE",
    "log_level": "[debug|info|warning|error]",
    "log_format": "[json|text]",
    "tool_names": "[default|seed]",
    "print_config": "CLIENT",
}


def _by_type(param: Any) -> str:
    described = getattr(param, "type_descriptor", None)  # typer's record of the annotation
    if getattr(described, "is_path", False):
        return "PATH"
    return {int: "N", float: "NUMBER"}.get(getattr(described, "annotation", str), "TEXT")


class _Argument(TyperArgument):
    """An argument in --help as Click shows one: `PATH`, `[QUERY]`, `[ID]...` (no `{PATH}`, no `<str>`)."""

    def display_type_rich(self, ctx: Any) -> str:
        return ""

    def _usage_display_name(self) -> str:
        name = self.display_name_raw if self.required else f"[{self.display_name_raw}]"
        return name + ("..." if self.nargs != 1 else "")


class _Group(TyperGroup):
    """Translates McpowerError into `Error: ...` on stderr and exit 1 — the one place that does —
    and names every value in --help (METAVARS)."""

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        command = super().get_command(ctx, cmd_name)
        for param in command.params if command is not None else []:
            flag = getattr(param, "is_flag", False) or getattr(param, "count", False)
            if param.metavar is None and not flag and param.name:
                param.metavar = METAVARS.get(param.name) or _by_type(param)
            if type(param) is TyperArgument:
                param.__class__ = _Argument
        return command

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except McpowerError as e:
            typer.echo(f"Error: {error_text(e)}", err=True)
            raise typer.Exit(1) from None


def _typer() -> typer.Typer:
    return typer.Typer(
        cls=_Group,
        help="Local knowledge search for MCP clients: ingest documents, search them, serve them over MCP.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_show_locals=False,
        rich_markup_mode=None,
        context_settings={"help_option_names": ["-h", "--help"]},
    )


app = _typer()


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"mcpower {__version__}")
        raise typer.Exit()


# Commands that end soon after they start, whatever the datasets: they run without the cyclic
# garbage collector (see mcpower.cli.main). Any other command, a new one included, runs with it.
SHORT_COMMANDS = frozenset({"search", "validate", "datasets", "token"})


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
app.add_typer(tokens.app, name="token", cls=_Group)


def app_for(args: list[str]) -> typer.Typer:
    """The app to run for the command line ``args``: when the first names a command, one with only
    that command, else the whole app (whose --help lists them all). typer turns every command it
    has into a click command before it parses anything: ~15 ms of each start for the six the
    command line does not name (the time `serve --stdio` takes to answer initialize, a cold search)."""
    named = [c for c in app.registered_commands if args and args[0] == _command_name(c)]
    groups = [g for g in app.registered_groups if args and args[0] == g.name]
    if not named and not groups:
        return app
    lean = _typer()
    lean.registered_callback = app.registered_callback
    lean.registered_commands = named
    lean.registered_groups = groups
    return lean


def _command_name(command: CommandInfo) -> str:
    name = command.name or (command.callback.__name__ if command.callback else "")
    return name.lower().replace("_", "-")  # typer's own rule for a name taken from the function
