"""Reading a dataset of the original format from disk, trusting nothing in it.

Every file is checked before it is used: the manifest against seed 000's schema, its two paths
against the dataset folder, the metadata file's size before it is read and its JSON shape after,
the FAISS file's header and size before a byte of its vectors is read. FAISS itself never parses
the file: an ``IndexFlatIP`` is a fixed header and a float32 array, read here with numpy, a block
at a time, each block checked before the next is read.
"""

from __future__ import annotations

import io
import os
import stat
import struct
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, BinaryIO

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel

from mcpower.defaults import DEFAULT_TOP_K
from mcpower.errors import DatasetUnavailableError, IndexMismatchError, InvalidManifestError
from mcpower.jsonfile import read_json
from mcpower.layout import Stamp, resolve_inside, resolve_within, stamp_of
from mcpower.manifest import ID_PATTERN, MAX_ID_CHARS, relative_inside
from mcpower.results import replace_surrogates
from mcpower.store.faiss_file import FLAT_IP, HEADER, MAX_DIMENSION, METRIC_INNER_PRODUCT

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

# The manifest keys seed 000 defines; a manifest with these and no others is in the original format.
ORIGINAL_KEYS = frozenset({"id", "name", "description", "index", "metadata", "defaultTopK"})
REQUIRED_KEYS = ORIGINAL_KEYS - {"defaultTopK"}
# The model the original bridge embeds queries with when the metadata names none (python/bridge.py).
ORIGINAL_DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
# The metadata file is parsed whole (the original format has nothing else); this bounds the memory
# that takes (~1.5x the file for the original indexer's records, ~3.5 KB a chunk: ~70,000 chunks;
# for a file of tiny values, MAX_METADATA_VALUES does).
MAX_METADATA_BYTES = 256 * 1024 * 1024
# A parsed JSON value costs ~60-90 bytes however short its text (`[],` is 3 bytes and a 64-byte
# list): a file of tiny values would take ~22x its size, 5.6 GB at the byte limit. Values are
# counted before parsing (by the , : [ { that precede them, those in text included: fastapi-seed
# has one per 46 bytes, 5.6M at the byte limit), and more than this many are refused: ~1.4 GB.
MAX_METADATA_VALUES = 16_000_000
# The vectors are held in memory whole (the format has nothing else to serve them from). At the
# metadata limit the original indexer's ~70,000 chunks take ~100 MB (384 dimensions); ten times
# that is allowed, and a file that promises more is refused before anything is read or parsed.
MAX_VECTOR_BYTES = 1024 * 1024 * 1024
# The vectors are read and checked this many bytes at a time: a file of bad vectors is refused
# after its first bad block, not after all of it was held.
VECTOR_BLOCK_BYTES = 4 * 1024 * 1024
# Seed 000 caps result paths at 512 characters; longer ones are refused, not cut (they are ids here).
MAX_PATH_CHARS = 512
MAX_TITLE_CHARS = 256
# The FAISS file of an IndexFlatIP: fourcc, the index header (d int32, ntotal int64, two int64
# fields FAISS no longer uses, is_trained byte, metric int32), the number of floats that follow (uint64).
_HEADER = struct.Struct("<4s" + HEADER.format.lstrip("<") + "Q")
# How far from 1 a stored vector's length may be (float32 rounding of normalised rows is ~1e-7).
UNIT_TOLERANCE = 1e-3


