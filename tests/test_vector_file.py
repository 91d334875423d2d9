"""The hnsw_sq index kind: an HNSW graph over 8-bit codes, its candidates re-scored with the exact
vectors of ``vectors.f32`` (store/local/vectors.py). Same answers as an exact index; the vectors
file is untrusted input like every other file of a dataset."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import FakeEmbedder, write_files

from mcpower.errors import IndexMismatchError, InvalidManifestError
from mcpower.ingestion import IngestOptions, ingest
from mcpower.registry import Registry
from mcpower.results import SearchFilters
from mcpower.search import search
from mcpower.store.faiss_file import check_index_file
from mcpower.store.local import build as build_module
from mcpower.store.local.vectors import VectorFile, write_vector_file

WORDS = [
    "harbour",
    "pelican",
    "gull",
    "rope",
    "net",
    "boat",
    "tide",
    "anchor",
    "sail",
    "mast",
    "keel",
    "hull",
    "deck",
    "cabin",
    "chart",
    "compass",
]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``exact`` (flat) and ``quantised`` (hnsw_sq): the same 40 documents (fake embedder)."""
    base = tmp_path_factory.mktemp("sq")
    rng = np.random.default_rng(7)
    files: dict[str, str | bytes] = {
        f"part{i % 4}/doc{i}.md": f"# Doc {i}\n\n" + " ".join(rng.choice(WORDS, 12)) + f" item{i}\n" for i in range(40)
    }
    src = write_files(base / "src", files)
    ingest(src, base / "datasets", IngestOptions(dataset_id="exact"), embedder=FakeEmbedder())
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(build_module, "HNSW_THRESHOLD", 0)  # as a big dataset gets
        ingest(src, base / "datasets", IngestOptions(dataset_id="quantised"), embedder=FakeEmbedder())
    return base / "datasets"


def registry_over(root: Path) -> Registry:
    return Registry(root, embedder_factory=lambda model: FakeEmbedder(), query_cache=0)


def copy(root: Path, tmp_path: Path, name: str = "quantised") -> Path:
    shutil.copytree(root / name, tmp_path / "datasets" / name)
    return tmp_path / "datasets" / name


def test_the_manifest_records_the_kind_and_the_exact_vectors(root: Path) -> None:
    manifest = json.loads((root / "quantised" / "manifest.json").read_text())
    assert manifest["vectorIndex"]["kind"] == "hnsw_sq"
    floats = root / "quantised" / manifest["vectors"]
    assert floats.name == "vectors.f32"
    assert floats.stat().st_size == manifest["counts"]["chunks"] * FakeEmbedder.dimension * 4
    assert manifest["checksums"]["vectors"] == hashlib.sha256(floats.read_bytes()).hexdigest()
    exact = json.loads((root / "exact" / "manifest.json").read_text())
    assert "vectors" not in exact and "vectors" not in exact["checksums"]  # as manifests were before
    with open(root / "quantised" / manifest["index"], "rb") as f:
        assert check_index_file(f.fileno()).kind == "hnsw_sq"


@pytest.mark.parametrize("mode", ["semantic", "hybrid"])
def test_answers_equal_an_exact_index(root: Path, mode: str) -> None:
    registry = registry_over(root)
    try:
        for q in ["pelican harbour", "rope net boat", "item7 compass", "keel hull deck cabin"]:
            for folder in (None, "part1"):
                f = SearchFilters(folder=folder) if folder else None
                a = search(registry, q, "exact", 10, mode, filters=f, group="none")
                b = search(registry, q, "quantised", 10, mode, filters=f, group="none")
                assert [(r.path, r.heading_path) for r in a.results] == [(r.path, r.heading_path) for r in b.results]
                assert [r.score for r in a.results] == pytest.approx([r.score for r in b.results], abs=1e-6)
        exact, quantised = registry.store("exact"), registry.store("quantised")
        ids = [i for i, _ in exact.semantic(FakeEmbedder().embed_query("pelican"), 40)]
        assert np.array_equal(exact.vectors(ids), quantised.vectors(ids))  # the floats, not the codes
    finally:
        registry.close()


