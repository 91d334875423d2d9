"""Each format module: what it reads, the headings and titles it gives, and what it refuses."""

from __future__ import annotations

import contextlib
import io
import json
import struct
from pathlib import Path

import format_fixtures as ff
import pytest
from conftest import count_words

from mcpower.chunking import Document, UnreadableError, chunk_document, format_of, parse_document


def chunk(data: bytes | str, file_type: str, chunk_tokens: int = 120) -> Document:
    return chunk_document(data, file_type, f"doc{file_type}", count_words, chunk_tokens, 8)


def stored_lines(doc: Document, start: int, end: int) -> str:
    return "\n".join(doc.content.split("\n")[start - 1 : end])


def test_every_chunk_is_its_lines_of_the_stored_text() -> None:
    samples = {
        ".html": b"<html><body><main><h1>T</h1><p>One.</p><pre>a\n b</pre><p>Two.</p></main></body></html>",
        ".pdf": ff.pdf([["First page."], ["Second page."]]),
        ".docx": ff.docx([("h1", "T"), ("p", "One."), ("table", [["a", "b"]])]),
        ".ipynb": ff.notebook([("markdown", "# T\n\nOne."), ("code", "x = 1")]),
        ".rst": "T\n=\n\nOne.\n\n::\n\n  code\n",
        ".py": "import os\n\n\ndef f():\n    return 1\n",
    }
    for file_type, data in samples.items():
        doc = chunk(data, file_type)
        assert doc.chunks, file_type
        for c in doc.chunks:
            assert c.text == stored_lines(doc, c.start_line, c.end_line), (file_type, c)


# ---------------------------------------------------------------- sniffing


@pytest.mark.parametrize(
    ("text", "module"),
    [
        ("Title\n=====\n\nSee :func:`f`.\n", "rst"),
        ("Title\n=====\n\n.. note:: Hi.\n", "rst"),
        ("Title\n=====\n\nAn example::\n\n    code\n", "rst"),
        ("Title\n=====\n\nJust prose, no markup.\n", "text"),  # a Markdown-style underline alone
        ("Notes :func:`f` without titles.\n", "text"),
        ("Too short\n===\n\n.. note:: x\n", "text"),  # an underline shorter than its title is not one
    ],
)
def test_txt_files_are_sniffed_for_rst(text: str, module: str) -> None:
    assert format_of(text.encode(), ".txt") == f"mcpower.chunking.{module}"


def test_other_suffixes_are_not_sniffed() -> None:
    assert format_of(b"Title\n=====\n\n.. note:: x\n", ".md") == "mcpower.chunking.markdown"
    assert format_of(b"anything", ".unknown") == "mcpower.chunking.text"


# ---------------------------------------------------------------- reST


RST = """\
=========
Reference
=========

Intro about |project|, see :ref:`the setup guide <setup>` and :func:`~pkg.mod.connect`.

.. |project| replace:: **Zephyr**

``connect`` and :class:`Pool`
=============================

.. function:: connect(host, port=5432)

   Opens a connection to the quokka server.

   .. versionadded:: 2.1
      The port argument.

.. setting:: DEBUG

.. confval:: html_theme
   :type: str

   The theme setting.

.. code-block:: python
   :linenos:
   :emphasize-lines: 2

   x = 1

   y = 2

.. unknowndirective:: argument

   Content of an unknown directive.

A literal block::

    def f():

        return 1
"""


def test_rst_section_titles_and_object_directives_give_heading_paths() -> None:
    doc = chunk(RST, ".rst")

    assert doc.title == "Reference"
    paths = {c.heading_path for c in doc.chunks}
    assert ("Reference", "connect and Pool", "connect(host, port=5432)") in paths
    assert ("Reference", "connect and Pool", "html_theme") in paths
    assert not any("DEBUG" in p for path in paths for p in path)  # a marker without content is no heading


def test_rst_object_directives_of_other_domains_split_a_reference_page() -> None:
    # The shape of CMake's cmake-generator-expressions.7.rst and cpack_gen/nuget.rst, and of an HTTP API.
    text = (
        "Reference\n=========\n\n.. genex:: $<IF:condition,true_string,false_string>\n\n"
        "  .. versionadded:: 3.8\n\n  Evaluates to true_string if condition is 1.\n\n"
        ".. variable:: CPACK_NUGET_PACKAGE_NAME\n              CPACK_NUGET_<compName>_PACKAGE_NAME\n\n"
        " The NUGET package name, the id of the package in the feed.\n\n.. http:get:: /users/(int:user_id)\n\n   The user's profile, as JSON with the name and email of the user.\n"
    )

    paths = {c.heading_path for c in chunk(text, ".rst").chunks}

    assert ("Reference", "$<IF:condition,true_string,false_string>") in paths
    assert ("Reference", "CPACK_NUGET_PACKAGE_NAME") in paths  # the first line of the signature
    assert ("Reference", "/users/(int:user_id)") in paths


