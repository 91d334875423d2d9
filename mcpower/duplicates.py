"""Duplicate documents: one file reached twice, and one text twice. Each is indexed once.

**One file reached twice** — a symlink to a file also found in the folder (Debian's git-doc:
``index.html -> git.html``), two hard links of one inode, two symlinks to one file outside — is one
document. Discovery judged each link by its target and recorded the target's identity (device,
inode), so the files sharing an identity are one, kept under its canonical path: the file's own
path before any link's; between hard links or links, the shortest path, then the first in order.

**One text twice** is found from the text ingest stores for each document (for HTML, PDF and Word,
the text extracted from it), after reading and before anything is embedded:

- the same words: the same bytes, or the same words once markup, punctuation, case and whitespace
  are set aside (a copy in another folder, a page saved both as ``.md`` and ``.txt``);
- a page and its source or rendering in one folder: the same stem (``git-add.txt`` and
  ``git-add.html``, ``bash.html`` and ``bash.pdf``) and ``SOURCE_OF`` of the smaller one's word
  triples found in the other (rendering drops and adds markup words: ``linkgit:git-add[1]``
  becomes ``git-add(1)``; an ``include::`` makes the page bigger than its source);
- a fragment included in a rendered page of its folder (AsciiDoc's ``include::diff-options.txt[]``,
  shipped beside the pages that include it): ``INCLUDED_IN`` of a source's word triples found in
  one HTML or PDF page.

The one kept is the rendered page, as for built sites (mcpower/sites.py): a result then names the
page a reader opens, and only the page has what its source includes. By format: HTML, PDF, Word,
Markdown, reST, notebook, text, code; then the shortest path, then the first in order. Texts of
fewer than ``MIN_WORDS`` words are never called duplicates (two one-line stubs are two pages, and
a handful of words says too little to compare).

The detector keeps hashes, never texts: a 16-byte digest of each document's words and, only for a
document with a same-stem partner or a source in a folder with a rendered page, a sample of at most
``SAMPLE_CAP`` hashes of its word triples (all of them for a short text; else those whose hash is 0
modulo a power of two, an unbiased sample). A share is that sample's part found among all the
other document's triples, hashed again from the text the ingest holds for it, one document at a
time, when a pair is compared.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from mcpower.discover import SourceFile

# Formats a page is rendered to, most rendered first: the one kept of a pair.
RENDERED = (".html", ".htm", ".pdf", ".docx")
# Then the formats pages are written in, richest markup first.
_SOURCE_ORDER = (".md", ".markdown", ".mdx", ".rst", ".rest", ".ipynb", ".txt")

MIN_WORDS = 12  # shorter texts are never called duplicates (module docstring)
SHINGLE = 3  # words per shingle: long enough that unrelated pages of one package share few (~0-5%)
# A source's share of word triples found in its same-stem rendering. Measured on Debian's git-doc
# (239 AsciiDoc sources beside their HTML pages): 0.82-1.00, but for a page that is mostly an
# include (gitglossary.txt, 0.34: its own few lines are links the rendering rewrites). Unrelated
# pages of one folder share 0.00-0.06 (docs/datasets.md#duplicates has the measurements).
SOURCE_OF = 0.3
# A fragment's share found in one rendered page of its folder. git-doc's 44 include fragments (every
# .txt there without a page of its own but one) score 0.66-1.00 in the page that includes them: the
# rendering drops AsciiDoc's macro words (`linkgit:git-add[1]::` becomes `git-add(1)`), most in the
# generated command lists (cmds-*.txt, 0.66-0.81). The one source that is a document of its own
# (git-subtree.txt) scores 0.11 in the page nearest to it.
INCLUDED_IN = 0.6
SAMPLE_CAP = 256  # hashes kept per document at most: 2 KB

_WORD = re.compile(r"[^\W_]+")  # letters and digits: '_no_' (Markdown's emphasis) is 'no', as rendered
_WORD_CHARS = 24  # code points of a word that its hash reads
# Fixed, so a text hashes alike in every run (a sample is the same from one ingest to the next).
_WEIGHTS = np.random.default_rng(20261128).integers(1, 2**63, size=_WORD_CHARS, dtype=np.uint64) | np.uint64(1)


@dataclass(frozen=True)
class Duplicate:
    """A document indexed once: ``path`` was not read (or dropped) because ``kept`` holds it."""

    path: str
    kept: str
    why: str  # SAME_FILE_LINK ... INCLUDED


SAME_FILE_LINK = "same file (a symlink to it)"
SAME_FILE_HARD = "same file (a hard link)"
SAME_BYTES = "same bytes"
SAME_WORDS = "same text, markup and whitespace aside"
SOURCE = "source or other rendering of the page kept"
INCLUDED = "included in the page kept"


def reason(d: Duplicate) -> str:
    """How a duplicate reads in a list of skipped files."""
    return f"duplicate of {d.kept}: {d.why}"


def rank(rel: str) -> tuple[int, int, int, str]:
    """Which of two copies is kept: the smaller (rendered page first, then the shorter path)."""
    suffix = PurePosixPath(rel).suffix.lower()
    order = RENDERED + _SOURCE_ORDER
    kind = order.index(suffix) if suffix in order else len(order)
    return kind, rel.count("/"), len(rel), rel


def same_files(files: Sequence[SourceFile]) -> tuple[list[SourceFile], list[Duplicate]]:
    """``files`` with each file reached more than once (symlinks, hard links) kept once, under its
    canonical path (module docstring); and the others, as duplicates of it."""
    by_identity: dict[tuple[int, int], list[SourceFile]] = defaultdict(list)
    for f in files:
        if f.identity[1]:  # a file system that gives no inode numbers (0) says nothing of sameness
            by_identity[f.identity].append(f)
    dropped: set[str] = set()
    duplicates = []
    for group in by_identity.values():
        if len(group) < 2:
            continue
        keep = min(group, key=lambda f: (f.linked, f.rel.count("/"), len(f.rel), f.rel))
        for f in group:
            if f is not keep:
                dropped.add(f.rel)
                duplicates.append(Duplicate(f.rel, keep.rel, SAME_FILE_LINK if f.linked else SAME_FILE_HARD))
    return [f for f in files if f.rel not in dropped], sorted(duplicates, key=lambda d: d.path)


@dataclass
class _Sketch:
    rel: str
    words: int
    digest: bytes  # of the words
    raw: str  # sha256 of the file's bytes
    probes: NDArray[np.uint64] | None = None  # a sample of its word triples' hashes, sorted, unique

    @property
    def suffix(self) -> str:
        return PurePosixPath(self.rel).suffix.lower()


def _folder_and_stem(rel: str) -> tuple[str, str]:
    """('a/b', 'git-add') for 'a/b/git-add.txt'; a source's own suffix goes too ('x.rst.txt': 'x')."""
    p = PurePosixPath(rel)
    stem = p.stem
    if PurePosixPath(stem).suffix.lower() in RENDERED + _SOURCE_ORDER:
        stem = PurePosixPath(stem).stem
    return str(p.parent), stem


