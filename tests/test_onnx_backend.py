"""The ONNX backend: cache location and locking (fast), agreement with torch and torch-free loading (slow)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from mcpower.config import default_cache_dir
from mcpower.embedding import ModelSpec, resolve_model
from mcpower.embedding import onnx as onnx_backend
from mcpower.embedding.onnx import EXPORT_RECIPE, OnnxEmbedder, _cached, export_onnx
from mcpower.embedding.torch import TorchEmbedder
from mcpower.errors import EmbeddingModelError

REPO = Path(__file__).resolve().parents[1]
SENTENCES = [
    "Aspirin lowers the risk of a second heart attack.",
    "The mitochondria is the powerhouse of the cell.",
    "short",
    "Dendritic arbors adjust their geometry to compensate for variations in synaptic input. " * 6,
    "ÜNICÖDE, émojis 🙂 and numbers 3.14159 survive tokenisation.",
]


# --- fast -------------------------------------------------------------------------------------


def test_default_cache_dir_honours_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_cache_dir() == tmp_path / "mcpower"


def test_default_cache_dir_falls_back_to_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_cache_dir() == tmp_path / ".cache" / "mcpower"


def test_cached_builds_once_even_when_racing(tmp_path: Path) -> None:
    target, calls = tmp_path / "f" / "model.onnx", []

    def build(tmp: Path) -> None:
        calls.append(tmp)
        time.sleep(0.2)  # long enough for the other thread to reach the lock
        tmp.write_bytes(b"onnx")

    target.parent.mkdir()
    (target.parent / ".model.onnx.999999.tmp").write_bytes(b"left by a killed export")
    threads = [threading.Thread(target=_cached, args=(target, build)) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1
    assert target.read_bytes() == b"onnx"
    assert sorted(p.name for p in target.parent.iterdir()) == [".lock", "model.onnx"]  # no temp files left
    assert _cached(target, lambda tmp: pytest.fail("rebuilt a cached file")) == target


def test_a_new_recipe_replaces_exports_of_older_ones(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    spec = resolve_model()
    folder = tmp_path / "onnx" / spec.fingerprint
    folder.mkdir(parents=True)
    for stale in ("model.onnx", "model-int8.onnx", "model-r1.onnx", "model-r1-int8.onnx"):
        (folder / stale).write_bytes(b"older recipe")
    (folder / "notes.txt").write_text("not ours")
    monkeypatch.setattr(onnx_backend, "_export_fp32", lambda spec, tmp: tmp.write_bytes(b"onnx"))

    path = export_onnx(spec, tmp_path)

    assert path.read_bytes() == b"onnx"
    assert sorted(p.name for p in folder.iterdir()) == [".lock", f"model-r{EXPORT_RECIPE}.onnx", "notes.txt"]


def test_failed_build_leaves_nothing_and_raises(tmp_path: Path) -> None:
    target = tmp_path / "f" / "model.onnx"

    def build(tmp: Path) -> None:
        tmp.write_bytes(b"half")
        raise RuntimeError("boom\n" + "huge tensor dump " * 100)

    with pytest.raises(EmbeddingModelError, match=r"boom$"):
        _cached(target, build)
    assert [p.name for p in target.parent.iterdir()] == [".lock"]


def test_unwritable_cache_is_a_model_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(EmbeddingModelError, match="cannot write the ONNX cache"):
        _cached(tmp_path / "file" / "fp" / "model.onnx", lambda tmp: None)


# --- slow: the real packaged model ------------------------------------------------------------


@pytest.fixture(scope="module")
def spec() -> ModelSpec:
    return resolve_model()


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("onnx-cache")


@pytest.fixture(scope="module")
def torch_vectors(spec: ModelSpec) -> np.ndarray:
    return TorchEmbedder(spec).embed_documents(SENTENCES)


@pytest.mark.slow
def test_fp32_matches_torch(spec: ModelSpec, cache: Path, torch_vectors: np.ndarray) -> None:
    emb = OnnxEmbedder(spec, cache_dir=cache)
    assert (emb.backend, emb.dimension, emb.model_name) == ("onnx", 384, spec.name)
    done: list[int] = []
    vecs = emb.embed_documents(SENTENCES, progress=done.append)
    assert vecs.dtype == np.float32 and vecs.shape == (len(SENTENCES), 384)
    assert sum(done) == len(SENTENCES)
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    assert np.sum(vecs * torch_vectors, axis=1).min() > 0.9999
    # Padding in a batch must not change a text's vector.
    assert np.allclose(emb.embed_query(SENTENCES[2]), vecs[2], atol=1e-5)
    assert emb.embed_documents([]).shape == (0, 384)


@pytest.mark.slow
def test_int8_close_to_torch(spec: ModelSpec, cache: Path, torch_vectors: np.ndarray) -> None:
    emb = OnnxEmbedder(spec, quantized=True, cache_dir=cache)
    assert emb.backend == "onnx-int8"
    cos = np.sum(emb.embed_documents(SENTENCES) * torch_vectors, axis=1)
    assert cos.mean() > 0.98


@pytest.mark.slow
def test_export_is_cached(spec: ModelSpec, cache: Path) -> None:
    paths = [export_onnx(spec, cache), export_onnx(spec, cache, quantized=True)]
    assert [p.name for p in paths] == [f"model-r{EXPORT_RECIPE}.onnx", f"model-r{EXPORT_RECIPE}-int8.onnx"]
    assert all(p.parent == cache / "onnx" / spec.fingerprint for p in paths)
    before = [p.stat().st_mtime_ns for p in paths]
    assert [export_onnx(spec, cache), export_onnx(spec, cache, quantized=True)] == paths
    assert [p.stat().st_mtime_ns for p in paths] == before


@pytest.mark.slow
@pytest.mark.parametrize("quantized", [False, True])
def test_cached_export_loads_without_torch(spec: ModelSpec, cache: Path, quantized: bool) -> None:
    export_onnx(spec, cache, quantized=quantized)
    code = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "from mcpower.embedding import resolve_model\n"
        "from mcpower.embedding.onnx import OnnxEmbedder\n"
        f"emb = OnnxEmbedder(resolve_model(), quantized={quantized}, cache_dir=Path({str(cache)!r}))\n"
        "vec = emb.embed_query('does aspirin prevent heart attacks?')\n"
        "print(json.dumps({'dim': len(vec), 'torch': 'torch' in sys.modules}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == {"dim": 384, "torch": False}
