"""Java (.java): top-level types by code.py's column-0 rule — ``class``, ``interface``, ``enum``,
``record``, ``@interface`` after their modifiers; a file's one class is one definition (its
methods are indented, so they stay in its chunks)."""

from __future__ import annotations

from mcpower.chunking.code import column_rule

TYPES = frozenset({".java"})

parse = column_rule(
    r"((public|protected|private|abstract|final|static|sealed|non-sealed|strictfp)\s+)*(class|interface|enum|record|@interface)\b"
)