TextOf = Callable[[str], str]  # a document's stored text, by path


class Duplicates:
    """Finds the documents whose text another one holds: ``add`` each document's stored text as it
    is read, then ``resolve``. Built with every path the ingest will read, so it samples only
    where a rule can use a sample."""

    def __init__(self, rels: Iterable[str]) -> None:
        rels = list(rels)
        stems = Counter(_folder_and_stem(r) for r in rels)
        rendered_in = {_folder_and_stem(r)[0] for r in rels if PurePosixPath(r).suffix.lower() in RENDERED}
        # Sampled: documents with a same-stem partner, and sources in a folder with a rendered page
        # (a rendered page is only ever looked in, from its text).
        self._sampled = {
            r
            for r in rels
            if stems[_folder_and_stem(r)] > 1
            or (_folder_and_stem(r)[0] in rendered_in and PurePosixPath(r).suffix.lower() not in RENDERED)
        }
        self._sketches: dict[str, _Sketch] = {}

    def add(self, rel: str, content_hash: str, text: str) -> None:
        """Remember what is needed of one document's text (``content_hash``: its file's sha256)."""
        words = _WORD.findall(text.lower())
        digest = hashlib.blake2b("\x00".join(words).encode("utf-8", "surrogatepass"), digest_size=16).digest()
        sketch = _Sketch(rel, len(words), digest, content_hash)
        if rel in self._sampled and len(words) >= MIN_WORDS:
            sketch.probes = _sample(triples(words))
        self._sketches[rel] = sketch

    def resolve(self, text_of: TextOf) -> list[Duplicate]:
        """The documents to drop, each with the one kept instead, sorted by path; ``text_of`` gives
        the text of a document added, to compare another's sample with."""
        found: dict[str, Duplicate] = {}
        alive = [s for s in self._sketches.values() if s.words >= MIN_WORDS]
        for by_bytes, why in ((True, SAME_BYTES), (False, SAME_WORDS)):
            groups: dict[object, list[_Sketch]] = defaultdict(list)
            for s in alive:
                groups[s.raw if by_bytes else s.digest].append(s)
            for group in groups.values():
                keep = min(group, key=lambda s: rank(s.rel))
                for s in group:
                    if s is not keep:
                        found[s.rel] = Duplicate(s.rel, keep.rel, why)
            alive = [s for s in alive if s.rel not in found]
        folders: dict[str, list[_Sketch]] = defaultdict(list)
        for s in alive:
            folders[_folder_and_stem(s.rel)[0]].append(s)
        for docs in folders.values():
            for d in _compare(docs, text_of):
                found[d.path] = d
        return sorted(found.values(), key=lambda d: d.path)


