"""Gitignore patterns (``.gitignore`` files, ``--include``/``--exclude``), matched without backtracking.

A pattern is read as git reads it (and as pathspec's ``GitIgnoreSpec`` did before this module
replaced it): ``#`` comments, ``!`` negation, a leading or inner ``/`` anchors the pattern to its
folder, a trailing ``/`` matches folders (and so everything under them), ``**`` spans folders,
``*`` and ``?`` stay within one name, ``[...]`` is a class (``[!...]`` negated); the last pattern
that matches the path itself wins, else the last that matches one of its folders.

Globs become backtracking regular expressions in most libraries, so a line like
``*a*a*a*a*a*a*a*a*a*a*a*a*b`` takes exponential time against a long name: any folder could hang
discovery with its ``.gitignore``. Here a name is matched by the classic greedy algorithm: the
fixed-length pieces between the stars are each searched for once, leftmost first (the last one
at the end), so a match costs O(name length x pattern length); a path is matched the same way one
level up, its names against the runs of names between ``**``.

A line git would discard (an unclosed ``[``, a trailing ``\\``, a lone ``!``) never matches;
`problem` says what is wrong with it, for patterns a user typed. A reversed range (``[z-a]``)
matches nothing, as in git.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

_STAR2 = "**"


class PatternError(ValueError):
    """A line git would discard; the message says why."""


@dataclass(frozen=True)
class _Piece:
    """A run of a name pattern without ``*``: it always matches exactly ``size`` characters."""

    size: int
    literal: str | None  # plain text, compared directly
    regex: re.Pattern[str] | None  # else: single characters, classes and '?', no quantifier

    def at(self, name: str, pos: int) -> bool:
        if self.literal is not None:
            return name.startswith(self.literal, pos)
        assert self.regex is not None
        return self.regex.match(name, pos) is not None

    def find(self, name: str, pos: int, end: int) -> int:
        """The leftmost start >= pos of a match ending <= end, or -1 (linear: no quantifier)."""
        if self.literal is not None:
            return name.find(self.literal, pos, end)
        assert self.regex is not None
        found = self.regex.search(name, pos, end)
        return found.start() if found else -1


class _Name:
    """The pattern of one name (a path segment): pieces separated by ``*``. ``matches`` is the
    quickest test that fits it (equality, a prefix and a suffix, or the greedy search)."""

    __slots__ = ("matches", "pieces")

    def __init__(self, pieces: tuple[_Piece, ...], glob: str) -> None:
        self.pieces = pieces  # with a '*', the first piece starts the name and the last ends it
        literals = [p.literal for p in pieces if p.literal is not None]
        self.matches: Callable[[str], bool]
        if glob == "*":
            self.matches = bool  # git: any name of at least one character
        elif len(pieces) == 1:
            self.matches = literals[0].__eq__ if literals else self._fixed
        elif len(pieces) == 2 and len(literals) == 2:
            self.matches = _ends(*literals)
        else:
            self.matches = self._greedy

    def _fixed(self, name: str) -> bool:
        [piece] = self.pieces
        return len(name) == piece.size and piece.at(name, 0)

    def _greedy(self, name: str) -> bool:
        first, *middle, last = self.pieces
        end = len(name) - last.size
        if end < first.size or not first.at(name, 0) or not last.at(name, end):
            return False
        pos = first.size
        for piece in middle:  # leftmost is always best: it leaves the most room for the rest
            start = piece.find(name, pos, end)
            if start < 0:
                return False
            pos = start + piece.size
        return True


def _ends(prefix: str, suffix: str) -> Callable[[str], bool]:
    """The test of ``prefix*suffix`` ('*.md', 'build*')."""
    size = len(prefix) + len(suffix)
    return lambda name: len(name) >= size and name.startswith(prefix) and name.endswith(suffix)


def _class(body: str, negate: bool) -> str:
    """A regex class for the bracket expression ``body`` (backslashes taken literally, as pathspec did)."""
    parts = []
    k = 0
    while k < len(body):
        lo = body[k]
        if k + 2 < len(body) and body[k + 1] == "-":
            hi = body[k + 2]
            k += 3
            if lo <= hi:  # a reversed range matches nothing
                parts.append(f"{re.escape(lo)}-{re.escape(hi)}")
        else:
            k += 1
            parts.append(re.escape(lo))
    if not parts:
        return "." if negate else "(?!)"
    return "[" + ("^" if negate else "") + "".join(parts) + "]"


def _compile_name(glob: str) -> _Name:
    """Raises PatternError: an unclosed '[' or a trailing backslash."""
    pieces: list[list[tuple[str, str | None]]] = [[]]  # each character: (its regex, the literal or None)
    i, end = 0, len(glob)
    while i < end:
        char = glob[i]
        i += 1
        if char == "\\":
            if i == end:
                raise PatternError("a trailing backslash escapes nothing")
            pieces[-1].append((re.escape(glob[i]), glob[i]))
            i += 1
        elif char == "*":
            if pieces[-1] or len(pieces) == 1:  # consecutive stars are one
                pieces.append([])
        elif char == "?":
            pieces[-1].append((".", None))
        elif char == "[":
            j = i
            if j < end and glob[j] in "!^":
                j += 1
            if j < end and glob[j] == "]":
                j += 1
            while j < end and glob[j] != "]":
                j += 1
            if j == end:
                raise PatternError("an unclosed '[' (write '\\[' for the character)")
            negate = glob[i] in "!^"
            pieces[-1].append((_class(glob[i + negate : j], negate), None))
            i = j + 1
        else:
            pieces[-1].append((re.escape(char), char))
    built = []
    for chars in pieces:
        literals = [c for _, c in chars if c is not None]
        if len(literals) == len(chars):
            built.append(_Piece(len(chars), "".join(literals), None))
        else:
            built.append(_Piece(len(chars), None, re.compile("".join(r for r, _ in chars), re.S)))
    return _Name(tuple(built), glob)


# What a pattern reports for a path: no match, a match of one of its folders, of the path itself.
NONE, FOLDER, PATH = 0, 1, 2


@dataclass(frozen=True)
class _Pattern:
    """One line, normalized as git reads it: runs of names, '**' before, between or after them."""

    include: bool  # False for a '!' pattern
    lead: bool  # starts with '**': any folders before the first run
    runs: tuple[tuple[_Name, ...], ...]  # runs of names, '**' between them
    tail: bool  # ends with '**': one name or more after the last run
    anywhere: str | None  # 'path' (any path) or 'folder' (any path in a folder): the patterns * ** */
    hit: int  # what a match ending in a '**' is: FOLDER for a line ending in '/' ('build/'), else PATH
    # A lone name at any depth ('name', '*.md', 'build/': most lines), tested without the general walk.
    single: Callable[[str], bool] | None

    def match(self, parts: Sequence[str], folders: Sequence[str], path: str) -> int:
        """NONE, FOLDER or PATH for ``path``, split into ``parts`` (``folders``: all but the last)."""
        name = self.single
        if name is not None:
            if self.tail:
                return self.hit if any(map(name, folders)) else NONE
            return PATH if name(parts[-1]) else FOLDER if any(map(name, folders)) else NONE
        if self.anywhere is not None:
            if self.anywhere == "path":
                return PATH if path else NONE
            return self.hit if "/" in path else NONE
        if self.tail:
            return self.hit if self._fits(parts, after=True) else NONE
        if self._fits(parts, after=False):
            return PATH
        return FOLDER if self._fits(parts, after=True) else NONE

    def _fits(self, parts: Sequence[str], after: bool) -> bool:
        """Whether the runs fit ``parts`` in order, the last one ending the path (``after``: with
        at least one name left after it)."""
        n = len(parts)
        runs = self.runs
        pos = 0
        if not self.lead:
            first = runs[0]
            if not _run_at(first, parts, 0):
                return False
            pos = len(first)
            runs = runs[1:]
            if not runs:
                return pos < n if after else pos == n
        *middle, last = runs
        if after:
            limit = n - 1
        else:
            limit = n - len(last)
            if limit < pos or not _run_at(last, parts, limit):
                return False
        for run in middle:  # leftmost first, as for the pieces of a name
            start = _find_run(run, parts, pos, limit)
            if start < 0:
                return False
            pos = start + len(run)
        return not after or _find_run(last, parts, pos, limit) >= 0


def _run_at(run: Sequence[_Name], parts: Sequence[str], pos: int) -> bool:
    return pos + len(run) <= len(parts) and all(name.matches(parts[pos + k]) for k, name in enumerate(run))


def _find_run(run: Sequence[_Name], parts: Sequence[str], pos: int, end: int) -> int:
    """The leftmost start >= pos of the run ending <= end, or -1."""
    for start in range(pos, end - len(run) + 1):
        if _run_at(run, parts, start):
            return start
    return -1


def _compile_pattern(line: str) -> _Pattern | None:
    """The pattern of one line, or None for a blank line or a comment.

    Raises:
        PatternError: git would discard the line (the message says why).
    """
    text = line if line.endswith("\\ ") else line.rstrip()
    if not text or text.startswith("#") or text == "/":
        return None
    include = not text.startswith("!")
    if not include:
        text = text[1:]
    segs = text.split("/")
    dir_only = segs[-1] == ""
    if segs[0] == "":
        del segs[0]  # anchored to the folder
    elif (len(segs) == 1 or (len(segs) == 2 and not segs[1])) and segs[0] != _STAR2:
        segs.insert(0, _STAR2)  # a single name matches at any depth
    if not segs:
        raise PatternError("nothing to match after '!'")
    if segs[-1] == "":
        segs[-1] = _STAR2
    segs = [s for k, s in enumerate(segs) if not (k and s == _STAR2 and segs[k - 1] == _STAR2)]
    anywhere = None
    if segs in ([_STAR2], [_STAR2, "*"]):
        anywhere = "folder" if segs == [_STAR2] and dir_only else "path"
    elif segs == [_STAR2, "*", _STAR2]:
        anywhere = "folder"
    runs: list[list[_Name]] = [[]]
    for seg in segs:
        if seg == _STAR2:
            if runs[-1]:
                runs.append([])
        else:
            runs[-1].append(_compile_name(seg))
    if not runs[-1]:
        runs.pop()
    lead, tail = segs[0] == _STAR2, segs[-1] == _STAR2 and len(segs) > 1
    single = runs[0][0].matches if lead and len(runs) == 1 and len(runs[0]) == 1 and not anywhere else None
    hit = FOLDER if dir_only else PATH
    return _Pattern(include, lead, tuple(tuple(r) for r in runs), tail, anywhere, hit, single)


def problem(line: str) -> str | None:
    """Why git would discard the pattern ``line``, or None."""
    try:
        _compile_pattern(line)
    except PatternError as e:
        return str(e)
    return None


class IgnoreSpec:
    """Compiled gitignore lines; `match_file` says whether a path is matched (ignored, excluded or
    included, depending on what the lines are for). Lines git would discard never match."""

    def __init__(self, lines: Iterable[str]) -> None:
        patterns = []
        for line in lines:
            try:
                pattern = _compile_pattern(line)
            except PatternError:
                continue
            if pattern is not None:
                patterns.append(pattern)
        self._patterns = tuple(reversed(patterns))

    def match_file(self, path: str) -> bool:
        """Whether ``path`` ('/'-separated, relative; a folder ends with '/') is matched."""
        if path.startswith("/"):
            path = path[1:]
        elif path.startswith("./"):
            path = path[2:]
        parts = path.split("/")
        folders = parts[:-1]
        folder = None
        for pattern in self._patterns:  # the last pattern first
            found = pattern.match(parts, folders, path)
            if found == PATH:
                return pattern.include
            if found == FOLDER and folder is None:
                folder = pattern.include
        return bool(folder)
