"""What mcpower keeps in Milvus: collection names, schemas and indexes, rows <-> records.

Per dataset version, two collections (``<prefix>_<id>__v<N>_chunks`` and ``..._docs``); per Milvus
database one catalogue collection, ``<prefix>_catalog``, holding a pointer record per dataset
(``dataset:<id>`` -> its current collections and its DatasetInfo) and a lease record per dataset
being written (``lease:<id>``). Publishing a version is one upsert of the pointer record.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeGuard

from mcpower.analysis.analyzers import analysis_language, index_terms
from mcpower.analysis.languages import UNDETERMINED
from mcpower.errors import InvalidManifestError
from mcpower.store import ChunkHit, ChunkRow, DocumentRow

# Bumped when the collections change shape; a pointer record of another version is refused.
SCHEMA_VERSION = 1
# Versions of one dataset are numbered from 1, one per publish: a billion is more than will ever be
# published, and a record or collection name claiming more is not one mcpower wrote.
MAX_VERSION = 1_000_000_000
PREFIX = "mcpower"
CATALOG = f"{PREFIX}_catalog"
# Servers count VARCHAR lengths in UTF-8 bytes (milvus-lite does not check at all): checked here.
MAX_VARCHAR = 65535
PATH_BYTES, TITLE_BYTES, HEADING_BYTES = 8192, 8192, 16384
CONTENT_PART_BYTES = 60000  # a document's text is kept in parts of at most this many bytes
# BM25 over title, heading path and text. A dataset analysed by mcpower.analysis (its info's
# analysis.scheme) keeps the analysed terms in a field of their own, split at spaces by the engine's
# whitespace tokenizer: the engine indexes exactly the local store's terms. One written before used
# the engine's English analyzer on the text (standard tokenizer, lower case, stemmer, stop words).
ANALYZER = {"type": "english"}
TERMS_ANALYZER = {"tokenizer": "whitespace"}
BM25_K1, BM25_B = 1.2, 0.75
# Rows per insert: 500-1,000 is fastest on milvus-lite 2.5; 5,000 is pathologically slow there.
INSERT_BATCH = 500
REQUEST_CHARS = 2_000_000  # document rows per insert: at most this much text (13 MB requests crawled)
PAD_DIM = 2  # the catalogue and documents collections need a vector field; never searched

CHUNK_DISPLAY = ("id", "doc_id", "ordinal", "heading_path", "start_line", "end_line", "body", "text_at")
CHUNK_DOC = ("path", "title", "file_type")
CHUNK_FIELDS = (*CHUNK_DISPLAY, *CHUNK_DOC)
# The pages a chunk of a PDF is on (0: none), and the chunk's language; collections written before
# PDF support or languages lack them (read as no pages, 'und').
PAGE_FIELDS = ("page_start", "page_end")
OPTIONAL_FIELDS = (*PAGE_FIELDS, "language")
LANGUAGE_BYTES = 16
DOC_FACTS = ("doc_id", "path", "title", "file_type", "size", "mtime", "content_hash", "indexed_at")


def slug(dataset_id: str) -> str:
    """The dataset id as collection names allow (letters, digits, underscores): '-' -> '_'.
    Dataset ids have no '_', so this is one-to-one."""
    return dataset_id.replace("-", "_")


def collection_names(dataset_id: str, version: int) -> tuple[str, str]:
    """(chunks, documents) collection names of one version of a dataset."""
    base = f"{PREFIX}_{slug(dataset_id)}__v{version}"
    return f"{base}_chunks", f"{base}_docs"


def version_of(dataset_id: str, collection: str) -> int | None:
    """The version number if ``collection`` belongs to the dataset, else None."""
    m = re.fullmatch(rf"{PREFIX}_{re.escape(slug(dataset_id))}__v([1-9]\d{{0,9}})_(?:chunks|docs)", collection)
    return int(m.group(1)) if m and int(m.group(1)) <= MAX_VERSION else None


@dataclass(frozen=True)
class Pointer:
    """A dataset's pointer record, parsed: which collections hold its current version."""

    dataset_id: str
    version: int
    chunks: str
    docs: str
    info: dict[str, Any]  # DatasetInfo as JSON (validated by the catalog)
    schema: int


