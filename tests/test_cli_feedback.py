"""What `mcpower ingest` tells a person while it works: progress off a terminal, each phase's own
time, warnings for lowered settings, Ctrl-C, plain numbers (issue 19, items 8, 9 and 14)."""

from __future__ import annotations

import io
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import FakeEmbedder, write_files
from server_fixtures import subprocess_env, write_launcher
from typer.testing import CliRunner

from mcpower.cli.app import app
from mcpower.cli.progress import PLAIN_EVERY, Progress, duration, plural, rate
from mcpower.ingestion import IngestOptions, fit_window, ingest
from mcpower.layout import dataset_lock
from mcpower.manifest import MANIFEST_NAME, read_manifest


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_off_a_terminal_progress_is_plain_lines_with_rate_and_time_left() -> None:
    out, clock = io.StringIO(), Clock()  # a StringIO is not a terminal: no bars
    with Progress(enabled=True, stream=out, clock=clock) as progress:
        progress("files", 1, 3)
        clock.now += PLAIN_EVERY / 2
        progress("files", 2, 3)  # too soon for a line
        clock.now += PLAIN_EVERY
        progress("files", 3, 3)
        progress("chunks", 0, 400)
        clock.now += PLAIN_EVERY
        progress("chunks", 100, 400)
        clock.now += PLAIN_EVERY
        progress("chunks", 200, 400)
        clock.now += 20
        progress("chunks", 400, 400)

    assert out.getvalue().splitlines() == [
        "reading 3 files…",
        "read 3 files",  # no time: the summary's phase times are the one clock
        "embedding 400 chunks…",
        "embedding: 100/400 chunks (25%), 10 chunks/s, ~30.0 s left",
        "embedding: 200/400 chunks (50%), 10 chunks/s, ~20.0 s left",
        "embedded 400 chunks",
    ]


def test_on_a_terminal_the_files_bar_closes_when_embedding_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    monkeypatch.setattr(out, "isatty", lambda: True)
    with Progress(enabled=True, stream=out) as progress:
        progress("files", 1, 2)
        progress("files", 2, 2)
        progress("chunks", 1, 5)
        assert list(progress.bars) == ["chunks"]  # the files bar is done and closed
    assert "files: 100%" in out.getvalue() and "chunks:" in out.getvalue()


def test_quiet_says_nothing_and_waiting_is_said() -> None:
    quiet, loud = io.StringIO(), io.StringIO()
    with Progress(enabled=False, stream=quiet) as progress:
        progress("waiting", 0, 0)
        progress("files", 1, 1)
    with Progress(enabled=True, stream=loud) as progress:
        progress("waiting", 0, 0)
    assert quiet.getvalue() == ""
    assert loud.getvalue() == "waiting for another ingest of this dataset to finish (--wait)…\n"


@pytest.mark.parametrize(
    ("n", "word", "said"),
    [(1, "document", "1 document"), (2, "document", "2 documents"), (7558, "chunk", "7,558 chunks")],
)
def test_plural(n: int, word: str, said: str) -> None:
    assert plural(n, word) == said


def test_rates_and_durations_read_well() -> None:
    assert rate(1, 17.5, "chunks") == "0.1 chunks/s"  # never "(0 chunks/s)"
    assert rate(500, 10, "chunks") == "50 chunks/s"
    assert (duration(0.42), duration(185), duration(3725)) == ("0.4 s", "3 min 05 s", "1 h 02 min")


def test_wait_says_it_waits_and_the_wait_is_its_own_phase(corpus: Path, datasets_dir: Path) -> None:
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with dataset_lock(datasets_dir / "docs"):
            held.set()
            release.wait(60)

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait(60)
    calls: list[tuple[str, int, int]] = []

    def progress(phase: str, done: int, total: int) -> None:
        calls.append((phase, done, total))
        if phase == "waiting":
            release.set()  # the other ingest finishes once this one has said it waits

    try:
        report = ingest(
            corpus,
            datasets_dir,
            IngestOptions(dataset_id="docs", wait=True),
            embedder=FakeEmbedder(),
            progress=progress,
        )
    finally:
        release.set()
        holder.join()
    assert calls[0] == ("waiting", 0, 0)
    assert report.wait_seconds > 0 and report.phases()["waiting"] == report.wait_seconds
    assert report.chunks_per_second == pytest.approx(report.embedded / report.embed_seconds)


