"""The ONNX export of a model, made once, and the graphs made from it and cached:
``<cache_dir>/onnx/<fingerprint>/model-r<recipe>-fused.onnx`` (what fp32 sessions load: fusion.py)
and ``-int8.onnx`` (quantised).

The export needs torch and transformers (seconds of import time) and runs once per graph made from
it (the plain export itself is not kept once fused). A model that cannot be fused keeps its plain
graph under the fused name, so the attempt is not repeated on every load; a fusion that failed for a
cause that may pass (the child was killed or did not start, memory or disk ran out) keeps the plain
export under its own name, which is loaded meanwhile, and is tried again by a later load, at most
FUSE_TRIES times in all (``-fused.onnx.tries`` counts them). The
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
import shutil
import stat
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from mcpower.checksums import FileHashes, private_folder
from mcpower.embedding.fusion import NotFused, fuse, onnxruntime_tools
from mcpower.embedding.model import ModelSpec
from mcpower.errors import EmbeddingModelError

logger = logging.getLogger(__name__)

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_SIDECAR = ".sha256"
_TRIES = ".tries"
# Fusions that failed for a cause that may pass, at most, before the plain graph is kept for good.
FUSE_TRIES = 3
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
    is made from a fresh export. While a fusion that may yet succeed is pending (the module
    docstring), the plain export is kept and is what fp32 sessions load.

    Raises:
        EmbeddingModelError: the cache folder is unusable, or the export or the quantisation failed.
    """
    hashes = hashes or FileHashes(cache_dir)
    folder = cache_dir / "onnx" / spec.fingerprint
    plain = folder / f"model-r{EXPORT_RECIPE}.onnx"
    tries = folder / f"model-r{EXPORT_RECIPE}-fused.onnx{_TRIES}"

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
            try:
                fuse(source, tmp, spec)
            except NotFused as e:
                not_fused(e, source, tmp)
        for done_with in (plain, plain.with_name(plain.name + _SIDECAR), tries):  # we hold the folder's lock
            done_with.unlink(missing_ok=True)

    def not_fused(e: NotFused, source: Path, tmp: Path) -> None:
        attempt = _count(tries) + 1
        if e.lasting or attempt >= FUSE_TRIES:
            why = e.why if e.lasting else f"{e.why}; {attempt} tries"
            logger.info("%s: kept the plain ONNX graph, not fused (%s)", spec.name, why)
            shutil.copyfile(source, tmp)
            return
        logger.info(
            "%s: the ONNX graph was not fused this time (%s); the plain graph is used, and a later start "
            "tries again (%d of %d tries made)",
            spec.name,
            e.why,
            attempt,
            FUSE_TRIES,
            extra={"event": "model.fuse.postponed", "notice": True},
        )
        _write_new(tries, str(attempt).encode())
        if source != plain:  # a fresh export: kept for the next try, and loaded meanwhile
            _publish(source, plain)
        raise _Postponed from e

    if quantized:
        return _cached(folder / f"model-r{EXPORT_RECIPE}-int8.onnx", int8, hashes)
    if not fused:
        return _cached(plain, export, hashes)
    try:
        return _cached(folder / f"model-r{EXPORT_RECIPE}-fused.onnx", fused_graph, hashes)
    except _Postponed:
        return plain


class _Postponed(Exception):
    """The fused graph was not made this time; the plain export is cached, to be loaded meanwhile."""


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
    return _small_text(path.with_name(path.name + _SIDECAR))


def _count(path: Path) -> int:
    """The count in the file at ``path``: 0 if it is missing or holds something else."""
    text = _small_text(path) or ""
    return int(text) if text.isdigit() else 0


def _small_text(path: Path) -> str | None:
    """The first 100 bytes of the file at ``path`` as text, stripped (no symlink followed); None
    if it cannot be read or is empty."""
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        return os.read(fd, 100).decode("ascii", "replace").strip() or None
    except OSError:
        return None
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
            _publish(tmp, target)
        except _Postponed:
            raise
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


def _publish(tmp: Path, target: Path) -> None:
    """Put the file ``tmp`` in ``target``'s place, with its sidecar; the caller holds the folder's lock."""
    digest = FileHashes(None).sha256_path(tmp)
    _write_new(target.with_name(target.name + _SIDECAR), digest.encode())
    with open(tmp, "rb") as f:  # make the bytes durable before the rename publishes them
        os.fsync(f.fileno())
    os.replace(tmp, target)


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
        if old.name.removesuffix(_SIDECAR).removesuffix(_TRIES) not in current:
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