# (bytes a read may take, rows that make a run long, rows read one call each): the defaults; then
# every read by runs; then small enough that reads are split into many batches and runs are cut,
# long runs read alone among short ones.
@pytest.mark.parametrize(("max_read", "long_run", "few"), [(None, None, None), (None, None, 0), (32 * 7, 3, 0)])
def test_rows_are_read_in_any_order_adjacent_or_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, max_read: int | None, long_run: int | None, few: int | None
) -> None:
    from mcpower.store.local import vectors

    if max_read is not None:
        monkeypatch.setattr(vectors, "_MAX_READ", max_read)
        monkeypatch.setattr(vectors, "_LONG_RUN", long_run)
    if few is not None:
        monkeypatch.setattr(vectors, "_FEW_ROWS", few)
    rng = np.random.default_rng(1)
    vecs = rng.standard_normal((300, 8)).astype(np.float32)
    write_vector_file(tmp_path / "v.f32", (vecs[s : s + 64] for s in range(0, 300, 64)))
    floats = VectorFile(os.open(tmp_path / "v.f32", os.O_RDONLY), 300, 8)
    scattered = rng.integers(0, 300, 120).tolist()  # repeats, gaps of every size, runs
    try:
        for rows in ([5, 4, 3, 200, 6, 299, 0], [17, 17, 18], list(range(300))[::-1], [], scattered, [299]):
            got = floats.read(np.asarray(rows, dtype=np.int64))
            assert np.array_equal(got, vecs[rows].reshape(-1, 8))
        with pytest.raises(ValueError, match="outside"):
            floats.read(np.asarray([300], dtype=np.int64))
    finally:
        floats.close()


@pytest.mark.parametrize("few", [256, 0])
def test_a_vectors_file_cut_short_after_loading_is_an_error_not_garbage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, few: int
) -> None:
    from mcpower.store.local import vectors

    monkeypatch.setattr(vectors, "_FEW_ROWS", few)  # rows read one call each, or by runs
    rng = np.random.default_rng(2)
    vecs = rng.standard_normal((50, 8)).astype(np.float32)
    write_vector_file(tmp_path / "v.f32", [vecs])
    floats = VectorFile(os.open(tmp_path / "v.f32", os.O_RDONLY), 50, 8)
    try:
        os.truncate(tmp_path / "v.f32", 40 * 8 * 4)  # changed under the reader: the last 10 rows gone
        assert np.array_equal(floats.read(np.asarray([3, 1], dtype=np.int64)), vecs[[3, 1]])
        with pytest.raises(ValueError, match="changed while it was read"):
            floats.read(np.asarray([3, 45], dtype=np.int64))
    finally:
        floats.close()


def forge_vectors(folder: Path, data: bytes, checksum: bool = True) -> None:
    manifest = json.loads((folder / "manifest.json").read_text())
    (folder / manifest["vectors"]).write_bytes(data)
    if checksum:
        manifest["checksums"]["vectors"] = hashlib.sha256(data).hexdigest()
    (folder / "manifest.json").write_text(json.dumps(manifest))


def floats_of(folder: Path) -> bytes:
    manifest = json.loads((folder / "manifest.json").read_text())
    return (folder / manifest["vectors"]).read_bytes()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda b: b + b"\0" * 1024, r"vectors\.f32 is not the version's vectors"),
        (lambda b: b[: len(b) // 2], r"vectors\.f32 is not the version's vectors"),
        (lambda b: b"", r"vectors\.f32 is not the version's vectors"),
    ],
)
def test_a_vectors_file_of_another_size_is_refused(root: Path, tmp_path: Path, change, message: str) -> None:  # type: ignore[no-untyped-def]
    folder = copy(root, tmp_path)
    forge_vectors(folder, change(floats_of(folder)))  # the checksum forged to match
    registry = registry_over(tmp_path / "datasets")
    try:
        with pytest.raises(IndexMismatchError, match=message):
            registry.store("quantised")
    finally:
        registry.close()


def test_a_changed_vectors_file_is_refused_by_its_checksum(root: Path, tmp_path: Path) -> None:
    folder = copy(root, tmp_path)
    data = bytearray(floats_of(folder))
    data[:4] = np.float32(1e30).tobytes()
    forge_vectors(folder, bytes(data), checksum=False)
    registry = registry_over(tmp_path / "datasets")
    try:
        with pytest.raises(IndexMismatchError, match=r"vectors\.f32 does not match its checksum"):
            registry.store("quantised")
    finally:
        registry.close()


