"""Documents -> chunks sized in model tokens, each with its heading path and line range.

One module per format reads a document into sections (sections.py says what that form is); the
packer in sections.py cuts the sections into chunks. A format is a module named in :data:`FORMATS`
(or :data:`CODE_FORMATS`) by suffix, with ``TYPES`` (the suffixes it reads) and one of:

``parse(text: str) -> Parsed``
    for a file that is text, stored as written (Markdown, plain text, source code): mcpower decodes
    it (UTF-8) and the sections' line ranges point into it;
``extract(data: bytes) -> Parsed``
    for a file whose text has to be extracted (HTML, PDF, Word, reST, notebooks): ``Parsed.text``
    is the text mcpower stores as the document's content, and line ranges point into it.

Either raises :class:`UnreadableError` with the reason for a file it cannot read. Formats named
in :data:`ISOLATED` are read in a worker process with time and memory limits (worker.py). Format
modules are imported when a file of theirs is read, so searching never pays for a parser.

Which format reads a file: its suffix, then its content (:func:`format_of`).
"""

from __future__ import annotations

import bisect
import dataclasses
import importlib
import re
from dataclasses import dataclass
from pathlib import PurePosixPath

from mcpower.chunking.counting import TokenCounter
from mcpower.chunking.sections import (
    HEADING_SEPARATOR,
    MAX_HEADING_TOKENS,
    Chunk,
    Parsed,
    UnreadableError,
    pack,
)

__all__ = [
    "CHUNKER",
    "CODE_TYPES",
    "FORMATS",
    "HEADING_SEPARATOR",
    "MAX_HEADING_TOKENS",
    "SUPPORTED_TYPES",
    "Chunk",
    "Document",
    "Parsed",
    "TokenCounter",
    "UnreadableError",
    "build_document",
    "chunk_document",
    "decode_text",
    "format_of",
    "parse_document",
    "size_limit",
    "source_lines",
]

# Recorded in manifests; bump when chunk boundaries change. v2: reST through docutils, .txt files
# that are reST read as reST, Markdown admonition bodies as prose; HTML, PDF, Word, notebooks, code.
# v3: sections with almost no body packed with their neighbours; HTML furniture and Markdown comments left out.
# v4: Chinese and Japanese sentences end at 。！？ without whitespace; two of their characters make a word
# for the near-empty rule (a CJK chapter title alone is no longer a chunk).
CHUNKER = "mcpower-v4"
_HERE = "mcpower.chunking."
# Suffix -> the module that reads it.
FORMATS = {
    suffix: _HERE + module
    for suffix, module in {
        ".md": "markdown",
        ".markdown": "markdown",
        ".mdx": "markdown",
        ".rst": "rst",
        ".rest": "rst",
        ".txt": "text",
        ".html": "html",
        ".htm": "html",
        ".pdf": "pdf",
        ".docx": "docx",
        ".ipynb": "notebook",
    }.items()
}
# Source code: read only when asked for (`--code`, or an --include glob naming the suffix).
CODE_FORMATS = {
    suffix: _HERE + module
    for suffix, module in {
        ".py": "python",
        ".pyi": "python",
        ".js": "javascript",
        ".mjs": "javascript",
        ".cjs": "javascript",
        ".jsx": "javascript",
        ".ts": "javascript",
        ".tsx": "javascript",
        ".mts": "javascript",
        ".cts": "javascript",
        ".go": "go",
        ".rs": "rust",
        ".java": "java",
    }.items()
}
SUPPORTED_TYPES = frozenset(FORMATS)
CODE_TYPES = frozenset(CODE_FORMATS)
# Parsers run on binary or deeply nested input, in C or in pure Python, with no bound of their own
# on time or memory that covers every hostile file: read in a worker process with limits.
ISOLATED = frozenset(_HERE + m for m in ("html", "pdf", "docx", "rst"))
# PDF, Word and notebook files are mostly images, fonts and cell outputs, and only their text is
# kept: they may be this many times the size limit (100 MB at the default 10 MB).
CONTAINER_TYPES = frozenset({".pdf", ".docx", ".ipynb"})
CONTAINER_SIZE_FACTOR = 10

# How much of a .txt file sniffing looks at.
SNIFF_CHARS = 256 * 1024
# reST in a .txt file: a section title (a line of text underlined by one punctuation character
# repeated at least as long) ...
_RST_TITLE = re.compile(r"^([^\s].*)\n([=\-~^\"'`#*+:.<>_])\2{2,}[ \t]*$", re.M)
# ... and explicit markup: a directive, a link target, a substitution, a role, or a literal block's "::".
# A role is tried only where a run of name characters starts (the lookbehind): tried at every ":",
# ":[\w:+-]+:`" read the rest of the run each time (20 s for 40,000 ":" after a title).
_RST_MARKUP = re.compile(
    r"^\.\. (?:[\w:-]+::|_[^:\n]+:|\|[^|\n]+\|)|(?<![\w:+-])[\w+-]*:[\w:+-]+:`[^`\n]+`|::[ \t]*$", re.M
)


