"""The form every format parses a document into, and the packer that cuts it into chunks.

A format module (markdown.py, rst.py, text.py ...) turns a document's text into :class:`Section` s:
a heading path and the blocks under it, each block with its line range. The packer here then fills
chunks of at most ``chunk_tokens`` model tokens (heading path included): a block that fits stays
whole; a bigger one is cut at lines, then sentences, then runs of words. Consecutive chunks of one
section overlap by whole units (lines or sentences). Token counts come from the embedding model's
own tokenizer, so a chunk is never longer than what the model reads; it is given bounded pieces
of the document at a time (counting.py), so that counting takes a small multiple of its size.

In a document with headings, a section whose body (its blocks less its heading lines) has fewer
than MIN_SECTION_WORDS words is not a chunk of its own: a heading over a label, a directive's name
or one short line says nothing a search can use, and scores high exactly because it says nothing
else. It is packed with the sections after it (the last one with the section before it), and a
chunk that spans sections carries the heading path they share (:func:`shared_path`). Source code
(whose sections are definitions, with no heading lines) and plain text are packed as they are.
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from mcpower.chunking.counting import TokenCounter, bounded, counted, counted_words

HEADING_SEPARATOR = " > "
# Heading paths longer than this many tokens are cut so they cannot crowd the body out of the window.
MAX_HEADING_TOKENS = 48
# Every chunk stores (and full-text indexes) its heading path: a heading is cut to this many
# characters and a path to MAX_HEADING_PATH_CHARS (what a response shows), or one long heading
# repeated over thousands of chunks would multiply the dataset's size.
MAX_HEADING_CHARS = 200
MAX_HEADING_PATH_CHARS = 512
# A sentence ends at . ! ? before whitespace, and at the full-width 。！？ of Chinese and Japanese
# whether or not whitespace follows (their text has none between sentences: without this a CJK
# paragraph was one "sentence", cut into slices of characters mid-sentence, with no overlap).
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[。！？])(?![」』）”’])\s*(?=\S)")
_CJK_STOP = ("。", "！", "？")
# A section with fewer words than this in its body is packed with its neighbours.
MIN_SECTION_WORDS = 8
# A word: a run of letters and digits; in a script written without spaces (Thai, Chinese, Japanese)
# two characters make a word (their words average about two characters: Lucene's CJK analyzer pairs
# them too), so a Chinese or Japanese chapter title alone ("第 6 章 构建软件包") is not a body.
_NO_SPACES = "\u0e00-\u0e7f\u3040-\u30ff\u3400-\u9fff\uf900-\ufaff"
_WORD = re.compile(f"[{_NO_SPACES}]|[^\\W{_NO_SPACES}]+")
_NO_SPACE_CHAR = re.compile(f"[{_NO_SPACES}]")


class UnreadableError(ValueError):
    """A file no format can read (damaged, encrypted, a zip bomb ...); ``str(e)`` says why, for the
    ingest report."""


@dataclass(frozen=True)
class Block:
    """A run of a document's lines that belongs together: a paragraph, a code fence, a table ..."""

    text: str
    start: int  # 0-based line
    end: int  # 0-based line, inclusive
    prose: bool  # may be cut between sentences (else only between lines)
    heading: bool = False  # a heading line (not counted as the section's body)


@dataclass(frozen=True)
class Section:
    """The blocks under one heading path."""

    heading_path: tuple[str, ...]
    blocks: list[Block] = field(default_factory=list)
    has_body: bool = True  # False for a section that is only its heading line


@dataclass(frozen=True)
class Parsed:
    """What a format module makes of a document: its sections, and its title if it states one."""

    sections: list[Section]
    title: str | None = None
    # The text mcpower stores for the document, which line ranges point into: None for a text
    # format (the file's own text); the extracted text for HTML, PDF, Word, reST, notebooks.
    text: str | None = None
    # The first line (0-based) of each page, for formats with pages (PDF); empty otherwise.
    page_lines: tuple[int, ...] = ()
    # What the user should know about how the file was read ("read as plain text: ...").
    notes: tuple[str, ...] = ()


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
    pages: tuple[int, int] | None = None  # first and last page (from 1), for formats with pages

    @property
    def heading(self) -> str:
        return HEADING_SEPARATOR.join(self.heading_path)

    @property
    def embed_text(self) -> str:
        """What the model embeds: the heading path gives a chunk its context."""
        heading = self.heading if self.embed_heading is None else self.embed_heading
        return f"{heading}\n{self.text}" if heading else self.text


@dataclass(frozen=True)
class _Unit:
    """The smallest piece the packer moves: a block, a line, a sentence or a run of words."""

    text: str
    start: int  # 0-based line
    end: int  # 0-based line, inclusive
    tokens: int
    heading: bool = False  # a heading line
    # A whole block's lines or sentences, used when the block does not fit after a chunk's start
    # that would otherwise be a chunk of a heading or a label on its own.
    parts: tuple[_Unit, ...] = ()


