"""Nothing a user built is replaced without a word (issue 19, items 1-3): a folder name used
twice, a re-ingest that changed nothing, the options a build records — through the CLI, on real
pages of the FastAPI docs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import FakeEmbedder
from typer.testing import CliRunner, Result

from mcpower.cli.app import app
from mcpower.manifest import MANIFEST_NAME, read_manifest

# shared/ lies beside the checkout (CI's clone, /work/main) or at /work/shared (a worktree elsewhere)
FASTAPI = (
    next(
        (p for p in (Path(__file__).resolve().parents[2] / "shared", Path("/work/shared")) if p.is_dir()),
        Path("shared"),
    )
    / "bench/docs-fastapi/corpus"
)
pytestmark = pytest.mark.usefixtures("fake_embedder")


def invoke(*args: str | Path) -> Result:
    return CliRunner().invoke(app, [str(a) for a in args])


def pages(folder: Path, *names: str) -> Path:
    """A folder holding these pages of the FastAPI docs (skips the test if shared/bench is absent)."""
    if not FASTAPI.is_dir():
        pytest.skip(f"needs the FastAPI docs at {FASTAPI}")
    folder.mkdir(parents=True)
    for name in names:
        shutil.copy(FASTAPI / name, folder / Path(name).name)
    return folder


def current_version(datasets_dir: Path, ds: str = "docs") -> str:
    return json.loads((datasets_dir / ds / MANIFEST_NAME).read_text())["index"].split("/")[0]


def test_ingesting_another_folder_of_the_same_name_stops_and_names_both(tmp_path: Path, datasets_dir: Path) -> None:
    mine = pages(tmp_path / "work" / "docs", "async.md", "alternatives.md")
    theirs = pages(tmp_path / "elsewhere" / "docs", "features.md")
    assert invoke("ingest", mine, "--datasets-dir", datasets_dir, "-q").exit_code == 0
    before = current_version(datasets_dir)

    result = invoke("ingest", theirs, "--datasets-dir", datasets_dir, "-q")

    assert result.exit_code == 1
    message = result.stderr.strip()
    assert message.startswith("Error: dataset 'docs' was built from ") and "nothing was changed" in message
    assert str(mine.resolve()) in message and str(theirs.resolve()) in message
    assert "--id elsewhere-docs" in message and "--replace" in message
    assert current_version(datasets_dir) == before  # the first dataset is untouched
    assert read_manifest(datasets_dir / "docs" / MANIFEST_NAME).counts.documents == 2


def test_replace_rebuilds_from_the_other_folder_on_purpose(tmp_path: Path, datasets_dir: Path) -> None:
    mine = pages(tmp_path / "work" / "docs", "async.md", "alternatives.md")
    theirs = pages(tmp_path / "elsewhere" / "docs", "features.md")
    invoke("ingest", mine, "--datasets-dir", datasets_dir, "-q")

    result = invoke("ingest", theirs, "--datasets-dir", datasets_dir, "-q", "--replace")

    assert result.exit_code == 0, result.output
    manifest = read_manifest(datasets_dir / "docs" / MANIFEST_NAME)
    assert manifest.source is not None and manifest.source.path == str(theirs.resolve())
    assert manifest.counts.documents == 1
    # and the suggested --id keeps both
    assert invoke("ingest", mine, "--id", "elsewhere-docs", "--datasets-dir", datasets_dir, "-q").exit_code == 0


def test_a_reingest_that_changed_nothing_publishes_nothing(tmp_path: Path, datasets_dir: Path) -> None:
    docs = pages(tmp_path / "docs", "async.md", "alternatives.md")
    invoke("ingest", docs, "--datasets-dir", datasets_dir, "-q")
    before = current_version(datasets_dir)

    again = invoke("ingest", docs, "--datasets-dir", datasets_dir, "-q", "--json")
    assert json.loads(again.stdout)["published"] is False
    assert current_version(datasets_dir) == before

    (docs / "async.md").write_text((docs / "async.md").read_text() + "\nOne more line.\n")
    edited = invoke("ingest", docs, "--datasets-dir", datasets_dir, "-q", "--json")
    assert json.loads(edited.stdout)["published"] is True and json.loads(edited.stdout)["changed"] == 1
    assert current_version(datasets_dir) != before


def test_a_new_description_alone_is_published(tmp_path: Path, datasets_dir: Path) -> None:
    docs = pages(tmp_path / "docs", "async.md")
    invoke("ingest", docs, "--datasets-dir", datasets_dir, "-q")

    result = invoke("ingest", docs, "--datasets-dir", datasets_dir, "-q", "--json", "--description", "FastAPI")

    assert json.loads(result.stdout)["published"] is True
    assert read_manifest(datasets_dir / "docs" / MANIFEST_NAME).description == "FastAPI"


def test_the_manifest_records_code(tmp_path: Path, datasets_dir: Path) -> None:
    docs = pages(tmp_path / "mixed", "async.md")
    (docs / "app.py").write_text('def hello() -> str:\n    """Say hello."""\n    return "hello"\n')

    invoke("ingest", docs, "--datasets-dir", datasets_dir, "-q", "--code")

    manifest = read_manifest(datasets_dir / "mixed" / MANIFEST_NAME)
    assert manifest.source is not None and manifest.source.code is True
    assert manifest.counts.file_types == {".md": 1, ".py": 1}
    assert FakeEmbedder.model_name == manifest.embedding.model
