"""Finding the documents to ingest: walking a folder, honouring hidden names, .gitignore files,
include/exclude globs, symlink and size rules; what is skipped is reported with why.

A symlinked file is judged by what it points at: its target must pass the same rules as a file
at the target's own place (so a link cannot smuggle in a hidden file such as ``.env``, or one
under an excluded folder), and a target outside the folder is followed only with
``follow_symlinks``, and then only if no part of its path is hidden or excluded.

What is read is what was checked: discovery records each file's identity (device, inode; a
link's target's), and `read_document` walks from the folder one name at a time without following
links (a folder swapped for a link to elsewhere is refused), opens the file without blocking and
without following a link (unless discovery accepted that link), and compares what it opened with
that identity; a mismatch is a skip with its reason. The same descriptor is checked to be a
regular file of the size allowed, so a FIFO or device swapped in after the walk cannot hang an
ingest. A ``.gitignore`` is read the same way: a FIFO, device, folder or link of that name is
reported and its rules not applied, never waited on.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from mcpower.chunking import CODE_TYPES, SUPPORTED_TYPES, size_limit
from mcpower.defaults import DEFAULT_MAX_FILE_MB
from mcpower.gitignore import IgnoreSpec
from mcpower.sites import site_furniture

DEFAULT_MAX_FILE_BYTES = int(DEFAULT_MAX_FILE_MB * 1024 * 1024)
MAX_GITIGNORE_BYTES = 1024 * 1024  # a bigger .gitignore is not one

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)  # a FIFO swapped in is opened, seen and skipped, not waited on
_NOCTTY = getattr(os, "O_NOCTTY", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_LINK_ERRORS = {errno.ELOOP, errno.EMLINK}  # what O_NOFOLLOW says of a link (EMLINK: FreeBSD)


@dataclass(frozen=True)
class SourceFile:
    """A document found under the folder being ingested."""

    rel: str  # relative to that folder, '/'-separated
    path: Path
    size: int
    mtime: float
    root: Path  # the folder (resolved): `path` is root / rel
    identity: tuple[int, int]  # (st_dev, st_ino) of what discovery checked: the file, or a link's target
    linked: bool = False  # a symlink discovery accepted: read through it, its target must be that file


def code_types_named(glob: str) -> frozenset[str]:
    """The source-code suffixes an include glob names ('*.py' names .py): discovery reads those
    files even without --code."""
    return frozenset(t for t in CODE_TYPES if glob.endswith(t))


class _Rules:
    """Which paths under ``root`` the folder's rules leave out (relative, '/'-separated)."""

    def __init__(
        self,
        root: Path,
        include: Sequence[str],
        exclude: Sequence[str],
        code: bool = False,
        notes: list[tuple[str, str]] | None = None,
    ) -> None:
        self.root = root
        self.include = IgnoreSpec(include) if include else None
        # Source code is read with --code, or when an --include glob names its suffix ('*.py').
        self.code_types = CODE_TYPES if code else frozenset(t for g in include for t in code_types_named(g))
        self.exclude = IgnoreSpec(exclude)
        self.notes = notes if notes is not None else []  # .gitignore files not read, with why
        self._gitignores: dict[str, IgnoreSpec | None] = {}

    def _gitignore(self, rel_dir: str) -> IgnoreSpec | None:
        """The .gitignore of the folder ``rel_dir`` ('' or 'a/b/'), read once."""
        if rel_dir not in self._gitignores:
            text, problem = _read_small(self.root / rel_dir / ".gitignore", MAX_GITIGNORE_BYTES)
            if problem is not None:
                self.notes.append((rel_dir + ".gitignore", f"{problem}, its rules are not applied"))
            self._gitignores[rel_dir] = IgnoreSpec(text.splitlines()) if text else None
        return self._gitignores[rel_dir]

    def gitignored(self, rel: str, is_dir: bool) -> bool:
        probe = rel + ("/" if is_dir else "")
        parts = rel.split("/")[:-1]
        for depth in range(len(parts) + 1):
            base = "".join(p + "/" for p in parts[:depth])
            spec = self._gitignore(base)
            if spec is not None and spec.match_file(probe[len(base) :]):
                return True
        return False

    def dir_reason(self, rel: str) -> str | None:
        """Why the folder ``rel`` is left out, or None."""
        if rel.rsplit("/", 1)[-1].startswith("."):
            return "hidden"
        if self.gitignored(rel, True):
            return "ignored by .gitignore"
        if self.exclude.match_file(rel + "/"):
            return "excluded"
        return None

    def file_reason(self, rel: str) -> str | None:
        """Why the file ``rel`` is left out (its folders taken as passing), or None."""
        name = rel.rsplit("/", 1)[-1]
        if name.startswith("."):
            return "hidden"
        suffix = PurePosixPath(name).suffix.lower()
        if suffix not in SUPPORTED_TYPES and suffix not in self.code_types:
            return "not a supported type"
        if self.gitignored(rel, False):
            return "ignored by .gitignore"
        if self.exclude.match_file(rel):
            return "excluded"
        if self.include is not None and not self.include.match_file(rel):
            return "not included"
        return None

    def path_reason(self, rel: str) -> str | None:
        """Why the file ``rel`` is left out, its folders included."""
        parts = rel.split("/")
        for depth in range(1, len(parts)):
            reason = self.dir_reason("/".join(parts[:depth]))
            if reason:
                return reason
        return self.file_reason(rel)


