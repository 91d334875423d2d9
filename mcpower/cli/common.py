"""What the commands share: option types, settings, output helpers."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from mcpower.cli.notices import setup_logging as setup_logging

# What opens the registry, and what the commands say of it, live in opening.py (without typer, for
# the `serve --stdio` fast path); importable from here as before.
from mcpower.cli.opening import error_text as error_text
from mcpower.cli.opening import milvus_catalog as milvus_catalog
from mcpower.cli.opening import missing_milvus_file as missing_milvus_file
from mcpower.cli.opening import no_datasets as no_datasets
from mcpower.cli.opening import open_registry as open_registry
from mcpower.config import Settings

DatasetsDir = Annotated[
    Path | None,
    typer.Option(
        "--datasets-dir", help="Datasets root [env MCPOWER_DATASETS_DIR; default ./datasets].", show_default=False
    ),
]
MilvusUri = Annotated[
    str | None,
    typer.Option(
        "--milvus-uri",
        help="Also use the datasets in this Milvus database: a milvus-lite file (x.db) or http(s)://host:19530 "
        "[env MCPOWER_MILVUS_URI; token in MCPOWER_MILVUS_TOKEN]. Needs `pip install 'mcpower[milvus]'`.",
        show_default=False,
    ),
]
JsonFlag = Annotated[bool, typer.Option("--json", help="Print one JSON document for programs.")]
WatchDebounce = Annotated[
    float | None,
    typer.Option(
        "--watch-debounce",
        min=0.05,
        max=60,
        help="Seconds of quiet after a change before re-ingesting [env MCPOWER_WATCH_DEBOUNCE; default 1].",
        show_default=False,
    ),
]
Refresh = Annotated[
    float | None,
    typer.Option(
        "--refresh",
        min=0,
        help="With --watch: seconds between re-fetches of datasets ingested from a site or a git repository, "
        "with conditional requests (0: never) [env MCPOWER_REFRESH; default 3600].",
        show_default=False,
    ),
]


def settings(**overrides: Any) -> Settings:
    """Settings with the flags the user gave (None: not given) over MCPOWER_* variables and defaults.

    Raises:
        typer.BadParameter: a value breaks its rule, or the datasets folder is a file (usage errors: exit 2).
    """
    from mcpower.errors import InvalidSettingError

    try:
        s = Settings.load(**overrides)
    except InvalidSettingError as e:  # a usage error, named as the user gave it (exit 2, as Click does)
        raise typer.BadParameter(e.reason, param_hint=f"'{e.source}'") from None
    where = s.datasets_dir.expanduser()
    if where.exists() and not where.is_dir():
        raise typer.BadParameter(
            f"{where} is a file, not a folder: point it at the folder that holds your datasets "
            "(`mcpower ingest` creates it)",
            param_hint="'--datasets-dir' (or MCPOWER_DATASETS_DIR)",
        )
    return s


def one_of(*choices: str) -> Callable[[str | None], str | None]:
    """An option callback that accepts only ``choices``: a usage error (exit 2) names the flag and them."""

    def check(value: str | None) -> str | None:
        if value is not None and value not in choices:
            raise typer.BadParameter(f"{value!r} is not one of {', '.join(choices)}")
        return value

    return check


def print_json(data: Any) -> None:
    typer.echo(json.dumps(data, ensure_ascii=False, indent=2))