def _compare(docs: list[_Sketch], text_of: TextOf) -> list[Duplicate]:
    """The duplicates among the documents of one folder: sources and renderings of one page (same
    stem), then sources included in a rendered page. Each document whose triples are looked
    in is hashed again once, for both rules."""
    stems: dict[str, list[_Sketch]] = defaultdict(list)
    for s in docs:
        if s.probes is not None:
            stems[_folder_and_stem(s.rel)[1]].append(s)
    # (probe, container, kept, dropped): the smaller text's sample is looked for in the bigger one.
    pairs: dict[str, list[tuple[_Sketch, _Sketch, _Sketch]]] = defaultdict(list)
    for group in stems.values():
        group.sort(key=lambda s: rank(s.rel))
        keep = group[0]  # the most rendered of them; the others are its sources or renderings
        for s in group[1:]:
            probe, container = (s, keep) if s.words <= keep.words else (keep, s)
            pairs[container.rel].append((probe, keep, s))
    sources = [s for s in docs if s.suffix not in RENDERED and s.probes is not None]
    pages = {s.rel for s in docs if s.suffix in RENDERED} if sources else set()
    lookup = _Lookup(sources)
    out: dict[str, Duplicate] = {}
    for container in sorted(docs, key=lambda s: rank(s.rel)):
        if container.rel not in pairs and container.rel not in pages:
            continue
        whole = triples(_WORD.findall(text_of(container.rel).lower()))
        for probe, keep, dropped in pairs.get(container.rel, ()):
            if _share(probe.probes, whole) >= SOURCE_OF:
                out[dropped.rel] = Duplicate(dropped.rel, keep.rel, SOURCE)
        if container.rel in pages:
            lookup.look_in(container, whole)
    for s, page in lookup.included():
        if s.rel not in out and page.rel not in out:
            out[s.rel] = Duplicate(s.rel, page.rel, INCLUDED)
    return list(out.values())


