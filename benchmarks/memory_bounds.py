"""Peak memory of `mcpower validate` on forged dataset files, against the same run's healthy baseline.

Two kinds of input (security review, issue 18 items 7 and 15):

* a dataset of mcpower's format whose ``index.faiss`` has one length field forged (manifest
  checksum updated to match): the float codes, the id map, the vector count, HNSW's neighbours;
* datasets of the original format: 500,000 minimal records and a sparse ``docs.index`` of zero
  vectors (768 MB apparent, nothing on disk); one record whose metadata.json also holds 17 million
  empty lists (51 MB); and a healthy one of 100,000 records (the copies a good load makes).

Each ``validate`` runs in a fresh interpreter that reports its own peak RSS (VmHWM) at exit; the
baseline is the same command on a small healthy dataset of the same format. Printed: the peak, the
peak above the baseline, that excess over the bytes on disk, and the verdict's first words.

    .venv/bin/python benchmarks/memory_bounds.py [--python /path/to/other/venv/bin/python]

``--python`` runs the children with another interpreter (another checkout's mcpower), for a
before/after comparison on the same inputs.
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests")]

from conftest import FakeEmbedder, write_files  # noqa: E402

from mcpower.ingestion import IngestOptions, ingest  # noqa: E402

# Runs `mcpower <args>` and prints the process's peak RSS (KiB) as stderr's last line. VmHWM, not
# ru_maxrss: Linux carries ru_maxrss over fork and exec from the parent.
CHILD = """
import runpy, sys
sys.argv = ["mcpower", *sys.argv[1:]]
try:
    runpy.run_module("mcpower", run_name="__main__")
except SystemExit:
    pass
finally:
    with open("/proc/self/status") as f:
        print(next(line.split()[1] for line in f if line.startswith("VmHWM:")), file=sys.stderr)
