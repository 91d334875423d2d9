"""Finding the documents to ingest: walking a folder, honouring .gitignore files, hidden names,
include/exclude globs, symlink and size rules; what is skipped is reported with why."""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from mcpower.chunking import SUPPORTED_TYPES
from mcpower.defaults import DEFAULT_MAX_FILE_MB

DEFAULT_MAX_FILE_BYTES = int(DEFAULT_MAX_FILE_MB * 1024 * 1024)


@dataclass(frozen=True)
class SourceFile:
    """A document found under the folder being ingested."""

    rel: str  # relative to that folder, '/'-separated
    path: Path
    size: int
    mtime: float


def discover(
    root: Path,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
    follow_symlinks: bool = False,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    skip_dirs: Sequence[Path] = (),
) -> tuple[list[SourceFile], list[tuple[str, str]]]:
    """Supported files under ``root``, honouring .gitignore files, hidden names and the globs.

    Returns the files (sorted by relative path) and what was skipped with why.
    """
    import pathspec

    root = root.resolve()
    inc = pathspec.GitIgnoreSpec.from_lines(include) if include else None
    exc = pathspec.GitIgnoreSpec.from_lines(exclude)
    skip = {p.resolve() for p in skip_dirs}
    ignores: list[tuple[str, pathspec.GitIgnoreSpec]] = []
    files: list[SourceFile] = []
    skipped: list[tuple[str, str]] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        here = Path(dirpath)
        rel_dir = here.relative_to(root).as_posix()
        rel_dir = "" if rel_dir == "." else rel_dir + "/"
        gi = here / ".gitignore"
        if gi.is_file():
            ignores.append((rel_dir, pathspec.GitIgnoreSpec.from_lines(gi.read_text(errors="replace").splitlines())))

        def ignored(rel: str, is_dir: bool) -> bool:
            probe = rel + ("/" if is_dir else "")
            return any(probe.startswith(base) and spec.match_file(probe[len(base) :]) for base, spec in ignores)

        dirnames[:] = sorted(
            d
            for d in dirnames
            if not d.startswith(".")
            and not ignored(rel_dir + d, True)
            and (here / d).resolve() not in skip
            and not exc.match_file(rel_dir + d + "/")
        )
        for name in sorted(filenames):
            rel = rel_dir + name
            suffix = Path(name).suffix.lower()
            if name.startswith(".") or suffix not in SUPPORTED_TYPES or ignored(rel, False):
                continue
            if exc.match_file(rel) or (inc is not None and not inc.match_file(rel)):
                continue
            path = here / name
            try:
                st = os.stat(path, follow_symlinks=False)
                if stat.S_ISLNK(st.st_mode):
                    target = path.resolve()
                    if not follow_symlinks and not target.is_relative_to(root):
                        skipped.append((rel, "symlink pointing outside the folder (use --follow-symlinks)"))
                        continue
                    st = os.stat(target)
            except OSError as e:
                skipped.append((rel, f"cannot read: {e.strerror}"))
                continue
            if not stat.S_ISREG(st.st_mode):
                skipped.append((rel, "not a regular file"))
            elif st.st_size > max_file_bytes:
                skipped.append((rel, f"{st.st_size / 1e6:.1f} MB, over the {max_file_bytes / 1e6:g} MB limit"))
            else:
                files.append(SourceFile(rel, path, st.st_size, st.st_mtime))
    return files, skipped
