"""`mcpower serve [--stdio] ...` without typer: what an MCP client starts, answering `initialize` sooner.

Importing typer and building the `serve` command's ~35 options is ~0.03 s of CPU (more under load)
before a server started by a client can answer. A command line that is plainly `serve` over stdio
with options given in their simple forms (``--flag``, ``--option VALUE``, ``--option=VALUE``, each
once) is read here, and served by the same :func:`mcpower.cli.serving.run_server` the typer command
ends in. Anything else — ``--help``, ``--http``, ``--print-config``, a repeated or unknown option,
a value that is empty, starts with ``-`` or is not a plain number where one is due, a setting its
rule refuses, a datasets folder that is a file, shell completion — is left to the typer command
(:func:`plan` returns None), whose messages and exit codes are therefore the only ones there are.
tests/test_serve_fast.py checks that a plan equals what the typer command passes to the settings.
"""

from __future__ import annotations

import errno
import gc
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mcpower.config import Settings

# The settings the typer command passes for `serve` (cli/serve.py), all None unless given.
SETTINGS = (
    "datasets_dir",
    "milvus_uri",
    "log_level",
    "log_format",
    "tool_names",
    "http_host",
    "http_port",
    "token_file",
    "tokens_file",
    "allow_origins",
    "allow_hosts",
    "oauth_issuer",
    "oauth_jwks",
    "oauth_audience",
    "public_url",
    "oauth_datasets_claim",
    "web",
    "watch",
    "watch_debounce",
    "refresh",
    "watch_follow_symlinks",
    "watch_code",
    "http_rate_limit",
    "http_rate_burst",
    "http_max_searches",
    "http_metrics",
    "audit_queries",
    "audit_log",
)
# Flags: the setting each sets, and to what (--stdio sets none: it is the default transport).
FLAGS: dict[str, tuple[str, bool] | None] = {
    "--stdio": None,
    "--watch": ("watch", True),
    "--watch-follow-symlinks": ("watch_follow_symlinks", True),
    "--watch-code": ("watch_code", True),
    "--no-watch-code": ("watch_code", False),
    "--audit-queries": ("audit_queries", True),
}
_NUMBER = re.compile(r"[0-9]{1,9}(\.[0-9]{1,9})?")


def _text(value: str) -> str:
    return value


def _path(value: str) -> Path:
    return Path(value)


def _seconds(low: float, high: float | None) -> Callable[[str], float | None]:
    """A plain decimal number in [low, high] (the typer option's min and max), else None."""

    def read(value: str) -> float | None:
        if not _NUMBER.fullmatch(value):
            return None
        number = float(value)
        return number if number >= low and (high is None or number <= high) else None

    return read


# Options with a value: the setting each sets, and how its text becomes the value (None: leave it to typer).
OPTIONS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "--datasets-dir": ("datasets_dir", _path),
    "--milvus-uri": ("milvus_uri", _text),
    "--watch-debounce": ("watch_debounce", _seconds(0.05, 60)),  # WatchDebounce's min and max (common.py)
    "--refresh": ("refresh", _seconds(0, None)),  # Refresh's min
    "--log-level": ("log_level", _text),
    "--log-format": ("log_format", _text),
    "--tool-names": ("tool_names", _text),
    "--audit-log": ("audit_log", _path),
}


def plan(args: list[str]) -> dict[str, Any] | None:
    """The settings overrides of ``args`` (the words after `mcpower`) when they are a plain
    `serve` over stdio, exactly as the typer command would pass them; else None."""
    if not args or args[0] != "serve" or any(k.startswith("_") and k.endswith("_COMPLETE") for k in os.environ):
        return None  # not serve, or a shell asking typer to complete a word
    overrides: dict[str, Any] = dict.fromkeys(SETTINGS)
    given: set[str] = set()
    setting: Any
    words = iter(args[1:])
    for word in words:
        name, equals, value = word.partition("=")
        if name in FLAGS and not equals:
            key, setting = FLAGS[name] or ("stdio", True)
        elif name in OPTIONS:
            key, convert = OPTIONS[name]
            value = value if equals else next(words, "")
            setting = convert(value) if value and not value.startswith("-") else None
            if setting is None:
                return None
        else:
            return None
        if key in given:
            return None  # given twice (or --watch-code with --no-watch-code): left to typer's rule
        given.add(key)
        if key != "stdio":
            overrides[key] = setting
    return overrides


def prepare(args: list[str]) -> Settings | None:
    """The settings `serve` over stdio runs with, when ``args`` are a plain such command line whose
    settings are all valid; else None (the typer command then runs, and says what is wrong)."""
    overrides = plan(args)
    if overrides is None:
        return None
    from mcpower.config import Settings

    try:
        s = Settings.load(**overrides)
    except Exception:  # InvalidSettingError, or worse: the typer command reports it, as it always has
        return None
    where = s.datasets_dir.expanduser()
    if where.exists() and not where.is_dir():  # a usage error of common.settings(): typer's to report
        return None
    return s


def serve(s: Settings) -> None:
    """Run `serve --stdio` with ``s``, ending as the typer command does: a McpowerError is
    ``Error: ...`` on stderr and exit 1 (app.py's _Group), end of input at a prompt or a closed
    pipe exit 1, Ctrl-C exit 130 (:func:`mcpower.cli.main`)."""
    from mcpower.cli.opening import error_text
    from mcpower.cli.serving import run_server
    from mcpower.errors import McpowerError

    if not gc.isenabled():  # serve is no short command: the collector is back on (app.py's callback)
        gc.freeze()
        gc.enable()
    try:
        run_server(s, http=False)
    except McpowerError as e:
        _say(f"Error: {error_text(e)}")
        raise SystemExit(1) from None
    except EOFError:
        _say("\nAborted!")
        raise SystemExit(1) from None
    except OSError as e:
        if e.errno != errno.EPIPE:
            raise
        raise SystemExit(1) from None


def _say(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()
