"""benchmarks/agent_results.py: the judged question sets are consistent, and the figures it computes
(a Sphinx page and its source as one document, near-empty chunks, the no-answer AUROC) mean what
docs/benchmarks.md says. The benchmark itself needs the real model and the doc sets; these do not."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

from mcpower.evaluation import load_qrels, load_queries

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
DATA = BENCHMARKS / "data"


def load_benchmark(script: str) -> ModuleType:
    """``benchmarks/<script>.py`` as a module, imported as the script runs (it imports its suite/ package
    from beside it)."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        spec = importlib.util.spec_from_file_location(f"mcpower_{script}", BENCHMARKS / f"{script}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCHMARKS))


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_benchmark("agent_results")


def test_a_sphinx_source_copy_counts_as_its_page(bench: ModuleType) -> None:
    assert bench.canonical_path("_sources/patterns/fileuploads.rst.txt") == "patterns/fileuploads.html"
    assert bench.canonical_path("html/_sources/index.md.txt") == "html/index.html"
    assert bench.canonical_path("_sources/old.txt") == "old.html"  # Sphinx before 1.5
    for path in ("quickstart.html", "my_sources/notes.txt", "tutorial/index.md"):
        assert bench.canonical_path(path) == path


def test_near_empty_counts_words_without_the_heading_lines(bench: ModuleType) -> None:
    assert bench.body_words("## Options¶\n\npip-command-options: freeze", "Freeze > Options¶") == 4
    assert bench.body_words("orphan", "") == 1
    assert bench.body_words("## Headings { #headings }\n\n//// tab | Test", "LLM test file > Headings") == 2
    text = "## Running\n\nThe only required argument tells it how to load your application."
    assert bench.body_words(text, "Waitress > Running") == 11
    # A heading's words elsewhere in the text still count.
    assert bench.body_words("# Install\n\nInstall it", "Install") == 2


def test_auroc_is_the_chance_an_answerable_question_scores_higher(bench: ModuleType) -> None:
    assert bench.auroc([0.9, 0.8], [0.1, 0.2]) == 1.0
    assert bench.auroc([0.1], [0.9]) == 0.0
    assert bench.auroc([0.5, 0.5], [0.5]) == 0.5
    assert bench.auroc([0.9], []) is None


@pytest.mark.parametrize("name", ["flask", "jinja", "click", "fastapi"])
def test_question_sets_are_consistent(bench: ModuleType, name: str) -> None:
    queries = load_queries(DATA / f"{name}_questions.jsonl")
    qrels = load_qrels(DATA / f"{name}_qrels.tsv")
    kinds = {
        row["_id"]: row.get("kind")
        for row in map(json.loads, (DATA / f"{name}_questions.jsonl").read_text().splitlines())
    }
    assert set(qrels) <= set(queries)
    assert set(kinds.values()) <= {None, "version", "no-answer"}
    for qid in queries:
        judged = qrels.get(qid, {})
        if kinds[qid] == "no-answer":
            assert not judged, qid
            continue
        assert judged and max(judged.values()) > 0, qid
        assert all(d == bench.canonical_path(d) and not d.startswith("/") for d in judged), qid
        if kinds[qid] == "version":  # the changelog is what such a question should find
            assert any(bench.CHANGELOG_PATH.search(d) for d in judged), qid
    if name != "fastapi":  # the Debian sets: 30-50 questions, some about versions, some without answer
        assert 30 <= len(queries) <= 50
        assert sum(k == "version" for k in kinds.values()) >= 3
        assert sum(k == "no-answer" for k in kinds.values()) >= 3


def test_int8_documents_compares_only_datasets_holding_the_same_chunks(tmp_path: Path) -> None:
    """benchmarks/int8_documents.py: an fp32 and an int8 dataset are compared only if they hold the
    same chunks (a reused fp32 ingest made by other chunking code would not), and the cosine of
    each chunk's two vectors is reported."""
    from conftest import FakeEmbedder

    from mcpower.ingestion import IngestOptions, ingest
    from mcpower.registry import Registry

    harness = load_benchmark("int8_documents")
    src, root = tmp_path / "src", tmp_path / "datasets"
    src.mkdir()
    (src / "a.md").write_text(
        "# Daemon\n\nThe zephyrine daemon starts on boot.\n\n## Logs\n\nLogs go to the journal.\n"
    )
    (src / "b.md").write_text("# Quokka\n\nA quokka hops about.\n")
    fp32, int8 = FakeEmbedder(), FakeEmbedder()
    int8.backend = "onnx-int8"
    ingest(src, root, IngestOptions(dataset_id="fp32"), embedder=fp32)
    ingest(src, root, IngestOptions(dataset_id="int8"), embedder=int8)
    (src / "b.md").write_text("# Quokka\n\nA quokka hops about the island.\n")
    ingest(src, root, IngestOptions(dataset_id="other"), embedder=int8)
    registry = Registry(root, embedder_factory=lambda model: fp32)
    try:
        same = harness.compare_chunks(registry, "fp32", "int8")
        other = harness.compare_chunks(registry, "fp32", "other")
    finally:
        registry.close()

    assert same == {"same_chunks": True, "chunks_fp32": 2, "chunks_int8": 2, "cosine_mean": 1.0, "cosine_min": 1.0}
    assert other["same_chunks"] is False and other["chunks_int8"] == 2
