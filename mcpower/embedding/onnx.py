"""ONNX Runtime backend: the model's transformer exported once to ONNX (export.py), pooling done in numpy.

With the export cached, an :class:`OnnxEmbedder` needs only onnxruntime, tokenizers and numpy:
torch is never imported.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from mcpower import env
from mcpower.checksums import FileHashes
from mcpower.embedding.base import BaseEmbedder, tokenizer_padding
from mcpower.embedding.export import export_onnx, open_verified
from mcpower.embedding.model import ModelSpec
from mcpower.errors import EmbeddingModelError

if TYPE_CHECKING:
    from numpy.typing import NDArray

logger = logging.getLogger(__name__)


class OnnxEmbedder(BaseEmbedder):
    """The model on onnxruntime (CPU): fp32 gives torch's vectors, int8 is faster and close."""

    def __init__(self, spec: ModelSpec, cache_dir: Path, quantized: bool = False) -> None:
        super().__init__(spec)
        self.backend = "onnx-int8" if quantized else "onnx"
        hashes = FileHashes(cache_dir)
        path = export_onnx(spec, cache_dir, quantized, hashes)

        import onnxruntime as ort
        from tokenizers import Tokenizer

        if not env.telemetry_allowed():  # in case a caller imported onnxruntime before mcpower
            ort.disable_telemetry_events()

        # A tokenizer of its own: the counter's must not truncate, this one truncates like
        # sentence-transformers (max_seq_length) and pads each batch to its longest text.
        self._tok_in = Tokenizer.from_file(str(spec.path / "tokenizer.json"))
        self._tok_in.enable_truncation(spec.max_tokens)
        self._tok_in.enable_padding(**tokenizer_padding(self._tok_in, spec.path))

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = min(env.cpus(), 8)  # beyond 8, threads mostly wait on each other
        # Idle intra-op threads sleep instead of spinning: spinning took the CPU the server's event
        # loop and worker threads needed (query p50 50 -> 33 ms with the machine loaded; ingest
        # chunks/s unchanged in the same A/B run).
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.log_severity_level = 3  # errors only: no notes about fused or unused initializers
        # Loaded through the descriptor that was verified, so the bytes checked are the bytes run.
        with open_verified(path, hashes) as fd:
            source = f"/proc/self/fd/{fd}" if os.path.exists(f"/proc/self/fd/{fd}") else str(path)
            try:
                self._session = ort.InferenceSession(source, opts, providers=["CPUExecutionProvider"])
            except Exception as e:
                logger.warning("cannot load the ONNX export %s: %s", path, e)
                raise EmbeddingModelError(
                    f"the cached ONNX export of {spec.name!r} cannot be loaded ({type(e).__name__}); "
                    "delete the onnx folder of the cache (MCPOWER_CACHE_DIR) to re-export it"
                ) from e
        self._inputs = [i.name for i in self._session.get_inputs()]

    def _embed_batch(self, texts: list[str]) -> NDArray[np.float32]:
        encs = self._tok_in.encode_batch(texts)
        feeds = {
            "input_ids": np.array([e.ids for e in encs], dtype=np.int64),
            "attention_mask": np.array([e.attention_mask for e in encs], dtype=np.int64),
            "token_type_ids": np.array([e.type_ids for e in encs], dtype=np.int64),
        }
        # Feed only what the graph declares: the exporter drops inputs the model ignores.
        hidden = self._session.run(None, {n: feeds[n] for n in self._inputs})[0]
        mask = feeds["attention_mask"][..., None].astype(np.float32)
        pooled = (hidden * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1e-9)  # mean pooling
        norms = np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
        return np.asarray(pooled / norms, dtype=np.float32)
