"""The reference backend: sentence-transformers on PyTorch (slow to import, ~7 s here).

A model folder's ``modules.json`` names the classes sentence-transformers builds the model from;
only its own (``sentence_transformers.*``) are accepted, so no code from a model folder is ever
imported (sentence-transformers >= 6 refuses too, with ``trust_remote_code=False``).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import numpy as np

from mcpower.embedding.base import BaseEmbedder
from mcpower.embedding.model import ModelSpec
from mcpower.errors import EmbeddingModelError

if TYPE_CHECKING:
    from numpy.typing import NDArray


class TorchEmbedder(BaseEmbedder):
    """sentence-transformers on PyTorch."""

    backend = "torch"

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__(spec)
        _check_modules(spec)
        try:
            from sentence_transformers import SentenceTransformer
            from transformers.utils import logging as transformers_logging

            # Its "Loading weights" bar is not ours to show.
            transformers_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
            self._model = SentenceTransformer(
                str(spec.path), device="cpu", local_files_only=True, trust_remote_code=False
            )
        except Exception as e:
            raise EmbeddingModelError(f"cannot load embedding model {spec.name!r}: {e}") from e

    def _embed_batch(self, texts: list[str]) -> NDArray[np.float32]:
        vecs = self._model.encode(texts, batch_size=len(texts), normalize_embeddings=True)
        return np.asarray(vecs, dtype=np.float32)


def _check_modules(spec: ModelSpec) -> None:
    """Refuse a model whose modules.json would have sentence-transformers import other code."""
    file = spec.path / "modules.json"
    try:
        modules = json.loads(file.read_text(encoding="utf-8")) if file.is_file() else []
    except (OSError, ValueError) as e:
        raise EmbeddingModelError(f"model {spec.name!r} has an unreadable modules.json ({e})") from e
    kinds = [m.get("type") if isinstance(m, dict) else m for m in modules] if isinstance(modules, list) else [modules]
    foreign = [str(k)[:80] for k in kinds if not (isinstance(k, str) and k.startswith("sentence_transformers."))]
    if foreign:
        raise EmbeddingModelError(
            f"model {spec.name!r} asks to load code from outside sentence-transformers ({', '.join(foreign)}); "
            "mcpower never imports code from a model folder"
        )