def test_a_symlinked_vectors_file_is_refused(root: Path, tmp_path: Path) -> None:
    folder = copy(root, tmp_path)
    manifest = json.loads((folder / "manifest.json").read_text())
    target = folder / manifest["vectors"]
    outside = tmp_path / "elsewhere.f32"
    shutil.move(target, outside)
    target.symlink_to(outside)
    registry = registry_over(tmp_path / "datasets")
    try:
        with pytest.raises(InvalidManifestError, match="points outside the dataset folder"):
            registry.store("quantised")
    finally:
        registry.close()


@pytest.mark.parametrize(
    "edit",
    [
        lambda m: m.pop("vectors"),  # hnsw_sq without its vectors
        lambda m: m["checksums"].pop("vectors"),
        lambda m: m.update(vectors="../../etc/passwd"),
        lambda m: m["vectorIndex"].update(kind="hnsw"),  # vectors named for a kind that has none
    ],
)
def test_a_manifest_that_misnames_the_vectors_is_refused(root: Path, tmp_path: Path, edit) -> None:  # type: ignore[no-untyped-def]
    folder = copy(root, tmp_path)
    manifest = json.loads((folder / "manifest.json").read_text())
    edit(manifest)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    registry = registry_over(tmp_path / "datasets")
    try:
        with pytest.raises(InvalidManifestError):
            registry.store("quantised")
    finally:
        registry.close()


def test_a_forged_quantiser_is_refused_before_faiss_reads_it(root: Path, tmp_path: Path) -> None:
    folder = copy(root, tmp_path)
    manifest = json.loads((folder / "manifest.json").read_text())
    path = folder / manifest["index"]
    data = bytearray(path.read_bytes())
    at = data.index(b"IxSQ") + 4 + 37 - 4  # after the storage's fourcc and header: the quantiser's type
    data[at : at + 4] = (1).to_bytes(4, "little")  # QT_4bit: codes half the size the file holds
    path.write_bytes(bytes(data))
    manifest["checksums"]["index"] = hashlib.sha256(bytes(data)).hexdigest()
    (folder / "manifest.json").write_text(json.dumps(manifest))
    registry = registry_over(tmp_path / "datasets")
    try:
        with pytest.raises(IndexMismatchError, match="scalar quantiser"):
            registry.store("quantised")
    finally:
        registry.close()


class CountingEmbedder(FakeEmbedder):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[int] = []

    def embed_documents(self, texts, progress=None):  # type: ignore[no-untyped-def]
        self.calls.append(len(texts))
        return super().embed_documents(texts, progress)


def test_ingest_embeds_in_bounded_blocks_with_the_same_result(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mcpower import assembly, plan

    src = root.parent / "src"
    monkeypatch.setattr(assembly, "VECTOR_BLOCK", 7)  # vectors carried over, and checked, per block
    monkeypatch.setattr(plan, "SLICE", 7)  # new chunks are embedded (and stored) a slice at a time
    monkeypatch.setattr(plan, "MEASURE", 7)  # the first, timed, slice
    counting = CountingEmbedder()
    ingest(src, tmp_path / "datasets", IngestOptions(dataset_id="exact"), embedder=counting)

    assert counting.calls and max(counting.calls) <= 7  # never the whole dataset's texts at once
    assert sum(counting.calls) == json.loads((root / "exact" / "manifest.json").read_text())["counts"]["chunks"]
    whole = json.loads((root / "exact" / "manifest.json").read_text())
    blocks = json.loads((tmp_path / "datasets" / "exact" / "manifest.json").read_text())
    registry = registry_over(root)
    other = registry_over(tmp_path / "datasets")
    try:
        a, b = registry.store("exact"), other.store("exact")
        ids = [i for i, _ in a.semantic(FakeEmbedder().embed_query("pelican"), 40)]
        assert np.array_equal(a.vectors(ids), b.vectors(ids))
        assert whole["counts"] == blocks["counts"]
    finally:
        registry.close()
        other.close()
