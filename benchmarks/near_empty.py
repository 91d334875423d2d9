"""Near-empty chunks of real documentation, per corpus, before and after a change to the chunker.

    python benchmarks/near_empty.py                    # this checkout against --before
    python benchmarks/near_empty.py --before none      # this checkout only
    python benchmarks/near_empty.py --examples 3       # and show a few near-empty chunks of each

A chunk is **near-empty** when its body -- its text less its heading lines (``#`` lines outside code
fences), so less its heading path -- has fewer than 8 words (runs of letters, digits and ``_``).
Each corpus is chunked as ingest chunks it (the packaged model's tokenizer, 250-token chunks, 32
tokens of overlap), by this checkout and by the chunker of ``--before`` (a git revision, read with
``git archive`` and run in a subprocess). Corpora that are not on the machine are left out:

- FastAPI's Markdown docs (shared/bench/docs-fastapi);
- Sphinx HTML builds and their ``_sources`` reST from Debian's python-flask-doc, sphinx-doc,
  python-jinja2-doc and python-click-doc (the site's search, index and module-index pages left out);
- an MkDocs build (Debian's mkdocs-doc), Node.js's API docs as HTML and as their doc Markdown
  (nodejs-doc), and rustdoc pages (rust-doc: std::fs, std::io, std::collections).

Prints one table; writes JSON to benchmarks/results/near_empty.json.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
BENCH_CORPORA = Path(os.environ.get("MCPOWER_BENCH_CORPORA", "/work/shared/bench"))
DOC = Path("/usr/share/doc")
# The last commit before near-empty sections were folded and HTML and Markdown were cleaned.
BEFORE = "a67332c"
MIN_WORDS = 8
FURNITURE = {"genindex", "search", "py-modindex", "404", "all", "index"}  # site pages that are lists of links
SPHINX = [("flask", "python-flask-doc"), ("sphinx", "sphinx-doc"), ("jinja2", "python-jinja2-doc")]
SPHINX += [("click", "python-click-doc")]

_WORD = re.compile(r"\w+")
_HEADING = re.compile(r"#{1,6}(?:[ \t]|$)")
_FENCE = re.compile(r"[ \t]{0,3}(`{3,}|~{3,})")


def corpora() -> list[tuple[str, str, list[Path]]]:
    """(name, format, files) of each corpus found on this machine."""
    out: list[tuple[str, str, list[Path]]] = []

    def add(name: str, fmt: str, root: Path, pattern: str, limit: int = 400) -> None:
        if not root.is_dir():
            return
        files = sorted(
            f
            for f in root.rglob(pattern)
            if f.is_file()
            and not {"_static", "_sources", "_modules"} & set(f.relative_to(root).parts[:-1])
            and f.name.split(".")[0] not in FURNITURE
        )
        if files:
            out.append((name, fmt, files[:limit]))

    add("FastAPI docs", "Markdown", BENCH_CORPORA / "docs-fastapi" / "corpus", "*.md")
    for name, package in SPHINX:
        add(f"{name} (Sphinx)", "HTML", DOC / package / "html", "*.html")
        add(f"{name} _sources", "reST", DOC / package / "html" / "_sources", "*.txt")
    add("MkDocs (mkdocs-doc)", "HTML", DOC / "mkdocs" / "html", "*.html")
    add("Node.js API", "HTML", DOC / "nodejs" / "api", "*.html")
    add("Node.js API", "Markdown", DOC / "nodejs" / "api", "*.md.gz")
    rust = DOC / "rust-doc" / "html" / "std"
    files = [f for part in ("fs", "io", "collections") for f in sorted((rust / part).glob("*.html"))]
    if files:
        out.append(("rustdoc std", "HTML", files))
    return out


def body_words(text: str) -> int:
    """Words of a chunk's text outside its heading lines."""
    n = 0
    fence = ""
    for line in text.split("\n"):
        m = _FENCE.match(line)
        if m and (not fence or m.group(1).startswith(fence)):
            fence = "" if fence else m.group(1)
            continue
        if not fence and _HEADING.match(line):
            continue
        n += len(_WORD.findall(line))
    return n


