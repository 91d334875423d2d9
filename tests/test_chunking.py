"""chunk_document: heading paths, block handling, sizes in tokens, overlap and line ranges."""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence

import pytest
from conftest import count_words

from mcpower.chunking import HEADING_SEPARATOR, MAX_HEADING_TOKENS, Chunk, Document, chunk_document
from mcpower.chunking.sections import MAX_HEADING_CHARS, MAX_HEADING_PATH_CHARS


def chunk(
    text: str, file_type: str = ".md", name: str = "doc.md", chunk_tokens: int = 60, overlap: int = 8
) -> Document:
    return chunk_document(text, file_type, name, count_words, chunk_tokens, overlap)


def tokens(text: str) -> int:
    return count_words([text])[0]


def source_lines(text: str, c: Chunk) -> str:
    return "\n".join(text.split("\n")[c.start_line - 1 : c.end_line])


def assert_within_budget(doc: Document, chunk_tokens: int) -> None:
    """Each chunk's body fits what is left after its heading, and what the model reads fits the window.

    The packer keeps at least 16 tokens for the body however long the heading is, so with tiny
    chunk sizes the embedded text may exceed ``chunk_tokens`` by the heading (the slack it allows).
    """
    for c in doc.chunks:
        heading = min(tokens(c.heading), MAX_HEADING_TOKENS) if c.heading_path else 0
        body_budget = max(chunk_tokens - heading, 16)
        assert tokens(c.text) <= body_budget, c
        assert tokens(c.embed_text) <= max(chunk_tokens, heading + 16), c


# A body long enough to be a section of its own (shorter ones are packed with their neighbours).
WORDS = "The body of this section has more than eight words in it."

NESTED = """\
# Guide

Welcome to the guide, which explains how to install the toolkit.

## Install { #install }

Before you start, check that your system is a supported one.

### Linux

Run the package manager to install the toolkit and its tools.

### macOS {.unnumbered}

Use the installer from the download page and follow its steps.

## Usage

Run the tool from a terminal with a configuration file.
"""


def test_nested_headings_give_heading_paths() -> None:
    doc = chunk(NESTED)

    assert [c.heading for c in doc.chunks] == [
        "Guide",
        "Guide > Install",
        "Guide > Install > Linux",
        "Guide > Install > macOS",
        "Guide > Usage",
    ]
    assert doc.chunks[2].heading_path == ("Guide", "Install", "Linux")
    assert (
        doc.chunks[2].embed_text
        == "Guide > Install > Linux\n### Linux\n\nRun the package manager to install the toolkit and its tools."
    )
    assert [c.ordinal for c in doc.chunks] == list(range(5))


def test_heading_attributes_are_stripped_from_titles() -> None:
    doc = chunk(f"# Title {{ #top }}\n\n{WORDS}\n\n## Part {{.class}}\n\n{WORDS}\n")

    assert doc.title == "Title"
    assert doc.chunks[1].heading_path == ("Title", "Part")


def test_heading_only_sections_live_on_in_the_sub_section_path() -> None:
    doc = chunk("# API\n\n## Functions\n\n### connect()\n\nOpens a connection.\n")

    assert len(doc.chunks) == 1
    assert doc.chunks[0].heading_path == ("API", "Functions", "connect()")
    assert (doc.chunks[0].start_line, doc.chunks[0].end_line) == (5, 7)


def test_setext_headings_are_headings() -> None:
    doc = chunk(f"Guide\n=====\n\n{WORDS}\n\nPart\n----\n\n{WORDS}\n")

    assert doc.title == "Guide"
    assert [c.heading_path for c in doc.chunks] == [("Guide",), ("Guide", "Part")]


def test_line_ranges_are_one_based_inclusive_and_match_the_source() -> None:
    doc = chunk(NESTED)

    assert [(c.start_line, c.end_line) for c in doc.chunks] == [(1, 3), (5, 7), (9, 11), (13, 15), (17, 19)]
    for c in doc.chunks:
        assert c.text == source_lines(NESTED, c)


