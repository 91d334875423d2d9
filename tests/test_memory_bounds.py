"""Forged dataset files cannot make a load allocate more than a bounded multiple of their size.

A version's FAISS file (mcpower's format) is walked before FAISS reads it: every length field must
agree with the index's dimension and count and fit in the bytes left, else FAISS would allocate
what a forged count says (issue 18, item 7). A dataset of the original format is held to budgets:
its vectors are read and checked a block at a time, at most MAX_VECTOR_BYTES of them, and its
metadata's JSON values are counted before it is parsed (item 15).

Peak memory is measured in a fresh interpreter running ``mcpower validate`` (VmHWM at its exit;
ru_maxrss would carry over this process's own peak), against a same-run baseline: the same command
on a healthy dataset of the same format.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import FakeEmbedder, fresh_python, tagged_json, write_files
from original_fixtures import write_original

from mcpower.errors import IndexMismatchError
from mcpower.ingestion import IngestOptions, ingest
from mcpower.manifest import read_manifest_json
from mcpower.registry import Registry
from mcpower.store.faiss_file import check_index_file
from mcpower.store.local import build as build_module
from mcpower.store.original import files as original_files
from mcpower.store.original.files import read_dataset

# Runs `mcpower validate --json <args>`; reports its rows and the process's peak RSS in KiB.
VALIDATE = """
import contextlib, io, json, runpy, sys
sys.argv = ["mcpower", "validate", "--json", *sys.argv[1:]]
out = io.StringIO()
with contextlib.redirect_stdout(out):
    try:
        runpy.run_module("mcpower", run_name="__main__")
    except SystemExit:
        pass
with open("/proc/self/status") as f:
    peak = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
print("VALIDATED", json.dumps({"rows": json.loads(out.getvalue())["datasets"], "peak_kib": peak}))
"""
NOISE = 64 * 2**20  # the same command on other small datasets: a few MB apart at most
FLAT_HEADER = struct.Struct("<4siqqq?iQ")  # an IndexFlatIP file: fourcc, d, ntotal, 2 unused, trained, metric, floats
FORGED = 1 << 27  # a forged count: FAISS would allocate 512 MiB (int32/float32 items) to 1 GiB (int64)


def validate(datasets: Path, *ids: str) -> tuple[list[dict[str, Any]], int]:
    """The rows of `mcpower validate` in a fresh interpreter, and its peak RSS in bytes."""
    proc = fresh_python(VALIDATE, "--datasets-dir", str(datasets), *ids, env={"PYTHONUNBUFFERED": "1"})
    result = tagged_json(proc, "VALIDATED")
    return result["rows"], result["peak_kib"] * 1024


def on_disk(folder: Path) -> int:
    """Bytes the folder's files take on disk (a sparse file's holes take none)."""
    return sum(p.stat().st_blocks * 512 for p in folder.rglob("*") if p.is_file())


# ---------------------------------------------------------------- item 7: FAISS files of mcpower's format


def fields(data: bytes) -> dict[str, int]:
    """Offsets of the length fields of an index file mcpower wrote (IxM2 around IxFI or IHNf, IxMp around IHNs)."""
    out = {"ntotal": 8, "inner-ntotal": 45}
    pos = 74  # two headers of 37 bytes (fourcc and header)

    def skip(name: str, item: int) -> None:
        nonlocal pos
        out[name] = pos
        pos += 8 + item * struct.unpack_from("<Q", data, pos)[0]

    if data[37:41] in (b"IHNf", b"IHNs"):
        for name, item in [("probas", 8), ("per-level", 4), ("levels", 4), ("offsets", 8), ("neighbours", 4)]:
            skip(name, item)
        pos += 20 + 37  # entry point ... unused, then the storage's fourcc and header
    if data[37:41] == b"IHNs":
        pos += 28  # the quantiser's type, range statistic and its argument, dimension, code size
        skip("ranges", 4)
        skip("codes", 1)
    else:
        skip("codes", 4)
    skip("ids", 8)
    assert pos == len(data)
    return out


def forge(folder: Path, field: str, value: int) -> None:
    """Set one length field of the dataset's index file, and the manifest's checksum to match."""
    manifest = json.loads((folder / "manifest.json").read_text())
    path = folder / manifest["index"]
    data = bytearray(path.read_bytes())
    struct.pack_into("<Q", data, fields(bytes(data))[field], value)
    path.write_bytes(data)
    manifest["checksums"]["index"] = hashlib.sha256(data).hexdigest()
    (folder / "manifest.json").write_text(json.dumps(manifest))


@pytest.fixture(scope="module")
def local_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``flat``, ``hnsw`` and ``hnsw_sq``, small datasets of mcpower's format (fake embedder); ``hnsw``
    as versions were built before ``hnsw_sq``."""
    base = tmp_path_factory.mktemp("local")
    src = write_files(base / "src", {f"doc{i}.md": f"# Doc {i}\n\nsourdough starter {i} flour\n" for i in range(6)})
    ingest(src, base / "datasets", IngestOptions(dataset_id="flat"), embedder=FakeEmbedder())
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(build_module, "HNSW_THRESHOLD", 0)  # as a big dataset gets
        ingest(src, base / "datasets", IngestOptions(dataset_id="hnsw-sq"), embedder=FakeEmbedder())
        mp.setattr(build_module, "index_kind", lambda n, exact=False: "hnsw")
        ingest(src, base / "datasets", IngestOptions(dataset_id="hnsw"), embedder=FakeEmbedder())
    return base / "datasets"