def discover(
    root: Path,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
    follow_symlinks: bool = False,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    skip_dirs: Sequence[Path] = (),
    code: bool = False,
    keep_site_files: bool = False,
) -> tuple[list[SourceFile], list[tuple[str, str]]]:
    """Supported files under ``root``, honouring hidden names, .gitignore files, the globs and the
    symlink rules (module docstring). Source code files are found with ``code``, or when an
    ``include`` glob ends with their suffix (``*.py``). In a built documentation site, each page
    is read once and its furniture is skipped, unless ``keep_site_files`` (mcpower/sites.py).

    Returns the files (sorted by relative path) and what was skipped with why (files left out by
    a rule the user set up — hidden, ignored, excluded — are left out silently, unless a symlink
    pointed at them).
    """
    root = root.resolve()
    skipped: list[tuple[str, str]] = []
    rules = _Rules(root, include, exclude, code, notes=skipped)
    skip = {p.resolve() for p in skip_dirs}
    files: list[SourceFile] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        here = Path(dirpath)
        rel_dir = here.relative_to(root).as_posix()
        rel_dir = "" if rel_dir == "." else rel_dir + "/"
        dirnames[:] = sorted(
            d for d in dirnames if rules.dir_reason(rel_dir + d) is None and (here / d).resolve() not in skip
        )
        for name in sorted(filenames):
            rel = rel_dir + name
            if rules.file_reason(rel) is not None:
                continue
            found = _examine(root, here / name, rel, rules, follow_symlinks, max_file_bytes)
            if isinstance(found, SourceFile):
                files.append(found)
            else:
                skipped.append((rel, found))
    if not keep_site_files:
        furniture = site_furniture(root, (f.rel for f in files))
        files = [f for f in files if f.rel not in furniture]
        skipped.extend(furniture.items())
    return files, skipped


def _examine(
    root: Path, path: Path, rel: str, rules: _Rules, follow_symlinks: bool, max_file_bytes: int
) -> SourceFile | str:
    """The file, or why it is skipped."""
    try:
        st = os.stat(path, follow_symlinks=False)
        linked = stat.S_ISLNK(st.st_mode)
        if linked:
            target = path.resolve(strict=True)
            reason = _link_reason(root, target, rules, follow_symlinks)
            if reason:
                return reason
            st = os.stat(target)
    except (OSError, RuntimeError) as e:  # RuntimeError: a symlink loop (Python < 3.13)
        return f"cannot read: {getattr(e, 'strerror', None) or 'symlink loop'}"
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    suffix = PurePosixPath(rel).suffix.lower()
    limit = size_limit(suffix, max_file_bytes)
    if st.st_size > limit:
        kind = f" for {suffix} files" if limit != max_file_bytes else ""
        return f"{st.st_size / 1e6:.1f} MB, over the {limit / 1e6:g} MB limit{kind} (--max-file-mb)"
    return SourceFile(rel, path, st.st_size, st.st_mtime, root, (st.st_dev, st.st_ino), linked)


def _link_reason(root: Path, target: Path, rules: _Rules, follow_symlinks: bool) -> str | None:
    """Why a symlink to ``target`` is not followed, or None."""
    if target.is_relative_to(root):
        reason = rules.path_reason(target.relative_to(root).as_posix())
        if reason and reason != "not a supported type":
            return f"symlink to a file that is {reason} ({target.relative_to(root).as_posix()[:200]}): not followed"
        return None
    if not follow_symlinks:
        return "symlink pointing outside the folder (use --follow-symlinks)"
    hidden = [p for p in target.parts if p.startswith(".")]
    if hidden or rules.exclude.match_file(target.as_posix().lstrip("/")):
        return "symlink to a hidden or excluded path outside the folder: not followed"
    return None


