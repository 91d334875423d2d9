"""The chunk records of the original format as mcpower's documents and chunks.

The original format keeps chunks, not files: a document here is the records of one path, in the
order the metadata lists them, and its text is their texts one after another, each starting on a
new line. A chunk's line range is where its text sits in that rebuilt document; the original
indexer collapsed whitespace, so there line ``n`` is the document's chunk ``n``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from pathlib import PurePosixPath

from mcpower.chunking import source_lines
from mcpower.errors import IndexMismatchError
from mcpower.store import ChunkRow, DocumentRow, chunk_id
from mcpower.store.original.files import Record


@dataclass(frozen=True)
class Rows:
    documents: list[DocumentRow]
    chunks: list[ChunkRow]
    record_of: list[int]  # for each chunk (in the order of ``chunks``), the index of its record: its vector's row


def build_rows(records: list[Record], indexed: datetime) -> Rows:
    """Documents and chunks of ``records``, with the record each chunk came from.

    Raises:
        IndexMismatchError: two chunks got the same id (only identical path, text and occurrence do).
    """
    by_path: dict[str, list[int]] = {}
    for i, r in enumerate(records):
        by_path.setdefault(r.path, []).append(i)
    documents: list[DocumentRow] = []
    chunks: list[ChunkRow] = []
    record_of: list[int] = []
    indexed_at = indexed.isoformat()
    for doc_id, (path, members) in enumerate(by_path.items(), 1):
        lines: list[str] = []
        seen: dict[str, int] = {}
        for ordinal, i in enumerate(members):
            text = records[i].content
            occurrence = seen.get(text, 0)
            seen[text] = occurrence + 1
            own = source_lines(text)
            start = len(lines) + 1
            lines += own
            chunks.append(ChunkRow(chunk_id(path, text, occurrence), doc_id, ordinal, "", start, len(lines), text))
            record_of.append(i)
        content = "\n".join(lines)
        data = content.encode()
        documents.append(
            DocumentRow(
                id=doc_id,
                path=path,
                title=records[members[0]].title,
                file_type=PurePosixPath(path).suffix.lower(),
                size=len(data),
                mtime=indexed.timestamp(),
                content_hash=hashlib.sha256(data).hexdigest(),
                indexed_at=indexed_at,
                content=content,
            )
        )
    if len({c.id for c in chunks}) != len(chunks):  # 63-bit hashes
        raise IndexMismatchError("two chunks got the same id; please report this as a bug")
    return Rows(documents, chunks, record_of)
