"""The `mcpower` command: parse, call the core, render; errors become one line and an exit code.

Exit codes: 0 success, 1 a McpowerError or failed validation, 2 usage, 130 Ctrl-C.
Results go to stdout; progress and diagnostics to stderr. One module per group of commands:
ingest.py, importing.py, datasets.py (validate, datasets), search.py (search, eval), serve.py;
app.py puts them together, preload.py loads a search's query model while the rest starts, and
serve_fast.py runs a plain `serve --stdio` (what MCP clients start) without typer.
This module is only the entry point, and imports nothing heavy: a cold search starts here.
"""

from __future__ import annotations

import gc
import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from mcpower import env

# pydantic reads the entry points of every installed distribution, looking for plugins, when it
# builds its first model: 0.06 s of CPU in every cold command (0.2 s on a loaded machine). The
# command uses no pydantic plugin; set PYDANTIC_DISABLE_PLUGINS yourself (empty) to load them.
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")


def main() -> None:
    """Console-script entry point.

    A command starts by importing a few hundred thousand objects (typer, pydantic, numpy, faiss,
    onnxruntime), none of them garbage, and a short one such as `search` ends soon after. The cyclic
    garbage collector would walk them again and again while they load, and once more at exit:
    ~0.14 s of a 0.9 s cold search (benchmarks/suite/cold.py). So it starts off, the short commands
    (app.SHORT_COMMANDS) run without it, every other command turns it back on first, and what is
    left at exit is frozen.

    A search that will embed its query starts loading the query model before typer, pydantic and
    the commands are imported (:func:`mcpower.cli.preload.head_start`). A plain `serve --stdio`,
    what MCP clients start, runs without typer (:mod:`mcpower.cli.serve_fast`).
    """
    env.disable_telemetry()  # before anything imports onnxruntime (the head start does, just below)
    gc.disable()
    args = sys.argv[1:]
    try:
        with _ctrl_c_held():
            from mcpower.cli import preload, serve_fast

            preload.head_start(args)
            fast = serve_fast.prepare(args)  # None: any other command line, for typer
            if fast is None:
                from mcpower.cli.app import app_for

                app = app_for(args)
        if fast is not None:
            serve_fast.serve(fast)
        else:
            app()
    except KeyboardInterrupt:  # held during start-up, delivered as it ended: exit as typer does
        raise SystemExit(130) from None
    finally:
        gc.freeze()


@contextmanager
def _ctrl_c_held() -> Iterator[None]:
    """Hold Ctrl-C while the command's libraries import, and deliver it after (where main turns it
    into exit 130). Landing inside an import, it leaves modules half-imported, and numpy and
    pydantic turn it into errors of their own ("ImportError: import numpy failed", SchemaError)
    with a traceback. Start-up takes well under a second; where there is no signal mask (Windows)
    nothing is held."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