def test_rst_markup_becomes_readable_text_and_nothing_vanishes() -> None:
    doc = chunk(RST, ".rst")
    text = doc.content

    assert "Intro about Zephyr, see the setup guide and connect." in text
    assert "Opens a connection to the quokka server." in text
    assert "versionadded: 2.1" in text and "The port argument." in text
    assert "Content of an unknown directive." in text and "The theme setting." in text
    assert ":func:" not in text and "|project|" not in text


def test_rst_literal_blocks_stay_whole() -> None:
    doc = chunk(RST, ".rst", chunk_tokens=200)

    code = [c for c in doc.chunks if "def f():" in c.text]
    assert len(code) == 1 and "```\ndef f():\n\n    return 1\n```" in code[0].text
    assert any("x = 1\n\ny = 2" in c.text for c in doc.chunks)  # code-block with Sphinx options kept


def test_rst_include_and_raw_read_nothing_and_print_nothing(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("the-secret-value")
    text = (
        f"Title\n=====\n\n.. include:: {secret}\n\n.. raw:: html\n   :file: {secret}\n\n"
        ".. raw:: html\n\n   <script>x</script>\n\nBody text.\n"
    )
    # A docutils.conf where the ingest runs (the tests run in a folder of their own) is not read.
    Path("docutils.conf").write_text("[general]\nfile_insertion_enabled: yes\nraw_enabled: yes\n")
    err = io.StringIO()

    with contextlib.redirect_stderr(err):
        doc = chunk(text, ".rst")

    assert doc.content == "# Title\n\nBody text."
    assert err.getvalue() == ""


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("T\n=\n\n" + "- " * 300 + "x\n", "nested too deeply"),
        ("T\n=\n\n" + "".join(" " * i + f"level {i}\n\n" for i in range(300)), "nested too deeply"),
        ("T\n=\n\n" + " " * 500 + "deep\n", "indented more than 400 columns"),
        ("T\n=\n\n" + "word " * 400_000 + "\n", "found no content"),  # docutils drops over-long lines silently
    ],
)
def test_rst_that_docutils_cannot_parse_is_read_as_plain_text(text: str, why: str) -> None:
    parsed = parse_document(text.encode(), ".rst")

    assert parsed.text == text
    assert len(parsed.notes) == 1 and parsed.notes[0].startswith("read as plain text") and why in parsed.notes[0]
    assert parsed.sections


# ---------------------------------------------------------------- Markdown extensions


def test_markdown_admonition_bodies_are_prose_and_extensions_are_kept() -> None:
    text = (
        '# Guide\n\n!!! note "Title"\n    First paragraph.\n\n    Second paragraph. It has sentences.\n\n'
        "/// tip\nA pymdownx block.\n///\n\n::: warning\nA container.\n:::\n\n"
        'import Tabs from "@theme/Tabs";\n\n<Tabs>\n  <TabItem value="a">\n\nTab text.\n\n  </TabItem>\n</Tabs>\n'
    )

    parsed = parse_document(text, ".md")

    blocks = [b for s in parsed.sections for b in s.blocks]
    joined = "\n".join(b.text for b in blocks)
    for kept in ("It has sentences.", "A pymdownx block.", "A container.", "Tab text.", "<Tabs>", "import Tabs"):
        assert kept in joined
    # The admonition's body is prose (cut between sentences), not an indented code block.
    assert all(b.prose for b in blocks if "It has sentences." in b.text)


# ---------------------------------------------------------------- HTML

PAGE = b"""<!DOCTYPE html><html><head><title>Quokka care</title><style>.x{}</style>
<script>var tracking = 1;</script></head><body>
<header><nav><a href="/">Home</a> <a href="/about">About us</a></nav></header>
<div id="cookie-banner">We use cookies</div>
<main><article><header><h1>Caring for quokkas</h1></header>
<p>Quokkas eat <b>leaves</b> and grasses.</p>
<h2>Housing</h2><p>They need shade.</p>
<pre>def feed():
    return "leaves"</pre>
<table><tr><th>Food</th><th>Amount</th></tr><tr><td>Leaves</td><td><p>200</p><p>grams</p></td></tr></table>
<aside>Related: wombats</aside><form><input value="search"></form>
</article></main><footer>Copyright footer</footer></body></html>"""