def read_pointer(dataset_id: str, value: object, where: str) -> Pointer:
    """The pointer record ``value`` of a dataset, each field checked strictly: anyone who can write
    to the database may have written it (a version ``"1e5"``, ``true`` or ``-1`` is refused, not
    converted).

    Raises:
        InvalidManifestError: naming the field that breaks its rule.
    """
    if not isinstance(value, dict):
        raise InvalidManifestError(f"{where}: its pointer record is not an object; re-ingest it")
    schema = value.get("schema")
    if not is_count(schema) or schema != SCHEMA_VERSION:
        raise InvalidManifestError(
            f"{where}: written by another mcpower version (Milvus schema {shown(schema)}; this mcpower "
            f"reads schema {SCHEMA_VERSION}); use that version, or re-ingest the dataset with this one"
        )
    missing = [k for k in ("version", "chunks", "docs", "info") if k not in value]
    if missing:
        raise InvalidManifestError(f"{where}: its pointer record lacks {missing[0]!r}; re-ingest it")
    version, chunks, docs, info = value["version"], value["chunks"], value["docs"], value["info"]
    if not is_count(version) or not 1 <= version <= MAX_VERSION:
        raise InvalidManifestError(
            f"{where}: its pointer record's version is {shown(version)}, not a whole number from 1 to "
            f"{MAX_VERSION}; re-ingest it"
        )
    if (chunks, docs) != collection_names(dataset_id, version):
        raise InvalidManifestError(f"{where}: its pointer record names other collections; re-ingest it")
    if not isinstance(info, dict):
        raise InvalidManifestError(f"{where}: its pointer record's info is {shown(info)}, not an object; re-ingest it")
    return Pointer(dataset_id, version, chunks, docs, info, SCHEMA_VERSION)


def is_count(value: object) -> TypeGuard[int]:
    """Whether a JSON value is a whole number: an int, not a bool (``True == 1``) nor a float."""
    return type(value) is int


def shown(value: object) -> str:
    """A value of a record as a message shows it: a number or a short text as it is, anything
    else by its type (a deep list has no repr Python can print)."""
    if isinstance(value, (bool, int, float)) or value is None:
        return str(value)[:24]
    return repr(value[:24]) if isinstance(value, str) else f"a {type(value).__name__}"


def catalog_schema(pymilvus: Any) -> tuple[Any, Any]:
    dt = pymilvus.DataType
    s = pymilvus.MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
    s.add_field("key", dt.VARCHAR, is_primary=True, max_length=512)
    s.add_field("kind", dt.VARCHAR, max_length=32)
    s.add_field("value", dt.JSON)
    s.add_field("updated_ms", dt.INT64)
    s.add_field("pad", dt.FLOAT_VECTOR, dim=PAD_DIM)
    return s, _pad_index(pymilvus)