def test_a_chunk_size_past_the_window_is_lowered_with_a_warning_and_the_overlap_scaled(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level("WARNING", logger="mcpower"):
        assert fit_window(1000, 500, 256) == (254, 127)
        assert fit_window(1000, 32, 256) == (254, 8)
        assert fit_window(250, 32, 256) == (250, 32)  # fits: untouched, nothing said
    said = [r.getMessage() for r in caplog.records]
    assert said == [
        "--chunk-tokens 1000 is more than the model's window of 256 tokens: chunks of 254 tokens, overlap 127 "
        "(scaled from 500)",
        "--chunk-tokens 1000 is more than the model's window of 256 tokens: chunks of 254 tokens, overlap 8 "
        "(scaled from 32)",
    ]


def test_an_ingest_into_a_log_file_says_what_it_does(tmp_path: Path, corpus: Path, datasets_dir: Path) -> None:
    """stderr to a file, as in CI or `2> ingest.log`: phases, warnings, times; the report on stdout."""
    launcher = write_launcher(tmp_path)
    log = tmp_path / "ingest.log"
    args = ["ingest", str(corpus), "--id", "docs", "--datasets-dir", str(datasets_dir)]
    with log.open("w") as err:
        done = subprocess.run(
            [sys.executable, str(launcher), *args, "--chunk-tokens", "1000", "--overlap", "500"],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env=subprocess_env(),
            timeout=120,
            check=False,
        )
    lines = log.read_text().splitlines()
    assert done.returncode == 0, lines
    assert "warning: --chunk-tokens 1000 is more than the model's window of 256 tokens" in "\n".join(lines)
    assert "reading 7 files…" in lines and "read 7 files" in lines
    embedding_lines = [line for line in lines if line.startswith(("embedding ", "embedded "))]
    assert embedding_lines[0].startswith("embedding ") and embedding_lines[-1].startswith("embedded ")
    # One clock for the embedding time: the summary's (report.phases()); the progress line gives none
    # to disagree with it (issue 28: "in 12 min 25 s" on stderr against "in 12 min 36 s" on stdout).
    assert re.fullmatch(r"embedded [\d,]+ chunks?", embedding_lines[-1]), embedding_lines[-1]
    took = next(line for line in lines if line.startswith("took "))
    spent = re.search(r"embedded [\d,]+ chunks? in (.+?) \(", done.stdout)
    assert spent is not None and f"embedding {spent.group(1)}" in took, (done.stdout, took)
    assert any(line.startswith("took ") and "reading" in line for line in lines)
    assert not any(line.startswith("WARNING") for line in lines)
    assert done.stdout.startswith("docs: 5 documents, ")
    assert read_manifest(datasets_dir / "docs" / MANIFEST_NAME).chunking.overlap == 127


def test_the_cli_shows_notices_plainly_and_warnings_as_warnings() -> None:
    code = (
        "import logging; from mcpower.cli.common import setup_logging; setup_logging(); "
        "log = logging.getLogger('mcpower.x'); log.info('hidden'); "
        "log.info('exporting the model', extra={'notice': True}); log.warning('careful')"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stderr == "exporting the model\nwarning: careful\n"


def test_a_search_announces_the_first_export_its_head_start_makes(tmp_path: Path) -> None:
    """The query model starts loading in a thread before any command is imported (preload.py): a
    first export there (10-30 s) is announced on stderr like an ingest's, not waited out in silence."""
    code = (
        "import logging, mcpower.embedding as e\n"
        "def load(model, cache_dir, allowed):\n"
        "    logging.getLogger('mcpower.embedding.export').info('exporting the model, once', extra={'notice': True})\n"
        "    return object()\n"
        "e.load_query_embedder = load\n"
        "from mcpower.cli import preload\n"
        "preload.head_start(['search', 'docs', 'a question'])\n"
        "assert preload._early is not None\n"
        "preload._early.get()\n"
    )
    env = {**subprocess_env(), "MCPOWER_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert done.stderr == "exporting the model, once\n"


def test_ctrl_c_during_ingest_says_what_was_kept(
    corpus: Path, datasets_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mcpower import ingestion

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(ingestion, "ingest", interrupted)
    result = CliRunner().invoke(app, ["ingest", str(corpus), "--datasets-dir", str(datasets_dir)])
    assert result.exit_code == 130
    assert "interrupted: nothing was published; the dataset is as it was before this ingest" in result.stderr


def test_one_document_is_one_document(tmp_path: Path, datasets_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mcpower import embedding

    monkeypatch.setattr(embedding, "load_embedder", lambda *a, **k: FakeEmbedder())
    folder = tmp_path / "one"
    folder.mkdir()
    (folder / "a.md").write_text("# One\n\nA single short note.\n")
    result = CliRunner().invoke(app, ["ingest", str(folder), "--datasets-dir", str(datasets_dir), "-q"])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("one: 1 document, 1 chunk (1 added, "), result.stdout
    again = CliRunner().invoke(app, ["ingest", str(folder), "--datasets-dir", str(datasets_dir), "-q"])
    assert "1 documents" not in again.stdout + again.stderr


def test_a_folder_of_only_images_says_what_it_holds_and_why_none_is_read(tmp_path: Path) -> None:
    folder = tmp_path / "photos"
    for name in ["a.jpg", "b.JPG", "c.png", "trip/d.jpg", "album.zip", "setup.py", ".hidden.md"]:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(b"\x89data")

    result = CliRunner().invoke(app, ["ingest", str(folder), "--datasets-dir", str(tmp_path / "datasets")])

    assert result.exit_code == 1
    message = " ".join(result.stderr.split())
    assert "no documents to ingest — found 3 .jpg and 1 .png: images have no text to read" in message
    assert "1 .zip: archives and compressed files are not opened: unpack them first" in message
    assert "1 .py: source code is read with --code" in message
    assert "mcpower reads .docx, .htm, .html" in message and "Traceback" not in result.output


def test_ingest_into_milvus_refuses_an_id_the_datasets_folder_serves_first(
    datasets_dir: Path, tmp_path: Path, fake_embedder: FakeEmbedder
) -> None:
    corpus = write_files(tmp_path / "notes", {"a.md": "# A\n\nThe zephyrine daemon starts on boot.\n"})
    ingest(corpus, datasets_dir, IngestOptions(dataset_id="docs"), embedder=fake_embedder)
    milvus = tmp_path / "milvus.db"

    result = CliRunner().invoke(
        app, ["ingest", str(corpus), "--id", "docs", "--datasets-dir", str(datasets_dir), "--milvus-uri", str(milvus)]
    )

    assert result.exit_code == 1
    message = " ".join(result.stderr.split())
    assert f"dataset 'docs' is already in the datasets folder ({datasets_dir.resolve() / 'docs'})" in message
    assert f"a copy in Milvus ({milvus}) would never be served" in message and "--id docs-milvus" in message
    assert not milvus.exists()  # refused before anything was written


def test_progress_bars_show_on_a_terminal_that_reports_no_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pty whose size was never set (some CI runners, `script`, containers) says 0 x 0: tqdm took
    that for -1 lines and drew nothing until the bar closed."""
    import os
    import select

    master, slave = os.openpty()
    stream = os.fdopen(slave, "w")
    monkeypatch.setattr(sys, "stderr", stream)  # the bars' stream, which tqdm asks for its size
    try:
        assert os.get_terminal_size(slave) == (0, 0)
        with Progress(enabled=True) as progress:
            progress("chunks", 0, 40)
            stream.flush()
            ready, _, _ = select.select([master], [], [], 0)  # what is there now: nothing is waited for
            drawn = os.read(master, 4096).decode() if ready else ""
            assert "chunks:   0%" in drawn and "0/40" in drawn  # drawn at once, not only when it ends
            progress("chunks", 40, 40)
    finally:
        stream.close()
        os.close(master)
