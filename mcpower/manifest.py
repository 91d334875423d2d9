"""What describes a dataset: :class:`DatasetInfo` (any store) and the local store's
:class:`Manifest` (``manifest.json``), with safe reading and atomic writing.

``DatasetInfo`` is everything needed to list, verify and search a dataset later, whichever store
holds it: id, names, model, chunking, fingerprint, counts, times. ``Manifest`` adds where the local
store keeps its files and their checksums (mcpower/layout.py draws the folder).
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
import unicodedata
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.alias_generators import to_camel

from mcpower.analysis.languages import LANGUAGE_CODE
from mcpower.defaults import DEFAULT_TOP_K, Backend
from mcpower.defaults import ID_PATTERN as ID_PATTERN  # the id rule and the manifest's bounds live in
from mcpower.defaults import MANIFEST_NAME as MANIFEST_NAME  # defaults.py (the cold search reads them
from mcpower.defaults import MAX_ID_CHARS as MAX_ID_CHARS  # without this module); importable from here
from mcpower.defaults import MAX_MANIFEST_BYTES as MAX_MANIFEST_BYTES
from mcpower.defaults import is_valid_id as is_valid_id
from mcpower.errors import InvalidManifestError

# File types a manifest may count documents of, and what a file type looks like.
MAX_FILE_TYPES = 64
# Languages a manifest may count chunks of (the detector tells 176 apart; a dataset holds a few).
MAX_LANGUAGES = 200
_SUFFIX = re.compile(r"\.[a-z0-9_+-]{1,15}")
# Chunking bounds a manifest accepts (and ingest checks before it embeds anything).
MIN_CHUNK_TOKENS, MAX_CHUNK_TOKENS = 16, 8192
MAX_OVERLAP = 4096


def slugify(name: str) -> str:
    """A dataset id from a folder name: 'My Docs_v2' -> 'my-docs-v2', 'Café' -> 'cafe'.

    Accents are dropped (NFKD, then ASCII); a name with no Latin letters or digits ('日本語')
    gives '', which the caller reports as "cannot derive an id".
    """
    ascii_name = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode("ascii")
    return re.sub(r"[^a-z0-9]+", "-", ascii_name.lower()).strip("-")[:MAX_ID_CHARS].strip("-")


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True, allow_inf_nan=False
    )


class EmbeddingInfo(_Model):
    model: str = Field(min_length=1, max_length=256)
    backend: Backend
    dimension: int = Field(ge=1, le=65536, strict=True)
    normalized: bool = Field(True, strict=True)
    max_tokens: int = Field(ge=8, le=65536, strict=True)
    model_fingerprint: str = Field(min_length=1, max_length=64)


class ChunkingInfo(_Model):
    chunker: str = Field(min_length=1, max_length=64)
    chunk_tokens: int = Field(ge=MIN_CHUNK_TOKENS, le=MAX_CHUNK_TOKENS, strict=True)
    overlap: int = Field(ge=0, le=MAX_OVERLAP, strict=True)


class VectorIndexInfo(_Model):
    kind: Literal["flat", "hnsw"]
    metric: Literal["inner_product"] = "inner_product"
    hnsw_m: int | None = Field(None, ge=4, le=256, strict=True)
    ef_search: int | None = Field(None, ge=1, le=4096, strict=True)


def is_file_suffix(suffix: str) -> bool:
    """Whether a manifest accepts this as a file type key ('.md', '.ipynb')."""
    return _SUFFIX.fullmatch(suffix) is not None


class Counts(_Model):
    documents: int = Field(ge=0, strict=True)
    chunks: int = Field(ge=0, strict=True)
    # Documents per file type ('.md': 12); empty in manifests written before it was counted.
    file_types: dict[str, Annotated[int, Field(ge=0, strict=True)]] = Field(
        default_factory=dict, max_length=MAX_FILE_TYPES
    )

    # Chunks per language ('de': 800, 'en': 35, 'und': 4); empty in manifests written before
    # languages were detected.
    languages: dict[str, Annotated[int, Field(ge=0, strict=True)]] = Field(
        default_factory=dict, max_length=MAX_LANGUAGES
    )

    @field_validator("file_types")
    @classmethod
    def _suffixes(cls, v: dict[str, int]) -> dict[str, int]:
        if not all(_SUFFIX.fullmatch(suffix) for suffix in v):
            raise ValueError("keys must be file suffixes such as '.md'")
        return v

    @field_validator("languages")
    @classmethod
    def _codes(cls, v: dict[str, int]) -> dict[str, int]:
        if not all(LANGUAGE_CODE.fullmatch(code) for code in v):
            raise ValueError("keys must be language codes such as 'de' or 'und'")
        return v


class Checksums(_Model):
    index: str = Field(pattern=r"^[0-9a-f]{64}$")
    metadata: str = Field(pattern=r"^[0-9a-f]{64}$")


# The source record is the only part of a manifest whose size the user chooses (folder path, globs):
# capped so that it and the rest (about 1.5 KB as ingest writes them) stay under the 10 KB limit.
MAX_SOURCE_JSON_BYTES = 4096
MAX_SOURCE_PATH_CHARS = 1024
MAX_PATTERNS, MAX_PATTERN_CHARS = 32, 256
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class SourceInfo(_Model):
    """Where a dataset was ingested from and how, so `--watch` can ingest it again the same way.

    Read from disk, so untrusted: the path must be absolute and free of control characters, and it
    is never shown to MCP clients.
    """

    path: str = Field(min_length=2, max_length=MAX_SOURCE_PATH_CHARS)
    include: tuple[str, ...] = Field((), max_length=MAX_PATTERNS)
    exclude: tuple[str, ...] = Field((), max_length=MAX_PATTERNS)
    follow_symlinks: bool = Field(False, strict=True)
    max_file_bytes: int = Field(ge=1, le=1 << 40, strict=True)
    code: bool = Field(False, strict=True)  # built with --code (source files read too)
    keep_site_files: bool = Field(False, strict=True)  # built with --keep-site-files (mcpower/sites.py)

    @field_validator("path")
    @classmethod
    def _absolute(cls, v: str) -> str:
        if not PurePosixPath(v).is_absolute() or _CONTROL.search(v) or ".." in PurePosixPath(v).parts:
            raise ValueError("must be an absolute folder path without control characters or '..'")
        return v

    @field_validator("include", "exclude")
    @classmethod
    def _patterns(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if any(len(p) > MAX_PATTERN_CHARS or _CONTROL.search(p) for p in v):
            raise ValueError(f"patterns must be at most {MAX_PATTERN_CHARS} characters, without control characters")
        return v

    @model_validator(mode="after")
    def _small(self) -> SourceInfo:
        if len(self.model_dump_json(by_alias=True).encode()) > MAX_SOURCE_JSON_BYTES:
            raise ValueError(f"the source record must take at most {MAX_SOURCE_JSON_BYTES} bytes")
        return self


class AnalysisInfo(_Model):
    """How the dataset's text was analysed: the language recorded for it (mcpower.analysis).

    Absent in manifests written before languages were detected: their chunks' language is 'und'.
    """

    # Forced with `mcpower ingest --language CODE`: every chunk is in it, and re-ingests and
    # --watch keep it; None: each chunk's language was detected.
    language: str | None = Field(None, pattern=LANGUAGE_CODE.pattern)


class DatasetInfo(_Model):
    """Everything needed to list, verify and search a dataset later, whichever store holds it."""

    # Whose format the dataset is in: mcpower's own, or the original system's (store/original/),
    # which is served read-only. A class attribute, not a field: manifests do not record it.
    format: ClassVar[Literal["mcpower", "original"]] = "mcpower"

    schema_version: Literal[1] = 1
    id: str = Field(pattern=ID_PATTERN, min_length=1, max_length=MAX_ID_CHARS)
    name: str = Field(min_length=1, max_length=128)
    description: str = Field(min_length=1, max_length=512)
    default_top_k: int = Field(DEFAULT_TOP_K, ge=1, le=100, strict=True)  # strict: true or "5" is not a number
    embedding: EmbeddingInfo
    chunking: ChunkingInfo
    fingerprint: str = Field(min_length=1, max_length=64)
    counts: Counts
    created_at: datetime
    updated_at: datetime
    mcpower_version: str = Field(min_length=1, max_length=32)
    # Datasets ingested before the source folder was recorded have none (and cannot be watched).
    source: SourceInfo | None = None
    analysis: AnalysisInfo | None = None

    @field_validator("name", "description")
    @classmethod
    def _not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("must not be only whitespace")
        return v


class Manifest(DatasetInfo):
    """The local store's ``manifest.json``: the dataset's info, its files and their checksums."""

    index: str = Field(min_length=1, max_length=256)
    metadata: str = Field(min_length=1, max_length=256)
    vector_index: VectorIndexInfo
    checksums: Checksums

    @field_validator("index", "metadata")
    @classmethod
    def _relative_inside(cls, v: str) -> str:
        return relative_inside(v)

    def to_json(self) -> str:
        """The manifest as written to disk, its keys in the order they have always had."""
        data = self.model_dump(mode="json", by_alias=True)
        for key in ("source", "analysis"):
            if data.get(key) is None:
                data.pop(key, None)  # as manifests were written before the field existed
        ordered = {key: data.pop(key) for key in _KEY_ORDER if key in data}
        return json.dumps({**ordered, **data}, ensure_ascii=False, indent=2) + "\n"


# Keys in the order manifests were first written with (the Manifest fields follow DatasetInfo's in
# the model, which would move index and metadata down).
_KEY_ORDER = (
    *("schemaVersion", "id", "name", "description", "index", "metadata", "defaultTopK", "embedding"),
    *("chunking", "vectorIndex", "fingerprint", "counts", "checksums", "createdAt", "updatedAt", "mcpowerVersion"),
)


def relative_inside(v: str) -> str:
    """``v`` if it is a relative path that stays inside the dataset folder by its text (no ``..``,
    absolute path, backslash or NUL); symlinks are checked when the file is opened (layout.resolve_inside).

    Raises:
        ValueError: it is not.
    """
    p = Path(v)
    if p.is_absolute() or "\\" in v or ".." in p.parts or "\x00" in v:
        raise ValueError("must be a relative path inside the dataset folder")
    return v


def read_manifest(path: Path) -> Manifest:
    """Read and validate ``path`` (a manifest.json), refusing anything odd before parsing it.

    The file is opened once (no symlink followed, without blocking) and that descriptor is checked
    and read, so what is checked is what is read.

    Raises:
        InvalidManifestError: not a regular file, too big, not JSON, or breaks a schema rule.
    """
    where = f"{path.parent.name}/{path.name}"
    data = read_manifest_json(path)
    try:
        return Manifest.model_validate(data)
    except ValidationError as e:
        raise InvalidManifestError(f"{where}: {_describe(e)}") from e


def read_manifest_json(path: Path) -> dict[str, Any]:
    """The JSON object in ``path`` (a manifest.json of any format), read as safely as :func:`read_manifest` does.

    Raises:
        InvalidManifestError: not a regular file, too big, not a JSON object.
    """
    where = f"{path.parent.name}/{path.name}"
    try:
        data = read_json(path, MAX_MANIFEST_BYTES, "manifests")
    except ValueError as e:
        raise InvalidManifestError(f"{where}: {e}") from e
    if not isinstance(data, dict):
        raise InvalidManifestError(f"{where}: must be a JSON object")
    return data


def read_json(path: Path, max_bytes: int, what: str, max_values: int | None = None) -> Any:
    """The JSON value in the regular file ``path`` of at most ``max_bytes`` bytes (and, if given,
    at most about ``max_values`` values: parsed, each costs ~60-90 bytes however short its text).

    The file is opened once (no symlink followed, without blocking) and that descriptor is checked
    and read, so what is checked is what is read; its size is checked before anything is read, its
    values are counted before it is parsed.

    Raises:
        ValueError: what was wrong, for a message (no path in it): unreadable, not a regular file,
            over the limits for ``what``, not UTF-8 JSON, NaN or Infinity, nested too deeply.
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError as e:
        raise ValueError(
            "not a regular file (a symlink)" if e.errno == errno.ELOOP else f"cannot read ({e.strerror})"
        ) from e
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError("not a regular file")
        if st.st_size > max_bytes:
            raise ValueError(f"{st.st_size} bytes, over the {max_bytes}-byte limit for {what}")
        parts, size = [], 0
        while size <= max_bytes and (block := os.read(fd, max_bytes + 1 - size)):  # the file may have grown
            parts.append(block)
            size += len(block)
    except OSError as e:
        raise ValueError(f"cannot read ({e.strerror})") from e
    finally:
        os.close(fd)
    if size > max_bytes:
        raise ValueError(f"over the {max_bytes}-byte limit for {what}")
    data = b"".join(parts)
    del parts
    if max_values is not None:
        # Every value but the first follows a , : [ or { (one in a string is counted too: an upper bound).
        values = 1 + sum(data.count(c) for c in (b",", b":", b"[", b"{"))
        if values > max_values:
            raise ValueError(f"~{values} values (counting , : [ and {{), over the {max_values}-value limit for {what}")
    try:
        text = data.decode("utf-8")
        del data  # not held beside the text while it is parsed
        return json.loads(text, parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as e:  # RecursionError: `[[[[...` nesting
        raise ValueError(f"not valid UTF-8 JSON ({e})") from e


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not allowed")


def _describe(e: ValidationError) -> str:
    parts = []
    for err in e.errors()[:3]:
        loc = ".".join(str(x) for x in err["loc"]) or "manifest"
        parts.append(f"{loc}: {err['msg']}")
    more = f" (+{e.error_count() - 3} more)" if e.error_count() > 3 else ""
    return "; ".join(parts) + more


def now_utc() -> datetime:
    return datetime.now(timezone.utc).replace(microsecond=0)
