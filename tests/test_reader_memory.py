"""Memory of the process that ingests (the CLI, or a server under ``--watch``) when a document's
structure is what costs: Markdown of tiny blocks made markdown-it keep an object per token, and the
sections one per heading and block — 450 to 900 times the file. Files over
``worker.IN_PROCESS_MAX_BYTES`` are read and chunked in the reader process (chunking/worker.py), so
the ingesting process holds the chunks and the text, a small multiple of the file.

Each measurement is a child process's peak RSS (VmHWM, reset just before) above its RSS then, after
a first small ingest has paid for the imports and the worker; the bound is 20 times the file.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import FakeEmbedder
from server_fixtures import REPO_ROOT, TESTS_DIR, StdioServer, subprocess_env, write_launcher
from word_count import count_words

from mcpower.chunking import Parsed, chunk_document, parse_document, worker
from mcpower.chunking.worker import Reader
from mcpower.ingestion import IngestOptions, ingest

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads and resets the peak memory in /proc")

BOUND = 20  # times the file's size
# A Markdown page under the in-process threshold and one over it: the first ingest reads both, so
# the measured one finds the worker's machinery (and the tokenizer's, the SQLite writer's) loaded.
WARM = {"small.md": "# Small\n\nA short page.\n", "long.md": "# Long\n\n" + "Some words in a paragraph.\n\n" * 2000}

CLI_INGEST = textwrap.dedent(
    """
    import re, sys
    sys.path[:0] = {paths!r}
    from conftest import FakeEmbedder
    from mcpower import embedding
    embedding.load_embedder = lambda model=None, backend=None, cache_dir=None: FakeEmbedder()
    from mcpower.cli import main

    def status(field):
        with open("/proc/self/status") as f:
            return int(re.search(field + r":\\s+(\\d+) kB", f.read()).group(1)) * 1024

    warm, hostile, datasets = sys.argv[1:4]

    def ingest(folder, dataset):
        sys.argv = ["mcpower", "ingest", folder, "--id", dataset, "--datasets-dir", datasets]
        try:
            main()
        except SystemExit as e:
            assert not e.code, e.code

    ingest(warm, "warm")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # the peak (VmHWM) starts again from here
    before = status("VmRSS")
    ingest(hostile, "hostile")
    print(status("VmHWM") - before, file=sys.stderr)
    """
)


def write(folder: Path, files: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def hostile(seed: str, size: int) -> str:
    return seed * (size // len(seed))


def cli_growth(tmp_path: Path, text: str) -> int:
    """Bytes the peak of `mcpower ingest` grew by for a folder of one Markdown file of ``text``."""
    warm, big = write(tmp_path / "warm", WARM), write(tmp_path / "big", {"page.md": text})
    script = CLI_INGEST.format(paths=[str(TESTS_DIR), str(REPO_ROOT)])
    done = subprocess.run(
        [sys.executable, "-c", script, str(warm), str(big), str(tmp_path / "datasets")],
        capture_output=True,
        text=True,
        timeout=900,
        env=subprocess_env(),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "hostile: 1 document," in done.stdout, done.stdout
    return int(done.stderr.strip().splitlines()[-1])


def test_no_file_over_the_threshold_is_parsed_in_the_ingesting_process(
    tmp_path: Path, fake_embedder: FakeEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What bounds the memory, checked without measuring it (the measurements below are slow): a
    plain ingest — the model's choice samples the files' languages, then each file is read —
    parses no file over IN_PROCESS_MAX_BYTES here. The choice's sample parsed a megabyte of tiny
    blocks here (66 times the file) after the ingest itself had moved to the worker."""
    parsed_here: list[int] = []
    real = worker.parse_document

    def spy(data: bytes | str, file_type: str, module: str | None = None) -> Parsed:
        parsed_here.append(len(data))
        return real(data, file_type, module)

    monkeypatch.setattr(worker, "parse_document", spy)  # this process's reads only: the worker's is its own
    big = "# Big\n\n" + "- an item of a list\n" * 2000
    source = write(tmp_path / "docs", {"small.md": WARM["small.md"], "big.md": big})

    report = ingest(source, tmp_path / "datasets", IngestOptions(dataset_id="docs"))

    assert report.model_reason  # the model was chosen from a sample of the files
    assert (report.added, report.skipped) == (2, [])
    assert parsed_here and max(parsed_here) <= worker.IN_PROCESS_MAX_BYTES < len(big)


@pytest.mark.slow
def test_a_markdown_file_of_tiny_blocks_is_ingested_in_bounded_memory(tmp_path: Path) -> None:
    # A megabyte of one-line items of lists nested six deep: an ingest peaked at ~65 times the file,
    # now ~12 times. (10 s of processor time, ~2 s of it parsing; flat one-line items and empty
    # headings, 450 and 900 times the file, take ten times longer.)
    text = hostile("- - - - - -\n", 1 << 20)

    grown = cli_growth(tmp_path, text)

    assert grown <= BOUND * len(text), f"the peak grew by {grown / len(text):.0f} times the file's size"


