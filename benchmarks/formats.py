"""Document formats: hostile files, and what the worker process costs.

    python benchmarks/formats.py                   # both parts
    python benchmarks/formats.py --only hostile    # or: --only worker

**hostile**: for each hostile file of the issue's list (encrypted, damaged and bomb PDFs, a zip-bomb
.docx, a 50 MB single-line HTML page, 100,000 nested divs, a notebook with a 100 MB output, reST
that makes docutils recurse ...), a folder holding it and one good Markdown file is ingested by
`mcpower ingest` in a subprocess, with ``--max-file-mb 200`` so that size limits do not stop the
file before its parser sees it. Reports the outcome (skip reason or note), the wall time, the
ingest process's peak RSS and the worker's, and whether the good file was ingested.

**worker**: the 155 FastAPI pages rendered to HTML (markdown-it-py), ingested with the worker
process (the default) and with the HTML parser run in the ingest process instead, alternating,
median of ``--rounds``: the worker's cost on ingest time.

Both use the tests' fake embedder, so the figures are the reading, not the model. Prints tables;
writes JSON to benchmarks/results/formats.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
TESTS_DIR = BENCH_DIR.parent / "tests"
sys.path.insert(0, str(TESTS_DIR))

import format_fixtures as ff  # noqa: E402
from server_fixtures import subprocess_env, write_launcher  # noqa: E402

FASTAPI = Path(os.environ.get("MCPOWER_BENCH_CORPORA", "/work/shared/bench")) / "docs-fastapi" / "corpus"
GOOD = "# Good\n\nThe zephyrine survives its hostile neighbours.\n"

# Runs the launcher in this interpreter and reports, on stderr's last line, the peak RSS (VmHWM) of
# this process and of its children (the worker), sampled every 20 ms: ru_maxrss would not do, Linux
# carries it over fork and exec from the benchmark process.
WRAPPER = """
import json, os, runpy, sys, threading, time
if os.environ.get("BENCH_IN_PROCESS"):
    import mcpower.chunking.worker as worker
    worker.ISOLATED = frozenset()

def hwm_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        return 0

peak = {"children": 0}

def watch():
    while True:
        for task in os.listdir("/proc/self/task"):
            try:
                kids = open(f"/proc/self/task/{task}/children").read().split()
            except OSError:
                continue
            for kid in kids:
                peak["children"] = max(peak["children"], hwm_kib(kid))
        time.sleep(0.02)

threading.Thread(target=watch, daemon=True).start()
launcher, sys.argv = sys.argv[1], [sys.argv[1], *sys.argv[2:]]
try:
    runpy.run_path(launcher, run_name="__main__")
except SystemExit as e:
    code = e.code
else:
    code = 0
