"""mcpower: local knowledge search for MCP clients.

The core API: build a dataset with :func:`ingest`, find datasets with :class:`Registry`, search
them with :meth:`Registry.search`. The CLI (`mcpower.cli`) and the MCP server (`mcpower.server`)
are thin layers over these and are not imported here.
"""

__version__ = "0.1.0"

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
from mcpower.ingest import IngestReport, ingest
from mcpower.manifest import Manifest
from mcpower.registry import DatasetEntry, Registry
from mcpower.results import SearchFilters, SearchResponse, SearchResult
from mcpower.store import KnowledgeStore, open_store

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
