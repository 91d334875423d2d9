"""Full-text side of search: how text is indexed by SQLite FTS5 and how user text becomes a query.

User text never reaches FTS5 syntax: every term is quoted, so quotes, ``*``, ``-``, ``:``,
parentheses, ``NEAR``, ``AND`` are plain words. Chinese, Japanese and Korean have no spaces
between words, so their characters are indexed one by one and queried as phrases (adjacent
characters), which finds any substring.
"""

from __future__ import annotations

import re

# Porter stemming on top of unicode61: +0.015 nDCG@10 for keyword search on Cranfield (docs/search.md).
FTS_TOKENIZER = "porter unicode61 remove_diacritics 2"
# Han, Hiragana, Katakana, Hangul syllables and jamo, CJK punctuation and full-width forms.
_CJK = "\u1100-\u11ff\u3040-\u30ff\u3100-\u312f\u3130-\u318f\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_CJK_CHAR = re.compile(f"([{_CJK}])")
_TERM = re.compile(rf"[{_CJK}]+|[^\W_]+(?:['’][^\W_]+)?", re.UNICODE)
# Words too common to help a disjunctive query; they match nearly every chunk and slow FTS down.
STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "but",
        "by",
        "can",
        "do",
        "does",
        "for",
        "from",
        "has",
        "have",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "of",
        "on",
        "or",
        "so",
        "than",
        "that",
        "the",
        "their",
        "them",
        "then",
        "there",
        "these",
        "they",
        "this",
        "to",
        "was",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "will",
        "with",
        "you",
        "your",
    ]
)
MAX_TERMS = 64  # a 1024-char query has at most a few hundred words; the rest add nothing


def segment(text: str) -> str:
    """Text as FTS5 should index it: each CJK character becomes its own token."""
    return _CJK_CHAR.sub(r" \1 ", text)


def match_query(text: str) -> str | None:
    """An FTS5 MATCH expression that ORs the quoted terms of ``text``; None if it has no terms."""
    terms: list[str] = []
    seen: set[str] = set()
    for m in _TERM.finditer(text.lower()):
        term = m.group(0).replace("’", "'")
        if term in seen:
            continue
        seen.add(term)
        if _CJK_CHAR.match(term):
            terms.append('"' + " ".join(term) + '"')  # a phrase of adjacent characters
        else:
            terms.extend('"' + part + '"' for part in term.split("'") if part)
    if not terms:
        return None
    useful = [t for t in terms if t.strip('"') not in STOPWORDS] or terms
    return " OR ".join(useful[:MAX_TERMS])


def query_terms(text: str) -> list[str]:
    """Lower-case words of ``text`` without stopwords (for picking snippets)."""
    words = [w for w in _TERM.findall(text.lower()) if w not in STOPWORDS]
    out: list[str] = []
    for w in words:
        out.extend(list(w) if _CJK_CHAR.match(w) else [w])
    return out
