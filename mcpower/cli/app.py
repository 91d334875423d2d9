"""The typer app: the commands, and the one place a McpowerError becomes `Error: ...` and exit 1.

typer lives in the cli package and nowhere else in mcpower. The console script's entry point,
:func:`mcpower.cli.main`, imports this module only after giving a search's query model its head start.
"""

from __future__ import annotations

import gc
import importlib
from typing import Annotated, Any

import typer
from typer.core import TyperArgument, TyperGroup

from mcpower import __version__
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


_base = _typer()  # the callback only; `app` (module attribute) is the full app, built when first asked for


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


@_base.callback()
def _main(
    ctx: typer.Context,
    version: Annotated[
        bool, typer.Option("--version", is_eager=True, callback=_show_version, help="Show the version and exit.")
    ] = False,
) -> None:
    """Local knowledge search for MCP clients: ingest documents, search them, serve them over MCP."""
    if ctx.invoked_subcommand not in SHORT_COMMANDS:
        _collect_garbage()


# Every command: its name, the module of mcpower.cli that defines it, and the function (or, for a
# group, its Typer app), in the order --help lists them. A command's module is imported only when
# the command runs (or --help lists them all): `serve --stdio` and a cold `search` import no other
# command's module (~10 ms of each start on a quiet machine, with their own imports).
_COMMANDS = (
    ("ingest", "ingest", "ingest"),
    ("import", "importing", "import_"),
    ("validate", "datasets", "validate"),
    ("datasets", "datasets", "datasets"),
    ("search", "search", "search"),
    ("serve", "serve", "serve"),
    ("eval", "search", "eval_"),
)
_GROUPS = (("token", "tokens", "app"),)
_full: typer.Typer | None = None


def _register(target: typer.Typer, name: str) -> bool:
    """Add the command or group called ``name`` to ``target``; False if there is none."""
    for command, module, attr in _COMMANDS:
        if command == name:
            target.command(name)(getattr(importlib.import_module(f"mcpower.cli.{module}"), attr))
            return True
    for group, module, attr in _GROUPS:
        if group == name:
            target.add_typer(getattr(importlib.import_module(f"mcpower.cli.{module}"), attr), name=name, cls=_Group)
            return True
    return False


def full_app() -> typer.Typer:
    """The app with every command (what --help lists), built once."""
    global _full
    if _full is None:
        built = _base
        for name, _, _ in (*_COMMANDS, *_GROUPS):
            _register(built, name)
        _full = built
    return _full


def app_for(args: list[str]) -> typer.Typer:
    """The app to run for the command line ``args``: when the first names a command, one with only
    that command (and only its module imported), else the whole app (whose --help lists them all).
    typer turns every command it has into a click command before it parses anything: ~15 ms of each
    start for the six the command line does not name (the time `serve --stdio` takes to answer
    initialize, a cold search)."""
    lean = _typer()
    lean.registered_callback = _base.registered_callback
    if args and _register(lean, args[0]):
        return lean
    return full_app()


def __getattr__(name: str) -> typer.Typer:
    """``app``, the app with every command (``from mcpower.cli.app import app``), built on first use."""
    if name == "app":
        return full_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
