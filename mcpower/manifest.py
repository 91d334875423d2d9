"""What describes a dataset: :class:`DatasetInfo` (any store) and the local store's
:class:`Manifest` (``manifest.json``), with safe reading and atomic writing.

``DatasetInfo`` is everything needed to list, verify and search a dataset later, whichever store
holds it: id, names, model, chunking, fingerprint, counts, times. ``Manifest`` adds where the local
store keeps its files and their checksums (mcpower/layout.py draws the folder).
"""

from __future__ import annotations

import json
import re
import unicodedata
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.alias_generators import to_camel

from mcpower.analysis.languages import LANGUAGE_CODE
from mcpower.defaults import DEFAULT_TOP_K, MAX_PROMPT_CHARS, Backend
from mcpower.defaults import ID_PATTERN as ID_PATTERN  # the id rule and the manifest's bounds live in
from mcpower.defaults import MANIFEST_NAME as MANIFEST_NAME  # defaults.py (the cold search reads them
from mcpower.defaults import MAX_ID_CHARS as MAX_ID_CHARS  # without this module); importable from here
from mcpower.defaults import MAX_MANIFEST_BYTES as MAX_MANIFEST_BYTES
from mcpower.defaults import is_valid_id as is_valid_id
from mcpower.errors import InvalidManifestError
from mcpower.jsonfile import read_json

