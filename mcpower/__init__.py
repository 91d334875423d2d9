"""mcpower: local knowledge search for MCP clients.

The core API: build a dataset with :func:`ingest`, find datasets with :class:`Registry`, search
them with :meth:`Registry.search`. The CLI (`mcpower.cli`) and the MCP server (`mcpower.server`)
are thin layers over these and are not imported here. Names load on first use, so
`import mcpower` stays cheap for the CLI and the MCP handshake.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "DatasetEntry": "mcpower.registry",
    "DatasetLockedError": "mcpower.errors",
    "DatasetNotFoundError": "mcpower.errors",
    "DatasetUnavailableError": "mcpower.errors",
    "EmbeddingModelError": "mcpower.errors",
    "IndexMismatchError": "mcpower.errors",
    "IngestError": "mcpower.errors",
    "IngestReport": "mcpower.ingestion",
    "InvalidManifestError": "mcpower.errors",
    "InvalidQueryError": "mcpower.errors",
    "InvalidTopKError": "mcpower.errors",
    "KnowledgeStore": "mcpower.store",
    "Manifest": "mcpower.manifest",
    "McpowerError": "mcpower.errors",
    "Registry": "mcpower.registry",
    "ResultNotFoundError": "mcpower.errors",
    "SearchFilters": "mcpower.results",
    "SearchResponse": "mcpower.results",
    "SearchResult": "mcpower.results",
    "ingest": "mcpower.ingestion",
    "open_store": "mcpower.store",
}

__all__ = [
    "DatasetEntry",
    "DatasetLockedError",
    "DatasetNotFoundError",
    "DatasetUnavailableError",
    "EmbeddingModelError",
    "IndexMismatchError",
    "IngestError",
    "IngestReport",
    "InvalidManifestError",
    "InvalidQueryError",
    "InvalidTopKError",
    "KnowledgeStore",
    "Manifest",
    "McpowerError",
    "Registry",
    "ResultNotFoundError",
    "SearchFilters",
    "SearchResponse",
    "SearchResult",
    "__version__",
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
        IndexMismatchError,
        IngestError,
        InvalidManifestError,
        InvalidQueryError,
        InvalidTopKError,
        McpowerError,
        ResultNotFoundError,
    )
    from mcpower.ingestion import IngestReport, ingest
    from mcpower.manifest import Manifest
    from mcpower.registry import DatasetEntry, Registry
    from mcpower.results import SearchFilters, SearchResponse, SearchResult
    from mcpower.store import KnowledgeStore, open_store