class _Lookup:
    """The samples of a folder's sources, looked up together in each rendered page's triples."""

    def __init__(self, sources: list[_Sketch]) -> None:
        self.sources = [s for s in sources if s.probes is not None and len(s.probes)]
        samples = [s.probes for s in self.sources if s.probes is not None]
        probes = np.concatenate(samples) if samples else np.zeros(0, dtype=np.uint64)
        owners = np.repeat(np.arange(len(samples)), [len(p) for p in samples])
        order = np.argsort(probes, kind="stable")
        self.probes, self.owners = probes[order], owners[order]
        self.sizes = np.array([len(p) for p in samples], dtype=np.float64)
        self.best = np.zeros(len(samples))
        self.best_page: list[_Sketch | None] = [None] * len(samples)

    def look_in(self, page: _Sketch, whole: NDArray[np.uint64]) -> None:
        """Count each source's sample found in ``page`` (pages come most rendered first: a tie
        keeps the first)."""
        if not self.sources:
            return
        lo = np.searchsorted(self.probes, whole, side="left")
        hi = np.searchsorted(self.probes, whole, side="right")
        lengths = hi - lo  # how many sources hold each of the page's triples (mostly 0 or 1)
        starts = np.repeat(lo, lengths)
        steps = np.arange(len(starts)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        shares = np.bincount(self.owners[starts + steps], minlength=len(self.sources)) / self.sizes
        for i in np.flatnonzero(shares > self.best).tolist():
            if page.words >= self.sources[i].words:
                self.best[i], self.best_page[i] = shares[i], page

    def included(self) -> list[tuple[_Sketch, _Sketch]]:
        """(source, the page holding INCLUDED_IN of it)."""
        out = []
        for s, share, page in zip(self.sources, self.best.tolist(), self.best_page, strict=True):
            if page is not None and share >= INCLUDED_IN:
                out.append((s, page))
        return out


def triples(words: Sequence[str]) -> NDArray[np.uint64]:
    """The distinct 64-bit hashes of a text's word triples (SHINGLE words), sorted.

    A word's hash weighs each of its first ``_WORD_CHARS`` code points by a fixed random 64-bit
    number (numpy does it for all words at once; two long words alike that far hash alike, which
    costs nothing here); a triple's hash combines its words', then mixes the bits.
    """
    if not words:
        return np.zeros(0, dtype=np.uint64)
    codes = np.array(words, dtype=f"U{_WORD_CHARS}").view(np.uint32).reshape(len(words), _WORD_CHARS)
    with np.errstate(over="ignore"):
        ids = (codes.astype(np.uint64) * _WEIGHTS).sum(axis=1, dtype=np.uint64)
        n = max(len(ids) - SHINGLE + 1, 1)
        h = np.zeros(n, dtype=np.uint64)
        for j in range(SHINGLE):
            part = ids[j : j + n]
            h[: len(part)] = (h[: len(part)] * np.uint64(0x100000001B3)) ^ part
    return np.unique(_mix(h))


def _sample(hashes: NDArray[np.uint64]) -> NDArray[np.uint64]:
    """All of ``hashes`` if they are few, else those 0 modulo the least power of two that keeps
    about SAMPLE_CAP of them."""
    modulus = 1
    while len(hashes) // modulus > SAMPLE_CAP:
        modulus *= 2
    return hashes if modulus == 1 else hashes[hashes % np.uint64(modulus) == 0]


def _mix(h: NDArray[np.uint64]) -> NDArray[np.uint64]:
    """splitmix64's finaliser: every input bit moves every output bit, so the low bits a modulus
    looks at are as random as the rest."""
    with np.errstate(over="ignore"):
        h = (h ^ (h >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        h = (h ^ (h >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        mixed: NDArray[np.uint64] = h ^ (h >> np.uint64(31))
        return mixed


def _share(probes: NDArray[np.uint64] | None, whole: NDArray[np.uint64]) -> float:
    """The share of a sample of one text's triples found among all of another's."""
    if probes is None or len(probes) == 0:
        return 0.0
    return float(np.isin(probes, whole, assume_unique=True).mean())
