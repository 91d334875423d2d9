"""Built documentation sites are read once (issue 20, item 5): a Sphinx, MkDocs, rustdoc, Javadoc or
Doxygen build is recognised by its own markers, each page is read once (the rendered page, not its
``_sources`` copy), index/search/module-index pages and static assets are skipped and reported by
kind, and ``--keep-site-files`` (recorded in the manifest, so ``--watch`` keeps it) reads them all.

tests/sites/ holds a few files of real builds: sphinx-jinja (Debian's python-jinja2-doc, BSD-3-Clause)
and mkdocs-tiny (built offline with MkDocs 1.6.1); each folder's SOURCE file says how.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import FakeEmbedder
from typer.testing import CliRunner

from mcpower.cli.app import app
from mcpower.discover import discover
from mcpower.ingestion import IngestOptions, ingest
from mcpower.manifest import MANIFEST_NAME, read_manifest
from mcpower.sites import furniture_counts
from mcpower.watch import WatchLimits
from mcpower.watch.source import ingest_options, unchanged

SITES = Path(__file__).parent / "sites"


@pytest.fixture
def sphinx(tmp_path: Path) -> Path:
    folder = tmp_path / "jinja-html"
    shutil.copytree(SITES / "sphinx-jinja", folder)
    return folder


@pytest.fixture
def mkdocs(tmp_path: Path) -> Path:
    folder = tmp_path / "mkdocs-site"
    shutil.copytree(SITES / "mkdocs-tiny", folder)
    return folder


def rels(folder: Path, **kw: bool) -> list[str]:
    return [f.rel for f in discover(folder, **kw)[0]]


def test_a_sphinx_build_is_read_once_as_its_pages(sphinx: Path) -> None:
    files, skipped = discover(sphinx)
    assert [f.rel for f in files] == ["faq.html", "intro.html"]
    assert dict(skipped) == {
        "404.html": "site furniture: Sphinx index, search or module-index page",
        "py-modindex.html": "site furniture: Sphinx index, search or module-index page",
        "search.html": "site furniture: Sphinx index, search or module-index page",
        "_sources/faq.rst.txt": "site furniture: Sphinx copy of a page's source",
        "_sources/intro.rst.txt": "site furniture: Sphinx copy of a page's source",
    }
    assert furniture_counts(skipped) == {
        "Sphinx index, search or module-index page": 3,
        "Sphinx copy of a page's source": 2,
    }


def test_keep_site_files_reads_everything(sphinx: Path) -> None:
    assert rels(sphinx, keep_site_files=True) == [
        "404.html",
        "faq.html",
        "intro.html",
        "py-modindex.html",
        "search.html",
        "_sources/faq.rst.txt",
        "_sources/intro.rst.txt",
    ]


def test_a_source_copy_whose_page_is_missing_is_the_only_copy_and_is_kept(sphinx: Path) -> None:
    (sphinx / "faq.html").unlink()
    assert rels(sphinx) == ["intro.html", "_sources/faq.rst.txt"]


def test_static_assets_of_a_readable_type_are_furniture(sphinx: Path) -> None:
    (sphinx / "_static" / "notes.txt").write_text("a vendored licence text")
    _, skipped = discover(sphinx)
    assert dict(skipped)["_static/notes.txt"] == "site furniture: Sphinx static asset"


def test_without_the_markers_nothing_is_furniture(sphinx: Path) -> None:
    (sphinx / "searchindex.js").unlink()
    assert "search.html" in rels(sphinx)
    assert "_sources/intro.rst.txt" in rels(sphinx)


def test_a_site_in_a_subfolder_is_found_and_its_neighbours_are_untouched(tmp_path: Path, sphinx: Path) -> None:
    root = tmp_path / "many"
    shutil.copytree(sphinx, root / "jinja" / "html")
    (root / "notes").mkdir()
    (root / "notes" / "search.html").write_text("<h1>How search works</h1><p>Our own page.</p>")
    assert rels(root) == ["jinja/html/faq.html", "jinja/html/intro.html", "notes/search.html"]


def test_an_mkdocs_build_is_recognised_and_its_404_page_skipped(mkdocs: Path) -> None:
    files, skipped = discover(mkdocs)
    assert [f.rel for f in files] == ["index.html", "configuration/index.html"]
    assert dict(skipped) == {"404.html": "site furniture: MkDocs index, search or module-index page"}


@pytest.mark.parametrize(
    ("markers", "pages", "furniture"),
    [
        (  # rustdoc
            ["search-index1.80.0.js", "static.files/rustdoc.css"],
            ["mycrate/index.html", "mycrate/struct.Thing.html"],
            ["settings.html", "help.html", "mycrate/all.html", "src/mycrate/lib.rs.html"],
        ),
        (  # Javadoc
            ["element-list", "allclasses-index.html"],
            ["com/acme/Widget.html", "com/acme/package-summary.html"],
            ["allclasses-index.html", "index-all.html", "com/acme/package-tree.html", "com/acme/class-use/Widget.html"],
        ),
        (  # Doxygen
            ["doxygen.css"],
            ["classWidget.html", "index.html"],
            ["classWidget-members.html", "widget_8h_source.html", "files.html", "search/all_0.html"],
        ),
    ],
)
def test_rustdoc_javadoc_and_doxygen_builds_by_their_markers(
    tmp_path: Path, markers: list[str], pages: list[str], furniture: list[str]
) -> None:
    for rel in markers + pages + furniture:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("<html><body><h1>Widget</h1><p>A widget.</p></body></html>")
    found, skipped = discover(tmp_path)
    assert sorted(f.rel for f in found) == sorted(pages)
    assert sorted(p for p, _ in skipped) == sorted(furniture)


def test_ingest_reports_furniture_by_kind_and_records_the_switch_for_watch(
    sphinx: Path, tmp_path: Path, fake_embedder: FakeEmbedder
) -> None:
    datasets = tmp_path / "datasets"
    result = CliRunner().invoke(app, ["ingest", str(sphinx), "--datasets-dir", str(datasets), "-q"])
    assert result.exit_code == 0, result.output
    assert "2 documents" in result.stdout
    assert (
        "skipped as site furniture: 3 Sphinx index, search or module-index page, "
        "2 Sphinx copy of a page's source (--keep-site-files keeps them)"
    ) in result.stderr
    assert "skipped _sources" not in result.stderr  # one line by kind, not one per file
    info = read_manifest(datasets / "jinja-html" / MANIFEST_NAME)
    assert info.source is not None and info.source.keep_site_files is False

    kept = CliRunner().invoke(
        app, ["ingest", str(sphinx), "--datasets-dir", str(datasets), "-q", "--keep-site-files", "--json"]
    )
    assert kept.exit_code == 0, kept.output
    # Read, and the two _sources copies whose text is their page's are then skipped as duplicates.
    assert json.loads(kept.stdout)["documents"] == 5
    assert {d["path"]: d["kept"] for d in json.loads(kept.stdout)["duplicates"]} == {
        "_sources/faq.rst.txt": "faq.html",
        "_sources/intro.rst.txt": "intro.html",
    }
    info = read_manifest(datasets / "jinja-html" / MANIFEST_NAME)
    assert info.source is not None and info.source.keep_site_files is True
    # A watcher re-ingests the way the dataset was built.
    assert ingest_options(info, WatchLimits()).keep_site_files is True


def test_a_watcher_sees_no_change_in_a_site_ingested_without_its_furniture(
    sphinx: Path, tmp_path: Path, fake_embedder: FakeEmbedder
) -> None:
    from mcpower.registry import Registry

    datasets = tmp_path / "datasets"
    ingest(sphinx, datasets, IngestOptions(dataset_id="jinja"), embedder=fake_embedder)
    registry = Registry(datasets, embedder_factory=lambda model: fake_embedder)
    store = registry.store("jinja")
    assert store.info.source is not None
    assert unchanged(store, str(sphinx), store.info, [str(datasets)])
