"""The read commands name the datasets folder they looked in, as `mcpower datasets` does (issue 28,
item 7): `search docs "x" --datasets-dir /wrong` said "available datasets: none" and nothing of where."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import FakeEmbedder, write_files
from typer.testing import CliRunner

from mcpower.cli.app import app
from mcpower.ingestion import IngestOptions, ingest

MISSING = "the folder does not exist (create a dataset with `mcpower ingest PATH`, or point --datasets-dir"


@pytest.fixture
def queries(tmp_path: Path) -> list[str]:
    (tmp_path / "q.jsonl").write_text('{"_id": "1", "text": "quokka"}\n')
    (tmp_path / "qrels.tsv").write_text("1\tguide.md\t1\n")
    return ["--queries", str(tmp_path / "q.jsonl"), "--qrels", str(tmp_path / "qrels.tsv")]


def run(*args: str) -> tuple[int, str]:
    """Exit code, and what the command said (stderr; stdout after it)."""
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stderr + result.stdout


def test_every_read_command_names_a_folder_that_does_not_exist(tmp_path: Path, queries: list[str]) -> None:
    wrong = tmp_path / "wrong"
    where = ["--datasets-dir", str(wrong)]

    said = {
        "search": run("search", "docs", "quokka", *where, "--mode", "keyword"),
        "search --all": run("search", "--all", "quokka", *where, "--mode", "keyword"),
        "eval": run("eval", "docs", *queries, *where, "--mode", "keyword"),
        "validate": run("validate", "docs", *where),
        "datasets": run("datasets", *where),
    }

    assert said["search"] == (
        1,
        f"Error: unknown dataset 'docs': no datasets under {wrong}: {MISSING} / MCPOWER_DATASETS_DIR at your datasets)\n",
    )
    assert said["eval"] == said["search"]
    assert said["search --all"][0] == 0 and f"note: no datasets under {wrong}: {MISSING}" in said["search --all"][1]
    code, text = said["validate"]
    assert code == 1 and f"error  docs: no such dataset under {wrong}: the folder does not exist" in text
    assert said["datasets"] == (0, f"no datasets under {wrong}: {MISSING} / MCPOWER_DATASETS_DIR at your datasets)\n")


def test_a_dataset_not_in_a_folder_that_exists_is_said_with_the_folder(tmp_path: Path, queries: list[str]) -> None:
    datasets = tmp_path / "datasets"
    source = write_files(tmp_path / "src", {"guide.md": "# Guide\n\nThe quokka guide.\n"})
    ingest(source, datasets, IngestOptions(dataset_id="docs"), embedder=FakeEmbedder())
    empty = tmp_path / "empty"
    empty.mkdir()

    typo = run("search", "dcos", "quokka", "--datasets-dir", str(datasets), "--mode", "keyword")
    none = run("search", "docs", "quokka", "--datasets-dir", str(empty), "--mode", "keyword")

    assert typo == (1, f"Error: unknown dataset 'dcos' under {datasets}; available datasets: docs\n")
    assert none == (
        1,
        f"Error: unknown dataset 'docs': no datasets under {empty} (create one with `mcpower ingest PATH`)\n",
    )
