"""Text analysis: how a language's text becomes terms, decided in one place.

Ingest, the keyword index, queries, snippets and highlighting all call this room; no other module
assumes that spaces separate words (STYLE.md §1). Models: Lucene's ``analysis/`` (one analyzer per
language, the CJK bigram analyzer) and SQLite FTS5's tokenizer interface.

    detection.py  which language a text is in (a bundled fastText model), ``und`` when unsure;
                  the language of each chunk of a document
    languages.py  language codes: what ``--language`` accepts, names for people
    analyzers.py  text -> terms per language (Snowball stemming, CJK character pairs, diacritics),
                  for the keyword index, queries and snippets
    stopwords.py  per language, left out of queries

The detector's model is loaded on first use, never on the search path; the stemmers when a text
in their language is first analysed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mcpower.analysis.analyzers import (
    SCHEME,
    Marks,
    analysis_language,
    index_terms,
    marks,
    query_languages,
    query_terms,
    snippet_terms,
    undetermined_as,
)
from mcpower.analysis.languages import UNDETERMINED, is_language, language_name, normalize_language

if TYPE_CHECKING:
    from mcpower.analysis.detection import Detection, chunk_languages, detect

# Detection is for ingest: its module (and its patterns) load when first asked for, never on a search.
_DETECTION = frozenset({"Detection", "chunk_languages", "detect"})


def __getattr__(name: str) -> Any:
    if name in _DETECTION:
        from mcpower.analysis import detection

        return getattr(detection, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "SCHEME",
    "UNDETERMINED",
    "Detection",
    "Marks",
    "analysis_language",
    "chunk_languages",
    "detect",
    "index_terms",
    "is_language",
    "language_name",
    "marks",
    "normalize_language",
    "query_languages",
    "query_terms",
    "snippet_terms",
    "undetermined_as",
]