def test_code_fence_that_fits_stays_whole() -> None:
    code = "```python\ndef f():\n\n    return 1\n```"
    text = f"# Code\n\nBefore.\n\n{code}\n\nAfter.\n"

    doc = chunk(text, chunk_tokens=200)

    assert len(doc.chunks) == 1
    assert code in doc.chunks[0].text


def test_code_fence_too_big_is_split_at_line_boundaries() -> None:
    lines = [f"value_{i} = compute({i}, {i + 1})" for i in range(40)]
    text = "# Code\n\n```python\n" + "\n".join(lines) + "\n```\n"

    doc = chunk(text, chunk_tokens=60, overlap=10)

    assert len(doc.chunks) > 2
    for c in doc.chunks:
        assert c.text == source_lines(text, c)  # whole lines, exactly as written
        body = [line for line in c.text.split("\n") if line.startswith("value_")]
        assert all(line in lines for line in body)
    covered = {line for c in doc.chunks for line in c.text.split("\n")}
    assert set(lines) <= covered
    assert_within_budget(doc, 60)


def test_table_that_fits_stays_whole() -> None:
    table = "| name | value |\n|------|-------|\n" + "\n".join(f"| row{i} | {i} |" for i in range(5))
    text = f"# Data\n\nIntro line.\n\n{table}\n\nAfter the table.\n"

    doc = chunk(text, chunk_tokens=60, overlap=0)

    holding = [c for c in doc.chunks if "| row0 |" in c.text]
    assert len(holding) == 1
    assert table in holding[0].text


def test_table_too_big_is_split_at_row_boundaries() -> None:
    rows = [f"| row{i} | value {i} | note {i} |" for i in range(40)]
    text = "# Data\n\n| name | value | note |\n|---|---|---|\n" + "\n".join(rows) + "\n"

    doc = chunk(text, chunk_tokens=60, overlap=0)

    assert len(doc.chunks) > 2
    for c in doc.chunks:
        assert c.text == source_lines(text, c)
    assert [r for c in doc.chunks for r in c.text.split("\n") if r.startswith("| row")] == rows
    assert_within_budget(doc, 60)


def test_front_matter_gives_the_title_and_is_not_chunked() -> None:
    text = '---\ntitle: "Front Title"\nauthor: someone\n---\n\nBody text here.\n'

    doc = chunk(text)

    assert doc.title == "Front Title"
    assert [c.text for c in doc.chunks] == ["Body text here."]
    assert (doc.chunks[0].start_line, doc.chunks[0].end_line) == (6, 6)
    assert all("author" not in c.text for c in doc.chunks)


@pytest.mark.parametrize(
    ("text", "name", "title"),
    [
        ("---\ntitle: From Front Matter\n---\n\n# From H1\n\nBody.\n", "file.md", "From H1"),
        ("---\ntitle: From Front Matter\n---\n\n## Only H2\n\nBody.\n", "file.md", "From Front Matter"),
        ("## Only H2\n\nBody.\n", "my-notes.md", "my-notes"),
        ("Plain.\n", "folder-less.markdown", "folder-less"),
    ],
)
def test_title_falls_back_from_h1_to_front_matter_to_file_name(text: str, name: str, title: str) -> None:
    assert chunk(text, name=name).title == title


@pytest.mark.parametrize("text", ["", "\n\n  \n", "---\ntitle: Empty\n---\n"])
def test_empty_documents_give_no_chunks(text: str) -> None:
    assert chunk(text).chunks == []


@pytest.mark.parametrize(("chunk_tokens", "overlap"), [(50, 8), (250, 32), (16, 0), (20, 5)])
def test_huge_single_paragraph_splits_within_the_budget(chunk_tokens: int, overlap: int) -> None:
    words = [f"w{i}" for i in range(5000)]
    text = "# Big\n\n" + " ".join(words) + "\n"

    doc = chunk(text, chunk_tokens=chunk_tokens, overlap=overlap)

    assert len(doc.chunks) > 5000 // chunk_tokens
    assert_within_budget(doc, chunk_tokens)
    seen = {w for c in doc.chunks for w in c.text.split()}
    assert set(words) <= seen  # nothing dropped
    assert all(c.start_line == c.end_line == 3 for c in doc.chunks[1:])


