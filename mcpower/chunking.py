"""Documents -> chunks sized in model tokens, each with its heading path and line range.

Pure functions: the caller passes a token counter (the embedding model's own tokenizer), so a chunk
is never longer than what the model reads. Markdown is parsed with markdown-it-py and split on
headings; code fences and tables are kept whole when they fit, and cut at line boundaries when
they do not. Consecutive chunks of one section overlap by whole units (lines or sentences).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

from markdown_it import MarkdownIt

CHUNKER = "mcpower-md-v1"  # recorded in manifests; bump when chunk boundaries change
MARKDOWN_TYPES = frozenset({".md", ".markdown", ".mdx"})
TEXT_TYPES = frozenset({".txt"})
RST_TYPES = frozenset({".rst"})
SUPPORTED_TYPES = MARKDOWN_TYPES | TEXT_TYPES | RST_TYPES
HEADING_SEPARATOR = " > "
# Heading paths longer than this many tokens are cut so they cannot crowd the body out of the window.
MAX_HEADING_TOKENS = 48

TokenCounter = Callable[[Sequence[str]], list[int]]


@dataclass(frozen=True)
class Chunk:
    """One piece of a document, small enough for the model to read whole."""

    text: str  # the source text of the chunk, as written in the file
    heading_path: tuple[str, ...]
    start_line: int  # 1-based, inclusive
    end_line: int  # 1-based, inclusive
    ordinal: int  # position in the document, from 0
    # The heading path as the model reads it, when it had to be cut to MAX_HEADING_TOKENS.
    embed_heading: str | None = None

    @property
    def heading(self) -> str:
        return HEADING_SEPARATOR.join(self.heading_path)

    @property
    def embed_text(self) -> str:
        """What the model embeds: the heading path gives a chunk its context."""
        heading = self.heading if self.embed_heading is None else self.embed_heading
        return f"{heading}\n{self.text}" if heading else self.text


@dataclass(frozen=True)
class Document:
    title: str
    chunks: list[Chunk]


@dataclass(frozen=True)
class _Unit:
    """The smallest piece the packer moves: a block, a line, a sentence or a run of words."""

    text: str
    start: int  # 0-based line
    end: int  # 0-based line, inclusive
    tokens: int


@dataclass(frozen=True)
class _Section:
    heading_path: tuple[str, ...]
    blocks: list[tuple[str, int, int, bool]]  # text, start line, end line, splittable by sentence
    has_body: bool = True  # False for a section that is only its heading line


_FRONT_MATTER = re.compile(r"\A---[ \t]*\n(.*?\n)(?:---|\.\.\.)[ \t]*(?:\n|\Z)", re.S)
_FM_TITLE = re.compile(r"^title[ \t]*:[ \t]*(.+?)[ \t]*$", re.M)
_SENTENCE_END = re.compile(r"(?<=[.!?。！？])\s+")
_RST_ADORNMENT = re.compile(r"^([=\-~^\"'`#*+:.<>_])\1{2,}[ \t]*$")
# mkdocs / pandoc heading attributes: "## Install { #install }" -> "Install"
_HEADING_ATTRS = re.compile(r"\s*\{\s*[#.][^}]*\}\s*$")
_md = MarkdownIt("commonmark").enable("table")


def chunk_document(
    text: str,
    file_type: str,
    file_name: str,
    count_tokens: TokenCounter,
    chunk_tokens: int,
    overlap: int,
) -> Document:
    """Split one document into chunks of at most ``chunk_tokens`` tokens (plus its heading path).

    ``file_type`` is the lower-case suffix (``.md``, ``.txt`` ...). Titles: the first H1, else a
    front-matter ``title:``, else the file name without its suffix.
    """
    text = text.replace("\r\n", "\n").replace("\r", "\n").lstrip("\ufeff")
    lines = text.split("\n")
    fm_title, body_start = _front_matter(text)
    if file_type in MARKDOWN_TYPES:
        sections, h1 = _markdown_sections(text, lines, body_start)
    elif file_type in RST_TYPES:
        sections, h1 = _rst_sections(lines)
    else:
        sections, h1 = _paragraph_sections(lines, body_start, ()), None
    title = h1 or fm_title or PurePosixPath(file_name).stem or file_name
    # One tokenizer call per document (each call has a fixed cost): every heading path, then every
    # block's pieces.
    headings = [HEADING_SEPARATOR.join(s.heading_path) for s in sections]
    pieces = [[_pieces(block) for block in s.blocks] for s in sections]
    flat = [text for section_pieces in pieces for block_pieces in section_pieces for text, _ in block_pieces]
    counts = iter(count_tokens(headings + flat) if sections else [])
    heading_counts = [next(counts) for _ in headings]
    chunks: list[Chunk] = []
    for section, heading, heading_tokens, section_pieces in zip(sections, headings, heading_counts, pieces):
        embed_heading = _cut_heading(heading, heading_tokens, count_tokens)
        budget = max(chunk_tokens - min(heading_tokens, MAX_HEADING_TOKENS), 16)
        units = [
            unit
            for block, block_pieces in zip(section.blocks, section_pieces)
            for unit in _units(block, block_pieces, [next(counts) for _ in block_pieces], count_tokens, budget)
        ]
        for unit_text, start, end in _pack(units, budget, overlap):
            chunks.append(Chunk(unit_text, section.heading_path, start + 1, end + 1, len(chunks), embed_heading))
    return Document(title=title[:256], chunks=chunks)


def _cut_heading(heading: str, tokens: int, count_tokens: TokenCounter) -> str | None:
    """The heading path cut to MAX_HEADING_TOKENS tokens (as the budget counts it); None if it fits whole."""
    if tokens <= MAX_HEADING_TOKENS:
        return None
    words = heading.split(" ")[: MAX_HEADING_TOKENS + 1]  # a word is at least one token
    prefixes = [" ".join(words[:n]) for n in range(1, len(words) + 1)]
    fits = [p for p, n in zip(prefixes, count_tokens(prefixes)) if n <= MAX_HEADING_TOKENS]
    return fits[-1] if fits else heading[:MAX_HEADING_TOKENS]


def _front_matter(text: str) -> tuple[str | None, int]:
    m = _FRONT_MATTER.match(text)
    if not m:
        return None, 0
    t = _FM_TITLE.search(m.group(1))
    title = t.group(1).strip().strip("\"'") if t else None
    return title or None, text[: m.end()].count("\n")


def _markdown_sections(text: str, lines: list[str], body_start: int) -> tuple[list[_Section], str | None]:
    # Parse the whole text so line numbers stay true; skip front matter by line number.
    tokens = _md.parse("\n" * body_start + "\n".join(lines[body_start:]))
    path: list[tuple[int, str]] = []
    sections = [_Section((), [])]
    h1: str | None = None
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok.level != 0 or tok.nesting == -1 or tok.map is None:
            i += 1
            continue
        start, end = tok.map[0], tok.map[1] - 1
        if tok.type == "heading_open":
            level = int(tok.tag[1])
            raw = tokens[i + 1].content if i + 1 < len(tokens) else ""
            title = _HEADING_ATTRS.sub("", " ".join(raw.split()))
            if level == 1 and h1 is None and title:
                h1 = title
            path = [(lvl, t) for lvl, t in path if lvl < level] + [(level, title or "(untitled)")]
            sections.append(_Section(tuple(t for _, t in path), [], has_body=False))
        # Setext headings span two lines; everything else is its own block.
        block = "\n".join(lines[start : end + 1]).strip("\n")
        if block.strip():
            prose = tok.type in ("paragraph_open", "blockquote_open", "html_block")
            sections[-1].blocks.append((block, start, end, prose))
            if tok.type != "heading_open" and not sections[-1].has_body:
                sections[-1] = _Section(sections[-1].heading_path, sections[-1].blocks)
        i += 1
    # A heading directly followed by a sub-heading lives on in the sub-section's heading path.
    kept = [s for s in sections if s.blocks and s.has_body]
    return (kept or [s for s in sections if s.blocks]), h1


def _rst_sections(lines: list[str]) -> tuple[list[_Section], str | None]:
    """reStructuredText: a title is a line underlined (and maybe overlined) by punctuation."""
    styles: list[str] = []
    path: list[tuple[int, str]] = []
    sections: list[_Section] = []
    title_lines: dict[int, tuple[int, str]] = {}
    for n in range(1, len(lines)):
        under, text = lines[n].strip(), lines[n - 1].strip()
        if text and _RST_ADORNMENT.match(under) and len(under) >= len(text) and not _RST_ADORNMENT.match(text):
            over = n >= 2 and lines[n - 2].strip() == under
            style = ("o" if over else "") + under[0]
            if style not in styles:
                styles.append(style)
            # The section starts at the overline, if any, so it is not left behind as a chunk of its own.
            title_lines[n - 2 if over else n - 1] = (styles.index(style) + 1, text)
    h1 = None
    seg_start = 0
    for n in [*sorted(title_lines), len(lines)]:
        sections.extend(_paragraph_sections(lines[:n], seg_start, tuple(t for _, t in path)))
        if n == len(lines):
            break
        level, text = title_lines[n]
        h1 = h1 or (text if level == 1 else None)
        path = [(lv, t) for lv, t in path if lv < level] + [(level, text)]
        seg_start = n
    return [s for s in sections if s.blocks], h1


def _paragraph_sections(lines: list[str], start: int, heading: tuple[str, ...]) -> list[_Section]:
    """Plain text: blocks are runs of non-blank lines."""
    blocks: list[tuple[str, int, int, bool]] = []
    n = start
    while n < len(lines):
        if not lines[n].strip():
            n += 1
            continue
        first = n
        while n < len(lines) and lines[n].strip():
            n += 1
        blocks.append(("\n".join(lines[first:n]), first, n - 1, True))
    return [_Section(heading, blocks)]


def _pieces(block: tuple[str, int, int, bool]) -> list[tuple[str, int]]:
    """(text, line) of a block's lines, or of its sentences if it is prose."""
    text, start, _, prose = block
    out: list[tuple[str, int]] = []
    for offset, line in enumerate(text.split("\n")):
        parts = _SENTENCE_END.split(line) if prose else [line]
        out.extend((p, start + offset) for p in parts if p.strip())
    return out


