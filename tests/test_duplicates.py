"""Duplicates (mcpower/duplicates.py): a file reached twice is one document, a text twice is
indexed once, the rendered page kept; and what `mcpower ingest` says about them.

The folder ``gitdoc`` is Debian's git-doc in small: man pages as ``NAME.html`` beside their AsciiDoc
``NAME.txt``, a fragment the pages include (``diff-options.txt``), ``index.html -> git.html``, and
pages that are nothing of the kind (``notes.txt`` and ``notes.html`` share a stem, not a text).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FakeEmbedder, write_files
from typer.testing import CliRunner

from mcpower import duplicates
from mcpower.cli.app import app
from mcpower.discover import discover
from mcpower.duplicates import (
    INCLUDED,
    SAME_BYTES,
    SAME_FILE_HARD,
    SAME_FILE_LINK,
    SAME_WORDS,
    SOURCE,
    Duplicate,
    Duplicates,
    same_files,
)
from mcpower.ingestion import IngestOptions, ingest
from mcpower.manifest import MANIFEST_NAME, read_manifest

OPTIONS = """\
--verbose::
\tBe verbose about every path added to the index, and say why a path is ignored when it is.
--dry-run::
\tDo not actually add the files, just show whether they exist and whether they would be ignored.
--force::
\tAllow adding otherwise ignored files, such as those listed in a gitignore file of the project.
"""
OPTIONS_HTML = (
    "<dt>--verbose</dt><dd><p>Be verbose about every path added to the index, and say why a path is ignored "
    "when it is.</p></dd><dt>--dry-run</dt><dd><p>Do not actually add the files, just show whether they exist "
    "and whether they would be ignored.</p></dd><dt>--force</dt><dd><p>Allow adding otherwise ignored files, "
    "such as those listed in a gitignore file of the project.</p></dd>"
)


def man_page(name: str, what: str) -> tuple[str, str]:
    """(AsciiDoc source, its HTML rendering) of a man page: the source's markup and include become
    the page's text, as asciidoc renders them."""
    body = (
        f"This command {what} using the current content found in the working tree, to prepare the "
        f"content staged for the next commit of the {name} repository history."
    )
    source = (
        f"{name}(1)\n==========\n\nNAME\n----\n{name} - {what}\n\nDESCRIPTION\n-----------\n{body}\n"
        f"See linkgit:git-commit[1] and linkgit:gitglossary[7] for the words used here.\n\n"
        f"OPTIONS\n-------\ninclude::diff-options.txt[]\n\nGIT\n---\nPart of the linkgit:git[1] suite\n"
    )
    html = (
        f"<html><head><title>{name}(1)</title></head><body><h1>{name}(1) Manual Page</h1><h2>NAME</h2>"
        f"<p>{name} - {what}</p><h2>DESCRIPTION</h2><p>{body}</p><p>See git-commit(1) and gitglossary(7) for "
        f"the words used here.</p><h2>OPTIONS</h2><dl>{OPTIONS_HTML}</dl><h2>GIT</h2><p>Part of the git(1) "
        f"suite</p><div id='footer'>Last updated 2023-01-01 12:00:00 UTC</div></body></html>"
    )
    return source, html


@pytest.fixture
def gitdoc(tmp_path: Path) -> Path:
    files: dict[str, str | bytes] = {"diff-options.txt": OPTIONS}
    for name, what in [("git-add", "adds file contents to the index"), ("git-rm", "removes files from the index")]:
        files[f"{name}.txt"], files[f"{name}.html"] = man_page(name, what)
    files["git.html"] = man_page("git", "is the stupid content tracker")[1]
    files["notes.txt"] = "Bread needs a rye starter fed twice a day, and the dough rests overnight in a cold room.\n"
    files["notes.html"] = (
        "<html><body><h1>Harpsichord</h1><p>The harpsichord is tuned before each concert, its quills "
        "voiced one by one by the keeper of the instrument.</p></body></html>"
    )
    folder = write_files(tmp_path / "git-doc", files)
    (folder / "index.html").symlink_to("git.html")
    return folder


# ---------------------------------------------------------------- the rules, on texts


def resolve(texts: dict[str, str]) -> list[Duplicate]:
    finder = Duplicates(texts)
    for rel, text in texts.items():
        finder.add(rel, str(hash(text.encode())), text)
    return finder.resolve(texts.__getitem__)