def test_long_prose_splits_at_sentence_ends() -> None:
    text = "# Prose\n\n" + " ".join(f"Sentence number {i} is here." for i in range(60)) + "\n"

    doc = chunk(text, chunk_tokens=40, overlap=0)

    assert len(doc.chunks) > 3
    for c in doc.chunks[1:]:
        assert c.text.startswith("Sentence number ") and c.text.endswith(" is here.")
    assert_within_budget(doc, 40)


def test_crlf_gives_the_same_chunks_as_lf() -> None:
    lf = NESTED + "\n```\ncode line\n```\n"
    crlf = lf.replace("\n", "\r\n")

    assert chunk(crlf) == chunk(lf)
    assert chunk("\ufeff" + lf) == chunk(lf)  # a byte-order mark changes nothing either


def test_non_ascii_text_and_headings() -> None:
    # (Two CJK characters make a word for the near-empty rule: this body has about 11.)
    text = "# 安装指南\n\n在 Linux 上安装软件包之前请先阅读本指南。🚀 Emoji ok.\n\n## Ünïcödé 🎉\n\nCafé crème brûlée, déjà vu, naïve façade, Ærøskøbing.\n"

    doc = chunk(text)

    assert doc.title == "安装指南"
    assert [c.heading for c in doc.chunks] == ["安装指南", "安装指南 > Ünïcödé 🎉"]
    assert "🚀" in doc.chunks[0].text
    assert doc.chunks[1].text == "## Ünïcödé 🎉\n\nCafé crème brûlée, déjà vu, naïve façade, Ærøskøbing."


def cjk_counter(texts: Sequence[str]) -> list[int]:
    """Like a BERT tokenizer: every CJK character is a token of its own."""
    return [len(re.findall(r"[\u4e00-\u9fff]|[^\W\u4e00-\u9fff]+|[^\w\s]", t)) for t in texts]


def test_long_text_without_spaces_is_kept_whole_in_pieces_within_the_budget() -> None:
    sentence = "我们在北京的办公室讨论了新的软件安装流程和相关的配置文件"
    line = "，".join([sentence] * 40)  # ~1,200 characters, no spaces and no sentence end
    text = f"# 标题\n\n{line}\n"

    doc = chunk_document(text, ".md", "zh.md", cjk_counter, 100, 10)

    body = "".join(c.text for c in doc.chunks if c.start_line == 3)
    assert body == line  # nothing dropped, nothing added
    for c in doc.chunks:
        assert cjk_counter([c.embed_text])[0] <= 100


def test_overlong_heading_is_cut_in_what_the_model_reads() -> None:
    heading = "### " + " ".join(f"p{i} x" for i in range(60))
    text = "# API\n\n" + heading + "\n\n" + " ".join(f"word{i}" for i in range(300)) + "\n"

    doc = chunk(text, chunk_tokens=120, overlap=0)

    assert len(doc.chunks) > 2
    for c in doc.chunks:
        assert tokens(c.embed_text) <= 120
    long_section = doc.chunks[-1]
    assert long_section.heading.startswith("API > p0 x p1 x")  # stored up to MAX_HEADING_CHARS
    assert tokens(long_section.heading) > MAX_HEADING_TOKENS
    assert long_section.embed_text.startswith("API > p0 x")


@pytest.mark.parametrize("kilobytes", [64, 1024])
def test_a_pathological_heading_is_chunked_in_one_pass_and_clipped(kilobytes: int) -> None:
    # "{#" repeated made the attribute regex quadratic (1.5 s at 64 KB, hours at 10 MB), and the
    # whole heading was stored, and full-text indexed, with every chunk of its section.
    # Now 0.2 s at 1 MB (docs/robustness.md); the quadratic version never finishes this test.
    text = "# " + "{#" * (kilobytes * 512) + "\n\n" + "body words here. " * 200 + "\n"

    doc = chunk(text, chunk_tokens=60, overlap=0)

    assert len(doc.chunks) > 1
    assert all(len(c.heading) <= MAX_HEADING_CHARS for c in doc.chunks)


