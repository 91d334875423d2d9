"""Repeated queries' vectors, remembered: an agent asks the same question again (a retry, another
page, another filter, the same search on each dataset), and embedding it is most of a warm search.

:class:`CachedQueries` wraps any :class:`~mcpower.embedding.Embedder` and remembers the vectors of
the last :data:`QUERY_CACHE_SIZE` queries, keyed by the model's fingerprint, the backend and the
exact text, so a vector is only ever reused for the weights that made it. A vector handed out is
read-only: no caller can change what the next one gets. Documents are never cached here (ingest has
its own store of finished embeddings).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from mcpower.embedding import Embedder
    from mcpower.embedding.base import ProgressFn

# Entries kept: a query is at most 1,024 characters and its vector 1.5 KB (384 floats), so a full
# cache is ~2.5 MB; an agent's session repeats within far fewer questions than that.
QUERY_CACHE_SIZE = 1024


class QueryCache:
    """A thread-safe LRU of query vectors, keyed by (model fingerprint, backend, prompt and text)."""

    def __init__(self, size: int = QUERY_CACHE_SIZE) -> None:
        self.size = size
        self._vectors: OrderedDict[tuple[str, str, str], NDArray[np.float32]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def get(self, key: tuple[str, str, str]) -> NDArray[np.float32] | None:
        with self._lock:
            vector = self._vectors.get(key)
            if vector is None:
                self.misses += 1
                return None
            self._vectors.move_to_end(key)
            self.hits += 1
            return vector

    def put(self, key: tuple[str, str, str], vector: NDArray[np.float32]) -> NDArray[np.float32]:
        """Remember ``vector`` (a read-only copy); returns that copy."""
        kept = np.array(vector, dtype=np.float32, copy=True)
        kept.flags.writeable = False
        if self.size <= 0:
            return kept
        with self._lock:
            self._vectors[key] = kept
            self._vectors.move_to_end(key)
            while len(self._vectors) > self.size:
                self._vectors.popitem(last=False)
        return kept

    def __len__(self) -> int:
        with self._lock:
            return len(self._vectors)


class CachedQueries:
    """An embedder whose query vectors come from a :class:`QueryCache` when it has them; everything
    else (documents, token counts, its identity) is the wrapped embedder's."""

    def __init__(self, inner: Embedder, cache: QueryCache) -> None:
        self.inner = inner
        self.cache = cache
        self.model_name, self.backend = inner.model_name, inner.backend
        self.model_fingerprint, self.legacy_fingerprint = inner.model_fingerprint, inner.legacy_fingerprint
        self.dimension, self.max_tokens = inner.dimension, inner.max_tokens
        # A view with other prompts (embedding.with_prompts copies this object) embeds with them.
        self.query_prompt, self.document_prompt = inner.query_prompt, inner.document_prompt
        self.languages = inner.languages

    def _inner(self) -> Embedder:
        from mcpower.embedding import with_prompts

        return with_prompts(self.inner, self.query_prompt, self.document_prompt)

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return self._inner().count_tokens(texts)

    @property
    def token_counter(self) -> Callable[[Sequence[str]], list[int]]:
        return self.inner.token_counter  # counts leave the prompt out: the same in every view

    def embed_documents(self, texts: Sequence[str], progress: ProgressFn | None = None) -> NDArray[np.float32]:
        return self._inner().embed_documents(texts, progress)

    def embed_query(self, text: str) -> NDArray[np.float32]:
        """The query's unit vector, read-only: the wrapped embedder's, remembered."""
        key = (self.model_fingerprint, self.backend, self.query_prompt + text)
        vector = self.cache.get(key)
        if vector is None:
            vector = self.cache.put(key, self._inner().embed_query(text))
        return vector
