"""What a first-time user hit (issue 10): each rough edge, and the test that fails without its fix."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import FakeEmbedder
from typer.testing import CliRunner, Result

from mcpower.cli.app import app
from mcpower.ingestion import IngestOptions, ingest
from mcpower.registry import Registry
from mcpower.search import search

pytestmark = pytest.mark.usefixtures("fake_embedder")


def invoke(*args: str | Path) -> Result:
    return CliRunner().invoke(app, [str(a) for a in args])


def test_the_cli_searches_every_dataset_with_all(corpus: Path, datasets_dir: Path) -> None:
    for ds in ("docs", "more"):
        ingest(corpus, datasets_dir, IngestOptions(dataset_id=ds), embedder=FakeEmbedder())

    result = invoke("search", "--all", "zephyrine daemon", "--json", "--datasets-dir", datasets_dir)
    pretty = invoke("search", "--all", "zephyrine daemon", "-k", "1", "--datasets-dir", datasets_dir)

    assert result.exit_code == 0, result.output
    response = json.loads(result.stdout)
    assert response["meta"]["datasets"] == ["docs", "more"]
    assert {r["dataset"] for r in response["results"]} == {"docs", "more"}
    assert "docs/guide/install.md:" in pretty.stdout  # the dataset is named with each result
    assert "1 result in" in pretty.stderr  # not "1 results"


@pytest.mark.parametrize(
    ("args", "says"),
    [(("search", "docs"), "give a dataset and a query"), (("search", "--all", "a", "b"), "with --all, give only")],
)
def test_search_arguments_that_do_not_fit_say_how(datasets_dir: Path, args: tuple[str, ...], says: str) -> None:
    result = invoke(*args, "--datasets-dir", datasets_dir)

    assert result.exit_code == 1 and says in result.stderr and "Traceback" not in result.output


def test_an_empty_search_of_every_dataset_says_why(datasets_dir: Path, make_registry: Callable[[], Registry]) -> None:
    response = search(make_registry(), "anything at all")

    assert response.status == "empty"
    assert any("no datasets yet" in note for note in response.meta.notes)


def test_a_search_of_every_dataset_says_which_were_skipped(
    corpus: Path, datasets_dir: Path, make_registry: Callable[[], Registry]
) -> None:
    for ds in ("good", "gone"):
        ingest(corpus, datasets_dir, IngestOptions(dataset_id=ds), embedder=FakeEmbedder())
    manifest = json.loads((datasets_dir / "gone" / "manifest.json").read_text())
    (datasets_dir / "gone" / manifest["index"]).unlink()

    response = search(make_registry(), "zephyrine")

    assert response.meta.datasets == ["good"]
    assert [n.split(" (")[0] for n in response.meta.notes] == ["dataset 'gone' skipped"]


def test_print_config_warns_when_the_datasets_folder_is_missing(tmp_path: Path) -> None:
    result = invoke("serve", "--print-config", "claude-desktop", "--datasets-dir", tmp_path / "nowhere")

    assert result.exit_code == 0
    assert json.loads(result.stdout)["mcpServers"]["mcpower"]["env"]["MCPOWER_DATASETS_DIR"] == str(
        tmp_path / "nowhere"
    )
    assert f"warning: no datasets under {tmp_path / 'nowhere'}: the folder does not exist" in result.stderr


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"MCPOWER_BACKEND": "gpu"}, "Invalid value for 'MCPOWER_BACKEND': Input should be"),
        ({"MCPOWER_MAX_FILE_MB": "lots"}, "Invalid value for 'MCPOWER_MAX_FILE_MB'"),
    ],
)
def test_a_bad_setting_in_the_environment_is_one_error_line(
    corpus: Path, datasets_dir: Path, env: dict[str, str], says: str
) -> None:
    result = CliRunner().invoke(app, ["ingest", str(corpus), "--datasets-dir", str(datasets_dir)], env=env)

    assert result.exit_code == 2  # a usage error, as Click reports its own
    assert f"Error: {says}" in result.stderr and "Traceback" not in result.output


def test_a_dataset_error_is_said_once_where_it_belongs(corpus: Path, datasets_dir: Path) -> None:
    for ds in ("good", "gone"):
        ingest(corpus, datasets_dir, IngestOptions(dataset_id=ds), embedder=FakeEmbedder())
    manifest = json.loads((datasets_dir / "gone" / "manifest.json").read_text())
    (datasets_dir / "gone" / manifest["index"]).unlink()

    checked = invoke("validate", "--datasets-dir", datasets_dir)
    assert checked.exit_code == 1
    said = checked.output.count("is missing")
    assert said == 1, checked.output  # the report's row, no log line repeating it
    assert "Traceback" not in checked.output

    searched = invoke("search", "good", "zephyrine", "--datasets-dir", datasets_dir)
    assert searched.exit_code == 0
    assert "gone" not in searched.output  # another dataset's error is not this command's business


@pytest.mark.parametrize(
    ("operator_model", "mode", "preloaded"),
    [
        (FakeEmbedder.model_name, "hybrid", True),  # the dataset's model is the operator's: loaded at once
        ("all-MiniLM-L6-v2", "hybrid", False),  # another model: the dataset's own is loaded, once
        (FakeEmbedder.model_name, "keyword", False),  # no model needed: none loaded
    ],
)
def test_a_cold_search_loads_the_query_model_once_and_only_when_needed(
    corpus: Path,
    datasets_dir: Path,
    fake_embedder: FakeEmbedder,
    monkeypatch: pytest.MonkeyPatch,
    operator_model: str,
    mode: str,
    preloaded: bool,
) -> None:
    import threading

    ingest(corpus, datasets_dir, IngestOptions(dataset_id="docs"), embedder=FakeEmbedder())
    monkeypatch.setenv("MCPOWER_MODEL", operator_model)
    loads: list[tuple[str, str]] = fake_embedder.load_calls  # type: ignore[attr-defined]
    loads.clear()
    threads: list[str] = []
    real_start = threading.Thread.start

    def start(thread: threading.Thread) -> None:
        threads.append(thread.name)
        real_start(thread)

    monkeypatch.setattr(threading.Thread, "start", start)

    result = invoke("search", "docs", "zephyrine", "--mode", mode, "--datasets-dir", datasets_dir)

    assert result.exit_code == 0, result.output
    assert "install.md" in result.output or "usage.md" in result.output
    assert ("mcpower-preload" in threads) is preloaded
    want = [] if mode == "keyword" else [(FakeEmbedder.model_name, "onnx")]
    assert loads == want  # one load of the dataset's model, whichever thread made it