def chunks_schema(pymilvus: Any, dimension: int, analysed: bool = True) -> tuple[Any, Any]:
    """The chunks collection's schema and indexes; ``analysed``: BM25 over the ``terms`` field (the
    analysed title, heading path and text), else over ``body`` with the engine's English analyzer."""
    dt = pymilvus.DataType
    s = pymilvus.MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
    s.add_field("id", dt.INT64, is_primary=True)  # store.chunk_id(): result ids mean the same everywhere
    s.add_field("doc_id", dt.INT64)
    s.add_field("ordinal", dt.INT32)
    s.add_field("path", dt.VARCHAR, max_length=PATH_BYTES)
    s.add_field("title", dt.VARCHAR, max_length=TITLE_BYTES)
    s.add_field("file_type", dt.VARCHAR, max_length=64)
    s.add_field("heading_path", dt.VARCHAR, max_length=HEADING_BYTES)
    s.add_field("start_line", dt.INT32)
    s.add_field("end_line", dt.INT32)
    s.add_field("page_start", dt.INT32)
    s.add_field("page_end", dt.INT32)
    s.add_field("language", dt.VARCHAR, max_length=LANGUAGE_BYTES)
    # body = title, heading path, then the chunk's text from character text_at on (stored once).
    if analysed:
        s.add_field("body", dt.VARCHAR, max_length=MAX_VARCHAR)
        s.add_field("terms", dt.VARCHAR, max_length=MAX_VARCHAR, enable_analyzer=True, analyzer_params=TERMS_ANALYZER)
    else:
        s.add_field("body", dt.VARCHAR, max_length=MAX_VARCHAR, enable_analyzer=True, analyzer_params=ANALYZER)
    s.add_field("text_at", dt.INT32)
    s.add_field("sparse", dt.SPARSE_FLOAT_VECTOR)  # filled by the BM25 function
    s.add_field("dense", dt.FLOAT_VECTOR, dim=dimension)
    s.add_function(
        pymilvus.Function(
            name="body_bm25",
            function_type=pymilvus.FunctionType.BM25,
            input_field_names=["terms" if analysed else "body"],
            output_field_names=["sparse"],
        )
    )
    ip = pymilvus.MilvusClient.prepare_index_params()
    # FLAT: exact, like the local store below 50k chunks, and one of the three types milvus-lite
    # runs (FLAT, IVF_FLAT, AUTOINDEX); a server may be given HNSW by re-indexing the collection.
    ip.add_index(field_name="dense", index_type="FLAT", metric_type="IP")
    ip.add_index(
        field_name="sparse",
        index_type="SPARSE_INVERTED_INDEX",
        metric_type="BM25",
        params={"bm25_k1": BM25_K1, "bm25_b": BM25_B},
    )
    return s, ip


def docs_schema(pymilvus: Any) -> tuple[Any, Any]:
    dt = pymilvus.DataType
    s = pymilvus.MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
    s.add_field("key", dt.INT64, is_primary=True)  # doc_id << 20 | part
    s.add_field("doc_id", dt.INT64)
    s.add_field("part", dt.INT32)
    s.add_field("path", dt.VARCHAR, max_length=PATH_BYTES)
    s.add_field("title", dt.VARCHAR, max_length=TITLE_BYTES)
    s.add_field("file_type", dt.VARCHAR, max_length=64)
    s.add_field("size", dt.INT64)
    s.add_field("mtime", dt.DOUBLE)
    s.add_field("content_hash", dt.VARCHAR, max_length=64)
    s.add_field("indexed_at", dt.VARCHAR, max_length=64)
    s.add_field("content", dt.VARCHAR, max_length=MAX_VARCHAR)
    s.add_field("pad", dt.FLOAT_VECTOR, dim=PAD_DIM)
    return s, _pad_index(pymilvus)


def _pad_index(pymilvus: Any) -> Any:
    ip = pymilvus.MilvusClient.prepare_index_params()
    ip.add_index(field_name="pad", index_type="FLAT", metric_type="L2")
    return ip


# ---------------------------------------------------------------- rows


def fits(value: str, max_bytes: int) -> bool:
    return len(value.encode("utf-8", "surrogatepass")) <= max_bytes


def chunk_rows(
    chunks: list[ChunkRow],
    docs: dict[int, DocumentRow],
    vectors: Any,
    start: int,
    stop: int,
    analysed: bool = True,
    undetermined: str | None = None,
) -> list[dict[str, Any]]:
    """Rows of ``chunks[start:stop]`` for the chunks collection (vectors: row i of chunks[i]); chunks
    of undetermined language analysed as ``undetermined`` (the manifest's)."""
    rows = []
    for i in range(start, stop):
        c = chunks[i]
        d = docs[c.document_id]
        prefix = f"{d.title}\n{c.heading_path}\n"
        rows.append(
            {
                "id": c.id,
                "doc_id": c.document_id,
                "ordinal": c.ordinal,
                "path": d.path,
                "title": d.title,
                "file_type": d.file_type,
                "heading_path": c.heading_path,
                "start_line": c.start_line,
                "end_line": c.end_line,
                "page_start": c.page_start or 0,
                "page_end": c.page_end or 0,
                "language": c.language[:LANGUAGE_BYTES],
                "body": prefix + c.text,
                "text_at": len(prefix),
                "dense": vectors[i],
            }
        )
        if analysed:
            rows[-1]["terms"] = analysed_terms(prefix + c.text, analysis_language(c.language, undetermined))
    return rows


