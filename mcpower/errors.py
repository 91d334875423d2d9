"""Every error mcpower raises on purpose.

    McpowerError                    base; ``code`` is the stable machine-readable name
    ├── DatasetNotFoundError        DATASET_NOT_FOUND   no dataset with that id (lists the ids there are)
    ├── DatasetUnavailableError     DATASET_UNAVAILABLE the dataset exists but cannot be loaded
    │   ├── InvalidManifestError    INVALID_MANIFEST    manifest.json is unreadable or breaks a rule
    │   ├── IndexMismatchError      INDEX_MISMATCH      files disagree with the manifest (counts, checksums, dims)
    │   └── EngineUnavailableError  ENGINE_UNAVAILABLE  a search engine (Milvus) is unreachable or not installed
    │       └── EngineAuthError     ENGINE_AUTH         the engine refused the credentials
    ├── ResultNotFoundError         RESULT_NOT_FOUND    a result_id that no dataset holds
    ├── InvalidQueryError           INVALID_QUERY       empty / too long query, bad filter, bad mode
    ├── InvalidTopKError            INVALID_TOP_K       top_k outside 1..100
    ├── EmbeddingModelError         EMBEDDING_MODEL     the model cannot be loaded, or differs from the dataset's
    ├── IngestError                 INGEST_FAILED       nothing to ingest, unreadable source, bad id ...
    ├── DatasetLockedError          DATASET_LOCKED      another ingest holds the dataset's write lock
    └── InvalidSettingError         INVALID_SETTING     a flag or MCPOWER_* variable breaks its rule

Messages name the dataset or path *relative to where the user works* and say how to fix the problem;
the CLI prints them as one line and the MCP server returns them as tool errors.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

# What a caller who sees no dataset is told, when none exists (registry.Registry.none_here).
NO_DATASETS_YET = "there are no datasets yet: create one with `mcpower ingest PATH`"


class McpowerError(Exception):
    """Base of every error mcpower raises on purpose."""

    code = "MCPOWER_ERROR"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class DatasetNotFoundError(McpowerError):
    code = "DATASET_NOT_FOUND"

    SHOWN = 20  # ids named in the message; the rest are counted

    def __init__(
        self,
        dataset_id: str,
        available: list[str],
        unreadable: Sequence[str] = (),
        root: Path | None = None,
        none_here: str = NO_DATASETS_YET,
    ) -> None:
        """``unreadable``: why the places that could hold it could not be read (a Milvus database
        held by another process, unreachable ...): said, since the dataset may be there. ``root``:
        the datasets folder it was looked for in, kept for the CLI (:meth:`located`), never in the
        message a client reads. ``none_here``: what is said when there is no dataset to name
        (``Registry.none_here``: to a caller whose token grants none, that it grants none)."""
        self.dataset_id = dataset_id
        self.available = available
        self.unreadable = list(unreadable)
        self.root = root
        self.none_here = none_here
        super().__init__(self.located(""))

    def located(self, where: str) -> str:
        """The message, saying ``where`` the dataset was looked for (``""``: nowhere named)."""
        available = self.available
        shown = ", ".join(available[: self.SHOWN]) if available else "none"
        if not available and not self.unreadable:
            shown += f" ({self.none_here})"
        if len(available) > self.SHOWN:
            shown += (
                f" and {len(available) - self.SHOWN} more (list them with knowledge_list_datasets / `mcpower datasets`)"
            )
        message = (
            f"unknown dataset {self.dataset_id[:80]!r}{f' under {where}' if where else ''}; available datasets: {shown}"
        )
        if self.unreadable:
            message += f"; it may be in a database that could not be read: {'; '.join(self.unreadable)}"
        return message


class DatasetUnavailableError(McpowerError):
    code = "DATASET_UNAVAILABLE"


class InvalidManifestError(DatasetUnavailableError):
    code = "INVALID_MANIFEST"


class IndexMismatchError(DatasetUnavailableError):
    code = "INDEX_MISMATCH"


class EngineUnavailableError(DatasetUnavailableError):
    code = "ENGINE_UNAVAILABLE"


class EngineAuthError(EngineUnavailableError):
    code = "ENGINE_AUTH"


class ResultNotFoundError(McpowerError):
    code = "RESULT_NOT_FOUND"


class InvalidQueryError(McpowerError):
    code = "INVALID_QUERY"


class InvalidTopKError(McpowerError):
    code = "INVALID_TOP_K"


class EmbeddingModelError(McpowerError):
    code = "EMBEDDING_MODEL"


class IngestError(McpowerError):
    code = "INGEST_FAILED"


class DatasetLockedError(McpowerError):
    code = "DATASET_LOCKED"


class InvalidSettingError(McpowerError):
    """A setting's value breaks its rule; ``source`` names where it came from (the flag as the user
    typed it, or the MCPOWER_* variable), ``reason`` what is wrong, so the CLI can report it as a
    usage error of that flag."""

    code = "INVALID_SETTING"

    def __init__(self, source: str, reason: str) -> None:
        super().__init__(f"{source}: {reason}")
        self.source = source
        self.reason = reason
