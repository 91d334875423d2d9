"""Python source (.py, .pyi), parsed with ``ast``: top-level functions and classes, and each
class's methods under it (``Config > load``). Decorators and the comment lines directly above a
definition belong to it.

A file ``ast`` cannot parse (Python 2, a syntax error, nesting past the parser's limits) or over
2 MB (ast takes seconds there) follows the column-0 rule of code.py with ``def`` and ``class``.
"""

from __future__ import annotations

import ast
import warnings

from mcpower.chunking.code import Span, column_rule, sections
from mcpower.chunking.sections import Parsed

TYPES = frozenset({".py", ".pyi"})

MAX_AST_CHARS = 2_000_000
_by_rule = column_rule(r"(async\s+def|def|class)\s")
_DEFINITION = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def parse(text: str) -> Parsed:
    """Sections along the module's definitions."""
    if len(text) > MAX_AST_CHARS:
        return _by_rule(text)
    try:
        with warnings.catch_warnings():  # invalid escape sequences and the like warn: not ours to report
            warnings.simplefilter("ignore")
            tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        parsed = _by_rule(text)
        why = f"{type(e).__name__} at line {e.lineno}" if isinstance(e, SyntaxError) else type(e).__name__
        note = f"not parsed as Python 3 ({why}): split at def and class lines"
        return Parsed(parsed.sections, notes=(note,))
    lines = text.split("\n")
    spans: list[Span] = []
    for node in tree.body:
        if not isinstance(node, _DEFINITION):
            continue
        first, last = _start(node, lines), (node.end_lineno or node.lineno) - 1
        methods = [m for m in node.body if isinstance(m, _DEFINITION)] if isinstance(node, ast.ClassDef) else []
        line = first
        for method in methods:
            begin = _start(method, lines)
            if begin > line:
                spans.append(((node.name,), line, begin - 1))
            spans.append(((node.name, method.name), begin, (method.end_lineno or method.lineno) - 1))
            line = method.end_lineno or method.lineno
        if line <= last:
            spans.append(((node.name,), line, last))
    return Parsed(sections(lines, spans))


def _start(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef, lines: list[str]) -> int:
    """The first line (0-based) of a definition: its first decorator, or the comments right above."""
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)]) - 1
    while first > 0 and lines[first - 1].lstrip().startswith("#"):
        first -= 1
    return first
