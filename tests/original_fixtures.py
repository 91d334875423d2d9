"""Small datasets in the original system's format, written as its indexer writes them (a real FAISS
IndexFlatIP, a metadata.json, seed 000's manifest), embedded with the tests' fake embedder.

The fixture ``fake_packaged`` makes the fake embedder stand for the packaged model, so these
datasets search like the real seed datasets do with the real model (tests/test_original_seeds.py).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import FakeEmbedder

from mcpower.defaults import DEFAULT_MODEL
from mcpower.store.original import info as original_info
from mcpower.store.original.info import QueryModel

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
SEEDS = Path("/work/shared/bench/seed-datasets")  # the real ones (read-only): copied, never written

# Three documents, as the original indexer records them: whitespace collapsed, numbered chunks.
RECORDS: list[dict[str, Any]] = [
    {
        "title": "Installation",
        "path": "guide/install.md",
        "content": "Install the zephyrine daemon with the package manager on Linux machines.",
    },
    {
        "title": "Installation",
        "path": "guide/install.md",
        "content": "On Windows run the installer and reboot; the zephyrine service starts itself.",
    },
    {
        "title": "Installation",
        "path": "guide/install.md",
        "content": "Configure the daemon port in the settings file before the first start.",
    },
    {
        "title": "Usage notes",
        "path": "guide/usage.md",
        "content": "The verbose flag prints quokka diagnostics; quokka output is colourful.",
    },
    {
        "title": "Usage notes",
        "path": "guide/usage.md",
        "content": "Start the toolkit with a configuration file and watch the output.",
    },
    {"title": "Meeting notes", "path": "notes.txt", "content": "We agreed to ship the harpsichord feature next month."},
]


def records(dataset_id: str = "orig") -> list[dict[str, Any]]:
    """RECORDS with the indexer's other fields: id, snippet, chunk, chunk_total."""
    out, totals = [], {}
    for r in RECORDS:
        totals[r["path"]] = totals.get(r["path"], 0) + 1
    seen: dict[str, int] = {}
    for n, r in enumerate(RECORDS, 1):
        seen[r["path"]] = seen.get(r["path"], 0) + 1
        out.append(
            {
                "id": f"{dataset_id}-{n}",
                **r,
                "snippet": r["content"][:200],
                "chunk": seen[r["path"]],
                "chunk_total": totals[r["path"]],
            }
        )
    return out


def embed(texts: list[str], dimension: int = FakeEmbedder.dimension) -> np.ndarray:
    vectors = FakeEmbedder().embed_documents(texts)
    if dimension != vectors.shape[1]:  # padded with zeros (still unit length) or cut and renormalised
        vectors = np.pad(vectors, ((0, 0), (0, max(dimension - vectors.shape[1], 0))))[:, :dimension]
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors.astype(np.float32)


def write_index(path: Path, vectors: np.ndarray) -> None:
    """An IndexFlatIP file, as the original indexer writes it."""
    import faiss

    path.parent.mkdir(parents=True, exist_ok=True)
    index = faiss.IndexFlatIP(vectors.shape[1])
    index.add(np.ascontiguousarray(vectors, dtype=np.float32))
    faiss.write_index(index, str(path))


def write_original(
    folder: Path,
    recs: list[dict[str, Any]] | None = None,
    vectors: np.ndarray | None = None,
    *,
    model: str | None = MODEL,
    bare: bool = False,
    manifest: dict[str, Any] | None = None,
) -> Path:
    """A dataset of the original format in ``folder`` (its id: the folder name); returns the folder.

    ``bare``: metadata.json a bare list of records (like sample-docs), else the indexer's object.
    ``manifest``: fields to change in seed 000's manifest.
    """
    recs = records(folder.name) if recs is None else recs
    if vectors is None:
        vectors = embed([r["content"] for r in recs])
    folder.mkdir(parents=True, exist_ok=True)
    write_index(folder / "index" / "docs.index", vectors)
    stats = {
        "totalFiles": len({r["path"] for r in recs}),
        "totalChunks": len(recs),
        "embeddingDimensions": vectors.shape[1],
        "indexedAt": "2026-11-23T08:24:58.321376Z",
    }
    meta: Any = (
        recs
        if bare
        else {
            "datasetId": folder.name,
            "name": "Original docs",
            "description": "Built by the original indexer",
            **({"model": model} if model is not None else {}),
            "createdAt": "2026-11-23T08:24:58.321376Z",
            "stats": stats,
            "documents": recs,
        }
    )
    (folder / "metadata.json").write_text(json.dumps(meta, indent=2), encoding="utf-8")
    m = {
        "id": folder.name,
        "name": "Original docs",
        "description": "A dataset the original system built",
        "index": "index",
        "metadata": "metadata.json",
        "defaultTopK": 5,
        **(manifest or {}),
    }
    (folder / "manifest.json").write_text(json.dumps(m, indent=2), encoding="utf-8")
    return folder


def copy_seed(name: str, root: Path) -> Path:
    """A writable copy of a real seed dataset under ``root``."""
    target = root / name
    shutil.copytree(SEEDS / name, target)
    for p in [target, *target.rglob("*")]:
        p.chmod(p.stat().st_mode | 0o200)
    return target


@pytest.fixture
def fake_packaged(monkeypatch: pytest.MonkeyPatch) -> QueryModel:
    """The fake embedder stands for the packaged model (same dimension and fingerprint)."""
    model = QueryModel(DEFAULT_MODEL, FakeEmbedder.dimension, FakeEmbedder.max_tokens, FakeEmbedder.model_fingerprint)
    monkeypatch.setattr(original_info, "packaged_model", lambda hashes=None: model)
    return model
