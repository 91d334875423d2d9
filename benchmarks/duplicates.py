"""Duplicate documents in real documentation folders: what ingest skips, and how far from the lines.

    python benchmarks/duplicates.py                  # every folder found on this machine
    python benchmarks/duplicates.py FOLDER ...       # these folders
    python benchmarks/duplicates.py --show 20        # and list up to 20 duplicates of each kind

Each folder is discovered and read exactly as `mcpower ingest` reads it (mcpower.discover, the
format readers in their worker), then given to mcpower.duplicates. Printed per folder: documents
read, duplicates by kind, the time the detector took against the time reading took, and the
**margins** of the two rules that compare shares of word triples:

- same stem: the lowest share among pairs called duplicates, and the highest among same-stem pairs
  left alone (the line is mcpower.duplicates.SOURCE_OF);
- included: the lowest share among fragments called included, and the highest share any other
  source of the folder has in any rendered page of the folder (the line is INCLUDED_IN).

A false positive would show as a pair called a duplicate that is not one: the lists (``--show``)
are for reading them. Folders: Debian's git-doc, bash-doc, debian-policy, developers-reference,
python3.11-doc and cmake-doc (with their Sphinx furniture kept, so their ``_sources`` copies are in),
vim-doc; FastAPI's docs (shared/bench); mcpower's own docs/. The ones not installed
are left out (``apt-get install git-doc`` ...). Writes JSON to benchmarks/results/duplicates.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np

from mcpower import duplicates
from mcpower.chunking import UnreadableError, size_limit
from mcpower.chunking.worker import Reader
from mcpower.discover import DEFAULT_MAX_FILE_BYTES, discover, read_document

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
BENCH_CORPORA = Path(os.environ.get("MCPOWER_BENCH_CORPORA", "/work/shared/bench"))
FOLDERS: list[tuple[str, Path, bool]] = [  # (name, folder, keep site files)
    ("git-doc", Path("/usr/share/doc/git-doc"), False),
    ("bash-doc", Path("/usr/share/doc/bash"), False),  # bash-doc links its pages there
    ("debian-policy", Path("/usr/share/doc/debian-policy"), False),
    ("developers-reference", Path("/usr/share/developers-reference"), True),
    ("python3.11-doc", Path("/usr/share/doc/python3.11/html"), True),
    ("cmake-doc", Path("/usr/share/doc/cmake-data/html"), True),
    ("vim-doc", Path("/usr/share/doc/vim/html"), False),
    ("fastapi", BENCH_CORPORA / "docs-fastapi" / "corpus", False),
    ("mcpower-docs", REPO / "docs", False),
]
_WORD = re.compile(r"\w+")


def read(root: Path, keep_site_files: bool) -> tuple[dict[str, tuple[str, str]], list[duplicates.Duplicate], float]:
    """{path: (sha256 of the bytes, stored text)} of every document ingest would read, the files
    reached twice, and the seconds reading took."""
    import hashlib

    started = time.perf_counter()
    files, _ = discover(root, keep_site_files=keep_site_files)
    files, links = duplicates.same_files(files)
    texts: dict[str, tuple[str, str]] = {}
    with Reader() as reader:
        for f in files:
            suffix = PurePosixPath(f.rel).suffix.lower()
            try:
                raw, _ = read_document(f, size_limit(suffix, DEFAULT_MAX_FILE_BYTES))
                text = reader.read(raw, suffix).text  # the Reader sets it, for every format
                texts[f.rel] = (hashlib.sha256(raw).hexdigest(), text or "")
            except (OSError, UnreadableError):
                continue
    return texts, links, time.perf_counter() - started


def margins(texts: dict[str, tuple[str, str]], found: list[duplicates.Duplicate]) -> dict[str, Any]:
    """The shares either side of each line (module docstring)."""
    called = {d.path: d for d in found}
    trip = {rel: duplicates.triples(_WORD.findall(t.lower())) for rel, (_, t) in texts.items()}
    words = {rel: len(_WORD.findall(t)) for rel, (_, t) in texts.items()}

    def share(part: str, whole: str) -> float:
        a = trip[part]
        return float(np.isin(a, trip[whole]).mean()) if len(a) else 0.0

    def key(rel: str) -> tuple[str, str]:
        p = PurePosixPath(rel)
        stem = p.stem
        if PurePosixPath(stem).suffix.lower() in (*duplicates.RENDERED, ".md", ".rst", ".txt"):
            stem = PurePosixPath(stem).stem
        return str(p.parent), stem

    stems: dict[tuple[str, str], list[str]] = defaultdict(list)
    for rel in texts:
        if words[rel] >= duplicates.MIN_WORDS:
            stems[key(rel)].append(rel)
    Side = list[tuple[float, str, str]]
    stem_in: Side = []
    stem_out: Side = []
    for group in stems.values():
        if len(group) < 2:
            continue
        group.sort(key=duplicates.rank)
        for other in group[1:]:
            small, big = (other, group[0]) if words[other] <= words[group[0]] else (group[0], other)
            s = share(small, big)
            hit = called.get(other)
            (stem_in if hit is not None and hit.why == duplicates.SOURCE else stem_out).append((s, other, group[0]))
    inc_in: Side = []
    inc_out: Side = []
    pages_by_folder: dict[str, list[str]] = defaultdict(list)
    for rel in texts:
        if PurePosixPath(rel).suffix.lower() in duplicates.RENDERED:
            pages_by_folder[key(rel)[0]].append(rel)
    for rel in texts:
        if PurePosixPath(rel).suffix.lower() in duplicates.RENDERED or words[rel] < duplicates.MIN_WORDS:
            continue
        hit = called.get(rel)
        if hit is not None and hit.why != duplicates.INCLUDED:
            continue
        best = max(((share(rel, p), p) for p in pages_by_folder.get(key(rel)[0], [])), default=None)
        if best is not None:
            (inc_in if hit is not None else inc_out).append((best[0], rel, best[1]))

    def low(xs: list[tuple[float, str, str]]) -> Any:
        return min(xs) if xs else None

    def high(xs: list[tuple[float, str, str]]) -> Any:
        return max(xs) if xs else None

    return {
        "same_stem_lowest_called": low(stem_in),
        "same_stem_highest_left": high(stem_out),
        "included_lowest_called": low(inc_in),
        "included_highest_left": high(inc_out),
    }


def run(name: str, root: Path, keep_site_files: bool, show: int) -> dict[str, Any]:
    texts, links, read_seconds = read(root, keep_site_files)
    started = time.perf_counter()
    finder = duplicates.Duplicates(texts)
    for rel, (raw, text) in texts.items():
        finder.add(rel, raw, text)
    found = finder.resolve(lambda rel: texts[rel][1])
    detect_seconds = time.perf_counter() - started
    kinds = Counter(d.why for d in links + found)
    examples = {why: [(d.path, d.kept) for d in links + found if d.why == why][:show] for why in kinds}
    shares = margins(texts, found)
    row: dict[str, Any] = {
        "folder": name,
        "path": str(root),
        "documents": len(texts) + len(links),
        "kept": len(texts) - len(found),
        "duplicates": dict(kinds),
        "read_seconds": round(read_seconds, 2),
        "detect_seconds": round(detect_seconds, 3),
        "margins": shares,
        "examples": examples,
    }
    print(f"\n{name}: {row['documents']} documents, {row['kept']} kept; {sum(kinds.values())} duplicates", end="")
    print(f" ({', '.join(f'{n} {why}' for why, n in kinds.items()) or 'none'})")
    print(f"  detector {detect_seconds:.3f} s against {read_seconds:.1f} s reading")
    for label, value in shares.items():
        if value is not None:
            print(f"  {label}: {value[0]:.2f} ({value[1]} / {value[2]})")
    for why, pairs in examples.items():
        for path, kept in pairs:
            print(f"    {why}: {path} -> kept {kept}")
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="*", type=Path)
    parser.add_argument("--show", type=int, default=0, help="list up to N duplicates of each kind")
    parser.add_argument("--out", type=Path, default=BENCH_DIR / "results" / "duplicates.json")
    args = parser.parse_args()
    chosen = [(p.name, p, False) for p in args.folders] or [f for f in FOLDERS if f[1].is_dir()]
    rows = [run(name, root, keep, args.show) for name, root, keep in chosen]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows, indent=2, default=str) + "\n", encoding="utf-8")
    print(f"\nwrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