def measure(examples: int) -> dict[str, Any]:
    """Chunk every corpus with the mcpower that this interpreter imports."""
    from tokenizers import Tokenizer

    import mcpower
    from mcpower.chunking import UnreadableError, chunk_document
    from mcpower.embedding.model import resolve_model

    tokenizer = Tokenizer.from_file(str(resolve_model().path / "tokenizer.json"))
    tokenizer.no_truncation()
    tokenizer.no_padding()

    def count(texts: Any) -> list[int]:
        return [len(e.ids) for e in tokenizer.encode_batch_fast(list(texts), add_special_tokens=False)]

    rows: dict[str, Any] = {}
    for name, fmt, files in corpora():
        chunks = empty = 0
        shown: list[str] = []
        for f in files:
            data = gzip.decompress(f.read_bytes()) if f.suffix == ".gz" else f.read_bytes()
            suffix = Path(f.stem).suffix if f.suffix == ".gz" else f.suffix
            try:
                doc = chunk_document(data, suffix.lower(), f.name, count, 250, 32)
            except UnreadableError:
                continue
            for c in doc.chunks:
                chunks += 1
                if body_words(c.text) < MIN_WORDS:
                    empty += 1
                    if len(shown) < examples:
                        shown.append(f"{f.name} [{c.heading}] {' '.join(c.text.split())[:160]}")
        rows[f"{name} ({fmt})"] = {"files": len(files), "chunks": chunks, "near_empty": empty, "examples": shown}
    return {"mcpower": str(Path(mcpower.__file__).parent), "corpora": rows}


def measure_revision(revision: str, examples: int) -> dict[str, Any]:
    """:func:`measure` with the mcpower package of a git revision, in a subprocess."""
    with tempfile.TemporaryDirectory(prefix="mcpower-near-empty-") as tmp:
        archive = subprocess.run(
            ["git", "-C", str(REPO), "archive", "--format=tar", revision, "mcpower"], check=True, capture_output=True
        ).stdout
        tar_path = Path(tmp) / "tree.tar"
        tar_path.write_bytes(archive)
        with tarfile.open(tar_path) as tar:
            tar.extractall(tmp, filter="data")
        env = {**os.environ, "PYTHONPATH": tmp}
        out = subprocess.run(
            [sys.executable, __file__, "--measure-only", "--examples", str(examples)],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    result: dict[str, Any] = json.loads(out)
    if not result["mcpower"].startswith(tmp):
        raise RuntimeError(f"the subprocess imported {result['mcpower']}, not revision {revision}")
    return result


def share(row: dict[str, Any] | None) -> str:
    if not row:
        return "–"
    return f"{row['near_empty']:,} / {row['chunks']:,} ({100 * row['near_empty'] / max(row['chunks'], 1):.1f}%)"


def lines(before: dict[str, Any] | None, after: dict[str, Any], before_name: str) -> Iterator[str]:
    yield f"| corpus | files | near-empty / chunks, {before_name} | near-empty / chunks, this checkout |"
    yield "| --- | ---: | ---: | ---: |"
    for name, row in after["corpora"].items():
        old = before["corpora"].get(name) if before else None
        yield f"| {name} | {row['files']:,} | {share(old)} | {share(row)} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", default=BEFORE, help="git revision to compare with, or 'none'")
    parser.add_argument("--examples", type=int, default=0, help="near-empty chunks to show per corpus")
    parser.add_argument("--measure-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure_only:
        print(json.dumps(measure(args.examples)))
        return
    t = time.perf_counter()
    before = None if args.before == "none" else measure_revision(args.before, args.examples)
    after = measure(args.examples)
    for line in lines(before, after, args.before):
        print(line)
    if args.examples:
        for label, result in (("before", before), ("after", after)):
            for name, row in (result or {"corpora": {}})["corpora"].items():
                for example in row["examples"]:
                    print(f"{label} {name}: {example}")
    print(f"({time.perf_counter() - t:.0f} s)", file=sys.stderr)
    results = BENCH_DIR / "results"
    results.mkdir(exist_ok=True)
    (results / "near_empty.json").write_text(json.dumps({"before": before, "after": after}, indent=1) + "\n")


if __name__ == "__main__":
    main()
