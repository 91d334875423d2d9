"""What the commands open and say without typer: the registry the settings point at, where there
are no datasets, how an error reads. The `serve --stdio` fast path (serve_fast.py) starts with these
and no command line library; common.py re-exports them for the typer commands."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from mcpower.config import Settings
from mcpower.errors import DatasetNotFoundError, McpowerError

if TYPE_CHECKING:
    from mcpower.registry import EmbedderFactory, Registry
    from mcpower.store import Catalog


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