def _read_small(path: Path, limit: int) -> tuple[str | None, str | None]:
    """The text of a small file discovery reads for itself (a ``.gitignore``), at most ``limit``
    bytes, or why it was not read (None for both: there is none). Only a regular file is read: it
    is opened without blocking and without following a link, and checked again through the
    descriptor, so a FIFO or a device of that name is never waited on."""
    try:
        st = os.stat(path, follow_symlinks=False)
        if stat.S_ISLNK(st.st_mode):
            return None, "a symlink: not followed"
        if not stat.S_ISREG(st.st_mode):
            return None, "not a regular file: not read"
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | _NONBLOCK | _NOCTTY)
    except FileNotFoundError:
        return None, None
    except OSError as e:
        return None, f"cannot read ({e.strerror}): not read"
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None, "not a regular file: not read"
        data = _read_fd(fd, limit)
    except OSError as e:
        return None, f"cannot read ({e.strerror}): not read"
    finally:
        os.close(fd)
    return data[:limit].decode("utf-8", "replace"), None


def _read_fd(fd: int, limit: int) -> bytes:
    """At most ``limit`` + 1 bytes from ``fd`` (one more than allowed says it is too big)."""
    chunks = []
    remaining = limit + 1
    while remaining > 0 and (block := os.read(fd, min(remaining, 1 << 20))):
        chunks.append(block)
        remaining -= len(block)
    return b"".join(chunks)


_RELINKED = "replaced by a symlink since it was found"
_REPLACED = "replaced since it was found (not the file checked)"


def _open_discovered(source: SourceFile) -> int:
    """A descriptor of the very file discovery checked, reached from its folder one name at a time
    without following a link (but the file's own link, when discovery accepted it).

    Raises:
        OSError: it cannot be opened, is no longer a regular file, or is not the file checked.
    """
    parts = source.rel.split("/")
    if {os.open, os.stat} <= os.supports_dir_fd and _NOFOLLOW:
        folder = _walk(source.root, parts[:-1])
        try:
            _check(os.stat(parts[-1], dir_fd=folder, follow_symlinks=source.linked), source)  # before opening it
            fd = _open_file(parts[-1], source, folder)
        finally:
            os.close(folder)
    else:  # no opening relative to a folder here (Windows): the identity check below remains
        fd = _open_file(str(source.path), source, None)
    try:
        _check(os.fstat(fd), source)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _walk(root: Path, names: Sequence[str]) -> int:
    """A descriptor of the folder root/names..., no name of which may be a link."""
    folder = os.open(root, os.O_RDONLY | _DIRECTORY)
    try:
        for name in names:
            try:
                inner = os.open(name, os.O_RDONLY | _DIRECTORY | _NOFOLLOW, dir_fd=folder)
            except OSError as e:
                if e.errno not in _LINK_ERRORS and e.errno != errno.ENOTDIR:
                    raise
                if e.errno == errno.ENOTDIR and not _is_link(name, folder):  # Linux says ENOTDIR of a link too
                    raise OSError(e.errno, "a folder on its path is no longer a folder") from e
                raise OSError(e.errno, "a folder on its path was replaced by a symlink since it was found") from e
            os.close(folder)
            folder = inner
    except BaseException:
        os.close(folder)
        raise
    return folder


def _is_link(name: str, folder: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _open_file(name: str, source: SourceFile, folder: int | None) -> int:
    try:
        return os.open(name, os.O_RDONLY | _NONBLOCK | _NOCTTY | (0 if source.linked else _NOFOLLOW), dir_fd=folder)
    except OSError as e:
        if e.errno in _LINK_ERRORS and not source.linked:
            raise OSError(e.errno, _RELINKED) from e
        raise


def _check(st: os.stat_result, source: SourceFile) -> None:
    if stat.S_ISLNK(st.st_mode):
        raise OSError(errno.ELOOP, _RELINKED)
    if not stat.S_ISREG(st.st_mode):
        raise OSError(0, "no longer a regular file")
    if (st.st_dev, st.st_ino) != source.identity:
        raise OSError(0, _REPLACED)


def read_document(source: SourceFile, max_file_bytes: int) -> tuple[bytes, os.stat_result]:
    """The bytes of a discovered file, read through one descriptor of the very file discovery
    checked (`_open_discovered`), a regular file within the size limit (it may have changed since
    it was discovered), and its status just before they were read (so a size and time recorded
    with them are never newer than the bytes).

    Raises:
        OSError: it cannot be read, is no longer a regular file of an allowed size, or is no longer
            the file discovery checked (it, or a folder on its path, was replaced).
    """
    fd = _open_discovered(source)
    try:
        st = os.fstat(fd)
        if st.st_size > max_file_bytes:
            raise OSError(0, f"grew to {st.st_size / 1e6:.1f} MB, over the {max_file_bytes / 1e6:g} MB limit")
        data = _read_fd(fd, max_file_bytes)
        if len(data) > max_file_bytes:
            raise OSError(0, f"grew over the {max_file_bytes / 1e6:g} MB limit")
        return data, st
    finally:
        os.close(fd)
