"""mcpower: local knowledge search for MCP clients.

The core API: build a dataset with :func:`ingest` (:class:`IngestOptions`) — or convert one the
original system built with :func:`import_original` — find datasets with a
:class:`Registry`, search them with ``mcpower.search.search(registry, query)`` (and
``get_source`` / ``get_metadata`` there). Datasets live in a :class:`Catalog` (the local one:
:class:`LocalCatalog`) and load as :class:`Store` s. The CLI (`mcpower.cli`) and the MCP server
(`mcpower.server`) are thin layers over these and are not imported here. Names load on first use,
so `import mcpower` stays cheap for the CLI and the MCP handshake.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "Catalog": "mcpower.store",
    "DatasetEntry": "mcpower.store",
    "DatasetInfo": "mcpower.manifest",
    "DatasetLockedError": "mcpower.errors",
    "DatasetNotFoundError": "mcpower.errors",
    "DatasetUnavailableError": "mcpower.errors",
    "EmbeddingModelError": "mcpower.errors",
    "EngineAuthError": "mcpower.errors",
    "EngineUnavailableError": "mcpower.errors",
    "ImportReport": "mcpower.store.original.convert",
    "IndexMismatchError": "mcpower.errors",
    "IngestError": "mcpower.errors",
    "IngestOptions": "mcpower.ingestion",
    "IngestReport": "mcpower.ingestion",
    "InvalidManifestError": "mcpower.errors",
    "InvalidQueryError": "mcpower.errors",
    "InvalidSettingError": "mcpower.errors",
    "InvalidTopKError": "mcpower.errors",
    "LocalCatalog": "mcpower.store.local",
    "LocalStore": "mcpower.store.local.store",
    "Manifest": "mcpower.manifest",
    "McpowerError": "mcpower.errors",
    "Registry": "mcpower.registry",
    "ResultNotFoundError": "mcpower.errors",
    "SearchFilters": "mcpower.results",
    "SearchResponse": "mcpower.results",
    "SearchResult": "mcpower.results",
    "Store": "mcpower.store",
    "import_original": "mcpower.store.original.convert",
    "ingest": "mcpower.ingestion",
    "open_store": "mcpower.store.local.store",
}

__all__ = [
    "Catalog",
    "DatasetEntry",
    "DatasetInfo",
    "DatasetLockedError",
    "DatasetNotFoundError",
    "DatasetUnavailableError",
    "EmbeddingModelError",
    "EngineAuthError",
    "EngineUnavailableError",
    "ImportReport",
    "IndexMismatchError",
    "IngestError",
    "IngestOptions",
    "IngestReport",
    "InvalidManifestError",
    "InvalidQueryError",
    "InvalidSettingError",
    "InvalidTopKError",
    "LocalCatalog",
    "LocalStore",
    "Manifest",
    "McpowerError",
    "Registry",
    "ResultNotFoundError",
    "SearchFilters",
    "SearchResponse",
    "SearchResult",
    "Store",
    "__version__",
    "import_original",
    "ingest",
    "open_store",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'mcpower' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__


if TYPE_CHECKING:
    from mcpower.errors import (
        DatasetLockedError,
        DatasetNotFoundError,
        DatasetUnavailableError,
        EmbeddingModelError,
        EngineAuthError,
        EngineUnavailableError,
        IndexMismatchError,
        IngestError,
        InvalidManifestError,
        InvalidQueryError,
        InvalidSettingError,
        InvalidTopKError,
        McpowerError,
        ResultNotFoundError,
    )
    from mcpower.ingestion import IngestOptions, IngestReport, ingest
    from mcpower.manifest import DatasetInfo, Manifest
    from mcpower.registry import Registry
    from mcpower.results import SearchFilters, SearchResponse, SearchResult
    from mcpower.store import Catalog, DatasetEntry, Store
    from mcpower.store.local import LocalCatalog
    from mcpower.store.local.store import LocalStore, open_store
    from mcpower.store.original.convert import ImportReport, import_original
