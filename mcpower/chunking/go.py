"""Go (.go): top-level definitions by code.py's column-0 rule — ``func`` (methods too), ``type``,
``var``, ``const``."""

from __future__ import annotations

from mcpower.chunking.code import column_rule

TYPES = frozenset({".go"})

parse = column_rule(r"(func|type|var|const)\b")