"""

ORIGINAL_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
DIM = 384
HEADER = struct.Struct("<4siqqq?iQ")  # an IndexFlatIP file: fourcc, d, ntotal, 2 unused, trained, metric, floats
CODES_AT = 74  # in mcpower's IxM2+IxFI file: two 37-byte headers, then the float count


def peak_kib(python: str, args: list[str]) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCPOWER_")}
    env["MCPOWER_ALLOWED_MODELS"] = "fake-hash-embedder"
    done = subprocess.run(  # not run here: `python -c` would import mcpower from the working folder
        [python, "-c", CHILD, *args], capture_output=True, text=True, env=env, timeout=600, cwd=tempfile.gettempdir()
    )
    lines = done.stderr.strip().splitlines()
    return int(lines[-1]), done.stdout


def local_roots(base: Path) -> tuple[Path, dict[str, Path]]:
    """A root with the healthy ``flat`` and ``hnsw`` (the baseline), and one root per forged copy."""
    from mcpower.store.local import build

    healthy = base / "local"
    write_files(base / "src", {f"doc{i}.md": f"# Doc {i}\n\nsourdough starter {i}\n" for i in range(6)})
    ingest(base / "src", healthy, IngestOptions(dataset_id="flat"), embedder=FakeEmbedder())
    threshold, build.HNSW_THRESHOLD = build.HNSW_THRESHOLD, 0  # as a big dataset gets
    try:
        ingest(base / "src", healthy, IngestOptions(dataset_id="hnsw"), embedder=FakeEmbedder())
    finally:
        build.HNSW_THRESHOLD = threshold
    flat = next((healthy / "flat").glob("v-*/index.faiss")).read_bytes()
    hnsw = next((healthy / "hnsw").glob("v-*/index.faiss")).read_bytes()
    n = struct.unpack_from("<q", flat, 8)[0]
    at = 74  # after two headers of 37 bytes: HNSW's probabilities, neighbours per level, levels, offsets
    for item in (8, 4, 4, 8):
        at += 8 + item * struct.unpack_from("<Q", hnsw, at)[0]
    forged = {
        "codes-length": ("flat", flat, CODES_AT, 1 << 28),  # 2^28 floats: 1 GiB
        "ids-length": ("flat", flat, len(flat) - 8 * n - 8, 1 << 27),  # 2^27 ids: 1 GiB
        "ntotal": ("flat", flat, 8, 1 << 40),
        "hnsw-neighbours-length": ("hnsw", hnsw, at, 1 << 28),  # 2^28 int32: 1 GiB
    }
    roots = {}
    for name, (kind, index, offset, value) in forged.items():
        roots[name] = base / f"local-{name}"
        _copy_dataset(
            healthy / kind, roots[name] / name, index[:offset] + struct.pack("<Q", value) + index[offset + 8 :]
        )
    return healthy, roots


def _copy_dataset(src: Path, dst: Path, index: bytes) -> None:
    import hashlib
    import shutil

    shutil.copytree(src, dst)
    m = json.loads((dst / "manifest.json").read_text())
    m["id"] = dst.name
    (dst / m["index"]).write_bytes(index)
    m["checksums"]["index"] = hashlib.sha256(index).hexdigest()
    (dst / "manifest.json").write_text(json.dumps(m))


def original_dataset(folder: Path, records: list[dict[str, Any]], ntotal: int, vectors: np.ndarray | None) -> None:
    """An original-format dataset; ``vectors`` None: a sparse file of zeros of ``ntotal`` vectors."""
    (folder / "index").mkdir(parents=True)
    manifest = {"id": folder.name, "name": folder.name, "description": "memory bounds", "index": "index"}
    (folder / "manifest.json").write_text(json.dumps({**manifest, "metadata": "metadata.json", "defaultTopK": 5}))
    (folder / "metadata.json").write_text(json.dumps({"model": ORIGINAL_MODEL, "documents": records}))
    with open(folder / "index" / "docs.index", "wb") as f:
        f.write(HEADER.pack(b"IxFI", DIM, ntotal, 1 << 20, 1 << 20, True, 0, ntotal * DIM))
        if vectors is None:
            f.truncate(HEADER.size + 4 * ntotal * DIM)  # sparse: no disk used
        else:
            f.write(np.ascontiguousarray(vectors, dtype="<f4").tobytes())


def unit_vectors(n: int) -> np.ndarray:
    v = np.random.default_rng(0).standard_normal((n, DIM)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return v


def original_roots(base: Path, n: int) -> tuple[Path, dict[str, Path]]:
    """A root with a small healthy dataset (the baseline), and one root per case."""
    healthy = base / "original"
    original_dataset(
        healthy / "healthy",
        [{"path": f"d{i % 5}.md", "content": f"chunk {i}"} for i in range(50)],
        50,
        unit_vectors(50),
    )
    record = {"path": "p", "title": "t", "content": ""}
    roots = {name: base / f"original-{name}" for name in ("zero-vectors", "tiny-json-values", "healthy-100k")}
    original_dataset(roots["zero-vectors"] / "zero-vectors", [record] * n, n, None)
    original_dataset(roots["tiny-json-values"] / "tiny-json-values", [record], 1, unit_vectors(1))
    with open(roots["tiny-json-values"] / "tiny-json-values" / "metadata.json", "w") as f:  # 17M empty lists
        f.write(
            json.dumps({"model": ORIGINAL_MODEL, "documents": [record]})[:-1] + ', "x": [' + "[]," * 17_000_000 + "[]]}"
        )
    many = [{"path": f"doc{i // 4}.md", "title": "t", "content": f"chunk {i}"} for i in range(100_000)]
    original_dataset(roots["healthy-100k"] / "healthy-100k", many, len(many), unit_vectors(len(many)))
    return healthy, roots


def on_disk(folder: Path) -> int:
    """Bytes the dataset's files take on disk (sparse regions excluded)."""
    return sum(p.stat().st_blocks * 512 for p in folder.rglob("*") if p.is_file())


def report(python: str, baseline: Path, roots: dict[str, Path]) -> None:
    base_kib, _ = peak_kib(python, ["validate", "--datasets-dir", str(baseline)])
    print(
        f"  baseline (validate of {', '.join(sorted(p.name for p in baseline.iterdir()))}): peak {base_kib / 1024:,.0f} MB"
    )
    for case, root in roots.items():
        kib, out = peak_kib(python, ["validate", "--json", "--datasets-dir", str(root)])
        rows = json.loads(out)["datasets"] if out.strip().startswith("{") else []
        verdict = (rows[0].get("error") or rows[0]["status"]) if rows else out.strip()[:80]
        size = on_disk(root)
        extra = max(kib - base_kib, 0) * 1024
        print(
            f"  {case}: {size / 1e6:,.2f} MB on disk, peak {kib / 1024:,.0f} MB, "
            f"{extra / 2**20:,.0f} MB over the baseline = {extra / size:,.1f}x the bytes on disk\n"
            f"      -> {verdict[:140]}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--python", default=sys.executable, help="the interpreter whose mcpower runs validate")
    parser.add_argument("--records", type=int, default=500_000, help="records of the zero-vectors dataset")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mcpower-membounds-") as tmp:
        base = Path(tmp)
        print(f"mcpower of {args.python}")
        print("item 7: index.faiss with a forged length (checksum updated)")
        report(args.python, *local_roots(base))
        print(
            f"item 15: original format ({args.records:,} minimal records of zero vectors; 17M JSON values; 100k healthy)"
        )
        report(args.python, *original_roots(base, args.records))


if __name__ == "__main__":
    main()
