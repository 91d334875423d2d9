"""The reference backend: sentence-transformers on PyTorch (slow to import, ~7 s here)."""

from __future__ import annotations

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
        try:
            from sentence_transformers import SentenceTransformer
            from transformers.utils import logging as transformers_logging

            # Its "Loading weights" bar is not ours to show.
            transformers_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
            self._model = SentenceTransformer(str(spec.path), device="cpu", local_files_only=True)
        except Exception as e:
            raise EmbeddingModelError(f"cannot load embedding model {spec.name!r}: {e}") from e

    def _embed_batch(self, texts: list[str]) -> NDArray[np.float32]:
        vecs = self._model.encode(texts, batch_size=len(texts), normalize_embeddings=True)
        return np.asarray(vecs, dtype=np.float32)