def _units(
    block: tuple[str, int, int, bool],
    pieces: list[tuple[str, int]],
    counts: list[int],
    count_tokens: TokenCounter,
    budget: int,
) -> list[_Unit]:
    """A block that fits stays whole; a bigger one becomes lines, then sentences, then word runs.

    The block's tokens are the sum of its pieces' tokens: pieces are cut at whitespace, across
    which the model's tokenizer (WordPiece; BPE and SentencePiece up to their word-start marker)
    never makes a token.
    """
    text, start, end, _ = block
    if sum(counts) <= budget:
        return [_Unit(text, start, end, sum(counts))]
    out: list[_Unit] = []
    for (piece, line_no), n in zip(pieces, counts):
        if n <= budget:
            out.append(_Unit(piece, line_no, line_no, n))
        else:
            out.extend(_word_runs(piece, line_no, count_tokens, budget))
    return out


def _word_runs(text: str, line_no: int, count_tokens: TokenCounter, budget: int) -> list[_Unit]:
    words = text.split(" ")
    counts = count_tokens(words)
    runs: list[_Unit] = []
    cur: list[str] = []
    cur_tokens = 0
    for word, n in zip(words, counts):
        if n > budget and not word.isascii():
            # Text written without spaces (Chinese, Japanese, Thai): keep all of it, in slices that fit.
            if cur:
                runs.append(_Unit(" ".join(cur), line_no, line_no, cur_tokens))
                cur, cur_tokens = [], 0
            runs.extend(_Unit(piece, line_no, line_no, k) for piece, k in _slices(word, count_tokens, budget))
            continue
        if n > budget:  # one "word" longer than the window (a minified line, a base64 blob): cut it
            word, n = word[: budget * 2], budget
        if cur and cur_tokens + n > budget:
            runs.append(_Unit(" ".join(cur), line_no, line_no, cur_tokens))
            cur, cur_tokens = [], 0
        cur.append(word)
        cur_tokens += n
    if cur:
        runs.append(_Unit(" ".join(cur), line_no, line_no, cur_tokens))
    return runs


