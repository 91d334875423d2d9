"""The local store's files: their names, the SQLite schema, and how rows map to records.

One SQLite database per version holds documents, chunks, an FTS5 index over chunk text, title and
heading path (contentless: the text lives in ``chunks``), and the per-term BM25 postings derived
from it (keyword.py). Columns are named like the fields of the records in ``mcpower.store``, and
rows are read and written by those names, never by position.
"""

from __future__ import annotations

import sqlite3
from dataclasses import fields
from typing import Any, TypeVar

from mcpower.store import ChunkHit, ChunkRow, DocumentRow
from mcpower.store.local.fts import ANALYSED_TOKENIZER, FTS_TOKENIZER

INDEX_FILE = "index.faiss"
METADATA_FILE = "meta.sqlite"

DOCUMENTS = "documents"
CHUNKS = "chunks"
FTS = "chunks_fts"
FTS_DOCSIZE = f"{FTS}_docsize"  # FTS5's own table of per-row column sizes
POSTINGS = "keyword_postings"
# The FTS5 columns, in order; bm25() weights follow this order.
FTS_COLUMNS = ("text", "title", "heading_path")
# Chunk columns added with PDF pages: databases written before lack them, and read as no pages.
PAGE_COLUMNS = ("page_start", "page_end")
# Chunk columns added since the first schema, and what a database without them reads as: no
# pages; language undetermined (written before languages were detected).
OPTIONAL_COLUMNS = {"page_start": "NULL", "page_end": "NULL", "language": "'und'"}

TABLES = f"""
CREATE TABLE {DOCUMENTS} (
    id INTEGER PRIMARY KEY,
    path TEXT NOT NULL UNIQUE,
    title TEXT NOT NULL,
    file_type TEXT NOT NULL,
    size INTEGER NOT NULL,
    mtime REAL NOT NULL,
    content_hash TEXT NOT NULL,
    indexed_at TEXT NOT NULL,
    content TEXT NOT NULL
);
CREATE TABLE {CHUNKS} (
    id INTEGER PRIMARY KEY,
    document_id INTEGER NOT NULL REFERENCES {DOCUMENTS}(id),
    ordinal INTEGER NOT NULL,
    heading_path TEXT NOT NULL,
    start_line INTEGER NOT NULL,
    end_line INTEGER NOT NULL,
    text TEXT NOT NULL,
    page_start INTEGER,
    page_end INTEGER,
    language TEXT NOT NULL DEFAULT 'und',
    UNIQUE (document_id, ordinal)
);
"""


def schema(analysed: bool) -> str:
    """The database's tables. ``analysed``: the FTS5 index holds terms mcpower.analysis made (its
    tokenizer only splits them apart); else FTS5's Porter tokenizer makes them, as before analysis."""
    tokenizer = ANALYSED_TOKENIZER if analysed else FTS_TOKENIZER
    return (
        TABLES
        + f"CREATE VIRTUAL TABLE {FTS} USING fts5({', '.join(FTS_COLUMNS)}, content='', tokenize='{tokenizer}');\n"
    )


SCHEMA = schema(analysed=False)
POSTINGS_SCHEMA = f"""
CREATE TABLE {POSTINGS} (
    term TEXT PRIMARY KEY,
    chunk_rows BLOB NOT NULL,  -- int32 positions in the ascending chunk ids
    impacts BLOB NOT NULL      -- float32 BM25 contribution of the term to each of those chunks
);
"""

R = TypeVar("R", DocumentRow, ChunkRow, ChunkHit)


def columns(record: type[Any]) -> list[str]:
    return [f.name for f in fields(record)]


def insert_sql(table: str, record: type[Any]) -> str:
    names = columns(record)
    return f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})"


def select_sql(table: str, record: type[DocumentRow] | type[ChunkRow], missing: frozenset[str] = frozenset()) -> str:
    """SELECT of the record's columns; those ``missing`` from an older database read as their default."""
    names = [OPTIONAL_COLUMNS[name] if name in missing else name for name in columns(record)]
    return f"SELECT {', '.join(names)} FROM {table}"


# A chunk with its document's fields: chunk columns by name, the document's under the hit's names.
_HIT_SOURCES = {
    **{name: f"d.{name}" for name in ("path", "title", "file_type", "indexed_at", "size", "mtime")},
    "document_id": "d.id",
}


def hit_sql(missing: frozenset[str] = frozenset(), text: bool = True) -> str:
    """SELECT of :class:`ChunkHit` rows (``missing`` as in :func:`select_sql`); without ``text``, each
    chunk's text reads as '' (ranking and grouping decide by place; only the chosen need their text)."""
    sources = [
        "''"
        if name == "text" and not text
        else _HIT_SOURCES.get(name, OPTIONAL_COLUMNS[name] if name in missing else "c." + name)
        for name in columns(ChunkHit)
    ]
    return f"SELECT {', '.join(sources)} FROM {CHUNKS} c JOIN {DOCUMENTS} d ON d.id = c.document_id"


HIT_SQL = hit_sql()


def values(record: DocumentRow | ChunkRow) -> tuple[Any, ...]:
    """The record's fields in column order (for executemany with :func:`insert_sql`)."""
    return tuple(getattr(record, name) for name in columns(type(record)))


def check_schema(db: sqlite3.Connection) -> None:
    """Raise sqlite3.Error unless every table and column that search reads is there.

    A file another version or tool wrote (its checksum recorded by hand) must fail here, at load,
    not in the middle of a search of every dataset.
    """
    missing = missing_columns(db)
    db.execute(f"{hit_sql(missing)} LIMIT 0").fetchall()
    db.execute(f"SELECT rowid, bm25({FTS}) FROM {FTS} WHERE {FTS} MATCH 'probe' LIMIT 0").fetchall()
    db.execute(f"{select_sql(DOCUMENTS, DocumentRow)} LIMIT 0").fetchall()
    db.execute(f"{select_sql(CHUNKS, ChunkRow, missing)} LIMIT 0").fetchall()
    if has_postings(db):
        db.execute(f"SELECT term, chunk_rows, impacts FROM {POSTINGS} LIMIT 0").fetchall()


def missing_columns(db: sqlite3.Connection) -> frozenset[str]:
    """The optional chunk columns this database lacks (written before PDF pages or languages)."""
    names = {row[1] for row in db.execute(f"PRAGMA table_info({CHUNKS})")}
    return frozenset(name for name in OPTIONAL_COLUMNS if name not in names)


def has_postings(db: sqlite3.Connection) -> bool:
    """Whether the database has BM25 postings (databases written before they existed have not)."""
    row = db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (POSTINGS,)).fetchone()
    return row is not None