class OriginalManifest(BaseModel):
    """Seed 000's DatasetManifest, with its rules; paths must stay inside the dataset folder."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)

    id: str = Field(pattern=ID_PATTERN, min_length=1, max_length=MAX_ID_CHARS)
    name: str = Field(min_length=1, max_length=128)
    description: str = Field(min_length=1, max_length=512)
    index: str = Field(min_length=1, max_length=256)
    metadata: str = Field(min_length=1, max_length=256)
    default_top_k: int = Field(DEFAULT_TOP_K, ge=1, le=100, strict=True)

    @field_validator("name", "description")
    @classmethod
    def _not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("must not be only whitespace")
        return v

    @field_validator("index", "metadata")
    @classmethod
    def _inside(cls, v: str) -> str:
        try:
            return relative_inside(v)
        except ValueError:
            raise ValueError(
                "must be a relative path inside the dataset folder (the original system also took absolute "
                "paths; mcpower serves only files inside the dataset's own folder: move them there)"
            ) from None


@dataclass(frozen=True, slots=True)  # slots: a dataset may hold hundreds of thousands
class Record:
    """One chunk record of the metadata file, as mcpower uses it."""

    path: str
    title: str  # never empty: the record's title, else the path's file name (seed 000's rule)
    content: str


@dataclass(frozen=True)
class OriginalDataset:
    """A dataset of the original format, read and checked (vectors excepted: :func:`read_vectors`)."""

    folder: Path
    manifest: OriginalManifest
    index_file: str  # the FAISS file, relative to the folder
    records: list[Record]
    model: str  # as the metadata names it (the original default when it names none)
    dimension: int
    created_at: datetime
    updated_at: datetime
    stamps: tuple[Stamp, Stamp]  # of the metadata and FAISS files, taken before they were read

    @property
    def id(self) -> str:
        return self.manifest.id

    @property
    def index_path(self) -> Path:
        """The FAISS file, symlinks resolved (and checked to stay inside the folder again)."""
        return resolve_inside(self.folder, self.index_file)


def is_original_manifest(data: dict[str, Any]) -> bool:
    """Whether a manifest's JSON object has seed 000's fields and no others."""
    return REQUIRED_KEYS <= data.keys() <= ORIGINAL_KEYS


def parse_manifest(folder: Path, data: dict[str, Any]) -> OriginalManifest:
    """Raises InvalidManifestError naming the rule ``data`` breaks."""
    try:
        return OriginalManifest.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(x) for x in err["loc"]) or "manifest"
        raise InvalidManifestError(
            f"{folder.name}/manifest.json (original format): {loc}: {err['msg']}"
            + (f" (+{e.error_count() - 1} more)" if e.error_count() > 1 else "")
        ) from e


def read_dataset(folder: Path, data: dict[str, Any]) -> OriginalDataset:
    """Read and check the dataset whose manifest object (already read safely) is ``data``.

    Raises:
        InvalidManifestError: the manifest breaks seed 000's rules, or a path leaves the folder or is missing.
        IndexMismatchError: the metadata or FAISS file is malformed, or they disagree.
        DatasetUnavailableError: there are no chunks.
    """
    manifest = parse_manifest(folder, data)
    name = manifest.id
    meta_path = resolve_inside(folder, manifest.metadata)
    index_file = _index_file(folder, manifest.index)
    index_path = resolve_inside(folder, index_file)
    # Stamped before reading: a file replaced meanwhile then looks changed.
    stamps = file_stamps(folder, manifest.metadata, index_file)
    d, ntotal = read_header(index_path, f"{name}: {index_file}")
    meta = f"{name}: {manifest.metadata}"
    try:
        raw = read_json(meta_path, MAX_METADATA_BYTES, "metadata files", MAX_METADATA_VALUES)
    except ValueError as e:
        raise IndexMismatchError(f"{meta}: {e}") from e
    stats: Any = {}
    created: Any = None
    if isinstance(raw, list):
        documents, model = raw, ORIGINAL_DEFAULT_MODEL
    elif isinstance(raw, dict) and isinstance(raw.get("documents"), list):
        documents, model = raw["documents"], raw.get("model", ORIGINAL_DEFAULT_MODEL)
        stats, created = raw.get("stats") or {}, raw.get("createdAt")
        if not isinstance(model, str) or not model.strip():
            raise IndexMismatchError(f"{meta}: 'model' must be a model name")
        if not isinstance(stats, dict):
            raise IndexMismatchError(f"{meta}: 'stats' must be an object")
    else:
        raise IndexMismatchError(f"{meta}: must be a list of chunk records or an object with a 'documents' list")
    records: list[Record] = []
    documents.reverse()
    while documents:  # each parsed record is dropped as it is converted: the two are not held whole at once
        records.append(_record(documents.pop(), len(records) + 1, meta))
    if not records:
        raise DatasetUnavailableError(f"{meta}: has no chunk records; there is nothing to search")
    if ntotal != len(records):
        raise IndexMismatchError(
            f"{name}: counts disagree ({index_file} holds {ntotal} vectors, {manifest.metadata} {len(records)} "
            "records); the original system pairs them by position, so neither can be trusted"
        )
    _check_stat(stats, "totalChunks", len(records), f"{meta}: stats.totalChunks", "records")
    _check_stat(stats, "embeddingDimensions", d, f"{meta}: stats.embeddingDimensions", f"dimensions in {index_file}")
    created_at = _time(created, f"{meta}: createdAt") or _file_time(stamps[0][1])
    return OriginalDataset(
        folder=folder,
        manifest=manifest,
        index_file=index_file,
        records=records,
        model=replace_surrogates(model.strip()),
        dimension=d,
        created_at=created_at,
        updated_at=_time(stats.get("indexedAt"), f"{meta}: stats.indexedAt") or created_at,
        stamps=stamps,
    )


def file_stamps(folder: Path, metadata: str, index_file: str) -> tuple[Stamp, Stamp]:
    """The stamps of a dataset's metadata and FAISS files (symlinks followed), as :func:`read_dataset` takes them."""
    return stamp_of((folder / metadata).resolve()), stamp_of((folder / index_file).resolve())


