"""The tests' token counter, in a module of its own: the fake embedder's ``token_counter`` is pickled
by reference to it, so the reader process (chunking/worker.py) imports this, not conftest."""

from __future__ import annotations

import re
from collections.abc import Sequence

_TOKEN = re.compile(r"\w+|[^\w\s]")


def count_words(texts: Sequence[str]) -> list[int]:
    """A token counter for the chunker: words and punctuation marks, one token each."""
    return [len(_TOKEN.findall(t)) for t in texts]
