"""What the commands share: option types, settings, output helpers."""

from __future__ import annotations

import json
import logging
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from mcpower.config import Settings
from mcpower.defaults import MANIFEST_NAME, MAX_MANIFEST_BYTES, is_valid_id

if TYPE_CHECKING:
    from mcpower.embedding import Embedder
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


def settings(**overrides: Any) -> Settings:
    """Settings with the flags the user gave (None: not given) over MCPOWER_* variables and defaults."""
    return Settings.load(**overrides)


def open_registry(s: Settings, preload_for: str | None = None) -> Registry:
    """The registry of the datasets the settings point at.

    ``preload_for``: a dataset about to be searched. If its manifest names the operator's model
    (``s.model``, the packaged one by default), that model starts loading in a thread before
    anything else, so a cold search waits for the longer of loading the model and loading the
    registry and the store, not for both one after the other.
    """
    factory = None
    if preload_for is not None and _model_hint(s.datasets_dir, preload_for) == s.model:
        factory = preloaded_query_model(s)
    from mcpower.registry import Registry

    catalogs = [milvus_catalog(s)] if s.milvus_uri else []
    return Registry(
        s.datasets_dir,
        catalogs=catalogs,
        cache_dir=s.cache_dir,
        allowed_models=s.query_models(),
        embedder_factory=factory,
    )


def _model_hint(root: Path, dataset: str) -> str | None:
    """The model a local dataset's manifest names, read as plain JSON without loading the manifest
    machinery: only a hint (the registry reads and checks the manifest in full), None if unsure."""
    if not is_valid_id(dataset):
        return None
    try:
        with open(root / dataset / MANIFEST_NAME, "rb") as f:
            data = json.loads(f.read(MAX_MANIFEST_BYTES))
        model = data["embedding"]["model"]
    except (OSError, ValueError, TypeError, KeyError):
        return None
    return model if isinstance(model, str) else None


def preloaded_query_model(s: Settings) -> EmbedderFactory:
    """A Registry's embedder factory whose ``s.model`` is already loading in a daemon thread (a
    dataset of another model loads its own when asked; a search that needs none does not wait)."""
    loaded: list[Embedder] = []
    failed: list[BaseException] = []
    done = threading.Event()

    def load(model: str) -> Embedder:  # what the Registry would do itself
        from mcpower.embedding import load_query_embedder

        return load_query_embedder(model, s.cache_dir, s.query_models())

    def preload() -> None:
        try:
            loaded.append(load(s.model))
        except BaseException as e:  # handed to whoever asks for the model
            failed.append(e)
        finally:
            done.set()

    threading.Thread(target=preload, name="mcpower-preload", daemon=True).start()

    def factory(model: str) -> Embedder:
        if model != s.model:
            return load(model)
        done.wait()
        if failed:
            raise failed[0]
        return loaded[0]

    return factory


def milvus_catalog(s: Settings) -> Catalog:
    """The catalog of the Milvus database the settings name (pymilvus is imported when it connects)."""
    from mcpower.store.milvus import MilvusCatalog

    return MilvusCatalog(s.milvus_uri, s.milvus_token or None)


def no_datasets(root: Path) -> str:
    """What to say when there are no datasets under ``root``: where that is, and what to do."""
    where = root.expanduser().resolve()
    if not where.exists():
        return (
            f"no datasets under {where}: the folder does not exist (create a dataset with `mcpower ingest PATH`, "
            "or point --datasets-dir / MCPOWER_DATASETS_DIR at your datasets)"
        )
    return f"no datasets under {where} (create one with `mcpower ingest PATH`)"


def setup_logging(verbose: bool = False) -> None:
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(message)s", stream=sys.stderr
    )


def print_json(data: Any) -> None:
    typer.echo(json.dumps(data, ensure_ascii=False, indent=2))