def forged_copy(root: Path, kind: str, field: str, value: int) -> str:
    name = f"{kind}-{field}-forged"
    shutil.copytree(root / kind, root / name)
    manifest = json.loads((root / name / "manifest.json").read_text())
    manifest["id"] = name
    (root / name / "manifest.json").write_text(json.dumps(manifest))
    forge(root / name, field, value)
    return name


FLAT_FIELDS = ["ntotal", "inner-ntotal", "codes", "ids"]
HNSW_FIELDS = [*FLAT_FIELDS, "probas", "per-level", "levels", "offsets", "neighbours"]
SQ_FIELDS = [*HNSW_FIELDS, "ranges"]


@pytest.mark.parametrize(
    ("kind", "field"),
    [("flat", f) for f in FLAT_FIELDS] + [("hnsw", f) for f in HNSW_FIELDS] + [("hnsw-sq", f) for f in SQ_FIELDS],
)
@pytest.mark.parametrize("value", [FORGED, 2**63 - 1])
def test_a_forged_length_field_is_refused_before_faiss_reads_the_file(
    local_root: Path, tmp_path: Path, kind: str, field: str, value: int
) -> None:
    root = tmp_path / "datasets"
    root.mkdir()
    shutil.copytree(local_root / kind, root / kind)
    forge(root / kind, field, value)
    index = next((root / kind).glob("v-*/index.faiss"))

    with open(index, "rb") as f, pytest.raises(ValueError, match=r"entries|vectors of|bytes are left|cut short"):
        check_index_file(f.fileno())
    registry = Registry(root, embedder_factory=lambda model: FakeEmbedder())
    try:
        with pytest.raises(IndexMismatchError, match=r"index\.faiss is not a readable FAISS index \("):
            registry.store(kind)
    finally:
        registry.close()


def test_the_files_mcpower_writes_pass_the_check(local_root: Path) -> None:
    for name, kind in (("flat", "flat"), ("hnsw", "hnsw"), ("hnsw-sq", "hnsw_sq")):
        index = next((local_root / name).glob("v-*/index.faiss"))
        with open(index, "rb") as f:
            layout = check_index_file(f.fileno())
        assert (layout.kind, layout.dimension, layout.count) == (kind, FakeEmbedder.dimension, 6)


def test_an_empty_index_passes_the_check(tmp_path: Path) -> None:
    for kind in ("flat", "hnsw"):
        build_module.write_vectors(tmp_path / kind, np.zeros(0, np.int64), np.zeros((0, 8), np.float32), kind=kind)
        with open(tmp_path / kind, "rb") as f:
            assert check_index_file(f.fileno()).kind == kind


def test_an_index_of_another_kind_than_the_manifest_says_is_refused(local_root: Path, tmp_path: Path) -> None:
    root = tmp_path / "datasets"
    shutil.copytree(local_root / "flat", root / "flat")
    manifest = json.loads((root / "flat" / "manifest.json").read_text())
    manifest["vectorIndex"] = {**manifest["vectorIndex"], "kind": "hnsw", "efSearch": 64}
    (root / "flat" / "manifest.json").write_text(json.dumps(manifest))
    registry = Registry(root, embedder_factory=lambda model: FakeEmbedder())
    try:
        with pytest.raises(IndexMismatchError, match="a flat index, but the manifest says hnsw"):
            registry.store("flat")
    finally:
        registry.close()