def analysed_terms(text: str, language: str) -> str:
    """The terms of ``text`` in ``language`` as the engine's field holds them: separated by spaces,
    cut at a term boundary within MAX_VARCHAR bytes (a CJK chunk's pairs take three times its bytes)."""
    terms = " ".join(index_terms(text, language))
    data = terms.encode("utf-8", "surrogatepass")
    if len(data) <= MAX_VARCHAR:
        return terms
    return data[:MAX_VARCHAR].decode("utf-8", "ignore").rsplit(" ", 1)[0]


def too_long(chunks: Iterable[ChunkRow], docs: dict[int, DocumentRow]) -> str | None:
    """What of the build breaks a server's VARCHAR limits (in UTF-8 bytes), or None."""
    for d in docs.values():
        if not fits(d.path, PATH_BYTES) or not fits(d.title, TITLE_BYTES):
            return f"{d.path[:80]!r}: its path or title is over the engine's limit"
    for c in chunks:
        d = docs[c.document_id]
        if not fits(c.heading_path, HEADING_BYTES) or not fits(f"{d.title}\n{c.heading_path}\n{c.text}", MAX_VARCHAR):
            return f"{d.path[:80]!r}: a chunk is over the engine's {MAX_VARCHAR}-byte text limit"
    return None


def hit_of(row: dict[str, Any]) -> ChunkHit:
    body = str(row["body"])
    return ChunkHit(
        id=int(row["id"]),
        ordinal=int(row["ordinal"]),
        heading_path=str(row["heading_path"]),
        start_line=int(row["start_line"]),
        end_line=int(row["end_line"]),
        text=body[int(row["text_at"]) :],
        path=str(row["path"]),
        title=str(row["title"]),
        file_type=str(row["file_type"]),
        document_id=int(row["doc_id"]),
        page_start=int(row.get("page_start") or 0) or None,
        page_end=int(row.get("page_end") or 0) or None,
        language=str(row.get("language") or UNDETERMINED)[:LANGUAGE_BYTES],
    )


def split_utf8(text: str, max_bytes: int = CONTENT_PART_BYTES) -> list[str]:
    """``text`` in parts of at most ``max_bytes`` UTF-8 bytes, cut between characters."""
    parts: list[str] = []
    current: list[str] = []
    size = 0
    for ch in text:
        n = len(ch.encode("utf-8", "surrogatepass"))
        if size + n > max_bytes:
            parts.append("".join(current))
            current, size = [], 0
        current.append(ch)
        size += n
    parts.append("".join(current))
    return parts


def doc_rows(docs: Iterable[DocumentRow]) -> Iterator[dict[str, Any]]:
    for d in docs:
        for part, content in enumerate(split_utf8(d.content)):
            yield {
                "key": (d.id << 20) | part,
                "doc_id": d.id,
                "part": part,
                "path": d.path,
                "title": d.title,
                "file_type": d.file_type,
                "size": d.size,
                "mtime": d.mtime,
                "content_hash": d.content_hash,
                "indexed_at": d.indexed_at,
                "content": content,
                "pad": [0.0] * PAD_DIM,
            }


def document_of(parts: list[dict[str, Any]]) -> DocumentRow:
    """A document from its rows (any order), its content joined from the parts."""
    parts = sorted(parts, key=lambda r: int(r["part"]))
    first = parts[0]
    return DocumentRow(
        id=int(first["doc_id"]),
        path=str(first["path"]),
        title=str(first["title"]),
        file_type=str(first["file_type"]),
        size=int(first["size"]),
        mtime=float(first["mtime"]),
        content_hash=str(first["content_hash"]),
        indexed_at=str(first["indexed_at"]),
        content="".join(str(r["content"]) for r in parts),
    )
