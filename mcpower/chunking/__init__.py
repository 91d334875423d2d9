"""Documents -> chunks sized in model tokens, each with its heading path and line range.

One module per format reads a document into sections (sections.py says what that form is); the
packer in sections.py cuts the sections into chunks. A new format is a new module with ``TYPES``
(the suffixes it reads) and ``parse(text) -> Parsed``, named in :data:`FORMATS`. Format modules
are imported when a file of theirs is chunked, so searching never pays for a parser.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Protocol

from mcpower.chunking.sections import HEADING_SEPARATOR, MAX_HEADING_TOKENS, Chunk, Parsed, TokenCounter, pack

__all__ = [
    "CHUNKER",
    "FORMATS",
    "HEADING_SEPARATOR",
    "MAX_HEADING_TOKENS",
    "SUPPORTED_TYPES",
    "Chunk",
    "Document",
    "TokenCounter",
    "chunk_document",
    "decode_text",
    "source_lines",
]

CHUNKER = "mcpower-md-v1"  # recorded in manifests; bump when chunk boundaries change
# Suffix -> the module under mcpower.chunking that reads it.
FORMATS = {".md": "markdown", ".markdown": "markdown", ".mdx": "markdown", ".rst": "rst", ".txt": "text"}
SUPPORTED_TYPES = frozenset(FORMATS)


class Format(Protocol):
    TYPES: frozenset[str]

    def parse(self, text: str) -> Parsed: ...


@dataclass(frozen=True)
class Document:
    title: str
    chunks: list[Chunk]


def chunk_document(
    text: str,
    file_type: str,
    file_name: str,
    count_tokens: TokenCounter,
    chunk_tokens: int,
    overlap: int,
) -> Document:
    """Split one document into chunks of at most ``chunk_tokens`` tokens (plus its heading path).

    ``file_type`` is the lower-case suffix (``.md``, ``.txt`` ...); an unknown one reads as plain
    text. The title is the one the document states (its format decides how), else the file name
    without its suffix.
    """
    text = "\n".join(source_lines(text))
    fmt: Format = importlib.import_module(f"mcpower.chunking.{FORMATS.get(file_type, 'text')}")
    parsed = fmt.parse(text)
    title = parsed.title or PurePosixPath(file_name).stem or file_name
    return Document(title=title[:256], chunks=pack(parsed.sections, count_tokens, chunk_tokens, overlap))


def source_lines(text: str) -> list[str]:
    """The lines of a document's text as chunk line numbers count them (any newline convention; BOM dropped)."""
    return text.replace("\r\n", "\n").replace("\r", "\n").lstrip("\ufeff").split("\n")


def decode_text(data: bytes) -> str:
    """A file's bytes as UTF-8 text; ValueError with a reason for binary or undecodable content."""
    if b"\x00" in data[:8192]:
        raise ValueError("binary file (contains NUL bytes)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"not UTF-8 (byte {e.start}); convert it to UTF-8") from e
