"""Full-text side of search: how text is indexed by SQLite FTS5 and how user text becomes a query.

User text never reaches FTS5 syntax: every term is quoted, so quotes, ``*``, ``-``, ``:``,
parentheses, ``NEAR``, ``AND`` are plain words. Chinese, Japanese and Korean have no spaces
between words, so their characters are indexed one by one and queried as phrases (adjacent
characters), which finds any substring. Query terms are tokenized by FTS5's own tokenizer (an
in-memory table), so they match the stems the index and its BM25 postings hold.
"""

from __future__ import annotations

import functools
import sqlite3
import threading
from dataclasses import dataclass

from mcpower.terms import CJK_CHAR, STOPWORDS, TERM

# Porter stemming on top of unicode61: +0.015 nDCG@10 for keyword search on Cranfield (docs/search.md).
FTS_TOKENIZER = "porter unicode61 remove_diacritics 2"
# A dataset analysed by mcpower.analysis stores its terms separated by spaces; FTS5's ascii tokenizer
# splits at spaces (and ASCII punctuation, which terms never hold) and keeps every other character,
# so each stored term is exactly one FTS5 token.
ANALYSED_TOKENIZER = "ascii"
MAX_TERMS = 64  # a 1024-char query has at most a few hundred words; the rest add nothing


def segment(text: str) -> str:
    """Text as FTS5 should index it: each CJK character becomes its own token."""
    return CJK_CHAR.sub(r" \1 ", text)


@dataclass(frozen=True)
class Phrase:
    """One term of a query: its quoted FTS5 form, and the tokens FTS5 makes of it (stemmed, folded)."""

    fts: str
    tokens: tuple[str, ...]


def query_phrases(text: str) -> list[Phrase]:
    """The terms of ``text`` a keyword search ORs together: quoted, deduplicated, stopwords dropped.

    A term FTS5 splits into several tokens (a run of CJK characters) is a phrase of adjacent tokens.
    """
    terms: list[str] = []
    seen: set[str] = set()
    for m in TERM.finditer(text.lower()):
        term = m.group(0).replace("’", "'")
        if term in seen:
            continue
        seen.add(term)
        if CJK_CHAR.match(term):
            terms.append(" ".join(term))  # a phrase of adjacent characters
        else:
            terms.extend(part for part in term.split("'") if part)
    useful = ([t for t in terms if t not in STOPWORDS] or terms)[:MAX_TERMS]
    return [Phrase(f'"{t}"', tokens) for t, tokens in zip(useful, _tokenizer().tokenize(useful)) if tokens]


class _Tokenizer:
    """FTS5's own tokenizer, run on query text, so a query term is exactly the term the index holds.

    An in-memory FTS5 table receives the texts inside a transaction that is rolled back, and its
    fts5vocab table reports the tokens (~40 µs a query).
    """

    def __init__(self) -> None:
        self._db = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
        self._db.execute(f"CREATE VIRTUAL TABLE q USING fts5(x, tokenize='{FTS_TOKENIZER}')")
        self._db.execute("CREATE VIRTUAL TABLE q_tokens USING fts5vocab(q, 'instance')")
        self._lock = threading.Lock()

    def tokenize(self, texts: list[str]) -> list[tuple[str, ...]]:
        out: list[list[str]] = [[] for _ in texts]
        if not texts:
            return []
        with self._lock:
            self._db.execute("BEGIN")
            try:
                self._db.executemany("INSERT INTO q(rowid, x) VALUES (?, ?)", enumerate(texts))
                rows = self._db.execute("SELECT doc, term FROM q_tokens ORDER BY doc, offset").fetchall()
            finally:
                self._db.execute("ROLLBACK")
        for doc, term in rows:
            out[doc].append(term)
        return [tuple(t) for t in out]


@functools.cache
def _tokenizer() -> _Tokenizer:
    return _Tokenizer()
