"""What a watcher may read: the operator's limits, and a dataset's recorded options within them.

A manifest is data: whoever can write the datasets folder can write its source record. So the
record says how a dataset was built, and the watcher re-ingests it that way only as far as the
limits of whoever runs the watcher allow (``serve --watch``: its settings; ``ingest PATH --watch``:
that command's options). A record can narrow what is read, never widen it:

    follow_symlinks   the operator's AND the record's
    max_file_bytes    the smaller of the two
    code              the operator's AND the record's (`serve --watch` allows it unless told not
                      to: code files lie in the dataset's own folder, which crosses no boundary)
    include           the record's globs: they only choose among the files the rules let through
                      (never a hidden, .gitignored or excluded one); but a glob naming a code
                      suffix ('*.py'), which makes discovery read that kind of code, is read as
                      naming folders only ('*.py/') unless the operator allows code
    exclude           the record's globs: they only leave files out
    keep_site_files   the record's: a built site's furniture lies in the dataset's own folder
    keep_duplicates   the record's: duplicates lie in the dataset's own folder too

The record itself is kept as it is (a re-ingest writes it back unchanged), so a watcher with wider
limits, or the owner's own ``mcpower ingest``, builds the dataset as recorded again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mcpower.defaults import DEFAULT_EMBEDDING_STORE_MB
from mcpower.discover import DEFAULT_MAX_FILE_BYTES, code_types_named
from mcpower.manifest import SourceInfo


@dataclass(frozen=True)
class WatchLimits:
    """The most a watcher's re-ingests may read, whatever a manifest records (the defaults: what
    ``mcpower ingest`` reads with no options)."""

    follow_symlinks: bool = False
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
    code: bool = False
    embedding_store_mb: float = DEFAULT_EMBEDDING_STORE_MB  # the operator's, not the record's: a cache of theirs

    @classmethod
    def of_ingest(
        cls,
        include: Sequence[str],
        code: bool,
        follow_symlinks: bool,
        max_file_bytes: int,
        embedding_store_mb: float = DEFAULT_EMBEDDING_STORE_MB,
    ) -> WatchLimits:
        """The limits of an ingest the user ran: what it read, nothing more."""
        code = code or any(code_types_named(g) for g in include)
        return cls(follow_symlinks, max_file_bytes, code, embedding_store_mb)


@dataclass(frozen=True)
class Selection:
    """The options a re-ingest chooses its files with: a record within the limits."""

    include: tuple[str, ...]
    exclude: tuple[str, ...]
    follow_symlinks: bool
    max_file_bytes: int
    code: bool
    keep_site_files: bool = False
    keep_duplicates: bool = False


def within(src: SourceInfo, limits: WatchLimits) -> Selection:
    """The record ``src`` narrowed to ``limits`` (module docstring)."""
    include = src.include if limits.code else tuple(g + "/" if code_types_named(g) else g for g in src.include)
    return Selection(
        include=include,
        exclude=src.exclude,
        follow_symlinks=src.follow_symlinks and limits.follow_symlinks,
        max_file_bytes=min(src.max_file_bytes, limits.max_file_bytes),
        code=src.code and limits.code,
        keep_site_files=src.keep_site_files,
        keep_duplicates=src.keep_duplicates,
    )


def narrowed(src: SourceInfo, limits: WatchLimits) -> list[str]:
    """What the record asks for beyond ``limits``, for the operator (empty: nothing)."""
    why = []
    if src.follow_symlinks and not limits.follow_symlinks:
        why.append("symlinks out of its folder are not followed (serve --watch-follow-symlinks allows it)")
    if src.max_file_bytes > limits.max_file_bytes:
        why.append(f"files over {limits.max_file_bytes / 1e6:g} MB are skipped (MCPOWER_MAX_FILE_MB raises it)")
    if not limits.code and (src.code or any(code_types_named(g) for g in src.include)):
        why.append("source code is not read (serve --watch-code allows it)")
    return why
