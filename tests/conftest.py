"""Shared fixtures: a deterministic fake embedder, a tiny corpus, isolation from the user's environment."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from word_count import count_words

from mcpower import embedding
from mcpower.ingestion import IngestOptions, ingest
from mcpower.registry import Registry
from mcpower.store.local.fts import query_phrases

# The server tests' datasets (fixtures `template` and `datasets`), shared by test_server and test_stdio.
pytest_plugins = [
    "server_fixtures",
    "original_fixtures",
    "milvus_fixtures",
    "browser_fixtures",
    "reader_pool",  # one reader worker process for the test process, not one per ingest
]

_WORD = re.compile(r"\w+")


class FakeEmbedder:
    """Hashes lower-cased words into a small unit vector: texts sharing words are similar.

    Implements the `mcpower.embedding.Embedder` protocol without loading any model (the idea of
    simonw/llm's test embedder).
    """

    model_name = "fake-hash-embedder"
    model_fingerprint = "fake-hash-v1"
    legacy_fingerprint = None
    backend = "onnx"
    dimension = 256
    max_tokens = 256
    query_prompt = ""
    document_prompt = ""
    languages: frozenset[str] | None = None  # reads every language

    def __init__(self) -> None:
        self.embedded: list[str] = []  # every document text embedded, in order
        self.queries: list[str] = []

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return count_words(texts)

    token_counter = staticmethod(count_words)  # pickles by reference, for the reader process

    def _vector(self, text: str) -> np.ndarray:
        v = np.zeros(self.dimension, dtype=np.float32)
        for word in _WORD.findall(text.lower()):
            bucket = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=4).digest(), "big")
            v[bucket % self.dimension] += 1.0
        norm = float(np.linalg.norm(v))
        if norm == 0.0:
            v[0], norm = 1.0, 1.0
        return v / norm

    def embed_documents(self, texts: Sequence[str], progress: Callable[[int], None] | None = None) -> np.ndarray:
        self.embedded.extend(texts)
        out = np.vstack([self._vector(t) for t in texts]) if texts else np.zeros((0, self.dimension))
        if progress:
            progress(len(texts))
        return out.astype(np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        self.queries.append(text)
        return self._vector(text)


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    """Async tests run on asyncio only, as the server does: anyio's own fixture would run each on every
    installed backend, and trio is installed too (selenium, of the test extra, requires it)."""
    return "asyncio"


@pytest.fixture(autouse=True)
def isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No MCPOWER_* settings, no network, caches and the working directory inside tmp_path."""
    for name in list(os.environ):
        if name.startswith("MCPOWER_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)


@pytest.fixture
def fake_embedder(monkeypatch: pytest.MonkeyPatch) -> FakeEmbedder:
    """The fake, also returned by `mcpower.embedding.load_embedder` (used by ingest and the registry)."""
    fake = FakeEmbedder()
    calls: list[tuple[str, str]] = []

    def load(
        model: str = embedding.DEFAULT_MODEL, backend: str = "onnx", cache_dir: Path | None = None
    ) -> FakeEmbedder:
        calls.append((model, backend))
        return fake

    monkeypatch.setattr(embedding, "load_embedder", load)
    # Datasets it built name it as their model: an operator would allow a model of their own so.
    monkeypatch.setenv("MCPOWER_ALLOWED_MODELS", FakeEmbedder.model_name)
    fake.load_calls = calls  # type: ignore[attr-defined]
    return fake


INSTALL_MD = """\
# Installation

How to install the widget toolkit on your machine.

## Linux

Use the package manager to install the zephyrine package.
The zephyrine daemon starts on boot and zephyrine logs go to the journal.

## Windows

Run the installer and reboot the machine afterwards.
"""

USAGE_MD = """\
---
title: Usage notes
---

Start the toolkit with a configuration file and watch the output.

## Flags

The verbose flag prints quokka diagnostics; quokka output is colourful.
"""

REFERENCE_MD = """\
# API reference

## Functions

### connect()

Opens a connection to the marmalade server and returns a marmalade session.

```python
session = connect("marmalade://localhost")
```
"""

NOTES_TXT = """\
Meeting notes from the planning session.

We agreed to ship the harpsichord feature next month; harpsichord tuning comes later.
"""

INTRO_RST = """\
Introduction
============

The toolkit documentation, written in reStructuredText.

Background
----------

It grew out of the bramblewood project, and bramblewood people still maintain it.
"""

# Paths the corpus fixture ingests, and what it must leave out.
CORPUS_DOCUMENTS = ["api/reference.md", "guide/install.md", "guide/usage.md", "intro.rst", "notes.txt"]


def fresh_python(script: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python -c script args...`` in a fresh interpreter (this one has long since imported
    everything), without this process's MCPOWER_* variables, offline, with ``env`` added."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MCPOWER_")}
    clean.update(HF_HUB_OFFLINE="1", **(env or {}))
    return subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, env=clean, timeout=120, check=False
    )


def tagged_json(proc: subprocess.CompletedProcess[str], tag: str) -> Any:
    """The JSON after ``tag`` on the last line of a fresh interpreter's stdout: how its script reports."""
    last = proc.stdout.rstrip().splitlines()[-1] if proc.stdout.strip() else ""
    assert last.startswith(tag + " "), (proc.stdout, proc.stderr)
    return json.loads(last[len(tag) + 1 :])


def join_warm_up() -> None:
    """Wait for the MCP servers' warm-up threads, which read the datasets a test is about to remove."""
    for thread in threading.enumerate():
        if thread.name == "mcpower-warm-up":
            thread.join(timeout=10)


def write_files(root: Path, files: dict[str, str | bytes]) -> Path:
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    return root


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    """Five documents in nested folders, plus files ingest must skip or ignore."""
    return write_files(
        tmp_path / "corpus",
        {
            "guide/install.md": INSTALL_MD,
            "guide/usage.md": USAGE_MD,
            "api/reference.md": REFERENCE_MD,
            "notes.txt": NOTES_TXT,
            "intro.rst": INTRO_RST,
            "unsupported.xyz": "<p>zephyrine</p>",
            "script.py": "# zephyrine\n",  # source code: read only with --code
            ".hidden/secret.md": "# Secret\n\nzephyrine secrets\n",
            ".gitignore": "ignored.md\n",
            "ignored.md": "# Ignored\n\nzephyrine ignored\n",
            "binary.md": b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR zephyrine",
            "latin1.md": "# Caf\u00e9\n\nzephyrine cr\u00e8me br\u00fbl\u00e9e\n".encode("latin-1"),
        },
    )


@pytest.fixture
def datasets_dir(tmp_path: Path) -> Path:
    return tmp_path / "datasets"


@pytest.fixture
def make_registry(datasets_dir: Path, fake_embedder: FakeEmbedder) -> Iterator[Callable[[], Registry]]:
    """Registries over `datasets_dir` searching with the fake; all closed at teardown."""
    made: list[Registry] = []

    def make() -> Registry:
        registry = Registry(datasets_dir, allowed_models=[FakeEmbedder.model_name])
        made.append(registry)
        return registry

    yield make
    for registry in made:
        registry.close()


@pytest.fixture
def ingested(
    corpus: Path, datasets_dir: Path, fake_embedder: FakeEmbedder, make_registry: Callable[[], Registry]
) -> tuple[Path, Registry]:
    """The corpus ingested as dataset 'docs': (datasets dir, a registry over it)."""
    ingest(corpus, datasets_dir, IngestOptions(dataset_id="docs"), embedder=FakeEmbedder())
    return datasets_dir, make_registry()


def match_query(text: str) -> str | None:
    """The FTS5 MATCH expression the local store's keyword search runs for ``text``: its quoted
    phrases ORed (None when it has no terms)."""
    return " OR ".join(p.fts for p in query_phrases(text)) or None


def valid_manifest() -> dict[str, Any]:
    """A manifest as ingest writes it (camelCase keys)."""
    return {
        "schemaVersion": 1,
        "id": "docs",
        "name": "My docs",
        "description": "Documentation of the widget toolkit",
        "index": "v-20250101T000000-abcdef/index.faiss",
        "metadata": "v-20250101T000000-abcdef/meta.sqlite",
        "defaultTopK": 5,
        "embedding": {
            "model": "all-MiniLM-L6-v2",
            "backend": "onnx",
            "dimension": 384,
            "normalized": True,
            "maxTokens": 256,
            "modelFingerprint": "0123456789abcdef",
        },
        "chunking": {"chunker": "mcpower-md-v1", "chunkTokens": 250, "overlap": 32},
        "vectorIndex": {"kind": "flat", "metric": "inner_product"},
        "fingerprint": "f" * 32,
        "counts": {"documents": 3, "chunks": 10},
        "checksums": {"index": "a" * 64, "metadata": "b" * 64},
        "createdAt": "2025-01-01T00:00:00Z",
        "updatedAt": "2025-01-02T00:00:00Z",
        "mcpowerVersion": "0.1.0",
    }