def rendered_text(html: str) -> str:
    """About what the HTML reader stores: the text, tags gone."""
    import re

    return re.sub(r"<[^>]+>", "\n", html)


def test_a_source_beside_its_rendering_is_dropped_for_the_page() -> None:
    source, html = man_page("git-add", "adds file contents to the index")
    found = resolve({"git-add.txt": source, "git-add.html": rendered_text(html)})
    assert found == [Duplicate("git-add.txt", "git-add.html", SOURCE)]


def test_a_fragment_included_in_a_page_is_dropped_and_one_that_quotes_a_paragraph_is_not() -> None:
    _, html = man_page("git-add", "adds file contents to the index")
    own = " ".join(
        f"Release {n} moved the quokka diagnostics to page {n * 7} of the harpsichord manual." for n in range(12)
    )
    quoted = OPTIONS.splitlines()[0] + "\n" + OPTIONS.splitlines()[1] + "\n" + own  # a paragraph quoted, then its own
    found = resolve({"diff-options.txt": OPTIONS, "git-add.html": rendered_text(html), "quoted.txt": quoted})
    assert found == [Duplicate("diff-options.txt", "git-add.html", INCLUDED)]


def test_copies_keep_the_rendered_format_then_the_shorter_path() -> None:
    text = "# Widgets\n\nThe **widget** toolkit draws widgets on any screen, fast, with _no_ flicker at all.\n"
    plain = "Widgets\n\nThe widget toolkit draws widgets on any screen, fast, with no flicker at all.\n"
    found = resolve({"a/deep/copy.md": text, "copy.md": text, "notes.txt": plain})
    assert found == [
        Duplicate("a/deep/copy.md", "copy.md", SAME_BYTES),
        Duplicate("notes.txt", "copy.md", SAME_WORDS),
    ]


def test_pages_that_only_share_a_stem_or_a_few_words_are_kept() -> None:
    found = resolve(
        {
            "notes.txt": "Bread needs a rye starter fed twice a day, and the dough rests overnight in a cold room.",
            "notes.html": "The harpsichord is tuned before each concert, its quills voiced one by one, by hand.",
            "a/TODO.md": "TODO: write this page",
            "b/TODO.md": "TODO: write this page",  # a stub twice is two pages: too short to call one a copy
        }
    )
    assert found == []


def test_a_long_text_keeps_a_bounded_sample_and_is_still_found_inside_a_page() -> None:
    words = [f"w{i % 5000}x{i // 5000}" for i in range(12_000)]
    fragment = " ".join(words)
    finder = Duplicates(["big.txt", "page.html"])
    finder.add("big.txt", "1", fragment)
    finder.add("page.html", "2", "Intro words of the page before it.\n" + fragment + "\nLast updated today.")
    sketch = finder._sketches["big.txt"]
    assert sketch.probes is not None and len(sketch.probes) <= 2 * duplicates.SAMPLE_CAP  # ~2 KB, not the text
    assert not any(isinstance(v, str) and len(v) > 100 for v in vars(sketch).values())
    texts = {"big.txt": fragment, "page.html": "Intro words of the page before it.\n" + fragment}
    assert finder.resolve(texts.__getitem__) == [Duplicate("big.txt", "page.html", INCLUDED)]


def test_a_file_reached_twice_is_one_document_under_its_canonical_path(tmp_path: Path) -> None:
    root = write_files(tmp_path / "docs", {"git.html": "<p>git</p>", "sub/b.md": "# B\n", "sub/deeper/x.md": "# X\n"})
    (root / "index.html").symlink_to("git.html")
    os.link(root / "sub" / "deeper" / "x.md", root / "sub" / "x-again.md")

    files, found = same_files(discover(root)[0])

    assert sorted(f.rel for f in files) == ["git.html", "sub/b.md", "sub/x-again.md"]
    assert found == [
        Duplicate("index.html", "git.html", SAME_FILE_LINK),
        Duplicate("sub/deeper/x.md", "sub/x-again.md", SAME_FILE_HARD),
    ]


# ---------------------------------------------------------------- ingest and the CLI


