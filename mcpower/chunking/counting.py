"""Counting a document's tokens with the model's tokenizer in bounded memory.

The tokenizer keeps about a hundred bytes for each token of a text it is given and about 1 KB for
each text, until the call returns: one 1 MB line took 126 MB, and 333,000 words in one call
357 MB (a 6 MB notebook cell peaked at 3.7 GB). So it is given texts of at most
:data:`PIECE_CHARS` characters (a longer one is cut at whitespace, its count the sum of its
pieces'), and at most :data:`BATCH_TEXTS` texts and :data:`BATCH_CHARS` characters a call. A
document under those limits is still counted in one call, since each call has a fixed cost.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Sequence

TokenCounter = Callable[[Sequence[str]], list[int]]

PIECE_CHARS = 4096
BATCH_CHARS = 64 * 1024
BATCH_TEXTS = 1024
_TO_LAST_SPACE = re.compile(r".*\s", re.S)


def bounded(count_tokens: TokenCounter) -> TokenCounter:
    """``count_tokens`` given bounded batches of bounded pieces: the same counts (pieces are cut at
    whitespace, across which the model's tokenizer never makes a token), except for a run of over
    PIECE_CHARS characters without whitespace, which is counted in pieces of that size."""

    def count(texts: Sequence[str]) -> list[int]:
        totals = [0] * len(texts)
        batch: list[str] = []
        owners: list[int] = []
        size = 0
        for i, text in enumerate(texts):
            for piece in cut(text):
                if batch and (size + len(piece) > BATCH_CHARS or len(batch) == BATCH_TEXTS):
                    for owner, n in zip(owners, count_tokens(batch)):
                        totals[owner] += n
                    batch, owners, size = [], [], 0
                batch.append(piece)
                owners.append(i)
                size += len(piece)
        if batch:
            for owner, n in zip(owners, count_tokens(batch)):
                totals[owner] += n
        return totals

    return count


def cut(text: str) -> Iterator[str]:
    """``text`` in pieces of at most PIECE_CHARS characters, each cut before the last whitespace
    character of its second half, else at PIECE_CHARS."""
    start = 0
    while len(text) - start > PIECE_CHARS:
        end = start + PIECE_CHARS
        m = _TO_LAST_SPACE.match(text, start + PIECE_CHARS // 2, end)
        stop = m.end() - 1 if m else end
        yield text[start:stop]
        start = stop
    yield text[start:]


def counted(
    items: Iterable[tuple[str, int] | None], count_tokens: TokenCounter
) -> Iterator[tuple[str, int, int] | None]:
    """``(text, line)`` items with their tokens, ``(text, line, tokens)``, in order; a None (which
    marks the end of a block) passes through. Counted a batch at a time, as the items are read."""
    batch: list[tuple[str, int] | None] = []
    texts: list[str] = []
    size = 0
    for item in items:
        batch.append(item)
        if item is not None:
            texts.append(item[0])
            size += len(item[0])
        if len(batch) >= BATCH_TEXTS or size >= BATCH_CHARS:
            yield from _with_counts(batch, count_tokens(texts) if texts else [])
            batch, texts, size = [], [], 0
    yield from _with_counts(batch, count_tokens(texts) if texts else [])


def _with_counts(batch: list[tuple[str, int] | None], counts: list[int]) -> Iterator[tuple[str, int, int] | None]:
    numbers = iter(counts)
    for item in batch:
        yield None if item is None else (item[0], item[1], next(numbers))


def counted_words(text: str, count_tokens: TokenCounter) -> Iterator[tuple[str, int]]:
    """The words of ``text.split(" ")`` with their tokens, split and counted a few thousand
    characters at a time (the list of all the words of a long line takes 20 times its size)."""
    start = 0
    while True:
        end = text.find(" ", start + PIECE_CHARS)
        words = text[start:].split(" ") if end < 0 else text[start:end].split(" ")
        yield from zip(words, count_tokens(words))
        if end < 0:
            return
        start = end + 1