def test_html_main_content_headings_code_and_tables() -> None:
    doc = chunk(PAGE, ".html")

    assert doc.title == "Quokka care"
    text = doc.content
    assert text.startswith("# Caring for quokkas\n\nQuokkas eat leaves and grasses.")
    assert 'def feed():\n    return "leaves"' in text
    assert "Food | Amount\nLeaves | 200 grams" in text
    for dropped in ("Home", "cookies", "tracking", "wombats", "Copyright", "search", ".x{}"):
        assert dropped not in text
    assert ("Caring for quokkas", "Housing") in {c.heading_path for c in doc.chunks}


def test_html_title_falls_back_to_the_first_h1_and_reads_the_declared_charset() -> None:
    latin1 = '<html><head><meta charset="windows-1252"></head><body><h1>Café</h1><p>naïve</p></body></html>'

    doc = chunk(latin1.encode("cp1252"), ".html")

    assert doc.title == "Café"
    assert "naïve" in doc.content


def test_html_nested_too_deeply_is_read_up_to_the_deep_part_with_a_note() -> None:
    page = b"<html><body><p>Before the depths.</p>" + b"<div>" * 100_000 + b"lost" + b"</div>" * 100_000
    page += b"</body></html>"

    parsed = parse_document(page, ".html")

    assert "Before the depths." in (parsed.text or "")
    assert parsed.notes and "nested deeper than 256 levels" in parsed.notes[0]


# ---------------------------------------------------------------- PDF


def test_pdf_pages_outline_and_title() -> None:
    data = ff.pdf_with_outline(
        ff.pdf(
            [
                ["Quokkas are small marsupials.", "They live on Rottnest Island near Perth."],
                ["Feeding: leaves and grasses at night.", "Water: little, from the plants."],
            ],
            title="Quokka manual",
        ),
        [("Introduction", 0, 1), ("Care", 1, 1), ("Feeding", 1, 2)],
    )

    doc = chunk(data, ".pdf", chunk_tokens=16)

    assert doc.title == "Quokka manual"
    by_text = {c.text: c for c in doc.chunks}
    first = next(c for t, c in by_text.items() if "marsupials" in t)
    second = next(c for t, c in by_text.items() if "Feeding: leaves and" in t)
    assert (first.heading_path, first.pages) == (("Introduction",), (1, 1))
    assert (second.heading_path, second.pages) == (("Care", "Feeding"), (2, 2))


def test_pdf_chunks_spanning_pages_say_so() -> None:
    doc = chunk(ff.pdf([["Short one."], ["Short two."]]), ".pdf")

    assert [c.pages for c in doc.chunks] == [(1, 2)]
    assert doc.title == "doc"  # no metadata title: the file name


def test_pdf_line_end_hyphens_are_joined() -> None:
    doc = chunk(ff.pdf([["The documen-", "tation is long. A self-", "Contained word stays."]]), ".pdf")

    assert "documentation is long." in doc.content
    assert "self-\nContained" in doc.content


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (ff.encrypted_pdf(ff.pdf([["secret"]]), "pw"), "encrypted: a password is required"),
        (ff.pdf([["Some text."]] * 3)[:300], "damaged PDF"),
        (ff.pdf([[]]), "no text layer"),
        (b"<html>not a pdf</html>", "not a PDF"),
        (b"%PDF-1.4\n" + b"\x00garbage" * 100, "damaged PDF"),
    ],
    ids=["encrypted", "truncated", "no-text", "not-a-pdf", "garbage"],
)
def test_unreadable_pdfs_are_refused_with_the_reason(data: bytes, reason: str) -> None:
    with pytest.raises(UnreadableError, match=reason):
        parse_document(data, ".pdf")


# ---------------------------------------------------------------- Word


def test_docx_headings_from_localised_styles_title_and_tables() -> None:
    data = ff.docx(
        [
            ("title", "Quokka handbook"),
            ("h1", "Feeding"),
            ("p", "Quokkas eat leaves, grasses and shrubs in the evening."),
            ("h2", "Amounts"),
            ("table", [["Food", "Grams a day"], ["Leaves", "200"], ["Grasses", "150"]]),
            ("h1", "Housing"),
            ("p", "Shade matters most on hot summer afternoons in Australia."),
        ]
    )

    doc = chunk(data, ".docx")

    assert doc.title == "Quokka handbook"
    assert [c.heading_path for c in doc.chunks] == [("Feeding",), ("Feeding", "Amounts"), ("Housing",)]
    assert "Food | Grams a day\nLeaves | 200" in doc.content


