"""Text from pages that documentation tools generate: permalinks, buttons, script links and HTML
comments stay out of chunks and headings (real pages in tests/pages, and the rules one by one)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import count_words

from mcpower.chunking import Document, chunk_document

PAGES = Path(__file__).resolve().parent / "pages"


def chunk(data: bytes | str, name: str) -> Document:
    return chunk_document(data, Path(name).suffix, name, count_words, 120, 8)


def page(name: str) -> Document:
    return chunk((PAGES / name).read_bytes(), name)


def headings(doc: Document) -> set[str]:
    return {h for c in doc.chunks for h in c.heading_path}


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("sphinx-flask-quickstart.html", {"Quickstart", "A Minimal Application"}),
        ("mkdocs-cli.html", {"mkdocs"}),
        ("rustdoc-fs-read_to_string.html", {"Function std::fs::read_to_string", "Errors", "Examples"}),
        ("node-readline.html", {"Readline", "Class: InterfaceConstructor", "Event: 'close'"}),
        ("node-readline.md", {"Readline", "Class: `InterfaceConstructor`"}),
    ],
)
def test_real_generated_pages_give_clean_headings_and_text(name: str, expected: set[str]) -> None:
    doc = page(name)

    assert expected <= headings(doc), headings(doc)
    for c in doc.chunks:
        for line in [*c.heading_path, *c.text.split("\n")]:
            assert not line.rstrip().endswith(("¶", "§", "#")), (name, line)  # permalink markers
        for furniture in ("<!--", "YAML", "[−]", "Copy item path", "Edit on GitHub", "javascript"):
            assert furniture not in c.text, (name, furniture, c.text)


def test_a_sphinx_page_keeps_its_content() -> None:
    doc = page("sphinx-flask-quickstart.html")

    assert doc.title == "Quickstart — Flask Documentation (2.2.x)"
    assert "# Quickstart\n\nEager to get started?" in doc.content
    assert 'return "<p>Hello, World!</p>"' in doc.content


def test_node_markdown_comments_go_but_the_text_around_them_stays() -> None:
    doc = page("node-readline.md")

    text = "\n".join(c.text for c in doc.chunks)
    assert "added: v0.1.104" not in text and "source_link" not in text
    assert "* Extends: {EventEmitter}" in text
    # Line numbers still point into the file.
    source = (PAGES / "node-readline.md").read_text().split("\n")
    extends = next(c for c in doc.chunks if "Extends" in c.text)
    assert "Class: `InterfaceConstructor`" in source[extends.start_line - 1]


def test_markdown_comments_in_headings_and_paragraphs_go_but_code_keeps_them() -> None:
    text = (
        "# Title <!-- draft -->\n\nA paragraph <!-- a note\nover lines --> that goes on to say enough words.\n\n"
        "```html\n<!-- the code's own comment -->\n<p>x</p>\n```\n\n<!-- unclosed comment\n\nhidden text\n"
    )

    doc = chunk(text, "doc.md")

    assert doc.title == "Title"
    assert [c.heading_path for c in doc.chunks] == [("Title",)]
    body = doc.chunks[0].text
    assert "<!-- the code's own comment -->" in body
    assert "a note" not in body and "draft" not in body and "hidden text" not in body
    assert "A paragraph" in body and "that goes on to say enough words." in body


def test_buttons_permalinks_script_links_and_furniture_classes_are_dropped() -> None:
    html = (
        "<html><body><a class='skip-link' href='#main'>Skip to content</a><main>"
        "<h1>Widgets<a class='headerlink' href='#widgets'>¶</a></h1>"
        "<h2>Build<a href='#build'>🔗</a></h2>"
        "<p>Build the widget with the factory and ship it to customers.</p>"
        "<pre>make widget<button class='copy-button'>copy</button></pre>"
        "<div class='highlight'><span class='copybtn' role='button'>Copy to clipboard</span></div>"
        "<p><a href='https://example.org/edit/page.md'>Edit this page</a></p>"
        "<p><a href='javascript:void(0)'>[−]</a> <span role='button'>Expand</span></p>"
        "<p class='copyright'>Widgets are copyright the widget makers.</p>"
        "<table><tr><th>Name<a href='#name'>#</a></th><td>widget</td></tr></table>"
        "</main></body></html>"
    )

    doc = chunk(html, "page.html")

    assert {c.heading for c in doc.chunks} == {"Widgets > Build"}
    text = doc.content
    for furniture in ("¶", "🔗", "copy\n", "Copy to clipboard", "Edit this page", "[−]", "Expand", "Skip"):
        assert furniture not in text, furniture
    assert "```\nmake widget\n```" in text
    assert "Widgets are copyright the widget makers." in text  # "copyright" is not "copy"
    assert "Name | widget" in text
