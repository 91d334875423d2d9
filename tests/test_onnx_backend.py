"""The ONNX backend: cache location and locking (fast), agreement with torch and torch-free loading (slow)."""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from mcpower import embedding
from mcpower.checksums import FileHashes
from mcpower.config import default_cache_dir
from mcpower.embedding import ModelSpec, resolve_model
from mcpower.embedding import export as export_module
from mcpower.embedding.export import EXPORT_RECIPE, _cached, export_onnx
from mcpower.embedding.onnx import OnnxEmbedder
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


def write_export(target: Path, data: bytes) -> None:
    """A cached export as another process would leave it: the file and its checksum sidecar."""
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    target.write_bytes(data)
    target.with_name(target.name + ".sha256").write_text(hashlib.sha256(data).hexdigest())


def test_cached_builds_once_even_when_racing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "onnx" / "fp" / "model.onnx"
    target.parent.mkdir(parents=True, mode=0o700)
    (tmp_path / "onnx").chmod(0o700)
    waiting = threading.Event()
    real_flock = export_module.fcntl.flock

    def flock(fd: int, op: int) -> None:
        waiting.set()  # the other process is now queued on the lock we hold
        real_flock(fd, op)

    monkeypatch.setattr(export_module.fcntl, "flock", flock)
    lock = os.open(target.parent / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    real_flock(lock, fcntl.LOCK_EX)
    racer = threading.Thread(target=_cached, args=(target, lambda tmp: pytest.fail("built twice"), FileHashes(None)))
    racer.start()
    waiting.wait(timeout=60)
    write_export(target, b"onnx")  # "we" finish the export while holding the lock
    os.close(lock)
    racer.join(timeout=60)

    assert not racer.is_alive()
    assert target.read_bytes() == b"onnx"


def test_a_killed_exports_temp_file_is_removed(tmp_path: Path) -> None:
    target = tmp_path / "onnx" / "fp" / "model.onnx"
    target.parent.mkdir(parents=True, mode=0o700)
    (target.parent / ".model.onnx.0123456789abcdef.tmp").write_bytes(b"left by a killed export")

    _cached(target, lambda tmp: tmp.write_bytes(b"onnx"), FileHashes(None))

    assert sorted(p.name for p in target.parent.iterdir()) == [".lock", "model.onnx", "model.onnx.sha256"]
    assert oct(target.parent.stat().st_mode & 0o777) == "0o700"


@pytest.mark.parametrize("damage", ["bytes", "symlink", "sidecar"])
def test_a_tampered_export_is_rebuilt_not_loaded(tmp_path: Path, damage: str) -> None:
    target = tmp_path / "onnx" / "fp" / "model.onnx"
    (tmp_path / "onnx").mkdir(mode=0o700)
    write_export(target, b"genuine")
    if damage == "bytes":
        target.write_bytes(b"evil!!!")  # same size, other bytes
    elif damage == "symlink":
        (tmp_path / "elsewhere.onnx").write_bytes(b"genuine")
        target.unlink()
        target.symlink_to(tmp_path / "elsewhere.onnx")
    else:
        target.with_name("model.onnx.sha256").write_text("0" * 64)
    built: list[Path] = []

    path = _cached(target, lambda tmp: built.append(tmp) or tmp.write_bytes(b"rebuilt"), FileHashes(tmp_path / "cache"))

    assert len(built) == 1 and not path.is_symlink() and path.read_bytes() == b"rebuilt"


def test_a_new_recipe_replaces_exports_of_older_ones(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    spec = resolve_model()
    folder = tmp_path / "onnx" / spec.fingerprint
    folder.mkdir(parents=True, mode=0o700)
    (tmp_path / "onnx").chmod(0o700)
    stale_names = ("model.onnx", "model-int8.onnx", "model-r1.onnx", "model-r1-int8.onnx", "model-r1.onnx.sha256")
    for stale in (*stale_names, "model-r1-fused.onnx"):
        (folder / stale).write_bytes(b"older recipe")
    (folder / "notes.txt").write_text("not ours")
    monkeypatch.setattr(export_module, "_export_fp32", lambda spec, tmp: tmp.write_bytes(b"onnx"))

    path = export_onnx(spec, tmp_path)

    assert path.read_bytes() == b"onnx"
    assert sorted(p.name for p in folder.iterdir()) == [
        ".lock",
        f"model-r{EXPORT_RECIPE}-fused.onnx",  # not an ONNX graph: kept as it is (test_fusion.py)
        f"model-r{EXPORT_RECIPE}-fused.onnx.sha256",
        "notes.txt",
    ]


def test_the_plain_export_is_not_kept_beside_the_graphs_made_from_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    spec = resolve_model()
    folder = tmp_path / "onnx" / spec.fingerprint
    exports: list[Path] = []

    def export(spec: ModelSpec, tmp: Path) -> None:
        exports.append(tmp)
        tmp.write_bytes(b"plain")

    monkeypatch.setattr(export_module, "_export_fp32", export)
    monkeypatch.setattr(export_module, "fuse", lambda plain, out, spec: out.write_bytes(plain.read_bytes() + b"+fused"))
    monkeypatch.setattr(export_module, "_quantize", lambda plain, out: out.write_bytes(plain.read_bytes() + b"+int8"))

    plain = export_onnx(spec, tmp_path, fused=False)  # a benchmark's: kept until a fused graph is made
    (folder / f".{plain.name}.0123456789abcdef.tmp").write_bytes(b"a killed export's")
    fused = export_onnx(spec, tmp_path)
    assert fused.read_bytes() == b"plain+fused" and len(exports) == 1  # made from the kept one
    assert not plain.exists() and not plain.with_name(plain.name + ".sha256").exists()

    int8 = export_onnx(spec, tmp_path, quantized=True)  # made from a fresh export, not kept either
    assert int8.read_bytes() == b"plain+int8" and len(exports) == 2
    assert exports[1].name.startswith(f".{plain.name}.") and exports[1].name.endswith(".tmp")
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [".lock", fused.name, fused.name + ".sha256", int8.name, int8.name + ".sha256"]
    )
    assert [export_onnx(spec, tmp_path), export_onnx(spec, tmp_path, quantized=True)] == [fused, int8]
    assert len(exports) == 2


def test_failed_build_leaves_nothing_and_raises(tmp_path: Path) -> None:
    target = tmp_path / "onnx" / "f" / "model.onnx"

    def build(tmp: Path) -> None:
        tmp.write_bytes(b"half")
        raise RuntimeError("boom\n" + "huge tensor dump " * 100)

    with pytest.raises(EmbeddingModelError, match=r"boom$"):
        _cached(target, build, FileHashes(None))
    assert [p.name for p in target.parent.iterdir()] == [".lock"]


@pytest.mark.parametrize("problem", ["a file", "writable by others"])
def test_an_unusable_cache_folder_is_a_model_error_without_its_path(tmp_path: Path, problem: str) -> None:
    if problem == "a file":
        (tmp_path / "onnx").write_text("not a folder")
    else:
        (tmp_path / "onnx").mkdir(mode=0o777)
        (tmp_path / "onnx").chmod(0o777)

    with pytest.raises(EmbeddingModelError, match="MCPOWER_CACHE_DIR") as info:
        _cached(tmp_path / "onnx" / "fp" / "model.onnx", lambda tmp: None, FileHashes(None))
    assert str(tmp_path) not in info.value.message


def test_the_fingerprint_is_the_weights_content_not_their_size(tmp_path: Path) -> None:
    packaged = resolve_model().path
    folders = []
    for name, weights in (("a", b"\x01" * 64), ("b", b"\x02" * 64)):
        folder = tmp_path / name
        folder.mkdir()
        for f in ("config.json", "tokenizer.json", "modules.json", "sentence_bert_config.json"):
            (folder / f).write_bytes((packaged / f).read_bytes())
        (folder / "model.safetensors").write_bytes(weights)
        folders.append(folder)

    a, b = (resolve_model(str(f)) for f in folders)

    assert a.fingerprint != b.fingerprint
    (folders[1] / "model.safetensors").write_bytes(b"\x01" * 64)  # now the same bytes as a's
    assert resolve_model(str(folders[1])).fingerprint == a.fingerprint


def test_a_model_folder_that_asks_for_foreign_code_is_refused(tmp_path: Path) -> None:
    packaged = resolve_model().path
    folder = tmp_path / "evil-model"
    folder.mkdir()
    for f in ("config.json", "tokenizer.json", "sentence_bert_config.json"):
        (folder / f).write_bytes((packaged / f).read_bytes())
    (folder / "modules.json").write_text(json.dumps([{"idx": 0, "name": "0", "path": "", "type": "evil.Module"}]))
    (folder / "evil.py").write_text(f"open({str(tmp_path / 'pwned')!r}, 'w').write('ran')\n")

    with pytest.raises(EmbeddingModelError, match="never imports code from a model folder"):
        TorchEmbedder(resolve_model(str(folder)))
    assert not (tmp_path / "pwned").exists()


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
    assert [p.name for p in paths] == [f"model-r{EXPORT_RECIPE}-fused.onnx", f"model-r{EXPORT_RECIPE}-int8.onnx"]
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


def test_the_first_export_says_what_is_happening(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The export takes 10-30 s the first time: it is announced once, not run in silence."""
    from mcpower.embedding import export, resolve_model

    monkeypatch.setattr(export, "_export_fp32", lambda spec, out: out.write_bytes(b"onnx"))
    spec = resolve_model(hashes=FileHashes(tmp_path / "cache"))
    with caplog.at_level(logging.INFO, logger="mcpower"):
        first = export.export_onnx(spec, tmp_path / "cache")
        again = export.export_onnx(spec, tmp_path / "cache")
    said = [r for r in caplog.records if "exporting the embedding model" in r.getMessage()]
    assert first == again and len(said) == 1
    # information, not a warning; the CLI shows it anyway (a notice: tests/test_cli_feedback.py)
    assert said[0].levelno == logging.INFO and said[0].notice is True  # type: ignore[attr-defined]
    assert "once" in said[0].getMessage() and "later runs reuse it" in said[0].getMessage()


# --- the query backend: int8 for the packaged model (issue 30) ------------------------------------


def test_queries_are_embedded_by_the_query_backend_with_fallbacks(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    asked: list[tuple[str, str]] = []

    def load(model: str, backend: str = "onnx", cache_dir: Path | None = None) -> object:
        asked.append((model, backend))
        if backend in fail:
            raise EmbeddingModelError(f"no {backend} here")
        return object()

    monkeypatch.setattr(embedding, "load_embedder", load)
    fail: set[str] = set()
    embedding.load_query_embedder("all-MiniLM-L6-v2", tmp_path)
    embedding.load_query_embedder("/models/mine", tmp_path, allowed=["/models/mine"])
    assert asked == [
        ("all-MiniLM-L6-v2", embedding.QUERY_BACKEND),
        ("/models/mine", embedding.QUERY_BACKEND_OTHER_MODELS),
    ]

    asked.clear()
    fail = {"onnx-int8", "onnx"}  # no export can be made (no onnx package): same weights, slower
    embedding.load_query_embedder("all-MiniLM-L6-v2", tmp_path)
    assert [b for _, b in asked][-1] == "torch"


@pytest.mark.slow
def test_int8_query_vectors_search_fp32_documents_correctly(tmp_path: Path) -> None:
    """A dataset embedded in fp32, searched with the int8 model's query vectors and with fp32's
    (what search does): the same documents, in the same order, with cosines within 0.02."""
    from mcpower.ingestion import IngestOptions, ingest
    from mcpower.registry import Registry
    from mcpower.search import search

    docs = tmp_path / "docs"
    docs.mkdir()
    for i, text in enumerate(SENTENCES):
        (docs / f"s{i}.md").write_text(f"# Note {i}\n\n{text}\n")
    cache = tmp_path / "cache"
    fp32 = embedding.load_embedder(backend="onnx", cache_dir=cache)
    ingest(docs, tmp_path / "datasets", IngestOptions(dataset_id="notes"), embedder=fp32)
    int8 = embedding.load_embedder(backend="onnx-int8", cache_dir=cache)
    with_int8 = Registry(tmp_path / "datasets", cache_dir=cache, embedder_factory=lambda model: int8)
    with_fp32 = Registry(tmp_path / "datasets", cache_dir=cache)
    try:
        assert with_int8.embedder_for(with_int8.store("notes").info).backend == "onnx-int8"
        for query in ["does aspirin prevent heart attacks?", "how do I install the package", SENTENCES[1][:40]]:
            a = search(with_int8, query, "notes", 5, "semantic")
            b = search(with_fp32, query, "notes", 5, "semantic")
            assert [r.path for r in a.results] == [r.path for r in b.results]
            assert [r.score for r in a.results] == pytest.approx([r.score for r in b.results], abs=0.02)
    finally:
        with_int8.close()
        with_fp32.close()
