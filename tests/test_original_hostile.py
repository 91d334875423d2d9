"""Datasets of the original format broken one way each: every file is untrusted. Each is refused
with a reason naming what is wrong (no absolute path), by the registry and `mcpower validate`,
while a good dataset of each format beside it keeps working. (The same kind of cases run against a
real server in the fault table, tests/hostile_cases.py.)"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from conftest import FakeEmbedder
from original_fixtures import RECORDS, embed, records, write_index, write_original
from typer.testing import CliRunner

from mcpower.cli.app import app
from mcpower.errors import McpowerError
from mcpower.ingestion import IngestOptions, ingest
from mcpower.registry import Registry
from mcpower.search import search
from mcpower.store.original.files import MAX_METADATA_BYTES

pytestmark = pytest.mark.usefixtures("fake_packaged")

Break = Callable[[Path], None]


def meta_text(text: str | bytes) -> Break:
    def mutate(folder: Path) -> None:
        data = text if isinstance(text, bytes) else text.encode()
        (folder / "metadata.json").write_bytes(data)

    return mutate


def meta_edit(change: Callable[[dict], None]) -> Break:  # type: ignore[type-arg]
    def mutate(folder: Path) -> None:
        path = folder / "metadata.json"
        data = json.loads(path.read_text())
        change(data)
        path.write_text(json.dumps(data))

    return mutate


def manifest_edit(**fields: object) -> Break:
    def mutate(folder: Path) -> None:
        path = folder / "manifest.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), **fields}))

    return mutate


def index_bytes(change: Callable[[bytes], bytes]) -> Break:
    def mutate(folder: Path) -> None:
        path = folder / "index" / "docs.index"
        path.write_bytes(change(path.read_bytes()))

    return mutate


def vectors(make: Callable[[np.ndarray], np.ndarray]) -> Break:
    def mutate(folder: Path) -> None:
        write_index(folder / "index" / "docs.index", make(embed([r["content"] for r in RECORDS])))

    return mutate


def other_faiss_index(folder: Path) -> None:
    import faiss

    index = faiss.IndexFlatL2(FakeEmbedder.dimension)
    index.add(embed([r["content"] for r in RECORDS]))
    faiss.write_index(index, str(folder / "index" / "docs.index"))


def huge_metadata(folder: Path) -> None:
    with open(folder / "metadata.json", "r+b") as f:
        f.truncate(MAX_METADATA_BYTES + 1)  # sparse: no disk used, and never read


def lying_header(folder: Path) -> None:
    path = folder / "index" / "docs.index"
    data = bytearray(path.read_bytes())
    data[8:16] = struct.pack("<q", 10**12)  # ntotal: a terabyte of vectors the file does not hold
    path.write_bytes(bytes(data))


def outside_symlink(folder: Path) -> None:
    target = folder.parent.parent / "outside.index"
    (folder / "index" / "docs.index").rename(target)
    (folder / "index" / "docs.index").symlink_to(target)


def fifo_metadata(folder: Path) -> None:
    (folder / "metadata.json").unlink()
    os.mkfifo(folder / "metadata.json")


def empty_index_folder(folder: Path) -> None:
    (folder / "index" / "docs.index").rename(folder / "index" / "docs.bin")


def both(*breaks: Break) -> Break:
    def mutate(folder: Path) -> None:
        for b in breaks:
            b(folder)

    return mutate


def nan_vector(v: np.ndarray) -> np.ndarray:
    v[3, 0] = np.nan
    return v


CASES: list[tuple[str, Break, str, str]] = [
    ("meta-truncated", meta_text('{"documents": [{"path": "a.md", "con'), "INDEX_MISMATCH", "not valid UTF-8 JSON"),
    ("meta-garbled", meta_text(bytes(range(256)) * 4), "INDEX_MISMATCH", "not valid UTF-8 JSON"),
    ("meta-deep", meta_text("[" * 100_000), "INDEX_MISMATCH", "not valid UTF-8 JSON"),
    ("meta-nan", meta_text('{"documents": [], "model": NaN}'), "INDEX_MISMATCH", "NaN is not allowed"),
    ("meta-shape", meta_text('{"documents": 5}'), "INDEX_MISMATCH", "must be a list of chunk records"),
    ("meta-huge", huge_metadata, "INDEX_MISMATCH", f"over the {MAX_METADATA_BYTES}-byte limit"),
    ("meta-fifo", fifo_metadata, "INVALID_MANIFEST", "not a regular file"),
    (
        "record-not-object",
        meta_edit(lambda m: m["documents"].__setitem__(1, "text")),
        "INDEX_MISMATCH",
        "record 2 is not an object",
    ),
    (
        "record-no-path",
        meta_edit(lambda m: m["documents"][2].pop("path")),
        "INDEX_MISMATCH",
        "record 3: 'path' must be",
    ),
    (
        "record-long-path",
        meta_edit(lambda m: m["documents"][0].update(path="a/" * 300)),
        "INDEX_MISMATCH",
        "record 1: 'path' must be",
    ),
    (
        "record-content-number",
        meta_edit(lambda m: m["documents"][0].update(content=5)),
        "INDEX_MISMATCH",
        "'content' must be text",
    ),
    ("model-not-text", meta_edit(lambda m: m.update(model=["x"])), "INDEX_MISMATCH", "'model' must be a model name"),
    (
        "count-mismatch",
        meta_edit(lambda m: m["documents"].pop()),
        "INDEX_MISMATCH",
        "index/docs.index holds 6 vectors, metadata.json 5 records",
    ),
    (
        "stats-chunks",
        meta_edit(lambda m: m["stats"].update(totalChunks=7)),
        "INDEX_MISMATCH",
        "stats.totalChunks says 7",
    ),
    (
        "stats-dimension",
        meta_edit(lambda m: m["stats"].update(embeddingDimensions=384)),
        "INDEX_MISMATCH",
        "stats.embeddingDimensions says 384",
    ),
    (
        "no-records",
        lambda f: write_original(f, [], np.zeros((0, FakeEmbedder.dimension), np.float32)),
        "DATASET_UNAVAILABLE",
        "has no chunk records",
    ),
    (
        "dimension-mismatch",
        both(vectors(lambda v: embed([r["content"] for r in RECORDS], 128)), meta_edit(lambda m: m.pop("stats"))),
        "INDEX_MISMATCH",
        "128-dimensional vectors, but model",
    ),
    (
        "unknown-model",
        meta_edit(lambda m: m.update(model="acme/secret-embedder")),
        "DATASET_UNAVAILABLE",
        "'acme/secret-embedder', which is not available offline here",
    ),
    (
        "model-is-a-path",
        meta_edit(lambda m: m.update(model=str(Path(__file__).parent))),
        "DATASET_UNAVAILABLE",
        "model '…/tests', which is not available offline here",
    ),
    (
        "index-not-faiss",
        index_bytes(lambda b: b"this is not a FAISS index at all" * 4),
        "INDEX_MISMATCH",
        "not a FAISS index",
    ),
    ("index-empty", index_bytes(lambda b: b""), "INDEX_MISMATCH", "not a FAISS index"),
    ("index-other-kind", other_faiss_index, "INDEX_MISMATCH", "a FAISS 'IxF2' index"),
    ("index-truncated", index_bytes(lambda b: b[: len(b) // 2]), "INDEX_MISMATCH", "cut short or damaged"),
    ("index-padded", index_bytes(lambda b: b + b"\0" * 4), "INDEX_MISMATCH", "cut short or damaged"),
    ("index-lying-header", lying_header, "INDEX_MISMATCH", "header promises 1000000000000 vectors"),
    ("index-folder-empty", empty_index_folder, "INVALID_MANIFEST", "holds no *.index or *.faiss file"),
    ("index-symlink-outside", outside_symlink, "INVALID_MANIFEST", "points outside the dataset folder"),
    (
        "index-parent",
        manifest_edit(index="../good-orig/index"),
        "INVALID_MANIFEST",
        "must be a relative path inside the dataset folder",
    ),
    (
        "metadata-absolute",
        manifest_edit(metadata="/etc/passwd"),
        "INVALID_MANIFEST",
        "must be a relative path inside the dataset folder",
    ),
    (
        "metadata-inner-dotdot",
        manifest_edit(metadata="index/../../good-orig/metadata.json"),
        "INVALID_MANIFEST",
        "relative path inside",
    ),
    ("metadata-missing", manifest_edit(metadata="nope.json"), "INVALID_MANIFEST", "'nope.json' is missing"),
    ("manifest-long-name", manifest_edit(name="n" * 129), "INVALID_MANIFEST", "(original format): name"),
    ("manifest-top-k-text", manifest_edit(defaultTopK="5"), "INVALID_MANIFEST", "(original format): defaultTopK"),
    ("nan-vector", vectors(nan_vector), "INDEX_MISMATCH", "vector 3 holds NaN or infinity"),
    ("non-unit-vectors", vectors(lambda v: v * 0.5), "INDEX_MISMATCH", "vector 0 has length 0.5, not 1"),
]


@pytest.fixture
def root(tmp_path: Path, corpus: Path) -> Path:
    datasets = tmp_path / "datasets"
    write_original(datasets / "good-orig")
    ingest(corpus, datasets, IngestOptions(dataset_id="docs"), embedder=FakeEmbedder())
    return datasets


@pytest.mark.parametrize(("case", "mutate", "code", "reason"), CASES, ids=[c[0] for c in CASES])
def test_broken_original_dataset(root: Path, tmp_path: Path, case: str, mutate: Break, code: str, reason: str) -> None:
    mutate(write_original(root / case))
    registry = Registry(root, embedder_factory=lambda m: FakeEmbedder())

    with pytest.raises(McpowerError) as info:
        registry.store(case)
    assert (info.value.code, reason in info.value.message) == (code, True), info.value.message
    assert str(tmp_path) not in info.value.message and case in info.value.message
    for good, query, path in [("good-orig", "harpsichord", "notes.txt"), ("docs", "harpsichord", "notes.txt")]:
        assert search(registry, query, good).results[0].path == path
    everything = search(registry, "harpsichord")
    assert set(everything.meta.datasets) == {"good-orig", "docs"}
    assert registry.entry(case).summary().status == "error"
    registry.close()

    result = CliRunner().invoke(app, ["validate", "--datasets-dir", str(root), case])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.stdout.startswith(f"error  {case}: ") and reason in result.stdout


def test_hostile_text_in_records_is_served_safely(tmp_path: Path) -> None:
    """Lone surrogates (valid JSON escapes, but not encodable) and control characters in records."""
    recs = records("odd")
    recs[0] |= {"path": "guide/\ud800odd.md", "title": "T\udfff", "content": "zephyrine \ud83d\x01\x1b text"}
    folder = write_original(tmp_path / "datasets" / "odd", recs, embed([r["content"] for r in recs]))
    registry = Registry(tmp_path / "datasets", embedder_factory=lambda m: FakeEmbedder())
    hit = search(registry, "zephyrine text", "odd", mode="keyword").results[0]
    assert (hit.path, hit.title) == ("guide/\ufffdodd.md", "T\ufffd")
    assert "\ufffd" in hit.snippet and hit.model_dump_json()
    assert folder.exists()
    registry.close()