def test_a_deep_heading_path_keeps_its_first_and_last_headings() -> None:
    text = "".join(f"{'#' * (i + 1)} Level {i} " + "x" * 180 + f"\n\n{WORDS}\n\n" for i in range(6))

    deepest = chunk(text, chunk_tokens=200, overlap=0).chunks[-1]

    assert len(deepest.heading) <= MAX_HEADING_PATH_CHARS
    assert deepest.heading_path[0].startswith("Level 0") and deepest.heading_path[-1].startswith("Level 5")
    assert "…" in deepest.heading_path


def test_overlap_shares_text_inside_a_section_only() -> None:
    first = " ".join(f"Alpha sentence {i} ends." for i in range(30))
    second = " ".join(f"Beta sentence {i} ends." for i in range(30))
    text = f"# One\n\n{first}\n\n# Two\n\n{second}\n"

    doc = chunk(text, chunk_tokens=40, overlap=10)

    by_section: dict[tuple[str, ...], list[Chunk]] = {}
    for c in doc.chunks:
        by_section.setdefault(c.heading_path, []).append(c)
    assert set(by_section) == {("One",), ("Two",)}
    for chunks in by_section.values():
        assert len(chunks) > 2
        for a, b in itertools.pairwise(chunks):
            a_sentences = re.findall(r"\w+ sentence \d+ ends\.", a.text)
            b_sentences = re.findall(r"\w+ sentence \d+ ends\.", b.text)
            shared = [s for s in b_sentences if s in a_sentences]
            assert shared, (a.text, b.text)
            assert shared == a_sentences[-len(shared) :] == b_sentences[: len(shared)]  # a's tail starts b
            assert sum(tokens(s) for s in shared) <= 10  # whole sentences, up to `overlap` tokens
    last_of_one, first_of_two = by_section[("One",)][-1], by_section[("Two",)][0]
    assert "Alpha" not in first_of_two.text
    assert "Beta" not in last_of_one.text


def test_no_overlap_when_overlap_is_zero() -> None:
    text = "# One\n\n" + " ".join(f"Sentence {i} ends." for i in range(40)) + "\n"

    doc = chunk(text, chunk_tokens=30, overlap=0)

    sentences = [s for c in doc.chunks for s in re.findall(r"Sentence \d+ ends\.", c.text)]
    assert sentences == [f"Sentence {i} ends." for i in range(40)]


