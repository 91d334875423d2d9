"""The ONNX export of a model, made once, and the graphs made from it and cached:
``<cache_dir>/onnx/<fingerprint>/model-r<recipe>-fused.onnx`` (what fp32 sessions load: fusion.py)
and ``-int8.onnx`` (quantised).

The export needs torch and transformers (seconds of import time) and runs once per graph made from
it (the plain export itself is not kept once fused). The
cache is trusted no further than it must be: the folder is created private (0700) and must belong
to this user; exports are written under unpredictable temporary names (O_EXCL, no symlinks
followed) and renamed into place; each carries a sidecar with its sha256, checked on every load
through the descriptor the export is then read from, and a mismatching export is rebuilt. The
folder is keyed by the model's content fingerprint, so retrained weights get a new export.
"""

from __future__ import annotations

import fcntl
import inspect
import logging
import os
import secrets
import stat
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from mcpower.checksums import FileHashes, private_folder
from mcpower.embedding.fusion import fuse, onnxruntime_tools
from mcpower.embedding.model import ModelSpec
from mcpower.errors import EmbeddingModelError

logger = logging.getLogger(__name__)

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_SIDECAR = ".sha256"
# Part of the cache key: bump it whenever the export or quantisation changes, so a cached file made
# by an older recipe is replaced, not silently reused (an export from before eager attention ran
# int8 ingest at 38 chunks/s against 65 for the current one).
EXPORT_RECIPE = 2


def export_onnx(
    spec: ModelSpec, cache_dir: Path, quantized: bool = False, hashes: FileHashes | None = None, *, fused: bool = True
) -> Path:
    """Path of the model's verified ONNX graph under ``cache_dir/onnx``, made if missing or damaged:
    int8 (``model-r<recipe>-int8.onnx``) if ``quantized``, else fp32 fused (``-fused.onnx``), or
    the plain export as traced (``model-r<recipe>.onnx``, for benchmarks) if not ``fused``.

    The plain export is what the other two are made from; it is not kept beside the fused graph
    (90 MB for the packaged model, 470 MB for the multilingual one): an int8 graph asked for later
    is made from a fresh export.

    Raises:
        EmbeddingModelError: the cache folder is unusable, or the export or the quantisation failed.
    """
    hashes = hashes or FileHashes(cache_dir)
    folder = cache_dir / "onnx" / spec.fingerprint
    plain = folder / f"model-r{EXPORT_RECIPE}.onnx"

    def export(tmp: Path) -> None:
        _drop_older_recipes(folder)
        logger.info(  # information, not a problem: the CLI shows "notice" records without a level
            "exporting the embedding model %s to ONNX, once (10-30 s; later runs reuse it)",
            spec.name,
            extra={"event": "model.export", "notice": True},
        )
        _export_fp32(spec, tmp)

    def int8(tmp: Path) -> None:
        with _plain_graph(plain, export, hashes) as source:
            _quantize(source, tmp)

    def fused_graph(tmp: Path) -> None:
        with _plain_graph(plain, export, hashes) as source:
            fuse(source, tmp, spec)
        for done_with in (plain, plain.with_name(plain.name + _SIDECAR)):  # we hold the folder's lock
            done_with.unlink(missing_ok=True)

    if quantized:
        return _cached(folder / f"model-r{EXPORT_RECIPE}-int8.onnx", int8, hashes)
    if not fused:
        return _cached(plain, export, hashes)
    return _cached(folder / f"model-r{EXPORT_RECIPE}-fused.onnx", fused_graph, hashes)


@contextmanager
def _plain_graph(plain: Path, export: Callable[[Path], None], hashes: FileHashes) -> Iterator[Path]:
    """The plain export to make another graph from, with the folder's lock held: the cached one if
    a benchmark or an older mcpower left it, else a fresh export in a temporary file, deleted after."""
    if _valid(plain, hashes):
        yield plain
        return
    tmp = _fresh_temp(plain)
    try:
        export(tmp)
        yield tmp
    finally:
        tmp.unlink(missing_ok=True)


@contextmanager
def open_verified(path: Path, hashes: FileHashes) -> Iterator[int]:
    """A descriptor of the export at ``path``, if it is a regular file (not a symlink) whose bytes
    match its sidecar's sha256.

    Raises:
        EmbeddingModelError: missing, a symlink, or damaged.
    """
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | os.O_NONBLOCK)
    except OSError as e:
        raise EmbeddingModelError(f"the cached ONNX export {path.name} cannot be opened ({e.strerror})") from e
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode) or hashes.sha256_fd(fd) != _expected(path):
            raise EmbeddingModelError(f"the cached ONNX export {path.name} does not match its checksum")
        yield fd
    finally:
        os.close(fd)