def pack(sections: list[Section], count_tokens: TokenCounter, chunk_tokens: int, overlap: int) -> list[Chunk]:
    """Cut ``sections`` into chunks of at most ``chunk_tokens`` tokens, heading path included;
    sections with almost no body are packed with their neighbours (the module's docstring)."""
    count_tokens = bounded(count_tokens)
    paths = [clip_heading_path(s.heading_path) for s in sections]
    headings = [HEADING_SEPARATOR.join(p) for p in paths]
    # Every heading path, then every block's pieces (a None after each block's), counted in order as
    # the packing reads them, in as few tokenizer calls as counting.py allows: one for most documents
    # (each call has a fixed cost), a batch at a time for a big one.
    pieces = counted(itertools.chain(((h, 0) for h in headings), _all_pieces(sections)), count_tokens)
    heading_counts = [item[2] for item in itertools.islice(pieces, len(headings)) if item is not None]
    budgets = [max(chunk_tokens - min(n, MAX_HEADING_TOKENS), 16) for n in heading_counts]
    embed_headings = [_cut_heading(h, n, count_tokens) for h, n in zip(headings, heading_counts)]
    chunks: list[Chunk] = []
    for group in _groups(sections):
        budget = min(budgets[i] for i in group)
        units = (
            unit for i in group for block in sections[i].blocks for unit in _units(block, pieces, count_tokens, budget)
        )
        # The sections of a group are consecutive: the ones a chunk spans are found by bisection.
        firsts = [sections[i].blocks[0].start if sections[i].blocks else -1 for i in group]
        lasts = [sections[i].blocks[-1].end if sections[i].blocks else -1 for i in group]
        for unit_text, start, end in _pack(units, budget, overlap):
            touched = group[bisect.bisect_left(lasts, start) : bisect.bisect_right(firsts, end)] or group[:1]
            # Sections under different top headings share no path: the chunk takes its last one's.
            path = shared_path([paths[i] for i in touched]) or paths[touched[-1]]
            embed_heading = next((embed_headings[i] for i in touched if paths[i] == path), None)
            if path not in [paths[i] for i in touched] and any(embed_headings[i] for i in touched):
                heading = HEADING_SEPARATOR.join(path)  # a shorter path than any it came from
                embed_heading = _cut_heading(heading, count_tokens([heading])[0], count_tokens)
            chunks.append(Chunk(unit_text, path, start + 1, end + 1, len(chunks), embed_heading))
    return chunks


def shared_path(paths: Sequence[tuple[str, ...]]) -> tuple[str, ...]:
    """The heading path of a chunk that spans sections with these paths: a path that is the start of
    another (a section's parent) lives on in it; of the rest, the headings they all begin with."""
    parents = {q[:n] for q in set(paths) for n in range(len(q))}
    kept = [p for p in dict.fromkeys(paths) if p not in parents]
    if not kept:
        return ()
    shared = kept[0]
    for p in kept[1:]:
        n = 0
        while n < min(len(shared), len(p)) and shared[n] == p[n]:
            n += 1
        shared = shared[:n]
    return shared


def body_words(section: Section, limit: int = MIN_SECTION_WORDS) -> int:
    """The words in a section's blocks other than its heading lines, counted up to ``limit``."""
    halves = 0  # a word counts 2, a character of a script without spaces 1
    for block in section.blocks:
        if block.heading:
            continue
        for m in _WORD.finditer(block.text):
            halves += 1 if len(m.group(0)) == 1 and _NO_SPACE_CHAR.match(m.group(0)) else 2
            if halves >= 2 * limit:
                return halves // 2
    return halves // 2


def _groups(sections: list[Section]) -> list[list[int]]:
    """The sections (indices) packed together: in a document with heading lines, each section with
    MIN_SECTION_WORDS words of body and the sparse ones right before it; a sparse tail joins the
    group before."""
    if not any(block.heading for section in sections for block in section.blocks):
        return [[i] for i in range(len(sections))]
    groups: list[list[int]] = []
    current: list[int] = []
    for i, section in enumerate(sections):
        current.append(i)
        if body_words(section) >= MIN_SECTION_WORDS:
            groups.append(current)
            current = []
    if current and groups:
        groups[-1].extend(current)
    elif current:
        groups.append(current)
    return groups


def clip_heading_path(path: tuple[str, ...]) -> tuple[str, ...]:
    """``path`` with each heading cut to MAX_HEADING_CHARS and, if still too long, headings after the
    first dropped (an ellipsis marks the gap) until it fits MAX_HEADING_PATH_CHARS; the first and
    the last heading always stay (two clipped headings fit)."""
    clipped = [h if len(h) <= MAX_HEADING_CHARS else h[: MAX_HEADING_CHARS - 1] + "…" for h in path]
    if len(HEADING_SEPARATOR.join(clipped)) <= MAX_HEADING_PATH_CHARS:
        return tuple(clipped)
    first, rest = clipped[0], clipped[1:]
    while len(rest) > 1 and len(HEADING_SEPARATOR.join([first, "…", *rest])) > MAX_HEADING_PATH_CHARS:
        rest.pop(0)
    return (first, "…", *rest)


