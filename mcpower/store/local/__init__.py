"""The local store: each dataset a folder of immutable versions, each version a FAISS index and a
SQLite database (documents, chunks, FTS5, BM25 postings).

    catalog.py   LocalCatalog: finds dataset folders, opens them, publishes new versions
    store.py     LocalStore: one loaded version (vector and keyword search, lookups)
    build.py     writing a version's files
    schema.py    file names, the SQLite schema, rows <-> records
    fts.py       how text is indexed by FTS5 and how a query becomes FTS5 phrases
    keyword.py   BM25 from per-term postings, exactly as FTS5 scores it
"""

from __future__ import annotations

from mcpower.store.local.catalog import LocalCatalog

__all__ = ["LocalCatalog"]
