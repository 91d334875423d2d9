"""Words of a query: how text splits into terms (runs of CJK characters apart from the rest), and
the words too common to help a search. Shared by snippet picking and keyword query building."""

from __future__ import annotations

import re

# Han, Hiragana, Katakana, Hangul syllables and jamo, CJK punctuation and full-width forms.
CJK = "\u1100-\u11ff\u3040-\u30ff\u3100-\u312f\u3130-\u318f\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
CJK_CHAR = re.compile(f"([{CJK}])")
TERM = re.compile(rf"[{CJK}]+|[^\W_]+(?:['’][^\W_]+)?", re.UNICODE)
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


def split_terms(text: str) -> list[str]:
    """Lower-cased words of ``text``, each run of CJK characters one term."""
    return TERM.findall(text.lower())


def query_terms(text: str) -> list[str]:
    """Lower-case words of ``text`` without stopwords (for picking snippets)."""
    words = [w for w in split_terms(text) if w not in STOPWORDS]
    out: list[str] = []
    for w in words:
        out.extend(list(w) if CJK_CHAR.match(w) else [w])
    return out
