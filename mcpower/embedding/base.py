"""What every backend shares: counting word pieces with the model's own tokenizer, and embedding
documents in small batches of similar length."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mcpower.embedding.model import ModelSpec
from mcpower.errors import EmbeddingModelError

if TYPE_CHECKING:
    from numpy.typing import NDArray

ProgressFn = Callable[[int], None]

# Batch size for document encoding. Small batches of length-sorted chunks keep each layer's
# activations in the CPU caches: chunks/s at 2 / 4 / 8 / 16 / 32 on 566 SciFact chunks, 2 CPUs:
# onnx-int8 91 / 94 / 92 / 84 / 77, onnx 47 / 49 / 47 / 44 / 42, torch 41 / 45 / 46 / 46 / 40.
BATCH_SIZE = 8


@dataclass(frozen=True)
class TokenizerCounter:
    """Counts word pieces (without special tokens) with a model's fast tokenizer (the `tokenizers`
    package, no torch), read when first needed: ingest counts, a query embedder never does (reading
    it took 0.1 s of every cold `mcpower search`).

    Pickled as its file's path, so the reader process (chunking/worker.py) chunks a document with
    the very counts this process would; each process reads a tokenizer file once.
    """

    tokenizer_file: Path

    def __call__(self, texts: Sequence[str]) -> list[int]:
        # The fast variant skips character offsets, which counting does not need (-16% time).
        encs = _tokenizer(self.tokenizer_file).encode_batch_fast(list(texts), add_special_tokens=False)
        return [len(e.ids) for e in encs]


@functools.lru_cache(maxsize=4)
def _tokenizer(path: Path) -> Any:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(path))
    tok.no_truncation()
    tok.no_padding()
    return tok


def tokenizer_padding(tok: Any, model: Path) -> dict[str, Any]:
    """tokenizer.json's padding, else tokenizer_config.json's pad_token (RoBERTa needs the right id)."""
    if tok.padding:
        return {"pad_id": tok.padding["pad_id"], "pad_token": tok.padding["pad_token"]}
    config = model / "tokenizer_config.json"
    token = (json.loads(config.read_text(encoding="utf-8")) if config.is_file() else {}).get("pad_token") or "[PAD]"
    token = token["content"] if isinstance(token, dict) else str(token)
    return {"pad_id": tok.token_to_id(token) or 0, "pad_token": token}


class BaseEmbedder:
    """A model behind the `Embedder` protocol; a backend implements ``_embed_batch`` only."""

    backend: str

    def __init__(self, spec: ModelSpec) -> None:
        tokenizer_file = spec.path / "tokenizer.json"
        if not tokenizer_file.is_file():
            raise EmbeddingModelError(f"model {spec.name!r} has no tokenizer.json")
        self.token_counter = TokenizerCounter(tokenizer_file)
        self.model_name, self.dimension, self.max_tokens = spec.name, spec.dimension, spec.max_tokens
        self.model_fingerprint = spec.fingerprint
        self.legacy_fingerprint: str | None = spec.legacy_fingerprint
        self.query_prompt, self.document_prompt = spec.query_prompt, spec.document_prompt
        self.languages: frozenset[str] | None = spec.languages

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Number of model tokens (without special tokens or the prompt) of each text."""
        return self.token_counter(texts)

    def embed_documents(self, texts: Sequence[str], progress: ProgressFn | None = None) -> NDArray[np.float32]:
        """Vectors of shape (len(texts), dimension), unit length, each text after the document
        prompt; calls progress(n) per batch."""
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        if not texts:
            return out
        # Longest texts first, so each batch pads to similar lengths.
        order = np.argsort(-np.asarray(self.count_tokens(texts)), kind="stable")
        prompt = self.document_prompt
        for start in range(0, len(texts), BATCH_SIZE):
            idx = order[start : start + BATCH_SIZE]
            out[idx] = self._embed_batch([prompt + texts[i] for i in idx])
            if progress:
                progress(len(idx))
        return out

    def embed_query(self, text: str) -> NDArray[np.float32]:
        """One unit vector of shape (dimension,), of the text after the query prompt."""
        return self._embed_batch([self.query_prompt + text]).reshape(-1)

    def _embed_batch(self, texts: list[str]) -> NDArray[np.float32]:
        """Unit vectors of ``texts``, shape (len(texts), dimension)."""
        raise NotImplementedError
