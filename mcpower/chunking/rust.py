"""Rust (.rs): top-level items by code.py's column-0 rule — ``fn``, ``struct``, ``enum``, ``trait``,
``impl``, ``mod``, ``type``, ``const``, ``static``, ``union``, ``macro_rules!``, after ``pub``,
``async``, ``const``, ``unsafe``, ``extern "C"``; attributes (``#[...]``) and doc comments above
belong to the item."""

from __future__ import annotations

from mcpower.chunking.code import column_rule

TYPES = frozenset({".rs"})

parse = column_rule(
    r"(pub(\([^)]*\))?\s+)?(async\s+|const\s+|unsafe\s+|extern\s+\"C\"\s+)*"
    r"((fn|struct|enum|trait|impl|mod|type|const|static|union)\b|macro_rules!)"
)