@pytest.mark.slow
@pytest.mark.parametrize("seed", ["- a\n", "#\n"], ids=["list-items", "empty-headings"])
def test_a_megabyte_of_one_line_list_items_or_headings_is_ingested_in_bounded_memory(tmp_path: Path, seed: str) -> None:
    text = hostile(seed, 1 << 20)

    grown = cli_growth(tmp_path, text)

    assert grown <= BOUND * len(text), f"the peak grew by {grown / len(text):.0f} times the file's size"


def status(pid: int, field: str) -> int:
    text = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(field + r":\s+(\d+) kB", text).group(1)) * 1024  # type: ignore[union-attr]


@pytest.mark.slow
def test_a_watching_server_reindexes_a_megabyte_of_list_items_in_bounded_memory(tmp_path: Path) -> None:
    """The live attack: a file written into a watched folder. The server's own peak grows by at most
    20 times the file (it went from 300 MB to 1.26 GB for 2 MB of such items)."""
    source = write(tmp_path / "docs", WARM)
    datasets = tmp_path / "datasets"
    ingest = subprocess.run(
        [sys.executable, str(write_launcher(tmp_path)), "ingest", str(source), "--id", "docs"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**subprocess_env(), "MCPOWER_DATASETS_DIR": str(datasets)},
    )
    assert ingest.returncode == 0, ingest.stderr[-2000:]
    env = {**subprocess_env(), "MCPOWER_WATCH": "1", "MCPOWER_WATCH_DEBOUNCE": "0.05"}
    argv = [sys.executable, str(write_launcher(tmp_path)), "serve", "--stdio", "--datasets-dir", str(datasets)]
    server = StdioServer(argv, env=env)
    try:
        server.initialize()
        server.wait_log("watch.watching")
        (source / "warm.md").write_text("# Warm\n\n" + "More words in a paragraph.\n\n" * 2000)
        server.wait_log("watch.reindexed", timeout=300)  # the first re-ingest pays for the worker
        pid = server.proc.pid
        Path(f"/proc/{pid}/clear_refs").write_text("5")
        before = status(pid, "VmRSS")
        text = hostile("- a\n", 1 << 20)
        (source / "items.md").write_text(text)
        reindexed = server.wait_log("watch.reindexed", timeout=600)
        grown = status(pid, "VmHWM") - before
        assert reindexed is not None and (reindexed["added"], reindexed["skipped"]) == (1, 0)
        assert grown <= BOUND * len(text), f"the server's peak grew by {grown / len(text):.0f} times the file's size"
    finally:
        server.stop()


# ---------------------------------------------------------------- the same chunks either way


def documents_of(folder: Path) -> list[tuple[str, bytes]]:
    return [(p.name, p.read_bytes()) for p in sorted(folder.rglob("*.md"))]


def assert_same_chunks(files: list[tuple[str, bytes]]) -> None:
    """Each file chunked in the worker (every file over the threshold) as in this process."""
    with Reader() as reader:
        for name, data in files:
            here = chunk_document(data, ".md", name, count_words, 256, 32)
            there = reader.document(data, ".md", name, count_words, 256, 32)
            assert there == here, name
        assert reader.worker_pid is not None  # it was the worker that read them


def test_a_big_page_is_chunked_in_the_worker_exactly_as_it_was_here() -> None:
    page = REPO_ROOT / "docs" / "robustness.md"
    assert page.stat().st_size > worker.IN_PROCESS_MAX_BYTES

    assert_same_chunks([(page.name, page.read_bytes())])


def test_a_big_pages_language_sample_is_read_in_the_worker_as_it_was_here() -> None:
    """The model's choice samples each file's text (model_choice.py): it parsed the whole file in
    this process, a megabyte of tiny blocks included, before the ingest read it in the worker."""
    data = (REPO_ROOT / "docs" / "robustness.md").read_bytes()
    parsed = parse_document(data, ".md")
    here = "\n".join(b.text for s in parsed.sections for b in s.blocks if not b.heading)[:8000]
    with Reader() as reader:
        assert reader.sample(data, ".md", 8000) == here
        assert reader.worker_pid is not None


@pytest.mark.slow
def test_the_fastapi_docs_and_ours_are_chunked_in_the_worker_exactly_as_here(monkeypatch: pytest.MonkeyPatch) -> None:
    corpus = Path("/work/shared/bench/docs-fastapi/corpus")
    if not corpus.is_dir():
        pytest.skip("the FastAPI docs corpus is not on this machine")
    monkeypatch.setattr(worker, "IN_PROCESS_MAX_BYTES", 0)  # every page through the worker

    assert_same_chunks(documents_of(corpus) + documents_of(REPO_ROOT / "docs"))