def test_forged_length_fields_cost_no_memory(local_root: Path, tmp_path: Path) -> None:
    shutil.copytree(local_root, tmp_path / "base")
    root = tmp_path / "datasets"
    shutil.copytree(local_root, root)
    forged = [forged_copy(root, "flat", "codes", FORGED), forged_copy(root, "flat", "ids", FORGED)]
    forged.append(forged_copy(root, "hnsw", "neighbours", FORGED))

    _, baseline = validate(tmp_path / "base")
    rows, peak = validate(root, *forged)

    size = sum(on_disk(root / name) for name in forged)
    assert peak <= baseline + 10 * size + NOISE, (peak, baseline, size)  # before: 512 MiB to 1 GiB each
    assert [r["status"] for r in rows] == ["error"] * 3
    assert all("not a readable FAISS index (" in r["error"] for r in rows), rows


# ---------------------------------------------------------------- item 15: the original format


def sparse_original(folder: Path, records: list[dict[str, Any]], vectors: int, dimension: int = 384) -> None:
    """An original-format dataset whose docs.index holds ``vectors`` zero vectors (sparse: no disk)."""
    write_original(folder, records, np.eye(len(records), dimension, dtype=np.float32))
    index = folder / "index" / "docs.index"
    with open(index, "r+b") as f:
        f.write(FLAT_HEADER.pack(b"IxFI", dimension, vectors, 1 << 20, 1 << 20, True, 0, vectors * dimension))
        f.truncate(FLAT_HEADER.size)  # then zeros: a hole
        f.truncate(FLAT_HEADER.size + 4 * vectors * dimension)


def test_zero_vectors_of_500k_records_are_refused_in_bounded_memory(tmp_path: Path) -> None:
    n = 500_000
    healthy = [{"path": f"d{i % 3}.md", "content": f"chunk {i}"} for i in range(40)]
    write_original(tmp_path / "base" / "healthy", healthy, np.eye(40, 384, dtype=np.float32))
    record = {"path": "p", "title": "t", "content": ""}  # minimal (a title: not derived from the path 500k times)
    sparse_original(tmp_path / "datasets" / "zeros", [record] * 8, n)
    meta = {"model": "sentence-transformers/all-MiniLM-L6-v2", "documents": [record] * n}
    (tmp_path / "datasets" / "zeros" / "metadata.json").write_text(json.dumps(meta))

    _, baseline = validate(tmp_path / "base")
    rows, peak = validate(tmp_path / "datasets")

    assert rows[0]["status"] == "error" and "vector 0 has length 0, not 1" in rows[0]["error"], rows
    size = on_disk(tmp_path / "datasets")  # ~15 MB of metadata; the 768 MB of vectors are a hole
    assert peak <= baseline + 10 * size, (peak, baseline, size)  # before: 2.5 GB (copies of all the vectors)


def test_vectors_over_the_budget_are_refused_before_the_metadata_is_parsed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(original_files, "MAX_VECTOR_BYTES", 4 * 384 * 99)
    sparse_original(tmp_path / "big", [{"path": "p", "content": ""}] * 4, 100)
    (tmp_path / "big" / "metadata.json").write_text("not json: never parsed")

    with pytest.raises(IndexMismatchError, match=r"100 vectors of 384 floats take .* MiB, over the .* mcpower holds"):
        read_dataset(tmp_path / "big", read_manifest_json(tmp_path / "big" / "manifest.json"))


@pytest.mark.parametrize("values", ["[]", "{}", '"ab"', "0"])
def test_metadata_of_too_many_values_is_refused_before_it_is_parsed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, values: str
) -> None:
    monkeypatch.setattr(original_files, "MAX_METADATA_VALUES", 1000)
    write_original(tmp_path / "tiny", [{"path": "p", "content": "x"}], np.eye(1, 384, dtype=np.float32))
    padding = ",".join([values] * 1000)  # in a field mcpower ignores
    (tmp_path / "tiny" / "metadata.json").write_text(
        f'{{"documents": [{{"path": "p", "content": "x"}}], "x": [{padding}]}}'
    )

    with pytest.raises(IndexMismatchError, match="over the 1000-value limit for metadata files"):
        read_dataset(tmp_path / "tiny", read_manifest_json(tmp_path / "tiny" / "manifest.json"))
