"""The `mcpower` command through Typer's CliRunner: stdout for results, stderr for diagnostics."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import FakeEmbedder
from typer.testing import CliRunner, Result

from mcpower import __version__
from mcpower.cli.app import app
from mcpower.manifest import MANIFEST_NAME, read_manifest

pytestmark = pytest.mark.usefixtures("fake_embedder")


def invoke(*args: str | Path, env: dict[str, str] | None = None) -> Result:
    # CliRunner keeps stdout and stderr apart (result.stdout / result.stderr) in this click version.
    return CliRunner().invoke(app, [str(a) for a in args], env=env)


def assert_one_error_line(result: Result, *fragments: str) -> str:
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: ")
    assert "Traceback" not in result.output
    assert result.stdout == ""
    for fragment in fragments:
        assert fragment in lines[0]
    return lines[0]


@pytest.fixture
def dsdir(corpus: Path, datasets_dir: Path) -> Path:
    """The corpus ingested through the CLI as dataset 'docs'."""
    result = invoke("ingest", corpus, "--id", "docs", "--datasets-dir", datasets_dir, "-q")
    assert result.exit_code == 0, result.output
    return datasets_dir


def test_stdout_and_stderr_are_kept_apart(corpus: Path, datasets_dir: Path) -> None:
    result = invoke("ingest", corpus, "--id", "docs", "--datasets-dir", datasets_dir, "-q")

    assert "skipped binary.md" in result.stderr
    assert "skipped" not in result.stdout
    assert "docs:" in result.stdout and "docs:" not in result.stderr


def test_ingest_prints_a_summary(corpus: Path, datasets_dir: Path) -> None:
    result = invoke("ingest", corpus, "--id", "docs", "--datasets-dir", datasets_dir)

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith("docs: 5 documents, ")
    assert "(5 added, 0 changed, 0 removed, 0 unchanged)" in lines[0]
    assert lines[1] == "languages (chunks): en 8"
    assert lines[2] == f"dataset: {datasets_dir.resolve() / 'docs'}"
    assert len(lines) == 3  # progress bars went to stderr
    assert "skipped latin1.md: not UTF-8" in result.stderr
    assert read_manifest(datasets_dir / "docs" / MANIFEST_NAME).counts.documents == 5


def test_progress_bars_only_on_a_terminal(
    corpus: Path, datasets_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import sys

    from mcpower.cli.progress import Progress

    for tty in (False, True):
        monkeypatch.setattr(sys.stderr, "isatty", lambda tty=tty: tty, raising=False)
        with Progress(enabled=True) as progress:
            progress("files", 1, 2)
            progress("files", 2, 2)
        said = capsys.readouterr().err
        assert ("files: 100%" in said) is tty, said
        assert ("read 2 files\n" in said) is not tty, said  # off a terminal: plain lines instead


def test_mcpower_cache_dir_is_where_models_are_cached(
    corpus: Path, datasets_dir: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from mcpower import embedding

    seen: list[Path | None] = []

    def load(model: str, backend: str, cache_dir: Path | None = None) -> FakeEmbedder:
        seen.append(cache_dir)
        return FakeEmbedder()

    monkeypatch.setattr(embedding, "load_embedder", load)
    cache = tmp_path / "my-cache"

    result = invoke(
        "ingest", corpus, "--id", "docs", "--datasets-dir", datasets_dir, env={"MCPOWER_CACHE_DIR": str(cache)}
    )
    default = invoke("ingest", corpus, "--id", "other", "--datasets-dir", datasets_dir)

    assert result.exit_code == default.exit_code == 0, result.output
    assert seen == [cache, tmp_path / "cache" / "mcpower"]  # the second: $XDG_CACHE_HOME/mcpower (conftest)


def test_ingest_again_reports_unchanged(dsdir: Path, corpus: Path) -> None:
    result = invoke("ingest", corpus, "--id", "docs", "--datasets-dir", dsdir, "-q")

    assert result.exit_code == 0
    assert result.stdout == "docs: nothing changed (5 documents)\n"  # and no new version (test_rebuild.py)


def test_ingest_json(corpus: Path, datasets_dir: Path) -> None:
    result = invoke("ingest", corpus, "--id", "docs", "--datasets-dir", datasets_dir, "--json")

    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["dataset"] == "docs"
    assert (data["documents"], data["added"], data["full_rebuild"]) == (5, 5, True)
    assert {s["path"] for s in data["skipped"]} == {"binary.md", "latin1.md"}


def test_ingest_passes_the_options(corpus: Path, datasets_dir: Path, fake_embedder: FakeEmbedder) -> None:
    result = invoke(
        "ingest",
        corpus,
        "--id",
        "small",
        "--datasets-dir",
        datasets_dir,
        "--name",
        "Small docs",
        "--description",
        "Only the guide",
        "--include",
        "guide/*",
        "--default-top-k",
        "3",
        "--chunk-tokens",
        "64",
        "--overlap",
        "8",
        "--model",
        "my-model",
        "--backend",
        "onnx-int8",
        "-q",
    )

    assert result.exit_code == 0, result.output
    m = read_manifest(datasets_dir / "small" / MANIFEST_NAME)
    assert (m.name, m.description, m.default_top_k, m.counts.documents) == ("Small docs", "Only the guide", 3, 2)
    assert (m.chunking.chunk_tokens, m.chunking.overlap) == (64, 8)
    assert fake_embedder.load_calls == [("my-model", "onnx-int8")]  # type: ignore[attr-defined]


def test_a_plain_ingest_keeps_the_datasets_backend_and_the_environment_overrides_it(
    corpus: Path, datasets_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mcpower import embedding

    calls: list[str] = []

    def load(model: str, backend: str, cache_dir: Path | None = None) -> FakeEmbedder:
        calls.append(backend)
        fake = FakeEmbedder()
        fake.backend = backend
        return fake

    monkeypatch.setattr(embedding, "load_embedder", load)
    args = ("ingest", corpus, "--id", "docs", "--model", FakeEmbedder.model_name, "--datasets-dir", datasets_dir, "-q")

    assert invoke(*args, "--backend", "onnx-int8").exit_code == 0
    assert invoke(*args).exit_code == 0
    assert invoke(*args, env={"MCPOWER_BACKEND": "onnx"}).exit_code == 0

    assert calls == ["onnx-int8", "onnx-int8", "onnx"]
    assert read_manifest(datasets_dir / "docs" / MANIFEST_NAME).embedding.backend == "onnx"


def test_ingest_reads_the_datasets_dir_from_the_environment(corpus: Path, datasets_dir: Path) -> None:
    result = invoke("ingest", corpus, "--id", "docs", "-q", env={"MCPOWER_DATASETS_DIR": str(datasets_dir)})

    assert result.exit_code == 0, result.output
    assert (datasets_dir / "docs" / MANIFEST_NAME).is_file()


def test_ingest_missing_folder_is_one_error_line(tmp_path: Path, datasets_dir: Path) -> None:
    result = invoke("ingest", tmp_path / "nowhere", "--datasets-dir", datasets_dir)

    assert_one_error_line(result, "nowhere", "no such folder")


def test_ingest_bad_id(corpus: Path, datasets_dir: Path) -> None:
    result = invoke("ingest", corpus, "--id", "Bad ID", "--datasets-dir", datasets_dir)

    assert_one_error_line(result, "invalid dataset id")


def test_ingest_bad_chunk_size_is_a_clean_error(corpus: Path, datasets_dir: Path) -> None:
    result = invoke("ingest", corpus, "--chunk-tokens", "8", "--datasets-dir", datasets_dir, "-q")

    assert_one_error_line(result, "--chunk-tokens")


def test_ingest_bad_default_top_k_is_a_usage_error(corpus: Path, datasets_dir: Path) -> None:
    result = invoke("ingest", corpus, "--default-top-k", "0", "--datasets-dir", datasets_dir)

    assert result.exit_code == 2
    assert "--default-top-k" in result.stderr
    assert not datasets_dir.exists()


# ------------------------------------------------------------------ search


def test_search_pretty(dsdir: Path) -> None:
    result = invoke("search", "docs", "zephyrine daemon", "--datasets-dir", dsdir)

    assert result.exit_code == 0, result.output
    out = result.stdout
    assert out.splitlines()[0].startswith(" 1. ")
    assert "Installation" in out.splitlines()[0]
    assert "guide/install.md:5-8  § Installation > Linux" in out
    assert "id docs:" in out
    assert "results in" in result.stderr and "results in" not in out


def test_search_json(dsdir: Path) -> None:
    result = invoke("search", "docs", "quokka", "--datasets-dir", dsdir, "--json", "-k", "2", "--mode", "keyword")

    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert {"status", "results", "meta"} <= set(data)
    assert data["status"] == "ok"
    assert data["meta"]["mode"] == "keyword"
    assert data["meta"]["limit"] == 2
    assert data["results"][0]["path"] == "guide/usage.md"
    assert {"result_id", "score", "title", "path", "snippet", "heading_path", "lines", "dataset"} <= set(
        data["results"][0]
    )
    assert result.stderr == ""


def test_search_filters(dsdir: Path) -> None:
    result = invoke("search", "docs", "toolkit", "--datasets-dir", dsdir, "--json", "--folder", "guide", "-k", "10")

    paths = {r["path"] for r in json.loads(result.stdout)["results"]}
    assert paths and all(p.startswith("guide/") for p in paths)

    result = invoke("search", "docs", "toolkit", "--datasets-dir", dsdir, "--json", "--type", ".rst")
    assert {r["path"] for r in json.loads(result.stdout)["results"]} == {"intro.rst"}


def test_search_without_results(dsdir: Path) -> None:
    result = invoke("search", "docs", "xylophone", "--datasets-dir", dsdir, "--mode", "keyword")

    assert result.exit_code == 0
    assert result.stdout == ""
    assert "no results in docs" in result.stderr


def test_search_unknown_dataset_lists_the_available_ones(dsdir: Path) -> None:
    result = invoke("search", "nope", "quokka", "--datasets-dir", dsdir)

    assert_one_error_line(result, "'nope'", "available datasets: docs")


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["-k", "0"], "'-k' / '--top-k'"),
        (["-k", "101"], "'-k' / '--top-k'"),
        (["--mode", "fuzzy"], "'--mode'"),
        (["--min-score", "2"], "'--min-score'"),
    ],
)
def test_search_bad_arguments(dsdir: Path, args: list[str], fragment: str) -> None:
    result = invoke("search", "docs", "quokka", "--datasets-dir", dsdir, *args)

    # usage errors, as Click reports them: exit 2, the flag as the user typed it (tests/test_cli_options.py)
    assert result.exit_code == 2 and f"Error: Invalid value for {fragment}: " in result.stderr
    assert result.stdout == "" and "Traceback" not in result.output


def test_search_empty_query(dsdir: Path) -> None:
    result = invoke("search", "docs", "   ", "--datasets-dir", dsdir)

    assert_one_error_line(result, "query is empty")


def test_search_non_integer_top_k_is_a_usage_error(dsdir: Path) -> None:
    result = invoke("search", "docs", "quokka", "--datasets-dir", dsdir, "-k", "two")

    assert result.exit_code == 2
    assert "-k" in result.stderr
    assert result.stdout == ""


# ------------------------------------------------------------------ validate and datasets


def test_validate_ok(dsdir: Path) -> None:
    result = invoke("validate", "--datasets-dir", dsdir)

    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("ready  docs: 5 documents, ")


def test_validate_json(dsdir: Path) -> None:
    result = invoke("validate", "--datasets-dir", dsdir, "--json")

    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert data["ok"] is True
    assert [(d["id"], d["status"], d["documents"]) for d in data["datasets"]] == [("docs", "ready", 5)]


@pytest.mark.parametrize("which", ["index", "metadata"])
def test_validate_fails_after_a_byte_is_flipped(dsdir: Path, which: str) -> None:
    m = read_manifest(dsdir / "docs" / MANIFEST_NAME)
    target = dsdir / "docs" / getattr(m, which)
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0xFF
    target.write_bytes(bytes(data))

    result = invoke("validate", "--datasets-dir", dsdir)

    assert result.exit_code == 1
    assert result.stdout.startswith("error  docs: ")
    assert "checksum" in result.stdout and getattr(m, which) in result.stdout
    data_json = json.loads(invoke("validate", "--datasets-dir", dsdir, "--json").stdout)
    assert data_json["ok"] is False
    assert data_json["datasets"][0]["status"] == "error"
    assert "checksum" in data_json["datasets"][0]["error"]


def test_validate_reports_an_invalid_manifest_and_keeps_the_others(dsdir: Path) -> None:
    broken = dsdir / "broken"
    broken.mkdir()
    (broken / MANIFEST_NAME).write_text('{"id": "broken"}')

    result = invoke("validate", "--datasets-dir", dsdir, "--json")

    assert result.exit_code == 1
    rows = {d["id"]: d for d in json.loads(result.stdout)["datasets"]}
    assert rows["docs"]["status"] == "ready"
    assert rows["broken"]["status"] == "error"
    assert "broken/manifest.json" in rows["broken"]["error"]


def test_validate_selected_and_unknown_ids(dsdir: Path) -> None:
    assert invoke("validate", "docs", "--datasets-dir", dsdir).exit_code == 0

    result = invoke("validate", "nope", "--datasets-dir", dsdir)

    assert result.exit_code == 1
    assert "nope: no such dataset" in result.stdout


def test_validate_with_no_datasets(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    result = invoke("validate", "--datasets-dir", tmp_path / "empty")
    missing = invoke("validate", "--datasets-dir", tmp_path / "missing")

    # nothing to check is not a failure, as for `datasets` and `search --all`; the folder is named
    assert result.exit_code == missing.exit_code == 0
    assert f"no datasets under {tmp_path / 'empty'} (" in result.stderr  # absolute, and what to do
    assert f"{tmp_path / 'missing'}: the folder does not exist" in missing.stderr
    assert result.stdout == missing.stdout == ""


def test_datasets_lists(dsdir: Path) -> None:
    result = invoke("datasets", "--datasets-dir", dsdir)

    assert result.exit_code == 0
    manifest = read_manifest(dsdir / "docs" / MANIFEST_NAME)
    header, row, description, types, languages = result.stdout.splitlines()
    assert header.split() == ["DATASET", "DOCS", "CHUNKS", "UPDATED", "(UTC)", "WATCH", "NAME", "/", "DESCRIPTION"]
    updated = manifest.updated_at.isoformat()[:16].replace("T", " ")
    assert row.split() == ["docs", "5", str(manifest.counts.chunks), *updated.split(), "not", "watched", "corpus"]
    assert description.strip() == manifest.description
    assert types.strip() == "files: .md 3, .rst 1, .txt 1"  # documents per file type, most first
    assert languages.strip() == f"languages (chunks): en {manifest.counts.chunks}"


def test_datasets_json(dsdir: Path) -> None:
    result = invoke("datasets", "--datasets-dir", dsdir, "--json")

    assert result.exit_code == 0
    (row,) = json.loads(result.stdout)["datasets"]
    assert (row["id"], row["status"], row["name"], row["documents"]) == ("docs", "ready", "corpus", 5)
    assert row["model"] == FakeEmbedder.model_name


def test_datasets_when_there_are_none(tmp_path: Path) -> None:
    result = invoke("datasets", "--datasets-dir", tmp_path / "none", "--json")

    assert result.exit_code == 0
    assert json.loads(result.stdout) == {"datasets": []}


# ------------------------------------------------------------------ the rest


def test_version() -> None:
    result = invoke("--version")

    assert result.exit_code == 0
    assert result.stdout == f"mcpower {__version__}\n"


def test_unknown_command_is_a_usage_error() -> None:
    result = invoke("frobnicate")

    assert result.exit_code == 2
    assert "frobnicate" in result.stderr
    assert result.stdout == ""


def test_help_lists_the_commands() -> None:
    result = invoke("--help")

    assert result.exit_code == 0
    for command in ("ingest", "search", "validate", "datasets"):
        assert command in result.stdout


# ------------------------------------------------------------------ freshness, pages, watching


def test_search_marks_stale_results(dsdir: Path, corpus: Path) -> None:
    fresh = invoke("search", "docs", "harpsichord", "--datasets-dir", dsdir, "--mode", "keyword")
    assert fresh.exit_code == 0 and "stale" not in fresh.stdout
    (corpus / "notes.txt").write_text("We agreed to ship the harpsichord feature next year.\n")

    result = invoke("search", "docs", "harpsichord", "--datasets-dir", dsdir, "--mode", "keyword")

    assert result.exit_code == 0, result.output
    assert "notes.txt:1-3  (stale: the file changed since it was indexed" in result.stdout
    data = json.loads(invoke("search", "docs", "harpsichord", "--datasets-dir", dsdir, "--json").stdout)
    assert data["results"][0]["stale"] is True and data["results"][0]["indexed_at"]


def test_search_pages(dsdir: Path) -> None:
    first = invoke("search", "docs", "zephyrine", "--datasets-dir", dsdir, "-k", "1", "--offset", "0")
    assert first.exit_code == 0 and "more with --offset 1" in first.stderr
    data = json.loads(
        invoke("search", "docs", "zephyrine", "--datasets-dir", dsdir, "--json", "--max-tokens", "150").stdout
    )
    assert data["meta"]["truncated"] is True and data["meta"]["estimated_tokens"] >= 1


def test_datasets_shows_the_watch_state_and_the_source_folder(dsdir: Path, corpus: Path) -> None:
    from mcpower.layout import WatchClaim
    from mcpower.results import WatchState

    claim = WatchClaim.take(dsdir / "docs")
    assert claim is not None
    try:
        claim.write(WatchState(state="source_missing", message="its source folder was deleted or renamed", pid=1))
        result = invoke("datasets", "--datasets-dir", dsdir)
        assert "source missing" in result.stdout and "deleted or renamed" in result.stdout
        (row,) = json.loads(invoke("datasets", "--datasets-dir", dsdir, "--json").stdout)["datasets"]
        assert (row["watched"], row["watch_state"], row["source"]) == (True, "source_missing", str(corpus.resolve()))
    finally:
        claim.release()
    (row,) = json.loads(invoke("datasets", "--datasets-dir", dsdir, "--json").stdout)["datasets"]
    assert (row["watched"], row["watch_state"]) == (False, None)


def test_ingest_watch_refuses_a_dataset_another_process_watches(dsdir: Path, corpus: Path) -> None:
    from mcpower.layout import WatchClaim

    claim = WatchClaim.take(dsdir / "docs")
    assert claim is not None
    try:
        result = invoke("ingest", corpus, "--id", "docs", "--datasets-dir", dsdir, "--watch", "-q")
    finally:
        claim.release()
    assert result.exit_code == 1
    assert (
        "cannot watch docs: another mcpower process (a server started with --watch?) already watches it"
        in result.stderr
    )


def test_serve_and_ingest_help_mention_watching() -> None:
    assert "--watch" in invoke("serve", "--help").stdout
    assert "--watch-debounce" in invoke("ingest", "--help").stdout


@pytest.mark.parametrize("command", [["datasets"], ["validate"], ["search", "docs", "x"], ["ingest", "."]])
def test_a_file_as_the_datasets_folder_is_a_usage_error_naming_it(tmp_path: Path, command: list[str]) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("# not a datasets folder\n")

    result = invoke(*command, "--datasets-dir", readme)

    assert result.exit_code == 2, result.output
    assert f"{readme} is a file, not a folder" in result.stderr
    assert "--datasets-dir" in result.stderr and "Traceback" not in result.output