def _cut_heading(heading: str, tokens: int, count_tokens: TokenCounter) -> str | None:
    """The heading path cut to MAX_HEADING_TOKENS tokens (as the budget counts it); None if it fits whole."""
    if tokens <= MAX_HEADING_TOKENS:
        return None
    words = heading.split(" ")[: MAX_HEADING_TOKENS + 1]  # a word is at least one token
    prefixes = [" ".join(words[:n]) for n in range(1, len(words) + 1)]
    fits = [p for p, n in zip(prefixes, count_tokens(prefixes)) if n <= MAX_HEADING_TOKENS]
    return fits[-1] if fits else heading[:MAX_HEADING_TOKENS]


def _all_pieces(sections: list[Section]) -> Iterator[tuple[str, int] | None]:
    for section in sections:
        for block in section.blocks:
            yield from _pieces(block)
            yield None


def _pieces(block: Block) -> Iterator[tuple[str, int]]:
    """(text, line) of a block's lines, or of its sentences if it is prose, one at a time."""
    text, prose = block.text, block.prose
    begin = 0
    for line_no in itertools.count(block.start):
        end = text.find("\n", begin)
        line = text[begin:] if end < 0 else text[begin:end]
        for part in _sentences(line) if prose else (line,):
            if part and not part.isspace():
                yield part, line_no
        if end < 0:
            return
        begin = end + 1


def _sentences(line: str) -> Iterator[str]:
    """``_SENTENCE_END.split(line)``, one at a time."""
    begin = 0
    for m in _SENTENCE_END.finditer(line):
        yield line[begin : m.start()]
        begin = m.end()
    yield line[begin:]


def _units(
    block: Block, pieces: Iterator[tuple[str, int, int] | None], count_tokens: TokenCounter, budget: int
) -> Iterator[_Unit]:
    """A block that fits stays whole; a bigger one becomes lines, then sentences, then word runs.
    Its pieces and their tokens are read from ``pieces``, up to the None that ends them.

    The block's tokens are the sum of its pieces' tokens: pieces are cut at whitespace, across
    which the model's tokenizer (WordPiece; BPE and SentencePiece up to their word-start marker)
    never makes a token.
    """
    held: list[tuple[str, int, int]] | None = []  # the pieces so far, while the block may fit whole
    tokens = 0
    while (piece := next(pieces)) is not None:
        if held is not None:
            held.append(piece)
            tokens += piece[2]
            if tokens <= budget:
                continue
        for text, line_no, n in held or (piece,):
            if n <= budget:
                yield _Unit(text, line_no, line_no, n)
            else:
                yield from _word_runs(text, line_no, count_tokens, budget)
        held = None
    if held is not None:
        parts = tuple(_Unit(p, line_no, line_no, n) for p, line_no, n in held)
        yield _Unit(block.text, block.start, block.end, tokens, block.heading, parts if len(parts) > 1 else ())


def _word_runs(text: str, line_no: int, count_tokens: TokenCounter, budget: int) -> list[_Unit]:
    runs: list[_Unit] = []
    cur: list[str] = []
    cur_tokens = 0
    for word, n in counted_words(text, count_tokens):
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


def _pack(units: Iterable[_Unit], budget: int, overlap: int) -> list[tuple[str, int, int]]:
    chunks: list[tuple[str, int, int]] = []
    cur: list[_Unit] = []
    cur_tokens = 0
    source = iter(units)
    pending: list[_Unit] = []  # a block's parts, put back to be packed one by one
    while (unit := pending.pop() if pending else next(source, None)) is not None:
        if cur and cur_tokens + unit.tokens > budget:
            if unit.parts and _sparse(cur):  # fill the chunk with the block's first lines or sentences
                pending.extend(reversed(unit.parts))
                continue
            chunks.append(_join(cur))
            carry: list[_Unit] = []
            carried = 0
            for prev in reversed(cur):  # whole units from the end, up to `overlap` tokens
                if carried + prev.tokens > overlap or carried + prev.tokens + unit.tokens > budget:
                    break
                carry.append(prev)  # (insert(0) made a run of units without tokens quadratic)
                carried += prev.tokens
            cur, cur_tokens = carry[::-1], carried
        cur.append(unit)
        cur_tokens += unit.tokens
    if cur:
        chunks.append(_join(cur))
    return chunks


def _sparse(units: list[_Unit]) -> bool:
    """Whether the units are headings and fewer than MIN_SECTION_WORDS words of body."""
    body = [unit for unit in units if not unit.heading]
    return body_words(Section((), [Block(u.text, u.start, u.end, False) for u in body])) < MIN_SECTION_WORDS


def _join(units: list[_Unit]) -> tuple[str, int, int]:
    parts: list[str] = []
    for prev, unit in zip([None, *units], units):
        if prev is not None:
            # Pieces of one line rejoin with a space (CJK sentences, which had none, with nothing);
            # lines keep the source's own spacing.
            same_line = " " if not prev.text.endswith(_CJK_STOP) else ""
            parts.append(same_line if unit.start == prev.end else "\n" if unit.start == prev.end + 1 else "\n\n")
        parts.append(unit.text)
    return "".join(parts), units[0].start, max(u.end for u in units)