print("RSS " + json.dumps([hwm_kib("self"), peak["children"], code]), file=sys.stderr)
"""


def flate_bomb_pdf(inflated: int) -> bytes:
    """A one-page PDF whose content stream inflates to ``inflated`` bytes of text operators."""
    z = zlib.compressobj(9)
    block = b"BT /F1 12 Tf 72 712 Td (bomb) Tj ET\n" * 29_000  # ~1 MiB
    stream = b"".join(z.compress(block) for _ in range(inflated >> 20)) + z.flush()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for n, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % n + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def nested_lists(levels: int) -> str:
    return "T\n=\n\n" + "".join("  " * i + f"- level {i}\n\n" for i in range(levels))


def hostile_cases() -> dict[str, tuple[str, Any]]:
    """name -> (file name, how to make its bytes)."""
    return {
        "encrypted PDF (AES-256, user password)": (
            "encrypted.pdf",
            lambda: ff.encrypted_pdf(ff.pdf([["secret"]]), "pw"),
        ),
        "truncated PDF": ("truncated.pdf", lambda: ff.pdf([["some text"]] * 20)[:600]),
        "scanned PDF (no text layer)": ("scanned.pdf", lambda: ff.pdf([[], [], []])),
        "PDF flate bomb (1 GiB)": ("bomb.pdf", lambda: flate_bomb_pdf(1 << 30)),
        "zip-bomb .docx (1 GiB document.xml)": ("bomb.docx", lambda: ff.docx_bomb(1024)),
        "billion-laughs .docx": (
            "laughs.docx",
            lambda: ff.zipped(
                {
                    "word/document.xml": '<!DOCTYPE d [<!ENTITY a "aaaaaaaaaa">'
                    + "".join(f'<!ENTITY {chr(98 + i)} "{("&" + chr(97 + i) + ";") * 10}">' for i in range(9))
                    + "]><d>&j;</d>"
                }
            ),
        ),
        "HTML, 50 MB on one line": (
            "single-line.html",
            lambda: b"<html><body><p>" + b"zephyrine word " * 3_500_000 + b"</p></body></html>",
        ),
        "HTML, 100,000 nested divs": (
            "deep.html",
            lambda: b"<p>Shallow text.</p>" + b"<div>" * 100_000 + b"deep" + b"</div>" * 100_000,
        ),
        "notebook with a 100 MB output": (
            "output.ipynb",
            lambda: ff.notebook([("markdown", "# Big output"), ("code", "print(x)")], outputs=["y" * 100_000_000]),
        ),
        "reST, 2,000 nested list levels (4 MB)": ("lists-2000.rst", lambda: nested_lists(2000).encode()),
        "reST, 190 nested list levels (under the indent check)": ("lists-190.rst", lambda: nested_lists(190).encode()),
        "reST, 2,000 bullets on one line": ("bullets.rst", lambda: ("T\n=\n\n" + "- " * 2000 + "x\n").encode()),
    }


def run_ingest(launcher: Path, folder: Path, datasets: Path, ds_id: str, in_process: bool = False) -> dict[str, Any]:
    argv = [sys.executable, "-c", WRAPPER, str(launcher), "ingest", str(folder), "--id", ds_id]
    argv += ["--datasets-dir", str(datasets), "--json", "--quiet", "--max-file-mb", "200"]
    env = subprocess_env()
    if in_process:
        env["BENCH_IN_PROCESS"] = "1"
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    wall = time.perf_counter() - started
    rss_line = [line for line in done.stderr.splitlines() if line.startswith("RSS ")][-1]
    self_kib, children_kib, code = json.loads(rss_line[4:])
    report = json.loads(done.stdout) if code == 0 and done.stdout.strip() else {}
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error")]
    return {
        "wall_s": round(wall, 2),
        "ingest_rss_mb": round(self_kib / 1024),
        "worker_rss_mb": round(children_kib / 1024),
        "exit": code,
        "report": report,
        "error": errors[0] if errors else None,
    }


def hostile(root: Path, launcher: Path) -> list[dict[str, Any]]:
    rows = []
    for name, (file_name, make) in hostile_cases().items():
        folder = root / "hostile" / file_name.replace(".", "-")
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "good.md").write_text(GOOD)
        (folder / file_name).write_bytes(make())
        size = (folder / file_name).stat().st_size
        print(f"{name} ({size / 1e6:.1f} MB) ...", file=sys.stderr, flush=True)
        out = run_ingest(launcher, folder, root / "datasets", "hostile")
        report = out.pop("report")
        skipped = {s["path"]: s["reason"] for s in report.get("skipped", [])}
        notes = {n["path"]: n["note"] for n in report.get("notes", [])}
        outcome = (
            f"skipped: {skipped[file_name]}"
            if file_name in skipped
            else f"read, note: {notes[file_name]}"
            if file_name in notes
            else "read"
        )
        rows.append(
            {"case": name, "file_mb": round(size / 1e6, 1), "outcome": outcome, "documents": report.get("documents")}
            | out
        )
        shutil.rmtree(folder)
    return rows


def worker_cost(root: Path, launcher: Path, rounds: int) -> dict[str, Any]:
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark").enable("table")
    folder = root / "html"
    for page in sorted(FASTAPI.rglob("*.md")):
        target = folder / page.relative_to(FASTAPI).with_suffix(".html")
        target.parent.mkdir(parents=True, exist_ok=True)
        body = md.render(page.read_text(encoding="utf-8"))
        target.write_text(f"<html><head><title>{page.stem}</title></head><body><main>{body}</main></body></html>")
    files = len(list(folder.rglob("*.html")))
    times: dict[str, list[float]] = {"worker": [], "in-process": []}
    for n in range(rounds):
        order = ["worker", "in-process"] if n % 2 == 0 else ["in-process", "worker"]
        for mode in order:
            print(f"round {n + 1}: {files} HTML pages, {mode} ...", file=sys.stderr, flush=True)
            out = run_ingest(launcher, folder, root / "datasets", f"html-{n}-{mode}", in_process=mode == "in-process")
            times[mode].append(out["report"]["seconds"])
    worker, local = statistics.median(times["worker"]), statistics.median(times["in-process"])
    return {
        "files": files,
        "rounds": rounds,
        "seconds": times,
        "median_worker_s": round(worker, 2),
        "median_in_process_s": round(local, 2),
        "ratio": round(worker / local, 3),
        "per_file_ms": round((worker - local) / files * 1000, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=("hostile", "worker"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json-out", type=Path, default=BENCH_DIR / "results" / "formats.json")
    args = parser.parse_args()
    result: dict[str, Any] = {"load_before": os.getloadavg()}
    with tempfile.TemporaryDirectory(prefix="mcpower-formats-") as tmp:
        root = Path(tmp)
        launcher = write_launcher(root)
        if args.only in (None, "hostile"):
            result["hostile"] = hostile(root, launcher)
        if args.only in (None, "worker"):
            result["worker"] = worker_cost(root, launcher, args.rounds)
    result["load_after"] = os.getloadavg()
    for row in result.get("hostile", []):
        print(
            f"| {row['case']} | {row['file_mb']} MB | {row['outcome'][:110]} | {row['wall_s']} s | "
            f"{row['ingest_rss_mb']} MB | {row['worker_rss_mb']} MB | {'yes' if row['documents'] else 'NO'} |"
        )
    if "worker" in result:
        w = result["worker"]
        print(
            f"worker: {w['files']} HTML pages, median {w['median_worker_s']} s with the worker, "
            f"{w['median_in_process_s']} s in process (x{w['ratio']}, {w['per_file_ms']} ms a file)"
        )
    print(f"load average before {result['load_before']}, after {result['load_after']}")
    args.json_out.parent.mkdir(parents=True, exist_ok=True)
    args.json_out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.json_out}", file=sys.stderr)


if __name__ == "__main__":
    main()