def read_header(path: Path, where: str) -> tuple[int, int]:
    """(dimension, vector count) of the IndexFlatIP file ``path``, checked against its size.

    Raises:
        IndexMismatchError: not an IndexFlatIP file (another FAISS index, not FAISS, cut short, padded).
    """
    with _open_regular(path, where) as f:
        return _header(f, where)


def read_vectors(ds: OriginalDataset) -> NDArray[np.float32]:
    """The dataset's vectors, one row per record, checked finite and of unit length.

    Read into one array a block at a time, each block checked before the next is read: no other
    copy of them is made, and a file of bad vectors is refused after its first bad block.

    Raises:
        IndexMismatchError: the file changed since it was checked, or a vector is not a unit vector.
    """
    import numpy as np

    where = f"{ds.id}: {ds.index_file}"
    with _open_regular(ds.index_path, where) as f:  # the header checked is that of the bytes read
        d, n = _header(f, where)
        if (d, n) != (ds.dimension, len(ds.records)):
            raise IndexMismatchError(f"{where}: changed while it was being read; try again")
        f.seek(_HEADER.size)
        vectors = np.empty((n, d), dtype="<f4")  # within MAX_VECTOR_BYTES: _header refused more
        rows = max(1, VECTOR_BLOCK_BYTES // (4 * d))
        for start in range(0, n, rows):
            block = vectors[start : start + rows]
            try:
                got = f.readinto(block.data.cast("B"))
            except OSError as e:
                raise IndexMismatchError(f"{where}: cannot read its vectors ({e.strerror})") from e
            if got != block.nbytes:
                raise IndexMismatchError(f"{where}: changed while it was being read; try again")
            _check_unit(block, start, where)
    return vectors.astype(np.float32, copy=False)  # the same array where float32 is little-endian


def _check_unit(block: NDArray[Any], start: int, where: str) -> None:
    """Raises IndexMismatchError if a row of ``block`` (rows ``start``… of the file) is not a finite unit vector."""
    import numpy as np

    finite = np.isfinite(block).all(axis=1)
    if not finite.all():
        raise IndexMismatchError(f"{where}: vector {start + int(np.argmin(finite))} holds NaN or infinity")
    norms = np.sqrt(np.einsum("ij,ij->i", block, block, dtype=np.float64))
    off = np.flatnonzero(np.abs(norms - 1.0) > UNIT_TOLERANCE)
    if off.size:
        raise IndexMismatchError(
            f"{where}: vector {start + int(off[0])} has length {float(norms[off[0]]):.4g}, not 1 "
            f"({off.size} such among vectors {start}-{start + len(block) - 1}); "
            "the original format stores L2-normalised vectors, and inner products of others are not cosines"
        )


def _open_regular(path: Path, where: str) -> io.BufferedReader:
    """``path`` (symlinks resolved) opened for reading, following no symlink and without blocking:
    a symlink or FIFO swapped in since it was checked is refused, not followed or waited on."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError as e:
        raise IndexMismatchError(f"{where}: cannot read ({e.strerror})") from e
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise IndexMismatchError(f"{where}: not a regular file")
    return os.fdopen(fd, "rb")


def _header(f: BinaryIO, where: str) -> tuple[int, int]:
    head = f.read(_HEADER.size)
    size = os.fstat(f.fileno()).st_size
    if len(head) < _HEADER.size or head[:4] != FLAT_IP:
        kind = f"a FAISS {head[:4].decode('ascii', 'replace')!r} index" if head[:2] == b"Ix" else "not a FAISS index"
        raise IndexMismatchError(
            f"{where}: {kind}; the original format stores an IndexFlatIP (file type 'IxFI'), the only kind served"
        )
    _, d, ntotal, _, _, trained, metric, floats = _HEADER.unpack(head)
    if not 1 <= d <= MAX_DIMENSION or ntotal < 0 or not trained or metric != METRIC_INNER_PRODUCT:
        raise IndexMismatchError(f"{where}: damaged IndexFlatIP header (dimension {d}, {ntotal} vectors)")
    if floats != ntotal * d or size != _HEADER.size + 4 * floats:
        raise IndexMismatchError(
            f"{where}: {size} bytes, but its header promises {ntotal} vectors of {d} floats "
            f"({_HEADER.size + 4 * ntotal * d} bytes); the file is cut short or damaged"
        )
    if 4 * floats > MAX_VECTOR_BYTES:
        raise IndexMismatchError(
            f"{where}: {ntotal} vectors of {d} floats take {4 * floats / 2**20:,.0f} MiB, over the "
            f"{MAX_VECTOR_BYTES // 2**20:,} MiB mcpower holds in memory for a dataset of the original format "
            "(its metadata limit fits ~70,000 chunks of the original indexer, ~100 MiB of vectors)"
        )
    return d, ntotal


def _index_file(folder: Path, index: str) -> str:
    """The FAISS file ``index`` names, relative to ``folder``: the file itself, or in a folder the
    first ``*.index`` or ``*.faiss`` file by name, as the original bridge picks it.

    Raises:
        InvalidManifestError: it leaves the folder, is missing, or holds no index file.
    """
    target = resolve_within(folder, index)
    try:
        mode = os.stat(target).st_mode
    except OSError as e:
        raise InvalidManifestError(f"{folder.name}: index {index!r} is missing ({e.strerror})") from e
    if not stat.S_ISDIR(mode):
        resolve_inside(folder, index)  # a regular file, not a FIFO or a device
        return index
    try:
        with os.scandir(target) as entries:
            names = sorted(e.name for e in entries if e.name.endswith((".index", ".faiss")))
    except OSError as e:
        raise InvalidManifestError(f"{folder.name}: cannot list index folder {index!r} ({e.strerror})") from e
    if not names:
        raise InvalidManifestError(f"{folder.name}: index folder {index!r} holds no *.index or *.faiss file")
    rel = (PurePosixPath(index) / names[0]).as_posix()
    resolve_inside(folder, rel)
    return rel


def _record(r: object, n: int, where: str) -> Record:
    if not isinstance(r, dict):
        raise IndexMismatchError(f"{where}: record {n} is not an object")
    path, title, content = r.get("path"), r.get("title"), r.get("content", r.get("snippet"))
    if not isinstance(path, str) or not path.strip() or len(path) > MAX_PATH_CHARS or "\x00" in path:
        raise IndexMismatchError(
            f"{where}: record {n}: 'path' must be a text of 1-{MAX_PATH_CHARS} characters (the document it came from)"
        )
    if not isinstance(content, str):
        raise IndexMismatchError(f"{where}: record {n}: 'content' must be text (the chunk's words)")
    if title is not None and not isinstance(title, str):
        raise IndexMismatchError(f"{where}: record {n}: 'title' must be text")
    path = replace_surrogates(path)
    title = replace_surrogates(title or "").strip() or PurePosixPath(path).name or path
    return Record(path=path, title=title[:MAX_TITLE_CHARS], content=replace_surrogates(content))


def _check_stat(stats: dict[str, Any], key: str, actual: int, where: str, what: str) -> None:
    value = stats.get(key)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value != actual):
        raise IndexMismatchError(f"{where} says {str(value)[:40]}, but there are {actual} {what}")


def _time(value: object, where: str) -> datetime | None:
    """An ISO 8601 time of the metadata as an aware UTC datetime; None if absent or unreadable
    (the metadata file's modification time stands in).

    Raises:
        IndexMismatchError: a time that reads but lies outside the years 1-9999 once in UTC
            (``9999-12-31T23:59:59-23:59``): no indexer wrote it, and no date type holds it.
    """
    if not isinstance(value, str):
        return None
    try:
        t = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    try:
        t = t.replace(tzinfo=timezone.utc) if t.tzinfo is None else t.astimezone(timezone.utc)
    except OverflowError:
        raise IndexMismatchError(
            f"{where} {value[:40]!r} is out of range (in UTC it falls outside the years 1-9999); correct or remove it"
        ) from None
    return t.replace(microsecond=0)


def _file_time(mtime_ns: int) -> datetime:
    """A file's modification time as an aware UTC datetime; the epoch if it is out of range (a
    file system may hold times no date type does)."""
    try:
        return datetime.fromtimestamp(mtime_ns / 1e9, timezone.utc).replace(microsecond=0)
    except (OverflowError, OSError, ValueError):
        return datetime.fromtimestamp(0, timezone.utc)
