"""Corruption runs in the manner of SQLite's: damage each file of a real dataset many ways, reopen it each time.

For index.faiss, meta.sqlite and manifest.json of a small dataset (fake embedder), 60 seeded
mutations each — truncations at many offsets and random bit flips — and after every one the
dataset is opened again. Opening must fail cleanly with a DatasetUnavailableError, or (only for a
manifest whose damage left every field that locates and verifies the files intact) succeed and
give exactly the results it gave before. Never another exception, never different results.

The checksum is what keeps FAISS from ever parsing damaged bytes, so a second run forges the
checksum to match each damaged index.faiss / meta.sqlite and opens it in a child process: FAISS
and SQLite must then refuse it or load it, never crash the process. Opening cannot read every page
of the database, so damage it did not reach may be found by a search instead: that must be the
same clean error (IndexMismatchError, naming the dataset), never a raw exception.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import FakeEmbedder
from server_fixtures import build_datasets, subprocess_env

from mcpower.errors import DatasetNotFoundError, DatasetUnavailableError
from mcpower.manifest import read_manifest
from mcpower.registry import Registry
from mcpower.search import search

MUTATIONS = 60  # per file: half truncations, half bit flips
DATASET = "handbook"
QUERIES = [("marmalade session", "hybrid"), ("zephyrine daemon", "keyword"), ("reboot the machine", "semantic")]


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_datasets(tmp_path_factory.mktemp("corruption"))


@pytest.fixture
def root(template: Path, tmp_path: Path) -> Path:
    """A private datasets root holding only the dataset under test."""
    shutil.copytree(template / DATASET, tmp_path / "datasets" / DATASET)
    return tmp_path / "datasets"


def mutations(data: bytes, seed: str) -> Iterator[tuple[str, bytes]]:
    """``MUTATIONS`` damaged copies of ``data``: truncations spread over the file, then bit flips."""
    rng = random.Random(seed)
    n = len(data)
    cuts = sorted({0, 1, 8, 64, n // 2, n - 1, *(rng.randrange(n) for _ in range(MUTATIONS))})
    cuts = [c for c in cuts if c < n][: MUTATIONS // 2]
    for cut in cuts:
        yield f"truncate at {cut}/{n}", data[:cut]
    for _ in range(MUTATIONS - len(cuts)):
        out = bytearray(data)
        flips = rng.choice([1, 1, 2, 4, 16])
        where = [rng.randrange(n) for _ in range(flips)]
        for i in where:
            out[i] ^= 1 << rng.randrange(8)
        yield f"flip {flips} bit(s) at {sorted(where)[:4]}", bytes(out)


def outcome(root: Path) -> tuple[str, Any]:
    """("error", the error) or ("ok", every query's results as (result_id, score) lists)."""
    registry = Registry(root, embedder_factory=lambda model: FakeEmbedder())
    try:
        registry.store(DATASET)
        results = [
            [(r.result_id, r.score) for r in search(registry, q, dataset=DATASET, top_k=10, mode=m).results]
            for q, m in QUERIES
        ]
        return "ok", results
    except (DatasetUnavailableError, DatasetNotFoundError) as e:  # a flipped id: listed under another id
        return "error", e
    finally:
        registry.close()


def dataset_file(root: Path, name: str) -> Path:
    folder = root / DATASET
    if name == "manifest.json":
        return folder / name
    return (
        folder
        / json.loads((folder / "manifest.json").read_text(encoding="utf-8"))[
            "index" if name == "index.faiss" else "metadata"
        ]
    )


# Fields that locate and verify the files, or decide what a search reads: a manifest whose damage
# left all of them as they were may load (the rest is description: name, dates, model name ...).
LOAD_BEARING = ("id", "index", "metadata", "checksums", "counts", "embedding.dimension", "vector_index")


def load_bearing(manifest: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in LOAD_BEARING:
        value = manifest
        for part in key.split("."):
            value = getattr(value, part)
        out[key] = value
    return out


@pytest.mark.parametrize("name", ["index.faiss", "meta.sqlite", "manifest.json"])
def test_damaged_file_fails_cleanly(root: Path, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import faiss

    kind, baseline = outcome(root)
    assert kind == "ok" and all(baseline), baseline
    original_manifest = read_manifest(root / DATASET / "manifest.json")
    path = dataset_file(root, name)
    original = path.read_bytes()

    parsed: list[int] = []  # FAISS must never see bytes whose checksum did not match
    real_deserialize = faiss.deserialize_index
    monkeypatch.setattr(faiss, "deserialize_index", lambda buf: parsed.append(1) or real_deserialize(buf))

    tally: dict[str, int] = {}
    for label, damaged in mutations(original, name):
        assert damaged != original
        path.write_bytes(damaged)
        parsed.clear()
        kind, got = outcome(root)
        if name == "manifest.json" and kind == "ok":
            # Only possible when the damage missed everything that matters, and then nothing changed.
            assert load_bearing(read_manifest(path)) == load_bearing(original_manifest), label
            assert got == baseline, label
        else:
            assert kind == "error", f"{name}, {label}: opened anyway"
            assert isinstance(got, DatasetUnavailableError | DatasetNotFoundError), (label, got)
            if isinstance(got, DatasetNotFoundError):  # only the manifest's own id can move a dataset
                assert name == "manifest.json" and read_manifest(path).id != DATASET, label
            if name != "manifest.json":
                assert "checksum" in got.message, (label, got.message)
                assert parsed == [], label  # both checksums are verified before FAISS parses anything
        tally[kind if kind == "ok" else got.code] = tally.get(kind if kind == "ok" else got.code, 0) + 1
    path.write_bytes(original)
    assert outcome(root) == ("ok", baseline)
    assert sum(tally.values()) == MUTATIONS
    if name != "manifest.json":
        assert set(tally) == {"INDEX_MISMATCH"}, tally


# A child process that opens the dataset after each forged mutation: a crash in FAISS or SQLite
# kills the child, not pytest, and the last "try" line names the mutation that did it.
CHILD = r"""
import hashlib, json, sys
from pathlib import Path

sys.path[:0] = [sys.argv[3]]
import numpy as np

from mcpower.errors import McpowerError
from mcpower.manifest import read_manifest
from mcpower.store.local.store import open_store

folder, key = Path(sys.argv[1]), sys.argv[2]
cases = json.loads(sys.stdin.read())
manifest_path = folder / "manifest.json"
text = manifest_path.read_text()
target = folder / json.loads(text)[key]
query = np.zeros(json.loads(text)["embedding"]["dimension"], dtype=np.float32)
query[0] = 1.0
for n, hex_bytes in enumerate(cases):
    data = bytes.fromhex(hex_bytes)
    target.write_bytes(data)
    m = json.loads(text)
    m["checksums"][key] = hashlib.sha256(data).hexdigest()
    manifest_path.write_text(json.dumps(m))
    print("try", n, flush=True)
    try:
        store = open_store(folder, read_manifest(manifest_path))
    except McpowerError as e:
        print("error", n, e.code, flush=True)
        continue
    except Exception as e:
        print("other", n, type(e).__name__, str(e)[:200].replace("\n", " "), flush=True)
        continue
    try:
        hits = store.semantic(query, 10) + store.keyword("zephyrine marmalade").top(10)
        rows = store.chunks([i for i, _ in hits])  # ids FAISS made up are simply absent here
        finite = all(np.isfinite(s) for _, s in hits)
        print("ok", n, f"hits={len(hits)}", f"rows={len(rows)}", f"finite={finite}", flush=True)
    except McpowerError as e:  # damage past what opening reads, found by a search: the dataset's own error
        print("error", n, e.code, flush=True)
    except Exception as e:
        print("search-error", n, type(e).__name__, str(e)[:200].replace("\n", " "), flush=True)
    finally:
        store.close()
print("done", flush=True)
"""


def run_forged(root: Path, name: str) -> list[list[str]]:
    key = "index" if name == "index.faiss" else "metadata"
    path = dataset_file(root, name)
    cases = [damaged.hex() for _, damaged in mutations(path.read_bytes(), "forged " + name)]
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(root / DATASET), key, str(Path(__file__).resolve().parents[1])],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        timeout=120,
        env=subprocess_env(),
        check=False,
    )
    lines = [line.split() for line in done.stdout.splitlines()]
    last = next((line for line in reversed(lines) if line[0] == "try"), None)
    assert done.returncode == 0, f"child died ({done.returncode}) at mutation {last}: {done.stderr[-2000:]}"
    assert lines and lines[-1] == ["done"], done.stderr[-2000:]
    return [line for line in lines if line[0] not in ("try", "done")]


@pytest.mark.parametrize("name", ["index.faiss", "meta.sqlite"])
def test_forged_checksum_never_crashes(root: Path, name: str) -> None:
    results = run_forged(root, name)
    assert len(results) == MUTATIONS
    kinds = {r[0] for r in results}
    assert kinds <= {"error", "ok"}, [r for r in results if r[0] not in ("error", "ok")]
    assert all(r[2] == "INDEX_MISMATCH" for r in results if r[0] == "error"), results
    assert all(r[4] == "finite=True" for r in results if r[0] == "ok"), results  # non-finite scores are dropped
