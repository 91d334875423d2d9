"""Ingesting a folder of every format: facts found, pages carried, counts per type, hostile files
skipped with their reason (and nothing else lost), the worker process's limits."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import format_fixtures as ff
import pytest
from conftest import FakeEmbedder, write_files
from typer.testing import CliRunner

from mcpower import chunking
from mcpower.chunking import UnreadableError, worker
from mcpower.chunking.worker import Reader
from mcpower.cli.app import app
from mcpower.errors import IngestError
from mcpower.ingestion import IngestOptions, ingest
from mcpower.registry import Registry
from mcpower.search import get_source, search

# One fact per format, and the file that holds it.
FACTS = {
    "guide.md": ("How far can a zephyrine glider fly?", "A zephyrine glider flies forty kilometres on one charge."),
    "notes.txt": ("When is the harpsichord recital?", "The harpsichord recital is on the ninth of March."),
    "sphinx.txt": ("What does the marmalade_timeout setting do?", "Seconds to wait for the marmalade server."),
    "api.rst": ("What does the quokka_count function return?", "Returns how many quokkas live on the island."),
    "page.html": ("Which colour are bramblewood berries?", "Bramblewood berries turn violet in autumn."),
    "manual.pdf": ("How often should the lumenator be calibrated?", "Calibrate the lumenator every sixty days."),
    "handbook.docx": ("Who approves a velociraptor permit?", "The velociraptor permit is approved by the warden."),
    "analysis.ipynb": ("What did the pangolin survey find?", "The pangolin survey found twelve nests."),
}


def mixed_folder(root: Path) -> Path:
    return write_files(
        root,
        {
            "guide.md": f"# Gliders\n\n{FACTS['guide.md'][1]}\n",
            "notes.txt": f"Concert notes.\n\n{FACTS['notes.txt'][1]}\n",
            "sphinx.txt": (
                f"Settings\n========\n\n.. setting:: MARMALADE_TIMEOUT\n\n.. confval:: marmalade_timeout\n\n   "
                f"{FACTS['sphinx.txt'][1]}\n"
            ),
            "api.rst": (
                f"API\n===\n\n.. function:: quokka_count(island)\n\n   {FACTS['api.rst'][1]}\n\n.. versionadded:: 1.2\n"
            ),
            "page.html": (
                f"<html><head><title>Berries</title></head><body><nav>Menu links</nav><main><h1>Autumn</h1>"
                f"<p>{FACTS['page.html'][1]}</p></main></body></html>"
            ),
            "manual.pdf": ff.pdf_with_outline(
                ff.pdf(
                    [
                        ["The Lumenator manual, for owners of a lumenator lamp."],
                        ["Maintenance of the lamp.", FACTS["manual.pdf"][1]],
                    ],
                    title="Lumenator",
                ),
                [("Introduction", 0, 1), ("Maintenance", 1, 1)],
            ),
            "handbook.docx": ff.docx([("h1", "Permits"), ("p", FACTS["handbook.docx"][1])]),
            "analysis.ipynb": ff.notebook(
                [("markdown", f"# Survey\n\n{FACTS['analysis.ipynb'][1]}"), ("code", "nests = 12")],
                outputs=["lots of output"],
            ),
        },
    )


@pytest.fixture
def mixed(tmp_path: Path, datasets_dir: Path, make_registry: Callable[[], Registry]) -> Registry:
    report = ingest(mixed_folder(tmp_path / "mixed"), datasets_dir, IngestOptions(dataset_id="mixed"))
    assert report.documents == len(FACTS) and not report.skipped
    return make_registry()


@pytest.mark.parametrize("path", sorted(FACTS))
def test_a_fact_from_each_format_is_found_in_the_top_3(mixed: Registry, path: str) -> None:
    question, fact = FACTS[path]

    results = search(mixed, question, "mixed", top_k=3).results

    assert path in [r.path for r in results], [r.path for r in results]
    assert fact.split()[1] in " ".join(r.snippet for r in results if r.path == path)
    assert all(r.title for r in results)


def test_pdf_results_and_sources_carry_their_pages(mixed: Registry) -> None:
    hit = next(r for r in search(mixed, "calibrate the lumenator", "mixed").results if r.path == "manual.pdf")

    assert hit.pages is not None and (hit.pages.start, hit.pages.end) == (2, 2)
    assert hit.heading_path == "Maintenance" and hit.title == "Lumenator"
    source = get_source(mixed, hit.result_id, scope="section")
    assert source.pages is not None and source.pages.start == 2
    assert "Calibrate the lumenator every sixty days." in source.content
    other = next(r for r in search(mixed, "glider", "mixed").results if r.path == "guide.md")
    assert other.pages is None and get_source(mixed, other.result_id).pages is None


def test_counts_per_file_type_are_listed(mixed: Registry, datasets_dir: Path) -> None:
    summary = next(e.summary() for e in mixed.entries() if e.id == "mixed")

    assert summary.file_types == {
        ".md": 1,
        ".txt": 2,
        ".rst": 1,
        ".html": 1,
        ".pdf": 1,
        ".docx": 1,
        ".ipynb": 1,
    }
    out = CliRunner().invoke(app, ["datasets", "--datasets-dir", str(datasets_dir)]).stdout
    assert ".txt 2" in out and ".pdf 1" in out


def test_the_filter_by_file_type_reaches_every_format(mixed: Registry) -> None:
    from mcpower.results import SearchFilters

    results = search(mixed, "manual maintenance", "mixed", filters=SearchFilters(file_type=".pdf")).results

    assert results and {r.file_type for r in results} == {".pdf"}


# ---------------------------------------------------------------- hostile files


def hostile_files(root: Path) -> Path:
    return write_files(
        root,
        {
            "good.md": "# Good\n\nThe zephyrine survives hostile neighbours.\n",
            "encrypted.pdf": ff.encrypted_pdf(ff.pdf([["secret"]]), "pw"),
            "truncated.pdf": ff.pdf([["text"]] * 3)[:250],
            "scanned.pdf": ff.pdf([[]]),
            "bomb.docx": ff.docx_bomb(8),
            "broken.docx": b"PK\x03\x04 not really",
            "deep.html": b"<p>Shallow zephyrine text.</p>" + b"<div>" * 50_000 + b"deep" + b"</div>" * 50_000,
            "recursive.rst": "T\n=\n\n" + "- " * 400 + "zephyrine\n",
            "broken.ipynb": b'{"cells": [',
        },
    )


def test_hostile_files_are_skipped_with_their_reason_and_nothing_else_is_lost(
    tmp_path: Path, datasets_dir: Path, make_registry: Callable[[], Registry]
) -> None:
    report = ingest(hostile_files(tmp_path / "hostile"), datasets_dir, IngestOptions(dataset_id="h"))

    skipped = dict(report.skipped)
    assert "password is required" in skipped["encrypted.pdf"]
    assert "damaged PDF" in skipped["truncated.pdf"]
    assert "no text layer" in skipped["scanned.pdf"]
    assert "zip bomb" in skipped["bomb.docx"]
    assert "not a valid zip archive" in skipped["broken.docx"]
    assert "not valid JSON" in skipped["broken.ipynb"]
    notes = dict(report.file_notes)
    assert "nested deeper than 256 levels" in notes["deep.html"]
    assert "read as plain text" in notes["recursive.rst"]
    assert report.documents == 3  # good.md, deep.html (its shallow part), recursive.rst (as text)
    paths = {r.path for r in search(make_registry(), "zephyrine", "h", top_k=10).results}
    assert paths == {"good.md", "deep.html", "recursive.rst"}


def test_the_cli_prints_skip_reasons_and_notes(tmp_path: Path, datasets_dir: Path, fake_embedder: FakeEmbedder) -> None:
    folder = hostile_files(tmp_path / "hostile")

    result = CliRunner().invoke(app, ["ingest", str(folder), "--datasets-dir", str(datasets_dir), "-q"])

    assert result.exit_code == 0, result.output
    assert "skipped encrypted.pdf: encrypted: a password is required to open it" in result.stderr
    assert "note recursive.rst: read as plain text" in result.stderr
    as_json = CliRunner().invoke(
        app, ["ingest", str(folder), "--id", "again", "--datasets-dir", str(datasets_dir), "--json"]
    )
    data = json.loads(as_json.stdout)
    assert any(s["path"] == "scanned.pdf" and "no text layer" in s["reason"] for s in data["skipped"])
    assert any(n["path"] == "deep.html" and "256 levels" in n["note"] for n in data["notes"])


def test_when_every_file_is_skipped_the_error_sums_up_the_reasons(
    tmp_path: Path, datasets_dir: Path, fake_embedder: FakeEmbedder
) -> None:
    folder = write_files(
        tmp_path / "bad",
        {
            "a.pdf": ff.encrypted_pdf(ff.pdf([["x"]]), "pw"),
            "b.pdf": ff.encrypted_pdf(ff.pdf([["y"]]), "pw"),
            "c.docx": b"nope",
            "d.md": b"\xff\xfe latin",
        },
    )

    with pytest.raises(IngestError) as e:
        ingest(folder, datasets_dir, IngestOptions(dataset_id="bad"))

    message = e.value.message
    assert "every file was skipped — encrypted: a password is required to open it (2 files: a.pdf, b.pdf)" in message
    assert "not a valid zip archive" in message and "(1 file: c.docx)" in message and "d.md" in message


def test_files_over_the_size_limit_are_skipped_before_any_parser_runs(
    tmp_path: Path, datasets_dir: Path, fake_embedder: FakeEmbedder
) -> None:
    folder = tmp_path / "big"
    folder.mkdir()
    (folder / "ok.md").write_text("# Ok\n\nfine\n")
    # Sparse files: the size alone decides. HTML gets the text limit, PDFs and notebooks 10 times it.
    for name, size in (("single-line.html", 50 << 20), ("huge-output.ipynb", 105 << 20), ("big.pdf", 50 << 20)):
        with open(folder / name, "wb") as f:
            f.truncate(size)

    report = ingest(folder, datasets_dir, IngestOptions(dataset_id="big"))

    skipped = dict(report.skipped)
    assert "52.4 MB, over the 10.4858 MB limit" in skipped["single-line.html"]
    assert "over the 104.858 MB limit for .ipynb files" in skipped["huge-output.ipynb"]
    assert skipped["big.pdf"] == "not a PDF (no %PDF- header)"  # under its 100 MB limit: read, and refused


# ---------------------------------------------------------------- source code


def test_code_is_read_only_when_asked_for(
    tmp_path: Path, datasets_dir: Path, make_registry: Callable[[], Registry]
) -> None:
    folder = write_files(
        tmp_path / "repo",
        {
            "README.md": "# Repo\n\ntext\n",
            "app.py": "def serve_quokkas():\n    return 1\n",
            "main.go": "func Run() {}\n",
        },
    )

    plain = ingest(folder, datasets_dir, IngestOptions(dataset_id="a"))
    with_code = ingest(folder, datasets_dir, IngestOptions(dataset_id="b", code=True))
    python_only = ingest(folder, datasets_dir, IngestOptions(dataset_id="c", include=["*.py"]))

    assert (plain.documents, with_code.documents, python_only.documents) == (1, 3, 1)
    hit = search(make_registry(), "serve_quokkas", "c").results[0]
    assert (hit.path, hit.heading_path) == ("app.py", "serve_quokkas")


# ---------------------------------------------------------------- the worker process


@pytest.fixture
def hostile_format(monkeypatch: pytest.MonkeyPatch) -> None:
    """Files ending in .hostile are read by tests/worker_formats.py, in the worker."""
    monkeypatch.setitem(chunking.FORMATS, ".hostile", "worker_formats")
    monkeypatch.setattr(worker, "ISOLATED", worker.ISOLATED | {"worker_formats"})


@pytest.mark.usefixtures("hostile_format")
def test_the_worker_survives_what_a_parser_does_to_it() -> None:
    with Reader(timeout=60, memory_bytes=1 << 30) as reader:
        assert reader.read(b"fine text", ".hostile").title == "Fine"
        first = reader.worker_pid
        cases = {
            b"refuse": "refused on purpose",
            b"bug": "the reader failed (KeyError",
            b"memory": "ran out of memory reading it (the limit is 1 GiB)",
            b"crash": "the reader process died reading it (exit code 3)",
        }
        for data, reason in cases.items():
            with pytest.raises(UnreadableError) as e:
                reader.read(data, ".hostile")
            assert reason in str(e.value)
            assert reader.read(b"still fine", ".hostile").text == "# Hostile\n\nstill fine"  # the next file is read
        assert reader.worker_pid not in (first, None)  # restarted after the crash


@pytest.mark.usefixtures("hostile_format")
def test_a_file_that_never_finishes_is_stopped_at_its_deadline() -> None:
    with Reader(timeout=1.0) as reader:
        with pytest.raises(UnreadableError, match="took longer than 1 s to read"):
            reader.read(b"hang", ".hostile")  # a loop that never ends: 1 s is the only bound
        reader.timeout = 60  # the restarted worker reads the next file
        assert reader.read(b"after", ".hostile").title == "Fine"


def test_rst_that_kills_the_worker_is_read_as_plain_text(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(self: Reader, module: str, data: bytes, chunking: object) -> None:
        raise worker._Failed("ran out of memory reading it")

    monkeypatch.setattr(Reader, "_in_worker", fail)

    parsed = Reader().read(b"Title\n=====\n\nBody.\n", ".rst")

    assert parsed.text == "Title\n=====\n\nBody.\n" and parsed.notes == (
        "read as plain text: ran out of memory reading it",
    )


def test_formats_outside_isolated_are_read_in_this_process() -> None:
    reader = Reader()

    reader.read(b"# Title\n\ntext\n", ".md")
    reader.read(ff.notebook([("markdown", "# N")]), ".ipynb")

    assert reader._process is None  # type: ignore[attr-defined]


def test_no_worker_outlives_an_ingest(
    tmp_path: Path, datasets_dir: Path, fake_embedder: FakeEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[subprocess.Popen[bytes]] = []
    original: Callable[[Reader], None] = Reader._start  # type: ignore[attr-defined]

    def tracked(self: Reader) -> None:
        original(self)
        started.append(self._process)  # type: ignore[attr-defined]

    monkeypatch.setattr(Reader, "_start", tracked)
    ingest(mixed_folder(tmp_path / "m"), datasets_dir, IngestOptions(dataset_id="m"))

    # One worker read the model choice's sample and then the PDF, the Word file, the HTML and the reST.
    assert len(started) == 1
    # It has ended (told to stop, or killed if it did not within its grace time): returncode is set.
    assert started[0].returncode is not None


def test_the_cli_shows_the_pages_of_a_pdf_result(mixed: Registry, datasets_dir: Path) -> None:
    out = (
        CliRunner()
        .invoke(app, ["search", "mixed", "calibrate the lumenator", "-k", "1", "--datasets-dir", str(datasets_dir)])
        .stdout
    )

    assert "manual.pdf:" in out and "(page 2)" in out


# ---------------------------------------------------------------- datasets written before


def test_datasets_written_before_pages_and_type_counts_still_load(
    tmp_path: Path, datasets_dir: Path, make_registry: Callable[[], Registry]
) -> None:
    import hashlib
    import sqlite3

    ingest(mixed_folder(tmp_path / "m"), datasets_dir, IngestOptions(dataset_id="old"))
    manifest_path = datasets_dir / "old" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    db_path = datasets_dir / "old" / manifest["metadata"]
    with sqlite3.connect(db_path) as db:  # the chunks table as it was before page columns
        db.execute("ALTER TABLE chunks DROP COLUMN page_start")
        db.execute("ALTER TABLE chunks DROP COLUMN page_end")
    db.close()
    manifest["checksums"]["metadata"] = hashlib.sha256(db_path.read_bytes()).hexdigest()
    del manifest["counts"]["fileTypes"]
    manifest_path.write_text(json.dumps(manifest))

    registry = make_registry()
    hit = next(r for r in search(registry, "calibrate the lumenator", "old").results if r.path == "manual.pdf")

    assert hit.pages is None and get_source(registry, hit.result_id).pages is None
    assert next(e.summary() for e in registry.entries() if e.id == "old").file_types is None


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["hybrid", "semantic"])
def test_with_the_real_model_each_format_answers_its_question_in_the_top_3(
    tmp_path: Path, datasets_dir: Path, mode: str
) -> None:
    ingest(mixed_folder(tmp_path / "mixed"), datasets_dir, IngestOptions(dataset_id="mixed"))
    registry = Registry(datasets_dir)

    missed = {
        path: [r.path for r in search(registry, question, "mixed", top_k=3, mode=mode).results]
        for path, (question, _) in FACTS.items()
    }

    assert {p: found for p, found in missed.items() if p not in found} == {}


def test_a_script_without_a_main_guard_can_ingest_through_the_worker(tmp_path: Path, datasets_dir: Path) -> None:
    import sys

    from server_fixtures import subprocess_env, write_launcher

    launcher = write_launcher(tmp_path)  # runs the CLI at import: multiprocessing's spawn would run it again
    folder = write_files(tmp_path / "docs", {"manual.pdf": ff.pdf([["Lumenator text."]])})

    done = subprocess.run(
        [sys.executable, str(launcher), "ingest", str(folder), "--datasets-dir", str(datasets_dir), "--json", "-q"],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        timeout=300,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["documents"], report["skipped"]) == (1, [])