def _slices(word: str, count_tokens: TokenCounter, budget: int) -> list[tuple[str, int]]:
    """``word`` cut into equal runs of characters, each at most ``budget`` tokens."""
    step = budget
    while True:
        pieces = [word[i : i + step] for i in range(0, len(word), step)]
        counts = count_tokens(pieces)
        if step == 1 or max(counts) <= budget:
            return list(zip(pieces, counts))
        step = max(1, step // 2)


def _pack(units: list[_Unit], budget: int, overlap: int) -> list[tuple[str, int, int]]:
    chunks: list[tuple[str, int, int]] = []
    cur: list[_Unit] = []
    cur_tokens = 0
    for unit in units:
        if cur and cur_tokens + unit.tokens > budget:
            chunks.append(_join(cur))
            carry: list[_Unit] = []
            carried = 0
            for prev in reversed(cur):  # whole units from the end, up to `overlap` tokens
                if carried + prev.tokens > overlap or carried + prev.tokens + unit.tokens > budget:
                    break
                carry.insert(0, prev)
                carried += prev.tokens
            cur, cur_tokens = carry, carried
        cur.append(unit)
        cur_tokens += unit.tokens
    if cur:
        chunks.append(_join(cur))
    return chunks


def _join(units: list[_Unit]) -> tuple[str, int, int]:
    parts: list[str] = []
    for prev, unit in zip([None, *units], units):
        if prev is not None:
            # Pieces of one line rejoin with a space; lines keep the source's own spacing.
            parts.append(" " if unit.start == prev.end else "\n" if unit.start == prev.end + 1 else "\n\n")
        parts.append(unit.text)
    return "".join(parts), units[0].start, max(u.end for u in units)
