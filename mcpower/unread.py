"""What a folder holds that ingest does not read: when a folder yields no document, the error names
what is there (files counted by suffix) and why each kind is not read, instead of only listing the
formats that are.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from mcpower.chunking import CODE_TYPES, SUPPORTED_TYPES

MAX_NAMES = 100_000  # names looked at, at most: an error message does not walk a huge tree to its end
SHOWN = 6  # suffixes named; the rest are counted

# Kinds of files people keep beside documents, and why ingest does not read them.
KINDS: tuple[tuple[frozenset[str], str], ...] = (
    (
        frozenset(
            [
                ".png",
                ".jpg",
                ".jpeg",
                ".gif",
                ".svg",
                ".webp",
                ".bmp",
                ".tif",
                ".tiff",
                ".heic",
                ".heif",
                ".ico",
                ".avif",
                ".psd",
                ".raw",
                ".cr2",
                ".nef",
                ".dng",
            ]
        ),
        "images have no text to read (mcpower does not recognise text in images)",
    ),
    (
        frozenset(
            [
                ".mp3",
                ".wav",
                ".flac",
                ".ogg",
                ".opus",
                ".m4a",
                ".aac",
                ".mp4",
                ".m4v",
                ".mkv",
                ".mov",
                ".avi",
                ".webm",
                ".wmv",
            ]
        ),
        "audio and video have no text to read",
    ),
    (
        frozenset(
            [".zip", ".tar", ".gz", ".tgz", ".bz2", ".xz", ".zst", ".7z", ".rar", ".jar", ".whl", ".deb", ".rpm"]
        ),
        "archives and compressed files are not opened: unpack them first",
    ),
    (
        frozenset(
            [".doc", ".xls", ".xlsx", ".ppt", ".pptx", ".odt", ".ods", ".odp", ".rtf", ".pages", ".key", ".numbers"]
        ),
        "these office formats are not read: save them as .docx, .pdf or .html",
    ),
    (frozenset([".epub", ".mobi", ".azw3", ".djvu", ".chm"]), "e-books are not read: convert them to .html or .pdf"),
    (
        frozenset(
            [
                ".json",
                ".yaml",
                ".yml",
                ".csv",
                ".tsv",
                ".xml",
                ".toml",
                ".ini",
                ".cfg",
                ".conf",
                ".sqlite",
                ".db",
                ".parquet",
                ".log",
            ]
        ),
        "data and configuration files are not read as documents (--include '*.json' does not change that)",
    ),
)
_CODE = "source code is read with --code"
_OTHER = "not a format mcpower reads"
_RULES = "left out by .gitignore, --exclude or --include"


def what_is_there(root: Path, skipped: Sequence[tuple[str, str]] = (), skip_dirs: Sequence[Path] = ()) -> str:
    """Why a folder gave no document: what it holds, by kind, and what mcpower reads; e.g. 'found
    12 .jpg and 3 .png: images have no text to read (...); mcpower reads .docx, .html, ...'."""
    counts, hidden = _count(root, {p.resolve() for p in skip_dirs})
    reading = f"mcpower reads {', '.join(sorted(SUPPORTED_TYPES))}"
    skipped_here = {PurePosixPath(rel).suffix.lower() for rel, _ in skipped}
    if not counts:
        empty = "the folder is empty" if not hidden else f"it holds only hidden files or folders ({hidden})"
        return f"{empty}; {reading}"
    groups: dict[str, Counter[str]] = {}
    for suffix, n in counts.most_common():
        groups.setdefault(_why(suffix, suffix in skipped_here), Counter())[suffix] = n
    parts = []
    for why, found in groups.items():
        named = [f"{n:,} {suffix or 'without a suffix'}" for suffix, n in found.most_common(SHOWN)]
        rest = sum(found.values()) - sum(n for _, n in found.most_common(SHOWN))
        if rest:
            named.append(f"{rest:,} more")
        parts.append(f"{_and(named)}: {why}")
    return f"found {'; '.join(parts)}; {reading}"


def _why(suffix: str, skipped: bool) -> str:
    if suffix in SUPPORTED_TYPES:
        return "skipped, for the reasons below" if skipped else _RULES
    if suffix in CODE_TYPES:
        return _CODE
    return next((why for kinds, why in KINDS if suffix in kinds), _OTHER)


def _count(root: Path, skip: set[Path]) -> tuple[Counter[str], int]:
    """Files under ``root`` by lower-case suffix (hidden ones and hidden folders aside, symlinked
    folders not entered), and how many hidden names were passed over."""
    counts: Counter[str] = Counter()
    hidden = 0
    seen = 0
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        here = Path(dirpath)
        hidden += sum(1 for d in dirnames if d.startswith(".")) + sum(1 for f in filenames if f.startswith("."))
        dirnames[:] = [d for d in dirnames if not d.startswith(".") and (here / d).resolve() not in skip]
        for name in filenames:
            if not name.startswith("."):
                counts[PurePosixPath(name).suffix.lower()] += 1
        seen += len(filenames) + len(dirnames)
        if seen > MAX_NAMES:
            break
    return counts, hidden


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]
