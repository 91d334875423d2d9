"""Markdown (.md, .markdown, .mdx), parsed with markdown-it-py (CommonMark and tables) and split on
headings; code fences and tables are blocks of their own, kept whole when they fit.

Extensions are kept as the text they are: admonitions (``!!! note``, ``??? tip``, content tabs
``=== "Tab"``, whose indented body CommonMark takes for code, is read as prose), ``:::`` and
``///`` blocks (paragraphs), MDX components and imports (HTML blocks and paragraphs).

HTML comments (``<!-- YAML added: v1.2 -->`` in Node's docs, editors' notes) are not text: they are
left out of chunks and headings, except in code, where they are the code's own.
"""

from __future__ import annotations

import re

from markdown_it import MarkdownIt

from mcpower.chunking.sections import Block, Parsed, Section
from mcpower.chunking.text import front_matter

TYPES = frozenset({".md", ".markdown", ".mdx"})

# mkdocs / pandoc heading attributes: "## Install { #install }" -> "Install". Matched against the
# text after the last "{" only, so a heading of "{#{#{#..." costs one pass, not one per brace.
_ATTRS = re.compile(r"\{\s*[#.][^}]*\}")
# Block structure only: chunking reads each block's source lines, never the parsed inline markup,
# and inline parsing was most of the time (2.8x faster chunking, identical chunks on the FastAPI
# docs) — and ~25 µs a character on a pathological heading.
_md = MarkdownIt("commonmark").enable("table").disable("inline")
# The first line of an admonition or a content tab (mkdocs-material, Python-Markdown): its body is
# indented four spaces, which CommonMark parses as an indented code block.
_ADMONITION = re.compile(r"(?:!!!|\?\?\?\+?|===)[ \t]")
# Blocks whose HTML comments are left out: everything but code.
_CODE = frozenset({"fence", "code_block"})


def strip_attributes(heading: str) -> str:
    """``heading`` without a trailing ``{#id .class}`` attribute block."""
    start = heading.rfind("{")
    if start >= 0 and _ATTRS.fullmatch(heading, start):
        return heading[:start].rstrip()
    return heading


def strip_comments(text: str) -> str:
    """``text`` without its HTML comments (an unclosed one runs to the end); a comment's line breaks
    stay, so the lines after it keep their numbers."""
    out: list[str] = []
    at = 0
    while (start := text.find("<!--", at)) >= 0:
        end = text.find("-->", start + 4)
        out.append(text[at:start])
        stop = len(text) if end < 0 else end + 3
        out.append("\n" * text.count("\n", start, stop))
        at = stop
    out.append(text[at:])
    return "".join(out)


def parse(text: str) -> Parsed:
    """Sections by heading; the title is the first H1, else the front matter's ``title:``."""
    fm_title, body_start = front_matter(text)
    lines = text.split("\n")
    # Parse the whole text so line numbers stay true; skip front matter by line number.
    tokens = _md.parse("\n" * body_start + "\n".join(lines[body_start:]))
    path: list[tuple[int, str]] = []
    sections = [Section(())]
    h1: str | None = None
    admonition = False  # inside the indented body of an admonition
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok.level != 0 or tok.nesting == -1 or tok.map is None:
            i += 1
            continue
        start, end = tok.map[0], tok.map[1] - 1
        if tok.type == "paragraph_open":
            admonition = _ADMONITION.match(lines[start]) is not None
        elif tok.type != "code_block":
            admonition = False
        if tok.type == "heading_open":
            level = int(tok.tag[1])
            raw = strip_comments(tokens[i + 1].content) if i + 1 < len(tokens) else ""
            title = strip_attributes(" ".join(raw.split()))
            if level == 1 and h1 is None and title:
                h1 = title
            path = [(lvl, t) for lvl, t in path if lvl < level] + [(level, title or "(untitled)")]
            sections.append(Section(tuple(t for _, t in path), [], has_body=False))
        # Setext headings span two lines; everything else is its own block.
        block = "\n".join(lines[start : end + 1]).strip("\n")
        if tok.type not in _CODE and not (admonition and tok.type == "code_block") and "<!--" in block:
            block = strip_comments(block)
        if block.strip():
            prose = tok.type in ("paragraph_open", "blockquote_open", "html_block") or (
                admonition and tok.type == "code_block"
            )
            sections[-1].blocks.append(Block(block, start, end, prose, tok.type == "heading_open"))
            if tok.type != "heading_open" and not sections[-1].has_body:
                sections[-1] = Section(sections[-1].heading_path, sections[-1].blocks)
        i += 1
    # A heading directly followed by a sub-heading lives on in the sub-section's heading path.
    kept = [s for s in sections if s.blocks and s.has_body]
    return Parsed(kept or [s for s in sections if s.blocks], h1 or fm_title)
