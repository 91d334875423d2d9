"""Questions from a JSON-lines file (one object with a ``text`` field a line; blank lines skipped),
as SciFact's ``queries.jsonl`` and ``benchmarks/data/*_questions.jsonl`` hold them."""

from __future__ import annotations

import json
from pathlib import Path


def question_texts(path: Path, limit: int | None = None) -> list[str]:
    """The ``text`` of each line of ``path``, in order; the first ``limit`` (None: all)."""
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [json.loads(line)["text"] for line in lines[:limit]]