# File types a manifest may count documents of, and what a file type looks like.
MAX_FILE_TYPES = 64
# Languages a manifest may count chunks of (the detector tells 176 apart; a dataset holds a few).
MAX_LANGUAGES = 200
_SUFFIX = re.compile(r"\.[a-z0-9_+-]{1,15}")
# The languages a model's record may name.
MAX_MODEL_LANGUAGES = 300
_MODEL_LANGUAGE = re.compile(r"[a-z]{2,3}(?:-[a-z0-9]{2,8})?")
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
    # Put before each query and each document text when they are embedded (E5: "query: ",
    # "passage: "): searches embed queries with the dataset's own. Absent from manifests written
    # before prompts were applied, whose datasets were built without any.
    query_prompt: str = Field("", max_length=MAX_PROMPT_CHARS)
    document_prompt: str = Field("", max_length=MAX_PROMPT_CHARS)
    # The languages the model reads (ISO 639 codes, from its model card); None: not known. A search
    # weighs the semantic score of text in another language less (ranking.py).
    languages: tuple[str, ...] | None = Field(None, max_length=MAX_MODEL_LANGUAGES)

    @field_validator("languages")
    @classmethod
    def _codes(cls, v: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if v is not None and not all(_MODEL_LANGUAGE.fullmatch(code) for code in v):
            raise ValueError("must be language codes such as 'en' or 'de'")
        return v


class ChunkingInfo(_Model):
    chunker: str = Field(min_length=1, max_length=64)
    chunk_tokens: int = Field(ge=MIN_CHUNK_TOKENS, le=MAX_CHUNK_TOKENS, strict=True)
    overlap: int = Field(ge=0, le=MAX_OVERLAP, strict=True)


class VectorIndexInfo(_Model):
    # flat: exact search; hnsw: an HNSW graph over the float vectors (versions built before hnsw_sq);
    # hnsw_sq: an HNSW graph over 8-bit codes, its candidates re-scored with the exact vectors kept
    # in the manifest's ``vectors`` file (store/local/vectors.py)
    kind: Literal["flat", "hnsw", "hnsw_sq"]
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
    vectors: str | None = Field(None, pattern=r"^[0-9a-f]{64}$")  # the exact vectors of an hnsw_sq index


# The source record is the only part of a manifest whose size the user chooses (folder path, globs):
# capped so that it and the rest (about 1.5 KB as ingest writes them) stay under the 10 KB limit.
MAX_SOURCE_JSON_BYTES = 4096
MAX_SOURCE_PATH_CHARS = 1024
MAX_PATTERNS, MAX_PATTERN_CHARS = 32, 256
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _absent(value: object) -> bool:
    return value is None


class Origin(_Model):
    """Where a fetched source came from: a crawled site (``web``: its start URL) or a git
    repository (``git``: its address, the ref asked for, the commit read and the folder taken).

    Untrusted like the rest of a manifest: bounded, no control characters, the commit hex.
    """

    kind: Literal["web", "git"]
    url: str = Field(min_length=3, max_length=2048)
    ref: str | None = Field(None, max_length=256, exclude_if=_absent)
    commit: str | None = Field(None, pattern=r"^[0-9a-f]{7,64}$", exclude_if=_absent)
    subdir: str | None = Field(None, max_length=MAX_SOURCE_PATH_CHARS, exclude_if=_absent)
    fetched_at: datetime | None = Field(None, exclude_if=_absent)

    @field_validator("url", "ref", "subdir")
    @classmethod
    def _printable(cls, v: str | None) -> str | None:
        if v is not None and _CONTROL.search(v):
            raise ValueError("must not hold control characters")
        return v

    @field_validator("subdir")
    @classmethod
    def _relative(cls, v: str | None) -> str | None:
        if v is not None and (v.startswith("/") or ".." in PurePosixPath(v).parts):
            raise ValueError("must be a folder inside the repository")
        return v


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
    keep_duplicates: bool = Field(False, strict=True)  # built with --keep-duplicates (mcpower/duplicates.py)
    # A fetched source (mcpower/sources/): ``path`` is then its folder in mcpower's cache.
    origin: Origin | None = Field(None, exclude_if=_absent)

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
    """How the dataset's text was analysed into keyword terms, and the language recorded for it
    (mcpower.analysis).

    Absent in manifests written before languages were detected: their chunks' language is 'und',
    and their keyword index was made by FTS5's Porter tokenizer, as queries of it still are.
    """

    # The analysis the keyword index was built with (mcpower.analysis.analyzers.SCHEME), so a query
    # is analysed the same way; None: FTS5's Porter tokenizer (written between languages and analysis).
    scheme: Literal["mcpower-text-1"] | None = None
    # Forced with `mcpower ingest --language CODE`: every chunk is in it, and re-ingests and
    # --watch keep it; None: each chunk's language was detected.
    language: str | None = Field(None, pattern=LANGUAGE_CODE.pattern)
    # The language chunks of undetermined language ('und') were analysed as, and so are searched
    # as: the dataset's main one (mcpower.analysis.undetermined_as); None: they kept their words
    # unstemmed (no language was told, or the dataset was written before this was recorded).
    undetermined: str | None = Field(None, pattern=r"^[a-z]{2,3}$")


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
    # The exact float32 vectors beside an hnsw_sq index (absent for the other kinds).
    vectors: str | None = Field(None, min_length=1, max_length=256)
    vector_index: VectorIndexInfo
    checksums: Checksums

    @field_validator("index", "metadata", "vectors")
    @classmethod
    def _relative_inside(cls, v: str | None) -> str | None:
        return None if v is None else relative_inside(v)

    @model_validator(mode="after")
    def _vectors_file(self) -> Manifest:
        quantised = self.vector_index.kind == "hnsw_sq"
        if quantised != (self.vectors is not None) or quantised != (self.checksums.vectors is not None):
            raise ValueError(
                "vectors and checksums.vectors name the exact vectors of an hnsw_sq index, and only of one"
            )
        return self

    def to_json(self) -> str:
        """The manifest as written to disk, its keys in the order they have always had."""
        data = self.model_dump(mode="json", by_alias=True)
        embedding = data["embedding"]
        for key, empty in (("queryPrompt", ""), ("documentPrompt", ""), ("languages", None)):
            if embedding.get(key) == empty:
                embedding.pop(key)  # as manifests were written before the fields existed
        for key in ("source", "analysis"):
            if data.get(key) is None:
                data.pop(key, None)  # as manifests were written before the field existed
        if data.get("source", {}).get("keepDuplicates") is False:
            del data["source"]["keepDuplicates"]  # so that an mcpower before it still reads the manifest
        if data.get("vectors") is None:  # the same for the vectors file of an hnsw_sq index
            data.pop("vectors", None)
            data["checksums"].pop("vectors", None)
        ordered = {key: data.pop(key) for key in _KEY_ORDER if key in data}
        return json.dumps({**ordered, **data}, ensure_ascii=False, indent=2) + "\n"


# Keys in the order manifests were first written with (the Manifest fields follow DatasetInfo's in
# the model, which would move index and metadata down).
_KEY_ORDER = (
    *("schemaVersion", "id", "name", "description", "index", "metadata", "vectors", "defaultTopK", "embedding"),
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


def _describe(e: ValidationError) -> str:
    parts = []
    for err in e.errors()[:3]:
        loc = ".".join(str(x) for x in err["loc"]) or "manifest"
        parts.append(f"{loc}: {err['msg']}")
    more = f" (+{e.error_count() - 3} more)" if e.error_count() > 3 else ""
    return "; ".join(parts) + more


def now_utc() -> datetime:
    return datetime.now(timezone.utc).replace(microsecond=0)
