"""Text analysis: how a language's text becomes terms, decided in one place.

Ingest, the keyword index, queries, snippets and highlighting all call this room; no other module
assumes that spaces separate words (STYLE.md §1). Models: Lucene's ``analysis/`` (one analyzer per
language, the CJK bigram analyzer) and SQLite FTS5's tokenizer interface.

    detection.py  which language a text is in (a bundled fastText model), ``und`` when unsure;
                  the language of each chunk of a document
    languages.py  language codes: what ``--language`` accepts, names for people

The detector's model is loaded on first use, never on the cold search path.
"""

from __future__ import annotations

from mcpower.analysis.detection import Detection, chunk_languages, detect
from mcpower.analysis.languages import UNDETERMINED, is_language, language_name, normalize_language

__all__ = [
    "UNDETERMINED",
    "Detection",
    "chunk_languages",
    "detect",
    "is_language",
    "language_name",
    "normalize_language",
]