def _lying_zip(declared: int) -> bytes:
    """A valid .docx whose central directory claims document.xml unpacks to ``declared`` bytes."""
    data = bytearray(ff.docx([("p", "x")]))
    at = data.find(b"PK\x01\x02")  # central directory entries: the size at +24, the name at +46
    while at >= 0:
        name_len = struct.unpack_from("<H", data, at + 28)[0]
        if data[at + 46 : at + 46 + name_len] == b"word/document.xml":
            struct.pack_into("<I", data, at + 24, declared)
        at = data.find(b"PK\x01\x02", at + 4)
    return bytes(data)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (ff.docx_bomb(8), "inflates .* times"),
        (_lying_zip(300 << 20), "would unpack to 300 MiB"),
        (b"PK\x03\x04 truncated", "not a valid zip archive"),
        (ff.zipped({"other.xml": "<a/>"}), "not a Word document"),
        (
            ff.zipped({"word/document.xml": '<!DOCTYPE d [<!ENTITY a "aaaa">]><d>&a;</d>'}),
            "has a DTD or entities",
        ),
        (ff.zipped({"word/document.xml": "<w:document><w:body>"}), "malformed XML"),
    ],
    ids=["zip-bomb", "lying-sizes", "not-a-zip", "no-document", "dtd", "malformed"],
)
def test_unreadable_docx_is_refused_with_the_reason(data: bytes, reason: str) -> None:
    with pytest.raises(UnreadableError, match=reason):
        parse_document(data, ".docx")


# ---------------------------------------------------------------- notebooks


def test_notebook_cells_become_markdown_and_outputs_are_dropped() -> None:
    data = ff.notebook(
        [("markdown", "# Quokka analysis\n\nWe count quokkas."), ("code", "count = 42\nprint(count)")],
        outputs=["OUTPUT-NOT-KEPT " * 1000],
    )

    doc = chunk(data, ".ipynb")

    assert doc.title == "Quokka analysis"
    assert "```python\ncount = 42\nprint(count)\n```" in doc.content
    assert "OUTPUT-NOT-KEPT" not in doc.content


def test_nbformat_3_notebooks_are_read() -> None:
    nb = {
        "worksheets": [
            {"cells": [{"cell_type": "heading", "level": 1, "source": "Old"}, {"cell_type": "code", "input": "x = 1"}]}
        ]
    }

    doc = chunk(json.dumps(nb).encode(), ".ipynb")

    assert doc.title == "Old" and "x = 1" in doc.content


@pytest.mark.parametrize("data", [b"{not json", b"[1, 2]", b'{"cells": 5}', b"[" * 100_000])
def test_broken_notebooks_are_refused(data: bytes) -> None:
    with pytest.raises(UnreadableError, match="not a notebook"):
        parse_document(data, ".ipynb")


# ---------------------------------------------------------------- code

PYTHON = '''"""Module doc."""
import os


# Comments above belong to the function.
@decorator
def connect(host):
    return host


class Pool:
    """A pool."""

    size = 3

    def get(self):
        return 1

    async def close(self):
        pass
'''


def test_python_definitions_and_methods_give_heading_paths() -> None:
    doc = chunk(PYTHON, ".py", chunk_tokens=40)

    spans = {c.heading_path: (c.start_line, c.end_line) for c in doc.chunks}
    assert spans[("connect",)] == (5, 8)  # from the comment above, decorator included
    assert spans[("Pool", "get")] == (16, 17)
    assert spans[("Pool", "close")] == (19, 20)
    assert ("Pool",) in spans and () in spans  # the class body before its methods; the imports


def test_python_that_does_not_parse_is_split_by_the_column_rule_with_a_note() -> None:
    parsed = parse_document(b"print 'python 2'\n\ndef f():\n    print 'x'\n", ".py")

    assert parsed.notes and "not parsed as Python 3" in parsed.notes[0]
    assert [s.heading_path for s in parsed.sections] == [(), ("f",)]


@pytest.mark.parametrize(
    ("file_type", "text", "names"),
    [
        (".go", "package x\n\n// Run runs.\nfunc Run() {\n}\n\ntype T struct{}\n", [(), ("Run",), ("T",)]),
        (".rs", "use x;\n\n#[derive(Debug)]\npub struct S;\n\nimpl S {\n    fn f() {}\n}\n", [(), ("S",), ("S",)]),
        (
            ".ts",
            "import x from 'y';\n\nexport async function load() {}\n\nexport class A {}\n",
            [(), ("load",), ("A",)],
        ),
        (".java", "package p;\n\n/** Doc. */\npublic final class App {\n  void run() {}\n}\n", [(), ("App",)]),
    ],
)
def test_other_languages_follow_the_column_rule(file_type: str, text: str, names: list[tuple[str, ...]]) -> None:
    parsed = parse_document(text.encode(), file_type)

    assert [s.heading_path for s in parsed.sections] == names
