"""What the commands share: option types, settings, output helpers."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from mcpower.config import Settings
from mcpower.errors import DatasetNotFoundError, McpowerError

if TYPE_CHECKING:
    from mcpower.registry import EmbedderFactory, Registry
    from mcpower.store import Catalog

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


def open_registry(
    s: Settings, embedder_factory: EmbedderFactory | None = None, *, missing_ok: bool = False
) -> Registry:
    """The registry of the datasets the settings point at; ``embedder_factory`` loads query models
    (default: the registry's own; a search passes :func:`mcpower.cli.preload.query_model`'s).

    Raises:
        EngineUnavailableError: the milvus-lite file the settings name does not exist (a reader
            never creates one), unless ``missing_ok`` (a server: it is listed as an error row).
    """
    from mcpower.registry import Registry

    missing = missing_milvus_file(s)
    if missing is not None and not missing_ok:
        from mcpower.errors import EngineUnavailableError

        raise EngineUnavailableError(
            f"the Milvus database {missing} does not exist (check --milvus-uri / MCPOWER_MILVUS_URI: a relative "
            f"path is taken from the working folder); `mcpower ingest PATH --milvus-uri {missing}` creates it"
        )
    catalogs = [milvus_catalog(s)] if s.milvus_uri else []
    return Registry(
        s.datasets_dir,
        catalogs=catalogs,
        cache_dir=s.cache_dir,
        allowed_models=s.query_models(),
        embedder_factory=embedder_factory,
    )


def milvus_catalog(s: Settings) -> Catalog:
    """The catalog of the Milvus database the settings name (pymilvus is imported when it connects)."""
    from mcpower.store.milvus import MilvusCatalog

    return MilvusCatalog(s.milvus_uri, s.milvus_token or None, cache_dir=s.cache_dir)


def missing_milvus_file(s: Settings) -> Path | None:
    """The absolute path of the milvus-lite file the settings name, if it does not exist; else None
    (also without the `milvus` extra: then the catalog's error says how to install it)."""
    if not s.milvus_uri:  # first: without a URI, the Milvus package (and numpy) stays unloaded
        return None
    import importlib.util

    from mcpower.store.milvus.client import is_local

    if not is_local(s.milvus_uri):
        return None
    if any(importlib.util.find_spec(name) is None for name in ("pymilvus", "milvus_lite")):
        return None
    path = Path(s.milvus_uri).expanduser().resolve()
    return None if path.exists() else path


def no_datasets(root: Path) -> str:
    """What to say when there are no datasets under ``root``: where that is, and what to do."""
    where = root.expanduser().resolve()
    if where.exists() and not where.is_dir():
        return f"no datasets: {where} is a file, not a folder (point --datasets-dir / MCPOWER_DATASETS_DIR at a folder)"
    if not where.exists():
        return (
            f"no datasets under {where}: the folder does not exist (create a dataset with `mcpower ingest PATH`, "
            "or point --datasets-dir / MCPOWER_DATASETS_DIR at your datasets)"
        )
    return f"no datasets under {where} (create one with `mcpower ingest PATH`)"


def error_text(e: McpowerError) -> str:
    """What the CLI says of an error: its message; for a dataset not found, where it was looked for
    (the folder, and that it does not exist), which a client of the server is never told."""
    if not isinstance(e, DatasetNotFoundError) or e.root is None:
        return e.message
    if not e.available and not e.unreadable:
        return f"unknown dataset {e.dataset_id[:80]!r}: {no_datasets(e.root)}"
    return e.located(str(e.root.expanduser().resolve()))


def setup_logging(verbose: bool = False) -> None:
    """Log records to stderr for a person: warnings as ``warning: …``, and mcpower's notices
    (information worth seeing, such as the first model export) as plain lines."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_CliFormatter())
    if not verbose:
        handler.addFilter(lambda r: r.levelno >= logging.WARNING or bool(getattr(r, "notice", False)))
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, handlers=[handler])
    if not verbose:
        logging.getLogger("mcpower").setLevel(logging.INFO)  # its notices reach the handler's filter


class _CliFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        if record.levelno < logging.WARNING:
            return message
        return f"{record.levelname.lower()}: {message}"


def print_json(data: Any) -> None:
    typer.echo(json.dumps(data, ensure_ascii=False, indent=2))
