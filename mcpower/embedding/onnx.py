"""ONNX Runtime backend: the model's transformer exported once to ONNX, pooling done in numpy.

The export needs torch and transformers (seconds of import time) and runs once per model; the
result is cached under ``<cache_dir>/onnx/<spec.fingerprint>/``. With the export cached, an
:class:`OnnxEmbedder` needs only onnxruntime, tokenizers and numpy: torch is never imported.
"""

from __future__ import annotations

import fcntl
import inspect
import json
import logging
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mcpower.embedding.base import BaseEmbedder
from mcpower.embedding.model import ModelSpec
from mcpower.errors import EmbeddingModelError

if TYPE_CHECKING:
    from numpy.typing import NDArray

logger = logging.getLogger(__name__)

# Part of the cache key: bump it whenever the export or quantisation changes, so a cached file made
# by an older recipe is replaced, not silently reused (an export from before eager attention ran
# int8 ingest at 38 chunks/s against 65 for the current one).
EXPORT_RECIPE = 2


def export_onnx(spec: ModelSpec, cache_dir: Path, quantized: bool = False) -> Path:
    """Path of the model's ONNX export (``model-r<recipe>.onnx``, or ``-int8.onnx``) under
    ``cache_dir/onnx``, made if missing.

    Raises:
        EmbeddingModelError: the export or the quantisation failed.
    """
    folder = cache_dir / "onnx" / spec.fingerprint

    def export(tmp: Path) -> None:
        _drop_older_recipes(folder)
        _export_fp32(spec, tmp)

    fp32 = _cached(folder / f"model-r{EXPORT_RECIPE}.onnx", export)
    if not quantized:
        return fp32
    return _cached(folder / f"model-r{EXPORT_RECIPE}-int8.onnx", lambda tmp: _quantize(fp32, tmp))


def _cached(target: Path, build: Callable[[Path], None]) -> Path:
    """``target``, built by ``build(tmp)`` unless it exists; safe against crashes and racing processes."""
    if target.is_file():
        return target
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target.parent / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file is closed
            if target.is_file():  # another process built it while we waited
                return target
            for stale in target.parent.glob(f".{target.name}.*.tmp"):  # left by a killed process
                stale.unlink()
            logger.info("one-time export of the embedding model to %s (later runs reuse it)", target)
            tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
            try:
                build(tmp)
                with open(tmp, "rb") as f:  # make the bytes durable before the rename publishes them
                    os.fsync(f.fileno())
                os.replace(tmp, target)
            except Exception as e:  # first line only: torch errors can go on to dump weight tensors
                first = (str(e).splitlines() or [type(e).__name__])[0]
                raise EmbeddingModelError(f"cannot export the embedding model to ONNX: {first}") from e
            finally:
                tmp.unlink(missing_ok=True)
    except OSError as e:  # the cache folder itself is not writable
        raise EmbeddingModelError(f"cannot write the ONNX cache {target.parent}: {e}") from e
    return target


def _drop_older_recipes(folder: Path) -> None:
    """Delete exports an older recipe left (processes that loaded one keep it in memory)."""
    current = {f"model-r{EXPORT_RECIPE}.onnx", f"model-r{EXPORT_RECIPE}-int8.onnx"}
    for old in folder.glob("model*.onnx"):
        if old.name not in current:
            old.unlink(missing_ok=True)


def _export_fp32(spec: ModelSpec, out: Path) -> None:
    import torch
    from transformers import AutoModel
    from transformers.utils import logging as transformers_logging

    # Its "Loading weights" bar is not ours to show.
    transformers_logging.disable_progress_bar()  # type: ignore[no-untyped-call]

    # Eager attention traces to plain MatMul/Softmax that onnxruntime fuses well; the SDPA graph
    # came out ~30% slower on CPU (same vectors).
    model = AutoModel.from_pretrained(str(spec.path), local_files_only=True, attn_implementation="eager").eval()
    # Models without segment embeddings (DistilBERT, MPNet ...) take no token_type_ids.
    params = inspect.signature(model.forward).parameters
    names = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in params]

    class Transformer(torch.nn.Module):  # positional inputs in, keywords to the HF model
        def __init__(self) -> None:
            super().__init__()
            self.model = model  # a submodule, so its weights export as initializers

        def forward(self, *inputs: Any) -> Any:
            return self.model(**dict(zip(names, inputs, strict=True))).last_hidden_state

    # A padded row in the example, so tracing cannot drop the attention mask as all ones.
    mask = torch.tensor([[1] * 8, [1] * 5 + [0] * 3])
    example = {"input_ids": torch.full((2, 8), 100), "attention_mask": mask, "token_type_ids": 0 * mask}
    axes = {n: {0: "batch", 1: "sequence"} for n in [*names, "last_hidden_state"]}
    # The legacy TorchScript exporter needs no onnxscript; its deprecation and tracer warnings are
    # expected here and would otherwise reach the user (or fail tests run with -W error).
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            Transformer(),
            tuple(example[n] for n in names),
            str(out),
            input_names=names,
            output_names=["last_hidden_state"],
            dynamic_axes=axes,
            opset_version=17,
            dynamo=False,
        )


def _quantize(fp32: Path, out: Path) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    def not_onnxruntime(record: logging.LogRecord) -> bool:  # its root-logger chatter is not for users
        return "onnxruntime" not in record.pathname

    logging.getLogger().addFilter(not_onnxruntime)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            quantize_dynamic(fp32, out, per_channel=True, weight_type=QuantType.QInt8)
    finally:
        logging.getLogger().removeFilter(not_onnxruntime)


class OnnxEmbedder(BaseEmbedder):
    """The model on onnxruntime (CPU): fp32 gives torch's vectors, int8 is faster and close."""

    def __init__(self, spec: ModelSpec, cache_dir: Path, quantized: bool = False) -> None:
        super().__init__(spec)
        self.backend = "onnx-int8" if quantized else "onnx"
        path = export_onnx(spec, cache_dir, quantized)

        import onnxruntime as ort
        from tokenizers import Tokenizer

        # A tokenizer of its own: the counter's must not truncate, this one truncates like
        # sentence-transformers (max_seq_length) and pads each batch to its longest text.
        self._tok_in = Tokenizer.from_file(str(spec.path / "tokenizer.json"))
        self._tok_in.enable_truncation(spec.max_tokens)
        self._tok_in.enable_padding(**_padding(self._tok_in, spec.path))

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = min(_cpus(), 8)  # beyond 8, threads mostly wait on each other
        # Idle intra-op threads sleep instead of spinning: spinning took the CPU the server's event
        # loop and worker threads needed (query p50 50 -> 33 ms with the machine loaded; ingest
        # chunks/s unchanged in the same A/B run).
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.log_severity_level = 3  # errors only: no notes about fused or unused initializers
        try:
            self._session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        except Exception as e:
            raise EmbeddingModelError(f"cannot load {path}: {e}; delete it to re-export") from e
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


def _padding(tok: Any, model: Path) -> dict[str, Any]:
    """tokenizer.json's padding, else tokenizer_config.json's pad_token (RoBERTa needs the right id)."""
    if tok.padding:
        return {"pad_id": tok.padding["pad_id"], "pad_token": tok.padding["pad_token"]}
    config = model / "tokenizer_config.json"
    token = (json.loads(config.read_text()) if config.is_file() else {}).get("pad_token") or "[PAD]"
    token = token["content"] if isinstance(token, dict) else str(token)
    return {"pad_id": tok.token_to_id(token) or 0, "pad_token": token}


def _cpus() -> int:
    """CPUs this process may run on (the affinity mask honours taskset and container cpusets)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