def test_every_chunk_of_a_mixed_document_fits() -> None:
    parts = ["# Mixed"]
    for n in range(6):
        parts.append(f"## Part {n}")
        parts.append(" ".join(f"Prose {n}.{i} goes on." for i in range(20)))
        parts.append("```\n" + "\n".join(f"code {n} {i}" for i in range(15)) + "\n```")
        parts.append("- item one\n- item two\n- item three")
    text = "\n\n".join(parts) + "\n"

    for chunk_tokens in (20, 48, 100, 250):
        doc = chunk(text, chunk_tokens=chunk_tokens, overlap=chunk_tokens // 5)
        assert doc.chunks
        assert_within_budget(doc, chunk_tokens)
        assert all(1 <= c.start_line <= c.end_line <= text.count("\n") for c in doc.chunks)


def test_rst_titles_become_heading_paths() -> None:
    text = (
        "=======\nManual\n=======\n\nOverview text, long enough to be a section of its own.\n\n"
        "Install\n=======\n\nInstall text, long enough to be a section of its own.\n\nLinux\n-----\n\nLinux text, long enough to be a section of its own.\n\n"
        "Usage\n=====\n\nUsage text, long enough to be a section of its own.\n"
    )

    doc = chunk(text, file_type=".rst", name="manual.rst")

    assert doc.title == "Manual"
    assert [c.heading_path for c in doc.chunks] == [
        ("Manual",),
        ("Manual", "Install"),
        ("Manual", "Install", "Linux"),
        ("Manual", "Usage"),
    ]
    for c in doc.chunks:  # line ranges point into the text stored for the document: titles as Markdown
        assert c.text == source_lines(doc.content, c)
    assert doc.chunks[0].text == "# Manual\n\nOverview text, long enough to be a section of its own."
    assert doc.chunks[2].text == "### Linux\n\nLinux text, long enough to be a section of its own."


def test_txt_is_split_into_paragraphs_without_headings() -> None:
    first = "The first paragraph has a line\nand a second line of words."  # 13 tokens
    second = "The second paragraph is a single line of words."  # 10 tokens
    text = f"{first}\n\n\n{second}\n"

    doc = chunk(text, file_type=".txt", name="notes.txt", chunk_tokens=16, overlap=0)

    assert doc.title == "notes"
    assert [c.text for c in doc.chunks] == [first, second]
    assert [(c.start_line, c.end_line) for c in doc.chunks] == [(1, 2), (5, 5)]
    assert all(c.heading_path == () and c.embed_text == c.text for c in doc.chunks)


def test_small_txt_paragraphs_share_a_chunk() -> None:
    doc = chunk("One short line.\n\nAnother short line.\n", file_type=".txt", name="t.txt")

    assert [(c.text, c.start_line, c.end_line) for c in doc.chunks] == [
        ("One short line.\n\nAnother short line.", 1, 3)
    ]


def test_markdown_heading_lines_are_not_mistaken_in_txt() -> None:
    doc = chunk("# not a heading\n\ntext\n", file_type=".txt", name="plain.txt")

    assert doc.title == "plain"
    assert all(c.heading_path == () for c in doc.chunks)


def test_heading_separator_is_used_in_heading() -> None:
    doc = chunk("# A\n\n## B\n\ntext\n")

    assert doc.chunks[0].heading == HEADING_SEPARATOR.join(("A", "B"))


# ---------------------------------------------------------------- near-empty sections

PIP_FREEZE = """\
==========
pip freeze
==========

Usage
=====

.. pip-command-usage:: freeze "python -m pip"

Options
=======

.. pip-command-options:: freeze

Examples
========

Generate output suitable for a requirements file, one pinned package a line::

    $ python -m pip freeze
    docutils==0.11
"""


def test_a_heading_over_a_directive_label_is_packed_with_the_next_section() -> None:
    doc = chunk(PIP_FREEZE, file_type=".rst", name="pip_freeze.rst", chunk_tokens=120)

    assert len(doc.chunks) == 1
    only = doc.chunks[0]
    assert "pip-command-options: freeze" in only.text and "requirements file" in only.text
    assert only.heading_path == ("pip freeze",)  # the sections it spans are siblings: their parent


def test_orphan_metadata_is_not_a_chunk_of_its_own() -> None:
    text = ":orphan:\n\nAJAX with jQuery\n================\n\nObsolete: see the JavaScript page, which uses fetch instead.\n"

    doc = chunk(text, file_type=".rst", name="jquery.rst")

    assert [c.heading_path for c in doc.chunks] == [("AJAX with jQuery",)]
    assert "orphan" not in doc.chunks[0].text


def test_an_intro_line_joins_the_sub_section_under_its_path_and_a_sparse_tail_joins_the_one_before() -> None:
    text = f"# API\n\nThe API.\n\n## connect()\n\n{WORDS}\n\n## close()\n\n{WORDS}\n\n## See also\n\nThe guide.\n"

    doc = chunk(text, chunk_tokens=200)

    assert [c.heading_path for c in doc.chunks] == [("API", "connect()"), ("API",)]
    assert doc.chunks[0].text.startswith("# API\n\nThe API.\n\n## connect()")
    assert doc.chunks[1].text.endswith("## See also\n\nThe guide.")


def test_a_heading_is_not_left_alone_when_the_block_after_it_does_not_fit() -> None:
    # 56 tokens: the paragraph fits a chunk (57 tokens of body), but not after "## History".
    paragraph = " ".join(f"The widget changed in release {n} again." for n in range(7))
    text = f"# Widget\n\n{WORDS}\n\n## History\n\n{paragraph}\n"

    doc = chunk(text, chunk_tokens=60, overlap=0)

    history = next(c for c in doc.chunks if "## History" in c.text)
    assert "release 0 again." in history.text, [c.text for c in doc.chunks]  # not the heading alone
    assert_within_budget(doc, 60)


def test_code_sections_are_not_folded() -> None:
    doc = chunk("def a():\n    pass\n\n\ndef b():\n    pass\n", file_type=".py", name="m.py")

    assert [c.heading_path for c in doc.chunks] == [("a",), ("b",)]