@dataclass(frozen=True)
class Document:
    title: str
    chunks: list[Chunk]
    content: str  # the text stored for the document; chunk line ranges point into it
    notes: tuple[str, ...] = ()


def format_of(data: bytes | str, file_type: str) -> str:
    """The module that reads a file with suffix ``file_type`` (lower-case) and this content.

    By suffix (an unknown one reads as plain text), then by content: a ``.txt`` file that has both
    a reST section title and reST markup (a directive, target, substitution, role or ``::``) in its
    first 256 KB is read as reST.
    """
    module = FORMATS.get(file_type) or CODE_FORMATS.get(file_type) or FORMATS[".txt"]
    if file_type == ".txt":
        head = data[:SNIFF_CHARS]
        text = head.decode("utf-8", "replace") if isinstance(head, bytes) else head
        if looks_like_rst(text.replace("\r\n", "\n")):
            return FORMATS[".rst"]
    return module


def looks_like_rst(text: str) -> bool:
    """Whether plain text is reStructuredText: a section title and reST markup (:func:`format_of`)."""
    titled = any(len(m.group(0).split("\n")[1].rstrip()) >= len(m.group(1).rstrip()) for m in _RST_TITLE.finditer(text))
    return titled and _RST_MARKUP.search(text) is not None


def parse_document(data: bytes | str, file_type: str, module: str | None = None) -> Parsed:
    """Read one document with its format's module (``module``, else :func:`format_of`'s choice)
    in this process; the result's ``text`` is always set.

    Raises:
        UnreadableError: the file cannot be read (not UTF-8, damaged, encrypted ...).
    """
    fmt = importlib.import_module(module or format_of(data, file_type))
    extract = getattr(fmt, "extract", None)
    parsed: Parsed
    if extract is not None:
        parsed = extract(data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass"))
        return dataclasses.replace(parsed, text="\n".join(source_lines(parsed.text or "")))
    text = "\n".join(source_lines(data if isinstance(data, str) else decode_text(data)))
    parsed = fmt.parse(text)
    return dataclasses.replace(parsed, text=text)


def build_document(
    parsed: Parsed, file_name: str, count_tokens: TokenCounter, chunk_tokens: int, overlap: int
) -> Document:
    """Cut a parsed document into chunks of at most ``chunk_tokens`` tokens (plus its heading path).

    The title is the one the document states (its format decides how), else the file name
    without its suffix. Chunks of a paged document carry their pages.
    """
    title = (parsed.title or "").strip() or PurePosixPath(file_name).stem or file_name
    chunks = pack(parsed.sections, count_tokens, chunk_tokens, overlap)
    if parsed.page_lines:
        starts = parsed.page_lines
        chunks = [
            dataclasses.replace(
                c,
                pages=(
                    max(bisect.bisect_right(starts, c.start_line - 1), 1),
                    max(bisect.bisect_right(starts, c.end_line - 1), 1),
                ),
            )
            for c in chunks
        ]
    return Document(title=" ".join(title.split())[:256], chunks=chunks, content=parsed.text or "", notes=parsed.notes)


def chunk_document(
    data: bytes | str,
    file_type: str,
    file_name: str,
    count_tokens: TokenCounter,
    chunk_tokens: int,
    overlap: int,
) -> Document:
    """Read one document in this process and cut it into chunks (:func:`parse_document`, then
    :func:`build_document`). ``file_type`` is the lower-case suffix (``.md``, ``.pdf`` ...).

    Raises:
        UnreadableError: the file cannot be read.
    """
    parsed = parse_document(data, file_type)
    return build_document(parsed, file_name, count_tokens, chunk_tokens, overlap)


def size_limit(file_type: str, max_file_bytes: int) -> int:
    """The largest file of this type an ingest reads, given its size limit for text files."""
    return max_file_bytes * CONTAINER_SIZE_FACTOR if file_type in CONTAINER_TYPES else max_file_bytes


def source_lines(text: str) -> list[str]:
    """The lines of a document's text as chunk line numbers count them (any newline convention; BOM dropped)."""
    return text.replace("\r\n", "\n").replace("\r", "\n").lstrip("\ufeff").split("\n")


def decode_text(data: bytes) -> str:
    """A file's bytes as UTF-8 text.

    Raises:
        UnreadableError: binary or undecodable content, with the reason.
    """
    if b"\x00" in data[:8192]:
        raise UnreadableError("binary file (contains NUL bytes)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UnreadableError(f"not UTF-8 (byte {e.start}); convert it to UTF-8") from e
