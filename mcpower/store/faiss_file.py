"""The FAISS file of a version, checked against its size before FAISS reads it.

FAISS trusts the length fields of a file: it sizes each array from the count stored before it and
only then reads the bytes, so a count forged upwards (a checksum can be forged with it) makes it
allocate, and fill with zeros, up to 2^40 elements before it finds the file too short (3.2 GB for
a file of 1.6 KB; the machine's memory for a larger count). This walks the layout mcpower writes
(store/local/build.py: an IndexIDMap2 around an IndexFlatIP or an IndexHNSWFlat, or an IndexIDMap
around an IndexHNSWSQ of 8-bit codes; inner product),
reading headers and counts only, and refuses any count that disagrees with the index's dimension
and vector count or does not fit in the bytes left. A file that passes holds no array larger than
itself, so FAISS allocates no more than the file's size (and its id map's reverse map, a few
dozen bytes per vector). The original format's IndexFlatIP (store/original/files.py) is read with
this header layout too, by numpy.

The layout, little-endian (faiss/impl/index_write.cpp): each index starts with a fourcc and a
header (d int32, ntotal int64, two unused int64, is_trained byte, metric int32); an array is a
uint64 count then its items.

    IxM2  header, the inner index, ids (int64 × ntotal)
    IxFI  header, codes (count in floats: ntotal × d, then 4 bytes each)
    IxMp  the same as IxM2 (an id map without the reverse map: the ids are read from it, never looked up)
    IHNf  header, assign_probas (float64 × levels), cum_nneighbor_per_level (int32 × levels + 1),
          levels (int32 × ntotal), offsets (uint64 × ntotal + 1), neighbors (int32 × offsets[-1]),
          entry_point, max_level, efConstruction, efSearch, one unused (int32 each), then an IxFI
          of the same vectors
    IHNs  the same graph, then an IxSQ of the same vectors
    IxSQ  header, the quantiser (qtype int32, rangestat int32, rangestat_arg float32, d uint64,
          code_size uint64, trained (float32 × 2 d for 8-bit codes)), codes (uint8 × ntotal × code_size)
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import Literal

ID_MAP2 = b"IxM2"
ID_MAP = b"IxMp"
FLAT_IP = b"IxFI"
HNSW_FLAT = b"IHNf"
HNSW_SQ = b"IHNs"
SCALAR_QUANTIZER = b"IxSQ"
QT_8BIT = 0  # ScalarQuantizer::QT_8bit: one byte per dimension, a range per dimension
RANGE_STATS = range(4)  # ScalarQuantizer::RangeStat: minmax, meanstd, quantiles, optim
HEADER = struct.Struct("<iqqq?i")  # after the fourcc: d, ntotal, two unused int64, is_trained, metric
METRIC_INNER_PRODUCT = 0
MAX_DIMENSION = 65536  # the manifest's limit
_COUNT = struct.Struct("<Q")
_HNSW_TAIL = struct.Struct("<5i")  # entry_point, max_level, efConstruction, efSearch, unused
_SQ_PARAMS = struct.Struct("<iifQQ")  # qtype, rangestat, rangestat_arg, d, code_size


@dataclass(frozen=True)
class IndexLayout:
    """What the file holds, as its headers say (and its size confirms)."""

    kind: Literal["flat", "hnsw", "hnsw_sq"]
    dimension: int
    count: int


def check_index_file(fd: int) -> IndexLayout:
    """The layout of the FAISS file open as ``fd``, every length field checked against the others
    and against the file's size; only headers and counts are read.

    Raises:
        ValueError: not the layout mcpower writes, or a count that disagrees or overruns the file
            (the message says which).
    """
    r = _Reader(fd)
    outer = r.take(4)
    if outer not in (ID_MAP2, ID_MAP):
        raise ValueError(f"holds a {_shown(outer)} index, not an IndexIDMap2 ('IxM2') or an IndexIDMap ('IxMp')")
    d, n = r.header("the id map")
    inner = r.take(4)
    kind: Literal["flat", "hnsw", "hnsw_sq"]
    if inner == FLAT_IP and outer == ID_MAP2:
        kind = "flat"
        r.flat(d, n)
    elif inner == HNSW_FLAT and outer == ID_MAP2:
        kind = "hnsw"
        r.hnsw(d, n)
        r.fourcc(FLAT_IP, "the HNSW graph's IndexFlatIP storage ('IxFI')")
        r.flat(d, n)
    elif inner == HNSW_SQ and outer == ID_MAP:
        kind = "hnsw_sq"
        r.hnsw(d, n)
        r.fourcc(SCALAR_QUANTIZER, "the HNSW graph's IndexScalarQuantizer storage ('IxSQ')")
        r.scalar_quantizer(d, n)
    else:
        raise ValueError(
            f"holds a {_shown(inner)} index in a {_shown(outer)} id map; mcpower writes an IndexFlatIP or an "
            "IndexHNSWFlat in an IndexIDMap2, or an IndexHNSWSQ in an IndexIDMap"
        )
    r.array("the ids", 8, n)
    if r.pos != r.size:
        raise ValueError(f"{r.size - r.pos} bytes follow the index")
    return IndexLayout(kind, d, n)


class _Reader:
    """Reads a file's fields in order by offset (pread: the descriptor's position is untouched)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.size = os.fstat(fd).st_size
        self.pos = 0

    def take(self, n: int) -> bytes:
        if n > self.size - self.pos:
            raise ValueError(f"cut short: {n} bytes wanted at offset {self.pos}, {self.size - self.pos} left")
        data = os.pread(self.fd, n, self.pos)
        if len(data) != n:
            raise ValueError("changed while it was being read")
        self.pos += n
        return data

    def fourcc(self, want: bytes, what: str) -> None:
        got = self.take(4)
        if got != want:
            raise ValueError(f"holds a {_shown(got)} index, not {what}")

    def header(self, what: str, d: int | None = None, n: int | None = None) -> tuple[int, int]:
        dim, count, _, _, trained, metric = HEADER.unpack(self.take(HEADER.size))
        if not 1 <= dim <= MAX_DIMENSION or count < 0 or not trained or metric != METRIC_INNER_PRODUCT:
            raise ValueError(f"{what}: damaged header (dimension {dim}, {count} vectors, metric {metric})")
        if d is not None and (dim, count) != (d, n):
            raise ValueError(f"{what}: {count} vectors of {dim} dimensions, but the id map says {n} of {d}")
        return dim, count

    def array(self, what: str, item: int, expected: int | None = None) -> tuple[int, int]:
        """Skip an array of ``item``-byte items: (its first item's offset, its count). The count must
        be ``expected`` (if given), and its bytes must fit in the file."""
        (count,) = _COUNT.unpack(self.take(_COUNT.size))
        if expected is not None and count != expected:
            raise ValueError(f"{what}: {count} entries, where there must be {expected}")
        if count > (self.size - self.pos) // item:
            raise ValueError(f"{what}: {count} entries of {item} bytes, but {self.size - self.pos} bytes are left")
        start = self.pos
        self.pos += count * item
        return start, count

    def flat(self, d: int, n: int) -> None:
        self.header("the vectors", d, n)
        self.array("the vectors' floats", 4, n * d)

    def hnsw(self, d: int, n: int) -> None:
        self.header("the HNSW graph", d, n)
        _, levels = self.array("the HNSW level probabilities", 8)
        self.array("the HNSW neighbours per level", 4, levels + 1)
        self.array("the HNSW levels", 4, n)
        offsets, _ = self.array("the HNSW offsets", 8, n + 1)
        (total,) = _COUNT.unpack(os.pread(self.fd, _COUNT.size, offsets + 8 * n))  # the last offset
        self.array("the HNSW neighbours", 4, total)
        entry, top, _, _, _ = _HNSW_TAIL.unpack(self.take(_HNSW_TAIL.size))
        if not (-1 <= entry < n and -1 <= top < levels):
            raise ValueError(f"the HNSW graph: entry point {entry} or top level {top} out of range")

    def scalar_quantizer(self, d: int, n: int) -> None:
        """An IndexScalarQuantizer of 8-bit codes: its header, its quantiser's fields, its codes."""
        self.header("the quantised vectors", d, n)
        qtype, rangestat, _, sq_d, code_size = _SQ_PARAMS.unpack(self.take(_SQ_PARAMS.size))
        if qtype != QT_8BIT or rangestat not in RANGE_STATS or sq_d != d or code_size != d:
            raise ValueError(
                f"the scalar quantiser: type {qtype}, {sq_d} dimensions, {code_size}-byte codes; "
                f"mcpower writes 8-bit codes (type {QT_8BIT}) of {d} dimensions"
            )
        self.array("the quantiser's ranges", 4, 2 * d)
        self.array("the quantised codes", 1, n * code_size)


def _shown(fourcc: bytes) -> str:
    """A file type code as messages show it: its letters, or its bytes in hex if they are not letters."""
    return repr(fourcc.decode()) if fourcc.isascii() and fourcc.decode().isprintable() else f"0x{fourcc.hex()}"