def test_ingest_indexes_each_text_once_and_says_which_copy_it_kept(
    gitdoc: Path, tmp_path: Path, fake_embedder: FakeEmbedder
) -> None:
    datasets = tmp_path / "datasets"
    result = CliRunner().invoke(app, ["ingest", str(gitdoc), "--datasets-dir", str(datasets), "--json", "-q"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert {d["path"]: (d["kept"], d["reason"]) for d in data["duplicates"]} == {
        "index.html": ("git.html", SAME_FILE_LINK),
        "git-add.txt": ("git-add.html", SOURCE),
        "git-rm.txt": ("git-rm.html", SOURCE),
        "diff-options.txt": ("git.html", INCLUDED),  # every page holds it: the first of them kept
    }
    assert data["documents"] == 5  # git.html, git-add.html, git-rm.html, notes.txt, notes.html
    assert data["plan"]["duplicates"] == 4
    assert not any(s["path"] in {"index.html", "git-add.txt"} for s in data["skipped"])

    # The search answers once per text: no source beside its page, no link beside its target.
    found = CliRunner().invoke(
        app, ["search", "git-doc", "staged for the next commit", "--datasets-dir", str(datasets), "--json"]
    )
    paths = [r["path"] for r in json.loads(found.stdout)["results"]]
    assert "git-add.html" in paths and not {"git-add.txt", "git-rm.txt", "index.html"} & set(paths)

    text = CliRunner().invoke(app, ["ingest", str(gitdoc), "--datasets-dir", str(datasets), "-q"])  # nothing read again
    assert "skipped 4 duplicates of documents kept (--keep-duplicates keeps them" in text.stderr
    assert "2 source or other rendering of the page kept: git-add.txt (kept git-add.html)" in text.stderr
    assert "1 same file (a symlink to it): index.html (kept git.html)" in text.stderr


def test_keep_duplicates_is_recorded_and_dropping_them_later_removes_them(
    gitdoc: Path, tmp_path: Path, fake_embedder: FakeEmbedder
) -> None:
    datasets = tmp_path / "datasets"
    kept = ingest(gitdoc, datasets, IngestOptions(keep_duplicates=True), embedder=fake_embedder)
    assert kept.documents == 8 and [d.path for d in kept.duplicates] == ["index.html"]  # one file is one document
    manifest = datasets / "git-doc" / MANIFEST_NAME
    assert read_manifest(manifest).source.keep_duplicates is True  # type: ignore[union-attr]

    report = ingest(gitdoc, datasets, IngestOptions(), embedder=fake_embedder)

    assert report.documents == 5 and report.removed == 3
    assert report.plan.removed == ["diff-options.txt", "git-add.txt", "git-rm.txt"]
    assert report.embedded == 0  # the pages kept were carried over
    assert "keepDuplicates" not in json.loads(manifest.read_text())["source"]  # readable by an older mcpower


def test_the_check_is_skipped_where_no_rule_can_apply(tmp_path: Path) -> None:
    """A Markdown folder keeps only a digest per document: no samples, no texts hashed again."""
    finder = Duplicates(["a.md", "b/c.md"])
    finder.add("a.md", "1", "Some words about widgets and their many fine colours, all of them bright.")
    finder.add("b/c.md", "2", "Other words about gadgets and their many odd shapes, none of them round.")
    assert all(s.probes is None for s in finder._sketches.values())
    assert finder.resolve(lambda rel: pytest.fail(f"{rel} hashed again")) == []


@pytest.mark.slow  # a fresh interpreter: ~1 s
def test_hashes_are_the_same_in_every_run() -> None:
    """Samples are chosen by hash value: a run that hashed otherwise (Python's own string hashes
    change with every process) could decide otherwise."""
    words = ["the", "quick", "brown", "fox", "jumps", "over", "the", "lazy", "dog"]
    code = f"from mcpower import duplicates; print(duplicates.triples({words!r}).tolist())"
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    there = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert json.loads(there) == duplicates.triples(words).tolist() and len(json.loads(there)) == 7


def test_files_without_inode_numbers_are_never_taken_for_one(tmp_path: Path) -> None:
    """Some file systems (or their drivers) give every file inode 0: that says nothing of sameness."""
    from mcpower.discover import SourceFile

    files = [SourceFile(rel, tmp_path / rel, 10, 0.0, tmp_path, (7, 0)) for rel in ("a.md", "b.md")]
    kept, found = same_files(files)
    assert [f.rel for f in kept] == ["a.md", "b.md"] and found == []
