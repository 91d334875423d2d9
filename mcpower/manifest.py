"""The dataset manifest: one pydantic model, safe reading, atomic writing.

A dataset folder looks like::

    datasets/<id>/
        manifest.json          the pointer: written last, replaced atomically on each publish
        v-<stamp>/index.faiss  vectors (immutable once published)
        v-<stamp>/meta.sqlite  documents, chunks, full-text index (immutable once published)
        .lock                  held by the one writer (ingest)
"""

from __future__ import annotations

import json
import os
import stat
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel

from mcpower.errors import InvalidManifestError

MANIFEST_NAME = "manifest.json"
# The seed caps manifests at 10 KB: they are pointers, never data. Checked before reading.
MAX_MANIFEST_BYTES = 10 * 1024
ID_PATTERN = r"^[a-z0-9-]+$"


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True, allow_inf_nan=False
    )


class EmbeddingInfo(_Model):
    model: str = Field(min_length=1, max_length=256)
    backend: Literal["torch", "onnx", "onnx-int8"]
    dimension: int = Field(ge=1, le=65536, strict=True)
    normalized: bool = Field(True, strict=True)
    max_tokens: int = Field(ge=8, le=65536, strict=True)
    model_fingerprint: str = Field(min_length=1, max_length=64)


class ChunkingInfo(_Model):
    chunker: str = Field(min_length=1, max_length=64)
    chunk_tokens: int = Field(ge=16, le=8192, strict=True)
    overlap: int = Field(ge=0, le=4096, strict=True)


class VectorIndexInfo(_Model):
    kind: Literal["flat", "hnsw"]
    metric: Literal["inner_product"] = "inner_product"
    hnsw_m: int | None = Field(None, ge=4, le=256, strict=True)
    ef_search: int | None = Field(None, ge=1, le=4096, strict=True)


class Counts(_Model):
    documents: int = Field(ge=0, strict=True)
    chunks: int = Field(ge=0, strict=True)


class Checksums(_Model):
    index: str = Field(pattern=r"^[0-9a-f]{64}$")
    metadata: str = Field(pattern=r"^[0-9a-f]{64}$")


class Manifest(_Model):
    """Everything needed to find, verify and search a dataset later."""

    schema_version: Literal[1] = 1
    id: str = Field(pattern=ID_PATTERN, min_length=1, max_length=64)
    name: str = Field(min_length=1, max_length=128)
    description: str = Field(min_length=1, max_length=512)
    index: str = Field(min_length=1, max_length=256)
    metadata: str = Field(min_length=1, max_length=256)
    default_top_k: int = Field(5, ge=1, le=100, strict=True)  # strict: true or "5" is not a number
    embedding: EmbeddingInfo
    chunking: ChunkingInfo
    vector_index: VectorIndexInfo
    fingerprint: str = Field(min_length=1, max_length=64)
    counts: Counts
    checksums: Checksums
    created_at: datetime
    updated_at: datetime
    mcpower_version: str = Field(min_length=1, max_length=32)

    @field_validator("name", "description")
    @classmethod
    def _not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("must not be only whitespace")
        return v

    @field_validator("index", "metadata")
    @classmethod
    def _relative_inside(cls, v: str) -> str:
        p = Path(v)
        if p.is_absolute() or "\\" in v or ".." in p.parts or "\x00" in v:
            raise ValueError("must be a relative path inside the dataset folder")
        return v

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True, indent=2) + "\n"


def read_manifest(path: Path) -> Manifest:
    """Read and validate ``path`` (a manifest.json), refusing anything odd before parsing it.

    Raises:
        InvalidManifestError: not a regular file, too big, not JSON, or breaks a schema rule.
    """
    where = f"{path.parent.name}/{path.name}"
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError as e:
        raise InvalidManifestError(f"{where}: cannot read ({e.strerror})") from e
    if not stat.S_ISREG(st.st_mode):
        raise InvalidManifestError(f"{where}: not a regular file")
    if st.st_size > MAX_MANIFEST_BYTES:
        raise InvalidManifestError(
            f"{where}: {st.st_size} bytes, over the {MAX_MANIFEST_BYTES}-byte limit for manifests"
        )
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_MANIFEST_BYTES + 1)
        data = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:  # RecursionError: `[[[[...` nesting
        raise InvalidManifestError(f"{where}: not valid UTF-8 JSON ({e})") from e
    if not isinstance(data, dict):
        raise InvalidManifestError(f"{where}: must be a JSON object")
    try:
        return Manifest.model_validate(data)
    except ValidationError as e:
        raise InvalidManifestError(f"{where}: {_describe(e)}") from e


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not allowed in a manifest")


def _describe(e: ValidationError) -> str:
    parts = []
    for err in e.errors()[:3]:
        loc = ".".join(str(x) for x in err["loc"]) or "manifest"
        parts.append(f"{loc}: {err['msg']}")
    more = f" (+{e.error_count() - 3} more)" if e.error_count() > 3 else ""
    return "; ".join(parts) + more


def write_manifest(manifest: Manifest, folder: Path) -> Path:
    """Write ``folder/manifest.json`` atomically and durably (temp file, fsync, rename, fsync dir)."""
    text = manifest.to_json()
    if len(text.encode()) > MAX_MANIFEST_BYTES:  # pragma: no cover - fields are length-capped
        raise InvalidManifestError(f"{manifest.id}: manifest would exceed {MAX_MANIFEST_BYTES} bytes")
    target = folder / MANIFEST_NAME
    tmp = folder / f".{MANIFEST_NAME}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, target)
    fsync_path(folder)
    return target


def fsync_path(path: Path) -> None:
    """Make a file's bytes, or a rename or new file in a folder, durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def now_utc() -> datetime:
    return datetime.now(timezone.utc).replace(microsecond=0)
