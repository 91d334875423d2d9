"""JavaScript and TypeScript (.js .mjs .cjs .jsx .ts .tsx .mts .cts): top-level definitions by
code.py's column-0 rule — ``function``, ``class``, ``interface``, ``type``, ``enum``, ``const``,
``let``, ``var``, ``namespace``, after ``export [default]``, ``declare``, ``async``, ``abstract``."""

from __future__ import annotations

from mcpower.chunking.code import column_rule

TYPES = frozenset({".js", ".mjs", ".cjs", ".jsx", ".ts", ".tsx", ".mts", ".cts"})

parse = column_rule(
    r"(export\s+(default\s+)?)?(declare\s+)?(async\s+)?(abstract\s+)?"
    r"(function\*?|class|interface|type|enum|const|let|var|namespace)\b"
)