def _expected(path: Path) -> str | None:
    try:
        fd = os.open(path.with_name(path.name + _SIDECAR), os.O_RDONLY | _NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        return os.read(fd, 100).decode("ascii", "replace").strip() or None
    finally:
        os.close(fd)


def _valid(target: Path, hashes: FileHashes) -> bool:
    try:
        with open_verified(target, hashes):
            return True
    except EmbeddingModelError:
        return False


def _cached(target: Path, build: Callable[[Path], None], hashes: FileHashes) -> Path:
    """``target``, built by ``build(tmp)`` unless a verified one exists; safe against crashes, racing
    processes and tampering (see the module docstring)."""
    if _valid(target, hashes):
        return target
    try:
        private_folder(target.parent.parent)
        private_folder(target.parent)
        lock = os.open(target.parent / ".lock", os.O_RDWR | os.O_CREAT | _NOFOLLOW, 0o600)
    except OSError as e:  # the cache folder itself is unusable
        logger.warning("ONNX cache folder %s unusable: %s", target.parent, e)
        raise EmbeddingModelError(
            f"cannot use the ONNX model cache ({e.strerror or e}); set MCPOWER_CACHE_DIR to a folder only you can write"
        ) from e
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the descriptor is closed
        if _valid(target, hashes):  # another process built it while we waited
            return target
        for stale in (target, target.with_name(target.name + _SIDECAR)):
            with suppress(OSError):
                stale.unlink()  # damaged
        tmp = None
        try:
            tmp = _fresh_temp(target)
            build(tmp)
            digest = FileHashes(None).sha256_path(tmp)
            _write_new(target.with_name(target.name + _SIDECAR), digest.encode())
            with open(tmp, "rb") as f:  # make the bytes durable before the rename publishes them
                os.fsync(f.fileno())
            os.replace(tmp, target)
        except OSError as e:
            raise EmbeddingModelError(f"cannot write the ONNX model cache ({e.strerror or e})") from e
        except Exception as e:  # first line only: torch errors can go on to dump weight tensors
            first = (str(e).splitlines() or [type(e).__name__])[0]
            raise EmbeddingModelError(f"cannot export the embedding model to ONNX: {first[:300]}") from e
        finally:
            if tmp is not None:
                with suppress(OSError):
                    tmp.unlink()
    finally:
        os.close(lock)
    return target


def _fresh_temp(target: Path) -> Path:
    """A new empty file beside ``target``, under an unpredictable name no one else could have
    prepared (O_EXCL, no symlink followed), once the ones a killed process left are deleted; the
    caller holds the folder's lock, and deletes or renames it."""
    for stale in target.parent.glob(f".{target.name}.*.tmp"):
        with suppress(OSError):
            stale.unlink()
    tmp, fd = _open_new(target)
    os.close(fd)
    return tmp


def _open_new(path: Path) -> tuple[Path, int]:
    """A new file beside ``path`` under an unpredictable name no one else could have prepared
    (O_EXCL, no symlink followed, its owner's alone), and a descriptor writing to it."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    return tmp, os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600)


def _write_new(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` durably, through a new file no one else could have prepared."""
    tmp, fd = _open_new(path)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _drop_older_recipes(folder: Path) -> None:
    """Delete exports an older recipe left (processes that loaded one keep it in memory)."""
    current = {f"model-r{EXPORT_RECIPE}{kind}.onnx" for kind in ("", "-fused", "-int8")}
    for old in folder.glob("model*.onnx*"):
        if old.name.removesuffix(_SIDECAR) not in current:
            old.unlink(missing_ok=True)


def _export_fp32(spec: ModelSpec, out: Path) -> None:
    import torch
    from transformers import AutoModel
    from transformers.utils import logging as transformers_logging

    # Its "Loading weights" bar is not ours to show.
    transformers_logging.disable_progress_bar()  # type: ignore[no-untyped-call]

    # Eager attention traces to plain MatMul/Softmax that onnxruntime fuses well; the SDPA graph
    # came out ~30% slower on CPU (same vectors).
    model = AutoModel.from_pretrained(
        str(spec.path), local_files_only=True, attn_implementation="eager", trust_remote_code=False
    ).eval()
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
    token = min(100, int(getattr(model.config, "vocab_size", 101)) - 1)  # an id every vocabulary has
    example = {"input_ids": torch.full((2, 8), token), "attention_mask": mask, "token_type_ids": 0 * mask}
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

    with onnxruntime_tools():
        quantize_dynamic(fp32, out, per_channel=True, weight_type=QuantType.QInt8)
